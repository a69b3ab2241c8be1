//! How to reach etcd: endpoints, the session's TTL, an etcd user, TLS.

use std::fmt;
#[cfg(feature = "tls")]
use std::path::Path;
use std::time::Duration;

use etcd_client::ConnectOptions;
use recipes_core::backend::SessionRuntime;
use recipes_core::{Error, Result};

/// How to reach etcd, and the session to ask for.
#[derive(Clone)]
pub struct EtcdOptions {
    pub(crate) endpoints: Vec<String>,
    pub(crate) session_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    user: Option<(String, String)>,
    pub(crate) runtime: SessionRuntime,
    #[cfg(feature = "tls")]
    tls: Option<EtcdTls>,
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("EtcdOptions");
        d.field("endpoints", &self.endpoints)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            // Never the password.
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("runtime", &self.runtime);
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

impl EtcdOptions {
    /// The members' client endpoints (`http://127.0.0.1:2379`, or `127.0.0.1:2379`; `https://…` with
    /// [`tls`](EtcdOptions::tls)), comma-separated.
    pub fn new(endpoints: &str) -> Self {
        EtcdOptions {
            endpoints: endpoints
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
            session_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            user: None,
            runtime: SessionRuntime::Own,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// The session timeout: the TTL of the session's lease, in whole seconds (rounded up; at least 2 s, etcd's
    /// smallest TTL being about 1.5 s). Default 10 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long `connect` tries before it gives up (the connection, the authentication with a user, the lease's grant
    /// and the session's key, all within it). Default 10 s.
    ///
    /// Attempts to connect overlap: one that has not answered within half of what is left (at least a second) gets
    /// another beside it, which may reach another endpoint, and the first to answer wins, so a member that is only
    /// slow to take a new client is still reached. Credentials the member refuses end the connect at once.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Where the session's connection, keep-alive and sender run. By default ([`SessionRuntime::Own`]) on a runtime of
    /// the backend's own, which works whatever calls it (a sync program may connect from a runtime made for the
    /// purpose). [`SessionRuntime::Caller`] runs them on the multi-thread runtime
    /// [`EtcdBackend::connect`](crate::EtcdBackend::connect) is called on, which spares a thread's wake-up on every
    /// reply, for a service that closes the backend before its runtime ends: dropped first, the runtime closes the
    /// backend with it.
    ///
    /// ```
    /// use recipes_core::backend::SessionRuntime;
    /// use recipes_etcd::EtcdOptions;
    ///
    /// let options = EtcdOptions::new("127.0.0.1:2379").session_runtime(SessionRuntime::Caller);
    /// assert_eq!(options.runtime(), SessionRuntime::Caller);
    /// ```
    pub fn session_runtime(mut self, runtime: SessionRuntime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Where the session runs (see [`session_runtime`](Self::session_runtime)).
    pub fn runtime(&self) -> SessionRuntime {
        self.runtime
    }

    /// Authenticates as etcd user `name` (etcd's own users, `etcdctl user add`; with `etcdctl auth enable`, every
    /// request carries the user's token, which the client renews when it expires). A wrong password fails the
    /// connect with [`Error::AuthenticationFailed`]; a user whose roles do not cover the keys a recipe writes gets
    /// [`Error::NotAuthorized`] from that request.
    ///
    /// ```
    /// use recipes_etcd::EtcdOptions;
    /// let options = EtcdOptions::new("127.0.0.1:2379").user("app", "app-secret");
    /// assert!(!format!("{options:?}").contains("app-secret"));
    /// ```
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.user = Some((name.to_owned(), password.to_owned()));
        self
    }

    /// TLS to the members' client ports (`https://` endpoints; a bare `host:port` or `http://` endpoint is asked
    /// over TLS too). Feature `tls` (on by default). See [`EtcdTls`].
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Whether the connection uses TLS.
    pub fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls"))]
        false
    }

    /// The lease's TTL in seconds.
    pub(crate) fn ttl(&self) -> i64 {
        let ms = self.session_timeout.as_millis().max(2000);
        i64::try_from(ms.div_ceil(1000)).unwrap_or(i64::MAX)
    }

    /// The endpoints as URLs of the scheme the connection uses, or why one is invalid.
    pub(crate) fn urls(&self) -> Result<Vec<String>> {
        if self.endpoints.is_empty() {
            return Err(Error::InvalidArgument("no etcd endpoint".to_owned()));
        }
        let scheme = if self.uses_tls() { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| {
                let (given, rest) = match e.split_once("://") {
                    Some((s, rest)) => (Some(s), rest),
                    None => (None, e.as_str()),
                };
                match given {
                    None | Some("http") | Some("https") => {}
                    Some(other) => {
                        return Err(Error::InvalidArgument(format!(
                            "etcd endpoint {e:?}: the scheme {other:?} is not one of http, https"
                        )))
                    }
                }
                if given == Some("https") && !self.uses_tls() {
                    return Err(Error::InvalidArgument(format!(
                        "etcd endpoint {e:?} is https: give EtcdOptions::tls (the CA to trust)"
                    )));
                }
                let port_ok = rest
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
                if !port_ok || rest.contains('/') {
                    return Err(Error::InvalidArgument(format!(
                        "etcd endpoint {e:?}: expected [http://|https://]host:port"
                    )));
                }
                Ok(format!("{scheme}://{rest}"))
            })
            .collect()
    }

    /// The client's connect options (the timeouts are the caller's).
    pub(crate) fn connect_options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::new();
        if let Some((name, password)) = &self.user {
            o = o
                .with_user(name.as_str(), password.as_str())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            o = o.with_tls(tls.config());
        }
        o
    }

