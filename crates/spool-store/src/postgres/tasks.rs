//! The SQL behind tasks on PostgreSQL: the same rules as `sqlite/tasks.rs`, for several hosts
//! writing one database at once. Every status change goes through `task_changes::change`
//! (written once for both backends), which checks the state machine
//! ([`TaskStatus::can_become`]), fences on the current status, bumps the log sequence and
//! appends the transition, all in the caller's transaction; an attempt's start and end and an
//! operator's actions are written there too, their `SELECT`s locking with `FOR UPDATE`
//! (`Sql::FOR_UPDATE`, `TaskRows::task_for_update`).
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

use super::{exec, get as column, int, map_err, one, opt_int, row, rows, Tx};
use crate::claim::{LockTable, TaskCandidate, TaskClaimPass, CLAIM_SCAN};
use crate::error::{Result, StoreError};
use crate::model::Millis;
use crate::sql::Value;
use crate::task_changes;
use crate::tasks::{
    ClaimType, Claimed, Executor, HeldLock, NewTask, Orphaned, Renewed, StepRecord, Task,
    TaskAttempt, TaskInsert, TaskPage, TaskStatus, TaskStep,
};

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

/// Submit a task (see [`task_changes::submit`]).
pub(crate) async fn insert(tx: &Tx<'_>, new: &NewTask, now: Millis) -> Result<TaskInsert> {
    task_changes::submit(tx, new, now).await
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
        let attempts: u32 = int(r, "attempts")?;
        let queue_deadline: Option<Millis> = column(r, "queue_deadline")?;
        task_changes::time_out(tx, &id, (attempts, queue_deadline), now).await?;
    }
    Ok(locked.len() as u64)
}

/// Claim up to `limit` due pending tasks of the given types (oldest due first, submission order
/// among equals) for one attempt each: `running`, attempt counted and recorded, leased.
///
/// Which ones, and which are passed over for a quota or a lock, is decided by
/// [`TaskClaimPass`]; this reads the candidates and starts what it chose.
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
    let running = if TaskClaimPass::counts_running(types) {
        running_by_type(tx).await?
    } else {
        HashMap::new()
    };
    let mut pass = TaskClaimPass::new(types, limit, running);
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
    'scan: loop {
        let batch = tx.query_portal(&portal, chunk).await.map_err(map_err)?;
        let exhausted = batch.len() < chunk as usize;
        for r in &batch {
            let candidate = TaskCandidate {
                id: column(r, "id")?,
                task_type: column(r, "task_type")?,
                locks: column(r, "locks")?,
            };
            if !pass.consider(candidate, &mut LockHolders(tx)).await? {
                break 'scan;
            }
        }
        if exhausted {
            break;
        }
    }
    drop(portal);
    out.waiting = pass.waiting;
    if pass.take.is_empty() {
        return Ok(out);
    }
    // Lock the chosen tasks (in id order) and keep those still pending and due: an operator or
    // a deadline (not a claim: the gate keeps those out) may have ended one since the scan.
    // Passing one over only leaves its quota slot and locks unused until the next claim.
    let ids: Vec<String> = pass.take.iter().map(|t| t.id.clone()).collect();
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
    for take in pass.take {
        if !still.contains(&take.id) {
            continue;
        }
        if !take.locks.is_empty() {
            // Free, or held by this task already (kept through a retry's backoff): no other
            // claim can take one meanwhile.
            exec(
                tx,
                "INSERT INTO task_locks (name, task_id, since) \
                 SELECT name, $2, $3 FROM unnest($1::text[]) AS wanted(name) \
                 ON CONFLICT (name) DO NOTHING",
                &[&take.locks, &take.id, &now],
            )
            .await?;
        }
        out.tasks.push(
            task_changes::start(tx, &take.id, now, (lease_ms, executor), take.kill_grace_ms)
                .await?,
        );
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

/// The lock table, read inside the claim's transaction.
struct LockHolders<'a, 't>(&'a Tx<'t>);

impl LockTable for LockHolders<'_, '_> {
    async fn holders(&mut self, names: &[String]) -> Result<HashMap<String, String>> {
        rows(
            self.0,
            "SELECT name, task_id FROM task_locks WHERE name = ANY($1::text[])",
            &[&names],
        )
        .await?
        .iter()
        .map(|r| Ok((column(r, "name")?, column(r, "task_id")?)))
        .collect()
    }
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
        let attempt = int::<u32>(&before, "attempts")?;
        let a = row(
            tx,
            "SELECT host, kill_grace_ms FROM task_attempts WHERE task_id = $1 AND number = $2",
            &[&id, &i64::from(attempt)],
        )
        .await?;
        let (host, kill_grace_ms) = match a {
            Some(a) => (
                column::<Option<String>>(&a, "host")?.unwrap_or_default(),
                column::<Option<i64>>(&a, "kill_grace_ms")?
                    .unwrap_or(crate::tasks::DEFAULT_KILL_GRACE_MS),
            ),
            None => (String::new(), crate::tasks::DEFAULT_KILL_GRACE_MS),
        };
        out.push(Orphaned {
            id,
            task_type: column(&before, "task_type")?,
            attempt,
            claim_seq: int::<u32>(&after, "claim_seq")?,
            code: column(&after, "ending")?,
            host,
            lease_until: lease_until.unwrap_or(now),
            kill_grace_ms,
        });
    }
    Ok(out)
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
        task_changes::change(
            tx,
            &id,
            TaskStatus::Pending,
            TaskStatus::ManualReview,
            now,
            "type_undeclared",
            Some(&note),
            "next_run_at = NULL, error_code = 'type_undeclared', error = $3",
            &[Value::from(&note)],
        )
        .await?;
        ids.push(id);
    }
    Ok(ids)
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
    let current_attempt = int::<u32>(&current, "attempts")?;
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
        attempt: int::<u32>(r, "attempt")?,
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
            attempt: int::<u32>(r, "attempts")?,
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

impl task_changes::TaskRows for Tx<'_> {
    async fn task_for_update(&self, id: &str) -> Result<Option<Task>> {
        get_locked(self, id).await
    }

    async fn task(&self, id: &str) -> Result<Option<Task>> {
        get(self, id).await
    }
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
            number: int::<u32>(r, "number")?,
            started_at: column(r, "started_at")?,
            finished_at: column(r, "finished_at")?,
            outcome: column(r, "outcome")?,
            exit_code: opt_int::<i32>(r, "exit_code")?,
            signal: opt_int::<i32>(r, "signal")?,
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
        attempts: int::<u32>(r, "attempts")?,
        max_attempts: int::<u32>(r, "max_attempts")?,
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
        exit_code: opt_int::<i32>(r, "exit_code")?,
        signal: opt_int::<i32>(r, "signal")?,
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
