//! Lock paths: what is accepted, what is refused and why (through the public API).

#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use recipes_core::{Error, LockPath, PathProblem};

fn problem(p: &str) -> Option<PathProblem> {
    match LockPath::new(p) {
        Ok(_) => None,
        Err(Error::InvalidPath { problem, .. }) => Some(problem),
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn table() {
    let long = format!("/{}", "a".repeat(LockPath::MAX_LEN));
    let cases: &[(&str, Option<PathProblem>)] = &[
        ("/a", None),
        ("/a/b-c_d.e/f", None),
        ("/zookeeperish", None),
        ("/ünïcode/ok", None),
        ("", Some(PathProblem::Empty)),
        ("a/b", Some(PathProblem::Relative)),
        ("/", Some(PathProblem::Root)),
        ("/a/", Some(PathProblem::TrailingSlash)),
        ("/a//b", Some(PathProblem::EmptyComponent)),
        ("/a/./b", Some(PathProblem::RelativeComponent)),
        ("/a/..", Some(PathProblem::RelativeComponent)),
        ("/a\0b", Some(PathProblem::ControlCharacter)),
        ("/a\nb", Some(PathProblem::ControlCharacter)),
        ("/a\u{7f}", Some(PathProblem::ControlCharacter)),
        ("/a\u{fff5}", Some(PathProblem::ControlCharacter)),
        ("/zookeeper", Some(PathProblem::Reserved)),
        ("/zookeeper/quota", Some(PathProblem::Reserved)),
        (&long, Some(PathProblem::TooLong)),
    ];
    for (path, want) in cases {
        assert_eq!(problem(path), *want, "path {path:?}");
    }
}

#[test]
fn error_names_path_and_reason() {
    let e = LockPath::new("/a//b").unwrap_err().to_string();
    assert!(e.contains("/a//b") && e.contains("empty component"), "{e}");
}

#[test]
fn ancestors() {
    let p = LockPath::new("/a/b/c").unwrap();
    assert_eq!(p.ancestors().collect::<Vec<_>>(), vec!["/a", "/a/b"]);
    assert_eq!(p.child("x"), "/a/b/c/x");
    assert_eq!(LockPath::new("/a").unwrap().ancestors().count(), 0);
}

proptest! {
    #[test]
    fn never_panics_and_accepted_paths_are_clean(s in "\\PC*|[/a-z.\\x00-\\x1f]{0,40}") {
        if let Ok(p) = LockPath::new(&s) {
            prop_assert!(p.as_str().starts_with('/'));
            prop_assert!(!p.as_str().ends_with('/'));
            prop_assert!(!p.as_str().contains("//"));
            prop_assert!(p.as_str().split('/').skip(1).all(|c| c != "." && c != ".."));
        }
    }
}
