//! The configurations the model checker explores, and the bugs it must find.

use std::time::Duration;

use recipes_core::backend::{BackendExt, CreateMode};
use recipes_core::mutants::Mutant;
use recipes_core::{Layout, Recipe};

use super::PATH;
use super::{plain, Config, FaultKind, Patience, Program, ALL_FAULTS};

/// Every fault kind but the operator's delete (which breaks the lease's promise on purpose: `is_valid()` cannot know
/// of it until `lost()` looks).
const FAULTS: &[FaultKind] = &[
    FaultKind::Expire,
    FaultKind::Partition,
    FaultKind::Blip,
    FaultKind::Crash,
    FaultKind::Delay,
];

/// The exhaustive configurations: two clients of each recipe, one acquire and release each, with at most one fault
/// of every kind at every point.
pub fn exhaustive() -> Vec<Config> {
    vec![
        Config::new("exclusive", vec![plain(Recipe::Exclusive), plain(Recipe::Exclusive)]).with_faults(1, ALL_FAULTS),
        Config::new("fair", vec![plain(Recipe::Fair), plain(Recipe::Fair)]).with_faults(1, FAULTS),
        Config::new("reentrant", vec![Program::Reenter, Program::Reenter]).with_faults(1, FAULTS),
        Config::new("read-write", vec![plain(Recipe::Read), plain(Recipe::Write)]).with_faults(1, FAULTS),
        Config::new("downgrade", vec![Program::Downgrade, plain(Recipe::Read)]).with_faults(1, FAULTS),
        Config::new("writer-downgrade", vec![Program::Downgrade, plain(Recipe::Write)]).with_faults(1, FAULTS),
        Config::new(
            "timed",
            vec![
                plain(Recipe::Fair),
                Program::Plain {
                    recipe: Recipe::Fair,
                    patience: Patience::Timeout(Duration::from_millis(500)),
                },
            ],
        )
        .with_faults(1, FAULTS),
        Config::new(
            "try",
            vec![
                plain(Recipe::Write),
                Program::Plain {
                    recipe: Recipe::Write,
                    patience: Patience::Try,
                },
            ],
        )
        .with_faults(1, FAULTS),
        Config::new(
            "abandoned",
            vec![
                plain(Recipe::Fair),
                Program::Abandon {
                    recipe: Recipe::Fair,
                    after: Duration::from_millis(300),
                },
            ],
        )
        .with_faults(1, FAULTS),
        Config::new("mixed-recipes", vec![plain(Recipe::Exclusive), plain(Recipe::Fair)]).with_faults(1, FAULTS),
        Config::new("curator", vec![plain(Recipe::Read), plain(Recipe::Write)])
            .with_layout(Layout::Curator)
            .with_faults(1, FAULTS),
        Config::new("kazoo-wrapped", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
            .with_layout(Layout::Kazoo)
            .with_setup(wrapped_counter)
            .with_faults(1, &[FaultKind::Blip, FaultKind::Expire]),
        Config::new("native-wrapped", vec![plain(Recipe::Fair), plain(Recipe::Write)])
            .with_setup(wrapping_counter)
            .with_faults(1, &[FaultKind::Blip, FaultKind::Expire]),
        Config::new("semaphore", vec![permits(1, 1), permits(1, 1)]).with_faults(1, FAULTS),
        semaphore_many(),
        multi_beside_a_holder(),
        counts_beside_the_reaper(),
        // etcd's order (decision 0068): the names without a sequence, the queue in the order of the listing, every
        // waiter listing again after its wake-up.
        Config::new("fair-by-creation", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
            .with_setup(ordered_by_creation)
            .with_faults(1, FAULTS),
        Config::new(
            "read-write-by-creation",
            vec![plain(Recipe::Read), plain(Recipe::Write)],
        )
        .with_setup(ordered_by_creation)
        .with_faults(1, FAULTS),
        Config::new("semaphore-by-creation", vec![permits(1, 1), permits(1, 1)])
            .with_setup(ordered_by_creation)
            .with_faults(1, FAULTS),
        Config::new("election", vec![Program::Stand, Program::Stand]).with_faults(1, FAULTS),
        // An observer beside a candidate (beside two, the schedules pass the bound: walked at random, in `random()`).
        Config::new("election-observed", vec![Program::Stand, Program::Observe { reads: 3 }]).with_faults(1, FAULTS),
        // Two candidates as Curator's `LeaderLatch` (its `latch-` names, a family of their own).
        Config::new("curator-latch", vec![Program::StandLatch, Program::StandLatch])
            .with_layout(Layout::Curator)
            .with_faults(1, FAULTS),
    ]
}

/// A holder and two waiters, one of which gives up, of `Locks` built for others' writes of lock-node data, with an
/// operator's request to let go written into any node at any point (Curator's `Revoker` takes any participant's
/// path): the waiter behind the one that gives up must not take the write for its blocker's hold (found by review,
/// helper-96).
fn foreign_write() -> Config {
    foreign_writes("foreign-write", one_giving_up(), 1)
}

/// A fair holder, a fair waiter that gives up after 300 ms, and a fair waiter.
fn one_giving_up() -> Vec<Program> {
    vec![
        plain(Recipe::Fair),
        Program::Abandon {
            recipe: Recipe::Fair,
            after: Duration::from_millis(300),
        },
        plain(Recipe::Fair),
    ]
}

/// `programs`, each client's `Locks` built for others' writes, with up to `writes` operator's writes into any node.
fn foreign_writes(name: &'static str, programs: Vec<Program>, writes: u32) -> Config {
    Config::new(name, programs)
        .with_foreign_writes()
        .with_faults(writes, &[FaultKind::OperatorWrite])
}

/// Three tasks of one process in a cohort of at most two holds of a node, and another session queued between them:
/// passes, the bound, and faults in the middle of a cohort.
fn cohort() -> Config {
    Config::new(
        "cohort-fair",
        vec![
            Program::Tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair), plain(Recipe::Fair)]),
            plain(Recipe::Fair),
        ],
    )
    .with_cohorts(2)
    .with_faults(2, ALL_FAULTS)
}

