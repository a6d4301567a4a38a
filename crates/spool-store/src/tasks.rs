//! Tasks as the store sees them: the state machine, which the store enforces (an illegal
//! transition is refused with [`StoreError::IllegalTransition`] and is a bug in the caller), and
//! the records that cross the store boundary. The store knows nothing of processes: a task's
//! type, parameters and timing rules are data here; running them is the daemon's business.
//!
//! [`StoreError::IllegalTransition`]: crate::StoreError::IllegalTransition

use std::fmt;
use std::str::FromStr;

use crate::clock::Millis;

/// Where a task is in its life.
///
/// ```text
///  pending ──▶ running ──▶ succeeded | failed | timed_out | interrupted | canceled
///  pending ──▶ canceled | timed_out (queue timeout)
///  pending ──▶ manual_review                          (its type is no longer declared)
///  failed | timed_out | interrupted ──▶ pending        (retry: policy or operator)
///  interrupted ──▶ failed | manual_review              (the type's on_interrupt)
///  failed ──▶ manual_review                            (a partial failure)
///  manual_review ──▶ pending | failed | canceled       (an operator's decision)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Interrupted,
    Canceled,
    ManualReview,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Pending,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::TimedOut,
        TaskStatus::Interrupted,
        TaskStatus::Canceled,
        TaskStatus::ManualReview,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::Interrupted => "interrupted",
            TaskStatus::Canceled => "canceled",
            TaskStatus::ManualReview => "manual_review",
        }
    }

    /// The transition table: whether a task may go from `self` to `to`. Every status change the
    /// store makes is checked against it.
    pub fn can_become(self, to: TaskStatus) -> bool {
        use TaskStatus::*;
        matches!(
            (self, to),
            (Pending, Running | Canceled | TimedOut | ManualReview)
                | (
                    Running,
                    Succeeded | Failed | TimedOut | Interrupted | Canceled
                )
                | (Failed | TimedOut | Interrupted, Pending)
                | (Interrupted, Failed | ManualReview)
                | (Failed, ManualReview)
                | (ManualReview, Pending | Failed | Canceled | Succeeded)
        )
    }

    /// Whether an operator's cancel applies from here, as both backends decide it: a pending
    /// or `manual_review` task is canceled at once, a running one asked to stop.
    pub fn cancelable(self) -> bool {
        matches!(
            self,
            TaskStatus::Pending | TaskStatus::Running | TaskStatus::ManualReview
        )
    }

    /// Whether an operator's retry applies from here (pending again, as both backends decide
    /// it; the task's type must also allow operator retries).
    pub fn retryable(self) -> bool {
        self.can_become(TaskStatus::Pending)
    }

    /// No further change happens by itself (an operator may still retry or decide).
    pub fn is_final(self) -> bool {
        !matches!(self, TaskStatus::Pending | TaskStatus::Running)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the task status names.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown task status {0:?}")]
pub struct UnknownTaskStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownTaskStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownTaskStatus(s.to_owned()))
    }
}

/// Everything needed to create a task. The daemon validates the type and parameters; the store
/// persists them and enforces uniqueness of (scope, key).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: String,
    pub task_type: String,
    /// The uniqueness scope (a rendered template).
    pub scope: String,
    /// The business key (rendered from the type's template, or given); `None`: not deduplicated.
    pub idempotency_key: Option<String>,
    /// The parameters as a JSON object, normalised (the daemon's text; the store keeps it).
    pub params: String,
    /// Opaque digest of what makes two submissions the same (type and parameters).
    pub digest: Vec<u8>,
    pub max_attempts: u32,
    pub not_before: Option<Millis>,
    /// From submission to first start: a task not started by then is `timed_out`
    /// (`queue_timeout`). Milliseconds after creation; `None`: no limit.
    pub queue_timeout_ms: Option<Millis>,
    /// From submission: no attempt starts after it. Milliseconds after creation.
    pub retry_deadline_ms: Option<Millis>,
    /// Resource locks (rendered names) an attempt must hold, all at once.
    pub locks: Vec<String>,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub id: String,
    pub task_type: String,
    pub scope: String,
    pub idempotency_key: Option<String>,
    pub params: String,
    pub status: TaskStatus,
    /// Attempts started so far (the number of the last one).
    pub attempts: u32,
    pub max_attempts: u32,
    pub created_at: Millis,
    pub updated_at: Millis,
    /// First attempt's start.
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    /// When the next attempt may start (pending only).
    pub next_run_at: Option<Millis>,
    pub not_before: Option<Millis>,
    pub queue_deadline: Option<Millis>,
    pub retry_deadline: Option<Millis>,
    pub lease_until: Option<Millis>,
    pub executor_id: Option<String>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub result_summary: Option<String>,
    /// An operator asked to cancel it while it was running.
    pub cancel_requested: bool,
    /// Resource locks (rendered names) each attempt holds.
    pub locks: Vec<String>,
    /// Steps its attempts reported done, in the order they were reported.
    pub completed_steps: Vec<String>,
    /// Set while its attempt is being ended by another executor than the one that started it
    /// (why that one is gone: `daemon_restart`, `lease_expired`). The task stays `running`,
    /// with its locks and its quota slot, until every process of the attempt is gone.
    pub ending: Option<String>,
}

