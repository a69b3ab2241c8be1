//! TLS and SASL against a real ZooKeeper server of the test's own (`recipes_conformance::secure`), with a CA and
//! certificates made by the test: locks work over TLS with a client certificate; a plain client, a client without a
//! certificate, and a client that trusts another CA are refused promptly with a message saying why; the session's
//! `x509` or `sasl` identity keeps other identities from deleting a held node under `NodeAcl::Creator`; a wrong SASL
//! password is `Error::AuthenticationFailed`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use recipes_conformance::require_private_zk;
use recipes_conformance::secure::{SecureZk, SASL_USERS};
use recipes_core::backend::BackendExt;
use recipes_core::{Backend, Error, Locks, Recipe};
use recipes_zk::{NodeAcl, ZkBackend, ZkOptions, ZkTls};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn options(servers: &str) -> ZkOptions {
    ZkOptions::new(servers)
        .session_timeout(Duration::from_secs(4))
        .connect_timeout(CONNECT_TIMEOUT)
}

async fn connect(o: ZkOptions) -> Arc<ZkBackend> {
    match ZkBackend::connect(o).await {
        Ok(b) => b,
        Err(e) => panic!("connect: {e}"),
    }
}

/// Connects with `o`, expecting a refusal: returns the error, and checks that it came within the connect timeout
/// (or, `at_once`, well before it: the handshake or the authentication said no).
async fn refused_in(o: ZkOptions, at_once: bool) -> Error {
    let started = Instant::now();
    let r = tokio::time::timeout(CONNECT_TIMEOUT * 3, ZkBackend::connect(o)).await;
    let e = match r {
        Err(_) => panic!("the connect hung for {:?}", CONNECT_TIMEOUT * 3),
        Ok(Ok(_)) => panic!("the connect succeeded"),
        Ok(Err(e)) => e,
    };
    assert!(
        started.elapsed() < CONNECT_TIMEOUT + Duration::from_secs(2),
        "refused only after {:?}: {e}",
        started.elapsed()
    );
    eprintln!("REFUSED after {:?}: {e}", started.elapsed());
    assert!(
        !at_once || started.elapsed() < CONNECT_TIMEOUT / 2,
        "refused only after {:?}: {e}",
        started.elapsed()
    );
    e
}

async fn refused(o: ZkOptions) -> Error {
    refused_in(o, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates() {
    require_private_zk!();
    let zk = SecureZk::start();
    let path = recipes_conformance::zk::unique_path("secure-test", "tls");

    // Two clients with certificates of the test CA contend as usual, over TLS.
    let app = connect(options(&zk.secure_connect()).tls(zk.tls("app"))).await;
    let colleague = connect(options(&zk.secure_connect()).tls(zk.tls("app"))).await;
    let held = Locks::new(app.clone()).fair(&path).unwrap().acquire().await.unwrap();
    assert!(held.fencing_token() > 0);
    let lock = Locks::new(colleague.clone()).fair(&path).unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    let waiting = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = held.fencing_token();
    held.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();

    // A plain client on the secure port: refused, and the message points at TLS.
    let e = refused_in(options(&zk.secure_connect()), false).await;
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("TLS"), "{e}");

    // TLS without a client certificate: the server requires one.
    let no_cert = ZkTls::from_ca_file(zk.client("app").ca).unwrap();
    let e = refused(options(&zk.secure_connect()).tls(no_cert)).await;
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("requires a client certificate"), "{e}");

    // A client that trusts another CA does not accept the server's certificate.
    let f = zk.client("app");
    let wrong_ca = ZkTls::from_ca_file(zk.untrusted_ca())
        .unwrap()
        .with_identity_files(&f.cert, &f.key)
        .unwrap();
    let e = refused(options(&zk.secure_connect()).tls(wrong_ca)).await;
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("not signed by the CA this client trusts"), "{e}");

    // A client certificate of another CA: the server refuses it.
    let untrusted = zk.client("untrusted");
    let stranger = ZkTls::from_ca_file(&f.ca)
        .unwrap()
        .with_identity_files(&untrusted.cert, &untrusted.key)
        .unwrap();
    let e = refused(options(&zk.secure_connect()).tls(stranger)).await;
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(
        e.to_string().contains("does not accept this client's certificate"),
        "{e}"
    );

    // A TLS client on the plain client port.
    let e = refused(options(zk.plain_connect()).tls(zk.tls("app"))).await;
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("secureClientPort"), "{e}");

    // A host name the server's certificate does not carry.
    let renamed = zk.secure_connect().replace("127.0.0.1", "127.0.0.2");
    let e = refused(options(&renamed).tls(zk.tls("app"))).await;
    assert!(e.to_string().contains("does not name"), "{e}");

    for b in [app, colleague] {
        b.close().await;
    }
}