/// Read/write cohorts of at most two holds of a node: two readers of one process share a node, a writer of the
/// process passes its node (and downgrades, keeping it), beside another session's writer queued between them.
fn cohort_read_write() -> Config {
    Config::new(
        "cohort-read-write",
        vec![
            Program::Tasks(vec![
                plain(Recipe::Read),
                plain(Recipe::Read),
                plain(Recipe::Write),
                Program::Downgrade,
            ]),
            plain(Recipe::Write),
        ],
    )
    .with_cohorts(2)
    .with_faults(2, ALL_FAULTS)
}

/// Three readers of a cohort of K = 2 beside another session's writer: the node retired at the bound, a retired node
/// held beside the new one, a reader given a lost node while another leads (`alone`).
fn cohort_readers() -> Config {
    Config::new(
        "cohort-readers",
        vec![
            Program::Tasks(vec![
                plain(Recipe::Read),
                Program::Plain {
                    recipe: Recipe::Read,
                    patience: Patience::Timeout(Duration::from_secs(1)),
                },
                Program::Abandon {
                    recipe: Recipe::Read,
                    after: Duration::from_millis(200),
                },
            ]),
            plain(Recipe::Write),
        ],
    )
    .with_cohorts(2)
    .with_faults(2, ALL_FAULTS)
}

/// Four fair clients, the second and third giving up (after 200 ms, and a timeout of 300 ms): whoever queues fourth
/// behind two of them has a scout that goes without holding, then a blocker that does (decision 79).
fn scouts_cancelled() -> Config {
    Config::new(
        "scouts-cancelled",
        vec![
            plain(Recipe::Fair),
            Program::Abandon {
                recipe: Recipe::Fair,
                after: Duration::from_millis(200),
            },
            Program::Plain {
                recipe: Recipe::Fair,
                patience: Patience::Timeout(Duration::from_millis(300)),
            },
            plain(Recipe::Fair),
        ],
    )
}

/// A multi-lock of two paths, the second held (or about to be) by another client: its first tries may take the
/// first member and find the second busy, then wait for it; a fault at any point (an expiry while a try cleans up
/// among them) must never let the set be handed out with a member lost.
fn multi_beside_a_holder() -> Config {
    Config::new(
        "multi",
        vec![
            Program::Multi {
                patience: Patience::Forever,
            },
            Program::Elsewhere(Box::new(plain(Recipe::Fair))),
        ],
    )
    .with_faults(1, &[FaultKind::Expire])
}

/// Two clients of a Curator-layout semaphore that ask for different counts (1 and 2), on a path that stores the
/// count 1 and that the container reaper removes as they start: whichever goes first, the other is refused
/// (`PermitsMismatch`), never let in beside it. A delay lets the reaper act between any two requests.
fn counts_beside_the_reaper() -> Config {
    Config::new(
        "semaphore-counts-reaped",
        vec![
            permits(1, 1),
            Program::Permits {
                permits: 2,
                n: 1,
                patience: Patience::Forever,
            },
        ],
    )
    .with_layout(Layout::Curator)
    .with_setup(reaped_as_it_starts)
    .with_faults(1, &[FaultKind::Delay])
}

/// Makes the lock path as a container storing the permit count 1, empties it, and waits until the reaper's next pass
/// is a millisecond away: it removes the path a millisecond after the clients start.
fn reaped_as_it_starts(cluster: &recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    let cluster = cluster.clone();
    Box::pin(async move {
        let admin = cluster.client();
        let on = admin.current();
        on.create("/model", b"", CreateMode::Persistent).await.expect("setup");
        on.create(PATH, b"1", CreateMode::Container).await.expect("setup");
        let child = format!("{PATH}/leases");
        on.create(&child, b"", CreateMode::Persistent).await.expect("setup");
        on.delete(&child).await.expect("setup");
        let pass = cluster
            .next_container_check()
            .expect("the reaper looks every session timeout");
        tokio::time::sleep_until(pass - Duration::from_millis(1)).await;
    })
}

