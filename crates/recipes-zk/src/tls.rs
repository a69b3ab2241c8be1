//! TLS to ZooKeeper's secure client port: the settings, and a handshake of the backend's own that says what went
//! wrong (the client crate retries a failed handshake until the connect timeout, and says nothing of why).

use std::fmt;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_core::{Error, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore};

use crate::zk;

/// TLS settings for the connection to ZooKeeper's secure client port (feature `tls`, on rustls).
///
/// The servers' certificates are checked against the CA given here, and must name the host used in the connect
/// string (a DNS name, or an IP address in the certificate's subject alternative names). A client certificate
/// ([`with_identity_pem`](Self::with_identity_pem)) answers servers that require one (`ssl.clientAuth=need`, their
/// default); the session is then authenticated as the certificate's subject in ZooKeeper's `x509` scheme, which is
/// an identity for [`NodeAcl::Creator`](crate::NodeAcl::Creator).
///
/// Beside the session's opening, the backend makes a TLS handshake of its own with each server, to say why a
/// connection fails: a server certificate of another CA, for another name, or revoked (revocation lists in the CA
/// PEM count), a client certificate the server refused or requires, or a port that does not speak TLS.
///
/// ```
/// # let ca_pem = include_str!("../tests/data/example-ca.pem");
/// use recipes_zk::{ZkOptions, ZkTls};
/// let tls = ZkTls::from_ca_pem(ca_pem).unwrap(); // or ZkTls::from_ca_file("/etc/zookeeper/ca.pem")
/// let options = ZkOptions::new("zk1.internal:2281,zk2.internal:2281").tls(tls);
/// assert!(options.uses_tls());
/// assert!(ZkTls::from_ca_pem("not a certificate").is_err());
/// ```
#[derive(Clone)]
pub struct ZkTls {
    pub(crate) options: zk::TlsOptions,
    roots: Arc<RootCertStore>,
    crls: Vec<CertificateRevocationListDer<'static>>,
    probe: Arc<ClientConfig>,
    pub(crate) has_identity: bool,
}

impl fmt::Debug for ZkTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkTls")
            .field("trusted_cas", &self.roots.len())
            .field("client_certificate", &self.has_identity)
            .finish()
    }
}

fn invalid(what: impl fmt::Display) -> Error {
    Error::InvalidArgument(what.to_string())
}

/// The crypto provider: the process's default when the application installed one, else rustls's own default.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

fn builder(
    roots: &Arc<RootCertStore>,
    crls: &[CertificateRevocationListDer<'static>],
) -> Result<rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>> {
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(roots.clone(), provider.clone())
        .with_crls(crls.iter().cloned())
        .build()
        .map_err(|e| invalid(format!("TLS CA: {e}")))?;
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS: {e}")))?
        .with_webpki_verifier(verifier))
}

fn certificates(pem: &str, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("TLS {what}: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(format!("TLS {what}: no PEM certificate in what was given")));
    }
    Ok(certs)
}

