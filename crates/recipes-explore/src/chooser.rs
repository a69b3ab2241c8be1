//! The explorer's choices: depth-first search with sleep sets, random walks (uniform, or by PCT's priorities), and
//! replays.

use recipes_core::backend::SessionId;

use crate::choice::Touch;

/// A choice in the search's sleep set: its identity, stable across runs, and what it touches.
#[derive(Debug, Clone)]
struct Candidate<C> {
    pub id: C,
    pub access: Touch,
}

/// A choice point of the depth-first search: the choices that were awake there, and which one is being explored.
#[derive(Debug, Clone)]
struct Frame<C> {
    awake: Vec<C>,
    next: usize,
}

/// Picks among enabled events: depth-first with sleep sets (partial-order reduction), at random, or replaying the
/// exact choices of an earlier run.
pub(crate) struct Chooser<C> {
    mode: Mode,
    /// The search's choice points, kept across runs (depth-first mode).
    frames: Vec<Frame<C>>,
    /// Depth reached in the current run.
    depth: usize,
    /// The current run's sleep set: choices whose outcomes are explored elsewhere, until something that does not
    /// commute with them happens.
    sleep: Vec<Candidate<C>>,
    /// Every choice the current run made (its index among the enabled ones): replays it exactly.
    pub made: Vec<usize>,
    /// Set when a replayed choice point offered different choices than before.
    pub nondeterministic: bool,
}

enum Mode {
    Search,
    Random(u64),
    Pct(Pct),
    Replay(Vec<usize>),
}

/// Probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi and Nagarakatte, ASPLOS 2010), over the
/// sessions: each session (and time, as one more) gets a random priority when first seen, the enabled event of the
/// highest-priority session runs, and at `depth - 1` random steps the session that ran drops below every other. A
/// bug that needs `depth` events in a given order is found by one walk with a probability that does not shrink with
/// the schedule's length as a uniform walk's does.
struct Pct {
    rng: u64,
    depth: u32,
    /// The steps at which the running session's priority drops (the k-th to `k`, below every first priority).
    change_points: Vec<usize>,
    step: usize,
    priorities: Vec<(Option<SessionId>, u64)>,
}

impl Pct {
    fn priority(&mut self, owner: Option<SessionId>) -> u64 {
        if let Some((_, p)) = self.priorities.iter().find(|(o, _)| *o == owner) {
            return *p;
        }
        let p = u64::from(self.depth) + next_random(&mut self.rng) % 1_000_000_000;
        self.priorities.push((owner, p));
        p
    }
}

