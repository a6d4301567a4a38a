//! A task's status changes, written once for both backends over [`Sql`]: the state machine's
//! permission, the row's UPDATE, the locks a change gives up, and the transition log's row —
//! and the operations that are the same statements in both dialects (an attempt's start and
//! end, an operator's cancel, retry and decision, settling an orphan). What
//! each change is, is decided in `transitions.rs`/`tasks.rs` (`TaskEnd::decide`,
//! `OrphanSettled::decide`, …); this is how it is written.

use crate::changes;
use crate::clock::Millis;
use crate::error::{Result, StoreError};
use crate::model::clip_error;
use crate::sql::{Sql, Value};
use crate::tasks::{
    CancelOf, ClaimedTask, Executor, Locks, NewTask, OrphanEnd, OrphanSettled, Task, TaskAction,
    TaskAttemptEnd, TaskEnd, TaskInsert, TaskStatus, Then,
};

/// A backend's connection that reads whole tasks (the columns and their stored forms are the
/// backend's: `row_to_task`).
pub(crate) trait TaskRows: Sql {
    /// The task, its row locked until the transaction ends where the backend has row locks:
    /// what an operator's action decides on cannot change before it writes.
    async fn task_for_update(&self, id: &str) -> Result<Option<Task>>;

    /// The task as it is now.
    async fn task(&self, id: &str) -> Result<Option<Task>>;
}

/// Submit a task. With an idempotency key, a task already submitted under the same scope and
/// key is answered instead: `Existing` if its digest is the same, `Conflict` otherwise. Two
/// hosts racing on one key create one task: on PostgreSQL the loser's insert waits for the
/// winner's commit and then inserts nothing.
pub(crate) async fn submit(db: &impl TaskRows, new: &NewTask, now: Millis) -> Result<TaskInsert> {
    if insert(db, new, now).await? {
        let task = db.task(&new.id).await?.ok_or_else(|| vanished(&new.id))?;
        return Ok(TaskInsert::Created(task));
    }
    let Some(key) = &new.idempotency_key else {
        return Err(StoreError::Database(format!(
            "task {} was not inserted, and it has no key",
            new.id
        )));
    };
    let found = db
        .row(
            "SELECT id, digest = $3 FROM tasks WHERE scope = $1 AND idempotency_key = $2",
            &[(&new.scope).into(), key.into(), (&new.digest).into()],
        )
        .await?;
    let Some(found) = found else {
        // It was there for the insert and gone for this read: deleted in between. Running the
        // submission again settles it.
        return Err(StoreError::Contention(format!(
            "the task holding key {key} in scope {} vanished",
            new.scope
        )));
    };
    let id = found.text(0)?;
    if !found.bool(1)? {
        return Ok(TaskInsert::Conflict { existing_id: id });
    }
    let task = db.task(&id).await?.ok_or_else(|| vanished(&id))?;
    Ok(TaskInsert::Existing(task))
}

/// Insert a submitted task's row and its first log entry: due at its `not_before` (or now),
/// its deadlines counted from now, its locks stored as a JSON array. `false`, and nothing
/// written, when its (scope, key) is taken (on PostgreSQL after waiting for a concurrent
/// inserter's outcome).
async fn insert(db: &impl Sql, new: &NewTask, now: Millis) -> Result<bool> {
    let due = new.not_before.map_or(now, |nb| nb.max(now));
    let queue_deadline = new.queue_timeout_ms.map(|t| now + t);
    let retry_deadline = new.retry_deadline_ms.map(|t| now + t);
    let locks = if new.locks.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&new.locks).map_err(|e| StoreError::Database(e.to_string()))?)
    };
    let inserted = db
        .exec(
            "INSERT INTO tasks (id, task_type, scope, idempotency_key, params, digest, status, \
             max_attempts, created_at, updated_at, next_run_at, not_before, queue_deadline, \
             retry_deadline, log_seq, locks) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $8, $9, $10, $11, $12, 1, $13) \
             ON CONFLICT (scope, idempotency_key) DO NOTHING",
            &[
                (&new.id).into(),
                (&new.task_type).into(),
                (&new.scope).into(),
                (&new.idempotency_key).into(),
                (&new.params).into(),
                (&new.digest).into(),
                new.max_attempts.into(),
                now.into(),
                due.into(),
                new.not_before.into(),
                queue_deadline.into(),
                retry_deadline.into(),
                (&locks).into(),
            ],
        )
        .await?;
    if inserted == 0 {
        return Ok(false);
    }
    let (to, first) = (TaskStatus::Pending, (1, 0));
    changes::log(db, &new.id, None, to, first, now, "submitted", None).await?;
    Ok(true)
}

