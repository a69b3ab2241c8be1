//! Opening a session from [`ZkOptions`]: which servers can be reached at all, the session itself (TLS, SASL), the
//! chroot, and an error that says, server by server, what went wrong.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use recipes_core::{Error, Result};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::debug;

use crate::options::ZkOptions;
#[cfg(feature = "tls")]
use crate::tls::ZkTls;
use crate::zk;

/// How many SASL handshakes a connect tries before it reports [`Error::AuthenticationFailed`] (see `open`).
const SASL_TRIES: u32 = 3;

impl ZkOptions {
    fn connector(&self) -> zk::Connector {
        let mut connector = zk::Client::connector().with_session_timeout(self.session_timeout);
        if let Some((scheme, auth)) = &self.auth {
            connector = connector.with_auth(scheme, auth);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            connector = connector.with_tls(tls.options.clone());
        }
        #[cfg(feature = "sasl")]
        if let Some((user, password)) = &self.sasl {
            connector = connector.with_sasl(zk::SaslOptions::digest_md5(user.clone(), password.clone()));
        }
        connector
    }

    /// Opens a session on `cluster` (servers of the connect string), with TLS when it is set.
    ///
    /// A refused SASL login is tried again, [`SASL_TRIES`] times in all (within the caller's connect timeout): a CI
    /// run once saw the server refuse a correct DIGEST-MD5 login under load, which a new handshake (a new nonce)
    /// passes. A wrong password is refused every time, so the tries cost it only their round trips.
    async fn open(&self, cluster: &str) -> std::result::Result<zk::Client, zk::Error> {
        let mut tries = 1;
        loop {
            match self.open_once(cluster).await {
                Err(zk::Error::AuthFailed) if self.sasl_user().is_some() && tries < SASL_TRIES => tries += 1,
                r => return r,
            }
        }
    }

