//! The backend contract on each backend; each check is its own test, named `<backend>::<check>`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mem {
    recipes_conformance::contract_suite!(
        harness = recipes_conformance::mem::MemHarness::new(),
        test = tokio::test(start_paused = true)
    );
}

/// The in-memory cluster standing for etcd (children ordered by creation): held to the contract as etcd is.
mod mem_by_creation {
    recipes_conformance::contract_suite!(
        harness = recipes_conformance::mem::MemHarness::by_creation(),
        test = tokio::test(start_paused = true)
    );
}

mod zk {
    recipes_conformance::contract_suite!(
        harness = recipes_conformance::zk::ZkHarness::new(),
        test = tokio::test(flavor = "multi_thread", worker_threads = 2)
    );
}

mod etcd {
    recipes_conformance::contract_suite!(
        harness = recipes_conformance::etcd::EtcdHarness::new(),
        test = tokio::test(flavor = "multi_thread", worker_threads = 2)
    );
}