/// The result of an idempotent submission.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per submission and consumed at once, like InsertOutcome"
)]
pub enum TaskInsert {
    Created(Task),
    /// Same scope and key, same digest: the existing task, in its current state.
    Existing(Task),
    /// Same scope and key, different digest.
    Conflict {
        existing_id: String,
    },
}

/// A task claimed for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedTask {
    pub id: String,
    pub task_type: String,
    pub params: String,
    /// Fence token: the attempt's result is applied only while the task still carries it.
    pub claim_seq: u32,
    /// This attempt's number (1-based).
    pub attempt: u32,
    pub max_attempts: u32,
    pub created_at: Millis,
    pub started_at: Millis,
    pub retry_deadline: Option<Millis>,
    pub idempotency_key: Option<String>,
}

/// A task type the runner may claim, and its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimType {
    pub name: String,
    /// At most this many of its tasks run at once (across the whole store); `None`: no limit
    /// of its own.
    pub concurrency: Option<u32>,
    /// How long its attempts get between SIGTERM and SIGKILL, recorded with each attempt: a
    /// host that takes over a lapsed attempt it cannot see waits this long past the lease.
    pub kill_grace_ms: i64,
}

/// The `kill_grace` of a type declared without one.
pub const DEFAULT_KILL_GRACE_MS: i64 = 10_000;

impl From<&str> for ClaimType {
    /// A type without a quota of its own, with the default kill grace.
    fn from(name: &str) -> Self {
        ClaimType {
            name: name.to_owned(),
            concurrency: None,
            kill_grace_ms: DEFAULT_KILL_GRACE_MS,
        }
    }
}

/// Who starts attempts: one daemon run. Recorded with every attempt it starts and on every
/// task it holds the lease of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executor {
    /// Unique per daemon run (a restart with the same pid on the same host is another
    /// executor): `host:pid:run`.
    pub id: String,
    /// Where the processes it starts can be seen from (machine, boot and pid namespace): an
    /// executor with the same `host` can find and end them; any other cannot.
    pub host: String,
}

impl From<&str> for Executor {
    /// An executor whose processes nobody can see (tests).
    fn from(id: &str) -> Self {
        Executor {
            id: id.to_owned(),
            host: String::new(),
        }
    }
}

/// Why a due task was passed over by a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// Its type's `concurrency` is used up.
    Quota,
    /// One of its locks is held, or wanted by a task ahead of it.
    Lock,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Quota => "quota",
            WaitReason::Lock => "lock",
        }
    }
}

/// What a claim took, and which due tasks it had to leave waiting.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    pub tasks: Vec<ClaimedTask>,
    /// (task type, why) of every due task passed over.
    pub waiting: Vec<(String, WaitReason)>,
}

/// One held resource lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    pub name: String,
    pub task_id: String,
    pub task_type: String,
    /// `running`, or `pending` while it keeps its locks through a retry's backoff.
    pub task_status: TaskStatus,
    /// The attempt that holds it (the task's latest).
    pub attempt: u32,
    /// Set while that attempt is being ended by another executor (see [`Task::ending`]): the
    /// lock is released only once its processes are gone.
    pub ending: Option<String>,
    pub since: Millis,
    /// Pending tasks that want this lock, in the order they will get it.
    pub waiting: Vec<String>,
}

