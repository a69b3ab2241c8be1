//! Malformed paths: every backend refuses them as ZooKeeper does.

use recipes_core::backend::{BackendExt, ChildOrder, CreateMode, SessionRef};
use recipes_core::Error;

use super::kept_containers;
use crate::harness::Harness;

/// What every request of `on` on `path` answers, in a line per request.
async fn answers(on: SessionRef<'_>, path: &str) -> Vec<(&'static str, Result<String, Error>)> {
    let shown = |r: Result<String, Error>| r;
    vec![
        (
            "create",
            shown(on.create(path, b"", CreateMode::Persistent).await.map(|c| c.path)),
        ),
        ("get", on.get(path).await.map(|n| format!("{:?}", n.map(|(d, _)| d)))),
        ("children", on.children(path).await.map(|c| format!("{c:?}"))),
        ("set", on.set_data(path, b"x").await.map(|()| "set".to_owned())),
        ("delete", on.delete(path).await.map(|()| "deleted".to_owned())),
        (
            "watch",
            on.watch_deletion(path).await.map(|w| format!("{}", w.is_some())),
        ),
        ("sync", on.sync(path).await.map(|()| "synced".to_owned())),
    ]
}

/// A malformed path is refused (`Refused`) by every request, as ZooKeeper's client refuses it before sending: empty,
/// relative, with an empty name, a `.` or `..` name before a `/`, a trailing `/`, or a character ZooKeeper takes not.
/// Its server refuses to create or set a node whose last name is `.` or `..`, and finds it absent otherwise; nobody
/// creates or deletes `/`, and a character beyond `U+FFFF` is refused by its server. A sequential create may end in
/// `/` or `.` where a sequence is appended (ZooKeeper: the node is named by it alone, or `.` and it), not where none
/// is (etcd). Found by review (helper-146): the in-memory backend checked paths only in creates and deletes and let
/// controls, `.` and `..` through, and etcd took any key (`/p/` made a child of `/p` that kept it from ever being
/// deleted); helper-147 found the root's delete, the create with its listing, `U+FFFF` and the sequential `.`.
pub async fn a_malformed_path_is_refused_by_every_request(h: &dyn Harness) {
    let base = h.path("malformed");
    let c = h.client().await;
    let b = c.locks.backend().clone();
    let on = b.current();
    let keep = kept_containers(on, &base).await;
    let malformed = [
        String::new(),
        "relative".to_owned(),
        format!("{base}/"),
        format!("{base}//x"),
        format!("{base}/./x"),
        format!("{base}/../x"),
        format!("{base}/a\u{0}b"),
        format!("{base}/a\u{1f}b"),
        format!("{base}/a\u{7f}b"),
        format!("{base}/a\u{85}b"),
        format!("{base}/a\u{e000}b"),
        format!("{base}/a\u{fff0}b"),
    ];
    for path in &malformed {
        for (what, answer) in answers(on, path).await {
            assert!(matches!(answer, Err(Error::Refused(_))), "{what} {path:?}: {answer:?}");
        }
    }
    for last in [".", ".."] {
        let path = format!("{base}/{last}");
        let got = answers(on, &path).await;
        // etcd lists no children of a key that is not there, where ZooKeeper says there is no node.
        let expected: [&[&str]; 7] = [
            &["Err(Refused"],
            &["Ok(\"None\")"],
            &["Err(NoNode", "Ok(\"[]\")"],
            &["Err(Refused"],
            &["Err(NoNode"],
            &["Ok(\"false\")"],
            &["Ok(\"synced\")"],
        ];
        for ((what, answer), starts) in got.iter().zip(expected) {
            let shown = format!("{answer:?}");
            assert!(starts.iter().any(|s| shown.starts_with(s)), "{what} {path:?}: {shown}");
        }
    }
    let root = on.create("/", b"", CreateMode::Persistent).await;
    assert!(matches!(root, Err(Error::Refused(_))), "create /: {root:?}");
    let root = on.delete("/").await;
    assert!(matches!(root, Err(Error::Refused(_))), "delete /: {root:?}");
    // The create the recipes send, with its listing: both refused.
    let both = on
        .create_and_list(&format!("{base}//x"), b"", CreateMode::EphemeralSequential)
        .await;
    assert!(
        matches!(
            (&both.created, &both.listed),
            (Err(Error::Refused(_)), Err(Error::Refused(_)))
        ),
        "{both:?}"
    );
    // ZooKeeper's server reads paths as UTF-16: a character beyond U+FFFF, a pair of surrogates there, is refused.
    let astral = on
        .create(&format!("{base}/a\u{1f600}"), b"", CreateMode::Persistent)
        .await;
    assert!(matches!(astral, Err(Error::Refused(_))), "{astral:?}");
    let prefix = format!("{base}/");
    let numbered = on.create(&prefix, b"", CreateMode::EphemeralSequential).await;
    // A last name `.` followed by the sequence is a name (ZooKeeper appends it before its server checks the path).
    let dotted = on
        .create(&format!("{base}/."), b"", CreateMode::EphemeralSequential)
        .await;
    if b.child_order() == ChildOrder::Sequence {
        let made = numbered.expect("a sequence appended to a trailing '/'").path;
        let name = made.strip_prefix(&prefix).unwrap_or_default();
        assert!(name.len() == 10 && name.bytes().all(|c| c.is_ascii_digit()), "{made}");
        on.delete(&made).await.unwrap();
        let made = dotted.expect("a sequence appended to '.'").path;
        let name = made.strip_prefix(&prefix).unwrap_or_default();
        assert!(name.starts_with('.') && name.len() == 11, "{made}");
        on.delete(&made).await.unwrap();
    } else {
        assert!(
            matches!(numbered, Err(Error::Refused(_))),
            "no sequence appended: {numbered:?}"
        );
        assert!(
            matches!(dotted, Err(Error::Refused(_))),
            "no sequence appended: {dotted:?}"
        );
    }
    assert_eq!(h.children(&base).await, ["keep"], "nothing made");
    on.delete(&keep).await.unwrap();
}
