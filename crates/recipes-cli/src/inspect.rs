//! `zklock inspect PATH`: holders and waiters, in order.

use std::time::Duration;

use recipes_core::{LockPath, NodeKind, Participant, Participants, Role};

use crate::settings::{connect, Conn};
use crate::Fail;

fn age(ms: u64) -> String {
    let d = Duration::from_millis(ms);
    if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else if d < Duration::from_secs(3600) {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() % 3600) / 60)
    }
}

/// The longest field printed.
const FIELD_MAX: usize = 64;

/// `s` made safe for a terminal: control and other non-printable characters escaped (`\u{1b}`), cut to `max`
/// characters. Node names and data come from other clients, which may write terminal escape sequences.
fn printable(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}') {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The recipe a participant's maker wrote in it, or what its name says.
fn recipe_of(p: &Participant) -> String {
    let by_name = match p.kind {
        None => "exclusive",
        Some(NodeKind::Lock) => "fair",
        Some(NodeKind::Read) => "read",
        Some(NodeKind::Write) => "write",
        Some(NodeKind::Permit) => "semaphore",
    };
    p.info
        .as_ref()
        .map(|i| i.recipe.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| by_name.to_owned())
}

/// Milliseconds since the participant's node was made (by the server's clock against ours); `None` when the store
/// keeps no creation time (etcd).
fn age_ms(p: &Participant) -> Option<u64> {
    if p.ctime_ms == 0 {
        return None;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    Some((now - p.ctime_ms).max(0) as u64)
}

/// Prints the report (a table, or JSON for scripts); exit status 0.
pub async fn inspect(c: &Conn, path: &LockPath, json: bool) -> Result<u8, Fail> {
    let (backend, locks) = connect(c).await?;
    let r = locks.participants(path.as_str()).await;
    backend.close().await;
    let p = r?;
    let text = if json {
        as_json(c, path, &p)
    } else {
        as_table(c, path, &p)
    };
    // Not print!: a closed pipe (`zklock inspect … | head -1`) must not panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

/// Asks the holders of `path` (or the holder of `node`) to let go; prints each node asked on stdout. Exit status 0
/// when someone was asked, 75 when nobody holds the lock (or the node is gone).
pub async fn revoke(c: &Conn, path: &LockPath, node: Option<&str>) -> Result<u8, Fail> {
    let (backend, locks) = connect(c).await?;
    let r = match node {
        Some(n) => locks
            .revoke_node(path.as_str(), n)
            .await
            .map(|asked| if asked { vec![n.to_owned()] } else { Vec::new() }),
        None => locks.revoke(path.as_str()).await,
    };
    backend.close().await;
    let asked = r?;
    if asked.is_empty() {
        return Err(Fail {
            status: crate::status::TEMPFAIL,
            message: format!("nobody holds the lock at {path}: nobody was asked to let go"),
        });
    }
    let mut text = String::new();
    for n in &asked {
        text.push_str(&format!("{}\n", printable(n, 2 * FIELD_MAX)));
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

fn as_json(c: &Conn, path: &LockPath, p: &Participants) -> String {
    let nodes: Vec<serde_json::Value> = p
        .nodes
        .iter()
        .map(|n| {
            serde_json::json!({
                "node": n.node,
                "role": if n.role == Role::Holder { "holder" } else { "waiter" },
                "waits_on": match &n.role { Role::Waiter { on } => Some(on.as_str()), Role::Holder => None },
                "recipe": recipe_of(n),
                "candidate": n.info.as_ref().and_then(|i| i.candidate.as_deref()),
                "host": n.info.as_ref().map(|i| i.host.as_str()),
                "pid": n.info.as_ref().map(|i| i.pid),
                // A string: a token is a u128, beyond what JSON readers take as a number.
                "fencing_token": n.fencing_token().to_string(),
                "age_ms": age_ms(n),
                "revocation_requested": n.revocation_requested,
            })
        })
        .collect();
    let report = serde_json::json!({
        "path": path.as_str(),
        "layout": c.layout.to_string(),
        "holders": p.holders().count(),
        "waiters": p.waiters().count(),
        "participants": nodes,
        "other_children": p.other_children,
    });
    format!("{report}\n")
}

fn as_table(c: &Conn, path: &LockPath, p: &Participants) -> String {
    let holders = p.holders().count();
    let mut out = format!(
        "{path}: {holders} holder(s), {} waiter(s) (layout {})\n",
        p.nodes.len() - holders,
        c.layout
    );
    if !p.nodes.is_empty() {
        out.push_str(&format!(
            "{:<28} {:<10} {:<28} {:>8}  {}\n",
            "ROLE", "RECIPE", "OWNER (HOST:PID)", "AGE", "NODE"
        ));
        for n in &p.nodes {
            let candidate = n.info.as_ref().and_then(|i| i.candidate.as_deref());
            let role = match (&n.role, candidate) {
                (Role::Holder, _) if n.revocation_requested => "holder (asked to let go)".to_owned(),
                (Role::Holder, Some(id)) => format!("leader {}", printable(id, 20)),
                (Role::Holder, None) => "holder".to_owned(),
                (Role::Waiter { on }, Some(id)) => format!("candidate {} (for {})", printable(id, 12), short(on)),
                (Role::Waiter { on }, None) => format!("waiter (for {})", short(on)),
            };
            let owner = n
                .info
                .as_ref()
                .map(|i| format!("{}:{}", i.host, i.pid))
                .unwrap_or_else(|| "?".into());
            out.push_str(&format!(
                "{:<28} {:<10} {:<28} {:>8}  {}\n",
                role,
                printable(&recipe_of(n), FIELD_MAX),
                printable(&owner, FIELD_MAX),
                age_ms(n).map_or_else(|| "-".to_owned(), age),
                printable(&n.node, 2 * FIELD_MAX)
            ));
        }
    }
    if !p.other_children.is_empty() {
        out.push_str(&format!(
            "ignored {} child(ren) that are not lock nodes of this layout: {}\n",
            p.other_children.len(),
            p.other_children
                .iter()
                .map(|s| printable(s, FIELD_MAX))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out
}

/// The node name shortened for display: the kind, and the sequence.
fn short(name: &str) -> String {
    match (name.get(..2), name.rsplit('-').next()) {
        (Some(kind), Some(seq)) if name.len() > 20 => printable(&format!("{kind}…-{seq}"), FIELD_MAX),
        _ => printable(name, FIELD_MAX),
    }
}

/// `zklock leader PATH`: prints the candidate that leads the election at `path` (id, term, node; JSON for scripts).
/// Exit status 0, or 75 when nobody stands.
pub async fn leader(c: &Conn, path: &LockPath, json: bool, latch: bool) -> Result<u8, Fail> {
    let (backend, locks) = connect(c).await?;
    let election = locks
        .election(path.as_str())
        .and_then(|e| if latch { e.latch() } else { Ok(e) });
    let r = match election {
        Ok(e) => e.leader().await,
        Err(e) => Err(e),
    };
    backend.close().await;
    let Some(l) = r? else {
        return Err(Fail {
            status: crate::status::TEMPFAIL,
            message: format!("nobody leads the election at {path}"),
        });
    };
    let text = if json {
        let report = serde_json::json!({
            "path": path.as_str(),
            "id": l.id,
            "data": String::from_utf8_lossy(&l.data),
            // A string: a term is a u128, beyond what JSON readers take as a number.
            "term": l.term.to_string(),
            "node": l.node,
        });
        format!("{report}\n")
    } else {
        format!(
            "{} (term {}, node {}{})\n",
            printable(&l.id, FIELD_MAX),
            l.term,
            printable(&l.node, 2 * FIELD_MAX),
            if l.data.is_empty() {
                String::new()
            } else {
                format!(", data {}", printable(&String::from_utf8_lossy(&l.data), FIELD_MAX))
            }
        )
    };
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn other_clients_data_cannot_drive_the_terminal() {
        assert_eq!(printable("worker-7:42", 64), "worker-7:42");
        assert_eq!(printable("evil\u{1b}[2J\rX", 64), "evil\\u{1b}[2J\\u{d}X");
        assert_eq!(printable("a\u{202e}b", 64), "a\\u{202e}b");
        assert_eq!(printable(&"x".repeat(100), 5), "xxxxx…");
    }
}
