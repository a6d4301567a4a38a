//! The task runner: claims due tasks of the declared types within `--task-concurrency`, runs
//! each attempt through [`exec`], classifies how it ended and records it. Attempts
//! and the next run time are in the store, never only in memory.
//!
//! Classification: exit 0 → `succeeded`; a non-zero exit by the type's table (defaults follow
//! sysexits.h) — `transient` and `script_error` are retried, `invalid_params` and
//! `permission_denied` never; killed by a signal → `script_error`; over its `timeout` →
//! `timed_out`, retried only with `retry_on_timeout`. Retries back off exponentially with jitter
//! (`backoff`), within `max_attempts` and before `retry_deadline`.
//!
//! **Invariant: a task's locks and quota slot are free only once every process of its attempt
//! is gone.** An attempt that runs here ends only when nothing of it is left. An attempt whose
//! executor is gone (a crash, a lease not renewed) is taken over by a live executor — the task
//! stays `running` meanwhile — which ends what is left of it when it can see its processes
//! (the same machine, boot and pid namespace), or else waits until the old executor, had it
//! lived, would have ended them itself (its lease, plus its kill grace, plus a margin), and
//! only then settles it. An executor that cannot renew a lease stops that attempt before the
//! lease runs out; one whose lease was taken over stops it at once.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use spool_store::tasks::{
    ClaimType, ClaimedTask, Executor, OrphanEnd, Orphaned, Renewed, TaskAttemptEnd, TaskStatus,
};
use spool_store::Store;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use super::cgroup::AttemptCgroup;
use super::exec::{self, Finished, Stopped};
use super::output::{self, OutputLog, OutputSummary, RedactRules, Subscription};
use super::processes;
use super::types::{ExitClass, OnInterrupt, OnPartialFailure, TaskType};
use super::{Declared, TaskTypes};
use crate::backoff::Backoff;
use crate::metrics::{KindLabel, Metrics, TaskEndLabel, TaskWaitLabel, TypeLabel};

/// The longest result summary kept (`SPOOLD_RESULT_FILE`).
pub const MAX_SUMMARY_BYTES: usize = 4096;

/// The `PATH` of every attempt.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// An executor that cannot renew a lease stops the attempt this long before the lease runs out
/// (by its own clock, counted from when it asked for the renewal that last succeeded); so does
/// the attempt's supervisor, whatever happens to the executor.
const LEASE_SAFETY: Duration = super::supervision::LEASE_SAFETY;

/// A host that takes over an attempt it cannot see waits, past the old lease and the old
/// executor's kill grace, this much longer before it frees the attempt's locks: what SIGKILL
/// takes to land, and clocks that disagree a little.
const RELEASE_MARGIN_MS: i64 = 2_000;

/// The attempts running in this process, by task id: what the API needs to cancel one, to
/// check a step token, to follow its output; what the heartbeat renews.
#[derive(Debug, Default)]
pub struct Running(Mutex<RunningInner>);

#[derive(Debug, Default)]
struct RunningInner {
    attempts: HashMap<String, Attempt>,
    /// Cancels that came between a task's claim and the start of its attempt here.
    early: std::collections::HashSet<String>,
}

struct Attempt {
    number: u32,
    claim_seq: u32,
    cancel: CancellationToken,
    /// Cancelled when its lease is lost: not renewed in time, or taken over.
    lease_lost: CancellationToken,
    /// When its lease runs out by this process's clock, less [`LEASE_SAFETY`].
    lease_deadline: Instant,
    /// When its lease runs out (counted from before the renewal was asked for), for its
    /// supervisor, which stops the attempt by then on its own.
    lease_until: tokio::sync::watch::Sender<Instant>,
    /// An attempt of another executor this one took over to end ([`Orphaned`]).
    orphan: bool,
    /// Its processes are not on this host (an orphan this host cannot see): it takes no slot.
    elsewhere: bool,
    /// Nothing of it runs any more: only its end is being recorded (its lease is renewed until
    /// then, but there is nothing left to stop).
    over: bool,
    /// SHA-256 of the attempt's step token (the token itself is only in its environment).
    step_token: Option<[u8; 32]>,
    output: Option<Arc<Mutex<OutputLog>>>,
}

impl std::fmt::Debug for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attempt")
            .field("number", &self.number)
            .field("claim_seq", &self.claim_seq)
            .field("orphan", &self.orphan)
            .finish_non_exhaustive()
    }
}

/// The tokens an attempt registered here is stopped by, and its lease's end as renewed.
struct Tokens {
    cancel: CancellationToken,
    lease_lost: CancellationToken,
    lease_until: tokio::sync::watch::Receiver<Instant>,
}

impl Running {
    /// Ask the attempt of `task_id` running here to stop as canceled (the store has recorded
    /// the request). If its attempt has not registered yet, it is canceled as it does. An
    /// orphan being ended is not affected: it is settled as canceled.
    pub fn cancel(&self, task_id: &str) {
        let mut inner = self.lock();
        match inner.attempts.get(task_id) {
            Some(a) => a.cancel.cancel(),
            None => {
                inner.early.insert(task_id.to_owned());
            }
        }
    }

    /// Register the attempt of a claimed task, leased since `claimed_at` (when the claim was
    /// asked for).
    fn start(&self, task: &ClaimedTask, claimed_at: Instant, lease: Duration) -> Tokens {
        let tokens = self.register(
            &task.id,
            (task.attempt, task.claim_seq),
            claimed_at + lease,
            None,
        );
        if self.lock().early.remove(&task.id) {
            tokens.cancel.cancel();
        }
        tokens
    }

    /// Register an orphan taken over at `taken_at`, whose processes are where `whereabouts`
    /// says.
    fn adopt(
        &self,
        orphan: &Orphaned,
        taken_at: Instant,
        lease: Duration,
        whereabouts: Whereabouts,
    ) -> Tokens {
        self.register(
            &orphan.id,
            (orphan.attempt, orphan.claim_seq),
            taken_at + lease,
            Some(whereabouts),
        )
    }

    /// `orphan`: where the processes of an orphan are (`None`: an attempt started here).
    fn register(
        &self,
        id: &str,
        (number, claim_seq): (u32, u32),
        lease_until: Instant,
        orphan: Option<Whereabouts>,
    ) -> Tokens {
        let (lease_tx, lease_rx) = tokio::sync::watch::channel(lease_until);
        let tokens = Tokens {
            cancel: CancellationToken::new(),
            lease_lost: CancellationToken::new(),
            lease_until: lease_rx,
        };
        self.lock().attempts.insert(
            id.to_owned(),
            Attempt {
                number,
                claim_seq,
                cancel: tokens.cancel.clone(),
                lease_lost: tokens.lease_lost.clone(),
                lease_deadline: lease_until.checked_sub(LEASE_SAFETY).unwrap_or(lease_until),
                lease_until: lease_tx,
                orphan: orphan.is_some(),
                elsewhere: orphan == Some(Whereabouts::Elsewhere),
                over: false,
                step_token: None,
                output: None,
            },
        );
        tokens
    }