/// A semaphore's claim of `n` of `of` permits, waiting as long as it takes.
fn permits(of: u32, n: u32) -> Program {
    Program::Permits {
        permits: of,
        n,
        patience: Patience::Forever,
    }
}

/// A claim on both permits of two and a timed claim on one: whichever comes second must wait for the first. (Three
/// clients, where a waiter's window holds two nodes, are too many schedules to walk them all, even without faults:
/// `semaphore-three` and `semaphore-mixed` in [`random`].)
fn semaphore_many() -> Config {
    Config::new(
        "semaphore-many",
        vec![
            permits(2, 2),
            Program::Permits {
                permits: 2,
                n: 1,
                patience: Patience::Timeout(Duration::from_millis(500)),
            },
        ],
    )
    .with_faults(1, FAULTS)
}

/// Configurations run with switches on: (switches, configuration).
pub fn switched() -> Vec<(Vec<Mutant>, Config)> {
    let marking = |name| {
        Config::new(
            name,
            vec![plain(Recipe::Fair), plain(Recipe::Write), plain(Recipe::Fair)],
        )
        .with_faults(
            1,
            &[FaultKind::Expire, FaultKind::Blip, FaultKind::Crash, FaultKind::Delay],
        )
    };
    // Two tasks of one session and another session, two faults.
    let marking_one_session = |name| {
        Config::new(
            name,
            vec![
                Program::Tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair)]),
                plain(Recipe::Fair),
            ],
        )
        .with_faults(2, ALL_FAULTS)
    };
    vec![
        // The `first` mark is written only after a listing of more than 32 names in production; this makes every
        // node that comes to hold the lock write it, so that three clients exercise it (and the waiter that trusts it):
        // in the release's transaction (decision 64).
        (vec![Mutant::AlwaysMark], marking("marking")),
        // Every hold marking and no scout, as in a long queue (no scout there: its holders mark): a waiter not known
        // to be behind the first watches its blocker's deletion alone, and that watch's event decides its hold
        // (decision 0092; found by review, helper-149: with scouts, the watch decided no hold in `marking`).
        (vec![Mutant::AlwaysMark, Mutant::NoScout], marking("marking-no-scout")),
        (
            vec![Mutant::AlwaysMark, Mutant::NoScout],
            marking_one_session("marking-one-session-no-scout"),
        ),
        // The same with a write's events delivered together, as ZooKeeper sends them: a waiter may find the
        // deletion's event there already when it heeds the change of its blocker's data, and hold on it without a read
        // (`Told::Deleted`), which a delivery per event never reaches (proposed by review, helper-150).
        (
            vec![Mutant::AlwaysMark, Mutant::NoScout],
            marking("marking-no-scout-one-write").with_events_of_a_write_together(),
        ),
        // The same, marked as soon as the node holds (over the data it was made with), as a backend without
        // transactions does: no backend here lacks them, so only this keeps that path checked (helper-34).
        (
            vec![Mutant::AlwaysMark, Mutant::MarkWhenHeld],
            marking("marking-when-held"),
        ),
        // Tasks sharing a session, every hold marking: a holder handed the lock within the process marks too, and
        // passes the mark on (decision 75; found by review, helper-69: no configuration had a handed holder mark).
        (vec![Mutant::AlwaysMark], marking_one_session("marking-one-session")),
        (
            vec![Mutant::AlwaysMark],
            Config::new(
                "marking-one-session-read-write",
                vec![
                    Program::Tasks(vec![plain(Recipe::Write), plain(Recipe::Read), Program::Downgrade]),
                    plain(Recipe::Write),
                ],
            )
            .with_faults(2, ALL_FAULTS),
        ),
        // Built for others' writes (decision 81), with up to two operator's writes into any node: every hold marking as
        // soon as it holds, the only mark a waiter can read back there (a release's mark is not sent under the
        // setting), and tasks sharing a session, so that handoffs within the process meet the writes (found by
        // review, helper-97: no configuration had a mark read back under the setting).
        (
            vec![Mutant::AlwaysMark, Mutant::MarkWhenHeld],
            foreign_writes("foreign-write-marking-when-held", one_giving_up(), 2),
        ),
        (
            vec![Mutant::AlwaysMark],
            foreign_writes(
                "foreign-write-one-session",
                vec![Program::Tasks(one_giving_up()), plain(Recipe::Fair)],
                2,
            ),
        ),
        // Three tasks of one session, two of them in line through its view of the queue (decision 0085; from the second
        // waiter on, not the 128th), beside another session, with an operator's delete: without handoffs within the
        // process (whose window the oracle must leave out), the oracle checks every hold after a delete, and a waiter
        // of the view that missed its own node's deletion is caught (`Mutant::ViewIgnoresOwn`).
        (vec![Mutant::NoHandoff, Mutant::ViewsFromTwo], views_one_session()),
    ]
}

