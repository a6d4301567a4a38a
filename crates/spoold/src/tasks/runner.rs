//! The task runner: claims due tasks of the declared types within `--task-concurrency`, runs
//! each attempt through [`exec`](super::exec), classifies how it ended and records it. Attempts
//! and the next run time are in the store, never only in memory.
//!
//! Classification: exit 0 → `succeeded`; a non-zero exit by the type's table (defaults follow
//! sysexits.h) — `transient` and `script_error` are retried, `invalid_params` and
//! `permission_denied` never; killed by a signal → `script_error`; over its `timeout` →
//! `timed_out`, retried only with `retry_on_timeout`. Retries back off exponentially with jitter
//! (`backoff`), within `max_attempts` and before `retry_deadline`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use spool_store::tasks::{ClaimedTask, Interrupted, TaskAttemptEnd, TaskStatus};
use spool_store::Store;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use super::exec::{self, Finished, Stopped};
use super::types::{ExitClass, OnInterrupt, TaskType};
use super::TaskTypes;
use crate::backoff::Backoff;
use crate::metrics::{Metrics, TaskEndLabel, TypeLabel};

/// The longest result summary kept (`SPOOLD_RESULT_FILE`).
pub const MAX_SUMMARY_BYTES: u64 = 4096;

/// The `PATH` of every attempt.
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Cancel tokens of the attempts running in this process, by task id.
#[derive(Debug, Default)]
pub struct Running(Mutex<RunningInner>);

#[derive(Debug, Default)]
struct RunningInner {
    tokens: HashMap<String, CancellationToken>,
    /// Cancels that came between a task's claim and the start of its attempt here.
    early: std::collections::HashSet<String>,
}

impl Running {
    /// Ask the attempt of `task_id` running here to stop as canceled (the store has recorded
    /// the request). If its attempt has not registered yet, it is canceled as it does.
    pub fn cancel(&self, task_id: &str) {
        let mut inner = self.lock();
        match inner.tokens.get(task_id) {
            Some(token) => token.cancel(),
            None => {
                inner.early.insert(task_id.to_owned());
            }
        }
    }

    /// Register the attempt of a claimed task: its cancel token.
    fn start(&self, task_id: &str) -> CancellationToken {
        let token = CancellationToken::new();
        let mut inner = self.lock();
        if inner.early.remove(task_id) {
            token.cancel();
        }
        inner.tokens.insert(task_id.to_owned(), token.clone());
        token
    }

    fn end(&self, task_id: &str) {
        let mut inner = self.lock();
        inner.tokens.remove(task_id);
        inner.early.remove(task_id);
    }

