//! The SQL behind tasks on PostgreSQL: the same rules as `sqlite/tasks.rs`, for several hosts
//! writing one database at once. Every status change goes through [`change`], which checks the
//! state machine ([`TaskStatus::can_become`]), fences on the current status, bumps the log
//! sequence and appends the transition, all in the caller's transaction.
//!
//! **Invariant:** whatever several hosts do concurrently, a task changes only as the state
//! machine allows, once per decision, and is run by one attempt at a time. SQLite had a single
//! writer; here every store call is its own READ COMMITTED transaction, so:
//! - every read-modify-write first locks the task rows it decides on (`FOR UPDATE`, several rows
//!   in id order) and re-checks them under the lock;
//! - task claims take the `task_claim_gate` row first, so quotas, lock order and lock
//!   reservations are decided by one claim at a time across every host (lock rows are taken all
//!   or nothing, as in SQLite);
//! - two hosts submitting one (scope, key) race on the unique constraint, which lets exactly one
//!   insert win (`ON CONFLICT DO NOTHING` waits for the other's outcome; no error is provoked).

use std::collections::{HashMap, HashSet};

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{exec, get as column, map_err, one, row, rows, Tx};
use crate::error::{Result, StoreError};
use crate::model::{clip_error, Millis};
use crate::tasks::{
    AttemptProcess, ClaimType, Claimed, ClaimedTask, Executor, HeldLock, NewTask, OrphanEnd,
    OrphanSettled, Orphaned, Renewed, StepRecord, Task, TaskAction, TaskAttempt, TaskAttemptEnd,
    TaskEnd, TaskInsert, TaskPage, TaskStatus, TaskStep, TaskTransition, WaitReason,
};
use crate::tasks::{CancelOf, Locks, Then};

/// A statement parameter.
type Param<'a> = &'a (dyn ToSql + Sync);

/// A task's columns, as [`row_to_task`] reads them. Step names tie-break in byte order, as in
/// SQLite, whatever the database's collation.
const COLUMNS: &str = "id, task_type, scope, idempotency_key, params, status, attempts, \
     max_attempts, created_at, updated_at, started_at, finished_at, next_run_at, not_before, \
     queue_deadline, retry_deadline, lease_until, executor_id, error_code, error, exit_code, \
     signal, result_summary, cancel_requested, locks, \
     ARRAY(SELECT name FROM task_steps WHERE task_steps.task_id = tasks.id \
           ORDER BY at, name COLLATE \"C\") AS completed_steps, ending";

/// How many due tasks one claim looks at, at most, when locks and quotas make it pass some
/// over (the rest wait for the next claim).
const CLAIM_SCAN: usize = 1024;

/// Submit a task. With an idempotency key, a task already submitted under the same scope and
/// key is answered instead: `Existing` if its digest is the same, `Conflict` otherwise. Two
/// hosts racing on one key create one task: the loser's insert waits for the winner's commit
/// and then inserts nothing.
pub(crate) async fn insert(tx: &Tx<'_>, new: &NewTask, now: Millis) -> Result<TaskInsert> {
    let due = new.not_before.map_or(now, |nb| nb.max(now));
    let queue_deadline = new.queue_timeout_ms.map(|t| now + t);
    let retry_deadline = new.retry_deadline_ms.map(|t| now + t);
    let locks = if new.locks.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&new.locks).map_err(|e| StoreError::Database(e.to_string()))?)
    };
    let max_attempts = i64::from(new.max_attempts);
    let inserted = row(
        tx,
        "INSERT INTO tasks (id, task_type, scope, idempotency_key, params, digest, status, \
         max_attempts, created_at, updated_at, next_run_at, not_before, queue_deadline, \
         retry_deadline, log_seq, locks) \
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $8, $9, $10, $11, $12, 1, $13) \
         ON CONFLICT (scope, idempotency_key) DO NOTHING RETURNING id",
        &[
            &new.id,
            &new.task_type,
            &new.scope,
            &new.idempotency_key,
            &new.params,
            &new.digest,
            &max_attempts,
            &now,
            &due,
            &new.not_before,
            &queue_deadline,
            &retry_deadline,
            &locks,
        ],
    )
    .await?;
    if inserted.is_none() {
        return known(tx, new).await;
    }
    log(
        tx,
        &new.id,
        None,
        TaskStatus::Pending,
        (1, 0),
        now,
        "submitted",
        None,
    )
    .await?;
    get(tx, &new.id)
        .await?
        .map(TaskInsert::Created)
        .ok_or_else(|| StoreError::Database("inserted task vanished".into()))
}

/// The answer to a submission whose (scope, key) is taken: the task holding it, if it was
/// submitted with the same digest, or a conflict.
async fn known(tx: &Tx<'_>, new: &NewTask) -> Result<TaskInsert> {
    let Some(key) = &new.idempotency_key else {
        return Err(StoreError::Database(format!(
            "task {} was not inserted, and it has no key",
            new.id
        )));
    };
    let Some(found) = row(
        tx,
        "SELECT id, digest FROM tasks WHERE scope = $1 AND idempotency_key = $2",
        &[&new.scope, key],
    )
    .await?
    else {
        // It was there for the insert and gone for this read: deleted in between. Running the
        // submission again settles it.
        return Err(StoreError::Contention(format!(
            "the task holding key {key} in scope {} vanished",
            new.scope
        )));
    };
    let id: String = column(&found, "id")?;
    let digest: Vec<u8> = column(&found, "digest")?;
    if digest != new.digest {
        return Ok(TaskInsert::Conflict { existing_id: id });
    }
    get(tx, &id)
        .await?
        .map(TaskInsert::Existing)
        .ok_or_else(|| StoreError::Database(format!("task {id} vanished")))
}

