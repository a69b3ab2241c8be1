//! The trait's requests as etcd's: the transactions of the writes, what a refused one means, keys, and errors.

use etcd_client::{Client, Compare, CompareOp, GetOptions, KvClient, PutOptions, Txn, TxnOp, TxnOpResponse};
use recipes_core::backend::{SessionId, Stat};
use recipes_core::{Error, Result};

use crate::sender::Op;

mod errors;
pub(crate) use errors::{
    credentials_refused_in, error, lease_gone, message, never_sent, overloaded, refused, refused_credentials,
    token_stale,
};

/// A key as a node: its data and stat.
#[derive(Debug)]
pub(crate) struct Node {
    pub data: Vec<u8>,
    pub stat: Stat,
}

pub(crate) fn node(kv: &etcd_client::KeyValue) -> Node {
    Node {
        data: kv.value().to_vec(),
        stat: Stat::new(kv.create_revision(), kv.lease(), 0),
    }
}

/// The sequence key of session `id` (attached to its lease).
pub(crate) fn session_key(id: SessionId) -> String {
    format!("/__recipes/sessions/{id:016x}")
}

/// Calls `call` again while it fails before it was sent, at most 20 times in about a second: the client's channel
/// spreads requests over every member (two chosen at random, the less busy taken), and keeps choosing one that is
/// down among them until it is told it failed (found by the etcd campaign: with one of three members SIGKILLed, a
/// third of zklock's connects failed at once). A request refused for a stale token is sent once more after a new
/// token is asked for (found by review: etcd-client renews it only on `Unauthenticated`, and a JWT made stale by a
/// change of users or roles is refused with `InvalidArgument`, which left a holder unable to release).
pub(crate) async fn unless_unsent<T, F, Fut>(client: &Client, mut call: F) -> std::result::Result<T, etcd_client::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
{
    let mut pause = std::time::Duration::from_millis(5);
    let mut refreshed = false;
    for _ in 0..20 {
        match call().await {
            Err(e) if never_sent(&e) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(80));
            }
            Err(e) if token_stale(&e) && !refreshed => {
                refreshed = true;
                // The refresh's own failure says why (found by review: a member down or an election during the
                // refresh is no refusal of the credentials, and must not end the session).
                client.refresh_token().await?;
            }
            r => return r,
        }
    }
    call().await
}

/// The largest reply this backend decodes: etcd's own Go client's default (`MaxCallRecvMsgSize`, 2 GiB less a byte),
/// not tonic's 4 MiB. A listing reads every key under a lock path's prefix, at any depth (etcd has no hierarchy), so a
/// path with many keys nested under it answered more than 4 MiB: the reply of a create and its listing could not be
/// decoded and was taken for a lost one, every listing that could find the key failed alike, and each attempt of the
/// acquire left its key on a live session (found by review, helper-100).
const RECEIVE_LIMIT: usize = i32::MAX as usize;

/// `client`'s key-value client, decoding replies up to [`RECEIVE_LIMIT`] (every read and write of this backend).
pub(crate) fn kv(client: &Client) -> KvClient {
    client.kv_client().max_decoding_message_size(RECEIVE_LIMIT)
}

