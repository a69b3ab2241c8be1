//! The conformance suite: every lock scenario is written once, as a `pub async fn name(h: &dyn Harness)` in one of
//! the theme files of [`scenarios`] (`src/scenarios/`: exclusion, order, read/write, reentrancy, cancellation,
//! sessions, faults, safety), and run on every backend through [`conformance_suite!`], which makes each scenario its
//! own named test (`mem::…`, `zk::…`) from the one list in `scenarios/mod.rs`. `tests/suite_complete.rs` fails
//! when a scenario written there is missing from that list.
//!
//! A backend joins by implementing [`Harness`] (clients, an observer, and its fault injection) and invoking the
//! macro in a test module.

#![allow(clippy::unwrap_used)]

pub mod campaign;
pub mod contract;
pub mod etcd;
pub mod etcdsecure;
pub mod etcdserver;
pub mod harness;
pub mod history;
pub mod mem;
pub mod proxy;
pub mod scenarios;
pub mod secure;
pub mod util;
pub mod zk;
pub mod zkserver;

/// The README's example, compiled and run as a doc test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

pub use harness::{Capabilities, Faults, Harness, TestClient};

/// Instantiates every scenario of [`scenarios`] as a test function in the calling module.
///
/// `harness` is an expression making a fresh harness value (one per test); `test` is the test attribute.
///
/// ```ignore
/// mod mem {
///     recipes_conformance::conformance_suite!(
///         harness = recipes_conformance::mem::MemHarness::new(),
///         test = tokio::test(start_paused = true)
///     );
/// }
/// ```
#[macro_export]
macro_rules! conformance_suite {
    (harness = $h:expr, test = $attr:meta) => {
        $crate::__for_each_scenario!($crate::conformance_suite; @expand ($h) [$attr]);
    };
    (@expand ($h:expr) [$attr:meta] {$module:ident} $($name:ident)*) => {
        $(
            #[$attr]
            async fn $name() {
                let h = $h;
                if let Some(why) = $crate::Harness::skip_reason(&h) {
                    eprintln!("SKIPPED {}::{}: {why}", $crate::Harness::name(&h), stringify!($name));
                    return;
                }
                if let Some(why) = $crate::Harness::cannot_express(&h, stringify!($name)) {
                    eprintln!("NOT EXPRESSIBLE {}::{}: {why}", $crate::Harness::name(&h), stringify!($name));
                    return;
                }
                $crate::util::within(&h, stringify!($name), $crate::$module::$name(&h)).await;
                $crate::Harness::finish(&h).await;
            }
        )*
    };
}

/// Instantiates every check of the backend contract ([`contract`]) as a test function in the calling module, as
/// [`conformance_suite!`] does for the scenarios.
#[macro_export]
macro_rules! contract_suite {
    (harness = $h:expr, test = $attr:meta) => {
        $crate::__for_each_contract!($crate::conformance_suite; @expand ($h) [$attr]);
    };
}
