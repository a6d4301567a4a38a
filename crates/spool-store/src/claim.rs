//! The claim passes, written once for both backends. Deliveries: [`run`] reads due candidates,
//! asks [`ClaimPass`] what to do with each, and does it through [`ClaimIo`], the three
//! statements a backend supplies (read candidates, expire one, claim one). Tasks:
//! [`TaskClaimPass`] decides which due tasks a claim takes (quotas, all-or-nothing locks, order),
//! reading lock holders through [`LockTable`]; the backend reads the candidates and starts what
//! it chose.
//!
//! PostgreSQL's statements are asynchronous and SQLite's are not; the pass is written as an
//! `async fn` and SQLite's writer thread drives it with [`crate::sql::ready`], which polls it
//! once: none of SQLite's statements ever waits, so the pass is done in that one poll.

use std::collections::{HashMap, HashSet};

use crate::error::{Result, StoreError};
use crate::model::{ClaimBatch, ClaimPass, Claimed, Millis, Take};
use crate::tasks::{ClaimType, WaitReason, DEFAULT_KILL_GRACE_MS};

/// A due pending delivery a claim may take, as the backend's candidate query reads it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub(crate) id: String,
    pub(crate) origin: String,
    pub(crate) expires_at: Option<Millis>,
    /// When it became due (`next_attempt_at`): candidates come oldest due first.
    pub(crate) due: Millis,
}

/// What a claim pass needs from a backend, inside the transaction the claim runs in.
pub(crate) trait ClaimIo {
    /// Up to `fetch` due pending deliveries, oldest due first, of origins not in `saturated`.
    async fn candidates(
        &mut self,
        saturated: &HashSet<String>,
        fetch: i64,
    ) -> Result<Vec<Candidate>>;

    /// Fail it as `expired` (its deadline has passed while it waited).
    async fn expire(&mut self, candidate: &Candidate) -> Result<()>;

    /// Put it in flight under a new claim with its attempt started; `None` if it is no longer
    /// there to take (on PostgreSQL another host may be claiming it this moment: it is skipped,
    /// not waited for).
    async fn claim(&mut self, candidate: &Candidate) -> Result<Option<Claimed>>;
}

/// One claim: up to the pass's limit of due deliveries, oldest due first, within its capacity;
/// due deliveries past their deadline are expired instead. Candidates are read a chunk at a
/// time ([`ClaimPass::fetch`]) until the batch is full, the due work runs out, or a chunk
/// changed nothing.
pub(crate) async fn run(
    mut pass: ClaimPass,
    now: Millis,
    io: &mut impl ClaimIo,
) -> Result<ClaimBatch> {
    let mut batch = ClaimBatch::default();
    while pass.has_room() {
        let candidates = io.candidates(pass.saturated(), pass.fetch()).await?;
        let exhausted_candidates = (candidates.len() as i64) < pass.fetch();
        let mut progressed = false;
        for c in candidates {
            match pass.judge(&c.origin, c.expires_at, now) {
                Take::Enough => break,
                Take::Skip => continue,
                Take::Expire => {
                    io.expire(&c).await?;
                    batch.expired += 1;
                }
                Take::Claim => {
                    if let Some(claimed) = io.claim(&c).await? {
                        batch.claimed.push(claimed);
                        pass.claimed(&c.origin);
                    }
                }
            }
            progressed = true;
        }
        if exhausted_candidates || !progressed {
            break;
        }
    }
    Ok(batch)
}

/// How many due tasks one claim looks at, at most, when locks and quotas make it pass some
/// over (the rest wait for the next claim).
pub(crate) const CLAIM_SCAN: usize = 1024;

/// A due pending task as a claim reads it: oldest due first, submission order among equals.
#[derive(Debug, Clone)]
pub(crate) struct TaskCandidate {
    pub(crate) id: String,
    pub(crate) task_type: String,
    /// The locks it wants, as stored (a JSON array), if any.
    pub(crate) locks: Option<String>,
}