/// Change a task's status from `from` to `to`, with the state machine's permission, and log it.
/// `set` is the rest of the UPDATE's SET clause: it may use `$2` (now) and `$3`, `$4`, … (the
/// values of `extra`, in order). A task that leaves `running` for anything but `pending` gives
/// its locks up here (see [`Locks`]). The caller has locked the task's row and seen it `from`.
#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
async fn change(
    tx: &Tx<'_>,
    id: &str,
    from: TaskStatus,
    to: TaskStatus,
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[Param<'_>],
) -> Result<()> {
    change_with(
        tx,
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

#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
async fn change_with(
    tx: &Tx<'_>,
    id: &str,
    (from, to, locks): (TaskStatus, TaskStatus, Locks),
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[Param<'_>],
) -> Result<()> {
    if !from.can_become(to) {
        return Err(StoreError::IllegalTransition {
            id: id.to_owned(),
            from,
            to,
        });
    }
    let comma = if set.is_empty() { "" } else { ", " };
    // The statuses are written into the statement, not bound, as in SQLite: each (from, to,
    // set) is one prepared statement per connection, planned for its partial indexes.
    let sql = format!(
        "UPDATE tasks SET status = '{to}', updated_at = $2, log_seq = log_seq + 1{comma}{set} \
         WHERE id = $1 AND status = '{from}' \
         RETURNING log_seq, attempts, locks IS NOT NULL AS has_locks",
        to = to.as_str(),
        from = from.as_str(),
    );
    let mut values: Vec<Param<'_>> = vec![&id, &now];
    values.extend(extra.iter().copied());
    let step = row(tx, &sql, &values).await?.ok_or_else(|| {
        StoreError::Database(format!(
            "task {id} was not {from} when it was to become {to}"
        ))
    })?;
    let seq: i64 = column(&step, "log_seq")?;
    let attempt: i64 = column(&step, "attempts")?;
    let has_locks: bool = column(&step, "has_locks")?;
    if has_locks && locks.released_by(to) {
        release_locks(tx, id).await?;
    }
    log(tx, id, Some(from), to, (seq, attempt), now, reason, note).await
}

async fn release_locks(tx: &Tx<'_>, id: &str) -> Result<()> {
    exec(tx, "DELETE FROM task_locks WHERE task_id = $1", &[&id]).await?;
    Ok(())
}

#[allow(
    clippy::too_many_arguments,
    reason = "one row of the log, written in one place"
)]
async fn log(
    tx: &Tx<'_>,
    id: &str,
    from: Option<TaskStatus>,
    to: TaskStatus,
    (seq, attempt): (i64, i64),
    at: Millis,
    reason: &str,
    note: Option<&str>,
) -> Result<()> {
    exec(
        tx,
        "INSERT INTO task_transitions (task_id, seq, from_status, to_status, attempt, at, \
         reason, note) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &id,
            &seq,
            &from.map(TaskStatus::as_str),
            &to.as_str(),
            &attempt,
            &at,
            &reason,
            &note,
        ],
    )
    .await?;
    Ok(())
}

/// End tasks whose time ran out while pending, as `timed_out`: never started by their queue
/// deadline (`queue_timeout`), or the next attempt not started by the retry deadline
/// (`retry_deadline`). At most `limit` of each; returns how many.
pub(crate) async fn expire(tx: &Tx<'_>, now: Millis, limit: u32) -> Result<u64> {
    // Two indexed reads, not one OR over the table: a claim runs this every time.
    let limit = i64::from(limit);
    let mut due: Vec<String> = Vec::new();
    for sql in [
        "SELECT id FROM tasks WHERE status = 'pending' AND attempts = 0 \
         AND queue_deadline IS NOT NULL AND queue_deadline <= $1 LIMIT $2",
        "SELECT id FROM tasks WHERE status = 'pending' \
         AND retry_deadline IS NOT NULL AND retry_deadline <= $1 LIMIT $2",
    ] {
        for r in rows(tx, sql, &[&now, &limit]).await? {
            let id: String = column(&r, "id")?;
            if !due.contains(&id) {
                due.push(id);
            }
        }
    }
    if due.is_empty() {
        return Ok(0);
    }
    // Lock them (in id order), keeping those another transaction did not take out of the
    // running meanwhile: a host's claim, an operator's retry or cancel.
    let locked = rows(
        tx,
        "SELECT id, attempts, queue_deadline FROM tasks WHERE id = ANY($1::text[]) \
         AND status = 'pending' \
         AND ((attempts = 0 AND queue_deadline <= $2) OR retry_deadline <= $2) \
         ORDER BY id FOR UPDATE",
        &[&due, &now],
    )
    .await?;
    for r in &locked {
        let id: String = column(r, "id")?;
        let attempts: i64 = column(r, "attempts")?;
        let queue_deadline: Option<Millis> = column(r, "queue_deadline")?;
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
            tx,
            &id,
            TaskStatus::Pending,
            TaskStatus::TimedOut,
            now,
            code,
            None,
            "error_code = $3, error = $4, next_run_at = NULL, finished_at = $2",
            &[&code, &text],
        )
        .await?;
    }
    Ok(locked.len() as u64)
}

