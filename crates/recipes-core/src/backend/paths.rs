//! The paths a backend accepts: ZooKeeper's rules, so that every backend refuses the same malformed paths.

use crate::{Error, Result};

/// Checks a node's path as ZooKeeper's client does before it sends any request: absolute, no empty name (`//`), no
/// `.` or `..` name before a `/`, no trailing `/`, none of the characters ZooKeeper refuses (controls,
/// `U+007F`–`U+009F`, `U+D800`–`U+F8FF`, `U+FFF0`–`U+FFFF`). `/` itself passes. The in-memory and etcd backends run
/// it on every request (the contract's `a_malformed_path_is_refused_by_every_request`). A last name `.` or `..` passes
/// here, as in ZooKeeper's client; its server refuses to create or set such a node ([`check_create_path`]) and finds
/// it absent otherwise.
///
/// # Errors
/// [`Error::Refused`], naming the path and the rule it breaks.
///
/// ```
/// use recipes_core::backend::check_path;
/// assert!(check_path("/locks/job").is_ok());
/// assert!(check_path("/").is_ok());
/// for bad in ["", "locks", "/locks/", "/locks//job", "/locks/./job", "/locks/a\u{0}b"] {
///     assert!(matches!(check_path(bad), Err(recipes_core::Error::Refused(_))), "{bad:?}");
/// }
/// ```
pub fn check_path(path: &str) -> Result<()> {
    check(path, false)
}

/// Checks the path of a create as ZooKeeper does: [`check_path`]'s rules, not `/`, and its server's
/// ([`check_written_path`]). With `sequence_appended` (a sequential create where the backend appends a sequence,
/// [`ChildOrder::Sequence`](super::ChildOrder::Sequence)) the path is a prefix: it may end in `/` (ZooKeeper then names
/// the node by its sequence alone) or in `.` (the sequence follows it), as ZooKeeper appends the sequence before its
/// server checks the path.
///
/// # Errors
/// [`Error::Refused`], naming the path and the rule it breaks.
///
/// ```
/// use recipes_core::backend::check_create_path;
/// assert!(check_create_path("/locks/job-", true).is_ok());
/// assert!(check_create_path("/locks/job/", true).is_ok());
/// assert!(check_create_path("/locks/.", true).is_ok());
/// for bad in ["/", "/locks/job/", "/locks/.", "/locks/..", "/locks//job", "/locks/\u{1f600}"] {
///     assert!(check_create_path(bad, false).is_err(), "{bad:?}");
/// }
/// ```
pub fn check_create_path(path: &str, sequence_appended: bool) -> Result<()> {
    check(path, sequence_appended)?;
    create_rules(path, sequence_appended)
}

/// What a create's path must be beyond [`check_path`]'s rules: not `/`, and its server's rules, on the path with its
/// sequence when one is appended (a digit ends it then).
fn create_rules(path: &str, sequence_appended: bool) -> Result<()> {
    if path == "/" {
        return Err(Error::Refused("\"/\": can not create root node".to_owned()));
    }
    if sequence_appended {
        return beyond_utf16(path);
    }
    check_written_path(path)
}

/// The rules of ZooKeeper's server for a node to create or set, beyond its client's ([`check_path`]): its last name is
/// neither `.` nor `..`, and no character of the path is beyond `U+FFFF` (the server reads paths as UTF-16, where
/// such a character is a pair of surrogates, which it refuses).
///
/// # Errors
/// [`Error::Refused`], naming the path.
///
/// ```
/// use recipes_core::backend::check_written_path;
/// assert!(check_written_path("/locks/job").is_ok());
/// assert!(check_written_path("/locks/..").is_err());
/// assert!(check_written_path("/locks/\u{1f600}").is_err());
/// ```
pub fn check_written_path(path: &str) -> Result<()> {
    if path.ends_with("/.") || path.ends_with("/..") {
        return Err(Error::Refused(format!("{path:?}: relative path is not allowed")));
    }
    beyond_utf16(path)
}

fn beyond_utf16(path: &str) -> Result<()> {
    if !path.is_ascii() && path.chars().any(|c| c > '\u{ffff}') {
        return Err(Error::Refused(format!("{path:?}: unsupported characters in path")));
    }
    Ok(())
}