    async fn open_once(&self, cluster: &str) -> std::result::Result<zk::Client, zk::Error> {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return self.connector().secure_connect(cluster).await;
        }
        self.connector().connect(cluster).await
    }

    /// The servers of the connect string, and its chroot (empty when none).
    fn hosts_and_chroot(&self) -> (Vec<&str>, &str) {
        let (hosts, chroot) = match self.servers.find('/') {
            Some(i) => self.servers.split_at(i),
            None => (self.servers.as_str(), ""),
        };
        let hosts = hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).collect();
        (hosts, chroot.trim_end_matches('/'))
    }

    /// Resolves when every server in `up` has refused a TLS handshake of our own, with why; pending otherwise (and
    /// without TLS). It runs beside the session's opening, which it does not delay: a server that does not answer
    /// holds up only this, and the client crate, which retries a refused handshake until the connect timeout and says
    /// nothing, is then interrupted with the reason.
    async fn refused(&self, up: &[&str]) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let probes = up.iter().map(|host| async move {
                let addrs = reach(host, self.connect_timeout).await?;
                self.tls_probe(tls, host, addrs, None, self.connect_timeout).await
            });
            let results = futures::future::join_all(probes).await;
            if results.iter().all(std::result::Result::is_err) {
                return results.into_iter().filter_map(std::result::Result::err).collect();
            }
        }
        let _ = up;
        std::future::pending().await
    }

    /// What the connect string and credentials can be told to be wrong before any connection: a server name TLS
    /// cannot verify (the client crate would panic on it), an empty SASL user.
    fn check(&self, hosts: &[&str]) -> Result<()> {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            for host in hosts {
                crate::tls::server_name(host).map_err(|why| Error::InvalidArgument(format!("TLS: {why}")))?;
            }
        }
        let _ = hosts;
        if self.sasl_user().is_some_and(str::is_empty) {
            return Err(Error::InvalidArgument("SASL: the user name is empty".into()));
        }
        Ok(())
    }

    #[cfg(feature = "tls")]
    async fn tls_probe(
        &self,
        tls: &ZkTls,
        host: &str,
        addrs: Vec<SocketAddr>,
        linger: Option<Duration>,
        limit: Duration,
    ) -> std::result::Result<(), String> {
        let (tls, name) = (tls.clone(), host.to_owned());
        let probe = tokio::task::spawn_blocking(move || tls.probe(&name, &addrs, limit, linger));
        match tokio::time::timeout(limit + linger.unwrap_or_default(), probe).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(format!("{host}: the TLS handshake could not be tried: {e}")),
            Err(_) => Err(format!("{host}: the TLS handshake did not finish within {limit:?}")),
        }
    }

    /// Why no session was opened on `up` (servers that accepted a TCP connection), when TLS can say: each server's
    /// handshake, waiting a moment after it for a refusal of the client certificate (bounded by two seconds, or the
    /// connect timeout when shorter).
    async fn diagnose(&self, up: &[&str]) -> Vec<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            let limit = self.connect_timeout.min(Duration::from_secs(2));
            let linger = Some(limit / 2);
            let probes = up.iter().map(|host| async move {
                let addrs = reach(host, limit).await?;
                self.tls_probe(tls, host, addrs, linger, limit / 2).await
            });
            return futures::future::join_all(probes)
                .await
                .into_iter()
                .filter_map(std::result::Result::err)
                .collect();
        }
        let _ = up;
        Vec::new()
    }

    fn unreachable(&self, why: String) -> Error {
        Error::Unreachable {
            servers: self.servers.clone(),
            why,
        }
    }

    /// Connects a new session: first finds which servers can be reached at all (a refused or unresolvable server fails
    /// at once, and the error says which server and why), then opens the session, then makes the chroot exist (as
    /// Curator's namespace does).
    ///
    /// # Notable errors
    /// [`Error::InvalidArgument`] for an empty connect string, or a chroot that does not exist and cannot be made;
    /// [`Error::Unreachable`] naming each server and what happened to it.
    pub(crate) async fn connect(&self) -> Result<zk::Client> {
        let (hosts, chroot) = self.hosts_and_chroot();
        if hosts.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "the connect string {:?} names no server (host:port[,host:port…][/chroot])",
                self.servers
            )));
        }
        if self.acl.needs_auth() && !self.has_identity() {
            return Err(Error::InvalidArgument(format!(
                "the ACL {} names the creator's identity, and this client has none: add digest_auth (zklock: --auth), \
                 a SASL user or a TLS client certificate",
                self.acl
            )));
        }
        self.check(&hosts)?;
        let started = Instant::now();
        let reached = futures::future::join_all(hosts.iter().map(|h| reach(h, self.connect_timeout))).await;
        let (up, down): (Vec<_>, Vec<_>) = hosts.iter().zip(reached).partition(|(_, r)| r.is_ok());
        let down: Vec<String> = down.into_iter().filter_map(|(_, r)| r.err()).collect();
        if up.is_empty() {
            return Err(self.unreachable(down.join("; ")));
        }
        let up: Vec<&str> = up.into_iter().map(|(h, _)| *h).collect();
        let left = self.connect_timeout.saturating_sub(started.elapsed());
        // Every server, those down now included: the client moves to them when the others go.
        let cluster = hosts.join(",");
        let opened = async {
            tokio::select! {
                biased;
                r = self.open(&cluster) => Ok(r),
                why = self.refused(&up) => Err(why),
            }
        };
        let client = match tokio::time::timeout(left, opened).await {
            Ok(Err(mut why)) => {
                why.extend(down);
                return Err(self.unreachable(why.join("; ")));
            }
            Ok(Ok(r)) => Ok(r),
            Err(_) => Err(()),
        };
        let client = match client {
            Ok(Ok(client)) => client,
            Ok(Err(zk::Error::AuthFailed)) => {
                return Err(Error::AuthenticationFailed {
                    servers: self.servers.clone(),
                    why: match self.sasl_user() {
                        Some(user) => {
                            format!("SASL authentication as {user:?} failed (wrong password, or no such user)")
                        }
                        None => "authentication failed".to_owned(),
                    },
                })
            }
            Ok(Err(e)) => return Err(self.unreachable(format!("{}: {e}", up.join(",")))),
            Err(_) => {
                let diagnosed = self.diagnose(&up).await;
                if !diagnosed.is_empty() {
                    let mut why = diagnosed;
                    why.extend(down);
                    return Err(self.unreachable(why.join("; ")));
                }
                let mut why = vec![format!(
                    "{} accepted the connection but no ZooKeeper session was opened within {:?} ({})",
                    up.join(", "),
                    self.connect_timeout,
                    if self.uses_tls() {
                        "not a secure client port, a certificate this client does not trust or that does not name \
                         the host, a client certificate the server refused, or a server without quorum"
                    } else {
                        "not a ZooKeeper client port, a TLS port (see ZkOptions::tls, zklock --tls-ca), or a server \
                         without quorum"
                    }
                )];
                why.extend(down);
                return Err(self.unreachable(why.join("; ")));
            }
        };
        if chroot.is_empty() {
            return Ok(client);
        }
        let acl = self.acl.entries();
        let dir = zk::CreateMode::Persistent.with_acls(zk::Acls::new(&acl));
        if let Err(e) = client.mkdir(chroot, &dir).await {
            return Err(Error::InvalidArgument(format!(
                "the chroot {chroot} of the connect string does not exist and could not be made: {e}"
            )));
        }
        client.chroot(chroot.to_owned()).map_err(|_| {
            Error::InvalidArgument(format!(
                "the chroot {chroot:?} of the connect string is not a valid path"
            ))
        })
    }

    /// Asks every server of the connect string which session timeout it grants this client, each with a short-lived
    /// session of its own (a reconnection renegotiates the timeout, and the client library does not say what it got).
    /// The answers come as they arrive: a server that does not answer (within the connect timeout) holds up no other.
    pub(crate) fn timeout_probes(&self) -> FuturesUnordered<impl Future<Output = Option<Duration>> + '_> {
        let (hosts, _) = self.hosts_and_chroot();
        hosts
            .into_iter()
            .map(|host| async move {
                // A refused or unresolvable server answers no probe: say so at once (the client library would retry
                // it until the connect timeout).
                if let Err(why) = reach(host, self.connect_timeout).await {
                    debug!(why, "no session timeout from this server");
                    return None;
                }
                match tokio::time::timeout(self.connect_timeout, self.open(host)).await {
                    Ok(Ok(client)) => Some(client.session_timeout()),
                    other => {
                        debug!(host, ?other, "no session timeout from this server");
                        None
                    }
                }
                // The probe's client is dropped here, which closes its session.
            })
            .collect()
    }
}

