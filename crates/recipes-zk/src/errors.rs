//! The client library's errors and session events, in the library's terms.

use recipes_core::Error;

use crate::zk;

/// Whether a result came from a server (an answer), as opposed to a lost connection.
pub(crate) fn is_answer<T>(r: &std::result::Result<T, zk::Error>) -> bool {
    use zk::Error as Z;
    matches!(
        r,
        Ok(_)
            | Err(Z::NoNode
                | Z::NodeExists
                | Z::NotEmpty
                | Z::BadVersion
                | Z::NoChildrenForEphemerals
                | Z::NoAuth
                | Z::InvalidAcl)
    )
}

/// Maps an error of a request on `path`. `closed`: the application closed the backend; `disconnected`: the client
/// is disconnected now (then any other error is connection loss).
pub(crate) fn map_err(e: zk::Error, path: &str, closed: bool, disconnected: bool) -> Error {
    use zk::Error as Z;
    match e {
        Z::NoNode => Error::NoNode(path.to_owned()),
        Z::NodeExists => Error::NodeExists(path.to_owned()),
        Z::NotEmpty => Error::NotEmpty(path.to_owned()),
        Z::SessionExpired => Error::SessionExpired,
        Z::NoChildrenForEphemerals => Error::Refused(format!("{path}: ephemeral nodes cannot have children")),
        Z::BadArguments(why) => Error::Refused(format!("{path}: {why}")),
        Z::NoAuth => Error::NotAuthorized(path.to_owned()),
        Z::ClientClosed | Z::AuthFailed if closed => Error::Closed,
        Z::ClientClosed => Error::SessionExpired,
        // A connection timeout reaches calls as a custom error or a timeout.
        Z::ConnectionLoss | Z::Timeout | Z::Custom(_) | Z::Throttled => Error::ConnectionLoss,
        _ if disconnected => Error::ConnectionLoss,
        other => Error::Backend(other.to_string()),
    }
}

/// What a session event means to a watch of that session: it ended (expired or closed), or the connection blinked.
pub(crate) fn session_event_error(state: zk::SessionState, closed: bool) -> Error {
    match state {
        zk::SessionState::Expired => Error::SessionExpired,
        zk::SessionState::Closed | zk::SessionState::AuthFailed if closed => Error::Closed,
        zk::SessionState::Closed | zk::SessionState::AuthFailed => Error::SessionExpired,
        _ => Error::ConnectionLoss,
    }
}