/// Makes session `id`'s sequence key (version 1), attached to its lease.
pub(crate) async fn make_session_key(client: &Client, key: &str, id: SessionId) -> Result<()> {
    let txn = Txn::new()
        .when(vec![Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then(vec![TxnOp::put(key, "", Some(PutOptions::new().with_lease(id)))]);
    let resp = unless_unsent(client, || {
        let (mut kv, t) = (kv(client), txn.clone());
        async move { kv.txn(t).await }
    })
    .await
    .map_err(error)?;
    if resp.succeeded() {
        Ok(())
    } else {
        Err(Error::Backend(format!("the session key {key} exists already")))
    }
}

/// The prefix of `path`'s children's keys.
pub(crate) fn children_prefix(path: &str) -> String {
    if path.ends_with('/') {
        path.to_owned()
    } else {
        format!("{path}/")
    }
}

/// The end of the range of keys that start with `prefix` (its last byte below 0xff incremented).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// A key's name under `prefix`, when it is a direct child.
pub(crate) fn child_name(prefix: &str, key: &[u8]) -> Option<String> {
    let rest = key.strip_prefix(prefix.as_bytes())?;
    if rest.is_empty() || rest.contains(&b'/') {
        return None;
    }
    String::from_utf8(rest.to_vec()).ok()
}

/// The names of the direct children under `prefix` among `kvs`, in the order of their creation (ascending create
/// revision: `ChildOrder::Creation`, decision 0068).
pub(crate) fn children_by_creation(prefix: &str, kvs: &[etcd_client::KeyValue]) -> Vec<String> {
    let mut found: Vec<(i64, String)> = kvs
        .iter()
        .filter_map(|kv| Some((kv.create_revision(), child_name(prefix, kv.key())?)))
        .collect();
    found.sort_unstable();
    found.into_iter().map(|(_, name)| name).collect()
}

/// A write's conditions, its operations, and the reads that say why it was refused.
pub(crate) fn write_txn(op: &Op, session: SessionId) -> (Vec<Compare>, Vec<TxnOp>, Vec<TxnOp>) {
    match op {
        Op::Create { path, data, ephemeral } | Op::CreateList { path, data, ephemeral } => {
            let options = ephemeral.then(|| PutOptions::new().with_lease(session));
            (
                vec![Compare::create_revision(path.as_str(), CompareOp::Equal, 0)],
                vec![TxnOp::put(path.as_str(), data.clone(), options)],
                vec![TxnOp::get(path.as_str(), None)],
            )
        }
        Op::Set { path, data, version } => {
            // ZooKeeper's data version is 0 until the data is first set; etcd's version is 1 at the create.
            let check = match version {
                Some(v) => Compare::version(path.as_str(), CompareOp::Equal, i64::from(*v) + 1),
                None => Compare::version(path.as_str(), CompareOp::Greater, 0),
            };
            (
                vec![check],
                vec![TxnOp::put(
                    path.as_str(),
                    data.clone(),
                    Some(PutOptions::new().with_ignore_lease()),
                )],
                vec![TxnOp::get(path.as_str(), None)],
            )
        }
        Op::Delete {
            paths,
            mark,
            leased,
            created,
        } => {
            // Each key exists, and has no key under it: ZooKeeper refuses to delete a node with children, and a flat
            // key space must not delete a "parent" from under its children either.
            // A key under it that the same transaction deletes is no obstacle (ZooKeeper's `multi` deletes in order):
            // the check covers the ranges between those keys.
            let mut checks = Vec::new();
            let mut reads = Vec::new();
            if let (Some(c), Some(p)) = (created, paths.first()) {
                checks.push(Compare::create_revision(p.as_str(), CompareOp::Equal, *c));
            }
            for p in paths {
                let under = children_prefix(p);
                checks.push(Compare::version(p.as_str(), CompareOp::Greater, 0));
                if leased.contains(p) {
                    // Still attached to a lease: the keys under it are no children of it.
                    checks.push(Compare::lease(p.as_str(), CompareOp::NotEqual, 0));
                    reads.push(TxnOp::get(p.as_str(), None));
                    reads.push(TxnOp::get(
                        under.as_str(),
                        Some(GetOptions::new().with_prefix().with_count_only()),
                    ));
                    continue;
                }
                let mut going: Vec<&str> = paths
                    .iter()
                    .map(String::as_str)
                    .filter(|k| k.starts_with(under.as_str()))
                    .collect();
                going.sort_unstable();
                let mut from = under.clone().into_bytes();
                for k in going {
                    if from.as_slice() < k.as_bytes() {
                        checks.push(Compare::version(from.clone(), CompareOp::Equal, 0).with_range(k));
                    }
                    from = [k.as_bytes(), b"\0"].concat();
                }
                checks.push(Compare::version(from, CompareOp::Equal, 0).with_range(prefix_end(&under)));
                reads.push(TxnOp::get(p.as_str(), None));
                reads.push(TxnOp::get(
                    under.as_str(),
                    Some(GetOptions::new().with_prefix().with_count_only()),
                ));
            }
            let mut writes = Vec::new();
            if let (Some(m), Some(p)) = (mark, paths.first()) {
                writes.push(TxnOp::put(
                    p.as_str(),
                    m.clone(),
                    Some(PutOptions::new().with_ignore_lease()),
                ));
            }
            writes.extend(paths.iter().map(|p| TxnOp::delete(p.as_str(), None)));
            (checks, writes, reads)
        }
        _ => (Vec::new(), Vec::new(), Vec::new()),
    }
}

/// Why a write's own conditions failed, from its reads.
pub(crate) fn refusal(op: &Op, answers: &[TxnOpResponse]) -> Error {
    let exists = |i: usize| matches!(answers.get(i), Some(TxnOpResponse::Get(g)) if !g.kvs().is_empty());
    match op {
        Op::Create { path, .. } | Op::CreateList { path, .. } => Error::NodeExists(path.clone()),
        Op::Set {
            path, version: Some(_), ..
        } if exists(0) => Error::Refused(format!("{path}: not at the data version asked")),
        Op::Set { path, .. } => Error::NoNode(path.clone()),
        Op::Delete {
            paths, leased, created, ..
        } => {
            // The first delete that fails is the transaction's error, as in ZooKeeper's `multi`.
            let made_by = |i: usize| match answers.get(i) {
                Some(TxnOpResponse::Get(g)) => g.kvs().first().map(etcd_client::KeyValue::create_revision),
                _ => None,
            };
            if let (Some(c), Some(p)) = (created, paths.first()) {
                if made_by(0).is_some_and(|r| r != *c) {
                    return Error::NodeExists(p.clone());
                }
            }
            let under_count = |i: usize| match answers.get(i) {
                Some(TxnOpResponse::Get(g)) => g.count(),
                _ => 0,
            };
            for (i, p) in paths.iter().enumerate() {
                if !exists(2 * i) {
                    return Error::NoNode(p.clone());
                }
                let under = children_prefix(p);
                let going = paths.iter().filter(|k| k.starts_with(under.as_str())).count();
                if !leased.contains(p) && under_count(2 * i + 1) > i64::try_from(going).unwrap_or(i64::MAX) {
                    return Error::NotEmpty(p.clone());
                }
            }
            Error::Backend("a delete refused with every key there".to_owned())
        }
        _ => Error::Backend("a read refused as a write".to_owned()),
    }
}

/// Whether the key `path` of a refused delete was attached to a lease, by the delete's own reads.
pub(crate) fn leased_in_refusal(op: &Op, path: &str, answers: &[TxnOpResponse]) -> bool {
    let Op::Delete { paths, .. } = op else { return false };
    let Some(i) = paths.iter().position(|p| p == path) else {
        return false;
    };
    matches!(answers.get(2 * i), Some(TxnOpResponse::Get(g)) if g.kvs().first().is_some_and(|kv| kv.lease() != 0))
}