/// Whether a server of the connect string can be reached at all (its name resolves, something accepts a TCP
/// connection there), within `limit`; the error names the server and says what happened. Returns its addresses.
async fn reach(host: &str, limit: Duration) -> std::result::Result<Vec<SocketAddr>, String> {
    let addr = with_port(host);
    let addrs: Vec<SocketAddr> = match tokio::time::timeout(limit, tokio::net::lookup_host(&addr)).await {
        Err(_) => return Err(format!("{host}: its name did not resolve within {limit:?}")),
        Ok(Err(e)) => return Err(format!("{host}: its name does not resolve ({e})")),
        Ok(Ok(a)) => a.collect(),
    };
    match tokio::time::timeout(limit, TcpStream::connect(&addrs[..])).await {
        Err(_) => Err(format!(
            "{host}: no answer within {limit:?} (packets dropped on the way?)"
        )),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(format!("{host}: connection refused (no server listening there)"))
        }
        Ok(Err(e)) => Err(format!("{host}: {e}")),
        Ok(Ok(stream)) => Ok(stream.peer_addr().map_or(addrs, |a| vec![a])),
    }
}

/// ZooKeeper's client port, when a server of the connect string names none.
const DEFAULT_PORT: u16 = 2181;

/// `host:port` for a server of the connect string (`host`, `host:port`, `[v6]` or `[v6]:port`).
fn with_port(host: &str) -> String {
    let port_given = match host.rsplit_once(']') {
        Some((_, rest)) => rest.starts_with(':'),
        None => host.matches(':').count() == 1,
    };
    if port_given {
        host.to_owned()
    } else {
        format!("{host}:{DEFAULT_PORT}")
    }
}

#[cfg(test)]
mod tests {
    use super::with_port;

    #[test]
    fn servers_get_the_default_port_when_they_name_none() {
        assert_eq!(with_port("zk1"), "zk1:2181");
        assert_eq!(with_port("zk1:2888"), "zk1:2888");
        assert_eq!(with_port("[::1]"), "[::1]:2181");
        assert_eq!(with_port("[::1]:2888"), "[::1]:2888");
    }
}
