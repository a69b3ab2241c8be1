//! The integration tests of `recipes-mem`, in one binary: each file is a module, and its tests are named
//! `<file>::<test>`. Built as the conformance package's `mem` test (tests/Cargo.toml, decision 77), unoptimised: this
//! package is optimised in tests for the model checker, and its six test binaries, optimised with it, were about 50 s
//! of the two cores in the test build.

mod closes;
mod events_together;
mod heartbeats_in_order;
mod held;
mod orphans;
mod pump;
mod request_sizes;
mod requests_yield;
mod testing_your_application;
mod tree;
mod tree_watches;
mod watches_set_again;
