//! The small, documented data every lock node carries, so that tools (`zklock inspect`) can say who holds a lock
//! and the library can recognise its own node after a lost reply.
//!
//! The format is UTF-8 text, one `key=value` per line, after a first line `recipes-lock 1`:
//!
//! ```text
//! recipes-lock 1
//! attempt=0f1e2d3c4b5a69788796a5b4c3d2e1f0
//! recipe=fair
//! host=worker-7
//! pid=4242
//! ```
//!
//! A candidate of an [`Election`](crate::Election) adds its id and its data (in hex, when it has any):
//!
//! ```text
//! candidate=billing-1
//! candidate_data=31302e302e302e373a38303830
//! ```
//!
//! A node that held the lock after a long queue adds `first=1` (in its release, in one transaction with its delete;
//! on a backend without transactions once it holds), which tells the node behind it that nothing is ahead any more.
//! Unknown keys are ignored by readers; keys may be added in later versions.
//!
//! # Contract
//! The data of a lock node is written only by this library: at its creation, once to add `first=1` (by its holder:
//! in its release's transaction, or over the data it was made with), and by
//! [`Locks::revoke_node`](crate::Locks::revoke_node) with a request to let go, which it writes only over a holder's
//! node. The recipes rely on it (a change of the data of a native `L-` or `W-` node ahead, when the node is gone
//! before the new data is read, means that it held: decisions 0052, 0061); applications and other tools (Curator's
//! `Revoker`, `zkCli set`) must not write it, unless every `Locks` on those paths is built with
//! [`foreign_writes`](crate::LocksBuilder::foreign_writes), which makes a waiter trust only the mark it reads. Builds
//! of this library before that decision wrote a request to let go over waiting nodes too: upgrade every process that
//! revokes before any that waits.

use std::sync::OnceLock;

use uuid::Uuid;

/// The data of a semaphore's path: its permit count in decimal (as kazoo's semaphore stores it).
pub(crate) fn encode_permits(permits: u32) -> Vec<u8> {
    permits.to_string().into_bytes()
}

/// The permit count a semaphore's path stores, `None` when its data is not a count.
pub(crate) fn decode_permits(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

/// What a lock node's data says about its holder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The attempt id (also in the node name for sequential nodes).
    pub attempt: Uuid,
    /// The recipe name (`exclusive`, `fair`, `reentrant`, `read`, `write`).
    pub recipe: String,
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// Written once the node is first in its queue (`first=1`).
    pub first: bool,
    /// The id of the election candidate that made the node (`candidate=`), `None` for a lock's node.
    pub candidate: Option<String>,
    /// The candidate's data (`candidate_data=`, in hex), empty when it has none.
    pub candidate_data: Vec<u8>,
}

/// The lines an election candidate adds to its node's data: `candidate=<id>` and, when there is data,
/// `candidate_data=<hex>`. The id must be one line (checked where the candidate is made).
pub(crate) fn candidate_lines(id: &str, data: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(12 + id.len() + 16 + 2 * data.len());
    out.push_str("candidate=");
    out.push_str(id);
    out.push('\n');
    if !data.is_empty() {
        out.push_str("candidate_data=");
        for b in data {
            let _ = write!(out, "{b:02x}");
        }
        out.push('\n');
    }
    out
}

/// Decodes the hex of `candidate_data=`; `None` when it is not hex.
fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

const MAGIC: &str = "recipes-lock 1";

/// The first lines of a node's data (the magic line, the attempt and the recipe), with room for `more`.
fn head(attempt: Uuid, recipe: &str, more: usize) -> String {
    let mut out = String::with_capacity(MAGIC.len() + 48 + recipe.len() + more);
    out.push_str(MAGIC);
    out.push_str("\nattempt=");
    out.push_str(attempt.simple().encode_lower(&mut Uuid::encode_buffer()));
    out.push_str("\nrecipe=");
    out.push_str(recipe);
    out
}

fn host_name() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_owned())
            .ok()
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".to_owned())
    })
}

/// This process's id (a system call each time it is asked, so asked once).
fn process_id() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// The end of the data after the recipe: `\nhost=…\npid=…\n`.
fn push_tail(out: &mut String, host: &str, pid: u32) {
    use std::fmt::Write;
    out.push_str("\nhost=");
    out.push_str(&host.replace('\n', " "));
    let _ = write!(out, "\npid={pid}\n");
}

/// [`push_tail`] of this process, made once.
fn own_tail() -> &'static str {
    static TAIL: OnceLock<String> = OnceLock::new();
    TAIL.get_or_init(|| {
        let mut s = String::new();
        push_tail(&mut s, host_name(), process_id());
        s
    })
}

impl NodeInfo {
    /// The info for an attempt made by this process.
    pub fn for_this_process(attempt: Uuid, recipe: &str) -> Self {
        NodeInfo {
            attempt,
            recipe: recipe.to_owned(),
            host: host_name().to_owned(),
            pid: process_id(),
            first: false,
            candidate: None,
            candidate_data: Vec::new(),
        }
    }

    /// Encodes the info as node data.
    pub fn encode(&self) -> Vec<u8> {
        let candidate = match &self.candidate {
            // One line, as `host`'s: an id that is not (never one of a candidate, which refuses it) cannot add a key.
            Some(id) => candidate_lines(&id.replace(['\n', '\r'], " "), &self.candidate_data),
            None => String::new(),
        };
        if self.host == host_name() && self.pid == process_id() {
            return Self::encode_own(self.attempt, &self.recipe, &candidate, self.first);
        }
        let mut out = head(self.attempt, &self.recipe, 48 + self.host.len() + candidate.len());
        push_tail(&mut out, &self.host, self.pid);
        out.push_str(&candidate);
        if self.first {
            out.push_str("first=1\n");
        }
        out.into_bytes()
    }

