//! The SQL behind tasks. Every status change goes through [`change`], which checks the state
//! machine ([`TaskStatus::can_become`]), fences on the current status, bumps the log sequence
//! and appends the transition, all in the caller's transaction.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::map_err;
use crate::error::{Result, StoreError};
use crate::model::{clip_error, Millis};
use crate::tasks::{
    AttemptProcess, ClaimType, Claimed, ClaimedTask, Executor, HeldLock, NewTask, OrphanEnd,
    Orphaned, Renewed, StepRecord, Task, TaskAction, TaskAttempt, TaskAttemptEnd, TaskInsert,
    TaskPage, TaskStatus, TaskStep, TaskTransition, WaitReason,
};
use crate::tasks::{CancelOf, Locks, OrphanSettled, TaskEnd, Then};

const COLUMNS: &str = "id, task_type, scope, idempotency_key, params, status, attempts, \
     max_attempts, created_at, updated_at, started_at, finished_at, next_run_at, not_before, \
     queue_deadline, retry_deadline, lease_until, executor_id, error_code, error, exit_code, \
     signal, result_summary, cancel_requested, locks, \
     (SELECT json_group_array(name) FROM (SELECT name FROM task_steps \
      WHERE task_steps.task_id = tasks.id ORDER BY at, name)), ending";

/// How many due tasks one claim looks at, at most, when locks and quotas make it pass some
/// over (the rest wait for the next claim).
const CLAIM_SCAN: usize = 1024;

pub(crate) fn insert(conn: &Connection, new: &NewTask, now: Millis) -> Result<TaskInsert> {
    if let Some(key) = &new.idempotency_key {
        let known: Option<(String, Vec<u8>)> = conn
            .prepare_cached(
                "SELECT id, digest FROM tasks WHERE scope = ?1 AND idempotency_key = ?2",
            )
            .and_then(|mut st| {
                st.query_row(params![new.scope, key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(map_err)?;
        if let Some((id, digest)) = known {
            if digest != new.digest {
                return Ok(TaskInsert::Conflict { existing_id: id });
            }
            return get(conn, &id)?
                .map(TaskInsert::Existing)
                .ok_or_else(|| StoreError::Database(format!("task {id} vanished")));
        }
    }
    let due = new.not_before.map_or(now, |nb| nb.max(now));
    let queue_deadline = new.queue_timeout_ms.map(|t| now + t);
    let retry_deadline = new.retry_deadline_ms.map(|t| now + t);
    let locks = if new.locks.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&new.locks).map_err(|e| StoreError::Database(e.to_string()))?)
    };
    conn.prepare_cached(
        "INSERT INTO tasks (id, task_type, scope, idempotency_key, params, digest, status, \
         max_attempts, created_at, updated_at, next_run_at, not_before, queue_deadline, \
         retry_deadline, log_seq, locks) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', ?7, ?8, ?8, ?9, ?10, ?11, ?12, 1, ?13)",
    )
    .and_then(|mut st| {
        st.execute(params![
            new.id,
            new.task_type,
            new.scope,
            new.idempotency_key,
            new.params,
            new.digest,
            new.max_attempts,
            now,
            due,
            new.not_before,
            queue_deadline,
            retry_deadline,
            locks,
        ])
    })
    .map_err(map_err)?;
    log(
        conn,
        &new.id,
        None,
        TaskStatus::Pending,
        (1, 0),
        now,
        "submitted",
        None,
    )?;
    get(conn, &new.id)?
        .map(TaskInsert::Created)
        .ok_or_else(|| StoreError::Database("inserted task vanished".into()))
}

/// Change a task's status from `from` to `to`, with the state machine's permission, and log it.
/// `set` is the rest of the UPDATE's SET clause: it may use `?2` (now) and `?3`, `?4`, … (the
/// values of `extra`, in order). A task that leaves `running` for anything but `pending` gives
/// its locks up here (see [`Locks`]).
#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
fn change(
    conn: &Connection,
    id: &str,
    from: TaskStatus,
    to: TaskStatus,
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[&dyn rusqlite::ToSql],
) -> Result<()> {
    change_with(
        conn,
        id,
        (from, to, Locks::Release),
        now,
        reason,
        note,
        set,
        extra,
    )
}

#[allow(
    clippy::too_many_arguments,
    reason = "one status change: where from and to, why, when, and what else the row gets"
)]
fn change_with(
    conn: &Connection,
    id: &str,
    (from, to, locks): (TaskStatus, TaskStatus, Locks),
    now: Millis,
    reason: &str,
    note: Option<&str>,
    set: &str,
    extra: &[&dyn rusqlite::ToSql],
) -> Result<()> {
    if !from.can_become(to) {
        return Err(StoreError::IllegalTransition {
            id: id.to_owned(),
            from,
            to,
        });
    }
    let comma = if set.is_empty() { "" } else { ", " };
    // The statuses are written into the statement, not bound: SQLite re-prepares a statement
    // whenever a bound value could change its plan (a status next to the partial indexes), which
    // would be every call.
    let sql = format!(
        "UPDATE tasks SET status = '{to}', updated_at = ?2, log_seq = log_seq + 1{comma}{set} \
         WHERE id = ?1 AND status = '{from}' RETURNING log_seq, attempts, locks IS NOT NULL",
        to = to.as_str(),
        from = from.as_str(),
    );
    let mut values: Vec<&dyn rusqlite::ToSql> = vec![&id, &now];
    values.extend(extra.iter().copied());
    let step: Option<(u32, u32, bool)> = conn
        .prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_row(values.as_slice(), |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(map_err)?;
    let (seq, attempt, has_locks) = step.ok_or_else(|| {
        StoreError::Database(format!(
            "task {id} was not {from} when it was to become {to}"
        ))
    })?;
    if has_locks && locks.released_by(to) {
        release_locks(conn, id)?;
    }
    log(conn, id, Some(from), to, (seq, attempt), now, reason, note)
}

fn release_locks(conn: &Connection, id: &str) -> Result<()> {
    conn.prepare_cached("DELETE FROM task_locks WHERE task_id = ?1")
        .and_then(|mut st| st.execute([id]))
        .map_err(map_err)?;
    Ok(())
}

#[allow(
    clippy::too_many_arguments,
    reason = "one row of the log, written in one place"
)]
fn log(
    conn: &Connection,
    id: &str,
    from: Option<TaskStatus>,
    to: TaskStatus,
    (seq, attempt): (u32, u32),
    at: Millis,
    reason: &str,
    note: Option<&str>,
) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO task_transitions (task_id, seq, from_status, to_status, attempt, at, \
         reason, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            seq,
            from.map(TaskStatus::as_str),
            to.as_str(),
            attempt,
            at,
            reason,
            note
        ])
    })
    .map_err(map_err)?;
    Ok(())
}

