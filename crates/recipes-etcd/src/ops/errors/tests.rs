//! The trait's errors for etcd's.

use super::*;

fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
    etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
}

#[test]
fn an_overloaded_etcd_is_tried_again_and_a_full_one_is_refused() {
    let again = status(tonic::Code::ResourceExhausted, "etcdserver: too many requests");
    assert!(overloaded(&again));
    assert_eq!(error(again), Error::ConnectionLoss);
    let full = status(
        tonic::Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
    );
    assert!(!overloaded(&full));
    assert!(matches!(error(full), Error::Backend(_)));
    let foreign = status(tonic::Code::ResourceExhausted, "a proxy's quota");
    assert!(!overloaded(&foreign));
    assert_eq!(error(foreign), Error::ConnectionLoss);
}
