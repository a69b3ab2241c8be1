//! The read/write lock: readers share, a writer excludes everyone, the queue decides who waits for whom, and the
//! same owner may downgrade (write to read) but not upgrade.

use recipes_core::{Error, LockGuard, Owner, OwnerToken};

use super::granted_then_released;
use crate::harness::Harness;
use crate::util::{assert_pending, bounded, wait_children};

/// Readers of different clients hold the read lock at the same time.
pub async fn readers_share(h: &dyn Harness) {
    let path = h.path("readers-share");
    let mut clients = Vec::new();
    let mut guards = Vec::new();
    for _ in 0..4 {
        let c = h.client().await;
        guards.push(
            bounded(h, "read", c.locks.read_write(&path).unwrap().read().acquire())
                .await
                .unwrap(),
        );
        clients.push(c);
    }
    assert_eq!(h.children(&path).await.len(), 4);
    for g in guards {
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// A held write lock keeps readers out until released.
pub async fn writer_excludes_readers(h: &dyn Harness) {
    let path = h.path("writer-excludes");
    let (w, r) = (h.client().await, h.client().await);
    let wg = w.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let read = r.locks.read_write(&path).unwrap().read();
    assert!(read.try_acquire().await.unwrap().is_none());
    let mut waiting = Box::pin(read.acquire());
    assert_pending(h, "reader behind a writer", &mut waiting).await;
    wg.release().await.unwrap();
    let rg = bounded(h, "reader after writer", waiting).await.unwrap();
    rg.release().await.unwrap();
    wait_children(h, &path, 0).await;
}

/// A writer waits until every earlier reader has released.
pub async fn write_waits_for_all_readers(h: &dyn Harness) {
    let path = h.path("write-waits-readers");
    let (r1, r2, w) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let g2 = r2.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let mut waiting = Box::pin(write.acquire());
    assert_pending(h, "writer behind two readers", &mut waiting).await;
    g1.release().await.unwrap();
    assert_pending(h, "writer behind one reader", &mut waiting).await;
    g2.release().await.unwrap();
    granted_then_released(h, "writer after readers", waiting).await;
    wait_children(h, &path, 0).await;
}

/// A reader that arrives after a queued writer waits for that writer.
pub async fn reader_waits_for_earlier_writer(h: &dyn Harness) {
    let path = h.path("reader-waits-writer");
    let (r1, w, r2) = (h.client().await, h.client().await, h.client().await);
    let g1 = r1.locks.read_write(&path).unwrap().read().acquire().await.unwrap();
    let write = w.locks.read_write(&path).unwrap().write();
    let mut wwait = Box::pin(write.acquire());
    assert_pending(h, "writer behind reader", &mut wwait).await;
    let read2 = r2.locks.read_write(&path).unwrap().read();
    assert!(
        read2.try_acquire().await.unwrap().is_none(),
        "a reader jumped a queued writer"
    );
    let mut rwait = Box::pin(read2.acquire());
    assert_pending(h, "reader behind queued writer", &mut rwait).await;
    g1.release().await.unwrap();
    let wg = bounded(h, "writer", wwait).await.unwrap();
    assert_pending(h, "reader behind holding writer", &mut rwait).await;
    wg.release().await.unwrap();
    granted_then_released(h, "second reader", rwait).await;
    wait_children(h, &path, 0).await;
}

/// A waiting reader is granted when the writer ahead releases, even with a writer queued behind it.
pub async fn reader_never_waits_on_later_writer(h: &dyn Harness) {
    let path = h.path("reader-not-later-writer");
    let (w1, r, w2) = (h.client().await, h.client().await, h.client().await);
    let g1 = w1.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let read = r.locks.read_write(&path).unwrap().read();
    let mut rwait = Box::pin(read.acquire());
    assert_pending(h, "reader behind writer", &mut rwait).await;
    wait_children(h, &path, 2).await;
    let write2 = w2.locks.read_write(&path).unwrap().write();
    let mut w2wait = Box::pin(write2.acquire());
    assert_pending(h, "second writer", &mut w2wait).await;
    g1.release().await.unwrap();
    let rg = bounded(h, "reader after first writer", rwait).await.unwrap();
    assert_pending(h, "second writer behind the reader", &mut w2wait).await;
    rg.release().await.unwrap();
    granted_then_released(h, "second writer", w2wait).await;
    wait_children(h, &path, 0).await;
}

/// All readers queued behind a writer are granted together when it releases.
pub async fn readers_wake_together_after_writer(h: &dyn Harness) {
    let path = h.path("readers-together");
    let w = h.client().await;
    let wg = w.locks.read_write(&path).unwrap().write().acquire().await.unwrap();
    let mut readers = Vec::new();
    for _ in 0..3 {
        let c = h.client().await;
        let read = c.locks.read_write(&path).unwrap().read();
        readers.push((c, read));
    }
    let waits: Vec<_> = readers.iter().map(|(_, r)| Box::pin(r.acquire())).collect();
    let mut joined = Box::pin(futures::future::join_all(waits));
    assert_pending(h, "readers behind writer", &mut joined).await;
    wg.release().await.unwrap();
    let guards: Vec<LockGuard> = bounded(h, "all readers", joined)
        .await
        .into_iter()
        .map(|g| g.unwrap())
        .collect();
    // All three hold at once: three live guards, three read nodes, and the writer's node gone.
    assert_eq!(guards.len(), 3);
    let children = h.children(&path).await;
    assert_eq!(children.len(), 3, "{children:?}");
    assert!(children.iter().all(|c| c.starts_with("R-")), "{children:?}");
    for g in guards {
        g.release().await.unwrap();
    }
    wait_children(h, &path, 0).await;
}

/// Write to read downgrade: no writer gets in between, and the lock frees when both are released.
pub async fn downgrade_write_to_read(h: &dyn Harness) {
    let path = h.path("downgrade");
    let (a, b) = (h.client().await, h.client().await);
    let rw = a.locks.read_write(&path).unwrap();
    let owner: Owner = OwnerToken::new().into();
    let wg = rw.write().with_owner(owner).acquire().await.unwrap();
    let other_write = b.locks.read_write(&path).unwrap().write();
    let mut wwait = Box::pin(other_write.acquire());
    assert_pending(h, "other writer", &mut wwait).await;
    let rg = bounded(h, "downgrade", rw.read().with_owner(owner).acquire())
        .await
        .unwrap();
    wg.release().await.unwrap();
    assert_pending(h, "other writer while the downgraded reader holds", &mut wwait).await;
    assert!(rg.hold_count() == 1);
    rg.release().await.unwrap();
    granted_then_released(h, "other writer after downgrade ends", wwait).await;
    wait_children(h, &path, 0).await;
}

/// Read to write upgrade by the same owner is refused at once, without a node or a hang.
pub async fn upgrade_refused(h: &dyn Harness) {
    let path = h.path("upgrade");
    let a = h.client().await;
    let rw = a.locks.read_write(&path).unwrap();
    let owner: Owner = OwnerToken::new().into();
    let rg = rw.read().with_owner(owner).acquire().await.unwrap();
    let r = bounded(h, "upgrade attempt", rw.write().with_owner(owner).acquire()).await;
    assert!(matches!(r, Err(Error::UpgradeRefused(_))), "{r:?}");
    assert!(r.unwrap_err().to_string().contains("upgrad"));
    assert_eq!(h.children(&path).await.len(), 1);
    rg.release().await.unwrap();
    wait_children(h, &path, 0).await;
}