/// End tasks whose time ran out while pending, as `timed_out`: never started by their queue
/// deadline (`queue_timeout`), or the next attempt not started by the retry deadline
/// (`retry_deadline`). At most `limit`; returns how many.
pub(crate) fn expire(conn: &Connection, now: Millis, limit: u32) -> Result<u64> {
    // Two indexed reads, not one OR over the table: a claim runs this every time.
    let mut due: Vec<(String, u32, Option<Millis>, Option<Millis>)> = Vec::new();
    for sql in [
        "SELECT id, attempts, queue_deadline, retry_deadline FROM tasks INDEXED BY tasks_queued \
         WHERE status = 'pending' AND attempts = 0 AND queue_deadline IS NOT NULL \
         AND queue_deadline <= ?1 LIMIT ?2",
        "SELECT id, attempts, queue_deadline, retry_deadline FROM tasks \
         INDEXED BY tasks_retry_deadline WHERE status = 'pending' \
         AND retry_deadline IS NOT NULL AND retry_deadline <= ?1 LIMIT ?2",
    ] {
        let rows: Vec<(String, u32, Option<Millis>, Option<Millis>)> = conn
            .prepare_cached(sql)
            .and_then(|mut st| {
                st.query_map(params![now, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?
                .collect()
            })
            .map_err(map_err)?;
        for row in rows {
            if !due.iter().any(|(id, ..)| *id == row.0) {
                due.push(row);
            }
        }
    }
    for (id, attempts, queue_deadline, _) in &due {
        let queued = *attempts == 0 && queue_deadline.is_some_and(|d| d <= now);
        let (code, text) = if queued {
            ("queue_timeout", "not started before its queue timeout")
        } else {
            (
                "retry_deadline",
                "its retry deadline passed before the next attempt could start",
            )
        };
        change(
            conn,
            id,
            TaskStatus::Pending,
            TaskStatus::TimedOut,
            now,
            code,
            None,
            "error_code = ?3, error = ?4, next_run_at = NULL, finished_at = ?2",
            &[&code, &text],
        )?;
    }
    Ok(due.len() as u64)
}

/// Claim up to `limit` due pending tasks of the given types (oldest due first, submission order
/// among equals) for one attempt each: `running`, attempt counted and recorded, leased.
///
/// A task whose type's `concurrency` is used up, or that cannot take **all** its locks at once,
/// is passed over and stays pending (all-or-nothing, so no two tasks each hold a lock the other
/// waits for). The locks a passed-over task wants are reserved for the rest of the pass, so a
/// later task never takes a lock ahead of an earlier one: waiting tasks start in order.
pub(crate) fn claim(
    conn: &Connection,
    now: Millis,
    limit: u32,
    types: &[ClaimType],
    lease_ms: i64,
    executor: &Executor,
) -> Result<Claimed> {
    expire(conn, now, 256)?;
    let mut out = Claimed::default();
    if limit == 0 || types.is_empty() {
        return Ok(out);
    }
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    let names = serde_json::to_string(&names).map_err(|e| StoreError::Database(e.to_string()))?;
    let mut running = if types.iter().any(|t| t.concurrency.is_some()) {
        running_by_type(conn)?
    } else {
        std::collections::HashMap::new()
    };
    let mut st = conn
        .prepare_cached(
            "SELECT id, task_type, locks FROM tasks INDEXED BY tasks_due WHERE status = 'pending' \
             AND next_run_at <= ?1 AND task_type IN (SELECT value FROM json_each(?2)) \
             ORDER BY next_run_at, id",
        )
        .map_err(map_err)?;
    let mut rows = st.query(params![now, names]).map_err(map_err)?;
    let mut reserved: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut take: Vec<(String, Vec<String>, i64)> = Vec::new();
    let mut scanned = 0;
    while let Some(row) = rows.next().map_err(map_err)? {
        scanned += 1;
        let id: String = row.get(0).map_err(map_err)?;
        let task_type: String = row.get(1).map_err(map_err)?;
        let locks: Option<String> = row.get(2).map_err(map_err)?;
        let kind = types.iter().find(|t| t.name == task_type);
        let quota = kind.and_then(|t| t.concurrency);
        let kill_grace_ms = kind.map_or(crate::tasks::DEFAULT_KILL_GRACE_MS, |t| t.kill_grace_ms);
        let busy = running.get(&task_type).copied().unwrap_or(0);
        if quota.is_some_and(|q| busy >= q) {
            out.waiting.push((task_type, WaitReason::Quota));
        } else {
            let locks: Vec<String> = match locks {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| StoreError::Database(format!("locks of task {id}: {e}")))?,
                None => Vec::new(),
            };
            if !locks.is_empty() && !can_lock(conn, &id, &locks, &reserved)? {
                reserved.extend(locks);
                out.waiting.push((task_type, WaitReason::Lock));
            } else {
                reserved.extend(locks.iter().cloned());
                *running.entry(task_type).or_insert(0) += 1;
                take.push((id, locks, kill_grace_ms));
                if take.len() as u32 >= limit {
                    break;
                }
            }
        }
        if scanned >= CLAIM_SCAN {
            break;
        }
    }
    drop(rows);
    drop(st);
    for (id, locks, kill_grace_ms) in take {
        for name in &locks {
            conn.prepare_cached(
                "INSERT INTO task_locks (name, task_id, since) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![name, id, now]))
            .map_err(map_err)?;
        }
        out.tasks
            .push(start(conn, &id, now, lease_ms, executor, kill_grace_ms)?);
    }
    Ok(out)
}

/// Running tasks by type.
fn running_by_type(conn: &Connection) -> Result<std::collections::HashMap<String, u32>> {
    conn.prepare_cached(
        "SELECT task_type, COUNT(*) FROM tasks INDEXED BY tasks_status \
         WHERE status = 'running' GROUP BY task_type",
    )
    .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
    .map_err(map_err)
}

/// Whether task `id` can take all of `locks` now: each is held by it already (kept through a
/// retry's backoff), or held by nobody and not reserved by a task ahead of it in this pass.
fn can_lock(
    conn: &Connection,
    id: &str,
    locks: &[String],
    reserved: &std::collections::HashSet<String>,
) -> Result<bool> {
    let mut st = conn
        .prepare_cached("SELECT task_id FROM task_locks WHERE name = ?1")
        .map_err(map_err)?;
    for name in locks {
        let holder: Option<String> = st
            .query_row([name], |r| r.get(0))
            .optional()
            .map_err(map_err)?;
        let free = match holder {
            Some(holder) => holder == id,
            None => !reserved.contains(name),
        };
        if !free {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Start one attempt of a pending task: `running`, counted, leased, its attempt row written.
fn start(
    conn: &Connection,
    id: &str,
    now: Millis,
    lease_ms: i64,
    executor: &Executor,
    kill_grace_ms: i64,
) -> Result<ClaimedTask> {
    let executor_id = &executor.id;
    let lease_until = now + lease_ms;
    change(
        conn,
        id,
        TaskStatus::Pending,
        TaskStatus::Running,
        now,
        "started",
        None,
        "attempts = attempts + 1, claim_seq = claim_seq + 1, lease_until = ?3, \
         executor_id = ?4, executor_host = ?5, started_at = COALESCE(started_at, ?2), \
         next_run_at = NULL",
        &[&lease_until, &executor_id, &executor.host],
    )?;
    let task = conn
        .prepare_cached(
            "SELECT id, task_type, params, claim_seq, attempts, max_attempts, created_at, \
             retry_deadline, idempotency_key FROM tasks WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([id], |r| {
                Ok(ClaimedTask {
                    id: r.get(0)?,
                    task_type: r.get(1)?,
                    params: r.get(2)?,
                    claim_seq: r.get(3)?,
                    attempt: r.get(4)?,
                    max_attempts: r.get(5)?,
                    created_at: r.get(6)?,
                    started_at: now,
                    retry_deadline: r.get(7)?,
                    idempotency_key: r.get(8)?,
                })
            })
        })
        .map_err(map_err)?;
    conn.prepare_cached(
        "INSERT INTO task_attempts (task_id, number, started_at, executor_id, host, \
         kill_grace_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            task.attempt,
            now,
            executor_id,
            executor.host,
            kill_grace_ms
        ])
    })
    .map_err(map_err)?;
    Ok(task)
}