/// Claim up to `limit` due pending tasks of the given types (oldest due first, submission order
/// among equals) for one attempt each: `running`, attempt counted and recorded, leased.
///
/// A task whose type's `concurrency` is used up, or that cannot take **all** its locks at once,
/// is passed over and stays pending (all-or-nothing, so no two tasks each hold a lock the other
/// waits for). The locks a passed-over task wants are reserved for the rest of the pass, so a
/// later task never takes a lock ahead of an earlier one: waiting tasks start in order.
///
/// Claims on every host take the claim gate first, so they decide one at a time, as SQLite's
/// single writer did: a type's running count and the lock table change under a claim only by
/// tasks ending (which frees quota and locks, never takes them).
pub(crate) async fn claim(
    tx: &Tx<'_>,
    now: Millis,
    limit: u32,
    types: &[ClaimType],
    lease_ms: i64,
    executor: &Executor,
) -> Result<Claimed> {
    // The gate before anything is locked: a claim never waits for the gate while it holds a
    // task row another claim may want.
    exec(
        tx,
        "SELECT name FROM task_claim_gate WHERE name = 'claim' FOR UPDATE",
        &[],
    )
    .await?;
    expire(tx, now, 256).await?;
    let mut out = Claimed::default();
    if limit == 0 || types.is_empty() {
        return Ok(out);
    }
    let names: Vec<String> = types.iter().map(|t| t.name.clone()).collect();
    let mut running = if types.iter().any(|t| t.concurrency.is_some()) {
        running_by_type(tx).await?
    } else {
        HashMap::new()
    };
    // Due tasks are read a chunk at a time from a portal, like SQLite's stepped rows: a claim
    // that takes the first few due tasks does not read the rest of the backlog.
    let scan = tx
        .prepare_cached(
            "SELECT id, task_type, locks FROM tasks WHERE status = 'pending' \
             AND next_run_at <= $1 AND task_type = ANY($2::text[]) \
             ORDER BY next_run_at, id LIMIT $3",
        )
        .await
        .map_err(map_err)?;
    let scan_limit = CLAIM_SCAN as i64;
    let portal = tx
        .bind(&scan, &[&now, &names, &scan_limit])
        .await
        .map_err(map_err)?;
    let chunk = limit.saturating_add(16).min(CLAIM_SCAN as u32) as i32;
    let mut reserved: HashSet<String> = HashSet::new();
    let mut take: Vec<(String, Vec<String>, i64)> = Vec::new();
    let mut scanned = 0;
    'scan: loop {
        let batch = tx.query_portal(&portal, chunk).await.map_err(map_err)?;
        let exhausted = batch.len() < chunk as usize;
        for r in &batch {
            scanned += 1;
            let id: String = column(r, "id")?;
            let task_type: String = column(r, "task_type")?;
            let locks: Option<String> = column(r, "locks")?;
            let kind = types.iter().find(|t| t.name == task_type);
            let quota = kind.and_then(|t| t.concurrency);
            let kill_grace_ms =
                kind.map_or(crate::tasks::DEFAULT_KILL_GRACE_MS, |t| t.kill_grace_ms);
            let busy = running.get(&task_type).copied().unwrap_or(0);
            if quota.is_some_and(|q| busy >= q) {
                out.waiting.push((task_type, WaitReason::Quota));
            } else {
                let locks: Vec<String> = match locks {
                    Some(text) => serde_json::from_str(&text)
                        .map_err(|e| StoreError::Database(format!("locks of task {id}: {e}")))?,
                    None => Vec::new(),
                };
                if !locks.is_empty() && !can_lock(tx, &id, &locks, &reserved).await? {
                    reserved.extend(locks);
                    out.waiting.push((task_type, WaitReason::Lock));
                } else {
                    reserved.extend(locks.iter().cloned());
                    *running.entry(task_type).or_insert(0) += 1;
                    take.push((id, locks, kill_grace_ms));
                    if take.len() as u32 >= limit {
                        break 'scan;
                    }
                }
            }
            if scanned >= CLAIM_SCAN {
                break 'scan;
            }
        }
        if exhausted {
            break;
        }
    }
    drop(portal);
    if take.is_empty() {
        return Ok(out);
    }
    // Lock the chosen tasks (in id order) and keep those still pending and due: an operator or
    // a deadline (not a claim: the gate keeps those out) may have ended one since the scan.
    // Passing one over only leaves its quota slot and locks unused until the next claim.
    let ids: Vec<String> = take.iter().map(|(id, ..)| id.clone()).collect();
    let still: HashSet<String> = rows(
        tx,
        "SELECT id FROM tasks WHERE id = ANY($1::text[]) AND status = 'pending' \
         AND next_run_at <= $2 ORDER BY id FOR UPDATE",
        &[&ids, &now],
    )
    .await?
    .iter()
    .map(|r| column(r, "id"))
    .collect::<Result<_>>()?;
    for (id, locks, kill_grace_ms) in take {
        if !still.contains(&id) {
            continue;
        }
        if !locks.is_empty() {
            // Free, or held by this task already (kept through a retry's backoff): no other
            // claim can take one meanwhile.
            exec(
                tx,
                "INSERT INTO task_locks (name, task_id, since) \
                 SELECT name, $2, $3 FROM unnest($1::text[]) AS wanted(name) \
                 ON CONFLICT (name) DO NOTHING",
                &[&locks, &id, &now],
            )
            .await?;
        }
        out.tasks
            .push(start(tx, &id, now, lease_ms, executor, kill_grace_ms).await?);
    }
    Ok(out)
}

/// Running tasks by type.
async fn running_by_type(tx: &Tx<'_>) -> Result<HashMap<String, u32>> {
    rows(
        tx,
        "SELECT task_type, COUNT(*) AS n FROM tasks WHERE status = 'running' GROUP BY task_type",
        &[],
    )
    .await?
    .iter()
    .map(|r| {
        let n: i64 = column(r, "n")?;
        Ok((
            column(r, "task_type")?,
            u32::try_from(n).unwrap_or(u32::MAX),
        ))
    })
    .collect()
}

/// Whether task `id` can take all of `locks` now: each is held by it already (kept through a
/// retry's backoff), or held by nobody and not reserved by a task ahead of it in this pass.
async fn can_lock(
    tx: &Tx<'_>,
    id: &str,
    locks: &[String],
    reserved: &HashSet<String>,
) -> Result<bool> {
    let held: HashMap<String, String> = rows(
        tx,
        "SELECT name, task_id FROM task_locks WHERE name = ANY($1::text[])",
        &[&locks],
    )
    .await?
    .iter()
    .map(|r| Ok((column(r, "name")?, column(r, "task_id")?)))
    .collect::<Result<_>>()?;
    Ok(locks.iter().all(|name| match held.get(name) {
        Some(holder) => holder == id,
        None => !reserved.contains(name),
    }))
}

/// Start one attempt of a pending task (its row locked by the caller): `running`, counted,
/// leased, its attempt row written.
async fn start(
    tx: &Tx<'_>,
    id: &str,
    now: Millis,
    lease_ms: i64,
    executor: &Executor,
    kill_grace_ms: i64,
) -> Result<ClaimedTask> {
    let executor_id = &executor.id;
    let lease_until = now + lease_ms;
    change(
        tx,
        id,
        TaskStatus::Pending,
        TaskStatus::Running,
        now,
        "started",
        None,
        "attempts = attempts + 1, claim_seq = claim_seq + 1, lease_until = $3, \
         executor_id = $4, executor_host = $5, started_at = COALESCE(started_at, $2), \
         next_run_at = NULL",
        &[&lease_until, &executor_id, &executor.host],
    )
    .await?;
    let r = one(
        tx,
        "SELECT id, task_type, params, claim_seq, attempts, max_attempts, created_at, \
         retry_deadline, idempotency_key FROM tasks WHERE id = $1",
        &[&id],
    )
    .await?;
    let task = ClaimedTask {
        id: column(&r, "id")?,
        task_type: column(&r, "task_type")?,
        params: column(&r, "params")?,
        claim_seq: u32_of(&r, "claim_seq")?,
        attempt: u32_of(&r, "attempts")?,
        max_attempts: u32_of(&r, "max_attempts")?,
        created_at: column(&r, "created_at")?,
        started_at: now,
        retry_deadline: column(&r, "retry_deadline")?,
        idempotency_key: column(&r, "idempotency_key")?,
    };
    exec(
        tx,
        "INSERT INTO task_attempts (task_id, number, started_at, executor_id, host, \
         kill_grace_ms) VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &id,
            &i64::from(task.attempt),
            &now,
            &executor_id,
            &executor.host,
            &kill_grace_ms,
        ],
    )
    .await?;
    Ok(task)
}

