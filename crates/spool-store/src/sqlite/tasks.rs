//! The SQL behind tasks that is SQLite's own: submission, claims, deadlines, take-overs, steps,
//! leases and reads. Every status change goes through `task_changes::change` (written once for
//! both backends), which checks the state machine ([`TaskStatus::can_become`]), fences on the
//! current status, bumps the log sequence and appends the transition, all in the caller's
//! transaction; an attempt's start and end and an operator's actions are written there too.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::map_err;
use crate::claim::{LockTable, TaskCandidate, TaskClaimPass};
use crate::error::{Result, StoreError};
use crate::model::Millis;
use crate::sql::{ready, Value};
use crate::task_changes;
use crate::tasks::{
    ClaimType, Claimed, Executor, HeldLock, NewTask, Orphaned, Renewed, StepRecord, Task,
    TaskAttempt, TaskInsert, TaskPage, TaskStatus, TaskStep,
};

const COLUMNS: &str = "id, task_type, scope, idempotency_key, params, status, attempts, \
     max_attempts, created_at, updated_at, started_at, finished_at, next_run_at, not_before, \
     queue_deadline, retry_deadline, lease_until, executor_id, error_code, error, exit_code, \
     signal, result_summary, cancel_requested, locks, \
     (SELECT json_group_array(name) FROM (SELECT name FROM task_steps \
      WHERE task_steps.task_id = tasks.id ORDER BY at, name)), ending";

/// Submit a task (see [`task_changes::submit`]).
pub(crate) fn insert(conn: &Connection, new: &NewTask, now: Millis) -> Result<TaskInsert> {
    ready(task_changes::submit(conn, new, now))
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
        ready(task_changes::time_out(
            conn,
            id,
            (*attempts, *queue_deadline),
            now,
        ))?;
    }
    Ok(due.len() as u64)
}

/// Claim up to `limit` due pending tasks of the given types (oldest due first, submission order
/// among equals) for one attempt each: `running`, attempt counted and recorded, leased.
///
/// Which ones, and which are passed over for a quota or a lock, is decided by
/// [`TaskClaimPass`]; this reads the candidates and starts what it chose.
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
    let running = if TaskClaimPass::counts_running(types) {
        running_by_type(conn)?
    } else {
        HashMap::new()
    };
    let mut pass = TaskClaimPass::new(types, limit, running);
    let mut st = conn
        .prepare_cached(
            "SELECT id, task_type, locks FROM tasks INDEXED BY tasks_due WHERE status = 'pending' \
             AND next_run_at <= ?1 AND task_type IN (SELECT value FROM json_each(?2)) \
             ORDER BY next_run_at, id",
        )
        .map_err(map_err)?;
    let mut rows = st.query(params![now, names]).map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        let candidate = TaskCandidate {
            id: row.get(0).map_err(map_err)?,
            task_type: row.get(1).map_err(map_err)?,
            locks: row.get(2).map_err(map_err)?,
        };
        if !ready(pass.consider(candidate, &mut LockHolders(conn)))? {
            break;
        }
    }
    drop(rows);
    drop(st);
    out.waiting = pass.waiting;
    for take in pass.take {
        for name in &take.locks {
            conn.prepare_cached(
                "INSERT INTO task_locks (name, task_id, since) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![name, take.id, now]))
            .map_err(map_err)?;
        }
        out.tasks.push(ready(task_changes::start(
            conn,
            &take.id,
            now,
            (lease_ms, executor),
            take.kill_grace_ms,
        ))?);
    }
    Ok(out)
}

/// Running tasks by type.
fn running_by_type(conn: &Connection) -> Result<HashMap<String, u32>> {
    conn.prepare_cached(
        "SELECT task_type, COUNT(*) FROM tasks INDEXED BY tasks_status \
         WHERE status = 'running' GROUP BY task_type",
    )
    .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
    .map_err(map_err)
}

/// The lock table, read inside the writer's transaction.
struct LockHolders<'c>(&'c Connection);

impl LockTable for LockHolders<'_> {
    async fn holders(&mut self, names: &[String]) -> Result<HashMap<String, String>> {
        let mut st = self
            .0
            .prepare_cached("SELECT task_id FROM task_locks WHERE name = ?1")
            .map_err(map_err)?;
        let mut held = HashMap::new();
        for name in names {
            let holder: Option<String> = st
                .query_row([name], |r| r.get(0))
                .optional()
                .map_err(map_err)?;
            if let Some(holder) = holder {
                held.insert(name.clone(), holder);
            }
        }
        Ok(held)
    }
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
        let (host, kill_grace_ms) = orphan_attempt(conn, &id, attempt)?;
        out.push(Orphaned {
            id,
            task_type,
            attempt,
            claim_seq,
            code,
            host,
            lease_until,
            kill_grace_ms,
        });
    }
    Ok(out)
}

/// What the attempt row of an orphaned task recorded: where it ran, its kill grace.
fn orphan_attempt(conn: &Connection, id: &str, attempt: u32) -> Result<(String, i64)> {
    let found: Option<(Option<String>, Option<i64>)> = conn
        .prepare_cached(
            "SELECT host, kill_grace_ms FROM task_attempts WHERE task_id = ?1 AND number = ?2",
        )
        .and_then(|mut st| {
            st.query_row(params![id, attempt], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(map_err)?;
    let (host, grace) = found.unwrap_or((None, None));
    Ok((
        host.unwrap_or_default(),
        grace.unwrap_or(crate::tasks::DEFAULT_KILL_GRACE_MS),
    ))
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
        ready(task_changes::change(
            conn,
            &id,
            TaskStatus::Pending,
            TaskStatus::ManualReview,
            now,
            "type_undeclared",
            Some(&note),
            "next_run_at = NULL, error_code = 'type_undeclared', error = ?3",
            &[Value::from(&note)],
        ))?;
        ids.push(id);
    }
    Ok(ids)
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

impl task_changes::TaskRows for Connection {
    /// The task; SQLite's one writer already keeps its row from changing.
    async fn task_for_update(&self, id: &str) -> Result<Option<Task>> {
        get(self, id)
    }

    async fn task(&self, id: &str) -> Result<Option<Task>> {
        get(self, id)
    }
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
