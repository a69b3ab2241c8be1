//! A private ZooKeeper server that speaks TLS on a secure client port (with a CA, server and client certificates
//! made here, by `rcgen`) and accepts SASL DIGEST-MD5 users, for the tests of `ZkTls`, `sasl_digest` and zklock's
//! `--tls-*` and `--sasl` options.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use crate::zkserver::PrivateZk;

/// The SASL users the server knows, as `(user, password)`.
pub const SASL_USERS: [(&str, &str); 2] = [("app", "app-secret"), ("other", "other-secret")];

/// A CA made for one test run.
pub(crate) struct Ca {
    pub(crate) cert: Certificate,
    key: KeyPair,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Ca {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).expect("self-signed CA");
        Ca { cert, key }
    }

    /// A certificate for `name` (its CN), valid for 127.0.0.1 and localhost, as a server and as a client:
    /// `(certificate PEM, PKCS#8 key PEM)`.
    pub(crate) fn issue(&self, name: &str) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("sign");
        (cert.pem(), key.serialize_pem())
    }
}

/// The files a TLS client needs: the CA it trusts, and its certificate and key.
#[derive(Debug, Clone)]
pub struct ClientFiles {
    /// The CA to trust (PEM).
    pub ca: PathBuf,
    /// The client certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, PKCS#8).
    pub key: PathBuf,
}

/// A server with a plain client port (SASL users accepted there) and a secure client port (TLS, client
/// certificates required, `x509` identities). Stopped, and its files removed, on drop.
#[derive(Debug)]
pub struct SecureZk {
    server: PrivateZk,
    files: PathBuf,
    secure_port: u16,
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write a test file");
    p
}

impl SecureZk {
    /// Makes a CA, the server's certificate, client certificates `app` and `other` (and `untrusted`, from another
    /// CA), a JAAS file with [`SASL_USERS`], and starts the server.
    pub fn start() -> SecureZk {
        Self::start_with(&[])
    }

    /// [`start`](Self::start) with more lines for the server's zoo.cfg (`ssl.enabledProtocols=TLSv1.3`).
    pub fn start_with(config: &[&str]) -> SecureZk {
        let files = crate::zkserver::private_dir("recipes-secure-zk");
        std::fs::create_dir_all(&files).expect("a directory for the test's certificates");
        let ca = Ca::new("recipes test CA");
        write(&files, "ca.pem", &ca.cert.pem());
        let (server_cert, server_key) = ca.issue("zookeeper");
        // ZooKeeper's PEM key store: the key and the certificate in one file.
        let keystore = write(&files, "server.pem", &format!("{server_key}{server_cert}"));
        for name in ["app", "other"] {
            let (cert, key) = ca.issue(name);
            write(&files, &format!("{name}.crt"), &cert);
            write(&files, &format!("{name}.key"), &key);
        }
        let stranger = Ca::new("another CA");
        write(&files, "untrusted-ca.pem", &stranger.cert.pem());
        let (cert, key) = stranger.issue("app");
        write(&files, "untrusted.crt", &cert);
        write(&files, "untrusted.key", &key);
        let users: String = SASL_USERS.iter().map(|(u, p)| format!(" user_{u}=\"{p}\"")).collect();
        let jaas = write(
            &files,
            "jaas.conf",
            &format!("Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"),
        );

        let secure_port = free_port();
        let ca_file = files.join("ca.pem");
        let mut opts = vec![
            format!("1:secureClientPort={secure_port}"),
            "1:serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory".to_owned(),
            format!("1:ssl.keyStore.location={}", keystore.display()),
            "1:ssl.keyStore.type=PEM".to_owned(),
            format!("1:ssl.trustStore.location={}", ca_file.display()),
            "1:ssl.trustStore.type=PEM".to_owned(),
            "1:authProvider.x509=org.apache.zookeeper.server.auth.X509AuthenticationProvider".to_owned(),
            "1:authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider".to_owned(),
        ];
        opts.extend(config.iter().map(|line| format!("1:{line}")));
        let jvm = format!("1:-Djava.security.auth.login.config={}", jaas.display());
        let mut args: Vec<&str> = Vec::new();
        for o in &opts {
            args.extend(["--server-opt", o]);
        }
        args.extend(["--jvm-opt", &jvm]);
        let server = PrivateZk::start_with(1, &args);
        // The server is reported started when its plain client port answers; it binds the secure port after that
        // one, and on a loaded machine a test's first TLS connect found nothing listening there yet (a clean run of
        // the twenty-second session). Wait for it too, bounded.
        let secure = std::net::SocketAddr::from(([127, 0, 0, 1], secure_port));
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect_timeout(&secure, std::time::Duration::from_secs(1)).is_err() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "the private ZooKeeper's secure client port {secure_port} is not listening after 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        SecureZk {
            server,
            files,
            secure_port,
        }
    }

    /// The connect string of the secure client port.
    pub fn secure_connect(&self) -> String {
        format!("127.0.0.1:{}", self.secure_port)
    }

    /// The connect string of the plain client port.
    pub fn plain_connect(&self) -> &str {
        self.server.connect()
    }

    /// The files of client `name` (`app`, `other`, or `untrusted`: a certificate of another CA), with the test CA.
    pub fn client(&self, name: &str) -> ClientFiles {
        ClientFiles {
            ca: self.files.join("ca.pem"),
            cert: self.files.join(format!("{name}.crt")),
            key: self.files.join(format!("{name}.key")),
        }
    }

    /// A CA that did not sign the server's certificate.
    pub fn untrusted_ca(&self) -> PathBuf {
        self.files.join("untrusted-ca.pem")
    }

    /// TLS options for client `name` (see [`client`](Self::client)).
    pub fn tls(&self, name: &str) -> recipes_zk::ZkTls {
        let f = self.client(name);
        recipes_zk::ZkTls::from_ca_file(&f.ca)
            .and_then(|t| t.with_identity_files(&f.cert, &f.key))
            .expect("the test's TLS files")
    }
}

impl Drop for SecureZk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.files);
    }
}
