//! One session's requests, one at a time in the order they were issued, each write guarded by the session's sequence
//! key (see the crate's documentation).

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use recipes_core::backend::{Created, SessionId, SessionState, SessionStatus};
use recipes_core::{Error, Result};
use std::sync::Weak;

use tokio::sync::{mpsc, oneshot, watch};
use tracing::warn;

use crate::ops;
pub(crate) use crate::request::{unexpected, Op, Reply};
use crate::session::Shared;

struct Job {
    session: SessionId,
    op: Op,
    reply: Option<oneshot::Sender<Result<Reply>>>,
}

enum Msg {
    Job(Job),
    /// A new session: its lease id; answered once its sequence key exists.
    Session(SessionId, oneshot::Sender<Result<()>>),
    /// The backend is closed: its lease is revoked once the requests queued before are run, and every request queued
    /// after fails with `Closed`; answered once the revoke was tried.
    Close(SessionId, oneshot::Sender<()>),
}

/// The queue of one backend's requests.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    tx: mpsc::UnboundedSender<Msg>,
}

impl Sender {
    /// Starts the sender's task on `rt`; it tells `shared` of a broken connection (see [`Shared::suspend`]).
    pub fn start(
        client: Client,
        status: watch::Receiver<SessionStatus>,
        shared: Weak<Shared>,
        rt: &tokio::runtime::Handle,
    ) -> Sender {
        let (tx, rx) = mpsc::unbounded_channel();
        rt.spawn(run(client, status, shared, rx));
        Sender { tx }
    }

    /// Queues `op` for `session` now, and waits for its answer. Dropping the future does not take it back.
    pub async fn call(&self, session: SessionId, op: Op) -> Result<Reply> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Job(Job {
                session,
                op,
                reply: Some(reply),
            }))
            .map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }

    /// Queues `op` for `session` now; its outcome is not reported.
    pub fn send(&self, session: SessionId, op: Op) {
        let _ = self.tx.send(Msg::Job(Job {
            session,
            op,
            reply: None,
        }));
    }

    /// Closes the backend behind the requests already queued: revokes lease `id` (trying for three seconds). The
    /// receiver is answered once the revoke was tried.
    pub fn close(&self, id: SessionId) -> oneshot::Receiver<()> {
        let (done, answer) = oneshot::channel();
        let _ = self.tx.send(Msg::Close(id, done));
        answer
    }

    /// Starts session `id` (a lease just granted): makes its sequence key.
    pub async fn new_session(&self, id: SessionId) -> Result<()> {
        let (done, answer) = oneshot::channel();
        self.tx.send(Msg::Session(id, done)).map_err(|_| Error::Closed)?;
        answer.await.map_err(|_| Error::Closed)?
    }
}

/// The sender's state for the current session.
struct Seq {
    session: SessionId,
    key: String,
    /// The sequence key's version the next write expects.
    version: i64,
    /// A write's reply was lost: the sequence must be sealed before anything else is sent.
    unsure: bool,
}

impl Seq {
    /// The guard of every request: the sequence is where this backend expects it.
    fn guard(&self) -> Compare {
        Compare::version(self.key.clone(), CompareOp::Equal, self.version)
    }

    /// A write's step of the sequence (the key stays on the session's lease).
    fn step(&self) -> TxnOp {
        TxnOp::put(self.key.clone(), "", Some(PutOptions::new().with_lease(self.session)))
    }

    /// The read of the sequence in a refused request's other branch.
    fn read_back(&self) -> TxnOp {
        TxnOp::get(self.key.clone(), None)
    }

    /// Where a refused request found the sequence (its other branch's first answer): the session's end when the key
    /// is gone with the lease.
    fn found(answers: &[TxnOpResponse]) -> Result<i64> {
        match answers.first() {
            Some(TxnOpResponse::Get(g)) => g.kvs().first().map(|kv| kv.version()),
            _ => None,
        }
        .ok_or(Error::SessionExpired)
    }
}