/// A step a task's attempt reported done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStep {
    pub name: String,
    pub attempt: u32,
    pub at: Millis,
}

/// What recording a step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepRecord {
    /// Recorded now.
    Recorded(TaskStep),
    /// It was done before (by this attempt or an earlier one); nothing changed.
    AlreadyDone(TaskStep),
    NotFound,
    /// The task is not running that attempt (it ended, or another attempt runs).
    NotCurrent {
        status: TaskStatus,
        attempt: u32,
    },
}

/// How an attempt ended, as the runner recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskAttemptEnd {
    pub id: String,
    pub claim_seq: u32,
    /// `succeeded`, `failed`, `timed_out`, `canceled`, `interrupted`.
    pub outcome: TaskStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
    pub output_bytes: u64,
    pub output_truncated: bool,
    /// Whether SIGKILL was needed to end it (timeouts and cancels).
    pub killed: bool,
    pub result_summary: Option<String>,
    /// Try again at this time (the task goes back to `pending`), or `None`: `outcome` is final.
    pub retry_at: Option<Millis>,
    /// Keep its locks through the wait for `retry_at` (the type's
    /// `hold_locks_between_attempts`).
    pub hold_locks: bool,
    /// A failure after some step was reported done goes to `manual_review`
    /// (`partial_failure`) instead of being retried.
    pub review_partial: bool,
    /// Secrets and patterns replaced in its output.
    pub redactions: u64,
    /// Nothing of the attempt ran (its lease was over before it could start): it is not
    /// counted against the task's attempts — `max_attempts` grows by one, so the task still gets
    /// as many runs as its type allows.
    pub never_ran: bool,
}

/// Where a finished attempt takes its task: decided here, the same for every backend, from
/// how the attempt ended and what the store knows of the task. A backend reads the row, calls
/// [`TaskEnd::decide`] and writes what it says: the task leaves `running` for [`Self::status`]
/// (with [`Self::locks`]), then [`Self::then`] says what follows in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskEnd {
    /// What the task leaves `running` for.
    pub status: TaskStatus,
    /// The transition's reason.
    pub reason: String,
    pub note: Option<String>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    /// What leaving `running` does with the task's locks.
    pub locks: Locks,
    /// What follows the first change.
    pub then: Then,
}

/// What a status change does with a task's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Locks {
    /// Give them up unless the task is (still) `running` or `pending`.
    Release,
    /// Keep them: the change is the first half of a retry that holds its locks.
    Keep,
}

impl Locks {
    /// Whether a change to `to` with this choice gives the task's locks up.
    pub fn released_by(self, to: TaskStatus) -> bool {
        self == Locks::Release && !matches!(to, TaskStatus::Running | TaskStatus::Pending)
    }
}

/// What a finished attempt's task does after it left `running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    /// Nothing: the task ended where it went (`finished_at` is set).
    End,
    /// On to `manual_review` (from `failed`): it failed after some of its steps were done.
    Review,
    /// Pending again at `at` (`finished_at` stays unset). `release_locks`: give the locks up
    /// first (the type does not hold them between attempts).
    Retry { at: Millis, release_locks: bool },
}

impl Then {
    /// The reason, the note and the error code of the change to `manual_review`.
    pub const REVIEW: (&'static str, &'static str) = (
        "partial_failure",
        "it failed after some of its steps were done",
    );
}