impl ZkTls {
    /// Trusts the CA certificates (and revocation lists) in `pem`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `pem` holds no usable certificate.
    pub fn from_ca_pem(pem: &str) -> Result<ZkTls> {
        let mut roots = RootCertStore::empty();
        for cert in certificates(pem, "CA")? {
            roots
                .add(cert)
                .map_err(|e| invalid(format!("TLS CA: a certificate is not usable as a trust anchor ({e})")))?;
        }
        let roots = Arc::new(roots);
        let crls = rustls_pemfile::crls(&mut pem.as_bytes())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("TLS CA: a revocation list: {e}")))?;
        let options = zk::TlsOptions::new()
            .with_pem_ca(pem)
            .map_err(|e| invalid(format!("TLS CA: {e}")))?;
        let probe = Arc::new(builder(&roots, &crls)?.with_no_client_auth());
        Ok(ZkTls {
            options,
            roots,
            crls,
            probe,
            has_identity: false,
        })
    }

    /// Trusts the CA certificates in the PEM file at `path`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file when it cannot be read or holds no certificate.
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<ZkTls> {
        let path = path.as_ref();
        let pem = read_pem(path, "CA")?;
        ZkTls::from_ca_pem(&pem).map_err(|e| invalid(format!("TLS CA file {}: {e}", path.display())))
    }

    /// Presents this client certificate chain and private key (PEM; the key PKCS#8, PKCS#1 or SEC1).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when either cannot be read, or the key does not suit the certificate.
    pub fn with_identity_pem(mut self, cert: &str, key_pem: &str) -> Result<ZkTls> {
        let chain = certificates(cert, "client certificate")?;
        let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_bytes())
            .map_err(|e| invalid(format!("TLS client key: {e}")))?
            .ok_or_else(|| invalid("TLS client key: no PEM private key in what was given"))?;
        self.probe = Arc::new(
            builder(&self.roots, &self.crls)?
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid(format!("TLS client certificate and key: {e}")))?,
        );
        self.options = self
            .options
            .with_pem_identity(cert, key_pem)
            .map_err(|e| invalid(format!("TLS client certificate and key: {e}")))?;
        self.has_identity = true;
        Ok(self)
    }

    /// Presents the client certificate chain and private key in these PEM files.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the file that cannot be read or holds nothing usable.
    pub fn with_identity_files(self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<ZkTls> {
        let (cert, key) = (cert.as_ref(), key.as_ref());
        let (cert_pem, key_pem) = (read_pem(cert, "client certificate")?, read_pem(key, "client key")?);
        self.with_identity_pem(&cert_pem, &key_pem).map_err(|e| {
            invalid(format!(
                "TLS client certificate {} and key {}: {e}",
                cert.display(),
                key.display()
            ))
        })
    }

    /// A TLS handshake with `host` of the connect string (resolved to `addrs`) within `limit`, to say what goes
    /// wrong. With `linger`, waits that long after the handshake as well: over TLS 1.3 a server refuses a client
    /// certificate only after the client has finished its side. Blocking, and bounded by `limit` (plus `linger`)
    /// whatever the server sends: run it on a blocking thread.
    pub(crate) fn probe(
        &self,
        host: &str,
        addrs: &[SocketAddr],
        limit: Duration,
        linger: Option<Duration>,
    ) -> std::result::Result<(), String> {
        let name = host_name(host);
        let server_name = server_name(host)?;
        let started = Instant::now();
        let addr = addrs
            .first()
            .ok_or_else(|| format!("{host}: its name resolves to no address"))?;
        let mut sock = TcpStream::connect_timeout(addr, limit).map_err(|e| format!("{host}: {e}"))?;
        let mut conn =
            rustls::ClientConnection::new(self.probe.clone(), server_name).map_err(|e| format!("{host}: TLS: {e}"))?;
        let fail = |e: Failed, answered: bool| self.describe(host, name, e, limit, answered);
        let mut answered = false;
        // One read or write per turn, each bounded by what is left: a server that drips bytes cannot hold it.
        while conn.is_handshaking() {
            let left = limit.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(format!("{host}: the TLS handshake did not finish within {limit:?}"));
            }
            let _ = sock.set_read_timeout(Some(left));
            let _ = sock.set_write_timeout(Some(left));
            if conn.wants_write() {
                conn.write_tls(&mut sock).map_err(|e| fail(Failed::Io(e), answered))?;
                continue;
            }
            match conn.read_tls(&mut sock) {
                Ok(0) => return Err(self.closed(host, "during the TLS handshake", answered)),
                Ok(_) => answered = true,
                Err(e) => return Err(fail(Failed::Io(e), answered)),
            }
            conn.process_new_packets().map_err(|e| fail(Failed::Tls(e), true))?;
        }
        while conn.wants_write() {
            conn.write_tls(&mut sock).map_err(|e| fail(Failed::Io(e), true))?;
        }
        let Some(linger) = linger else { return Ok(()) };
        let lingering = Instant::now();
        loop {
            let left = linger.saturating_sub(lingering.elapsed());
            if left.is_zero() {
                return Ok(());
            }
            let _ = sock.set_read_timeout(Some(left));
            match conn.read_tls(&mut sock) {
                Ok(0) => return Err(self.closed(host, "right after the TLS handshake", true)),
                Ok(_) => {
                    conn.process_new_packets().map_err(|e| fail(Failed::Tls(e), true))?;
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    return Ok(())
                }
                Err(e) => return Err(fail(Failed::Io(e), true)),
            }
        }
    }

    /// The server closed the connection; `answered`: after it had sent something of the handshake.
    fn closed(&self, host: &str, when: &str, answered: bool) -> String {
        if !answered {
            format!("{host} closed the connection without answering the TLS handshake: not a secure client port? (use the servers' secureClientPort)")
        } else if self.has_identity {
            format!("{host} closed the connection {when}: it refused this client's certificate (not signed by a CA it trusts?), or it is not a secure client port")
        } else {
            format!("{host} closed the connection {when}: it requires a client certificate (ZkTls::with_identity_files, zklock --tls-cert and --tls-key), or it is not a secure client port")
        }
    }

    fn describe(&self, host: &str, name: &str, e: Failed, limit: Duration, answered: bool) -> String {
        let tls = match e {
            Failed::Tls(tls) => tls,
            Failed::Io(e) => {
                if let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    tls.clone()
                } else {
                    return match e.kind() {
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
                            "{host}: no TLS answer within {limit:?} (a plain client port waits for the client to \
                             speak ZooKeeper's protocol: is this the servers' secureClientPort?)"
                        ),
                        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                            self.closed(host, "during the TLS handshake", answered)
                        }
                        _ => format!("{host}: TLS handshake: {e}"),
                    };
                }
            }
        };
        match tls {
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer | CertificateError::BadSignature) => {
                format!(
                    "{host}: the server's certificate is not signed by the CA this client trusts \
                     (ZkTls::from_ca_file, zklock --tls-ca)"
                )
            }
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!("{host}: the server's certificate does not name {name:?}: connect by a name it carries"),
            rustls::Error::InvalidCertificate(CertificateError::Revoked) => {
                format!("{host}: the server's certificate is revoked (a revocation list of the CA file names it)")
            }
            rustls::Error::InvalidCertificate(other) => {
                format!("{host}: the server's certificate is refused: {other:?}")
            }
            rustls::Error::AlertReceived(
                AlertDescription::CertificateRequired
                | AlertDescription::HandshakeFailure
                | AlertDescription::BadCertificate
                | AlertDescription::CertificateUnknown,
            ) if !self.has_identity => format!(
                "{host} requires a client certificate (ZkTls::with_identity_files, zklock --tls-cert and --tls-key)"
            ),
            rustls::Error::AlertReceived(alert) => format!(
                "{host} refused the TLS connection ({alert:?}): {}",
                if self.has_identity {
                    "it does not accept this client's certificate (not signed by a CA it trusts?)"
                } else {
                    "it may require a client certificate"
                }
            ),
            rustls::Error::InvalidMessage(_)
            | rustls::Error::InappropriateMessage { .. }
            | rustls::Error::InappropriateHandshakeMessage { .. } => {
                format!("{host} does not speak TLS: a plain client port? (use the servers' secureClientPort)")
            }
            other => format!("{host}: TLS handshake failed: {other}"),
        }
    }
}

