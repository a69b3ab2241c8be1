//! The workspace's runnable examples, on the in-memory backend (nothing to install):
//!
//! - `cargo run --example tour`: the recipes at work, several simulated processes contending on each;
//! - `cargo run --example prometheus`: the library's metrics exported as a Prometheus scrape.
//!
//! This library is empty: cargo wants one target beside the examples.