impl TaskEnd {
    /// `cancel_requested`: an operator asked to cancel the task before the end was recorded;
    /// `has_steps`: some attempt reported a step done.
    ///
    /// A requested cancel wins over every outcome but success: the task ends `canceled` and
    /// nothing runs again, whatever the attempt exited with — the operator was told the cancel
    /// was taken. A success stays a success: its work is done, and saying otherwise would
    /// invite someone to do it again. A failure or timeout after steps were done, of a type
    /// that asks for it (`review_partial`), goes to review instead of a retry; any other end
    /// with a `retry_at` is pending again then, keeping its locks if the type holds them.
    pub fn decide(end: &TaskAttemptEnd, cancel_requested: bool, has_steps: bool) -> TaskEnd {
        if cancel_requested && !matches!(end.outcome, TaskStatus::Succeeded | TaskStatus::Canceled)
        {
            let what = end
                .error
                .clone()
                .unwrap_or_else(|| end.outcome.as_str().to_owned());
            return TaskEnd {
                status: TaskStatus::Canceled,
                reason: "canceled".into(),
                note: Some(format!(
                    "an operator's cancel came before the attempt's end ({what})"
                )),
                error_code: Some("canceled".into()),
                error: Some(format!(
                    "canceled by an operator; the attempt then ended: {what}"
                )),
                locks: Locks::Release,
                then: Then::End,
            };
        }
        let partial = end.review_partial
            && has_steps
            && matches!(end.outcome, TaskStatus::Failed | TaskStatus::TimedOut);
        let then = match end.retry_at {
            _ if partial => Then::Review,
            Some(at) => Then::Retry {
                at,
                release_locks: !end.hold_locks,
            },
            None => Then::End,
        };
        TaskEnd {
            // A partial failure is recorded as `failed` (a timed-out attempt too: the edge to
            // `manual_review` is from `failed`), then goes to review.
            status: if partial {
                TaskStatus::Failed
            } else {
                end.outcome
            },
            reason: end
                .error_code
                .clone()
                .unwrap_or_else(|| end.outcome.as_str().to_owned()),
            note: None,
            error_code: end.error_code.clone(),
            error: end.error.clone(),
            locks: if matches!(then, Then::Retry { .. }) && end.hold_locks {
                Locks::Keep
            } else {
                Locks::Release
            },
            then,
        }
    }

    /// The task's `finished_at` after the first change: now, unless it is to run again.
    pub fn finished_at(&self, now: Millis) -> Option<Millis> {
        (!matches!(self.then, Then::Retry { .. })).then_some(now)
    }
}

/// What an operator's cancel does to a task in `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOf {
    /// Running: the cancel is recorded (`cancel_requested`) and its runner ends the attempt.
    Request,
    /// Pending or in review: canceled at once, from `status`.
    Now(TaskStatus),
    /// Already ended: nothing to cancel.
    Invalid(TaskStatus),
}

impl CancelOf {
    pub fn decide(status: TaskStatus) -> CancelOf {
        match status {
            TaskStatus::Running => CancelOf::Request,
            TaskStatus::Pending | TaskStatus::ManualReview => CancelOf::Now(status),
            other => CancelOf::Invalid(other),
        }
    }
}

/// One attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskAttempt {
    pub number: u32,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    pub outcome: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
    pub executor_id: String,
    pub output_bytes: Option<u64>,
    pub output_truncated: Option<bool>,
    pub killed: Option<bool>,
    pub redactions: Option<u64>,
}

/// One status change of a task.
pub type TaskTransition = crate::status_log::Transition<TaskStatus>;

impl crate::status_log::Logged for TaskStatus {
    const OWNERS: &'static str = "tasks";
    const LOG: &'static str = "task_transitions";
    const KEY: &'static str = "task_id";
    const APPEND: &'static str = "INSERT INTO task_transitions (task_id, seq, from_status, \
        to_status, attempt, at, reason, note) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// A running task whose executor is gone (it crashed, or stopped renewing its lease), taken
/// over by another executor to end what is left of its attempt. The task stays `running` —
/// its locks and its quota slot held — until [`OrphanEnd`] settles it, which the new executor
/// does once every process of the attempt is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphaned {
    pub id: String,
    pub task_type: String,
    /// The attempt that was cut short.
    pub attempt: u32,
    /// The new executor's claim: its lease is renewed under it, and [`OrphanEnd`] is fenced
    /// by it (the old executor's end is refused from now on).
    pub claim_seq: u32,
    /// Why its executor is gone: `daemon_restart` or `lease_expired`.
    pub code: String,
    /// Where its processes can be seen from ([`Executor::host`]); empty if not recorded.
    pub host: String,
    /// The lease it had when it was taken over: an executor that could not renew stops its
    /// attempt by then, and has it gone `kill_grace_ms` later.
    pub lease_until: Millis,
    pub kill_grace_ms: i64,
}