/// How a step of the probe failed.
enum Failed {
    Io(std::io::Error),
    Tls(rustls::Error),
}

/// The name TLS verifies for a server of the connect string, as the client crate will take it (which panics on a
/// name TLS cannot verify): an error saying so instead.
pub(crate) fn server_name(host: &str) -> std::result::Result<ServerName<'static>, String> {
    let name = host_name(host);
    ServerName::try_from(name.to_owned()).map_err(|_| {
        format!(
            "{host}: {name:?} is not a host name or IP address TLS can verify (write IPv6 addresses in brackets, \
             [::1]:2281; use a name the servers' certificates carry)"
        )
    })
}

/// The host part of a server of the connect string (`host`, `host:port`, `[v6]` or `[v6]:port`), cut as the
/// client crate cuts it: inside the brackets, or before the last `:`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.rsplit_once(']').map_or(rest, |(name, _)| name);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

fn read_pem(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| invalid(format!("TLS {what} file {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn host_names_lose_their_ports() {
        assert_eq!(host_name("zk1:2281"), "zk1");
        assert_eq!(host_name("zk1"), "zk1");
        assert_eq!(host_name("[::1]:2281"), "::1");
        assert_eq!(host_name("[::1]"), "::1");
        assert_eq!(host_name("127.0.0.1:2281"), "127.0.0.1");
        // As the client crate reads it: an IPv6 address without brackets loses its last group.
        assert_eq!(host_name("::1"), ":");
    }

    #[test]
    fn names_tls_cannot_verify_are_refused_before_the_client_crate_sees_them() {
        for bad in [
            "127.1:2281",
            "2130706433:2281",
            "[fe80::1%eth0]:2281",
            "::1",
            "bad name:2281",
        ] {
            assert!(super::server_name(bad).is_err(), "{bad}");
        }
        for good in [
            "zk1.internal:2281",
            "zk_1:2281",
            "127.0.0.1:2281",
            "[::1]:2281",
            "localhost",
        ] {
            assert!(super::server_name(good).is_ok(), "{good}");
        }
    }
}