/// Three tasks of one session and a client of another, fair, with up to two faults of every kind.
fn views_one_session() -> Config {
    Config::new(
        "views-one-session",
        vec![
            Program::Tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair), plain(Recipe::Fair)]),
            plain(Recipe::Fair),
        ],
    )
    .with_faults(2, ALL_FAULTS)
}

/// The larger configurations for random walks: three and four clients, mixed recipes, two faults.
pub fn random() -> Vec<Config> {
    vec![
        // Tasks sharing one session: walked at random (their schedules do not replay exactly).
        etcd_layout(),
        etcd_layout_apart(),
        foreign_write(),
        Config::new(
            "three-mixed",
            vec![plain(Recipe::Read), plain(Recipe::Write), Program::Reenter],
        )
        .with_faults(2, ALL_FAULTS),
        Config::new(
            "four-mixed",
            vec![
                plain(Recipe::Read),
                Program::Downgrade,
                plain(Recipe::Fair),
                Program::Plain {
                    recipe: Recipe::Write,
                    patience: Patience::Timeout(Duration::from_secs(1)),
                },
            ],
        )
        .with_faults(2, ALL_FAULTS),
        Config::new(
            "four-exclusive",
            vec![
                plain(Recipe::Exclusive),
                plain(Recipe::Exclusive),
                Program::Abandon {
                    recipe: Recipe::Exclusive,
                    after: Duration::from_millis(200),
                },
                plain(Recipe::Exclusive),
            ],
        )
        .with_faults(2, ALL_FAULTS),
        // Scouts: the fourth waits behind the third (its blocker) with the second as its scout; the second gives up
        // while the first holds, the third waits only so long: a scout cancelled, then a blocker, with faults.
        scouts_cancelled().with_faults(2, ALL_FAULTS),
        // In the order of the list: a writer, a reader, a writer that gives up, a writer. The third's scout is the
        // first writer (its blocker, the reader, is not first); the fourth has no scout (the contender ahead of its
        // blocker is a reader: readers are no scouts). Other orders put readers behind writers, scouting a writer.
        Config::new(
            "scouts-read-write",
            vec![
                plain(Recipe::Write),
                plain(Recipe::Read),
                Program::Abandon {
                    recipe: Recipe::Write,
                    after: Duration::from_millis(200),
                },
                plain(Recipe::Write),
            ],
        )
        .with_faults(2, ALL_FAULTS),
        // Three fair clients: the third's scout is the first, a holder; faults around its list and the kept watch.
        Config::new(
            "three-fair",
            vec![plain(Recipe::Fair), plain(Recipe::Fair), plain(Recipe::Fair)],
        )
        .with_faults(2, ALL_FAULTS),
        // Two candidates and an observer of the election, each a process of its own.
        Config::new(
            "election-three",
            vec![Program::Stand, Program::Stand, Program::Observe { reads: 3 }],
        )
        .with_faults(2, ALL_FAULTS),
        // Tasks of one session (one process), and another session that may queue between them. Random walks: tokio's
        // watch channel wakes its receivers in a random order, so which task of a session sends first after a
        // reconnection is not the explorer's choice, and an exhaustive walk would see it as nondeterminism.
        Config::new(
            "one-session-fair",
            vec![
                Program::Tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair)]),
                plain(Recipe::Fair),
            ],
        )
        .with_faults(2, ALL_FAULTS),
        cohort(),
        Config::new(
            "cohort-timed",
            vec![
                Program::Tasks(vec![
                    plain(Recipe::Fair),
                    Program::Plain {
                        recipe: Recipe::Fair,
                        patience: Patience::Timeout(Duration::from_secs(1)),
                    },
                    Program::Plain {
                        recipe: Recipe::Fair,
                        patience: Patience::Try,
                    },
                    Program::Abandon {
                        recipe: Recipe::Fair,
                        after: Duration::from_millis(200),
                    },
                ]),
                plain(Recipe::Fair),
            ],
        )
        .with_cohorts(2)
        .with_faults(2, ALL_FAULTS),
        cohort_read_write(),
        cohort_readers(),
        Config::new(
            "one-session-read-write",
            vec![
                Program::Tasks(vec![plain(Recipe::Write), plain(Recipe::Read), Program::Downgrade]),
                plain(Recipe::Write),
            ],
        )
        .with_faults(2, ALL_FAULTS),
        reader_ahead(),
        Config::new(
            "one-session-exclusive",
            vec![
                Program::Tasks(vec![plain(Recipe::Exclusive), plain(Recipe::Exclusive)]),
                plain(Recipe::Exclusive),
            ],
        )
        .with_faults(2, ALL_FAULTS),
        Config::new(
            "one-session-timed",
            vec![
                Program::Tasks(vec![
                    plain(Recipe::Write),
                    Program::Plain {
                        recipe: Recipe::Write,
                        patience: Patience::Timeout(Duration::from_secs(3)),
                    },
                    Program::Plain {
                        recipe: Recipe::Write,
                        patience: Patience::Try,
                    },
                ]),
                Program::Plain {
                    recipe: Recipe::Read,
                    patience: Patience::Timeout(Duration::from_secs(20)),
                },
            ],
        )
        .with_faults(2, ALL_FAULTS),
        // A semaphore of two: a claim of one waiting behind two holders watches both (its window).
        Config::new(
            "semaphore-three",
            vec![
                permits(2, 1),
                permits(2, 1),
                Program::Permits {
                    permits: 2,
                    n: 1,
                    patience: Patience::Try,
                },
            ],
        )
        .with_faults(2, ALL_FAULTS),
        // The peers' semaphores: a mutex, then a lease made and counted under it (Curator), or counted then made
        // (kazoo, whose count is right only under the mutex). Two clients are already too many schedules to walk
        // them all (the mutex, the lease and the count check make each acquire long).
        Config::new("semaphore-curator", vec![permits(1, 1), permits(1, 1), permits(1, 1)])
            .with_layout(Layout::Curator)
            .with_faults(2, ALL_FAULTS),
        Config::new(
            "semaphore-kazoo",
            vec![
                permits(2, 1),
                permits(2, 1),
                Program::AbandonPermits {
                    permits: 2,
                    n: 1,
                    after: Duration::from_millis(200),
                },
            ],
        )
        .with_layout(Layout::Kazoo)
        .with_faults(2, ALL_FAULTS),
        Config::new(
            "semaphore-mixed",
            vec![
                permits(3, 2),
                permits(3, 1),
                Program::Permits {
                    permits: 3,
                    n: 2,
                    patience: Patience::Timeout(Duration::from_secs(1)),
                },
                Program::AbandonPermits {
                    permits: 3,
                    n: 1,
                    after: Duration::from_millis(200),
                },
            ],
        )
        .with_faults(2, ALL_FAULTS),
        // The multi-lock beside holders of both its members, with every kind of fault.
        Config::new(
            "multi-three",
            vec![
                Program::Multi {
                    patience: Patience::Forever,
                },
                Program::Elsewhere(Box::new(plain(Recipe::Fair))),
                Program::Multi {
                    patience: Patience::Timeout(Duration::from_secs(1)),
                },
            ],
        )
        .with_faults(2, ALL_FAULTS),
        Config::new(
            "one-session-reentrant",
            vec![
                Program::Tasks(vec![Program::Reenter, plain(Recipe::Fair)]),
                Program::Tasks(vec![Program::Reenter, plain(Recipe::Fair)]),
            ],
        )
        .with_faults(2, ALL_FAULTS),
    ]
}