/// Record how an attempt ended. Fenced: only while the task is running under this claim
/// (`None` otherwise; only the attempt row is then written). A retry is two logged changes:
/// `running → failed | timed_out` with the attempt's reason, then `→ pending`; it keeps the
/// task's locks only with `hold_locks`. A failure after a step was reported done is a partial
/// failure: with `review_partial` it goes `running → failed → manual_review`
/// (`partial_failure`) and is not retried, since redoing finished steps may not be safe. A cancel
/// requested before this wins over every outcome but success (see [`TaskEnd::decide`]).
pub(crate) async fn finish(
    tx: &Tx<'_>,
    end: &TaskAttemptEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let Some(current) = row(
        tx,
        "SELECT status, claim_seq, attempts, cancel_requested FROM tasks WHERE id = $1 \
         FOR UPDATE",
        &[&end.id],
    )
    .await?
    else {
        return Ok(None);
    };
    let status: String = column(&current, "status")?;
    let claim_seq: i64 = column(&current, "claim_seq")?;
    let attempt: i64 = column(&current, "attempts")?;
    let cancel_requested: bool = column(&current, "cancel_requested")?;
    // Fenced before anything is written: a late end (its claim taken back, the task since
    // claimed again, perhaps by another host) must not close the attempt that runs now.
    if status != TaskStatus::Running.as_str() || claim_seq != i64::from(end.claim_seq) {
        return Ok(None);
    }
    let error = end.error.as_deref().map(clip_error);
    let summary = end.result_summary.as_deref().map(clip_error);
    let exit_code = end.exit_code.map(i64::from);
    let signal = end.signal.map(i64::from);
    exec(
        tx,
        "UPDATE task_attempts SET finished_at = $3, outcome = $4, exit_code = $5, signal = $6, \
         error_code = $7, error = $8, duration_ms = $9, output_bytes = $10, \
         output_truncated = $11, killed = $12, redactions = $13 \
         WHERE task_id = $1 AND number = $2 AND finished_at IS NULL",
        &[
            &end.id,
            &attempt,
            &now,
            &end.outcome.as_str(),
            &exit_code,
            &signal,
            &end.error_code,
            &error,
            &end.duration_ms,
            &(end.output_bytes as i64),
            &end.output_truncated,
            &end.killed,
            &(end.redactions as i64),
        ],
    )
    .await?;
    let has_steps = end.review_partial && has_steps(tx, &end.id).await?;
    let to = TaskEnd::decide(end, cancel_requested, has_steps);
    let error = to.error.as_deref().map(clip_error);
    let finished = to.finished_at(now);
    change_with(
        tx,
        &end.id,
        (TaskStatus::Running, to.status, to.locks),
        now,
        &to.reason,
        to.note.as_deref(),
        "lease_until = NULL, error_code = $3, error = $4, exit_code = $5, signal = $6, \
         result_summary = COALESCE($7, result_summary), finished_at = $8",
        &[
            &to.error_code,
            &error,
            &exit_code,
            &signal,
            &summary,
            &finished,
        ],
    )
    .await?;
    let (at, release) = match to.then {
        Then::End => return Ok(Some(to.status)),
        Then::Review => {
            let (reason, note) = Then::REVIEW;
            change(
                tx,
                &end.id,
                to.status,
                TaskStatus::ManualReview,
                now,
                reason,
                Some(note),
                "error_code = $3",
                &[&reason],
            )
            .await?;
            return Ok(Some(TaskStatus::ManualReview));
        }
        Then::Retry { at, release_locks } => (at, release_locks),
    };
    if release {
        release_locks(tx, &end.id).await?;
    }
    let note = format!(
        "attempt {} of {}",
        attempt + 1,
        max_attempts(tx, &end.id).await?
    );
    change(
        tx,
        &end.id,
        to.status,
        TaskStatus::Pending,
        now,
        "retry",
        Some(&note),
        "next_run_at = $3",
        &[&at],
    )
    .await?;
    Ok(Some(TaskStatus::Pending))
}

async fn max_attempts(tx: &Tx<'_>, id: &str) -> Result<u32> {
    let r = one(tx, "SELECT max_attempts FROM tasks WHERE id = $1", &[&id]).await?;
    u32_of(&r, "max_attempts")
}