/// A task a claim pass chose: its locks are to be taken and its attempt started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskTake {
    pub(crate) id: String,
    pub(crate) locks: Vec<String>,
    /// Its type's kill grace, recorded with the attempt.
    pub(crate) kill_grace_ms: i64,
}

/// Who holds locks now: what a task claim pass reads besides its candidates.
pub(crate) trait LockTable {
    /// The holder (a task id) of each of `names` that is held; free ones are absent.
    async fn holders(&mut self, names: &[String]) -> Result<HashMap<String, String>>;
}

/// One task claim pass's decisions, the same on every backend. Due tasks are considered oldest
/// first. A task whose type's `concurrency` is used up, or that cannot take **all** its locks
/// at once, is passed over and stays pending (all-or-nothing, so no two tasks each hold a lock
/// the other waits for). The locks a passed-over task wants are reserved for the rest of the
/// pass, so a later task never takes a lock ahead of an earlier one: waiting tasks start in
/// order. A lock held by the task itself (kept through a retry's backoff) is its own.
#[derive(Debug)]
pub(crate) struct TaskClaimPass<'t> {
    types: &'t [ClaimType],
    limit: u32,
    running: HashMap<String, u32>,
    reserved: HashSet<String>,
    scanned: usize,
    /// The tasks chosen, in the order considered.
    pub(crate) take: Vec<TaskTake>,
    /// (type, why) of every due task passed over.
    pub(crate) waiting: Vec<(String, WaitReason)>,
}