/// A reader and a writer of one session, and another session's reader that may hold beside the first: a reader's
/// release must not hand the lock to the writer while the other reader holds.
fn reader_ahead() -> Config {
    Config::new(
        "one-session-reader-ahead",
        vec![
            Program::Tasks(vec![plain(Recipe::Read), plain(Recipe::Write)]),
            plain(Recipe::Read),
        ],
    )
    .with_faults(1, ALL_FAULTS)
}

/// Makes the lock path with its sequence counter in the range ZooKeeper writes with nine digits (-999999999 … -1), a
/// persistent node (never reaped).
fn wrapped_counter(cluster: &recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    counter_at(cluster.clone(), -3)
}

/// etcd's own lock's layout (Go's `concurrency.Mutex`): two tasks of one session take turns on its one key, made
/// again for each hold, beside another session. With every fault, the operator's delete included: where deletes are
/// conditioned on the node's creation, the oracles go on past it (a release must not delete the key a session-mate
/// made again after it).
fn etcd_layout() -> Config {
    etcd_layout_of("etcd-layout", Program::Tasks)
}

/// As [`etcd_layout`], with the session's two tasks on two `Locks` of its one backend: they meet one key name
/// without taking turns (decision 70), so a release meets a key a session-mate made again, and an acquire finds its
/// name taken by a mate's key.
fn etcd_layout_apart() -> Config {
    etcd_layout_of("etcd-layout-apart", Program::TasksApart)
}

/// Two fair acquires as `tasks` of one session, beside another session's, in the etcd layout on etcd's order.
fn etcd_layout_of(name: &'static str, tasks: fn(Vec<Program>) -> Program) -> Config {
    Config::new(
        name,
        vec![
            tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair)]),
            plain(Recipe::Fair),
        ],
    )
    .with_layout(Layout::Etcd)
    .with_setup(ordered_by_creation)
    .with_faults(1, ALL_FAULTS)
}

