//! How to reach ZooKeeper: the connect string, timeouts, authentication.

use std::fmt;
use std::time::Duration;

use recipes_core::backend::SessionRuntime;

use crate::acl::NodeAcl;
#[cfg(feature = "tls")]
use crate::tls::ZkTls;

/// How to reach ZooKeeper.
#[derive(Clone)]
pub struct ZkOptions {
    pub(crate) servers: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) auth: Option<(String, Vec<u8>)>,
    pub(crate) acl: NodeAcl,
    pub(crate) runtime: SessionRuntime,
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<ZkTls>,
    #[cfg(feature = "sasl")]
    pub(crate) sasl: Option<(String, String)>,
}

impl fmt::Debug for ZkOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkOptions")
            .field("servers", &self.servers)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("auth", &self.auth.as_ref().map(|(scheme, _)| scheme))
            .field("acl", &self.acl.to_string())
            .field("runtime", &self.runtime)
            .field("tls", &self.uses_tls())
            .field("sasl", &self.sasl_user())
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
            acl: NodeAcl::Open,
            runtime: SessionRuntime::Caller,
            #[cfg(feature = "tls")]
            tls: None,
            #[cfg(feature = "sasl")]
            sasl: None,
        }
    }

    /// The session timeout to ask the server for (default 10 s; the server bounds it).
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long [`ZkBackend::connect`](crate::ZkBackend::connect) (and each reconnect after an expiry) may take
    /// (default 5 s). A server that refuses the connection, or whose name does not resolve, fails at once.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Where the session's connection, heartbeats and monitor run. By default ([`SessionRuntime::Caller`], decision
    /// 0095) on the multi-thread runtime [`ZkBackend::connect`](crate::ZkBackend::connect) is called on, which spares
    /// a thread's wake-up on every event and reply (contended handoffs 3 – 13% faster), and on the backend's own
    /// runtime from a current-thread runtime or [`connect_blocking`](crate::ZkBackend::connect_blocking). Close the
    /// backend before that runtime ends: a runtime dropped first ends the session, as an expiry would, and the backend
    /// opens a new one on its own runtime. [`SessionRuntime::Own`] keeps the session on the backend's own runtime
    /// from the start, whatever calls it.
    ///
    /// ```
    /// use recipes_core::backend::SessionRuntime;
    /// use recipes_zk::ZkOptions;
    ///
    /// assert_eq!(ZkOptions::new("zk1:2181").runtime(), SessionRuntime::Caller);
    /// let options = ZkOptions::new("zk1:2181").session_runtime(SessionRuntime::Own);
    /// assert_eq!(options.runtime(), SessionRuntime::Own);
    /// ```
    pub fn session_runtime(mut self, runtime: SessionRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Where the session runs (see [`session_runtime`](Self::session_runtime)).
    pub fn runtime(&self) -> SessionRuntime {
        self.runtime
    }

    /// Digest authentication (`user:password`), sent on every connection.
    pub fn digest_auth(mut self, user_password: &str) -> Self {
        self.auth = Some(("digest".into(), user_password.as_bytes().to_vec()));
        self
    }

    /// TLS to every server of the connect string, whose ports must then be ZooKeeper's secure client ports
    /// (`secureClientPort`). Feature `tls`. See [`ZkTls`].
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: ZkTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// SASL DIGEST-MD5 authentication as `user` (a user of the servers' JAAS `Server` section); the session's
    /// identity is then `sasl:<user>`. Feature `sasl`. A wrong password fails the connect with
    /// [`Error::AuthenticationFailed`](recipes_core::Error::AuthenticationFailed).
    #[cfg(feature = "sasl")]
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Self {
        self.sasl = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Whether the connection uses TLS.
    pub fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        return false;
    }

    /// The SASL user, when SASL authentication is set.
    pub fn sasl_user(&self) -> Option<&str> {
        #[cfg(feature = "sasl")]
        return self.sasl.as_ref().map(|(user, _)| user.as_str());
        #[cfg(not(feature = "sasl"))]
        return None;
    }

    /// Whether the session will have an identity of its own: digest credentials, a SASL user, or a TLS client
    /// certificate (ZooKeeper's `x509` scheme).
    pub fn has_identity(&self) -> bool {
        #[cfg(feature = "tls")]
        let tls_identity = self.tls.as_ref().is_some_and(|t| t.has_identity);
        #[cfg(not(feature = "tls"))]
        let tls_identity = false;
        self.auth.is_some() || self.sasl_user().is_some() || tls_identity
    }

    /// The ACL of the nodes the backend creates (default [`NodeAcl::Open`]). [`NodeAcl::Creator`] keeps clients
    /// with other credentials from deleting a holder's node; it needs [`digest_auth`](Self::digest_auth).
    pub fn acl(mut self, acl: NodeAcl) -> Self {
        self.acl = acl;
        self
    }

    /// Whether the ACL names the creator's identity, so that [`digest_auth`](Self::digest_auth) is required.
    pub fn acl_needs_auth(&self) -> bool {
        self.acl.needs_auth()
    }

    /// The connect string.
    pub fn servers(&self) -> &str {
        &self.servers
    }

    /// The session timeout asked of the servers (each may grant less, or more; see
    /// [`ZkBackend::session_timeout`](crate::ZkBackend::session_timeout)).
    pub fn asked_session_timeout(&self) -> Duration {
        self.session_timeout
    }
}