impl<'t> TaskClaimPass<'t> {
    /// A pass taking up to `limit` tasks of `types`, with `running` tasks of each type now (only
    /// types with a quota need counting).
    pub(crate) fn new(
        types: &'t [ClaimType],
        limit: u32,
        running: HashMap<String, u32>,
    ) -> TaskClaimPass<'t> {
        TaskClaimPass {
            types,
            limit,
            running,
            reserved: HashSet::new(),
            scanned: 0,
            take: Vec::new(),
            waiting: Vec::new(),
        }
    }

    /// Whether any type has a quota, so that running tasks must be counted for [`Self::new`].
    pub(crate) fn counts_running(types: &[ClaimType]) -> bool {
        types.iter().any(|t| t.concurrency.is_some())
    }

    /// Consider the next due task; `false` once the pass is done (the batch is full or
    /// [`CLAIM_SCAN`] tasks were looked at).
    pub(crate) async fn consider(
        &mut self,
        c: TaskCandidate,
        lock_table: &mut impl LockTable,
    ) -> Result<bool> {
        self.scanned += 1;
        let kind = self.types.iter().find(|t| t.name == c.task_type);
        let quota = kind.and_then(|t| t.concurrency);
        let kill_grace_ms = kind.map_or(DEFAULT_KILL_GRACE_MS, |t| t.kill_grace_ms);
        let busy = self.running.get(&c.task_type).copied().unwrap_or(0);
        if quota.is_some_and(|q| busy >= q) {
            self.waiting.push((c.task_type, WaitReason::Quota));
            return Ok(self.scanned < CLAIM_SCAN);
        }
        let locks: Vec<String> = match c.locks {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| StoreError::Database(format!("locks of task {}: {e}", c.id)))?,
            None => Vec::new(),
        };
        let free = locks.is_empty() || {
            let held = lock_table.holders(&locks).await?;
            locks.iter().all(|name| match held.get(name) {
                Some(holder) => *holder == c.id,
                None => !self.reserved.contains(name),
            })
        };
        self.reserved.extend(locks.iter().cloned());
        if !free {
            self.waiting.push((c.task_type, WaitReason::Lock));
            return Ok(self.scanned < CLAIM_SCAN);
        }
        *self.running.entry(c.task_type).or_insert(0) += 1;
        self.take.push(TaskTake {
            id: c.id,
            locks,
            kill_grace_ms,
        });
        Ok((self.take.len() as u32) < self.limit && self.scanned < CLAIM_SCAN)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::model::{Body, Capacity, Mode};
    use crate::sql::ready;

    /// Candidates kept in memory: claims and expiries are recorded, claimed ones leave.
    struct Memory {
        due: Vec<Candidate>,
        reads: usize,
        expired: Vec<String>,
        lost: HashSet<String>,
    }

    impl ClaimIo for Memory {
        async fn candidates(
            &mut self,
            saturated: &HashSet<String>,
            fetch: i64,
        ) -> Result<Vec<Candidate>> {
            self.reads += 1;
            Ok(self
                .due
                .iter()
                .filter(|c| !saturated.contains(&c.origin))
                .take(usize::try_from(fetch).unwrap_or(0))
                .cloned()
                .collect())
        }

        async fn expire(&mut self, candidate: &Candidate) -> Result<()> {
            self.due.retain(|c| c.id != candidate.id);
            self.expired.push(candidate.id.clone());
            Ok(())
        }

        async fn claim(&mut self, candidate: &Candidate) -> Result<Option<Claimed>> {
            self.due.retain(|c| c.id != candidate.id);
            if self.lost.contains(&candidate.id) {
                return Ok(None);
            }
            Ok(Some(Claimed {
                id: candidate.id.clone(),
                claim_seq: 1,
                attempt: 1,
                target_url: "http://127.0.0.1:9/".to_owned(),
                origin: candidate.origin.clone(),
                method: "POST".to_owned(),
                headers: Vec::new(),
                body: Body::None,
                started_at: 100,
                lease_until: 200,
                mode: Mode::AtLeastOnce,
                remote_id_pointer: None,
                sign_secret: None,
            }))
        }
    }

    fn due(n: usize, origin: &str, expires_at: Option<Millis>) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                id: format!("{origin}-{i}"),
                origin: origin.to_owned(),
                expires_at,
                due: i as Millis,
            })
            .collect()
    }

    fn claim(memory: &mut Memory, limit: u32, per_origin: u32) -> ClaimBatch {
        let capacity = Capacity {
            per_origin,
            in_flight: HashMap::new(),
            limits: HashMap::new(),
        };
        ready(run(ClaimPass::new(capacity, limit), 100, memory)).expect("claim")
    }

    fn ids(batch: &ClaimBatch) -> Vec<&str> {
        batch.claimed.iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn a_pass_reads_past_saturated_origins_and_expired_work() {
        let mut due_work = due(3, "a", None);
        due_work.extend(due(50, "b", Some(50)));
        due_work.extend(due(3, "c", None));
        let mut memory = Memory {
            due: due_work,
            reads: 0,
            expired: Vec::new(),
            lost: HashSet::new(),
        };
        let batch = claim(&mut memory, 4, 2);
        // `a` fills at 2, all of `b` is past its deadline, `c` gives the rest.
        assert_eq!(ids(&batch), ["a-0", "a-1", "c-0", "c-1"]);
        assert_eq!(batch.expired, 50);
        assert_eq!(memory.expired.len(), 50);
        assert!(memory.reads >= 2, "a second chunk was read");
    }

    #[test]
    fn a_candidate_taken_by_another_host_is_skipped_not_counted() {
        let mut memory = Memory {
            due: due(5, "a", None),
            reads: 0,
            expired: Vec::new(),
            lost: HashSet::from(["a-0".to_owned()]),
        };
        let batch = claim(&mut memory, 2, 8);
        assert_eq!(ids(&batch), ["a-1", "a-2"]);
    }

    #[test]
    fn a_pass_ends_when_the_due_work_runs_out() {
        let mut memory = Memory {
            due: due(1, "a", None),
            reads: 0,
            expired: Vec::new(),
            lost: HashSet::new(),
        };
        let batch = claim(&mut memory, 8, 8);
        assert_eq!(ids(&batch), ["a-0"]);
        assert_eq!(memory.reads, 1);
    }

    /// Lock holders kept in memory.
    struct Holders(HashMap<String, String>);

    impl LockTable for Holders {
        async fn holders(&mut self, names: &[String]) -> Result<HashMap<String, String>> {
            Ok(names
                .iter()
                .filter_map(|n| self.0.get(n).map(|h| (n.clone(), h.clone())))
                .collect())
        }
    }

    fn task(id: &str, task_type: &str, locks: &[&str]) -> TaskCandidate {
        TaskCandidate {
            id: id.to_owned(),
            task_type: task_type.to_owned(),
            locks: (!locks.is_empty())
                .then(|| serde_json::to_string(locks).expect("JSON of names")),
        }
    }

    /// Runs a task claim pass over `due` (oldest first) and returns the ids taken and the
    /// reasons of those passed over, and whether the pass asked for more when it stopped.
    fn task_pass(
        types: &[ClaimType],
        limit: u32,
        running: &[(&str, u32)],
        held: &[(&str, &str)],
        due: Vec<TaskCandidate>,
    ) -> (Vec<String>, Vec<(String, WaitReason)>) {
        let running = running.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect();
        let mut holders = Holders(
            held.iter()
                .map(|(l, h)| ((*l).to_owned(), (*h).to_owned()))
                .collect(),
        );
        let mut pass = TaskClaimPass::new(types, limit, running);
        for c in due {
            if !ready(pass.consider(c, &mut holders)).expect("consider") {
                break;
            }
        }
        (pass.take.into_iter().map(|t| t.id).collect(), pass.waiting)
    }

    fn kind(name: &str, concurrency: Option<u32>) -> ClaimType {
        ClaimType {
            name: name.to_owned(),
            concurrency,
            kill_grace_ms: 3_000,
        }
    }

    #[test]
    fn a_task_claim_respects_quotas_and_takes_all_its_locks_or_none() {
        let types = [kind("backup", Some(1)), kind("deploy", None)];
        let (taken, waiting) = task_pass(
            &types,
            10,
            &[("backup", 1)],
            &[("db", "t-other")],
            vec![
                task("b1", "backup", &[]),
                task("d1", "deploy", &["db", "web"]),
                task("d2", "deploy", &["web"]),
                task("d3", "deploy", &["cache"]),
            ],
        );
        // b1: its type's one slot is busy. d1: `db` is held, so it takes neither lock, and
        // `web` stays reserved for it: d2 must not start ahead of it. d3 wants a free lock.
        assert_eq!(taken, ["d3"]);
        assert_eq!(
            waiting,
            [
                ("backup".to_owned(), WaitReason::Quota),
                ("deploy".to_owned(), WaitReason::Lock),
                ("deploy".to_owned(), WaitReason::Lock),
            ]
        );
    }

    #[test]
    fn a_task_keeps_the_locks_it_held_through_its_backoff_and_counts_against_its_quota() {
        let types = [kind("backup", Some(2))];
        let (taken, waiting) = task_pass(
            &types,
            10,
            &[("backup", 0)],
            &[("db", "b1")],
            vec![
                task("b1", "backup", &["db"]),
                task("b2", "backup", &[]),
                task("b3", "backup", &[]),
            ],
        );
        assert_eq!(taken, ["b1", "b2"]);
        assert_eq!(waiting, [("backup".to_owned(), WaitReason::Quota)]);
    }

    #[test]
    fn a_task_claim_stops_at_its_limit_and_takes_the_kill_grace_of_the_type() {
        let types = [kind("cleanup", None)];
        let mut pass = TaskClaimPass::new(&types, 2, HashMap::new());
        let mut holders = Holders(HashMap::new());
        assert!(ready(pass.consider(task("c1", "cleanup", &[]), &mut holders)).expect("c1"));
        assert!(!ready(pass.consider(task("c2", "cleanup", &[]), &mut holders)).expect("c2"));
        assert_eq!(pass.take[1].kill_grace_ms, 3_000);
        let mut pass = TaskClaimPass::new(&[], 2, HashMap::new());
        assert!(ready(pass.consider(task("u1", "undeclared", &[]), &mut holders)).expect("u1"));
        assert_eq!(pass.take[0].kill_grace_ms, DEFAULT_KILL_GRACE_MS);
    }
}
