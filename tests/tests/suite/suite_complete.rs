//! No scenario is left out: every scenario written in `src/scenarios/` is in the list of `__for_each_scenario!`, and
//! the list names nothing else and nothing twice. `conformance_suite!` makes the tests of every backend from that one
//! list (`tests/suite/conformance.rs`), so every scenario written runs on every backend. The same holds for the checks of
//! the backend contract (`src/contract.rs`, `__for_each_contract!`, `tests/suite/contract.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use recipes_conformance::contract::CONTRACT_NAMES;
use recipes_conformance::scenarios::SCENARIO_NAMES;

/// The Rust files below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The scenarios written in `text`, with their line numbers: every `pub async fn`, and every `async fn` (of any
/// visibility) whose only parameter is a `&dyn Harness`. Plain string parsing; rustfmt's layout is assumed.
fn scenarios_in(text: &str) -> Vec<(usize, String)> {
    async_fns_in(text)
        .into_iter()
        .filter(|f| f.public || f.takes_only_a_harness)
        .map(|f| (f.line, f.name))
        .collect()
}

/// An `async fn` found in a source file.
struct AsyncFn {
    line: usize,
    name: String,
    public: bool,
    takes_only_a_harness: bool,
}

/// Every `async fn` written in `text`, outside comments.
fn async_fns_in(text: &str) -> Vec<AsyncFn> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let Some(at) = line.find("async fn ") else {
            continue;
        };
        let public = line.starts_with("pub async fn ");
        let rest = &line[at + "async fn ".len()..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        // The parameters, up to the first `)`, across the lines rustfmt may have broken them onto.
        let mut signature = rest[name.len()..].to_string();
        let mut next = i + 1;
        while !signature.contains(')') && next < lines.len() {
            signature.push_str(lines[next].trim());
            next += 1;
        }
        let params = signature.trim_start_matches('(').split(')').next().unwrap_or("");
        let params: Vec<&str> = params.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        let takes_only_a_harness = params.len() == 1
            && params[0]
                .split_once(':')
                .is_some_and(|(_, ty)| ty.trim() == "&dyn Harness");
        out.push(AsyncFn {
            line: i + 1,
            name,
            public,
            takes_only_a_harness,
        });
    }
    out
}

#[test]
fn every_contract_check_written_is_listed_once() {
    // The contract's file and its submodules' (src/contract/*.rs).
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut text = std::fs::read_to_string(root.join("contract.rs")).unwrap();
    let mut parts: Vec<_> = std::fs::read_dir(root.join("contract"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    parts.sort();
    for p in parts {
        text.push_str(&std::fs::read_to_string(p).unwrap());
    }
    let written: Vec<String> = async_fns_in(&text)
        .into_iter()
        .filter(|f| f.takes_only_a_harness)
        .map(|f| f.name)
        .collect();
    let mut problems = Vec::new();
    for name in &written {
        match CONTRACT_NAMES.iter().filter(|n| *n == name).count() {
            0 => problems.push(format!(
                "{name} is not in the list of __for_each_contract!, so it never runs"
            )),
            1 => {}
            n => problems.push(format!("{name} is listed {n} times in __for_each_contract!")),
        }
    }
    for name in CONTRACT_NAMES {
        if !written.iter().any(|w| w == name) {
            problems.push(format!(
                "{name} is listed in __for_each_contract! but written nowhere in src/contract.rs or src/contract/"
            ));
        }
    }
    assert!(!CONTRACT_NAMES.is_empty());
    assert!(
        problems.is_empty(),
        "the contract list is out of step:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_scenario_written_is_listed_once_and_the_list_names_only_scenarios() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scenarios");
    let mut written: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in rust_files(&dir) {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, name) in scenarios_in(&text) {
            written.entry(name).or_default().push(format!("{shown}:{line}"));
        }
    }
    let mut listed: BTreeMap<&str, usize> = BTreeMap::new();
    for name in SCENARIO_NAMES {
        *listed.entry(name).or_default() += 1;
    }

    let mut problems = Vec::new();
    for (name, places) in &written {
        if !listed.contains_key(name.as_str()) {
            problems.push(format!(
                "{name} ({}) is not in the list of __for_each_scenario! (src/scenarios/mod.rs), so it never runs; \
                 list it (or, if it is a helper, make it private and give it more than the harness)",
                places.join(", ")
            ));
        }
        if places.len() > 1 {
            problems.push(format!("{name} is written more than once: {}", places.join(", ")));
        }
    }
    for (name, count) in &listed {
        if !written.contains_key(*name) {
            problems.push(format!(
                "{name} is listed in __for_each_scenario! but written nowhere in src/scenarios/"
            ));
        }
        if *count > 1 {
            problems.push(format!("{name} is listed {count} times in __for_each_scenario!"));
        }
    }
    assert!(!SCENARIO_NAMES.is_empty(), "the list of __for_each_scenario! is empty");
    assert!(
        problems.is_empty(),
        "the scenario list is out of step:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_parser_finds_scenarios_and_passes_over_helpers() {
    let text = "\
/// A doc line: pub async fn in_a_comment(h: &dyn Harness)
pub async fn plain(h: &dyn Harness) {
async fn helper(h: &dyn Harness, recipe: Recipe) -> u64 {
async fn private_scenario(h: &dyn Harness) {
pub async fn wrapped(
    h: &dyn Harness,
) {
    let x = async move { 1 };
";
    let names: Vec<String> = scenarios_in(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["plain", "private_scenario", "wrapped"]);
}

/// What etcd's harness lists as not expressible names checks and scenarios of the suite, once each, with a reason.
#[test]
fn what_etcd_cannot_express_is_in_the_suite() {
    use recipes_conformance::scenarios::SCENARIO_NAMES;
    let listed = recipes_conformance::etcd::CANNOT_EXPRESS;
    for (i, (name, why)) in listed.iter().enumerate() {
        assert!(
            CONTRACT_NAMES.contains(name) || SCENARIO_NAMES.contains(name),
            "etcd cannot express {name}, which is not in the suite"
        );
        assert!(why.len() > 20, "{name}: say why etcd cannot express it");
        assert!(!listed[..i].iter().any(|(n, _)| n == name), "{name} is listed twice");
    }
}

#[test]
fn the_peer_layouts_only_scenarios_are_in_the_suite() {
    use recipes_conformance::scenarios::{PEER_LAYOUTS_ONLY, SCENARIO_NAMES};
    for (i, name) in PEER_LAYOUTS_ONLY.iter().enumerate() {
        assert!(
            SCENARIO_NAMES.contains(name),
            "{name} is listed as peer layouts only, but is no scenario"
        );
        assert!(!PEER_LAYOUTS_ONLY[..i].contains(name), "{name} is listed twice");
    }
}
