//! Who may touch the nodes the library creates: lock nodes, their parents and the chroot.

use std::fmt;
use std::str::FromStr;

use recipes_core::Error;

use crate::zk;

/// The ACL of every node the backend creates (lock nodes, the lock paths and their parents, a missing chroot).
///
/// ZooKeeper checks a delete against the ACL of the node's *parent*: a lock path created [`Creator`](Self::Creator)
/// keeps every other identity from deleting a holder's node (and so letting a second holder in), and from contending.
/// A path that exists already keeps its own ACL; the backend does not change it.
///
/// ```
/// use recipes_zk::{NodeAcl, ZkOptions};
/// let options = ZkOptions::new("127.0.0.1:2181").digest_auth("app:secret").acl(NodeAcl::Creator);
/// assert_eq!("creator-read".parse::<NodeAcl>().unwrap(), NodeAcl::CreatorAnyoneRead);
/// // A list, as zkCli writes it: scheme:id:permissions (c create, d delete, r read, w write, a admin).
/// let list: NodeAcl = "digest:app:HASH=:cdrwa,world:anyone:r".parse().unwrap();
/// assert!(matches!(list, NodeAcl::List(ref l) if l.len() == 2));
/// assert!("digest:app:cdrwx".parse::<NodeAcl>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum NodeAcl {
    /// `world:anyone` may do anything (the default, as Curator's default ACL provider).
    #[default]
    Open,
    /// Only clients authenticated as the creating session was (ZooKeeper's `auth` scheme): every client of the
    /// application uses the same credentials; other clients can neither contend, nor delete, nor read. Needs
    /// [`ZkOptions::digest_auth`](crate::ZkOptions::digest_auth).
    Creator,
    /// As [`Creator`](Self::Creator), and anyone may read (monitoring and `zklock inspect` work without the
    /// credentials).
    CreatorAnyoneRead,
    /// This list of ACL entries.
    List(Vec<zk::Acl>),
}

impl NodeAcl {
    /// Whether the ACL names the creator's identity, which ZooKeeper refuses for an unauthenticated session.
    pub(crate) fn needs_auth(&self) -> bool {
        match self {
            NodeAcl::Open => false,
            NodeAcl::Creator | NodeAcl::CreatorAnyoneRead => true,
            NodeAcl::List(l) => l.iter().any(|a| a.scheme() == "auth"),
        }
    }

    /// The entries to create nodes with.
    pub(crate) fn entries(&self) -> Vec<zk::Acl> {
        let creator = || zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("auth", ""));
        match self {
            NodeAcl::Open => zk::Acls::anyone_all().to_vec(),
            NodeAcl::Creator => vec![creator()],
            NodeAcl::CreatorAnyoneRead => vec![creator(), zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone())],
            NodeAcl::List(l) => l.clone(),
        }
    }
}

impl fmt::Display for NodeAcl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeAcl::Open => f.write_str("open"),
            NodeAcl::Creator => f.write_str("creator"),
            NodeAcl::CreatorAnyoneRead => f.write_str("creator-read"),
            NodeAcl::List(l) => {
                let entries: Vec<String> = l
                    .iter()
                    .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), letters(a.permission())))
                    .collect();
                f.write_str(&entries.join(","))
            }
        }
    }
}

/// The permission letters zkCli uses.
const LETTERS: [(char, zk::Permission); 5] = [
    ('c', zk::Permission::CREATE),
    ('d', zk::Permission::DELETE),
    ('r', zk::Permission::READ),
    ('w', zk::Permission::WRITE),
    ('a', zk::Permission::ADMIN),
];

fn letters(p: zk::Permission) -> String {
    LETTERS.iter().filter(|(_, bit)| p.has(*bit)).map(|(c, _)| *c).collect()
}

impl FromStr for NodeAcl {
    type Err = Error;

    /// `open`, `creator`, `creator-read`, or a comma-separated list of `scheme:id:permissions` (`world:anyone:r`,
    /// `digest:user:base64hash:cdrwa`, `ip:10.0.0.0/8:cdrwa`, `auth::cdrwa`).
    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |why: String| {
            Error::InvalidArgument(format!(
                "ACL {s:?}: {why} (expected open, creator, creator-read, or scheme:id:permissions[,…] with \
                 permissions from cdrwa)"
            ))
        };
        match s.trim() {
            "open" => return Ok(NodeAcl::Open),
            "creator" => return Ok(NodeAcl::Creator),
            "creator-read" => return Ok(NodeAcl::CreatorAnyoneRead),
            _ => {}
        }
        let mut list = Vec::new();
        for entry in s.split(',').map(str::trim) {
            // The id may hold colons (digest:user:hash): the scheme is before the first, the permissions after the
            // last.
            let Some((scheme, (id, perms))) = entry
                .split_once(':')
                .and_then(|(scheme, rest)| Some((scheme, rest.rsplit_once(':')?)))
                .filter(|(scheme, _)| !scheme.is_empty())
            else {
                return Err(bad(format!("{entry:?} is not scheme:id:permissions")));
            };
            let mut permission = zk::Permission::NONE;
            for c in perms.chars() {
                match LETTERS.iter().find(|(l, _)| *l == c) {
                    Some((_, bit)) => permission = permission | *bit,
                    None => return Err(bad(format!("unknown permission {c:?} in {entry:?}"))),
                }
            }
            if permission == zk::Permission::NONE {
                return Err(bad(format!("{entry:?} grants nothing")));
            }
            list.push(zk::Acl::new(permission, zk::AuthId::new(scheme, id)));
        }
        Ok(NodeAcl::List(list))
    }
}