/// End a pending task whose time ran out, as `timed_out`: `queue_timeout` if it never started
/// by its queue deadline, else `retry_deadline` (its next attempt could not start in time).
pub(crate) async fn time_out(
    db: &impl Sql,
    id: &str,
    (attempts, queue_deadline): (u32, Option<Millis>),
    now: Millis,
) -> Result<()> {
    let queued = attempts == 0 && queue_deadline.is_some_and(|d| d <= now);
    let (code, text) = if queued {
        ("queue_timeout", "not started before its queue timeout")
    } else {
        (
            "retry_deadline",
            "its retry deadline passed before the next attempt could start",
        )
    };
    change(
        db,
        id,
        TaskStatus::Pending,
        TaskStatus::TimedOut,
        now,
        code,
        None,
        "error_code = $3, error = $4, next_run_at = NULL, finished_at = $2",
        &[code.into(), text.into()],
    )
    .await
}

/// Change a task's status from `from` to `to`, with the state machine's permission, and log it.
/// `set` is the rest of the UPDATE's SET clause: it may use `$2` (now) and `$3`, `$4`, … (the
/// values of `extra`, in order). A task that leaves `running` for anything but `pending` gives
/// its locks up here (see [`Locks`]).
#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
pub(crate) async fn change(
    db: &impl Sql,
    id: &str,
    from: TaskStatus,
    to: TaskStatus,
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[Value<'_>],
) -> Result<()> {
    change_with(
        db,
        id,
        (from, to, Locks::Release),
        now,
        reason,
        note,
        set,
        extra,
    )
    .await
}

/// [`change`], with the choice of keeping the locks (the first half of a retry that holds
/// them).
#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
pub(crate) async fn change_with(
    db: &impl Sql,
    id: &str,
    (from, to, locks): (TaskStatus, TaskStatus, Locks),
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[Value<'_>],
) -> Result<()> {
    if !from.can_become(to) {
        return Err(StoreError::IllegalTransition {
            id: id.to_owned(),
            from,
            to,
        });
    }
    let comma = if set.is_empty() { "" } else { ", " };
    // The statuses are written into the statement, not bound: each (from, to, set) is one
    // prepared statement per connection, planned for the partial indexes on status (SQLite
    // would re-prepare a statement whose bound value could change its plan, every call).
    let sql = format!(
        "UPDATE tasks SET status = '{to}', updated_at = $2, log_seq = log_seq + 1{comma}{set} \
         WHERE id = $1 AND status = '{from}' \
         RETURNING log_seq, attempts, locks IS NOT NULL",
        to = to.as_str(),
        from = from.as_str(),
    );
    let mut values = vec![Value::Text(id), Value::Int(now)];
    values.extend_from_slice(extra);
    let step = db.row(&sql, &values).await?.ok_or_else(|| {
        StoreError::Database(format!(
            "task {id} was not {from} when it was to become {to}"
        ))
    })?;
    if step.bool(2)? && locks.released_by(to) {
        release_locks(db, id).await?;
    }
    let seq_attempt = (step.int(0)?, step.int(1)?);
    changes::log(db, id, Some(from), to, seq_attempt, now, reason, note).await
}

/// Give up every lock the task holds.
pub(crate) async fn release_locks(db: &impl Sql, id: &str) -> Result<()> {
    db.exec(
        "DELETE FROM task_locks WHERE task_id = $1",
        &[Value::Text(id)],
    )
    .await?;
    Ok(())
}

/// An attempt of task `id` that never ran is not counted: its budget grows by one.
async fn uncount<S: Sql>(db: &S, id: &str) -> Result<()> {
    db.exec(
        "UPDATE tasks SET max_attempts = max_attempts + 1 WHERE id = $1",
        &[id.into()],
    )
    .await?;
    Ok(())
}

/// Settle a task taken over as orphaned, once its attempt's processes are gone: its attempt is
/// closed as interrupted and the task goes to `canceled` (a cancel was requested) or to
/// `interrupted` and on to `end.then`. Fenced by the take-over's claim.
pub(crate) async fn settle_orphan<S: Sql>(
    db: &S,
    end: &OrphanEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let current = db
        .row(
            &format!(
                "SELECT attempts, ending, cancel_requested FROM tasks \
                 WHERE id = $1 AND status = 'running' AND claim_seq = $2{}",
                S::FOR_UPDATE
            ),
            &[end.id.as_str().into(), end.claim_seq.into()],
        )
        .await?;
    let Some(current) = current else {
        return Ok(None);
    };
    let Some(code) = current.opt_text(1)? else {
        return Ok(None);
    };
    let attempt: i64 = current.int(0)?;
    let then = if end.never_ran {
        uncount(db, &end.id).await?;
        TaskStatus::Pending
    } else {
        end.then
    };
    let settled = OrphanSettled::decide(&code, current.bool(2)?, then);
    let attempt_error = match end.output_dropped {
        0 => settled.error.clone(),
        n => format!(
            "{}; {n} bytes of output written after its daemon was gone were dropped",
            settled.error
        ),
    };
    db.exec(
        "UPDATE task_attempts SET finished_at = $3, outcome = 'interrupted', \
         error_code = $4, error = $5, duration_ms = $3 - started_at, output_bytes = $6, \
         output_truncated = $7 \
         WHERE task_id = $1 AND number = $2 AND finished_at IS NULL",
        &[
            end.id.as_str().into(),
            attempt.into(),
            now.into(),
            code.as_str().into(),
            (&attempt_error).into(),
            count(end.output_bytes.saturating_add(end.output_dropped)),
            (end.output_dropped > 0).into(),
        ],
    )
    .await?;
    change(
        db,
        &end.id,
        TaskStatus::Running,
        settled.status,
        now,
        &settled.reason,
        Some(&settled.note),
        "lease_until = NULL, ending = NULL, error_code = $3, error = $4, \
         finished_at = CASE WHEN $5 THEN $2 ELSE finished_at END",
        &[
            (&settled.error_code).into(),
            (&settled.error).into(),
            settled.finished.into(),
        ],
    )
    .await?;
    let Some(then) = settled.then else {
        return Ok(Some(settled.status));
    };
    let set = match then {
        TaskStatus::Pending => "next_run_at = $2, finished_at = NULL",
        _ => "next_run_at = NULL, finished_at = COALESCE(finished_at, $2)",
    };
    change(
        db,
        &end.id,
        TaskStatus::Interrupted,
        then,
        now,
        "on_interrupt",
        Some("the type's on_interrupt"),
        set,
        &[],
    )
    .await?;
    Ok(Some(then))
}

/// Record how an attempt ended. Fenced: only while the task is running under this claim
/// (`None` otherwise; only the attempt row is then written). A retry is two logged changes:
/// `running → failed | timed_out` with the attempt's reason, then `→ pending`; it keeps the
/// task's locks only with `hold_locks`. A failure after a step was reported done is a partial
/// failure: with `review_partial` it goes `running → failed → manual_review`
/// (`partial_failure`) and is not retried, since redoing finished steps may not be safe. A cancel
/// requested before this wins over every outcome but success (see [`TaskEnd::decide`]).
pub(crate) async fn finish<S: Sql>(
    db: &S,
    end: &TaskAttemptEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let current = db
        .row(
            &format!(
                "SELECT status, claim_seq, attempts, cancel_requested FROM tasks \
                 WHERE id = $1{}",
                S::FOR_UPDATE
            ),
            &[end.id.as_str().into()],
        )
        .await?;
    let Some(current) = current else {
        return Ok(None);
    };
    let status = current.opt_text(0)?;
    let claim_seq: u32 = current.int(1)?;
    let attempt: i64 = current.int(2)?;
    let cancel_requested = current.bool(3)?;
    // Fenced before anything is written: a late end (its claim taken back, the task since
    // claimed again, perhaps by another host) must not close the attempt that runs now.
    if status.as_deref() != Some(TaskStatus::Running.as_str()) || claim_seq != end.claim_seq {
        return Ok(None);
    }
    let error = end.error.as_deref().map(clip_error);
    let summary = end.result_summary.as_deref().map(clip_error);
    if end.never_ran {
        uncount(db, &end.id).await?;
    }
    db.exec(
        "UPDATE task_attempts SET finished_at = $3, outcome = $4, exit_code = $5, signal = $6, \
         error_code = $7, error = $8, duration_ms = $9, output_bytes = $10, \
         output_truncated = $11, killed = $12, redactions = $13 \
         WHERE task_id = $1 AND number = $2 AND finished_at IS NULL",
        &[
            end.id.as_str().into(),
            attempt.into(),
            now.into(),
            end.outcome.as_str().into(),
            end.exit_code.into(),
            end.signal.into(),
            (&end.error_code).into(),
            (&error).into(),
            end.duration_ms.into(),
            count(end.output_bytes),
            end.output_truncated.into(),
            end.killed.into(),
            count(end.redactions),
        ],
    )
    .await?;
    let has_steps = end.review_partial
        && db
            .row(
                "SELECT 1 FROM task_steps WHERE task_id = $1 LIMIT 1",
                &[end.id.as_str().into()],
            )
            .await?
            .is_some();
    let to = TaskEnd::decide(end, cancel_requested, has_steps);
    let error = to.error.as_deref().map(clip_error);
    let finished = to.finished_at(now);
    change_with(
        db,
        &end.id,
        (TaskStatus::Running, to.status, to.locks),
        now,
        &to.reason,
        to.note.as_deref(),
        "lease_until = NULL, error_code = $3, error = $4, exit_code = $5, signal = $6, \
         result_summary = COALESCE($7, result_summary), finished_at = $8",
        &[
            (&to.error_code).into(),
            (&error).into(),
            end.exit_code.into(),
            end.signal.into(),
            (&summary).into(),
            finished.into(),
        ],
    )
    .await?;
    let (at, release) = match to.then {
        Then::End => return Ok(Some(to.status)),
        Then::Review => {
            let (reason, note) = Then::REVIEW;
            change(
                db,
                &end.id,
                to.status,
                TaskStatus::ManualReview,
                now,
                reason,
                Some(note),
                "error_code = $3",
                &[reason.into()],
            )
            .await?;
            return Ok(Some(TaskStatus::ManualReview));
        }
        Then::Retry { at, release_locks } => (at, release_locks),
    };
    if release {
        release_locks(db, &end.id).await?;
    }
    let max_attempts: u32 = db
        .row(
            "SELECT max_attempts FROM tasks WHERE id = $1",
            &[end.id.as_str().into()],
        )
        .await?
        .ok_or_else(|| vanished(&end.id))?
        .int(0)?;
    let note = format!("attempt {} of {max_attempts}", attempt + 1);
    change(
        db,
        &end.id,
        to.status,
        TaskStatus::Pending,
        now,
        "retry",
        Some(&note),
        "next_run_at = $3",
        &[at.into()],
    )
    .await?;
    Ok(Some(TaskStatus::Pending))
}

/// A count as the schema keeps it (a signed 64-bit integer; none comes near its limit).
fn count(n: u64) -> Value<'static> {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Start a claimed task's next attempt: `pending → running` under a new claim and lease, and
/// the attempt's row. The claim pass has taken its locks.
pub(crate) async fn start(
    db: &impl Sql,
    id: &str,
    now: Millis,
    (lease_ms, executor): (i64, &Executor),
    kill_grace_ms: i64,
) -> Result<ClaimedTask> {
    change(
        db,
        id,
        TaskStatus::Pending,
        TaskStatus::Running,
        now,
        "started",
        None,
        "attempts = attempts + 1, claim_seq = claim_seq + 1, lease_until = $3, \
         executor_id = $4, executor_host = $5, started_at = COALESCE(started_at, $2), \
         next_run_at = NULL",
        &[
            (now + lease_ms).into(),
            executor.id.as_str().into(),
            executor.host.as_str().into(),
        ],
    )
    .await?;
    let r = db
        .row(
            "SELECT id, task_type, params, claim_seq, attempts, max_attempts, created_at, \
             retry_deadline, idempotency_key FROM tasks WHERE id = $1",
            &[id.into()],
        )
        .await?
        .ok_or_else(|| vanished(id))?;
    let task = ClaimedTask {
        id: r.text(0)?,
        task_type: r.text(1)?,
        params: r.text(2)?,
        claim_seq: r.int(3)?,
        attempt: r.int(4)?,
        max_attempts: r.int(5)?,
        created_at: r.int(6)?,
        started_at: now,
        retry_deadline: r.opt_int(7)?,
        idempotency_key: r.opt_text(8)?,
    };
    db.exec(
        "INSERT INTO task_attempts (task_id, number, started_at, executor_id, host, \
         kill_grace_ms) VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            id.into(),
            task.attempt.into(),
            now.into(),
            executor.id.as_str().into(),
            executor.host.as_str().into(),
            kill_grace_ms.into(),
        ],
    )
    .await?;
    Ok(task)
}

/// An operator's cancel: a pending or `manual_review` task is canceled at once; a running one
/// is marked, and its runner ends the attempt as `canceled`.
pub(crate) async fn cancel(db: &impl TaskRows, id: &str, now: Millis) -> Result<TaskAction> {
    let Some(task) = db.task_for_update(id).await? else {
        return Ok(TaskAction::NotFound);
    };
    match CancelOf::decide(task.status) {
        CancelOf::Request => {
            db.exec(
                "UPDATE tasks SET cancel_requested = $2 WHERE id = $1",
                &[id.into(), true.into()],
            )
            .await?;
            let task = db.task(id).await?.ok_or_else(|| vanished(id))?;
            return Ok(TaskAction::CancelRequested(task));
        }
        CancelOf::Now(from) => {
            change(
                db,
                id,
                from,
                TaskStatus::Canceled,
                now,
                "canceled",
                None,
                "next_run_at = NULL, finished_at = $2",
                &[],
            )
            .await?
        }
        CancelOf::Invalid(other) => return Ok(TaskAction::Invalid(other)),
    }
    done(db, id).await
}

/// An operator's retry: from `failed`, `timed_out`, `interrupted` or `manual_review`, pending
/// again at once with `extra_attempts` more attempts. A deadline that has passed no longer
/// applies (the operator's decision overrides it).
pub(crate) async fn retry(
    db: &impl TaskRows,
    id: &str,
    extra_attempts: u32,
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = db.task_for_update(id).await? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.retryable() {
        return Ok(TaskAction::Invalid(task.status));
    }
    let max = task.attempts.saturating_add(extra_attempts.max(1));
    change(
        db,
        id,
        task.status,
        TaskStatus::Pending,
        now,
        "retried",
        Some("an operator's retry"),
        "next_run_at = $2, max_attempts = $3, finished_at = NULL, cancel_requested = $4, \
         retry_deadline = CASE WHEN retry_deadline <= $2 THEN NULL ELSE retry_deadline END, \
         queue_deadline = CASE WHEN queue_deadline <= $2 THEN NULL ELSE queue_deadline END",
        &[max.into(), false.into()],
    )
    .await?;
    done(db, id).await
}

/// Move a task to `to` for `reason` (an interrupted task's policy, an operator's decision),
/// if the state machine allows it from where it is.
pub(crate) async fn decide(
    db: &impl TaskRows,
    id: &str,
    (to, reason, note): (TaskStatus, &str, Option<&str>),
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = db.task_for_update(id).await? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.can_become(to) || to == TaskStatus::Running {
        return Ok(TaskAction::Invalid(task.status));
    }
    let set = match to {
        TaskStatus::Pending => "next_run_at = $2, finished_at = NULL",
        _ => "next_run_at = NULL, finished_at = COALESCE(finished_at, $2)",
    };
    change(db, id, task.status, to, now, reason, note, set, &[]).await?;
    done(db, id).await
}

async fn done(db: &impl TaskRows, id: &str) -> Result<TaskAction> {
    db.task(id)
        .await?
        .map(TaskAction::Done)
        .ok_or_else(|| vanished(id))
}

fn vanished(id: &str) -> StoreError {
    StoreError::Database(format!("task {id} vanished"))
}