/// Record how an attempt ended. Fenced: only while the task is running under this claim
/// (`None` otherwise; only the attempt row is then written). A retry is two logged changes:
/// `running → failed | timed_out` with the attempt's reason, then `→ pending`; it keeps the
/// task's locks only with `hold_locks`. A failure after a step was reported done is a partial
/// failure: with `review_partial` it goes `running → failed → manual_review`
/// (`partial_failure`) and is not retried, since redoing finished steps may not be safe. A cancel
/// requested before this wins over every outcome but success (see [`TaskEnd::decide`]).
pub(crate) fn finish(
    conn: &Connection,
    end: &TaskAttemptEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let current: Option<(String, u32, u32, bool)> = conn
        .prepare_cached(
            "SELECT status, claim_seq, attempts, cancel_requested FROM tasks WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([&end.id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .optional()
        })
        .map_err(map_err)?;
    let Some((status, claim_seq, attempt, cancel_requested)) = current else {
        return Ok(None);
    };
    // Fenced before anything is written: a late end (its claim taken back, the task since
    // claimed again) must not close the attempt that runs now.
    if status != TaskStatus::Running.as_str() || claim_seq != end.claim_seq {
        return Ok(None);
    }
    let error = end.error.as_deref().map(clip_error);
    let summary = end.result_summary.as_deref().map(clip_error);
    conn.prepare_cached(
        "UPDATE task_attempts SET finished_at = ?3, outcome = ?4, exit_code = ?5, signal = ?6, \
         error_code = ?7, error = ?8, duration_ms = ?9, output_bytes = ?10, \
         output_truncated = ?11, killed = ?12, redactions = ?13 \
         WHERE task_id = ?1 AND number = ?2 AND finished_at IS NULL",
    )
    .and_then(|mut st| {
        st.execute(params![
            end.id,
            attempt,
            now,
            end.outcome.as_str(),
            end.exit_code,
            end.signal,
            end.error_code,
            error,
            end.duration_ms,
            end.output_bytes as i64,
            end.output_truncated,
            end.killed,
            end.redactions as i64,
        ])
    })
    .map_err(map_err)?;
    let has_steps = end.review_partial && has_steps(conn, &end.id)?;
    let to = TaskEnd::decide(end, cancel_requested, has_steps);
    let error = to.error.as_deref().map(clip_error);
    let finished = to.finished_at(now);
    change_with(
        conn,
        &end.id,
        (TaskStatus::Running, to.status, to.locks),
        now,
        &to.reason,
        to.note.as_deref(),
        "lease_until = NULL, error_code = ?3, error = ?4, exit_code = ?5, signal = ?6, \
         result_summary = COALESCE(?7, result_summary), finished_at = ?8",
        &[
            &to.error_code,
            &error,
            &end.exit_code,
            &end.signal,
            &summary,
            &finished,
        ],
    )?;
    let (at, release) = match to.then {
        Then::End => return Ok(Some(to.status)),
        Then::Review => {
            let (reason, note) = Then::REVIEW;
            change(
                conn,
                &end.id,
                to.status,
                TaskStatus::ManualReview,
                now,
                reason,
                Some(note),
                "error_code = ?3",
                &[&reason],
            )?;
            return Ok(Some(TaskStatus::ManualReview));
        }
        Then::Retry { at, release_locks } => (at, release_locks),
    };
    if release {
        release_locks(conn, &end.id)?;
    }
    let note = format!(
        "attempt {} of {}",
        attempt + 1,
        max_attempts(conn, &end.id)?
    );
    change(
        conn,
        &end.id,
        to.status,
        TaskStatus::Pending,
        now,
        "retry",
        Some(&note),
        "next_run_at = ?3",
        &[&at],
    )?;
    Ok(Some(TaskStatus::Pending))
}