    /// Whether a user was given.
    pub(crate) fn has_user(&self) -> bool {
        self.user.is_some()
    }
}

/// TLS settings for [`EtcdOptions::tls`]: the CA certificates to trust, and a client certificate for members started
/// with `--client-cert-auth`. Feature `tls` (rustls with aws-lc-rs, as `recipes-zk`).
///
/// ```
/// use recipes_etcd::EtcdTls;
/// assert!(EtcdTls::from_ca_pem("not a certificate").is_err());
/// ```
#[cfg(feature = "tls")]
#[derive(Clone)]
pub struct EtcdTls {
    ca: String,
    identity: Option<(String, String)>,
}

#[cfg(feature = "tls")]
impl fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdTls")
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// Checks that `pem` holds a PEM block whose label ends with `label`.
#[cfg(feature = "tls")]
fn pem_with(pem: &str, label: &str, what: &str) -> Result<()> {
    let found = pem
        .lines()
        .filter_map(|l| l.trim().strip_prefix("-----BEGIN ")?.strip_suffix("-----"))
        .any(|l| l.ends_with(label));
    if found {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{what}: no PEM block \"{label}\" in it"
        )))
    }
}

#[cfg(feature = "tls")]
fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::InvalidArgument(format!("{what} {}: {e}", path.display())))
}

#[cfg(feature = "tls")]
impl EtcdTls {
    /// Trusts the CA certificates in `pem`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pem` holds no certificate.
    pub fn from_ca_pem(pem: &str) -> Result<EtcdTls> {
        pem_with(pem, "CERTIFICATE", "the etcd CA")?;
        Ok(EtcdTls {
            ca: pem.to_owned(),
            identity: None,
        })
    }

    /// Trusts the CA certificates in the PEM file at `path`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the file cannot be read or holds no certificate.
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<EtcdTls> {
        Self::from_ca_pem(&read(path.as_ref(), "the etcd CA file")?)
    }

    /// Presents the client certificate `cert` (PEM) with its private key `key` (PEM).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when either holds no PEM block of its kind.
    pub fn with_identity_pem(mut self, cert: &str, key: &str) -> Result<EtcdTls> {
        pem_with(cert, "CERTIFICATE", "the client certificate")?;
        pem_with(key, "PRIVATE KEY", "the client key")?;
        self.identity = Some((cert.to_owned(), key.to_owned()));
        Ok(self)
    }

    /// As [`with_identity_pem`](EtcdTls::with_identity_pem), from files.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a file cannot be read or holds no PEM block of its kind.
    pub fn with_identity_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<EtcdTls> {
        let cert = read(cert.as_ref(), "the client certificate file")?;
        let key = read(key.as_ref(), "the client key file")?;
        self.with_identity_pem(&cert, &key)
    }

    fn config(&self) -> etcd_client::TlsOptions {
        let mut c = etcd_client::TlsOptions::new().ca_certificate(etcd_client::Certificate::from_pem(&self.ca));
        if let Some((cert, key)) = &self.identity {
            c = c.identity(etcd_client::Identity::from_pem(cert, key));
        }
        c
    }
}
