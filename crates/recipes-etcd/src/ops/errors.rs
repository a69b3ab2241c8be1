//! What etcd's errors say: the trait's error for each, and whether a request was refused, never sent, or may be
//! sent again.

use recipes_core::Error;

/// The text of an etcd error: a status's message and, for a transport failure, its cause (a refused connection, a
/// TLS handshake that failed).
pub(crate) fn message(e: &etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let mut m = s.message().to_owned();
            let mut source = std::error::Error::source(s);
            while let Some(cause) = source {
                // Each layer tends to repeat the one below it: only what is new.
                let text = cause.to_string();
                if !m.contains(&text) {
                    m = format!("{m}: {text}");
                }
                source = cause.source();
            }
            m
        }
        other => other.to_string(),
    }
}

/// Whether etcd refused a user's credentials (a wrong password, an unknown user, authentication not enabled), or
/// a request without any (authentication enabled after the connect).
pub(crate) fn refused_credentials(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if credentials_refused_in(s.message()))
}

/// Whether etcd refused a request for this client's credentials or roles: definite, and asked again only slowly.
pub(crate) fn refused(e: &etcd_client::Error) -> bool {
    refused_credentials(e)
        || matches!(e, etcd_client::Error::GRpcStatus(s) if s.code() == tonic::Code::PermissionDenied)
}

/// Whether etcd's message (a status's, or a watch's cancel reason) refuses the client's credentials.
pub(crate) fn credentials_refused_in(message: &str) -> bool {
    [
        "authentication failed",
        "authentication is not enabled",
        "user name is empty",
    ]
    .iter()
    .any(|m| message.contains(m))
}

/// Whether a request failed before it was sent: no connection to the member the channel chose could be made (one
/// member of several is down). Such a request was never applied, so it may be sent again at once. Only a status the
/// client made itself counts (it carries the transport error as its source): a proxy's "upstream connect error",
/// sent back after the request went through it, does not (found by review).
pub(crate) fn never_sent(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::Unavailable
                && std::error::Error::source(s).is_some()
                && s.message().contains("connect error")
        }
        _ => false,
    }
}

/// Whether etcd refused a request for its user's token: expired or unknown (`invalid auth token`), or issued before
/// a change of users or roles (a JWT's `revision of auth store is old`). etcd checks the token before it proposes a
/// request, or refuses the whole request when it applies it: either way nothing was applied.
pub(crate) fn token_stale(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if s.message().contains("invalid auth token") || s.message().contains("revision of auth store is old"))
}

/// Whether etcd answered that the lease is gone.
pub(crate) fn lease_gone(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == tonic::Code::NotFound && s.message().contains("lease not found")
        }
        // A keep-alive answered with TTL 0 when its stream opens (found by review: this waited for our clock).
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
    }
}

/// An overloaded member's refusal (`too many requests`: its applied index far behind its committed one), made before
/// the request was proposed (nothing of it applied), and transient: a connection loss, tried again as ZooKeeper's
/// throttling is, with nothing to seal. etcd declares it `ResourceExhausted` but sends it as `Unknown` (its server
/// maps it to an error that is no gRPC status: found by review, helper-132, on etcd 3.4.23); either is taken, by
/// etcd's own message, which it sends before proposing the request (`processInternalRaftRequestOnce`).
pub(crate) fn overloaded(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(s.code(), tonic::Code::Unknown | tonic::Code::ResourceExhausted)
            && s.message() == "etcdserver: too many requests")
}

/// The trait's error for etcd's. Only etcd's own refusals are definite (the request was not applied): those of its
/// status codes that etcd sends, with its own message; but for an overloaded member's ([`overloaded`]), a connection
/// loss, as it is transient. Everything else (a transport failure, a reset stream, a reply that could not be read)
/// leaves the outcome unknown: connection loss (found by review: tonic reports a reset HTTP/2 stream as `Internal`,
/// possibly after etcd applied the request). A lease etcd no longer knows is the session's end.
pub(crate) fn error(e: etcd_client::Error) -> Error {
    if overloaded(&e) {
        return Error::ConnectionLoss;
    }
    if lease_gone(&e) {
        return Error::SessionExpired;
    }
    // Credentials refused after the connect (a password changed, a user deleted; a token that could not be renewed):
    // definite, and the end of the session (the sender ends it, found by review: keep-alives need no token, so the
    // lease, and every key on it, lived on while no request could delete them).
    if refused_credentials(&e) {
        return Error::AuthenticationFailed {
            servers: "etcd".to_owned(),
            why: message(&e),
        };
    }
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let etcds = s.message().starts_with("etcdserver:") || s.message().starts_with("mvcc:");
            match s.code() {
                tonic::Code::NotFound if s.message().contains("lease not found") => Error::SessionExpired,
                tonic::Code::NotFound if etcds => Error::Backend(format!("etcd: {}", s.message())),
                tonic::Code::PermissionDenied if etcds => Error::NotAuthorized(format!(
                    "a key of this request (etcd: {}; the user's roles must grant readwrite on the lock's prefix and \
                     on /__recipes/sessions/)",
                    s.message()
                )),
                tonic::Code::InvalidArgument
                | tonic::Code::FailedPrecondition
                | tonic::Code::ResourceExhausted
                | tonic::Code::PermissionDenied
                | tonic::Code::Unauthenticated
                | tonic::Code::OutOfRange
                    if etcds =>
                {
                    Error::Backend(format!("etcd: {}", s.message()))
                }
                _ => Error::ConnectionLoss,
            }
        }
        etcd_client::Error::InvalidArgs(m) => Error::InvalidArgument(format!("etcd: {m}")),
        _ => Error::ConnectionLoss,
    }
}

#[cfg(test)]
mod tests;