    /// What [`for_this_process`](Self::for_this_process) then [`encode`](Self::encode) give (with `first`, and a
    /// candidate's [`candidate_lines`], empty for a lock), without the info's own strings in between: every node this
    /// process makes carries its own line, made once.
    pub(crate) fn encode_own(attempt: Uuid, recipe: &str, candidate: &str, first: bool) -> Vec<u8> {
        let tail = own_tail();
        let mut out = head(attempt, recipe, tail.len() + candidate.len() + 8);
        out.push_str(tail);
        out.push_str(candidate);
        if first {
            out.push_str("first=1\n");
        }
        out.into_bytes()
    }

    /// Decodes node data; `None` when it was not written by this library.
    pub fn decode(data: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.lines();
        if lines.next()? != MAGIC {
            return None;
        }
        let (mut attempt, mut recipe, mut host, mut pid, mut first) = (None, String::new(), String::new(), 0, false);
        let (mut candidate, mut candidate_data) = (None, Vec::new());
        for line in lines {
            let Some((k, v)) = line.split_once('=') else {
                continue;
            };
            match k {
                "attempt" => attempt = Uuid::parse_str(v).ok(),
                "recipe" => recipe = v.to_owned(),
                "host" => host = v.to_owned(),
                "pid" => pid = v.parse().unwrap_or(0),
                "first" => first = v == "1",
                "candidate" => candidate = Some(v.to_owned()),
                "candidate_data" => candidate_data = decode_hex(v).unwrap_or_default(),
                _ => {}
            }
        }
        Some(NodeInfo {
            attempt: attempt?,
            recipe,
            host,
            pid,
            first,
            candidate,
            candidate_data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoding_is_the_documented_text() {
        let attempt = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        let other = NodeInfo {
            attempt,
            recipe: "fair".into(),
            host: "a\nhost".into(),
            pid: 42,
            first: true,
            candidate: None,
            candidate_data: Vec::new(),
        };
        assert_eq!(
            String::from_utf8(other.encode()).unwrap(),
            "recipes-lock 1\nattempt=0123456789abcdef0123456789abcdef\nrecipe=fair\nhost=a host\npid=42\nfirst=1\n"
        );
        // This process's own line, made once, reads the same as any other's.
        let own = NodeInfo::for_this_process(attempt, "read");
        assert_eq!(
            String::from_utf8(own.encode()).unwrap(),
            format!(
                "recipes-lock 1\nattempt=0123456789abcdef0123456789abcdef\nrecipe=read\nhost={}\npid={}\n",
                own.host.replace('\n', " "),
                std::process::id()
            )
        );
    }

    #[test]
    fn round_trip() {
        let mut info = NodeInfo::for_this_process(Uuid::new_v4(), "write");
        assert_eq!(NodeInfo::decode(&info.encode()), Some(info.clone()));
        info.first = true;
        assert_eq!(NodeInfo::decode(&info.encode()), Some(info));
    }

    #[test]
    fn this_process_encodes_its_own_nodes_as_any_other_info() {
        let attempt = Uuid::new_v4();
        for first in [false, true] {
            let mut info = NodeInfo::for_this_process(attempt, "fair");
            info.first = first;
            let own = NodeInfo::encode_own(attempt, "fair", "", first);
            assert_eq!(own, info.encode());
            assert_eq!(NodeInfo::decode(&own), Some(info.clone()));
            // A candidate's lines, before the mark.
            info.recipe = "election".into();
            info.candidate = Some("billing-1".into());
            info.candidate_data = b"10.0.0.7:8080".to_vec();
            let own = NodeInfo::encode_own(
                attempt,
                "election",
                &candidate_lines("billing-1", b"10.0.0.7:8080"),
                first,
            );
            assert_eq!(own, info.encode());
            assert_eq!(NodeInfo::decode(&own), Some(info));
        }
    }

    #[test]
    fn candidate_lines_are_the_documented_text() {
        assert_eq!(candidate_lines("a", b""), "candidate=a\n");
        assert_eq!(
            candidate_lines("billing-1", b"10.0.0.7:8080"),
            "candidate=billing-1\ncandidate_data=31302e302e302e373a38303830\n"
        );
        assert_eq!(decode_hex("3g"), None);
        assert_eq!(decode_hex("0"), None);
        assert_eq!(decode_hex("00ff"), Some(vec![0, 255]));
        assert_eq!(decode_hex("+f"), None);
        // An id of several lines, given to the public encoder, stays one line.
        let mut info = NodeInfo::for_this_process(Uuid::new_v4(), "election");
        info.candidate = Some("x\nfirst=1".into());
        let decoded = NodeInfo::decode(&info.encode()).unwrap();
        assert!(!decoded.first);
        assert_eq!(decoded.candidate.as_deref(), Some("x first=1"));
    }

    #[test]
    fn foreign_data_is_none() {
        assert_eq!(NodeInfo::decode(b""), None);
        assert_eq!(NodeInfo::decode(b"10.0.0.1"), None);
        assert_eq!(NodeInfo::decode(b"recipes-lock 1\npid=3\n"), None);
        assert_eq!(NodeInfo::decode(&[0xff, 0xfe]), None);
    }
}
