//! A loopback TCP proxy between a ZooKeeper client and server, for fault injection on a real server.
//!
//! It understands ZooKeeper's framing (a 4-byte big-endian length, then the payload; after the connect handshake,
//! requests start with `xid, op` and replies with `xid`), which lets it lose the *reply* to a create: the request
//! reaches the server and is applied, the reply is swallowed and the connection cut, so the client sees connection
//! loss without knowing that its node exists.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// ZooKeeper op codes of plain creates (`create`, `create2`); container and TTL creates are left alone, so a test
/// can aim the fault at lock nodes rather than at their parents.
const CREATE_OPS: [i32; 2] = [1, 15];
/// A raw chunk from the client at least this large opens a call (etcd's gRPC: HTTP/2 headers and data).
const RAW_REQUEST_AT_LEAST: usize = 40;
/// Frames larger than this are not ZooKeeper traffic of ours.
const MAX_FRAME: usize = 16 << 20;

#[derive(Debug)]
struct Ctl {
    upstream: SocketAddr,
    lose_create_replies: AtomicU32,
    cut_until: Mutex<Option<Instant>>,
    blackhole_until: Mutex<Option<Instant>>,
    generation: watch::Sender<u64>,
    cuts: AtomicU32,
    /// How long after a connection opens its first reply may pass: earlier replies wait until then (a server slow to
    /// take a new client, its handshake and its authentication, still healthy).
    slow_start: Mutex<Duration>,
    /// Bytes passed as they come (any protocol: etcd's gRPC), not ZooKeeper's frames; no reply can be lost.
    raw: bool,
}

/// A running proxy; dropping it stops it and cuts its connections.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    ctl: Arc<Ctl>,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy on 127.0.0.1 (a free port) to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        Proxy::start_with(upstream, false).await
    }

    /// Starts a proxy of any TCP protocol (etcd's gRPC): cuts and partitions as for ZooKeeper; losing a reply loses
    /// that of the next call the client opens (the next chunk it sends that is large enough to open one), whatever it
    /// is, and cuts the connection 300 ms later.
    pub async fn start_raw(upstream: SocketAddr) -> std::io::Result<Proxy> {
        Proxy::start_with(upstream, true).await
    }

    async fn start_with(upstream: SocketAddr, raw: bool) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0);
        let ctl = Arc::new(Ctl {
            upstream,
            lose_create_replies: AtomicU32::new(0),
            cut_until: Mutex::new(None),
            blackhole_until: Mutex::new(None),
            generation,
            cuts: AtomicU32::new(0),
            slow_start: Mutex::new(Duration::ZERO),
            raw,
        });
        let c = ctl.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let cut = c.cut_until.lock().unwrap().is_some_and(|t| Instant::now() < t);
                if cut {
                    drop(inbound);
                    continue;
                }
                tokio::spawn(serve(c.clone(), inbound));
            }
        });
        Ok(Proxy { addr, ctl, task })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Loses the replies to the next `n` creates: each reaches the server, its reply is dropped and the
    /// connection cut.
    pub fn lose_next_create_replies(&self, n: u32) {
        self.ctl.lose_create_replies.store(n, Ordering::SeqCst);
    }

    /// Cuts every connection now and refuses new ones for `d`.
    pub fn cut_for(&self, d: Duration) {
        *self.ctl.cut_until.lock().unwrap() = Some(Instant::now() + d);
        self.cut_now();
    }

    /// Cuts every connection now (clients may reconnect at once).
    pub fn cut_now(&self) {
        self.ctl.cuts.fetch_add(1, Ordering::SeqCst);
        self.ctl.generation.send_modify(|g| *g += 1);
    }

    /// A partition for `d`: nothing passes either way, and neither end is told (no reset, no close), as when a
    /// network drops packets. New connections are accepted and left unanswered. A frame that arrives during the
    /// partition is never delivered; its connection is closed when the partition heals (as TCP gives up on it), while
    /// a connection that stayed quiet survives.
    pub fn blackhole_for(&self, d: Duration) {
        *self.ctl.blackhole_until.lock().unwrap() = Some(Instant::now() + d);
    }

    /// Slows the start of the connections opened from now on: no reply passes until `d` after the connection opened
    /// (a server that takes a new client slowly, then answers at once), whatever the replies are and however they
    /// are split. `Duration::ZERO` ends it for later connections.
    pub fn slow_start(&self, d: Duration) {
        *self.ctl.slow_start.lock().unwrap() = d;
    }

    /// How many cuts were made by `cut_for` and `cut_now`.
    pub fn cuts(&self) -> u32 {
        self.ctl.cuts.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.ctl.generation.send_modify(|g| *g += 1);
    }
}

/// The next unit to pass on: a ZooKeeper frame, or (raw) whatever bytes have come.
async fn read_unit(raw: bool, r: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    if !raw {
        return read_frame(r).await;
    }
    let mut buf = vec![0u8; 16 * 1024];
    match r.read(&mut buf).await {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            buf.truncate(n);
            Some(buf)
        }
    }
}

