//! The client's connect, within the connect timeout: attempts that overlap rather than replace one another.
//!
//! With a user, a connect authenticates (a request to a member); without, it only sets the channel up. An
//! authentication that was never sent (a member down), or that etcd could not answer (an election), is asked again
//! within the connect timeout, as the grant is (found by review: with a user, half the connects with one endpoint of
//! two down failed at once).
//!
//! An attempt can also hang on a member that takes the connection and never answers (a process that stopped, a port
//! taken by another program): when it has not answered within half of what is left of the timeout (at least a
//! second), another attempt starts beside it, which may reach another member (found on a slow machine: one connect in
//! two with one of two endpoints dead failed, its only attempt stuck there). The first attempt is not dropped: a member
//! that is only slow to take a new client (its TLS handshake and its authentication, on a loaded machine) still
//! answers it, and the first attempt to answer wins (found by review, helper-68: when each attempt was dropped at its
//! half, such a member was never connected to, however long the timeout).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use futures::stream::{FuturesUnordered, StreamExt};
use recipes_core::{Error, Result};
use tokio::time::Instant;

/// Connects to `urls` by `deadline`, the end of the connect timeout `within`. `unreachable` words the error when no
/// member answered.
pub(super) async fn client(
    urls: &[String],
    connect: &ConnectOptions,
    has_user: bool,
    (deadline, within): (Instant, Duration),
    unreachable: impl Fn(String) -> Error,
) -> Result<Client> {
    let mut running = FuturesUnordered::new();
    // When the next attempt starts: at once for the first.
    let mut next = Some(Instant::now());
    // Why the last attempt failed, for the error when the timeout ends first: an untrusted certificate, retried
    // until the deadline, said only that no member answered when the deadline came before the last attempt's
    // failure (a clean-clone run of scripts/test failed so, twenty-sixth session).
    let mut last: Option<String> = None;
    loop {
        let now = Instant::now();
        // Each starts when the one before has had half of what was left (at least a second), or a pause after a
        // failure: a handful per connect (five in the default 10 s, as many as when each attempt was dropped at its
        // half), one more each time the timeout doubles.
        if next.is_some_and(|at| at <= now) {
            running.push(Client::connect(urls.to_vec(), Some(connect.clone())));
            let share = (deadline.saturating_duration_since(now) / 2).max(Duration::from_secs(1));
            next = Some(now + share).filter(|&at| at < deadline);
        }
        tokio::select! {
            Some(answer) = running.next() => {
                let e = match answer {
                    Ok(client) => return Ok(client),
                    Err(e) => e,
                };
                if has_user && crate::ops::refused_credentials(&e) {
                    return Err(Error::AuthenticationFailed {
                        servers: urls.join(","),
                        why: crate::ops::message(&e),
                    });
                }
                let (never_sent, why) = (crate::ops::never_sent(&e), crate::ops::message(&e));
                let again = never_sent || matches!(crate::ops::error(e), Error::ConnectionLoss);
                if !again {
                    return Err(unreachable(why));
                }
                // Asked again after a pause (sooner when nothing was sent), unless one is due sooner.
                let pause = Duration::from_millis(if never_sent { 20 } else { 100 });
                let again_at = Some(Instant::now() + pause).filter(|&at| at < deadline);
                next = match (next, again_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if running.is_empty() && next.is_none() {
                    return Err(unreachable(why));
                }
                last = Some(why);
            }
            () = tokio::time::sleep_until(next.unwrap_or(deadline)), if next.is_some() => {}
            () = tokio::time::sleep_until(deadline) => {
                let why = match last {
                    Some(why) => format!("no member answered within {within:?}; the last attempt: {why}"),
                    None => format!("no member answered within {within:?}"),
                };
                return Err(unreachable(why));
            }
        }
    }
}