/// Children ordered by creation, as on etcd ([`ChildOrder::Creation`](recipes_core::backend::ChildOrder::Creation)).
fn ordered_by_creation(cluster: &recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    cluster.clone().ordered_by(recipes_core::backend::ChildOrder::Creation);
    Box::pin(async {})
}

/// The counter one step before the wrap of its signed 32-bit value.
fn counter_at_the_wrap(cluster: &recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    counter_at(cluster.clone(), i32::MAX)
}

/// The counter two steps before the wrap of its signed 32-bit value.
fn wrapping_counter(cluster: &recipes_mem::MemCluster) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    counter_at(cluster.clone(), i32::MAX - 1)
}

fn counter_at(cluster: recipes_mem::MemCluster, next: i32) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async move {
        let admin = cluster.client();
        let on = admin.current();
        on.create("/model", b"", CreateMode::Persistent).await.expect("setup");
        on.create(PATH, b"", CreateMode::Persistent).await.expect("setup");
        cluster.set_next_sequence(PATH, next).expect("setup");
        // The admin session closes here; the path stays (persistent).
    })
}

/// A bug the checker must find: the mutant that re-introduces it, and the configuration it shows in.
#[derive(Debug, Clone)]
pub struct Sensitivity {
    /// Which problem it was.
    pub problem: &'static str,
    /// The switches that re-introduce it.
    pub mutants: &'static [Mutant],
    /// Where it shows.
    pub config: Config,
    /// Parts of the message of the violation that characterise it, separated by `|` (any of them).
    pub shows_as: &'static str,
    /// Found by seeded random walks rather than the exhaustive search: the configuration has tasks sharing one
    /// session, whose wake-up order after an event is not the explorer's choice.
    pub by_walks: bool,
}