    /// Give a registered attempt its step token's digest and its output log.
    fn equip(&self, task_id: &str, step_token: [u8; 32], output: Option<Arc<Mutex<OutputLog>>>) {
        if let Some(a) = self.lock().attempts.get_mut(task_id) {
            a.step_token = Some(step_token);
            a.output = output;
        }
    }

    /// Forget the attempt of `task_id` under claim `claim_seq`: not a later one of the same
    /// task (an orphan settled here may be claimed again, by another slot, before the one that
    /// ended it gets here).
    fn end(&self, task_id: &str, claim_seq: u32) {
        let mut inner = self.lock();
        if inner
            .attempts
            .get(task_id)
            .is_some_and(|a| a.claim_seq == claim_seq)
        {
            inner.attempts.remove(task_id);
            inner.early.remove(task_id);
        }
    }

    /// How many attempts take a slot here: those running here, and orphans being ended here
    /// (their processes may still run on this host); not orphans whose processes are elsewhere.
    pub fn count(&self) -> usize {
        self.lock()
            .attempts
            .values()
            .filter(|a| !a.elsewhere)
            .count()
    }

    /// The attempt of `task_id` whose step token this is, if it runs here.
    pub fn step_token_attempt(&self, task_id: &str, token: &str) -> Option<u32> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let inner = self.lock();
        let a = inner.attempts.get(task_id)?;
        (a.step_token == Some(digest)).then_some(a.number)
    }

    /// Follow the output of attempt `number` of `task_id`, if it runs here: the log file (its
    /// head, up to the subscription's start) and the live chunks from there.
    pub fn follow(&self, task_id: &str, number: u32) -> Option<(std::path::PathBuf, Subscription)> {
        let inner = self.lock();
        let a = inner.attempts.get(task_id).filter(|a| a.number == number)?;
        let log = a.output.as_ref()?;
        let log = log.lock().unwrap_or_else(PoisonError::into_inner);
        Some((log.path().to_path_buf(), log.subscribe()))
    }

    /// (task id, claim) of every attempt running here, for the heartbeat.
    fn leases(&self) -> Vec<(String, u32)> {
        self.lock()
            .attempts
            .iter()
            .map(|(id, a)| (id.clone(), a.claim_seq))
            .collect()
    }

    /// What a renewal asked at `sent` for `asked` came back with: the renewed leases run until
    /// `sent + lease`; an attempt asked for and not renewed was taken over (its lease is lost);
    /// a cancel requested elsewhere (another host's API) reaches its attempt here.
    fn renewed(
        &self,
        sent: Instant,
        lease: Duration,
        asked: &[(String, u32)],
        renewed: &[Renewed],
    ) {
        let by_id: HashMap<&str, &Renewed> = renewed.iter().map(|r| (r.id.as_str(), r)).collect();
        let until = sent + lease;
        let deadline = until.checked_sub(LEASE_SAFETY).unwrap_or(sent);
        let mut inner = self.lock();
        for (id, claim_seq) in asked {
            let Some(a) = inner
                .attempts
                .get_mut(id)
                .filter(|a| a.claim_seq == *claim_seq)
            else {
                continue;
            };
            match by_id.get(id.as_str()) {
                Some(r) => {
                    a.lease_deadline = deadline;
                    a.lease_until.send_replace(until);
                    if r.cancel_requested && !a.orphan {
                        a.cancel.cancel();
                    }
                }
                None => {
                    if !a.lease_lost.is_cancelled() && !a.over {
                        warn!(task_id = %id, attempt = a.number,
                              "the task was taken over by another executor: stopping its attempt here");
                    }
                    a.lease_lost.cancel();
                }
            }
        }
    }

    /// Stop the attempts whose lease runs out before it could be renewed (`now` past its
    /// deadline). The earliest deadline left, if any.
    fn lapse(&self, now: Instant) -> Option<Instant> {
        let inner = self.lock();
        let mut next: Option<Instant> = None;
        for (id, a) in &inner.attempts {
            if a.lease_lost.is_cancelled() || a.over {
                continue;
            }
            if a.lease_deadline <= now {
                warn!(task_id = %id, attempt = a.number,
                      "the attempt's lease could not be renewed in time: stopping it");
                a.lease_lost.cancel();
            } else {
                next = Some(next.map_or(a.lease_deadline, |n| n.min(a.lease_deadline)));
            }
        }
        next
    }

    /// The attempt of `task_id` under claim `claim_seq` is over: only its end is being recorded.
    fn over(&self, task_id: &str, claim_seq: u32) {
        if let Some(a) = self
            .lock()
            .attempts
            .get_mut(task_id)
            .filter(|a| a.claim_seq == claim_seq)
        {
            a.over = true;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunningInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the runner needs.
pub struct Runner {
    pub store: Store,
    pub types: Arc<Declared>,
    pub concurrency: u32,
    /// This daemon run: recorded with every attempt, holder of its leases.
    pub executor: Executor,
    /// `--task-lease`: renewed every third of it while an attempt runs.
    pub lease: Duration,
    /// Where attempts write their result summaries (one file per attempt, removed after).
    pub results_dir: PathBuf,
    /// Where attempts' output logs are kept (`<task id>-<attempt>.log`).
    pub output_dir: PathBuf,
    /// How attempts reach the API (`SPOOLD_URL`): `http://HOST:PORT` or `unix:///PATH`.
    pub api_url: String,
    pub running: Arc<Running>,
    /// Graceful shutdown began: start nothing new.
    pub stop: CancellationToken,
    /// Shutdown timeout reached: stop the attempts still running.
    pub interrupt: CancellationToken,
    pub metrics: Arc<Metrics>,
    /// Where attempts get cgroups of their own (`--task-cgroup`), if anywhere.
    pub cgroup: Option<super::cgroup::CgroupRoot>,
    /// The `spoolctl` next to this daemon's executable, if there is one: attempts get it as
    /// `SPOOLD_CTL`, and its directory at the end of their `PATH`.
    pub spoolctl: Option<PathBuf>,
    /// What supervises each attempt, and where supervisors keep their records.
    pub supervisor: exec::Supervisor,
    /// Where attempts' ends the database was out of reach for are kept until recorded.
    pub journal: crate::unrecorded::Journal,
}

/// Where an orphaned attempt's processes are, seen from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whereabouts {
    /// On this machine, boot and pid namespace: found and ended here.
    Here,
    /// Somewhere this process cannot see: over once its old executor would have ended them.
    Elsewhere,
}

impl Runner {
    /// Take over orphaned attempts (taken over at `taken_at`): each is ended in the
    /// background, on `attempts`, and settled once nothing of it is left.
    pub fn adopt(
        self: &Arc<Self>,
        orphans: Vec<Orphaned>,
        taken_at: Instant,
        attempts: &TaskTracker,
    ) {
        for orphan in orphans {
            let whereabouts = self.whereabouts(&orphan.host);
            let tokens = self
                .running
                .adopt(&orphan, taken_at, self.lease, whereabouts);
            let me = Arc::clone(self);
            attempts.spawn(async move {
                let (id, claim_seq) = (orphan.id.clone(), orphan.claim_seq);
                me.end_orphan(orphan, whereabouts, tokens.lease_lost).await;
                me.running.end(&id, claim_seq);
            });
        }
    }

    /// End what is left of an orphaned attempt, then settle its task: `canceled` if that was
    /// asked meanwhile, otherwise `interrupted` and on by the type's `on_interrupt`. Two copies
    /// of a deploy never run: the task keeps its locks and slot until then.
    async fn end_orphan(
        &self,
        orphan: Orphaned,
        whereabouts: Whereabouts,
        lost: CancellationToken,
    ) {
        let declared = self.types.now();
        let kind = declared.get(&orphan.task_type);
        let tag = exec::attempt_tag(&orphan.id, orphan.attempt);
        info!(task_id = %orphan.id, attempt = orphan.attempt, code = %orphan.code,
              whereabouts = ?whereabouts, "ending an attempt whose executor is gone");
        let mut never_ran = false;
        let mut output_dropped = 0;
        match whereabouts {
            Whereabouts::Here => {
                // Its supervisor ends it on its own once its daemon is gone: wait until it has
                // (its record's lock is free), and read how the attempt ended. Without a live
                // supervisor, what is left is ended here, by the fact that it holds the record.
                let path = self.supervisor.records.join(&tag);
                let grace = Duration::from_millis(orphan.kill_grace_ms.max(0) as u64);
                let (record, ended) = tokio::select! {
                    waited = wait_for_attempt(&path, grace) => waited,
                    () = lost.cancelled() => return,
                };
                if ended > 0 {
                    self.metrics.task_recovered_processes.inc_by(ended as u64);
                    warn!(task_id = %orphan.id, attempt = orphan.attempt, processes = ended,
                          "processes of an attempt whose supervisor died with its daemon were \
                           still running: ended by the fact that they held the attempt's record \
                           file (SIGTERM, kill grace, SIGKILL)");
                }
                let _ = std::fs::remove_file(&path);
                never_ran = record.is_none();
                output_dropped = record.as_ref().map_or(0, |r| r.output_dropped);
                if let Some(root) = &self.cgroup {
                    // A supervisor that died without finishing may have left processes in the
                    // attempt's cgroup: the kernel knows them, whoever their parent now is.
                    if let Some(cg) = AttemptCgroup::existing(root, &tag) {
                        cg.kill();
                        cg.remove().await;
                    }
                }
                match record {
                    Some(r) if r.over => {
                        if r.processes > 0 {
                            self.metrics.task_recovered_processes.inc_by(r.processes);
                        }
                        info!(task_id = %orphan.id, attempt = orphan.attempt,
                              exit_code = r.exit_code, signal = r.signal, killed = r.killed,
                              processes = r.processes, stopped = ?r.stopped,
                              output_dropped = r.output_dropped,
                              "the supervisor of an attempt whose executor is gone ended it");
                    }
                    Some(_) => warn!(task_id = %orphan.id, attempt = orphan.attempt,
                                     processes_ended_here = ended,
                                     "the supervisor of an attempt whose executor is gone died \
                                      before it finished: how the attempt ended is not known; \
                                      nothing of it is left (no process holds its record file)"),
                    None => info!(task_id = %orphan.id, attempt = orphan.attempt,
                                  "an attempt whose executor is gone never started its program \
                                   (no record file): pending again, not counted, whatever \
                                   on_interrupt says"),
                }
            }
            Whereabouts::Elsewhere => {
                let release_at =
                    orphan.lease_until + orphan.kill_grace_ms.max(0) + RELEASE_MARGIN_MS;
                loop {
                    let wait = release_at - self.store.now_ms();
                    if wait <= 0 {
                        break;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(wait.min(1_000) as u64)) => {}
                        () = lost.cancelled() => return,
                        () = self.stop.cancelled() => return,
                    }
                }
            }
        }
        // The raw result file of the cut-short attempt (it may hold secrets).
        remove_result(&self.result_file(&orphan.id, orphan.attempt));
        let then = on_interrupt_status(kind.map_or(OnInterrupt::Review, |t| t.on_interrupt));
        let end = OrphanEnd {
            id: orphan.id.clone(),
            claim_seq: orphan.claim_seq,
            then,
            never_ran,
            output_bytes: std::fs::metadata(output_path(
                &self.output_dir,
                &orphan.id,
                orphan.attempt,
            ))
            .map_or(0, |m| m.len()),
            output_dropped,
        };
        match self.store.settle_orphan(end).await {
            Ok(Some(status)) => {
                info!(task_id = %orphan.id, attempt = orphan.attempt, status = %status,
                      "an attempt whose executor is gone is over; its task moved on");
                if status == TaskStatus::Canceled {
                    self.metrics
                        .tasks_finished
                        .get_or_create(&TaskEndLabel {
                            task_type: orphan.task_type.clone(),
                            status: status.as_str(),
                            error_code: "canceled".into(),
                        })
                        .inc();
                }
            }
            Ok(None) => info!(task_id = %orphan.id,
                              "an orphaned attempt was taken over by another executor meanwhile"),
            Err(e) => error!(task_id = %orphan.id, error = %e,
                             "could not settle an attempt whose executor is gone"),
        }
    }

    /// Whether the processes of an attempt started by an executor on `host` can be seen from
    /// here. A host not recorded (an attempt of an older version) is this one on a store no
    /// other host shares.
    fn whereabouts(&self, host: &str) -> Whereabouts {
        if host == self.executor.host
            || (host.is_empty() && !self.store.is_shared())
            || processes::rebooted_since(host)
        {
            Whereabouts::Here
        } else {
            Whereabouts::Elsewhere
        }
    }

    fn result_file(&self, id: &str, attempt: u32) -> PathBuf {
        self.results_dir.join(format!("{id}-{attempt}"))
    }

    /// Apply the type's `on_interrupt` to a task whose attempt this daemon ended (shutdown).
    async fn apply_on_interrupt(&self, id: &str, policy: OnInterrupt) {
        let to = on_interrupt_status(policy);
        let note = "the type's on_interrupt";
        if let Err(e) = self
            .store
            .decide_task(id.to_owned(), to, "on_interrupt".into(), Some(note.into()))
            .await
        {
            error!(task_id = %id, error = %e, "could not apply on_interrupt");
        }
    }

    /// What claims may take: every declared type with its quota and kill grace.
    fn claim_types(declared: &TaskTypes) -> Vec<ClaimType> {
        declared
            .iter()
            .map(|t| ClaimType {
                name: t.name.clone(),
                concurrency: t.concurrency,
                kill_grace_ms: t.kill_grace.as_millis() as i64,
            })
            .collect()
    }

    /// Run until `stop`; attempts (and orphans being ended) are spawned on `attempts`.
    pub async fn run(self: Arc<Self>, attempts: TaskTracker) {
        let wake = self.store.tasks_available();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
        let background = [
            tokio::spawn(Arc::clone(&self).heartbeat(attempts.clone(), done_tx.clone())),
            tokio::spawn(Arc::clone(&self).watch_leases()),
        ];
        // When the last claim took nothing while due tasks waited for a lock or a quota.
        let mut fruitless_at: Option<Instant> = None;
        loop {
            while done_rx.try_recv().is_ok() {}
            if self.stop.is_cancelled() {
                break;
            }
            // The types declared now: a reload (SIGHUP) may have changed them since last time.
            let declared = self.types.now();
            let (names, types) = (declared.names(), Self::claim_types(&declared));
            let free = self.concurrency.saturating_sub(self.running.count() as u32);
            let mut wait = Duration::from_secs(60);
            if free > 0 && !names.is_empty() {
                let claimed_at = Instant::now();
                match self
                    .store
                    .claim_tasks(
                        free,
                        types,
                        self.lease.as_millis() as i64,
                        self.executor.clone(),
                    )
                    .await
                {
                    Ok(claimed) => {
                        let n = claimed.tasks.len() as u32;
                        fruitless_at = (n == 0 && !claimed.waiting.is_empty()).then(Instant::now);
                        for (task_type, why) in &claimed.waiting {
                            self.metrics
                                .task_waits
                                .get_or_create(&TaskWaitLabel {
                                    task_type: task_type.clone(),
                                    reason: why.as_str(),
                                })
                                .inc();
                        }
                        for task in claimed.tasks {
                            // Counted as running at once, so the next pass sees the slot taken.
                            let Some(leased) = self.leased(&task, claimed_at).await else {
                                continue;
                            };
                            let tokens = self.running.start(&task, leased, self.lease);
                            let me = Arc::clone(&self);
                            let done = done_tx.clone();
                            attempts.spawn(async move {
                                me.slot(task, tokens, &done).await;
                            });
                        }
                        wait = if n == free {
                            Duration::from_secs(60)
                        } else if !claimed.waiting.is_empty() {
                            // Due tasks wait for a lock or a quota: every attempt's end wakes
                            // this loop; the poll is a safety net.
                            WAITING_POLL
                        } else {
                            self.until_next_due(&names).await
                        };
                    }
                    Err(e) => {
                        error!(error = %e, "claiming tasks failed");
                        wait = Duration::from_secs(1);
                    }
                }
            }
            tokio::select! {
                () = self.stop.cancelled() => break,
                () = wake.notified() => {}
                () = self.types.changed() => {}
                Some(()) = done_rx.recv() => {}
                () = tokio::time::sleep(wait) => continue,
            }
            // Submissions and ends that come while every due task waits for a lock or a quota
            // are looked at together: each claim reads up to a thousand waiting tasks, and a
            // burst of submissions would otherwise pay that per commit. The slot that frees a
            // lock or a quota claims the next task in the same commit, without waiting here.
            if let Some(at) = fruitless_at {
                tokio::select! {
                    () = self.stop.cancelled() => break,
                    () = tokio::time::sleep_until(at + FRUITLESS_SPACING) => {}
                }
            }
        }
        for task in background {
            task.abort();
        }
    }

    /// Renew the leases of the attempts running here every third of `--task-lease` (learning
    /// of cancels requested through other hosts, and of attempts taken over by one), and take
    /// over the running tasks whose lease lapsed under another executor. Each renewal is
    /// bounded by a third of the lease: [`Runner::watch_leases`] stops what it could not renew.
    async fn heartbeat(self: Arc<Self>, attempts: TaskTracker, done: mpsc::UnboundedSender<()>) {
        let every = self.lease / 3;
        loop {
            tokio::time::sleep(every).await;
            let asked = self.running.leases();
            if !asked.is_empty() {
                let sent = Instant::now();
                let renewal = self
                    .store
                    .renew_task_leases(asked.clone(), self.lease.as_millis() as i64);
                match tokio::time::timeout(every, renewal).await {
                    Ok(Ok(renewed)) => self.running.renewed(sent, self.lease, &asked, &renewed),
                    Ok(Err(e)) => warn!(error = %e, "renewing task leases failed"),
                    Err(_) => warn!("renewing task leases took longer than a third of the lease"),
                }
            }
            let taken_at = Instant::now();
            let lapsed = self
                .store
                .expire_task_leases(self.executor.clone(), self.lease.as_millis() as i64);
            match tokio::time::timeout(every, lapsed).await {
                Ok(Ok(orphans)) if !orphans.is_empty() => {
                    warn!(
                        tasks = orphans.len(),
                        "running tasks whose executor stopped renewing their lease are taken over"
                    );
                    self.adopt(orphans, taken_at, &attempts);
                    let _ = done.send(());
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => warn!(error = %e, "looking for lapsed task leases failed"),
                Err(_) => {
                    warn!("looking for lapsed task leases took longer than a third of the lease")
                }
            }
        }
    }

    /// On a store other hosts share, stop each attempt whose lease this process could not
    /// renew before it runs out: another host may take its task over then, and must find it
    /// stopped. (Alone on its store, a daemon keeps its attempts whatever its renewals do:
    /// nobody else would take them.)
    async fn watch_leases(self: Arc<Self>) {
        if !self.store.is_shared() {
            return;
        }
        loop {
            let next = self.running.lapse(Instant::now());
            let wait = next.map_or(Duration::from_millis(250), |at| {
                at.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(250))
            });
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
        }
    }

    async fn until_next_due(&self, names: &[String]) -> Duration {
        match self.store.next_task_due(names.to_vec()).await {
            Ok(Some(at)) => {
                Duration::from_millis((at - self.store.now_ms()).clamp(5, 60_000) as u64)
            }
            Ok(None) => Duration::from_secs(60),
            Err(e) => {
                error!(error = %e, "reading the next due task failed");
                Duration::from_secs(1)
            }
        }
    }

    /// One slot: run `first`, and while the commit that records an attempt also claims a next
    /// due task, run that one too. Every attempt's end is told on `done` (it may have freed a
    /// lock or a quota that other slots wait for).
    async fn slot(&self, first: ClaimedTask, tokens: Tokens, done: &mpsc::UnboundedSender<()>) {
        let mut current = Some((first, tokens));
        while let Some((task, tokens)) = current.take() {
            let (id, claim_seq) = (task.id.clone(), task.claim_seq);
            let next = self.attempt(task, tokens).await;
            self.running.end(&id, claim_seq);
            current = match next {
                Some((t, asked)) => self.leased(&t, asked).await.map(|leased| {
                    let tokens = self.running.start(&t, leased, self.lease);
                    (t, tokens)
                }),
                None => None,
            };
            let _ = done.send(());
        }
    }

    /// The environment of an attempt: PATH, the type's env, its secrets, SPOOLD_*. The step
    /// token is returned apart (only its digest is kept). `Err`: a secret file could not be read.
    fn environment(
        &self,
        kind: &TaskType,
        task: &ClaimedTask,
        result_file: &std::path::Path,
    ) -> Result<AttemptEnv, String> {
        let path = match self.spoolctl.as_deref().and_then(std::path::Path::parent) {
            Some(dir) => format!("{CHILD_PATH}:{}", dir.display()),
            None => CHILD_PATH.to_owned(),
        };
        let mut env: Vec<(String, String)> = vec![("PATH".into(), path)];
        if let Some(ctl) = &self.spoolctl {
            env.push(("SPOOLD_CTL".into(), ctl.display().to_string()));
        }
        env.extend(kind.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut secrets = Vec::new();
        for (name, file) in &kind.secret_env {
            let value = std::fs::read_to_string(file).map_err(|e| {
                format!(
                    "cannot read the secret for {name} from {}: {e}",
                    file.display()
                )
            })?;
            // One trailing newline is not part of the secret (as for token files).
            let value = value.strip_suffix('\n').unwrap_or(&value).to_owned();
            if !value.is_empty() {
                secrets.push(value.as_bytes().to_vec());
            }
            env.push((name.clone(), value));
        }
        let step_token = random_token()?;
        env.extend([
            ("SPOOLD_TASK_ID".into(), task.id.clone()),
            ("SPOOLD_ATTEMPT".into(), task.attempt.to_string()),
            ("SPOOLD_TASK_TYPE".into(), task.task_type.clone()),
            (
                "SPOOLD_RESULT_FILE".into(),
                result_file.display().to_string(),
            ),
            ("SPOOLD_URL".into(), self.api_url.clone()),
            ("SPOOLD_STEP_TOKEN".into(), step_token.clone()),
        ]);
        Ok(AttemptEnv {
            env,
            secrets,
            step_token,
        })
    }

    /// Run one attempt and record it; the next task claimed for this slot in the same commit.
    async fn attempt(&self, task: ClaimedTask, tokens: Tokens) -> Option<(ClaimedTask, Instant)> {
        let declared = self.types.now();
        let Some(kind) = declared.get(&task.task_type) else {
            // Claims only ever take declared types; a type removed from the file meanwhile
            // cannot run.
            warn!(task_id = %task.id, task_type = %task.task_type, "task type is no longer declared");
            return None;
        };
        let label = TypeLabel {
            task_type: task.task_type.clone(),
        };
        if task.attempt == 1 {
            let waited = (task.started_at - task.created_at).max(0) as f64 / 1000.0;
            self.metrics
                .task_queue_wait
                .get_or_create(&label)
                .observe(waited);
        }
        if self.store.is_shared()
            && (tokens.lease_lost.is_cancelled()
                || Instant::now() + LEASE_SAFETY >= *tokens.lease_until.borrow())
        {
            // Another host may be taking the task over already: nothing is started, and the
            // task is given back (fenced by the claim) to run again at once if it is not.
            let finished = Finished {
                lease_over_before_start: true,
                ..Finished::default()
            };
            let rules = RedactRules::default();
            return self
                .record(kind, &task, finished, NO_OUTPUT, &rules, label)
                .await;
        }
        let params: BTreeMap<String, String> =
            serde_json::from_str(&task.params).unwrap_or_default();
        let argv = kind.argv(&params);
        let result_file = self.result_file(&task.id, task.attempt);
        let mut rules = RedactRules::default();
        let prepared = prepare_result_file(&result_file, kind)
            .and_then(|()| self.environment(kind, &task, &result_file));
        let (finished, output) = match prepared {
            Err(why) => {
                let finished = Finished {
                    spawn_error: Some(why),
                    ..Finished::default()
                };
                (finished, NO_OUTPUT)
            }
            Ok(AttemptEnv {
                env,
                secrets,
                step_token,
            }) => {
                rules = match RedactRules::new(secrets, &kind.redact) {
                    Ok(rules) => rules,
                    Err(e) => {
                        // Patterns are checked at start-up; a secret too large to redact is
                        // not passed on.
                        let finished = Finished {
                            spawn_error: Some(format!("cannot redact this type's output: {e}")),
                            ..Finished::default()
                        };
                        return self
                            .record(kind, &task, finished, NO_OUTPUT, &rules, label)
                            .await;
                    }
                };
                let log_path = output_path(&self.output_dir, &task.id, task.attempt);
                let log = match OutputLog::create(&log_path, kind.output_limit, &rules) {
                    Ok(log) => Some(Arc::new(Mutex::new(log))),
                    Err(e) => {
                        warn!(task_id = %task.id, error = %e, path = %log_path.display(),
                              "cannot create the attempt's output log; its output is dropped");
                        None
                    }
                };
                let digest: [u8; 32] = Sha256::digest(step_token.as_bytes()).into();
                self.running.equip(&task.id, digest, log.clone());
                let finished = exec::run(exec::Spawn {
                    argv: &argv,
                    env,
                    working_dir: kind.working_dir.as_deref(),
                    run_as: kind.run_as.as_ref().map(|u| (u.uid, u.gid)),
                    timeout: kind.timeout,
                    kill_grace: kind.kill_grace,
                    cancel: tokens.cancel,
                    shutdown: self.interrupt.clone(),
                    lease_lost: tokens.lease_lost,
                    lease: self.store.is_shared().then_some(tokens.lease_until),
                    tag: exec::attempt_tag(&task.id, task.attempt),
                    cgroup: self.cgroup.as_ref(),
                    output: log.clone(),
                    supervisor: &self.supervisor,
                })
                .await;
                // The runner's copy is the last one once the registry lets go of it.
                self.running.equip(&task.id, digest, None);
                let output = match log.map(Arc::try_unwrap) {
                    Some(Ok(log)) => {
                        let log = log.into_inner().unwrap_or_else(PoisonError::into_inner);
                        match tokio::task::spawn_blocking(move || log.finish()).await {
                            Ok(Ok(summary)) => summary,
                            Ok(Err(e)) => {
                                warn!(task_id = %task.id, error = %e, "cannot finish the attempt's output log");
                                NO_OUTPUT
                            }
                            Err(_) => NO_OUTPUT,
                        }
                    }
                    _ => NO_OUTPUT,
                };
                (finished, output)
            }
        };
        self.record(kind, &task, finished, output, &rules, label)
            .await
    }

    /// Judge a finished attempt, log it, record it (claiming the slot's next task in the same
    /// commit) and count it.
    async fn record(
        &self,
        kind: &TaskType,
        task: &ClaimedTask,
        finished: Finished,
        output: OutputSummary,
        rules: &RedactRules,
        label: TypeLabel,
    ) -> Option<(ClaimedTask, Instant)> {
        self.metrics
            .task_attempt_duration
            .get_or_create(&label)
            .observe(finished.duration.as_secs_f64());
        if output.truncated_bytes > 0 {
            self.metrics
                .task_output_truncated_bytes
                .get_or_create(&label)
                .inc_by(output.truncated_bytes);
        }
        if output.redactions > 0 {
            self.metrics
                .task_redactions
                .get_or_create(&label)
                .inc_by(output.redactions);
        }
        let result_file = self.result_file(&task.id, task.attempt);
        let summary = read_summary(&result_file, rules).unwrap_or_else(|why| {
            warn!(task_id = %task.id, attempt = task.attempt, why,
                  "the attempt's result file (SPOOLD_RESULT_FILE) was not read");
            None
        });
        remove_result(&result_file);
        let mut end = self.judge(kind, task, &finished, summary);
        end.output_bytes = output.bytes;
        end.output_truncated = output.truncated_bytes > 0;
        end.redactions = output.redactions;
        end.error = end.error.map(|e| output::redact_all(rules, &e));
        let outcome = end.outcome;
        let error_code = end.error_code.clone();
        let retry_at = end.retry_at;
        info!(
            task_id = %task.id,
            idempotency_key = task.idempotency_key.as_deref().unwrap_or(""),
            task_type = %task.task_type,
            attempt = task.attempt,
            status = %outcome,
            executor_id = %self.executor.id,
            started_at = %spool_proto::units::format_time(task.started_at),
            finished_at = %spool_proto::units::format_time(self.store.now_ms()),
            duration_ms = finished.duration.as_millis() as u64,
            error_code = error_code.as_deref(),
            exit_code = finished.exit_code,
            signal = finished.signal,
            killed = finished.killed,
            output_bytes = output.bytes,
            retry_at = retry_at.map(spool_proto::units::format_time),
            "task attempt finished"
        );
        // Go on with the next due task in the same commit, unless the daemon is stopping.
        let types = if self.stop.is_cancelled() {
            Vec::new()
        } else {
            Self::claim_types(&self.types.now())
        };
        self.running.over(&task.id, task.claim_seq);
        let then = on_interrupt_status(kind.on_interrupt);
        let (recorded, next) = match self
            .finish_patiently(end, types, &task.task_type, then)
            .await
        {
            Ok((status, next)) => (Ok(status), next),
            Err(e) => (Err(e), None),
        };
        if recorded.is_ok() {
            // Its supervisor's record goes once the end is in the store (kept, a next daemon
            // would read it; gone, it would take the attempt for one that never started).
            let tag = exec::attempt_tag(&task.id, task.attempt);
            let _ = std::fs::remove_file(self.supervisor.records.join(tag));
        }
        match &recorded {
            Ok(Some(TaskStatus::Pending)) => {
                self.metrics.task_retries.get_or_create(&label).inc();
            }
            Ok(Some(status)) => {
                let error_code = if *status == TaskStatus::ManualReview {
                    Some("partial_failure".to_owned())
                } else {
                    error_code
                };
                self.metrics
                    .tasks_finished
                    .get_or_create(&TaskEndLabel {
                        task_type: task.task_type.clone(),
                        status: status.as_str(),
                        error_code: error_code.unwrap_or_else(|| "none".into()),
                    })
                    .inc();
            }
            _ => {}
        }
        match recorded {
            Ok(Some(TaskStatus::Interrupted)) => {
                self.apply_on_interrupt(&task.id, kind.on_interrupt).await;
            }
            Ok(Some(_)) => {}
            Ok(None) => warn!(task_id = %task.id, attempt = task.attempt, status = %outcome,
                              "the attempt's end came after its task was taken over by another \
                               executor (its lease ran out); the take-over settles the task"),
            Err(spool_store::StoreError::Unavailable(e)) => {
                warn!(task_id = %task.id, error = %e,
                      "stopping before the database came back: how the attempt ended is kept in \
                       the data directory and recorded at the next start")
            }
            Err(e) => error!(task_id = %task.id, error = %e, "could not record a task attempt"),
        }
        next
    }

    /// Record how an attempt ended (and claim the next task for the slot), riding out a
    /// database that is out of reach (a PostgreSQL server restarting, a failover) for as long as
    /// this daemon runs: only this daemon knows how the attempt ended. From the first refusal
    /// on, the end is also kept in the data directory ([`crate::unrecorded`]), for the next
    /// start should this daemon stop first (then `Err(Unavailable)`). The attempt stays
    /// registered as running here meanwhile, so the heartbeat renews its lease as soon as the
    /// database is back and no other host takes the task over unless the outage outlasted the
    /// lease (the write then finds the claim gone: `Ok((None, _))`).
    async fn finish_patiently(
        &self,
        end: TaskAttemptEnd,
        types: Vec<ClaimType>,
        task_type: &str,
        on_interrupt: TaskStatus,
    ) -> Result<(Option<TaskStatus>, Option<(ClaimedTask, Instant)>), spool_store::StoreError> {
        let mut pause = Duration::from_millis(50);
        let mut kept = None;
        loop {
            let claimed_at = Instant::now();
            // Once the database was out of reach, the end is written alone: a next task is
            // claimed by the runner's loop when it is back.
            let types = if kept.is_some() {
                Vec::new()
            } else {
                types.clone()
            };
            let recorded = self
                .store
                .finish_and_claim(
                    end.clone(),
                    types,
                    self.lease.as_millis() as i64,
                    self.executor.clone(),
                )
                .await;
            match recorded {
                Err(spool_store::StoreError::Unavailable(e)) if !self.stop.is_cancelled() => {
                    if kept.is_none() {
                        warn!(task_id = %end.id, error = %e,
                              "database out of reach: how the attempt ended is kept and \
                               recorded once it is back");
                        self.metrics.unrecorded.get_or_create(&TASK).inc();
                        kept = Some(
                            self.journal
                                .keep_task(&end, task_type, Some(on_interrupt))
                                .await,
                        );
                    }
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = self.stop.cancelled() => {}
                    }
                    pause = (pause * 2).min(MAX_RECORD_PAUSE);
                }
                other => {
                    if let Some(kept) = kept {
                        self.metrics.unrecorded.get_or_create(&TASK).dec();
                        match &other {
                            Err(spool_store::StoreError::Unavailable(_)) => {}
                            _ => self.journal.done(kept),
                        }
                    } else if let Err(spool_store::StoreError::Unavailable(_)) = &other {
                        // Refused while stopping, before anything was kept: keep it now.
                        self.journal
                            .keep_task(&end, task_type, Some(on_interrupt))
                            .await;
                    }
                    return other.map(|(status, next)| (status, next.map(|t| (t, claimed_at))));
                }
            }
        }
    }

    /// When the lease of a claim just answered (asked for at `asked`) began, on this process's
    /// clock; `None` if the task is no longer this executor's. The lease runs from the claim
    /// transaction's start (`task.started_at`, on the store's clock), which may be seconds after
    /// the ask: the database took that long to reach (reconnecting after a failover). A claim
    /// whose COMMIT itself took most of the lease (it waited for a synchronous standby to come
    /// back) is renewed once before anything starts, rather than given back unstarted: if the
    /// renewal finds the claim taken over meanwhile, the task is another executor's.
    async fn leased(&self, task: &ClaimedTask, asked: Instant) -> Option<Instant> {
        let answered = Instant::now();
        let ago = Duration::from_millis((self.store.now_ms() - task.started_at).max(0) as u64);
        let since = answered
            .checked_sub(ago)
            .unwrap_or(asked)
            .clamp(asked, answered);
        if !self.store.is_shared() || since + self.lease > answered + 2 * LEASE_SAFETY {
            return Some(since);
        }
        let live = vec![(task.id.clone(), task.claim_seq)];
        let renewal = self
            .store
            .renew_task_leases(live, self.lease.as_millis() as i64);
        match tokio::time::timeout(self.lease / 3, renewal).await {
            Ok(Ok(renewed)) if renewed.iter().any(|r| r.id == task.id) => {
                info!(task_id = %task.id, claim_waited_ms = answered.duration_since(asked).as_millis() as u64,
                      "the claim took most of its lease to commit; renewed before the attempt starts");
                Some(answered)
            }
            Ok(Ok(_)) => {
                warn!(task_id = %task.id,
                      "the claim's lease ran out while it committed and another executor took the \
                       task over: nothing is started here");
                None
            }
            // The database is out of reach again: the attempt gives the task back unstarted.
            _ => Some(since),
        }
    }

    /// Classify how an attempt ended, and whether and when the task runs again.
    fn judge(
        &self,
        kind: &TaskType,
        task: &ClaimedTask,
        finished: &Finished,
        summary: Option<String>,
    ) -> TaskAttemptEnd {
        let mut end = TaskAttemptEnd {
            id: task.id.clone(),
            claim_seq: task.claim_seq,
            outcome: TaskStatus::Failed,
            exit_code: finished.exit_code,
            signal: finished.signal,
            error_code: None,
            error: None,
            duration_ms: finished.duration.as_millis() as i64,
            output_bytes: finished.output_bytes,
            output_truncated: false,
            killed: finished.killed,
            result_summary: summary,
            retry_at: None,
            hold_locks: kind.hold_locks_between_attempts,
            review_partial: kind.on_partial_failure == OnPartialFailure::Review,
            redactions: 0,
            never_ran: false,
        };
        let killed = if finished.killed {
            " (SIGKILL was needed)"
        } else {
            ""
        };
        let retried = match (finished.stopped, &finished.spawn_error) {
            _ if finished.lease_over_before_start => {
                end.outcome = TaskStatus::Interrupted;
                end.error_code = Some("lease_lost".into());
                end.error = Some(
                    "not started: its lease ran out between the claim and the start (this host \
                     was paused or starved); nothing ran"
                        .into(),
                );
                // Nothing ran, so nothing is to be reviewed: pending again at once, whatever the
                // policy, and not counted (its number is used up — its record says it never
                // ran — and the task's budget grows by one).
                end.retry_at = Some(self.store.now_ms());
                end.never_ran = true;
                false
            }
            _ if finished.supervisor_lost.is_some() => {
                end.outcome = TaskStatus::Interrupted;
                end.error_code = Some("supervisor_lost".into());
                end.error = finished.supervisor_lost.clone();
                false
            }
            (_, Some(why)) => {
                end.error_code = Some("spawn_failed".into());
                end.error = Some(why.clone());
                false
            }
            (Some(Stopped::TimedOut), _) => {
                end.outcome = TaskStatus::TimedOut;
                end.error_code = Some("timed_out".into());
                end.error = Some(format!(
                    "ran longer than its timeout of {}{killed}",
                    spool_proto::units::format_duration(kind.timeout)
                ));
                kind.retry_on_timeout
            }
            (Some(Stopped::Canceled), _) => {
                end.outcome = TaskStatus::Canceled;
                end.error_code = Some("canceled".into());
                end.error = Some(format!("canceled by an operator while it ran{killed}"));
                false
            }
            (Some(Stopped::Shutdown), _) => {
                end.outcome = TaskStatus::Interrupted;
                end.error_code = Some("daemon_shutdown".into());
                end.error = Some(format!("stopped by the daemon's shutdown{killed}"));
                false
            }
            (Some(Stopped::LeaseLost), _) => {
                end.outcome = TaskStatus::Interrupted;
                end.error_code = Some("lease_lost".into());
                end.error = Some(format!(
                    "stopped: its lease could not be renewed in time, so another host may \
                     take the task over{killed}"
                ));
                false
            }
            (None, None) => match (finished.exit_code, finished.signal) {
                (Some(0), _) => {
                    end.outcome = TaskStatus::Succeeded;
                    false
                }
                (Some(code), _) => {
                    let class = kind.classify_exit(code);
                    end.error_code = Some(class.as_str().into());
                    end.error = Some(format!("exited with {code} ({})", class.as_str()));
                    class.retried()
                }
                (None, signal) => {
                    end.error_code = Some(ExitClass::ScriptError.as_str().into());
                    end.error = Some(format!(
                        "killed by signal {}",
                        signal.map_or("?".into(), |s| s.to_string())
                    ));
                    true
                }
            },
        };
        if let Some(why) = &finished.taken_over {
            end.error = Some(match end.error.take() {
                Some(error) => format!("{error}; {why}"),
                None => why.clone(),
            });
        }
        if retried && task.attempt < task.max_attempts {
            let backoff = Backoff {
                base: kind.backoff_base,
                cap: kind.backoff_cap,
            };
            let at = self.store.now_ms() + backoff.delay(&task.id, task.attempt).as_millis() as i64;
            if task.retry_deadline.is_none_or(|d| at < d) {
                end.retry_at = Some(at);
            }
        }
        end
    }
}