async fn run(
    client: Client,
    status: watch::Receiver<SessionStatus>,
    shared: Weak<Shared>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
) {
    let mut seq: Option<Seq> = None;
    let mut closed = false;
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Close(id, done) => {
                closed = true;
                let _ =
                    tokio::time::timeout(std::time::Duration::from_secs(3), crate::session::revoke(&client, id)).await;
                let _ = done.send(());
            }
            Msg::Session(id, done) => {
                let key = ops::session_key(id);
                let r = ops::make_session_key(&client, &key, id).await;
                seq = r.as_ref().ok().map(|()| Seq {
                    session: id,
                    key,
                    version: 1,
                    unsure: false,
                });
                let _ = done.send(r);
            }
            Msg::Job(job) => {
                let now = *status.borrow();
                let r = match &mut seq {
                    // Queued after the close (those queued before it run, though the status already says closed).
                    _ if closed => Err(Error::Closed),
                    Some(s)
                        if s.session == job.session && job.session == now.id && now.state != SessionState::Expired =>
                    {
                        run_job(&client, s, &job.op).await
                    }
                    _ => Err(Error::SessionExpired),
                };
                // Before the caller hears of it: it then waits for the connection, or for the next session.
                match (&r, shared.upgrade()) {
                    (Err(Error::ConnectionLoss), Some(shared)) => shared.suspend(job.session),
                    (Err(Error::SessionExpired), Some(shared)) => shared.gone(job.session),
                    (Err(Error::AuthenticationFailed { .. }), Some(shared)) => shared.gone(job.session),
                    _ => {}
                }
                if let Some(reply) = job.reply {
                    let _ = reply.send(r);
                }
            }
        }
    }
}

async fn run_job(client: &Client, s: &mut Seq, op: &Op) -> Result<Reply> {
    if s.unsure {
        seal(client, s).await?;
    }
    if matches!(op, Op::Container { .. } | Op::Delete { mark: Some(_), .. }) || has_duplicate(op) {
        // Answered here, without a request of its own: first the guard alone, so that an ended session fails as
        // every other request does (found by review).
        guard_only(client, s).await?;
    }
    if let Op::Delete {
        paths, mark: Some(_), ..
    } = op
    {
        return Err(Error::Refused(format!(
            "{}: etcd cannot write and delete one key in one transaction (its \"duplicate key\" rule); the release's \
             mark needs another form on etcd",
            paths.first().map_or("", String::as_str)
        )));
    }
    if let Op::Delete { paths, .. } = op {
        // etcd refuses a transaction that names a key twice; ZooKeeper's `multi` fails on the second delete of one
        // node (it is gone by then), and so applies nothing: the same answer, without sending.
        if let Some((_, p)) = paths.iter().enumerate().find(|(i, p)| paths[..*i].contains(p)) {
            return Err(Error::NoNode(p.clone()));
        }
    }
    if let Op::Container { path } = op {
        return Ok(Reply::Created(Created {
            path: path.clone(),
            czxid: 0,
        }));
    }
    // Every request, reads included, is guarded by the session's sequence: a read on a lease etcd has revoked fails
    // as the session's end rather than answer (found by review: reads answered on a revoked lease).
    let write = op.is_write();
    let (checks, mut then, reads) = if write {
        let (checks, writes, reads) = ops::write_txn(op, s.session);
        let mut then = vec![s.step()];
        then.extend(writes);
        (checks, then, reads)
    } else {
        (Vec::new(), read_ops(op), Vec::new())
    };
    let listed_at = if let Op::CreateList { path, .. } = op {
        let prefix = ops::children_prefix(recipes_core::backend::parent_path(path));
        then.push(TxnOp::get(
            prefix.as_str(),
            Some(GetOptions::new().with_prefix().with_keys_only()),
        ));
        Some(prefix)
    } else {
        None
    };
    let mut when = vec![s.guard()];
    when.extend(checks);
    let mut otherwise = vec![s.read_back()];
    otherwise.extend(reads);
    let txn = Txn::new().when(when).and_then(then).or_else(otherwise);
    match ops::unless_unsent(client, || {
        let (mut kv, t) = (ops::kv(client), txn.clone());
        async move { kv.txn(t).await }
    })
    .await
    {
        Ok(resp) if resp.succeeded() => {
            if write {
                s.version += 1;
            }
            let revision = resp.header().map_or(0, |h| h.revision());
            let answers = resp.op_responses();
            Ok(match op {
                Op::Create { path, .. } => Reply::Created(Created {
                    path: path.clone(),
                    czxid: revision,
                }),
                Op::CreateList { path, .. } => {
                    let prefix = listed_at.unwrap_or_default();
                    let names = match answers.last() {
                        Some(TxnOpResponse::Get(g)) => ops::children_by_creation(&prefix, g.kvs()),
                        _ => Vec::new(),
                    };
                    Reply::CreatedListed(
                        Created {
                            path: path.clone(),
                            czxid: revision,
                        },
                        names,
                    )
                }
                Op::Get(_) => Reply::Node(
                    match answers.first() {
                        Some(TxnOpResponse::Get(g)) => g.kvs().first().map(ops::node),
                        _ => None,
                    },
                    revision,
                ),
                Op::Children(path) => {
                    let prefix = ops::children_prefix(path);
                    Reply::Children(match answers.first() {
                        Some(TxnOpResponse::Get(g)) => ops::children_by_creation(&prefix, g.kvs()),
                        _ => Vec::new(),
                    })
                }
                _ => Reply::Done,
            })
        }
        Ok(resp) => {
            let answers = resp.op_responses();
            let version = Seq::found(&answers)?;
            if version != s.version {
                // A write reported as failed was applied after all: take the sequence as it is; this request's
                // outcome is unknown to its caller.
                s.version = version;
                return Err(Error::ConnectionLoss);
            }
            let refused = ops::refusal(op, &answers[1..]);
            if let (
                Error::NotEmpty(p),
                Op::Delete {
                    paths,
                    mark,
                    leased,
                    created,
                },
            ) = (&refused, op)
            {
                if !leased.contains(p) && ops::leased_in_refusal(op, p, &answers[1..]) {
                    // An ephemeral key has no children: the keys under it are another lock path's. Again, without
                    // that check for it (at most once per key).
                    let mut leased = leased.clone();
                    leased.push(p.clone());
                    let again = Op::Delete {
                        paths: paths.clone(),
                        mark: mark.clone(),
                        leased,
                        created: *created,
                    };
                    return Box::pin(run_job(client, s, &again)).await;
                }
            }
            Err(refused)
        }
        Err(e) => {
            // Refused unapplied by an overloaded member: nothing to seal, and the session's reads go on (review,
            // helper-131); the suspension (see `sender`) paces the callers' tries.
            let overloaded = ops::overloaded(&e);
            if overloaded {
                warn!(error = %ops::message(&e), "etcd refused a write while overloaded; it is tried again");
            }
            let e = ops::error(e);
            if write && !overloaded && matches!(e, Error::ConnectionLoss) {
                s.unsure = true;
            }
            Err(e)
        }
    }
}

