//! Tasks as the store sees them: the state machine, which the store enforces (an illegal
//! transition is refused with [`StoreError::IllegalTransition`] and is a bug in the caller), and
//! the records that cross the store boundary. The store knows nothing of processes: a task's
//! type, parameters and timing rules are data here; running them is the daemon's business.
//!
//! [`StoreError::IllegalTransition`]: crate::StoreError::IllegalTransition

use std::fmt;
use std::str::FromStr;

use crate::model::Millis;

/// Where a task is in its life.
///
/// ```text
///  pending ──▶ running ──▶ succeeded | failed | timed_out | interrupted | canceled
///  pending ──▶ canceled | timed_out (queue timeout)
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
            (Pending, Running | Canceled | TimedOut)
                | (
                    Running,
                    Succeeded | Failed | TimedOut | Interrupted | Canceled
                )
                | (Failed | TimedOut | Interrupted, Pending)
                | (Interrupted, Failed | ManualReview)
                | (Failed, ManualReview)
                | (ManualReview, Pending | Failed | Canceled)
        )
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
}

impl From<&str> for ClaimType {
    /// A type without a quota of its own.
    fn from(name: &str) -> Self {
        ClaimType {
            name: name.to_owned(),
            concurrency: None,
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

/// The process that runs an attempt, recorded once it started, so that after a crash it can
/// be found again — and a reused pid is never taken for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptProcess {
    /// The process group (the leader's pid).
    pub pgid: i32,
    /// The leader's start time (`/proc/PID/stat` field 22, clock ticks after boot).
    pub leader_start: u64,
    /// The kernel's boot id when it started.
    pub boot_id: String,
}

/// One held resource lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldLock {
    pub name: String,
    pub task_id: String,
    pub task_type: String,
    /// `running`, or `pending` while it keeps its locks through a retry's backoff.
    pub task_status: TaskStatus,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTransition {
    pub from: Option<TaskStatus>,
    pub to: TaskStatus,
    pub attempt: u32,
    pub at: Millis,
    pub reason: String,
    pub note: Option<String>,
}

/// A task whose attempt a dead daemon left running, as recovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    pub id: String,
    pub task_type: String,
    /// The attempt that was cut short.
    pub attempt: u32,
    /// Its process, if it was recorded.
    pub process: Option<AttemptProcess>,
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

    #[test]
    fn the_table_has_exactly_the_documented_edges() {
        use TaskStatus::*;
        let allowed = [
            (Pending, Running),
            (Pending, Canceled),
            (Pending, TimedOut),
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