/// Until every process of the attempt whose record file is `path` is gone (the file's lock is
/// free: each of them holds it): what its supervisor recorded, if anything, and how many
/// processes were ended here. A live supervisor ends its attempt on its own once its daemon is
/// gone — within the kill grace — and is waited for; what holds the file with no supervisor
/// among the holders (it died with its daemon), or still `grace` + [`SUPERVISOR_SLACK`] later,
/// is ended here by that fact ([`processes::end_holders`]). Looked at every 50 ms.
async fn wait_for_attempt(
    path: &std::path::Path,
    grace: Duration,
) -> (Option<super::supervision::Record>, usize) {
    let began = Instant::now();
    let mut ended = 0;
    let mut scanned: Option<Instant> = None;
    loop {
        match super::supervision::read_record(path) {
            Ok(record) => return (record, ended),
            // The holders are looked for at most twice a second (each look reads /proc).
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && scanned.is_some_and(|at| at.elapsed() < SCAN_EVERY) =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                scanned = Some(Instant::now());
                let owned = path.to_owned();
                let overdue = began.elapsed() >= grace + SUPERVISOR_SLACK;
                let found = tokio::task::spawn_blocking(move || {
                    let holders = super::processes::holders(&owned);
                    if holders.is_empty() || (!overdue && holders.iter().any(|h| h.supervisor)) {
                        return 0;
                    }
                    super::processes::end_holders(&owned, grace)
                })
                .await
                .unwrap_or(0);
                ended += found;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                warn!(path = %path.display(), error = %e,
                      "cannot read the record of an attempt's supervisor");
                return (None, ended);
            }
        }
    }
}

