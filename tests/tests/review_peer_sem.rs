//! Review of 8cb677b (temporary; not to be committed).
#![allow(clippy::unwrap_used)]
use std::time::Duration;

use recipes_core::{Error, Layout, Locks};
use recipes_mem::MemCluster;

fn locks(c: &MemCluster, layout: Layout) -> Locks {
    Locks::builder(c.client()).layout(layout).build()
}

fn show<T>(r: &recipes_core::Result<Option<T>>) -> String {
    match r {
        Ok(Some(_)) => "held".into(),
        Ok(None) => "none".into(),
        Err(e) => format!("err {e}"),
    }
}

/// F1a: the Curator-layout semaphore never lists P: it holds beside a native semaphore's permits on P.
#[tokio::test(start_paused = true)]
async fn f1a_curator_sem_beside_native_sem() {
    let c = MemCluster::new();
    let _native = locks(&c, Layout::Native)
        .semaphore("/p", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let r = locks(&c, Layout::Curator)
        .semaphore("/p", 1)
        .unwrap()
        .try_acquire()
        .await;
    eprintln!(
        "curator sem beside a held native sem of 1: {}; children {:?}",
        show(&r),
        c.children("/p")
    );
    assert!(
        matches!(r, Err(Error::ForeignLock { .. })),
        "two holders of a 1-permit semaphore at /p"
    );
}

/// F1b: ... and beside a kazoo-layout semaphore's leases on P.
#[tokio::test(start_paused = true)]
async fn f1b_curator_sem_beside_kazoo_sem() {
    let c = MemCluster::new();
    let _kazoo = locks(&c, Layout::Kazoo)
        .semaphore("/p", 1)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let r = locks(&c, Layout::Curator)
        .semaphore("/p", 1)
        .unwrap()
        .try_acquire()
        .await;
    eprintln!(
        "curator sem beside a held kazoo sem of 1: {}; children {:?}",
        show(&r),
        c.children("/p")
    );
    assert!(
        matches!(r, Err(Error::ForeignLock { .. })),
        "two holders of a 1-permit semaphore at /p"
    );
}

/// F2: the kazoo-layout semaphore counts P *before* it makes its lease, so a native contender (which makes its node,
/// then lists) racing it is not seen by it, nor it by the native one: both hold.
#[tokio::test(start_paused = true)]
async fn f2_kazoo_sem_races_native() {
    let mut both = Vec::new();
    for native_sem in [false, true] {
        for off in 0..80u64 {
            let c = MemCluster::new();
            c.set_latency(Duration::from_millis(5));
            let k = locks(&c, Layout::Kazoo).semaphore("/r", 1).unwrap();
            let n = locks(&c, Layout::Native);
            let kt = tokio::spawn(async move { k.acquire_timeout(Duration::from_secs(5)).await });
            tokio::time::sleep(Duration::from_millis(off)).await;
            let nt = tokio::spawn(async move {
                if native_sem {
                    n.semaphore("/r", 1)
                        .unwrap()
                        .acquire_timeout(Duration::from_secs(5))
                        .await
                } else {
                    n.fair("/r").unwrap().acquire_timeout(Duration::from_secs(5)).await
                }
            });
            let (kr, nr) = (kt.await.unwrap(), nt.await.unwrap());
            if matches!(kr, Ok(Some(_))) && matches!(nr, Ok(Some(_))) {
                both.push((native_sem, off, c.children("/r")));
            }
        }
    }
    eprintln!("both held (native_sem, offset ms, children of /r): {both:?}");
    assert!(both.is_empty());
}

/// F3: a lock path with a child path named `locks`/`leases` or 32 hex digits (nested lock paths) is now refused.
#[tokio::test(start_paused = true)]
async fn f3_nested_paths_refused() {
    let c = MemCluster::new();
    let l = locks(&c, Layout::Native);
    let hex = "0123456789abcdef0123456789abcdef";
    let mut refused = Vec::new();
    for (layout, inner) in [
        (Layout::Native, "/app/locks".to_owned()),
        (Layout::Native, "/app/leases".to_owned()),
        (Layout::Native, format!("/app/{hex}")),
        (Layout::Kazoo, format!("/app/{hex}")),
        (Layout::Curator, "/app/locks".to_owned()),
    ] {
        let _inner = l.fair(&inner).unwrap().acquire().await.unwrap();
        let r = locks(&c, layout).fair("/app").unwrap().try_acquire().await;
        eprintln!("{layout} fair at /app beside the lock path {inner}: {}", show(&r));
        if r.is_err() {
            refused.push((layout, inner));
        }
    }
    assert!(refused.is_empty(), "refused: {refused:?}");
}

/// F4: revoke_node accepts `leases`/`locks`/32-hex names, which may be lock *paths*: it overwrites a semaphore's count.
#[tokio::test(start_paused = true)]
async fn f4_revoke_node_writes_a_semaphore_path() {
    let c = MemCluster::new();
    let l = locks(&c, Layout::Native);
    drop(l.semaphore("/x/leases", 2).unwrap().acquire().await.unwrap());
    let _keep = l.semaphore("/x/leases", 2).unwrap().acquire().await.unwrap();
    let r = l.revoke_node("/x", "leases").await;
    eprintln!("revoke_node(/x, leases): {r:?}");
    let again = l.semaphore("/x/leases", 2).unwrap().try_acquire().await;
    eprintln!("the semaphore at /x/leases afterwards: {}", show(&again));
    assert!(matches!(r, Err(Error::InvalidArgument(_))));
}
