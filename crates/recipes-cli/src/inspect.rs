//! `zklock inspect PATH`: holders and waiters, in order.

use std::time::Duration;

use recipes_core::decide::{contenders, decide, Decision};
use recipes_core::info::NodeInfo;
use recipes_core::layout::EXCLUSIVE_NODE;
use recipes_core::{Backend, BackendExt, Error, LockPath, NodeKind};

use crate::{connect, Conn, Fail};

/// One row of the report.
struct Row {
    role: String,
    recipe: String,
    owner: String,
    age: String,
    node: String,
}

fn age(ctime_ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let ms = (now - ctime_ms).max(0) as u64;
    let d = Duration::from_millis(ms);
    if d < Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else if d < Duration::from_secs(3600) {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() % 3600) / 60)
    }
}

/// The most of a node's data read for the report (lock nodes carry a few lines; another client may have written up
/// to a megabyte).
const DATA_READ: usize = 4096;
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

async fn row(backend: &dyn Backend, path: &LockPath, name: &str, role: String, kind: &str) -> Option<Row> {
    let (mut data, stat) = backend.current().get(&path.child(name)).await.ok().flatten()?;
    data.truncate(DATA_READ);
    let info = NodeInfo::decode(&data);
    Some(Row {
        role,
        recipe: printable(
            &info
                .as_ref()
                .map(|i| i.recipe.clone())
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| kind.to_owned()),
            FIELD_MAX,
        ),
        owner: printable(
            &info
                .map(|i| format!("{}:{}", i.host, i.pid))
                .unwrap_or_else(|| "?".into()),
            FIELD_MAX,
        ),
        age: age(stat.ctime),
        node: printable(name, 2 * FIELD_MAX),
    })
}

/// Prints the report; exit status 0.
pub async fn inspect(c: &Conn, path: &LockPath) -> Result<u8, Fail> {
    let (backend, _locks) = connect(c).await?;
    let r = report(&*backend, c, path).await;
    backend.close().await;
    let text = r?;
    // Not print!: a closed pipe (`zklock inspect … | head -1`) must not panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(0)
}

async fn report(backend: &dyn Backend, c: &Conn, path: &LockPath) -> Result<String, Fail> {
    let children = match backend.current().children(path.as_str()).await {
        Ok(c) => c,
        Err(Error::NoNode(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut rows = Vec::new();
    if children.iter().any(|c| c == EXCLUSIVE_NODE) {
        if let Some(r) = row(backend, path, EXCLUSIVE_NODE, "holder".into(), "exclusive").await {
            rows.push(r);
        }
    }
    let queue = contenders(c.layout, &children);
    for ct in &queue {
        let kind = match ct.kind {
            NodeKind::Lock => "fair",
            NodeKind::Read => "read",
            NodeKind::Write => "write",
        };
        let role = match decide(c.layout, ct.kind, &queue, &ct.name) {
            Decision::Acquired => "holder".to_owned(),
            Decision::Wait { on } => format!("waiter (for {})", short(&on)),
            Decision::Missing => continue,
        };
        if let Some(r) = row(backend, path, &ct.name, role, kind).await {
            rows.push(r);
        }
    }
    let foreign: Vec<&String> = children
        .iter()
        .filter(|c| *c != EXCLUSIVE_NODE && !queue.iter().any(|q| &q.name == *c))
        .collect();
    let holders = rows.iter().filter(|r| r.role == "holder").count();
    let mut out = format!(
        "{path}: {holders} holder(s), {} waiter(s) (layout {})\n",
        rows.len() - holders,
        c.layout
    );
    if !rows.is_empty() {
        out.push_str(&format!(
            "{:<28} {:<10} {:<28} {:>8}  {}\n",
            "ROLE", "RECIPE", "OWNER (HOST:PID)", "AGE", "NODE"
        ));
        for r in &rows {
            out.push_str(&format!(
                "{:<28} {:<10} {:<28} {:>8}  {}\n",
                r.role, r.recipe, r.owner, r.age, r.node
            ));
        }
    }
    if !foreign.is_empty() {
        out.push_str(&format!(
            "ignored {} child(ren) that are not lock nodes of this layout: {}\n",
            foreign.len(),
            foreign
                .iter()
                .map(|s| printable(s, FIELD_MAX))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(out)
}

/// The node name shortened for display: the kind, and the sequence.
fn short(name: &str) -> String {
    match (name.get(..2), name.rsplit('-').next()) {
        (Some(kind), Some(seq)) if name.len() > 20 => printable(&format!("{kind}…-{seq}"), FIELD_MAX),
        _ => printable(name, FIELD_MAX),
    }
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