    /// How many attempts are running here.
    pub fn count(&self) -> usize {
        self.lock().tokens.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RunningInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the runner needs.
pub struct Runner {
    pub store: Store,
    pub types: Arc<TaskTypes>,
    pub concurrency: u32,
    /// `host:pid`, recorded with every attempt.
    pub executor_id: String,
    pub lease: Duration,
    /// Where attempts write their result summaries (one file per attempt, removed after).
    pub results_dir: PathBuf,
    pub running: Arc<Running>,
    /// Graceful shutdown began: start nothing new.
    pub stop: CancellationToken,
    /// Shutdown timeout reached: stop the attempts still running.
    pub interrupt: CancellationToken,
    pub metrics: Arc<Metrics>,
    /// Where attempts get cgroups of their own (`--task-cgroup`), if anywhere.
    pub cgroup: Option<super::cgroup::CgroupRoot>,
}

impl Runner {
    /// Apply each type's `on_interrupt` to tasks interrupted by a previous process.
    ///
    /// First, whatever of each interrupted attempt still runs on this host is ended (found by
    /// its tag, so a reused pid is never mistaken for it): two copies of a deploy must never
    /// run, so a task the policy re-runs is made pending only after that.
    pub async fn settle_interrupted(&self, interrupted: Vec<Interrupted>) {
        for task in interrupted {
            let kind = self.types.get(&task.task_type);
            let grace = kind.map_or(Duration::from_secs(10), |t| t.kill_grace);
            let tag = exec::attempt_tag(&task.id, task.attempt);
            let ended = exec::end_leftovers(&tag, grace).await;
            if ended > 0 {
                self.metrics.task_recovered_processes.inc_by(ended as u64);
                warn!(task_id = %task.id, attempt = task.attempt, processes = ended,
                      "ended processes a previous daemon left running for an interrupted task");
            }
            let policy = kind.map_or(OnInterrupt::Review, |t| t.on_interrupt);
            self.apply_on_interrupt(&task.id, policy).await;
        }
    }

    async fn apply_on_interrupt(&self, id: &str, policy: OnInterrupt) {
        let to = match policy {
            OnInterrupt::Review => TaskStatus::ManualReview,
            OnInterrupt::Retry => TaskStatus::Pending,
            OnInterrupt::Fail => TaskStatus::Failed,
        };
        let note = "the type's on_interrupt";
        if let Err(e) = self
            .store
            .decide_task(id.to_owned(), to, "on_interrupt".into(), Some(note.into()))
            .await
        {
            error!(task_id = %id, error = %e, "could not apply on_interrupt");
        }
    }

    /// Run until `stop`; attempts are spawned on `attempts`.
    pub async fn run(self: Arc<Self>, attempts: TaskTracker) {
        let wake = self.store.tasks_available();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<()>();
        let names = self.types.names();
        loop {
            while done_rx.try_recv().is_ok() {}
            if self.stop.is_cancelled() {
                return;
            }
            let free = self.concurrency.saturating_sub(self.running.count() as u32);
            let mut wait = Duration::from_secs(60);
            if free > 0 && !names.is_empty() {
                match self
                    .store
                    .claim_tasks(
                        free,
                        names.clone(),
                        self.lease.as_millis() as i64,
                        self.executor_id.clone(),
                    )
                    .await
                {
                    Ok(claimed) => {
                        let n = claimed.len() as u32;
                        for task in claimed {
                            // Counted as running at once, so the next pass sees the slot taken.
                            let cancel = self.running.start(&task.id);
                            let me = Arc::clone(&self);
                            let done = done_tx.clone();
                            attempts.spawn(async move {
                                me.slot(task, cancel).await;
                                let _ = done.send(());
                            });
                        }
                        if n == free {
                            wait = Duration::from_secs(60);
                        } else {
                            wait = self.until_next_due(&names).await;
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "claiming tasks failed");
                        wait = Duration::from_secs(1);
                    }
                }
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = wake.notified() => {}
                Some(()) = done_rx.recv() => {}
                () = tokio::time::sleep(wait) => {}
            }
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
    /// due task, run that one too.
    async fn slot(&self, first: ClaimedTask, cancel: CancellationToken) {
        let mut current = Some((first, cancel));
        while let Some((task, cancel)) = current.take() {
            let id = task.id.clone();
            let next = self.attempt(task, cancel).await;
            self.running.end(&id);
            current = next.map(|t| {
                let cancel = self.running.start(&t.id);
                (t, cancel)
            });
        }
    }

    /// Run one attempt and record it; the next task claimed for this slot in the same commit.
    async fn attempt(&self, task: ClaimedTask, cancel: CancellationToken) -> Option<ClaimedTask> {
        let Some(kind) = self.types.get(&task.task_type) else {
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
        let params: BTreeMap<String, String> =
            serde_json::from_str(&task.params).unwrap_or_default();
        let argv = kind.argv(&params);
        let result_file = self
            .results_dir
            .join(format!("{}-{}", task.id, task.attempt));
        let mut env: Vec<(String, String)> = vec![("PATH".into(), CHILD_PATH.into())];
        env.extend(kind.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend([
            ("SPOOLD_TASK_ID".into(), task.id.clone()),
            ("SPOOLD_ATTEMPT".into(), task.attempt.to_string()),
            ("SPOOLD_TASK_TYPE".into(), task.task_type.clone()),
            (
                "SPOOLD_RESULT_FILE".into(),
                result_file.display().to_string(),
            ),
        ]);
        let finished = exec::run(exec::Spawn {
            argv: &argv,
            env,
            working_dir: kind.working_dir.as_deref(),
            timeout: kind.timeout,
            kill_grace: kind.kill_grace,
            cancel,
            shutdown: self.interrupt.clone(),
            tag: exec::attempt_tag(&task.id, task.attempt),
            cgroup: self.cgroup.as_ref(),
        })
        .await;
        self.metrics
            .task_attempt_duration
            .get_or_create(&label)
            .observe(finished.duration.as_secs_f64());
        let summary = read_summary(&result_file);
        let _ = std::fs::remove_file(&result_file);
        let end = self.judge(kind, &task, &finished, summary);
        let outcome = end.outcome;
        let error_code = end.error_code.clone();
        let retry_at = end.retry_at;
        info!(
            task_id = %task.id,
            idempotency_key = task.idempotency_key.as_deref().unwrap_or(""),
            task_type = %task.task_type,
            attempt = task.attempt,
            status = %outcome,
            executor_id = %self.executor_id,
            started_at = %spool_proto::units::format_time(task.started_at),
            finished_at = %spool_proto::units::format_time(self.store.now_ms()),
            duration_ms = finished.duration.as_millis() as u64,
            error_code = error_code.as_deref(),
            exit_code = finished.exit_code,
            signal = finished.signal,
            killed = finished.killed,
            retry_at = retry_at.map(spool_proto::units::format_time),
            "task attempt finished"
        );
        // Go on with the next due task in the same commit, unless the daemon is stopping.
        let types = if self.stop.is_cancelled() {
            Vec::new()
        } else {
            self.types.names()
        };
        let (recorded, next) = match self
            .store
            .finish_and_claim(
                end,
                types,
                self.lease.as_millis() as i64,
                self.executor_id.clone(),
            )
            .await
        {
            Ok((status, next)) => (Ok(status), next),
            Err(e) => (Err(e), None),
        };
        match &recorded {
            Ok(Some(TaskStatus::Pending)) => {
                self.metrics.task_retries.get_or_create(&label).inc();
            }
            Ok(Some(status)) => {
                self.metrics
                    .tasks_finished
                    .get_or_create(&TaskEndLabel {
                        task_type: task.task_type.clone(),
                        status: status.as_str(),
                        error_code: error_code.clone().unwrap_or_else(|| "none".into()),
                    })
                    .inc();
            }
            _ => {}
        }
        match recorded {
            Ok(Some(TaskStatus::Interrupted)) => {
                self.apply_on_interrupt(&task.id, kind.on_interrupt).await;
            }
            Ok(_) => {}
            Err(e) => error!(task_id = %task.id, error = %e, "could not record a task attempt"),
        }
        next
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
        };
        let killed = if finished.killed {
            " (SIGKILL was needed)"
        } else {
            ""
        };
        let retried = match (finished.stopped, &finished.spawn_error) {
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

/// The first [`MAX_SUMMARY_BYTES`] of the attempt's result file, if it wrote one.
fn read_summary(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut text = String::new();
    file.take(MAX_SUMMARY_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}