fn max_attempts(conn: &Connection, id: &str) -> Result<u32> {
    conn.prepare_cached("SELECT max_attempts FROM tasks WHERE id = ?1")
        .and_then(|mut st| st.query_row([id], |r| r.get(0)))
        .map_err(map_err)
}

/// An operator's cancel: a pending or `manual_review` task is canceled at once; a running one
/// is marked, and its runner ends the attempt as `canceled`.
pub(crate) fn cancel(conn: &Connection, id: &str, now: Millis) -> Result<TaskAction> {
    let Some(task) = get(conn, id)? else {
        return Ok(TaskAction::NotFound);
    };
    match CancelOf::decide(task.status) {
        CancelOf::Request => {
            conn.prepare_cached("UPDATE tasks SET cancel_requested = 1 WHERE id = ?1")
                .and_then(|mut st| st.execute([id]))
                .map_err(map_err)?;
            let task =
                get(conn, id)?.ok_or_else(|| StoreError::Database("task vanished".into()))?;
            return Ok(TaskAction::CancelRequested(task));
        }
        CancelOf::Now(from) => change(
            conn,
            id,
            from,
            TaskStatus::Canceled,
            now,
            "canceled",
            None,
            "next_run_at = NULL, finished_at = ?2",
            &[],
        )?,
        CancelOf::Invalid(other) => return Ok(TaskAction::Invalid(other)),
    }
    done(conn, id)
}

/// An operator's retry: from `failed`, `timed_out`, `interrupted` or `manual_review`, pending
/// again at once with `extra_attempts` more attempts. A deadline that has passed no longer
/// applies (the operator's decision overrides it).
pub(crate) fn retry(
    conn: &Connection,
    id: &str,
    extra_attempts: u32,
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = get(conn, id)? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.retryable() {
        return Ok(TaskAction::Invalid(task.status));
    }
    let max = task.attempts + extra_attempts.max(1);
    change(
        conn,
        id,
        task.status,
        TaskStatus::Pending,
        now,
        "retried",
        Some("an operator's retry"),
        "next_run_at = ?2, max_attempts = ?3, finished_at = NULL, cancel_requested = 0, \
         retry_deadline = CASE WHEN retry_deadline <= ?2 THEN NULL ELSE retry_deadline END, \
         queue_deadline = CASE WHEN queue_deadline <= ?2 THEN NULL ELSE queue_deadline END",
        &[&max],
    )?;
    done(conn, id)
}

/// Move a task to `to` for `reason` (an interrupted task's policy, an operator's decision),
/// if the state machine allows it from where it is.
pub(crate) fn decide(
    conn: &Connection,
    id: &str,
    to: TaskStatus,
    reason: &str,
    note: Option<&str>,
    now: Millis,
) -> Result<TaskAction> {
    let Some(task) = get(conn, id)? else {
        return Ok(TaskAction::NotFound);
    };
    if !task.status.can_become(to) || to == TaskStatus::Running {
        return Ok(TaskAction::Invalid(task.status));
    }
    let set = match to {
        TaskStatus::Pending => "next_run_at = ?2, finished_at = NULL",
        _ => "next_run_at = NULL, finished_at = COALESCE(finished_at, ?2)",
    };
    change(conn, id, task.status, to, now, reason, note, set, &[])?;
    done(conn, id)
}