/// Remove what an attempt left at its result path: the file, or whatever the script put there
/// instead (a directory is removed whole; a symbolic link, not what it points to).
pub fn remove_result(path: &std::path::Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            if let Err(e) = std::fs::remove_dir_all(path) {
                warn!(path = %path.display(), error = %e,
                      "cannot remove the directory an attempt made at its result path");
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// How long past its kill grace a live supervisor whose daemon is gone is waited for before
/// what holds its attempt's record is ended from here (a supervisor ends its attempt within
/// the grace; one still there is stopped or hung).
const SUPERVISOR_SLACK: Duration = Duration::from_secs(10);

/// How often [`wait_for_attempt`] looks for the holders of a record.
const SCAN_EVERY: Duration = Duration::from_millis(500);

/// Where the type's `on_interrupt` takes a task whose attempt was interrupted.
fn on_interrupt_status(policy: OnInterrupt) -> TaskStatus {
    match policy {
        OnInterrupt::Review => TaskStatus::ManualReview,
        OnInterrupt::Retry => TaskStatus::Pending,
        OnInterrupt::Fail => TaskStatus::Failed,
    }
}

/// The longest wait between two writes of an attempt's end the database was out of reach for.
const MAX_RECORD_PAUSE: Duration = Duration::from_millis(500);

const TASK: KindLabel = KindLabel { kind: "task" };

/// What an attempt is started with.
struct AttemptEnv {
    /// Its whole environment.
    env: Vec<(String, String)>,
    /// The values of its `secret_env`, to redact.
    secrets: Vec<Vec<u8>>,
    /// Its step token (only its digest is kept).
    step_token: String,
}

const NO_OUTPUT: OutputSummary = OutputSummary {
    bytes: 0,
    truncated_bytes: 0,
    redactions: 0,
};

/// How often the runner looks again while due tasks wait for a lock or a quota (attempts'
/// ends wake it sooner).
const WAITING_POLL: Duration = Duration::from_millis(250);

/// After a claim that took nothing while due tasks waited, how long the runner lets
/// submissions and ends gather before it claims again.
const FRUITLESS_SPACING: Duration = Duration::from_millis(10);

/// The output log of attempt `attempt` of task `id`.
pub fn output_path(dir: &std::path::Path, id: &str, attempt: u32) -> PathBuf {
    dir.join(format!("{id}-{attempt}.log"))
}

/// A fresh random token (256 bits from the kernel, hex).
fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("cannot make a step token: getrandom: {e}")),
        }
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How much of a result file is read: a summary is cut to [`MAX_SUMMARY_BYTES`] only after it
/// is redacted, so a secret that straddles the cut is still seen whole (up to this much).
const SUMMARY_READ_BYTES: u64 = 64 * 1024;