/// An operator's cancel: a pending or `manual_review` task is canceled at once; a running one
/// is marked, and its runner ends the attempt as `canceled`.
pub(crate) async fn cancel(tx: &Tx<'_>, id: &str, now: Millis) -> Result<TaskAction> {
    let Some(task) = get_locked(tx, id).await? else {
        return Ok(TaskAction::NotFound);
    };
    match CancelOf::decide(task.status) {
        CancelOf::Request => {
            exec(
                tx,
                "UPDATE tasks SET cancel_requested = true WHERE id = $1",
                &[&id],
            )
            .await?;
            let task = get(tx, id)
                .await?
                .ok_or_else(|| StoreError::Database("task vanished".into()))?;
            return Ok(TaskAction::CancelRequested(task));
        }
        CancelOf::Now(from) => {
            change(
                tx,
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
    done(tx, id).await
}

/// An operator's retry: from `failed`, `timed_out`, `interrupted` or `manual_review`, pending
/// again at once with `extra_attempts` more attempts. A deadline that has passed no longer
/// applies (the operator's decision overrides it).
pub(crate) async fn retry(
    tx: &Tx<'_>,
    id: &str,
    extra_attempts: u32,
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = get_locked(tx, id).await? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.retryable() {
        return Ok(TaskAction::Invalid(task.status));
    }
    let max = i64::from(task.attempts.saturating_add(extra_attempts.max(1)));
    change(
        tx,
        id,
        task.status,
        TaskStatus::Pending,
        now,
        "retried",
        Some("an operator's retry"),
        "next_run_at = $2, max_attempts = $3, finished_at = NULL, cancel_requested = false, \
         retry_deadline = CASE WHEN retry_deadline <= $2 THEN NULL ELSE retry_deadline END, \
         queue_deadline = CASE WHEN queue_deadline <= $2 THEN NULL ELSE queue_deadline END",
        &[&max],
    )
    .await?;
    done(tx, id).await
}

/// Move a task to `to` for `reason` (an interrupted task's policy, an operator's decision),
/// if the state machine allows it from where it is.
pub(crate) async fn decide(
    tx: &Tx<'_>,
    id: &str,
    to: TaskStatus,
    reason: &str,
    note: Option<&str>,
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = get_locked(tx, id).await? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.can_become(to) || to == TaskStatus::Running {
        return Ok(TaskAction::Invalid(task.status));
    }
    let set = match to {
        TaskStatus::Pending => "next_run_at = $2, finished_at = NULL",
        _ => "next_run_at = NULL, finished_at = COALESCE(finished_at, $2)",
    };
    change(tx, id, task.status, to, now, reason, note, set, &[]).await?;
    done(tx, id).await
}

/// At start-up, when the previous owner is known to be dead: every running task is taken over
/// by `executor` (`daemon_restart`) to end what is left of its attempt (see [`Orphaned`]).
/// (On a database shared by live hosts the daemon does not call it: see `expire_leases`.)
pub(crate) async fn recover(
    tx: &Tx<'_>,
    now: Millis,
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    let running = rows(
        tx,
        "SELECT id FROM tasks WHERE status = 'running' ORDER BY id FOR UPDATE",
        &[],
    )
    .await?;
    take_over(tx, now, &running, (executor, lease_ms), "daemon_restart").await
}

/// Running tasks whose lease ran out while another executor held them (its heartbeat stopped:
/// it died, or lost the store) are taken over (`lease_expired`), like [`recover`]. A lease
/// renewed meanwhile (by a transaction this one waited for) is not taken.
pub(crate) async fn expire_leases(
    tx: &Tx<'_>,
    now: Millis,
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    let lapsed = rows(
        tx,
        "SELECT id FROM tasks \
         WHERE status = 'running' AND lease_until < $1 AND executor_id <> $2 \
         ORDER BY id FOR UPDATE",
        &[&now, &executor.id],
    )
    .await?;
    take_over(tx, now, &lapsed, (executor, lease_ms), "lease_expired").await
}

/// Running tasks held by one of `dead` (executors known to be gone: an earlier run of this
/// daemon on this host whose process no longer exists) are taken over at once
/// (`daemon_restart`), lease or not.
pub(crate) async fn take_over_from(
    tx: &Tx<'_>,
    now: Millis,
    dead: &[String],
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    let held = rows(
        tx,
        "SELECT id FROM tasks WHERE status = 'running' AND executor_id = ANY($1::text[]) \
         AND executor_id <> $2 ORDER BY id FOR UPDATE",
        &[&dead, &executor.id],
    )
    .await?;
    take_over(tx, now, &held, (executor, lease_ms), "daemon_restart").await
}

/// The other executors holding running tasks on `host`.
pub(crate) async fn executors_on<C: GenericClient>(
    c: &C,
    host: &str,
    me: &str,
) -> Result<Vec<String>> {
    rows(
        c,
        "SELECT DISTINCT executor_id FROM tasks WHERE status = 'running' \
         AND executor_host = $1 AND executor_id <> $2",
        &[&host, &me],
    )
    .await?
    .iter()
    .map(|r| column(r, "executor_id"))
    .collect()
}

/// Take over the running tasks of `running` (the `id` of rows the caller locked): a new claim
/// (which fences off the old executor's end and renewals), leased to `executor`, `ending` set
/// to `code` (kept if an earlier take-over set it). The status does not change: the attempt
/// may still have processes, and its locks and quota slot stay taken until they are gone.
async fn take_over(
    tx: &Tx<'_>,
    now: Millis,
    running: &[Row],
    (executor, lease_ms): (&Executor, i64),
    code: &str,
) -> Result<Vec<Orphaned>> {
    let mut out = Vec::with_capacity(running.len());
    for r in running {
        let id: String = column(r, "id")?;
        let before = one(
            tx,
            "SELECT task_type, attempts, lease_until FROM tasks WHERE id = $1",
            &[&id],
        )
        .await?;
        let lease_until: Option<i64> = column(&before, "lease_until")?;
        let after = one(
            tx,
            "UPDATE tasks SET claim_seq = claim_seq + 1, executor_id = $2, lease_until = $3, \
             ending = COALESCE(ending, $4), executor_host = $5 WHERE id = $1 \
             RETURNING claim_seq, ending",
            &[&id, &executor.id, &(now + lease_ms), &code, &executor.host],
        )
        .await?;
        let attempt = u32_of(&before, "attempts")?;
        let a = row(
            tx,
            "SELECT pgid, leader_start, boot_id, sid, host, kill_grace_ms FROM task_attempts \
             WHERE task_id = $1 AND number = $2",
            &[&id, &i64::from(attempt)],
        )
        .await?;
        let (process, host, kill_grace_ms) = match a {
            Some(a) => (
                attempt_process(&a)?,
                column::<Option<String>>(&a, "host")?.unwrap_or_default(),
                column::<Option<i64>>(&a, "kill_grace_ms")?
                    .unwrap_or(crate::tasks::DEFAULT_KILL_GRACE_MS),
            ),
            None => (None, String::new(), crate::tasks::DEFAULT_KILL_GRACE_MS),
        };
        out.push(Orphaned {
            id,
            task_type: column(&before, "task_type")?,
            attempt,
            claim_seq: u32_of(&after, "claim_seq")?,
            code: column(&after, "ending")?,
            process,
            host,
            lease_until: lease_until.unwrap_or(now),
            kill_grace_ms,
        });
    }
    Ok(out)
}

/// The process an attempt row recorded, if it did.
fn attempt_process(a: &Row) -> Result<Option<AttemptProcess>> {
    let pgid: Option<i64> = column(a, "pgid")?;
    let leader_start: Option<i64> = column(a, "leader_start")?;
    let boot_id: Option<String> = column(a, "boot_id")?;
    let sid: Option<i64> = column(a, "sid")?;
    let (Some(pgid), Some(leader_start), Some(boot_id)) = (pgid, leader_start, boot_id) else {
        return Ok(None);
    };
    Ok(Some(AttemptProcess {
        pgid: i32::try_from(pgid).map_err(|_| out_of_range("pgid", pgid))?,
        leader_start: leader_start.max(0) as u64,
        boot_id,
        sid: sid.and_then(|s| i32::try_from(s).ok()),
    }))
}

/// Settle a task taken over as orphaned, once its attempt's processes are gone: its attempt is
/// closed as interrupted and the task goes to `canceled` (a cancel was requested) or to
/// `interrupted` and on to `end.then`. Fenced by the take-over's claim.
pub(crate) async fn settle_orphan(
    tx: &Tx<'_>,
    end: &OrphanEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let Some(current) = row(
        tx,
        "SELECT attempts, ending, cancel_requested FROM tasks \
         WHERE id = $1 AND status = 'running' AND claim_seq = $2 FOR UPDATE",
        &[&end.id, &i64::from(end.claim_seq)],
    )
    .await?
    else {
        return Ok(None);
    };
    let Some(code): Option<String> = column(&current, "ending")? else {
        return Ok(None);
    };
    let attempt: i64 = column(&current, "attempts")?;
    let settled = OrphanSettled::decide(&code, column(&current, "cancel_requested")?, end.then);
    exec(
        tx,
        "UPDATE task_attempts SET finished_at = $3, outcome = 'interrupted', \
         error_code = $4, error = $5, duration_ms = $3 - started_at \
         WHERE task_id = $1 AND number = $2 AND finished_at IS NULL",
        &[&end.id, &attempt, &now, &code, &settled.error],
    )
    .await?;
    change(
        tx,
        &end.id,
        TaskStatus::Running,
        settled.status,
        now,
        &settled.reason,
        Some(&settled.note),
        "lease_until = NULL, ending = NULL, error_code = $3, error = $4, \
         finished_at = CASE WHEN $5 THEN $2 ELSE finished_at END",
        &[&settled.error_code, &settled.error, &settled.finished],
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
        tx,
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

/// Pending tasks of types not in `declared` go to `manual_review` (`type_undeclared`), and give
/// up the locks they kept through a backoff. Returns their ids.
pub(crate) async fn review_undeclared(
    tx: &Tx<'_>,
    declared: &[String],
    now: Millis,
) -> Result<Vec<String>> {
    let found = rows(
        tx,
        "SELECT id, task_type FROM tasks WHERE status = 'pending' \
         AND NOT (task_type = ANY($1::text[])) ORDER BY id FOR UPDATE",
        &[&declared],
    )
    .await?;
    let mut ids = Vec::with_capacity(found.len());
    for r in &found {
        let id: String = column(r, "id")?;
        let task_type: String = column(r, "task_type")?;
        let note = crate::tasks::undeclared_note(&task_type);
        change(
            tx,
            &id,
            TaskStatus::Pending,
            TaskStatus::ManualReview,
            now,
            "type_undeclared",
            Some(&note),
            "next_run_at = NULL, error_code = 'type_undeclared', error = $3",
            &[&note],
        )
        .await?;
        ids.push(id);
    }
    Ok(ids)
}

/// Record the process of a running attempt. Only while that attempt is the task's current one
/// (not yet finished: the task's row is locked first, so it cannot end meanwhile).
pub(crate) async fn record_process(
    tx: &Tx<'_>,
    id: &str,
    attempt: u32,
    process: &AttemptProcess,
) -> Result<()> {
    exec(tx, "SELECT id FROM tasks WHERE id = $1 FOR UPDATE", &[&id]).await?;
    exec(
        tx,
        "UPDATE task_attempts SET pgid = $3, leader_start = $4, boot_id = $5, sid = $6 \
         WHERE task_id = $1 AND number = $2 AND finished_at IS NULL",
        &[
            &id,
            &i64::from(attempt),
            &i64::from(process.pgid),
            &(process.leader_start as i64),
            &process.boot_id,
            &process.sid.map(i64::from),
        ],
    )
    .await?;
    Ok(())
}

/// Renew the leases of the attempts this executor runs (id, claim). Returns those renewed;
/// an attempt whose claim moved on (taken over) is not.
pub(crate) async fn renew_leases(
    tx: &Tx<'_>,
    now: Millis,
    running: &[(String, u32)],
    lease_ms: i64,
) -> Result<Vec<Renewed>> {
    if running.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = running.iter().map(|(id, _)| id.clone()).collect();
    let seqs: Vec<i64> = running.iter().map(|(_, seq)| i64::from(*seq)).collect();
    // Lock first, in id order, as another host taking lapsed leases does.
    exec(
        tx,
        "SELECT id FROM tasks WHERE id = ANY($1::text[]) AND status = 'running' \
         ORDER BY id FOR UPDATE",
        &[&ids],
    )
    .await?;
    rows(
        tx,
        "UPDATE tasks SET lease_until = $3 \
         FROM unnest($1::text[], $2::bigint[]) AS live(id, claim_seq) \
         WHERE tasks.id = live.id AND tasks.claim_seq = live.claim_seq \
         AND tasks.status = 'running' RETURNING tasks.id, tasks.cancel_requested",
        &[&ids, &seqs, &(now + lease_ms)],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(Renewed {
            id: column(r, "id")?,
            cancel_requested: column(r, "cancel_requested")?,
        })
    })
    .collect()
}

async fn has_steps(tx: &Tx<'_>, id: &str) -> Result<bool> {
    Ok(row(
        tx,
        "SELECT 1 FROM task_steps WHERE task_id = $1 LIMIT 1",
        &[&id],
    )
    .await?
    .is_some())
}

/// Record that attempt `attempt` of task `id` finished step `name`. Fenced: only while that
/// attempt runs. A step done before (in any attempt) stays as it was.
pub(crate) async fn record_step(
    tx: &Tx<'_>,
    id: &str,
    attempt: u32,
    name: &str,
    now: Millis,
) -> Result<StepRecord> {
    let Some(current) = row(
        tx,
        "SELECT status, attempts FROM tasks WHERE id = $1 FOR UPDATE",
        &[&id],
    )
    .await?
    else {
        return Ok(StepRecord::NotFound);
    };
    let status = status_of(&current, "status")?;
    let current_attempt = u32_of(&current, "attempts")?;
    if let Some(step) = step(tx, id, name).await? {
        return Ok(StepRecord::AlreadyDone(step));
    }
    if status != TaskStatus::Running || current_attempt != attempt {
        return Ok(StepRecord::NotCurrent {
            status,
            attempt: current_attempt,
        });
    }
    exec(
        tx,
        "INSERT INTO task_steps (task_id, name, attempt, at) VALUES ($1, $2, $3, $4)",
        &[&id, &name, &i64::from(attempt), &now],
    )
    .await?;
    Ok(StepRecord::Recorded(TaskStep {
        name: name.to_owned(),
        attempt,
        at: now,
    }))
}

async fn step(tx: &Tx<'_>, id: &str, name: &str) -> Result<Option<TaskStep>> {
    row(
        tx,
        "SELECT name, attempt, at FROM task_steps WHERE task_id = $1 AND name = $2",
        &[&id, &name],
    )
    .await?
    .as_ref()
    .map(row_to_step)
    .transpose()
}

/// The steps of task `id` in the order they were done; `None`: no such task.
pub(crate) async fn steps<C: GenericClient>(c: &C, id: &str) -> Result<Option<Vec<TaskStep>>> {
    if !exists(c, id).await? {
        return Ok(None);
    }
    rows(
        c,
        "SELECT name, attempt, at FROM task_steps WHERE task_id = $1 \
         ORDER BY at, name COLLATE \"C\"",
        &[&id],
    )
    .await?
    .iter()
    .map(row_to_step)
    .collect::<Result<_>>()
    .map(Some)
}

fn row_to_step(r: &Row) -> Result<TaskStep> {
    Ok(TaskStep {
        name: column(r, "name")?,
        attempt: u32_of(r, "attempt")?,
        at: column(r, "at")?,
    })
}

/// Every held lock (by name, in byte order), with the pending tasks that want it (at most
/// `max_waiting` looked at).
pub(crate) async fn held_locks<C: GenericClient>(c: &C, max_waiting: u32) -> Result<Vec<HeldLock>> {
    let mut held: Vec<HeldLock> = rows(
        c,
        "SELECT l.name, l.task_id, t.task_type, t.status, l.since, t.attempts, t.ending \
         FROM task_locks l \
         JOIN tasks t ON t.id = l.task_id ORDER BY l.name COLLATE \"C\"",
        &[],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(HeldLock {
            name: column(r, "name")?,
            task_id: column(r, "task_id")?,
            task_type: column(r, "task_type")?,
            task_status: status_of(r, "status")?,
            attempt: u32_of(r, "attempts")?,
            ending: column(r, "ending")?,
            since: column(r, "since")?,
            waiting: Vec::new(),
        })
    })
    .collect::<Result<_>>()?;
    let pending = rows(
        c,
        "SELECT id, locks FROM tasks WHERE status = 'pending' AND locks IS NOT NULL \
         ORDER BY next_run_at, id LIMIT $1",
        &[&i64::from(max_waiting)],
    )
    .await?;
    for r in &pending {
        let id: String = column(r, "id")?;
        let locks: String = column(r, "locks")?;
        let locks: Vec<String> = serde_json::from_str(&locks).unwrap_or_default();
        for lock in held.iter_mut() {
            if lock.task_id != id && locks.contains(&lock.name) {
                lock.waiting.push(id.clone());
            }
        }
    }
    Ok(held)
}

async fn exists<C: GenericClient>(c: &C, id: &str) -> Result<bool> {
    Ok(row(c, "SELECT 1 FROM tasks WHERE id = $1", &[&id])
        .await?
        .is_some())
}

async fn done(tx: &Tx<'_>, id: &str) -> Result<TaskAction> {
    get(tx, id)
        .await?
        .map(TaskAction::Done)
        .ok_or_else(|| StoreError::Database("task vanished".into()))
}

pub(crate) async fn get<C: GenericClient>(c: &C, id: &str) -> Result<Option<Task>> {
    row(
        c,
        &format!("SELECT {COLUMNS} FROM tasks WHERE id = $1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(row_to_task)
    .transpose()
}

/// [`get`], the task's row locked until the transaction ends: what an operator's action
/// decides on cannot change before it writes.
async fn get_locked(tx: &Tx<'_>, id: &str) -> Result<Option<Task>> {
    row(
        tx,
        &format!("SELECT {COLUMNS} FROM tasks WHERE id = $1 FOR UPDATE OF tasks"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(row_to_task)
    .transpose()
}

/// Oldest first; `after` is the id of the last task of the previous page.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    wanted: &crate::tasks::TaskFilter,
    limit: u32,
    after: Option<&str>,
) -> Result<TaskPage> {
    let after = after.unwrap_or("");
    let fetch = i64::from(limit) + 1;
    let status = wanted.status.map(TaskStatus::as_str);
    let task_type = wanted.task_type.as_deref();
    // One statement per combination of filters, each planned for its own index.
    let mut values: Vec<Param<'_>> = vec![&after, &fetch];
    let mut filter = String::new();
    if let Some(status) = &status {
        values.push(status);
        filter.push_str(&format!(" AND status = ${}", values.len()));
    }
    if let Some(task_type) = &task_type {
        values.push(task_type);
        filter.push_str(&format!(" AND task_type = ${}", values.len()));
    }
    if let Some(since) = &wanted.created_after {
        values.push(since);
        filter.push_str(&format!(" AND created_at >= ${}", values.len()));
    }
    if let Some(until) = &wanted.created_before {
        values.push(until);
        filter.push_str(&format!(" AND created_at < ${}", values.len()));
    }
    let mut tasks: Vec<Task> = rows(
        c,
        &format!("SELECT {COLUMNS} FROM tasks WHERE id > $1{filter} ORDER BY id LIMIT $2"),
        &values,
    )
    .await?
    .iter()
    .map(row_to_task)
    .collect::<Result<_>>()?;
    let next_cursor = next_page(&mut tasks, limit);
    Ok(TaskPage { tasks, next_cursor })
}

/// Cut a page fetched with one row more than `limit`: the cursor of the next page, if any.
fn next_page(tasks: &mut Vec<Task>, limit: u32) -> Option<String> {
    if tasks.len() <= limit as usize {
        return None;
    }
    tasks.truncate(limit as usize);
    tasks.last().map(|t| t.id.clone())
}

pub(crate) async fn attempts<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<Vec<TaskAttempt>>> {
    if !exists(c, id).await? {
        return Ok(None);
    }
    rows(
        c,
        "SELECT number, started_at, finished_at, outcome, exit_code, signal, error_code, error, \
         duration_ms, executor_id, output_bytes, output_truncated, killed, redactions \
         FROM task_attempts WHERE task_id = $1 ORDER BY number",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(TaskAttempt {
            number: u32_of(r, "number")?,
            started_at: column(r, "started_at")?,
            finished_at: column(r, "finished_at")?,
            outcome: column(r, "outcome")?,
            exit_code: opt_i32_of(r, "exit_code")?,
            signal: opt_i32_of(r, "signal")?,
            error_code: column(r, "error_code")?,
            error: column(r, "error")?,
            duration_ms: column(r, "duration_ms")?,
            executor_id: column(r, "executor_id")?,
            output_bytes: opt_u64_of(r, "output_bytes")?,
            output_truncated: column(r, "output_truncated")?,
            killed: column(r, "killed")?,
            redactions: opt_u64_of(r, "redactions")?,
        })
    })
    .collect::<Result<_>>()
    .map(Some)
}

pub(crate) async fn transitions<C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<Vec<TaskTransition>>> {
    if !exists(c, id).await? {
        return Ok(None);
    }
    rows(
        c,
        "SELECT from_status, to_status, attempt, at, reason, note FROM task_transitions \
         WHERE task_id = $1 ORDER BY seq",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| {
        let from: Option<String> = column(r, "from_status")?;
        Ok(TaskTransition {
            from: from.as_deref().map(parse_status).transpose()?,
            to: status_of(r, "to_status")?,
            attempt: u32_of(r, "attempt")?,
            at: column(r, "at")?,
            reason: column(r, "reason")?,
            note: column(r, "note")?,
        })
    })
    .collect::<Result<_>>()
    .map(Some)
}

/// The earliest time a pending task of one of `types` is due, or a queue or retry deadline
/// passes (either needs the runner).
pub(crate) async fn next_due<C: GenericClient>(c: &C, types: &[String]) -> Result<Option<Millis>> {
    // Three indexed reads in one statement; LEAST skips the NULLs of those that found nothing.
    let r = one(
        c,
        "SELECT LEAST( \
           (SELECT next_run_at FROM tasks WHERE status = 'pending' \
            AND task_type = ANY($1::text[]) ORDER BY next_run_at LIMIT 1), \
           (SELECT queue_deadline FROM tasks WHERE status = 'pending' AND attempts = 0 \
            AND queue_deadline IS NOT NULL ORDER BY queue_deadline LIMIT 1), \
           (SELECT retry_deadline FROM tasks WHERE status = 'pending' \
            AND retry_deadline IS NOT NULL ORDER BY retry_deadline LIMIT 1) \
         ) AS due",
        &[&types],
    )
    .await?;
    column(&r, "due")
}

/// Tasks by status (every status, zeros included), summed from the deltas the triggers append.
pub(crate) async fn counts<C: GenericClient>(c: &C) -> Result<Vec<(TaskStatus, u64)>> {
    let found: Vec<(String, i64)> = rows(
        c,
        "SELECT status, SUM(n)::bigint AS n FROM task_count_deltas GROUP BY status",
        &[],
    )
    .await?
    .iter()
    .map(|r| Ok((column(r, "status")?, column(r, "n")?)))
    .collect::<Result<_>>()?;
    Ok(TaskStatus::ALL
        .into_iter()
        .map(|s| {
            let n = found
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| (*n).max(0) as u64);
            (s, n)
        })
        .collect())
}

fn out_of_range(column: &str, value: i64) -> StoreError {
    StoreError::Database(format!("column {column}: {value} is out of range"))
}

fn u32_of(r: &Row, name: &str) -> Result<u32> {
    let value: i64 = column(r, name)?;
    u32::try_from(value).map_err(|_| out_of_range(name, value))
}

fn opt_i32_of(r: &Row, name: &str) -> Result<Option<i32>> {
    let value: Option<i64> = column(r, name)?;
    value
        .map(|v| i32::try_from(v).map_err(|_| out_of_range(name, v)))
        .transpose()
}

/// A count that is never negative (read as SQLite does: a negative one is 0).
fn opt_u64_of(r: &Row, name: &str) -> Result<Option<u64>> {
    let value: Option<i64> = column(r, name)?;
    Ok(value.map(|n| n.max(0) as u64))
}

fn parse_status(text: &str) -> Result<TaskStatus> {
    text.parse()
        .map_err(|e: crate::tasks::UnknownTaskStatus| StoreError::Database(e.to_string()))
}

fn status_of(r: &Row, name: &str) -> Result<TaskStatus> {
    let text: String = column(r, name)?;
    parse_status(&text).map_err(|e| StoreError::Database(format!("column {name}: {e}")))
}

fn row_to_task(r: &Row) -> Result<Task> {
    Ok(Task {
        id: column(r, "id")?,
        task_type: column(r, "task_type")?,
        scope: column(r, "scope")?,
        idempotency_key: column(r, "idempotency_key")?,
        params: column(r, "params")?,
        status: status_of(r, "status")?,
        attempts: u32_of(r, "attempts")?,
        max_attempts: u32_of(r, "max_attempts")?,
        created_at: column(r, "created_at")?,
        updated_at: column(r, "updated_at")?,
        started_at: column(r, "started_at")?,
        finished_at: column(r, "finished_at")?,
        next_run_at: column(r, "next_run_at")?,
        not_before: column(r, "not_before")?,
        queue_deadline: column(r, "queue_deadline")?,
        retry_deadline: column(r, "retry_deadline")?,
        lease_until: column(r, "lease_until")?,
        executor_id: column(r, "executor_id")?,
        error_code: column(r, "error_code")?,
        error: column(r, "error")?,
        exit_code: opt_i32_of(r, "exit_code")?,
        signal: opt_i32_of(r, "signal")?,
        result_summary: column(r, "result_summary")?,
        cancel_requested: column(r, "cancel_requested")?,
        locks: json_list(r, "locks")?,
        completed_steps: column(r, "completed_steps")?,
        ending: column(r, "ending")?,
    })
}

/// A column holding a JSON array of strings (NULL: empty).
fn json_list(r: &Row, name: &str) -> Result<Vec<String>> {
    let text: Option<String> = column(r, name)?;
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| StoreError::Database(format!("column {name}: {e}"))),
    }
}
