//! The trait's requests as the sender runs them, and their answers.

use recipes_core::backend::{CreateMode, Created};
use recipes_core::{Error, Result};

use crate::ops::Node;

/// A request of the trait, as the sender runs it.
#[derive(Debug)]
pub(crate) enum Op {
    /// A key: ephemeral (attached to the lease) or not.
    Create {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
    },
    /// A key, and its parent's children listed after it, in one transaction (`create_and_list`).
    CreateList {
        path: String,
        data: Vec<u8>,
        ephemeral: bool,
    },
    /// A container parent without data: etcd has no hierarchy (decision 0065, point 4), so nothing is written.
    Container {
        path: String,
    },
    Children(String),
    Get(String),
    Sync,
    /// Overwrites a key's data, keeping its lease; only at ZooKeeper's data `version` when given.
    Set {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    /// Deletes keys, all or none; with `mark`, writes it to the one key first, in the same transaction. Keys under
    /// one of them refuse its delete (`NotEmpty`, as ZooKeeper refuses to delete a node with children), except under
    /// one of `leased`: keys found attached to a lease, which ZooKeeper's ephemerals never have children, so a key
    /// under one is another lock path's, flat on etcd (found by review: an exclusive node `P/lock` beside a lock
    /// nested at `P/lock` could not be released). With `created`, the first key is deleted only if that write made
    /// it (its create revision): a key of that name made by another write is refused (`NodeExists`).
    Delete {
        paths: Vec<String>,
        mark: Option<Vec<u8>>,
        leased: Vec<String>,
        created: Option<i64>,
    },
}

impl Op {
    pub fn create(path: &str, data: &[u8], mode: CreateMode) -> Result<Op> {
        let path = path.to_owned();
        Ok(match mode {
            CreateMode::Persistent => Op::Create {
                path,
                data: data.to_vec(),
                ephemeral: false,
            },
            // A sequential node is made with the name as given: etcd orders a path's children by creation (its create
            // revision), and lists them in that order (`ChildOrder::Creation`, decision 0068).
            CreateMode::Ephemeral | CreateMode::EphemeralSequential => Op::Create {
                path,
                data: data.to_vec(),
                ephemeral: true,
            },
            // A container with data (a native semaphore's permit count) is a persistent key: the count must stay
            // while any claim is there, and etcd has no container to reap it (decision 0068). Without data, nothing.
            CreateMode::Container if !data.is_empty() => Op::Create {
                path,
                data: data.to_vec(),
                ephemeral: false,
            },
            CreateMode::Container => Op::Container { path },
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "a create mode etcd has no counterpart of ({path})"
                )))
            }
        })
    }

    pub fn set(path: &str, data: &[u8], version: Option<i32>) -> Op {
        Op::Set {
            path: path.to_owned(),
            data: data.to_vec(),
            version,
        }
    }

    pub fn delete(paths: Vec<String>, mark: Option<Vec<u8>>) -> Op {
        Op::Delete {
            paths,
            mark,
            leased: Vec::new(),
            created: None,
        }
    }

    /// A delete of `path` only if the write `created` made it.
    pub fn delete_created(path: &str, created: i64) -> Op {
        Op::Delete {
            paths: vec![path.to_owned()],
            mark: None,
            leased: Vec::new(),
            created: Some(created),
        }
    }

    /// The checks of its paths ZooKeeper makes (`Refused` for a malformed one): etcd takes any key, but a key that is
    /// no path breaks the tree the backend keeps on it (`/p/` is a child of `/p`, which can then never be deleted).
    pub fn check_paths(&self) -> Result<()> {
        use recipes_core::backend::{check_create_path, check_path, check_written_path};
        match self {
            // Names as given: no sequence is appended on etcd.
            Op::Create { path, .. } | Op::CreateList { path, .. } | Op::Container { path } => {
                check_create_path(path, false)
            }
            Op::Set { path, .. } => check_path(path).and_then(|()| check_written_path(path)),
            Op::Children(path) | Op::Get(path) => check_path(path),
            Op::Delete { paths, .. } => paths.iter().try_for_each(|p| match p.as_str() {
                "/" => Err(Error::Refused("\"/\": cannot delete the root".to_owned())),
                _ => check_path(p),
            }),
            Op::Sync => Ok(()),
        }
    }

    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Op::Create { .. } | Op::CreateList { .. } | Op::Set { .. } | Op::Delete { .. }
        )
    }

    /// This create, with its parent's children listed after it in the same transaction.
    pub fn and_list(self) -> Op {
        match self {
            Op::Create { path, data, ephemeral } => Op::CreateList { path, data, ephemeral },
            other => other,
        }
    }
}

/// A request's answer.
#[derive(Debug)]
pub(crate) enum Reply {
    Created(Created),
    CreatedListed(Created, Vec<String>),
    Children(Vec<String>),
    /// A key, and the revision the read saw the store at.
    Node(Option<Node>, i64),
    Done,
}

/// An answer of the wrong kind (a bug of this crate).
pub(crate) fn unexpected(r: &Reply) -> Error {
    Error::Backend(format!("the etcd backend answered a request with {r:?}"))
}
