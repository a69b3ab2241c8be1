//! Validated lock paths.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, PathProblem};

/// A lock path: an absolute ZooKeeper path, validated once.
///
/// # Contract
/// A `LockPath` is absolute, has no trailing `/`, no empty, `.` or `..` component, no character ZooKeeper
/// refuses (NUL, control characters, U+007F–U+009F, U+D800–U+F8FF, U+FFF0–U+FFFF), is at most
/// [`LockPath::MAX_LEN`] bytes, is not `/` and is not under `/zookeeper`. Every lock node lives directly under it.
///
/// ```
/// use recipes_core::LockPath;
/// let p = LockPath::new("/app/orders/42").unwrap();
/// assert_eq!(p.as_str(), "/app/orders/42");
/// assert!(LockPath::new("app/orders").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockPath(Arc<str>);

impl LockPath {
    /// The longest lock path accepted, in bytes. ZooKeeper has no fixed limit of its own short of the packet size;
    /// this bound leaves room for the node names below the path and keeps every request small.
    pub const MAX_LEN: usize = 1024;

    /// Validates `path`.
    ///
    /// # Notable errors
    /// [`Error::InvalidPath`] naming the path and the [`PathProblem`].
    pub fn new(path: impl AsRef<str>) -> Result<Self, Error> {
        let path = path.as_ref();
        match validate(path) {
            Ok(()) => Ok(LockPath(Arc::from(path))),
            Err(problem) => Err(Error::InvalidPath {
                path: display_prefix(path),
                problem,
            }),
        }
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path as the shared string it is kept in.
    pub(crate) fn shared(&self) -> &Arc<str> {
        &self.0
    }

    /// The full path of a child node named `name`.
    pub fn child(&self, name: &str) -> String {
        let mut s = String::with_capacity(self.0.len() + 1 + name.len());
        s.push_str(&self.0);
        s.push('/');
        s.push_str(name);
        s
    }

    /// Every proper ancestor of this path, from the shallowest, excluding `/`.
    pub fn ancestors(&self) -> impl Iterator<Item = &str> {
        self.0.match_indices('/').skip(1).map(move |(i, _)| &self.0[..i])
    }
}

fn display_prefix(path: &str) -> String {
    if path.len() <= 120 {
        return path.to_owned();
    }
    let mut end = 120;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

fn refused_char(c: char) -> bool {
    let u = c as u32;
    u <= 0x1f || (0x7f..=0x9f).contains(&u) || (0xd800..=0xf8ff).contains(&u) || u >= 0xfff0
}

fn validate(path: &str) -> Result<(), PathProblem> {
    if path.is_empty() {
        return Err(PathProblem::Empty);
    }
    if !path.starts_with('/') {
        return Err(PathProblem::Relative);
    }
    if path == "/" {
        return Err(PathProblem::Root);
    }
    if path.len() > LockPath::MAX_LEN {
        return Err(PathProblem::TooLong);
    }
    if path.chars().any(refused_char) {
        return Err(PathProblem::ControlCharacter);
    }
    if path.ends_with('/') {
        return Err(PathProblem::TrailingSlash);
    }
    for component in path[1..].split('/') {
        match component {
            "" => return Err(PathProblem::EmptyComponent),
            "." | ".." => return Err(PathProblem::RelativeComponent),
            _ => {}
        }
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return Err(PathProblem::Reserved);
    }
    Ok(())
}

impl fmt::Display for LockPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl FromStr for LockPath {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        LockPath::new(s)
    }
}

impl TryFrom<&str> for LockPath {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self, Error> {
        LockPath::new(s)
    }
}

impl TryFrom<String> for LockPath {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        LockPath::new(s)
    }
}

impl AsRef<str> for LockPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}
