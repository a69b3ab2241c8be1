//! The conformance suite on each backend; each scenario is its own test, named `<backend>::<scenario>`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod mem {
    recipes_conformance::conformance_suite!(
        harness = recipes_conformance::mem::MemHarness::new(),
        test = tokio::test(start_paused = true)
    );
}

mod mem_by_creation {
    recipes_conformance::conformance_suite!(
        harness = recipes_conformance::mem::MemHarness::by_creation(),
        test = tokio::test(start_paused = true)
    );
}

mod etcd {
    recipes_conformance::conformance_suite!(
        harness = recipes_conformance::etcd::EtcdHarness::new(),
        test = tokio::test(flavor = "multi_thread", worker_threads = 2)
    );
}

mod zk {
    recipes_conformance::conformance_suite!(
        harness = recipes_conformance::zk::ZkHarness::new(),
        test = tokio::test(flavor = "multi_thread", worker_threads = 2)
    );
}