/// The attempt's result summary, if it wrote one: redacted first, then cut to
/// [`MAX_SUMMARY_BYTES`] on a character boundary, with no start of a secret left at the cut.
///
/// The file is the script's to write, and a script that runs as the daemon's user can also
/// replace it: it is opened without following a symbolic link (which could name a file only
/// the daemon may read) and without blocking (a FIFO would block the open until a writer came),
/// and read only if it is a regular file, so reading it never outlasts the attempt. `Err`:
/// what was there instead.
fn read_summary(path: &std::path::Path, rules: &RedactRules) -> Result<Option<String>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let kind = file
        .metadata()
        .map_err(|e| format!("cannot look at it: {e}"))?
        .file_type();
    if !kind.is_file() {
        return Err(format!("it is not a regular file but {kind:?}"));
    }
    let mut bytes = Vec::new();
    file.take(SUMMARY_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let text = String::from_utf8_lossy(&bytes);
    let summary = output::redact_summary(rules, text.trim(), MAX_SUMMARY_BYTES);
    Ok((!summary.is_empty()).then_some(summary))
}

/// Create the attempt's result file, empty and private (mode 0600, owned by the user the
/// attempt runs as): the script only writes into it, and a summary may hold a secret.
fn prepare_result_file(path: &std::path::Path, kind: &TaskType) -> Result<(), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create the result file {}: {e}", path.display()))?;
    if let Some(user) = &kind.run_as {
        let owner = (
            rustix::fs::Uid::from_raw(user.uid),
            rustix::fs::Gid::from_raw(user.gid),
        );
        rustix::fs::fchown(&file, Some(owner.0), Some(owner.1)).map_err(|e| {
            format!(
                "cannot give the result file {} to user {}: {e}",
                path.display(),
                user.name
            )
        })?;
    }
    Ok(())
}
