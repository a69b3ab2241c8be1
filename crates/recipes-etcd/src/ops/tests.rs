//! The error mapping of etcd's replies.

use super::*;

fn status(code: tonic::Code, message: &str) -> Error {
    error(etcd_client::Error::GRpcStatus(tonic::Status::new(code, message)))
}

#[test]
fn an_overloaded_etcd_is_tried_again_and_a_full_one_is_refused() {
    let again = status(tonic::Code::ResourceExhausted, "etcdserver: too many requests");
    assert_eq!(again, Error::ConnectionLoss);
    let full = status(
        tonic::Code::ResourceExhausted,
        "etcdserver: mvcc: database space exceeded",
    );
    assert!(matches!(full, Error::Backend(_)), "{full:?}");
    let foreign = status(tonic::Code::ResourceExhausted, "a proxy's quota");
    assert_eq!(foreign, Error::ConnectionLoss);
}
