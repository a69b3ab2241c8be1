//! Between zookeeper-client and the backend layer: create modes, what a create made, stats, and a request's answer
//! (recorded for the lease, its error mapped).

use recipes_core::backend::{CreateMode, Created, SessionId, Stat};
use recipes_core::{Error, Result};

use crate::errors::map_err;
use crate::lease::Stamp;
use crate::session::{Evidence, Inner};
use crate::zk;

/// The ZooKeeper create mode of a backend-layer mode.
pub(crate) fn zk_mode(mode: CreateMode) -> Result<zk::CreateMode> {
    Ok(match mode {
        CreateMode::Persistent => zk::CreateMode::Persistent,
        CreateMode::Container => zk::CreateMode::Container,
        CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
        CreateMode::EphemeralSequential => zk::CreateMode::EphemeralSequential,
        // CreateMode is non-exhaustive: a mode added later must be mapped here, never silently made persistent.
        #[allow(unreachable_patterns)]
        other => {
            return Err(Error::InvalidArgument(format!(
                "create mode {other:?} is not supported by ZooKeeper"
            )))
        }
    })
}

/// What a create made, as the backend layer says it.
pub(crate) fn created(path: &str, mode: CreateMode, stat: zk::Stat, seq: zk::CreateSequence) -> Created {
    let path = if mode == CreateMode::EphemeralSequential {
        // Sized once: `format!` grew the string by doubling as the suffix's digits came, and a waiter keeps this path
        // (about 80 bytes of capacity unused per waiter). The suffix is 10 characters (`{:010}`, whose width counts
        // the sign of a wrapped negative sequence), or 19 past `i32::MAX`.
        let mut full = String::with_capacity(path.len() + 20);
        full.push_str(path);
        // Writing into a String cannot fail.
        let _ = std::fmt::Write::write_fmt(&mut full, format_args!("{seq}"));
        full
    } else {
        path.to_owned()
    };
    Created {
        path,
        czxid: stat.czxid,
    }
}

/// A node's stat, as the backend layer says it.
pub(crate) fn stat(s: &zk::Stat) -> Stat {
    Stat::new(s.czxid, s.ephemeral_owner, s.ctime)
}

/// Records what the answer to a request of `session` sent at `sent` proves for the lease, and maps its error.
pub(crate) fn settle<T>(
    inner: &Inner,
    session: SessionId,
    sent: Stamp,
    evidence: Evidence,
    r: std::result::Result<T, zk::Error>,
    path: &str,
    client: &zk::Client,
) -> Result<T> {
    inner.record(session, sent, evidence, &r);
    r.map_err(|e| {
        map_err(
            e,
            path,
            inner.is_closed(),
            client.state() == zk::SessionState::Disconnected,
        )
    })
}