async fn read_frame(r: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.ok()?;
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return None;
    }
    let mut buf = vec![0u8; 4 + n];
    buf[..4].copy_from_slice(&len);
    r.read_exact(&mut buf[4..]).await.ok()?;
    Some(buf)
}

impl Ctl {
    /// Whether the connections of generation `born` were cut: nothing read from them after the cut passes, though
    /// their task has not closed them yet (found in the thirty-fourth session: a close sent right after a cut reached
    /// the server).
    fn cut_since(&self, born: u64) -> bool {
        *self.generation.borrow() != born
    }

    /// While a partition lasts, waits for it to heal and returns `true`; `false` when there is none.
    async fn swallowed_by_blackhole(&self) -> bool {
        let until = *self.blackhole_until.lock().unwrap();
        match until {
            Some(t) if Instant::now() < t => {
                tokio::time::sleep_until(t).await;
                true
            }
            _ => false,
        }
    }
}

fn i32_at(frame: &[u8], at: usize) -> Option<i32> {
    frame
        .get(at..at + 4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

async fn serve(ctl: Arc<Ctl>, inbound: TcpStream) {
    if ctl.swallowed_by_blackhole().await {
        return;
    }
    let Ok(outbound) = TcpStream::connect(ctl.upstream).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (cr, cw) = inbound.into_split();
    let (sr, sw) = outbound.into_split();
    // xid of a create whose reply must be lost (i64::MIN: none).
    let doomed = Arc::new(AtomicI64::new(i64::MIN));
    let mut gen = ctl.generation.subscribe();
    let born = *gen.borrow_and_update();
    let up = pump_requests(ctl.clone(), cr, sw, doomed.clone(), born);
    let answers_from = Instant::now() + *ctl.slow_start.lock().unwrap();
    let down = pump_replies(ctl.clone(), sr, cw, doomed, answers_from, born);
    tokio::select! {
        _ = up => {}
        _ = down => {}
        _ = gen.changed() => {}
    }
    // Dropping the halves closes both connections.
}

async fn pump_requests(
    ctl: Arc<Ctl>,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    doomed: Arc<AtomicI64>,
    born: u64,
) {
    let mut first = true;
    while let Some(frame) = read_unit(ctl.raw, &mut from).await {
        if ctl.swallowed_by_blackhole().await || ctl.cut_since(born) {
            return;
        }
        if ctl.raw && frame.len() >= RAW_REQUEST_AT_LEAST && !first {
            // Raw (etcd's gRPC): a chunk this large opens a call (HTTP/2 headers); pings, window updates and a lease
            // stream's keep-alives are smaller. Its reply, and everything after, is swallowed, and the connection cut
            // a moment later, once the server has applied the request.
            let lose = ctl
                .lose_create_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lose {
                doomed.store(0, Ordering::SeqCst);
                let c = ctl.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    c.generation.send_modify(|g| *g += 1);
                });
            }
        }
        if !first && !ctl.raw {
            if let (Some(xid), Some(op)) = (i32_at(&frame, 4), i32_at(&frame, 8)) {
                let lose = CREATE_OPS.contains(&op)
                    && ctl
                        .lose_create_replies
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                if lose {
                    doomed.store(i64::from(xid), Ordering::SeqCst);
                }
            }
        }
        first = false;
        if to.write_all(&frame).await.is_err() {
            return;
        }
    }
}

async fn pump_replies(
    ctl: Arc<Ctl>,
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    doomed: Arc<AtomicI64>,
    answers_from: Instant,
    born: u64,
) {
    let mut first = true;
    while let Some(frame) = read_unit(ctl.raw, &mut from).await {
        // A slow start's wait first: a partition or a lost reply that began meanwhile still applies to the reply.
        tokio::time::sleep_until(answers_from).await;
        if ctl.swallowed_by_blackhole().await || ctl.cut_since(born) {
            return;
        }
        if ctl.raw && doomed.load(Ordering::SeqCst) != i64::MIN {
            // A request's reply is being lost (raw): nothing more reaches the client on this connection.
            continue;
        }
        if !first && !ctl.raw {
            // Reply header: xid, zxid (8 bytes), err.
            if let (Some(xid), Some(err)) = (i32_at(&frame, 4), i32_at(&frame, 16)) {
                if i64::from(xid) == doomed.load(Ordering::SeqCst) {
                    if err == 0 {
                        // The create was applied; its reply is lost with the connection.
                        return;
                    }
                    // The create failed (e.g. no parent yet): nothing was made, so let this reply through and
                    // lose the next successful one instead.
                    doomed.store(i64::MIN, Ordering::SeqCst);
                    ctl.lose_create_replies.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        first = false;
        if to.write_all(&frame).await.is_err() {
            return;
        }
    }
}
