//! How to reach ZooKeeper: the connect string, timeouts, authentication.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use recipes_core::{Error, Result};
use tokio::net::TcpStream;
use tracing::debug;

use crate::zk;

/// How to reach ZooKeeper.
#[derive(Clone)]
pub struct ZkOptions {
    pub(crate) servers: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) auth: Option<(String, Vec<u8>)>,
}

impl fmt::Debug for ZkOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkOptions")
            .field("servers", &self.servers)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("auth", &self.auth.as_ref().map(|(scheme, _)| scheme))
            .finish()
    }
}

impl ZkOptions {
    /// Options for the connect string `servers`: `host:port[,host:port…][/chroot]`.
    pub fn new(servers: impl Into<String>) -> Self {
        ZkOptions {
            servers: servers.into(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            auth: None,
        }
    }

    /// The session timeout to ask the server for (default 10 s; the server bounds it).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`ZkBackend::connect`](crate::ZkBackend::connect) (and each reconnect after an expiry) may take
    /// (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Digest authentication (`user:password`), sent on every connection.
    pub fn digest_auth(mut self, user_password: &str) -> Self {
        self.auth = Some(("digest".into(), user_password.as_bytes().to_vec()));
        self
    }

    /// The connect string.
    pub fn servers(&self) -> &str {
        &self.servers
    }

    fn connector(&self) -> zk::Connector {
        let mut connector = zk::Client::connector().with_session_timeout(self.session_timeout);
        if let Some((scheme, auth)) = &self.auth {
            connector = connector.with_auth(scheme, auth);
        }
        connector
    }

    /// Connects a new session.
    pub(crate) async fn connect(&self) -> Result<zk::Client> {
        if self.servers.trim().is_empty() {
            return Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: "the connect string is empty".into(),
            });
        }
        match tokio::time::timeout(self.connect_timeout, self.connector().connect(&self.servers)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: e.to_string(),
            }),
            Err(_) => Err(Error::Unreachable {
                servers: self.servers.clone(),
                why: format!("no server answered within {:?}", self.connect_timeout),
            }),
        }
    }

    /// Asks every server of the connect string which session timeout it grants this client, each with a short-lived
    /// session of its own (a reconnection renegotiates the timeout, and the client library does not say what it got).
    /// The answers come as they arrive: a server that does not answer (within the connect timeout) holds up no other.
    pub(crate) fn timeout_probes(&self) -> FuturesUnordered<impl Future<Output = Option<Duration>> + '_> {
        let (hosts, chroot) = match self.servers.split_once('/') {
            Some((h, c)) => (h, format!("/{c}")),
            None => (self.servers.as_str(), String::new()),
        };
        hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(|host| {
                let target = format!("{host}{chroot}");
                async move {
                    // A refused or unresolvable server answers no probe: say so at once (the client library would
                    // retry it until the connect timeout).
                    match tokio::time::timeout(self.connect_timeout, TcpStream::connect(with_port(host))).await {
                        Ok(Ok(_)) => {}
                        other => {
                            debug!(host, ?other, "no session timeout from this server");
                            return None;
                        }
                    }
                    match tokio::time::timeout(self.connect_timeout, self.connector().connect(&target)).await {
                        Ok(Ok(client)) => Some(client.session_timeout()),
                        other => {
                            debug!(host, ?other, "no session timeout from this server");
                            None
                        }
                    }
                    // The probe's client is dropped here, which closes its session.
                }
            })
            .collect()
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