/// At start-up, when the previous owner is known to be dead: every running task is taken over
/// by `executor` (`daemon_restart`) to end what is left of its attempt (see [`Orphaned`]).
pub(crate) fn recover(
    conn: &Connection,
    now: Millis,
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    take_over(
        conn,
        now,
        "SELECT id FROM tasks INDEXED BY tasks_status WHERE status = 'running'",
        params![],
        (executor, lease_ms),
        "daemon_restart",
    )
}

/// Running tasks whose lease ran out while another executor held them (its heartbeat stopped:
/// it died, or lost the store) are taken over (`lease_expired`), like [`recover`].
pub(crate) fn expire_leases(
    conn: &Connection,
    now: Millis,
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    take_over(
        conn,
        now,
        "SELECT id FROM tasks INDEXED BY tasks_status \
         WHERE status = 'running' AND lease_until < ?1 AND executor_id <> ?2",
        params![now, executor.id],
        (executor, lease_ms),
        "lease_expired",
    )
}

/// Running tasks held by one of `dead` (executors known to be gone: an earlier run of this
/// daemon on this host whose process no longer exists) are taken over at once
/// (`daemon_restart`), lease or not.
pub(crate) fn take_over_from(
    conn: &Connection,
    now: Millis,
    dead: &[String],
    executor: &Executor,
    lease_ms: i64,
) -> Result<Vec<Orphaned>> {
    let dead = serde_json::to_string(dead).map_err(|e| StoreError::Database(e.to_string()))?;
    take_over(
        conn,
        now,
        "SELECT id FROM tasks INDEXED BY tasks_status WHERE status = 'running' \
         AND executor_id IN (SELECT value FROM json_each(?1)) AND executor_id <> ?2",
        params![dead, executor.id],
        (executor, lease_ms),
        "daemon_restart",
    )
}

/// The other executors holding running tasks on `host`.
pub(crate) fn executors_on(conn: &Connection, host: &str, me: &str) -> Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT DISTINCT executor_id FROM tasks INDEXED BY tasks_status \
         WHERE status = 'running' AND executor_host = ?1 AND executor_id <> ?2",
    )
    .and_then(|mut st| st.query_map(params![host, me], |r| r.get(0))?.collect())
    .map_err(map_err)
}

/// Take over the running tasks `select` finds (one column: the id): a new claim (which fences
/// off the old executor's end and renewals), leased to `executor`, `ending` set to `code` (kept
/// if an earlier take-over set it). The status does not change: the attempt may still have
/// processes, and its locks and quota slot stay taken until they are gone.
fn take_over(
    conn: &Connection,
    now: Millis,
    select: &str,
    args: impl rusqlite::Params,
    (executor, lease_ms): (&Executor, i64),
    code: &str,
) -> Result<Vec<Orphaned>> {
    let ids: Vec<String> = conn
        .prepare_cached(select)
        .and_then(|mut st| st.query_map(args, |r| r.get(0))?.collect())
        .map_err(map_err)?;
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let (task_type, attempt, lease_until): (String, u32, Option<Millis>) = conn
            .prepare_cached("SELECT task_type, attempts, lease_until FROM tasks WHERE id = ?1")
            .and_then(|mut st| st.query_row([&id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))))
            .map_err(map_err)?;
        let (claim_seq, code): (u32, String) = conn
            .prepare_cached(
                "UPDATE tasks SET claim_seq = claim_seq + 1, executor_id = ?2, \
                 lease_until = ?3, ending = COALESCE(ending, ?4), executor_host = ?5 \
                 WHERE id = ?1 AND status = 'running' RETURNING claim_seq, ending",
            )
            .and_then(|mut st| {
                st.query_row(
                    params![id, executor.id, now + lease_ms, code, executor.host],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
            })
            .map_err(map_err)?;
        let lease_until = lease_until.unwrap_or(now);
        let (process, host, kill_grace_ms) = orphan_attempt(conn, &id, attempt)?;
        out.push(Orphaned {
            id,
            task_type,
            attempt,
            claim_seq,
            code,
            process,
            host,
            lease_until,
            kill_grace_ms,
        });
    }
    Ok(out)
}

/// What the attempt row of an orphaned task recorded: its process, where it ran, its grace.
fn orphan_attempt(
    conn: &Connection,
    id: &str,
    attempt: u32,
) -> Result<(Option<AttemptProcess>, String, i64)> {
    type Row = (
        Option<i32>,
        Option<i64>,
        Option<String>,
        Option<i32>,
        Option<String>,
        Option<i64>,
    );
    let found: Option<Row> = conn
        .prepare_cached(
            "SELECT pgid, leader_start, boot_id, sid, host, kill_grace_ms FROM task_attempts \
             WHERE task_id = ?1 AND number = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![id, attempt], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .optional()
        })
        .map_err(map_err)?;
    let Some((pgid, leader_start, boot_id, sid, host, grace)) = found else {
        return Ok((None, String::new(), crate::tasks::DEFAULT_KILL_GRACE_MS));
    };
    let process = match (pgid, leader_start, boot_id) {
        (Some(pgid), Some(start), Some(boot_id)) => Some(AttemptProcess {
            pgid,
            leader_start: start.max(0) as u64,
            boot_id,
            sid,
        }),
        _ => None,
    };
    Ok((
        process,
        host.unwrap_or_default(),
        grace.unwrap_or(crate::tasks::DEFAULT_KILL_GRACE_MS),
    ))
}