fn next_random(state: &mut u64) -> u64 {
    // splitmix64
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl<C: Clone + PartialEq + std::fmt::Debug> Chooser<C> {
    pub(crate) fn search() -> Self {
        Self::with_mode(Mode::Search)
    }

    pub(crate) fn random(seed: u64) -> Self {
        Self::with_mode(Mode::Random(seed ^ 0x9e37_79b9_7f4a_7c15))
    }

    /// PCT walks of `depth` (at least 1) over schedules of about `length` events.
    pub(crate) fn pct(seed: u64, depth: u32, length: usize) -> Self {
        let mut rng = seed ^ 0x6a09_e667_f3bc_c908;
        let change_points = (1..depth.max(1))
            .map(|_| (next_random(&mut rng) % length.max(1) as u64) as usize)
            .collect();
        Self::with_mode(Mode::Pct(Pct {
            rng,
            depth: depth.max(1),
            change_points,
            step: 0,
            priorities: Vec::new(),
        }))
    }

    pub(crate) fn replay(choices: Vec<usize>) -> Self {
        Self::with_mode(Mode::Replay(choices))
    }

    fn with_mode(mode: Mode) -> Self {
        Chooser {
            mode,
            frames: Vec::new(),
            depth: 0,
            sleep: Vec::new(),
            made: Vec::new(),
            nondeterministic: false,
        }
    }

    /// Empties the sleep set: the last step touched everything (a process closed its session, which deletes its
    /// nodes and fires other sessions' watches outside any event the search chose).
    pub(crate) fn wake_all(&mut self) {
        self.sleep.clear();
    }

    /// Starts a new run of the search.
    pub(crate) fn restart(&mut self) {
        self.depth = 0;
        self.sleep.clear();
        self.made.clear();
    }

    /// Moves the search to its next run; `false` when every run has been made.
    pub(crate) fn advance(&mut self) -> bool {
        while let Some(f) = self.frames.last_mut() {
            if f.next + 1 < f.awake.len() {
                f.next += 1;
                return true;
            }
            self.frames.pop();
        }
        false
    }

    /// Chooses among `cands`, the first `ordinary` of which are not faults; `access` says what a choice touches (asked
    /// only by the search, and only of the choices its sleep set needs). `None`: every choice is asleep (its outcomes
    /// are explored by another run), so this run stops here.
    pub fn choose(&mut self, cands: &[C], ordinary: usize, access: impl Fn(&C) -> Touch) -> Option<usize> {
        let pick = match &mut self.mode {
            Mode::Replay(choices) => choices.get(self.made.len()).copied().unwrap_or(0).min(cands.len() - 1),
            Mode::Random(state) => {
                let n = cands.len();
                let r = next_random(state);
                if n <= 1 {
                    0
                } else if ordinary == 0 || (ordinary < n && r % 100 < 4) {
                    // Faults are rare, so that a schedule gets far before its fault.
                    ordinary + (next_random(state) as usize) % (n - ordinary)
                } else {
                    (r as usize / 100) % ordinary
                }
            }
            Mode::Pct(p) => {
                let n = cands.len();
                let r = next_random(&mut p.rng);
                if n <= 1 {
                    0
                } else if ordinary == 0 || (ordinary < n && r % 100 < 4) {
                    ordinary + (next_random(&mut p.rng) as usize) % (n - ordinary)
                } else {
                    let owners: Vec<Option<SessionId>> = cands[..ordinary].iter().map(|c| access(c).owner()).collect();
                    let mut best = 0;
                    let mut best_priority = p.priority(owners[0]);
                    for (i, owner) in owners.iter().enumerate().skip(1) {
                        let priority = p.priority(*owner);
                        if priority > best_priority {
                            (best, best_priority) = (i, priority);
                        }
                    }
                    if let Some(k) = p.change_points.iter().position(|c| *c == p.step) {
                        let owner = owners[best];
                        if let Some(entry) = p.priorities.iter_mut().find(|(o, _)| *o == owner) {
                            entry.1 = k as u64;
                        }
                    }
                    p.step += 1;
                    best
                }
            }
            Mode::Search => {
                let awake: Vec<usize> = (0..cands.len())
                    .filter(|i| !self.sleep.iter().any(|s| s.id == cands[*i]))
                    .collect();
                if awake.is_empty() {
                    return None;
                }
                let (local, before) = if awake.len() == 1 {
                    (0, Vec::new())
                } else {
                    let ids: Vec<C> = awake.iter().map(|i| cands[*i].clone()).collect();
                    if self.depth < self.frames.len() {
                        if self.frames[self.depth].awake != ids {
                            self.nondeterministic = true;
                        }
                    } else {
                        self.frames.push(Frame { awake: ids, next: 0 });
                    }
                    let local = self.frames[self.depth].next.min(awake.len() - 1);
                    self.depth += 1;
                    let before: Vec<Candidate<C>> = awake[..local]
                        .iter()
                        .map(|i| Candidate {
                            id: cands[*i].clone(),
                            access: access(&cands[*i]),
                        })
                        .collect();
                    (local, before)
                };
                let mut sleep = std::mem::take(&mut self.sleep);
                sleep.extend(before);
                if !sleep.is_empty() {
                    let chosen = access(&cands[awake[local]]);
                    sleep.retain(|s| s.access.independent(&chosen));
                }
                self.sleep = sleep;
                awake[local]
            }
        };
        self.made.push(pick);
        Some(pick)
    }
}