/// Over TLS 1.3 a server refuses a client certificate only after the client has finished the handshake: the
/// session cannot open, and after the connect timeout the backend's own handshake, waiting a moment longer, says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls13_refusals_of_the_client_certificate_are_explained() {
    require_private_zk!();
    let zk = SecureZk::start_with(&[
        "ssl.protocol=TLSv1.3",
        "ssl.enabledProtocols=TLSv1.3",
        // ZooKeeper 3.8 offers only TLS 1.2 suites unless told.
        "ssl.ciphersuites=TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256",
    ]);
    let b = connect(options(&zk.secure_connect()).tls(zk.tls("app"))).await;
    b.close().await;
    let no_cert = ZkTls::from_ca_file(zk.client("app").ca).unwrap();
    let e = refused_in(options(&zk.secure_connect()).tls(no_cert), false).await;
    assert!(e.to_string().contains("requires a client certificate"), "{e}");
    let f = zk.client("app");
    let untrusted = zk.client("untrusted");
    let stranger = ZkTls::from_ca_file(&f.ca)
        .unwrap()
        .with_identity_files(&untrusted.cert, &untrusted.key)
        .unwrap();
    let e = refused_in(options(&zk.secure_connect()).tls(stranger), false).await;
    assert!(e.to_string().contains("this client's certificate"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_is_an_identity_for_creator_acls() {
    require_private_zk!();
    let zk = SecureZk::start();
    let path = recipes_conformance::zk::unique_path("secure-test", "x509-creator");
    // No digest credentials: the certificate alone is the identity (x509:CN=app).
    let app = connect(options(&zk.secure_connect()).tls(zk.tls("app")).acl(NodeAcl::Creator)).await;
    let other = connect(options(&zk.secure_connect()).tls(zk.tls("other"))).await;
    let colleague = connect(options(&zk.secure_connect()).tls(zk.tls("app"))).await;

    only_the_creator_identity([app, other, colleague], &path, Recipe::Exclusive, "another certificate").await;
}

/// `app` holds the lock of `recipe` at `path` under a creator-only ACL: `other` (`who`) can neither delete the held
/// node nor contend; `colleague`, the same identity on another session, contends as usual and gets the lock after
/// the release. Closes the three backends.
async fn only_the_creator_identity(backends: [Arc<ZkBackend>; 3], path: &str, recipe: Recipe, who: &str) {
    let [app, other, colleague] = &backends;
    let held = Locks::new(app.clone())
        .lock(path, recipe)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let e = other.current().delete(held.node()).await.unwrap_err();
    assert!(
        matches!(e, Error::NotAuthorized(_)),
        "{who} deleting the held node: {e:?}"
    );
    let e = Locks::new(other.clone())
        .lock(path, recipe)
        .unwrap()
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotAuthorized(_)), "{who} contending: {e:?}");
    let colleague = Locks::new(colleague.clone()).lock(path, recipe).unwrap();
    // The same identity on another session contends as usual.
    assert!(colleague.try_acquire().await.unwrap().is_none());
    assert!(held.is_valid());
    held.release().await.unwrap();
    let g = colleague.try_acquire().await.unwrap().expect("free after the release");
    g.release().await.unwrap();
    for b in backends {
        b.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_digest_users() {
    require_private_zk!();
    let zk = SecureZk::start();
    let path = recipes_conformance::zk::unique_path("secure-test", "sasl");
    let [(app_user, app_password), (other_user, other_password)] = SASL_USERS;

    // A wrong password: a typed error naming the user, promptly.
    let e = refused(options(zk.plain_connect()).sasl_digest(app_user, "wrong")).await;
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
    assert!(e.to_string().contains(app_user), "{e}");

    // The SASL identity (sasl:app) is the creator's identity for the ACL.
    let app = connect(
        options(zk.plain_connect())
            .sasl_digest(app_user, app_password)
            .acl(NodeAcl::Creator),
    )
    .await;
    let other = connect(options(zk.plain_connect()).sasl_digest(other_user, other_password)).await;
    let colleague = connect(options(zk.plain_connect()).sasl_digest(app_user, app_password)).await;
    only_the_creator_identity([app, other, colleague], &path, Recipe::Fair, "another SASL user").await;
}

/// A server that accepts connections but never answers (a paused JVM) beside a healthy one: the session opens on
/// the healthy one, within the connect timeout; the handshakes of our own never hold the opening up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_beside_a_healthy_one_does_not_stop_the_connect() {
    require_private_zk!();
    let zk = SecureZk::start();
    let hung = recipes_conformance::zkserver::Relay::start(zk.secure_connect().parse().unwrap());
    hung.freeze();
    for order in [
        format!("{},{}", hung.addr(), zk.secure_connect()),
        format!("{},{}", zk.secure_connect(), hung.addr()),
    ] {
        let started = Instant::now();
        let b = connect(options(&order).tls(zk.tls("app"))).await;
        assert!(started.elapsed() < CONNECT_TIMEOUT, "{order}: {:?}", started.elapsed());
        b.close().await;
    }
}

/// Inputs the client crate would panic on, or wait out, are typed errors before any connection.
#[tokio::test]
async fn names_tls_cannot_verify_and_empty_sasl_users_are_refused_at_once() {
    let tls = ZkTls::from_ca_pem(include_str!("../../../crates/recipes-zk/tests/data/example-ca.pem")).unwrap();
    for servers in ["127.0.0.1:1,127.1:1", "2130706433:2281", "[fe80::1%eth0]:2281", "::1"] {
        let e = ZkBackend::connect(options(servers).tls(tls.clone())).await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{servers}: {e:?}");
        assert!(e.to_string().contains("TLS can verify"), "{e}");
    }
    let e = ZkBackend::connect(options("127.0.0.1:1").sasl_digest("", "secret"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}

#[test]
fn bad_tls_files_are_typed_errors_naming_the_file() {
    let missing = std::env::temp_dir().join("recipes-no-such-ca.pem");
    let e = ZkTls::from_ca_file(&missing).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("recipes-no-such-ca.pem"), "{e}");
    let not_pem = std::env::temp_dir().join(format!("recipes-not-pem-{}.pem", std::process::id()));
    std::fs::write(&not_pem, "hello").unwrap();
    let e = ZkTls::from_ca_file(&not_pem).unwrap_err();
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    std::fs::remove_file(&not_pem).unwrap();
    let e = ZkTls::from_ca_pem(include_str!("../../../crates/recipes-zk/tests/data/example-ca.pem"))
        .unwrap()
        .with_identity_pem("not a certificate", "not a key")
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}