/// Settle a task taken over as orphaned, once its attempt's processes are gone: its attempt is
/// closed as interrupted and the task goes to `canceled` (a cancel was requested) or to
/// `interrupted` and on to `end.then`. Fenced by the take-over's claim.
pub(crate) fn settle_orphan(
    conn: &Connection,
    end: &OrphanEnd,
    now: Millis,
) -> Result<Option<TaskStatus>> {
    let current: Option<(u32, Option<String>, bool)> = conn
        .prepare_cached(
            "SELECT attempts, ending, cancel_requested FROM tasks \
             WHERE id = ?1 AND status = 'running' AND claim_seq = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![end.id, end.claim_seq], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .map_err(map_err)?;
    let Some((attempt, Some(code), cancel_requested)) = current else {
        return Ok(None);
    };
    let settled = OrphanSettled::decide(&code, cancel_requested, end.then);
    conn.prepare_cached(
        "UPDATE task_attempts SET finished_at = ?3, outcome = 'interrupted', \
         error_code = ?4, error = ?5, duration_ms = ?3 - started_at \
         WHERE task_id = ?1 AND number = ?2 AND finished_at IS NULL",
    )
    .and_then(|mut st| st.execute(params![end.id, attempt, now, code, settled.error]))
    .map_err(map_err)?;
    change(
        conn,
        &end.id,
        TaskStatus::Running,
        settled.status,
        now,
        &settled.reason,
        Some(&settled.note),
        "lease_until = NULL, ending = NULL, error_code = ?3, error = ?4, \
         finished_at = CASE WHEN ?5 THEN ?2 ELSE finished_at END",
        &[&settled.error_code, &settled.error, &settled.finished],
    )?;
    let Some(then) = settled.then else {
        return Ok(Some(settled.status));
    };
    let set = match then {
        TaskStatus::Pending => "next_run_at = ?2, finished_at = NULL",
        _ => "next_run_at = NULL, finished_at = COALESCE(finished_at, ?2)",
    };
    change(
        conn,
        &end.id,
        TaskStatus::Interrupted,
        then,
        now,
        "on_interrupt",
        Some("the type's on_interrupt"),
        set,
        &[],
    )?;
    Ok(Some(then))
}

/// Pending tasks of types not in `declared` go to `manual_review` (`type_undeclared`), and give
/// up the locks they kept through a backoff. Returns their ids.
pub(crate) fn review_undeclared(
    conn: &Connection,
    declared: &[String],
    now: Millis,
) -> Result<Vec<String>> {
    let declared =
        serde_json::to_string(declared).map_err(|e| StoreError::Database(e.to_string()))?;
    let found: Vec<(String, String)> = conn
        .prepare_cached(
            "SELECT id, task_type FROM tasks INDEXED BY tasks_status WHERE status = 'pending' \
             AND task_type NOT IN (SELECT value FROM json_each(?1))",
        )
        .and_then(|mut st| {
            st.query_map([declared], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(map_err)?;
    let mut ids = Vec::with_capacity(found.len());
    for (id, task_type) in found {
        let note = crate::tasks::undeclared_note(&task_type);
        change(
            conn,
            &id,
            TaskStatus::Pending,
            TaskStatus::ManualReview,
            now,
            "type_undeclared",
            Some(&note),
            "next_run_at = NULL, error_code = 'type_undeclared', error = ?3",
            &[&note],
        )?;
        ids.push(id);
    }
    Ok(ids)
}

/// Record the process of a running attempt. Only while that attempt is the task's current one.
pub(crate) fn record_process(
    conn: &Connection,
    id: &str,
    attempt: u32,
    process: &AttemptProcess,
) -> Result<()> {
    conn.prepare_cached(
        "UPDATE task_attempts SET pgid = ?3, leader_start = ?4, boot_id = ?5, sid = ?6 \
         WHERE task_id = ?1 AND number = ?2 AND finished_at IS NULL",
    )
    .and_then(|mut st| {
        st.execute(params![
            id,
            attempt,
            process.pgid,
            process.leader_start as i64,
            process.boot_id,
            process.sid,
        ])
    })
    .map_err(map_err)?;
    Ok(())
}

/// Renew the leases of the attempts this executor runs (id, claim). Returns those renewed;
/// an attempt whose claim moved on (taken over) is not.
pub(crate) fn renew_leases(
    conn: &Connection,
    now: Millis,
    running: &[(String, u32)],
    lease_ms: i64,
) -> Result<Vec<Renewed>> {
    let mut st = conn
        .prepare_cached(
            "UPDATE tasks SET lease_until = ?3 \
             WHERE id = ?1 AND claim_seq = ?2 AND status = 'running' RETURNING cancel_requested",
        )
        .map_err(map_err)?;
    let mut renewed = Vec::with_capacity(running.len());
    for (id, claim_seq) in running {
        let cancel: Option<bool> = st
            .query_row(params![id, claim_seq, now + lease_ms], |r| r.get(0))
            .optional()
            .map_err(map_err)?;
        if let Some(cancel_requested) = cancel {
            renewed.push(Renewed {
                id: id.clone(),
                cancel_requested,
            });
        }
    }
    Ok(renewed)
}

fn has_steps(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM task_steps WHERE task_id = ?1 LIMIT 1")
        .and_then(|mut st| st.exists([id]))
        .map_err(map_err)
}

/// Record that attempt `attempt` of task `id` finished step `name`. Fenced: only while that
/// attempt runs. A step done before (in any attempt) stays as it was.
pub(crate) fn record_step(
    conn: &Connection,
    id: &str,
    attempt: u32,
    name: &str,
    now: Millis,
) -> Result<StepRecord> {
    let current: Option<(String, u32)> = conn
        .prepare_cached("SELECT status, attempts FROM tasks WHERE id = ?1")
        .and_then(|mut st| {
            st.query_row([id], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(map_err)?;
    let Some((status, current_attempt)) = current else {
        return Ok(StepRecord::NotFound);
    };
    let status = parse_status(&status, 0).map_err(map_err)?;
    if let Some(step) = step(conn, id, name)? {
        return Ok(StepRecord::AlreadyDone(step));
    }
    if status != TaskStatus::Running || current_attempt != attempt {
        return Ok(StepRecord::NotCurrent {
            status,
            attempt: current_attempt,
        });
    }
    conn.prepare_cached(
        "INSERT INTO task_steps (task_id, name, attempt, at) VALUES (?1, ?2, ?3, ?4)",
    )
    .and_then(|mut st| st.execute(params![id, name, attempt, now]))
    .map_err(map_err)?;
    Ok(StepRecord::Recorded(TaskStep {
        name: name.to_owned(),
        attempt,
        at: now,
    }))
}

fn step(conn: &Connection, id: &str, name: &str) -> Result<Option<TaskStep>> {
    conn.prepare_cached("SELECT name, attempt, at FROM task_steps WHERE task_id = ?1 AND name = ?2")
        .and_then(|mut st| {
            st.query_row([id, name], |r| {
                Ok(TaskStep {
                    name: r.get(0)?,
                    attempt: r.get(1)?,
                    at: r.get(2)?,
                })
            })
            .optional()
        })
        .map_err(map_err)
}

/// The steps of task `id` in the order they were done; `None`: no such task.
pub(crate) fn steps(conn: &Connection, id: &str) -> Result<Option<Vec<TaskStep>>> {
    if !exists(conn, id)? {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT name, attempt, at FROM task_steps WHERE task_id = ?1 ORDER BY at, name",
    )
    .and_then(|mut st| {
        st.query_map([id], |r| {
            Ok(TaskStep {
                name: r.get(0)?,
                attempt: r.get(1)?,
                at: r.get(2)?,
            })
        })?
        .collect()
    })
    .map(Some)
    .map_err(map_err)
}

/// Every held lock, with the pending tasks that want it (at most `max_waiting` looked at).
pub(crate) fn held_locks(conn: &Connection, max_waiting: u32) -> Result<Vec<HeldLock>> {
    let mut held: Vec<HeldLock> = conn
        .prepare_cached(
            "SELECT l.name, l.task_id, t.task_type, t.status, l.since, t.attempts, t.ending \
             FROM task_locks l JOIN tasks t ON t.id = l.task_id ORDER BY l.name",
        )
        .and_then(|mut st| {
            st.query_map([], |r| {
                let status: String = r.get(3)?;
                Ok(HeldLock {
                    name: r.get(0)?,
                    task_id: r.get(1)?,
                    task_type: r.get(2)?,
                    task_status: parse_status(&status, 3)?,
                    attempt: r.get(5)?,
                    ending: r.get(6)?,
                    since: r.get(4)?,
                    waiting: Vec::new(),
                })
            })?
            .collect()
        })
        .map_err(map_err)?;
    let pending: Vec<(String, String)> = conn
        .prepare_cached(
            "SELECT id, locks FROM tasks INDEXED BY tasks_locked \
             WHERE status = 'pending' AND locks IS NOT NULL ORDER BY next_run_at, id LIMIT ?1",
        )
        .and_then(|mut st| {
            st.query_map([max_waiting], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(map_err)?;
    for (id, locks) in pending {
        let locks: Vec<String> = serde_json::from_str(&locks).unwrap_or_default();
        for lock in held.iter_mut() {
            if lock.task_id != id && locks.contains(&lock.name) {
                lock.waiting.push(id.clone());
            }
        }
    }
    Ok(held)
}

fn exists(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")
        .and_then(|mut st| st.exists([id]))
        .map_err(map_err)
}

fn done(conn: &Connection, id: &str) -> Result<TaskAction> {
    get(conn, id)?
        .map(TaskAction::Done)
        .ok_or_else(|| StoreError::Database("task vanished".into()))
}

pub(crate) fn get(conn: &Connection, id: &str) -> Result<Option<Task>> {
    conn.prepare_cached(&format!("SELECT {COLUMNS} FROM tasks WHERE id = ?1"))
        .and_then(|mut st| st.query_row([id], row_to_task).optional())
        .map_err(map_err)
}

/// Oldest first; `after` is the id of the last task of the previous page.
pub(crate) fn list(
    conn: &Connection,
    filter: &crate::tasks::TaskFilter,
    limit: u32,
    after: Option<&str>,
) -> Result<TaskPage> {
    let mut rows: Vec<Task> = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM tasks WHERE (?1 IS NULL OR status = ?1) \
             AND (?2 IS NULL OR task_type = ?2) AND (?5 IS NULL OR created_at >= ?5) \
             AND (?6 IS NULL OR created_at < ?6) AND id > ?3 ORDER BY id LIMIT ?4"
        ))
        .and_then(|mut st| {
            st.query_map(
                params![
                    filter.status.map(TaskStatus::as_str),
                    filter.task_type,
                    after.unwrap_or(""),
                    i64::from(limit) + 1,
                    filter.created_after,
                    filter.created_before,
                ],
                row_to_task,
            )?
            .collect()
        })
        .map_err(map_err)?;
    let next_cursor = super::next_page(&mut rows, limit, |t| &t.id);
    Ok(TaskPage {
        tasks: rows,
        next_cursor,
    })
}

pub(crate) fn attempts(conn: &Connection, id: &str) -> Result<Option<Vec<TaskAttempt>>> {
    if !exists(conn, id)? {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT number, started_at, finished_at, outcome, exit_code, signal, error_code, error, \
         duration_ms, executor_id, output_bytes, output_truncated, killed, redactions \
         FROM task_attempts WHERE task_id = ?1 ORDER BY number",
    )
    .and_then(|mut st| {
        st.query_map([id], |r| {
            Ok(TaskAttempt {
                number: r.get(0)?,
                started_at: r.get(1)?,
                finished_at: r.get(2)?,
                outcome: r.get(3)?,
                exit_code: r.get(4)?,
                signal: r.get(5)?,
                error_code: r.get(6)?,
                error: r.get(7)?,
                duration_ms: r.get(8)?,
                executor_id: r.get(9)?,
                output_bytes: r.get::<_, Option<i64>>(10)?.map(|n| n.max(0) as u64),
                output_truncated: r.get(11)?,
                killed: r.get(12)?,
                redactions: r.get::<_, Option<i64>>(13)?.map(|n| n.max(0) as u64),
            })
        })?
        .collect()
    })
    .map(Some)
    .map_err(map_err)
}

pub(crate) fn transitions(conn: &Connection, id: &str) -> Result<Option<Vec<TaskTransition>>> {
    if !exists(conn, id)? {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT from_status, to_status, attempt, at, reason, note FROM task_transitions \
         WHERE task_id = ?1 ORDER BY seq",
    )
    .and_then(|mut st| {
        st.query_map([id], |r| {
            let from: Option<String> = r.get(0)?;
            let to: String = r.get(1)?;
            Ok(TaskTransition {
                from: from.map(|f| parse_status(&f, 0)).transpose()?,
                to: parse_status(&to, 1)?,
                attempt: r.get(2)?,
                at: r.get(3)?,
                reason: r.get(4)?,
                note: r.get(5)?,
            })
        })?
        .collect()
    })
    .map(Some)
    .map_err(map_err)
}

/// The earliest time a pending task of one of `types` is due, or a queue or retry deadline
/// passes (either needs the runner).
pub(crate) fn next_due(conn: &Connection, types: &[String]) -> Result<Option<Millis>> {
    let types = serde_json::to_string(types).map_err(|e| StoreError::Database(e.to_string()))?;
    let due: Option<Millis> = conn
        .prepare_cached(
            "SELECT next_run_at FROM tasks INDEXED BY tasks_due WHERE status = 'pending' \
             AND task_type IN (SELECT value FROM json_each(?1)) ORDER BY next_run_at LIMIT 1",
        )
        .and_then(|mut st| st.query_row([types], |r| r.get(0)).optional())
        .map_err(map_err)?;
    let mut deadlines = Vec::new();
    for sql in [
        "SELECT queue_deadline FROM tasks INDEXED BY tasks_queued WHERE status = 'pending' \
         AND attempts = 0 AND queue_deadline IS NOT NULL ORDER BY queue_deadline LIMIT 1",
        "SELECT retry_deadline FROM tasks INDEXED BY tasks_retry_deadline \
         WHERE status = 'pending' AND retry_deadline IS NOT NULL ORDER BY retry_deadline LIMIT 1",
    ] {
        let at: Option<Millis> = conn
            .prepare_cached(sql)
            .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
            .map_err(map_err)?;
        deadlines.extend(at);
    }
    let deadline = deadlines.into_iter().min();
    Ok([due, deadline].into_iter().flatten().min())
}

/// Tasks by status (every status, zeros included), from the counts the triggers keep.
pub(crate) fn counts(conn: &Connection) -> Result<Vec<(TaskStatus, u64)>> {
    let found: Vec<(String, u64)> = conn
        .prepare_cached("SELECT status, n FROM task_counts")
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(map_err)?;
    Ok(TaskStatus::ALL
        .into_iter()
        .map(|s| {
            let n = found
                .iter()
                .find(|(name, _)| name == s.as_str())
                .map_or(0, |(_, n)| *n);
            (s, n)
        })
        .collect())
}

fn parse_status(text: &str, column: usize) -> rusqlite::Result<TaskStatus> {
    text.parse().map_err(|e: crate::tasks::UnknownTaskStatus| {
        rusqlite::Error::FromSqlConversionFailure(column, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn row_to_task(r: &Row<'_>) -> rusqlite::Result<Task> {
    let status: String = r.get(5)?;
    Ok(Task {
        id: r.get(0)?,
        task_type: r.get(1)?,
        scope: r.get(2)?,
        idempotency_key: r.get(3)?,
        params: r.get(4)?,
        status: parse_status(&status, 5)?,
        attempts: r.get(6)?,
        max_attempts: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        started_at: r.get(10)?,
        finished_at: r.get(11)?,
        next_run_at: r.get(12)?,
        not_before: r.get(13)?,
        queue_deadline: r.get(14)?,
        retry_deadline: r.get(15)?,
        lease_until: r.get(16)?,
        executor_id: r.get(17)?,
        error_code: r.get(18)?,
        error: r.get(19)?,
        exit_code: r.get(20)?,
        signal: r.get(21)?,
        result_summary: r.get(22)?,
        cancel_requested: r.get(23)?,
        locks: json_list(r, 24)?,
        completed_steps: json_list(r, 25)?,
        ending: r.get(26)?,
    })
}

/// A column holding a JSON array of strings (NULL: empty).
fn json_list(r: &Row<'_>, column: usize) -> rusqlite::Result<Vec<String>> {
    let text: Option<String> = r.get(column)?;
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(
                column,
                rusqlite::types::Type::Text,
                Box::new(e),
            )
        }),
    }
}