/// Checks paths as [`check_path`] and [`check_create_path`] do, remembering the last parent path that passed: a path
/// under it costs a look at its last name only. A backend checks every request's path, and most of a lock's requests
/// are under its lock path (a full check of each was about a tenth of an in-memory acquire + release).
///
/// ```
/// use recipes_core::backend::PathChecker;
/// let mut paths = PathChecker::default();
/// assert!(paths.check("/locks/job/a", false).is_ok());
/// assert!(paths.check("/locks/job/b", false).is_ok()); // the parent passed: its last name alone is looked at
/// assert!(paths.check("/locks/job/a\u{1}", false).is_err());
/// assert!(paths.check("/locks/job/", false).is_err());
/// assert!(paths.check("/locks/job/", true).is_ok());
/// ```
#[derive(Debug, Default)]
pub struct PathChecker {
    parent: String,
}

impl PathChecker {
    /// [`check_create_path`]'s rules.
    ///
    /// # Errors
    /// [`Error::Refused`], naming the path and the rule it breaks.
    pub fn check_create(&mut self, path: &str, sequence_appended: bool) -> Result<()> {
        self.check(path, sequence_appended)?;
        create_rules(path, sequence_appended)
    }

    /// [`check_path`]'s rules; with `sequence_appended`, the path may end in `/`, as a sequential create's prefix may
    /// ([`check_create_path`]).
    ///
    /// # Errors
    /// [`Error::Refused`], naming the path and the rule it breaks.
    pub fn check(&mut self, path: &str, sequence_appended: bool) -> Result<()> {
        // The parent passed, and so did every name in it: the path itself, or a name under it, is all there is to see.
        let known = self.parent.as_str();
        if !known.is_empty() && path.starts_with(known) {
            match path.as_bytes().get(known.len()) {
                None => return Ok(()),
                Some(b'/') if name_passes(&path[known.len() + 1..], sequence_appended) => return Ok(()),
                _ => {}
            }
        }
        check(path, sequence_appended)?;
        if let Some(at) = path.bytes().rposition(|b| b == b'/').filter(|at| *at > 0) {
            self.parent.clear();
            self.parent.push_str(&path[..at]);
        }
        Ok(())
    }
}

/// Whether `name` passes as the last name of a path (no `/` in it): in one pass that the compiler vectorises (every
/// request runs it; an early exit kept it byte by byte).
fn name_passes(name: &str, sequence_appended: bool) -> bool {
    let (mut bad, mut high) = (false, false);
    for &b in name.as_bytes() {
        bad |= control(b) | (b == b'/');
        high |= b >= 0x80;
    }
    (sequence_appended || !name.is_empty()) && !bad && (!high || !name.chars().any(refused_char))
}

/// An ASCII control, which ZooKeeper refuses in a path.
fn control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// A character ZooKeeper refuses in a path, beyond the ASCII controls.
fn refused_char(c: char) -> bool {
    matches!(u32::from(c), 0x80..=0x9f | 0xd800..=0xf8ff | 0xfff0..=0xffff)
}

fn check(path: &str, trailing_slash: bool) -> Result<()> {
    let refuse = |why: &str| Err(Error::Refused(format!("{path:?}: {why}")));
    let bytes = path.as_bytes();
    match bytes {
        [] => return refuse("path cannot be empty"),
        [b'/'] => return Ok(()),
        [b'/', ..] => {}
        _ => return refuse("path must start with '/'"),
    }
    let mut start = 1;
    for (i, &b) in bytes.iter().enumerate().skip(1) {
        if control(b) {
            return refuse("unsupported characters in path");
        }
        if b == b'/' {
            match &path[start..i] {
                "" => return refuse("empty node is not allowed in path"),
                "." | ".." => return refuse("relative path is not allowed"),
                _ => start = i + 1,
            }
        }
    }
    if start == bytes.len() && !trailing_slash {
        return refuse("path must not end with '/'");
    }
    if !path.is_ascii() && path.chars().any(refused_char) {
        return refuse("unsupported characters in path");
    }
    Ok(())
}