/// Whether a delete names a key twice.
fn has_duplicate(op: &Op) -> bool {
    matches!(op, Op::Delete { paths, .. } if paths.iter().enumerate().any(|(i, p)| paths[..i].contains(p)))
}

/// The session's guard alone: a transaction that only compares the sequence key's version.
async fn guard_only(client: &Client, s: &mut Seq) -> Result<()> {
    let txn = Txn::new().when(vec![s.guard()]).or_else(vec![s.read_back()]);
    let resp = ops::unless_unsent(client, || {
        let (mut kv, t) = (ops::kv(client), txn.clone());
        async move { kv.txn(t).await }
    })
    .await
    .map_err(ops::error)?;
    if resp.succeeded() {
        return Ok(());
    }
    s.version = Seq::found(&resp.op_responses())?;
    Err(Error::ConnectionLoss)
}

/// The operations of a read, in a transaction's branch.
fn read_ops(op: &Op) -> Vec<TxnOp> {
    match op {
        Op::Get(path) => vec![TxnOp::get(path.as_str(), None)],
        Op::Children(path) => {
            let prefix = ops::children_prefix(path);
            vec![TxnOp::get(
                prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_keys_only()),
            )]
        }
        _ => Vec::new(),
    }
}

/// After a lost reply: moves the sequence on (a write that lands later then does nothing), or finds that the lost
/// write moved it.
async fn seal(client: &Client, s: &mut Seq) -> Result<()> {
    let txn = Txn::new()
        .when(vec![s.guard()])
        .and_then(vec![s.step()])
        .or_else(vec![s.read_back()]);
    let resp = ops::unless_unsent(client, || {
        let (mut kv, t) = (ops::kv(client), txn.clone());
        async move { kv.txn(t).await }
    })
    .await
    .map_err(ops::error)?;
    if resp.succeeded() {
        s.version += 1;
    } else {
        s.version = Seq::found(&resp.op_responses())?;
    }
    s.unsure = false;
    Ok(())
}