/// Settle a task taken over as [`Orphaned`], once its attempt's processes are gone: the attempt
/// is closed as interrupted and the task leaves `running`, releasing its locks — to `canceled` if
/// an operator asked for that meanwhile, otherwise `interrupted` and at once on to what the type's
/// `on_interrupt` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanEnd {
    pub id: String,
    pub claim_seq: u32,
    /// `manual_review`, `pending` or `failed`.
    pub then: TaskStatus,
    /// Nothing of the attempt ran (its supervisor never started the program): pending again,
    /// whatever `then` says, and not counted against the task's attempts (as
    /// [`TaskAttemptEnd::never_ran`]).
    pub never_ran: bool,
    /// Output the attempt wrote that reached its log (before its daemon was gone).
    pub output_bytes: u64,
    /// Output it wrote after its daemon was gone, which its supervisor read and dropped.
    pub output_dropped: u64,
}

/// How a task taken over as orphaned leaves `running` once its attempt's processes are gone:
/// decided here, the same for every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanSettled {
    /// `interrupted`, or `canceled` if an operator asked for that meanwhile.
    pub status: TaskStatus,
    pub reason: String,
    pub note: String,
    pub error_code: String,
    pub error: String,
    /// The task is finished (`canceled`); `interrupted` is finished by `then`.
    pub finished: bool,
    /// From `interrupted` on to this (the type's `on_interrupt`) in the same commit.
    pub then: Option<TaskStatus>,
}

impl OrphanSettled {
    /// `code`: why its executor is gone (the task's `ending`).
    pub fn decide(code: &str, cancel_requested: bool, then: TaskStatus) -> OrphanSettled {
        let why = match code {
            "daemon_restart" => "the daemon stopped while the attempt ran",
            "lease_expired" => "its executor stopped renewing the lease while the attempt ran",
            _ => "its executor is gone",
        };
        if cancel_requested {
            return OrphanSettled {
                status: TaskStatus::Canceled,
                reason: "canceled".into(),
                note: format!("an operator's cancel; the attempt was interrupted ({code}): {why}"),
                error_code: "canceled".into(),
                error: format!("canceled by an operator; the attempt was interrupted: {why}"),
                finished: true,
                then: None,
            };
        }
        OrphanSettled {
            status: TaskStatus::Interrupted,
            reason: code.to_owned(),
            note: why.to_owned(),
            error_code: code.to_owned(),
            error: format!("interrupted: {why}"),
            finished: false,
            then: Some(then),
        }
    }
}

/// The note (and error) of a task sent to review because its type is no longer declared.
pub fn undeclared_note(task_type: &str) -> String {
    format!("its type {task_type:?} is no longer declared in the configuration")
}

/// A lease renewed by [`Store::renew_task_leases`](crate::Store::renew_task_leases).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewed {
    pub id: String,
    /// An operator asked to cancel it (possibly through another host's API).
    pub cancel_requested: bool,
}

/// What an operator's action on a task found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per operator action and consumed at once"
)]
pub enum TaskAction {
    Done(Task),
    /// It is running: the cancel is recorded, and the runner ends its attempt as `canceled`.
    CancelRequested(Task),
    NotFound,
    /// Not from this status.
    Invalid(TaskStatus),
}

/// Which tasks a listing (or a bulk action) takes; every field given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    pub task_type: Option<String>,
    /// Only those created at or after this time.
    pub created_after: Option<Millis>,
    /// Only those created before this time.
    pub created_before: Option<Millis>,
}