/// The known bugs, each with the configuration in which the checker finds it.
pub fn sensitivity() -> Vec<Sensitivity> {
    vec![
        Sensitivity {
            problem: "decision 0085: a waiter in its session's view of the queue ignores what the view tells of its \
                      own node: an operator's delete of it is missed, and it holds once its blocker goes",
            mutants: &[Mutant::NoHandoff, Mutant::ViewsFromTwo, Mutant::ViewIgnoresOwn],
            config: views_one_session(),
            shows_as: "two holders|is gone",
            by_walks: true,
        },
        Sensitivity {
            problem: "found by review (helper-96): built for others' writes of lock-node data, a waiter still takes a \
                      change of its blocker's data for its hold when the blocker is gone as it reads it back: a \
                      request to let go written into a waiting node whose acquire is then given up lets the waiter \
                      behind in beside the holder",
            mutants: &[Mutant::ForeignWritesTrusted],
            config: foreign_write(),
            shows_as: "two holders",
            by_walks: false,
        },
        Sensitivity {
            problem: "decision 0092: built for others' writes of lock-node data, a waiter that watched its blocker's \
                      deletion alone takes that deletion, told beside a change of the blocker's data, for the end of \
                      a hold, the change untrusted: a request to let go written into a waiting node whose acquire is \
                      then given up lets the waiter behind in beside the holder",
            mutants: &[Mutant::GoneWatchUntrusted, Mutant::AlwaysMark, Mutant::NoScout],
            config: foreign_write(),
            shows_as: "two holders",
            by_walks: false,
        },
        Sensitivity {
            problem: "11: a task of one session claims the lock on a watch event while its session's release is in \
                      flight, after a stall: the guard it gets has an expired lease",
            mutants: &[Mutant::NoLeaseConfirm],
            config: Config::new(
                "one-session-fair",
                vec![
                    Program::Tasks(vec![plain(Recipe::Fair), plain(Recipe::Fair)]),
                    plain(Recipe::Fair),
                ],
            )
            .with_faults(1, &[FaultKind::Delay]),
            shows_as: "a guard that is not valid",
            by_walks: false,
        },
        Sensitivity {
            problem: "found by review: a reader's release hands the lock to a writer of its session while another \
                      session's reader holds",
            mutants: &[Mutant::ReadersHandOver],
            config: reader_ahead(),
            shows_as: "two holders",
            by_walks: true,
        },
        Sensitivity {
            problem: "found by review: an election's observer names the first node of a kazoo queue whose sequence \
                      has wrapped, a newcomer, then the older leader again",
            mutants: &[Mutant::ObserverIgnoresWrap],
            config: Config::new(
                "kazoo-wrapping-election",
                vec![Program::Stand, Program::Stand, Program::Observe { reads: 2 }],
            )
            .with_layout(Layout::Kazoo)
            .with_setup(counter_at_the_wrap),
            shows_as: "the observer reported term",
            by_walks: false,
        },
        Sensitivity {
            problem: "11, in an election (its leader's check of the term's lease switched off): a candidate of one \
                      process comes to lead on a watch event while its process's resignation is in flight, after a \
                      stall, and acts as leader with a lease already over, while the next leader may act too",
            mutants: &[Mutant::NoLeaseConfirm],
            config: Config::new(
                "one-session-election",
                vec![Program::Tasks(vec![Program::Stand, Program::Stand]), Program::Stand],
            )
            .with_faults(1, &[FaultKind::Delay]),
            shows_as: "a guard that is not valid",
            by_walks: true,
        },
        Sensitivity {
            problem:
                "in an election, the leader's check of its term against its session's lease switched off (trusted \
                      for three session timeouts): a leader cut off past its session still leads once the server has \
                      deleted its node, and the next candidate is free to lead beside it (the checker stops there)",
            mutants: &[Mutant::TermPastLease],
            config: Config::new("election", vec![Program::Stand, Program::Stand])
                .with_faults(1, &[FaultKind::Partition]),
            shows_as: "guard is valid but its node",
            by_walks: false,
        },
        Sensitivity {
            problem: "on etcd's order (by creation), a waiter that sorts the listing by name instead of taking its \
                      order: a later contender whose attempt id sorts first holds beside the first",
            mutants: &[Mutant::CreationOrderIgnored],
            config: Config::new("fair-by-creation", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
                .with_setup(ordered_by_creation),
            shows_as: "two holders",
            by_walks: false,
        },
        Sensitivity {
            problem: "5, in an election: a candidate's create sent on an expired session becomes an ephemeral of the \
                      new one (an orphan that leads for nobody)",
            mutants: &[Mutant::UnboundRequests],
            config: Config::new("election", vec![Program::Stand, Program::Stand]).with_faults(1, &[FaultKind::Expire]),
            shows_as: "left behind",
            by_walks: false,
        },
        Sensitivity {
            problem: "1: the stale exclusive release deletes the next holder's node (a request of an expired session \
                      runs on its successor)",
            mutants: &[Mutant::UnboundRequests],
            config: Config::new("exclusive", vec![plain(Recipe::Exclusive), plain(Recipe::Exclusive)])
                .with_faults(1, &[FaultKind::Expire]),
            shows_as: "is valid but its node",
            by_walks: false,
        },
        Sensitivity {
            problem: "5: a create sent on an expired session becomes an ephemeral of the new one (an orphan)",
            mutants: &[Mutant::UnboundRequests],
            config: Config::new("fair", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
                .with_faults(1, &[FaultKind::Expire]),
            shows_as: "left behind",
            by_walks: false,
        },
        Sensitivity {
            problem: "2: exclusive lost() watches whoever owns the name now",
            mutants: &[Mutant::LostIgnoresCzxid],
            config: Config::new("exclusive", vec![plain(Recipe::Exclusive), plain(Recipe::Exclusive)])
                .with_faults(1, &[FaultKind::OperatorDelete]),
            shows_as: "lost() did not resolve",
            by_walks: false,
        },
        Sensitivity {
            problem: "3: re-entry after the lock was lost succeeds",
            mutants: &[Mutant::ReentryIgnoresLoss],
            config: Config::new("reentrant", vec![Program::Reenter, Program::Reenter])
                .with_faults(1, &[FaultKind::Expire]),
            shows_as: "not valid",
            by_walks: false,
        },
        Sensitivity {
            problem: "3: a downgrade after the lock was lost succeeds",
            mutants: &[Mutant::ReentryIgnoresLoss],
            config: Config::new("writer-downgrade", vec![Program::Downgrade, plain(Recipe::Write)])
                .with_faults(1, &[FaultKind::Expire]),
            shows_as: "not valid",
            by_walks: false,
        },
        Sensitivity {
            problem: "4: kazoo nine-digit sequences not parsed, the unparsed node forgotten (orphans)",
            mutants: &[Mutant::KazooNineDigits, Mutant::MissingForgetsNode],
            config: Config::new("kazoo-wrapped", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
                .with_layout(Layout::Kazoo)
                .with_setup(wrapped_counter)
                .with_faults(0, &[]),
            shows_as: "left behind",
            by_walks: false,
        },
        Sensitivity {
            problem: "5: the cleanup ignores a create still in flight, which lands after the caller gave up",
            mutants: &[Mutant::CleanupIgnoresInFlight],
            config: Config::new(
                "abandoned",
                vec![
                    plain(Recipe::Fair),
                    Program::Abandon {
                        recipe: Recipe::Fair,
                        after: Duration::from_millis(300),
                    },
                ],
            )
            .with_faults(1, &[FaultKind::Delay]),
            shows_as: "left behind",
            by_walks: false,
        },
        Sensitivity {
            problem: "found by the checker: after a lost delete reply, the retried release of the fixed node checks \
                      it on a server that does not show the first delete yet, and deletes the next holder's node",
            mutants: &[Mutant::NoSyncAfterLostReply],
            config: Config::new("exclusive", vec![plain(Recipe::Exclusive), plain(Recipe::Exclusive)])
                .with_faults(1, &[FaultKind::Blip]),
            shows_as: "is valid but its node",
            by_walks: false,
        },
        Sensitivity {
            problem: "found by review: a create of a broken connection lands after the recovery looked for it (an \
                      orphan, or the exclusive recipe waiting on its own node)",
            mutants: &[Mutant::NoSyncAfterLostReply],
            config: Config::new("fair", vec![plain(Recipe::Fair), plain(Recipe::Fair)])
                .with_faults(1, &[FaultKind::Blip]),
            shows_as: "left behind|never finished",
            by_walks: false,
        },
        Sensitivity {
            problem:
                "kazoo-layout semaphore (a plausible slip): the lease trusts the count made under the mutex, lets \
                      the mutex go once counted and does not count again with its create",
            mutants: &[Mutant::KazooCountOnly],
            config: Config::new("semaphore-kazoo-two", vec![permits(1, 1), permits(1, 1)]).with_layout(Layout::Kazoo),
            shows_as: "too many permits",
            by_walks: false,
        },
        Sensitivity {
            problem: "semaphore (a plausible slip, not a bug it had): a claim counts the permits claimed ahead of it \
                      but not its own, and a claim on two goes in beside a holder of one",
            mutants: &[Mutant::PermitOverGrant],
            config: semaphore_many().with_faults(0, &[]),
            shows_as: "too many permits",
            by_walks: false,
        },
        Sensitivity {
            problem: "24.1: a multi-lock hands out its set with a member whose session expired while another member's \
                      try hid the expiry",
            mutants: &[Mutant::MultiHandsOutLost],
            config: multi_beside_a_holder().with_faults(1, &[FaultKind::Expire]),
            shows_as: "not valid",
            by_walks: false,
        },
        Sensitivity {
            problem: "24.2: the Curator-layout semaphore checks its count before its mutex; the reaper removes the \
                      path in between and a client of another count holds beside it",
            mutants: &[Mutant::CountCheckedBeforeMutex],
            config: counts_beside_the_reaper(),
            shows_as: "too many permits",
            by_walks: false,
        },
        Sensitivity {
            problem: "26 (a plausible slip): a cohort passes its node on however many holds it has had, and another \
                      session's waiter queued behind it starves",
            mutants: &[Mutant::CohortUnbounded],
            config: cohort().with_faults(0, &[]),
            shows_as: "starves",
            by_walks: true,
        },
        Sensitivity {
            problem: "26 (a plausible slip): a read cohort lets its readers join its node however many holds it has \
                      had, and another session's writer queued behind it starves",
            mutants: &[Mutant::CohortUnbounded],
            config: cohort_readers().with_faults(0, &[]),
            shows_as: "starves",
            by_walks: true,
        },
        Sensitivity {
            problem: "found by design (decision 79): a waiter takes its scout's deletion for its blocker being first, \
                      without listing again; a scout that gave up, then a blocker that gave up, let it in beside the \
                      holder",
            mutants: &[Mutant::ScoutMeansFirst],
            config: scouts_cancelled().with_faults(0, &[]),
            shows_as: "two holders",
            by_walks: false,
        },
        Sensitivity {
            problem: "found by review (helper-89): a wait uses the blocker's watch kept through its scout's list \
                      whatever blocker the list named; the blocker gave up while the list was in flight, and its \
                      fired watch let the waiter in beside the holder the list named",
            mutants: &[Mutant::KeptWatchOfAnotherBlocker],
            config: scouts_cancelled().with_faults(2, ALL_FAULTS),
            shows_as: "two holders",
            by_walks: true,
        },
        Sensitivity {
            problem: "found by review: a waiter in line holds on its blocker's deletion after a disconnection during \
                      its wait; ZooKeeper sets the client's watches again at the reconnection and reports them in its \
                      own order, so its own node's deletion, made first, may come after the blocker's (the in-memory \
                      backend reported them in the order of the changes until the thirtieth session, and the checker \
                      could not see it)",
            mutants: &[Mutant::TrustAcrossReconnection],
            config: Config::new(
                "fair-cut-off",
                vec![plain(Recipe::Fair), plain(Recipe::Fair), plain(Recipe::Fair)],
            )
            .with_faults(2, &[FaultKind::Blip, FaultKind::OperatorDelete]),
            shows_as: "two holders|is valid but its node",
            by_walks: false,
        },
        Sensitivity {
            problem: "6: recipes ignore each other's nodes on one path",
            mutants: &[Mutant::NoForeignCheck],
            config: Config::new("mixed-recipes", vec![plain(Recipe::Exclusive), plain(Recipe::Fair)])
                .with_faults(0, &[]),
            shows_as: "two holders",
            by_walks: false,
        },
    ]
}
