//! The trait's errors for etcd's.

use super::*;

fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
    etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
}

/// etcd sends its overload as `Unknown` (the code it declares, `ResourceExhausted`, is lost in its server): either is
/// a connection loss, and known not to have been applied.
#[test]
fn an_overloaded_etcd_is_tried_again_and_a_full_one_is_refused() {
    for code in [tonic::Code::Unknown, tonic::Code::ResourceExhausted] {
        let again = status(code, "etcdserver: too many requests");
        assert!(overloaded(&again), "{code:?}");
        assert_eq!(error(again), Error::ConnectionLoss);
    }
    let full = status(
        tonic::Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
    );
    assert!(!overloaded(&full));
    assert!(matches!(error(full), Error::Backend(_)));
    for other in ["a proxy's quota", "etcdserver: request timed out"] {
        let unknown = status(tonic::Code::Unknown, other);
        assert!(!overloaded(&unknown), "{other}");
        assert_eq!(error(unknown), Error::ConnectionLoss);
    }
}