/// A page of a task listing.
#[derive(Debug, Clone)]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for st in TaskStatus::ALL {
            assert_eq!(st.as_str().parse::<TaskStatus>().ok(), Some(st));
        }
        assert!("in_flight".parse::<TaskStatus>().is_err());
    }

    /// Where an attempt's end takes its task, as a table: how it ended, whether a cancel was
    /// asked for, the type's partial-failure review and lock policy, and whether steps were
    /// done → the status it leaves `running` for, what that does to its locks, what follows.
    #[test]
    fn an_attempts_end_decides_its_task() {
        use TaskStatus::*;
        const AT: Millis = 5_000;
        let retry = |release_locks| Then::Retry {
            at: AT,
            release_locks,
        };
        // (outcome, retry_at, cancel_requested, review_partial, has_steps, hold_locks)
        //   → (status, locks, then)
        #[rustfmt::skip]
        let table = [
            ((Succeeded, false, false, false, false, false), (Succeeded, Locks::Release, Then::End)),
            ((Succeeded, false, true,  false, false, false), (Succeeded, Locks::Release, Then::End)),
            ((Failed,    false, false, false, false, false), (Failed,    Locks::Release, Then::End)),
            ((Failed,    true,  false, false, false, false), (Failed,    Locks::Release, retry(true))),
            ((Failed,    true,  false, false, false, true ), (Failed,    Locks::Keep,    retry(false))),
            ((TimedOut,  true,  false, false, false, false), (TimedOut,  Locks::Release, retry(true))),
            ((Interrupted, true, false, false, false, true), (Interrupted, Locks::Keep,  retry(false))),
            // A cancel asked for wins over anything but success, retries included.
            ((Failed,    true,  true,  false, false, true ), (Canceled,  Locks::Release, Then::End)),
            ((TimedOut,  false, true,  false, false, false), (Canceled,  Locks::Release, Then::End)),
            ((Canceled,  false, true,  false, false, false), (Canceled,  Locks::Release, Then::End)),
            // Failed after steps were done: review, not a retry (a timeout is recorded failed).
            ((Failed,    true,  false, true,  true,  true ), (Failed,    Locks::Release, Then::Review)),
            ((TimedOut,  false, false, true,  true,  false), (Failed,    Locks::Release, Then::Review)),
            ((Failed,    true,  false, true,  false, false), (Failed,    Locks::Release, retry(true))),
            ((Failed,    true,  false, false, true,  false), (Failed,    Locks::Release, retry(true))),
            ((Succeeded, false, false, true,  true,  false), (Succeeded, Locks::Release, Then::End)),
        ];
        for ((outcome, retries, cancel, review_partial, has_steps, hold_locks), want) in table {
            let end = TaskAttemptEnd {
                id: "t".into(),
                claim_seq: 1,
                outcome,
                exit_code: None,
                signal: None,
                error_code: None,
                error: None,
                duration_ms: 1,
                output_bytes: 0,
                output_truncated: false,
                killed: false,
                result_summary: None,
                retry_at: retries.then_some(AT),
                hold_locks,
                review_partial,
                redactions: 0,
                never_ran: false,
            };
            let to = TaskEnd::decide(&end, cancel, has_steps);
            let case = format!("{outcome} retry={retries} cancel={cancel} review={review_partial} steps={has_steps} hold={hold_locks}");
            assert_eq!((to.status, to.locks, to.then), want, "{case}");
            assert!(Running.can_become(to.status), "{case}");
            if to.then == Then::Review {
                assert!(to.status.can_become(ManualReview), "{case}");
            }
            assert_eq!(
                to.finished_at(7),
                (!matches!(to.then, Then::Retry { .. })).then_some(7),
                "{case}"
            );
        }
    }

    #[test]
    fn a_cancel_decides_by_status() {
        use TaskStatus::*;
        for status in TaskStatus::ALL {
            let want = match status {
                Running => CancelOf::Request,
                Pending | ManualReview => CancelOf::Now(status),
                other => CancelOf::Invalid(other),
            };
            assert_eq!(CancelOf::decide(status), want, "{status}");
            if let CancelOf::Now(from) = want {
                assert!(from.can_become(Canceled), "{status}");
            }
        }
    }

    #[test]
    fn the_table_has_exactly_the_documented_edges() {
        use TaskStatus::*;
        let allowed = [
            (Pending, Running),
            (Pending, Canceled),
            (Pending, TimedOut),
            (Pending, ManualReview),
            (Running, Succeeded),
            (Running, Failed),
            (Running, TimedOut),
            (Running, Interrupted),
            (Running, Canceled),
            (Failed, Pending),
            (TimedOut, Pending),
            (Interrupted, Pending),
            (Interrupted, Failed),
            (Interrupted, ManualReview),
            (Failed, ManualReview),
            (ManualReview, Pending),
            (ManualReview, Failed),
            (ManualReview, Canceled),
            (ManualReview, Succeeded),
        ];
        for from in TaskStatus::ALL {
            for to in TaskStatus::ALL {
                assert_eq!(
                    from.can_become(to),
                    allowed.contains(&(from, to)),
                    "{from} → {to}"
                );
            }
        }
        assert!(!Succeeded.can_become(Pending), "a success is never re-run");
    }
}
