//! The embedded backend: one SQLite file in WAL mode with `synchronous=FULL`.
//!
//! **Invariant:** only the writer thread holds a write connection; readers use their own
//! read-only connections and never see uncommitted state. The database file is owned by one
//! process at a time, enforced by an exclusive lock on the file itself (`flock`), so a second
//! opener is refused whatever path it took: a symlink, a hard link, another spelling.

mod checkpoint;
mod deliveries;
mod schema;
mod status_log;
mod tasks;
mod transfer;
mod writer;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Notify, Semaphore};

pub use schema::LATEST as SCHEMA_VERSION;
pub use writer::{CommitObserver, WriterStats};

use crate::clock::Clock;
use crate::error::{Result, StoreError};
use crate::model::{
    Applied, Attempt, AttemptResult, Capacity, Check, CheckResult, ClaimBatch, Delivery,
    DeliveryStatus, InsertOutcome, Millis, NewDelivery, OriginCounts, Page, Reclaimed, Reservation,
    Resolution, StartOutcome, Stats, Taken, Transition, TransitionOutcome,
};
use crate::sql::{self, sqlite_placeholders, Cell, Sql, Value};
use crate::tasks::{
    ClaimType, Claimed, ClaimedTask, Executor, HeldLock, NewTask, OrphanEnd, Orphaned, Renewed,
    StepRecord, Task, TaskAction, TaskAttempt, TaskAttemptEnd, TaskInsert, TaskPage, TaskStatus,
    TaskStep, TaskTransition,
};

/// Room a readiness probe must find after a write has failed for lack of space: as much as the
/// largest delivery body the API accepts.
pub const SPACE_PROBE_BYTES: u64 = 1 << 20;

/// Prepared statements kept per connection: more than the store has distinct statements.
const STATEMENT_CACHE: usize = 128;

/// How to open the SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteConfig {
    pub path: PathBuf,
    /// Refuse new deliveries once the database uses this many bytes; 0 = no limit.
    pub max_db_bytes: u64,
    /// Read connections kept open.
    pub readers: usize,
    /// The clock due times and leases are decided on.
    pub clock: Clock,
}

impl SqliteConfig {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteConfig {
            path: path.into(),
            max_db_bytes: 0,
            readers: 4,
            clock: Clock::system(),
        }
    }
}

/// The durability settings in force on the write connection, as SQLite reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    /// `PRAGMA journal_mode`, lowercase (`wal`).
    pub journal_mode: String,
    /// `PRAGMA synchronous`: 2 is FULL.
    pub synchronous: i64,
}

/// A handle to an open SQLite store. Cheap to clone.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

// Fields drop in order: the writer (which finishes queued writes and closes its connection) and
// the readers go before the lock, so the next owner never overlaps with this one.
struct Inner {
    path: PathBuf,
    max_db_bytes: u64,
    writer: writer::Writer,
    // Declared after the writer: it is dropped (stopped) after the writer has finished.
    _checkpointer: checkpoint::Checkpointer,
    readers: Mutex<Vec<Connection>>,
    // One permit per pooled connection. The permit travels with the connection into the
    // blocking task, so it is returned only after the connection is back in the pool.
    reader_permits: Arc<Semaphore>,
    /// See [`SqliteStore::work_available`].
    work_available: Arc<Notify>,
    /// See [`SqliteStore::tasks_available`].
    tasks_available: Arc<Notify>,
    clock: Clock,
    // The database file, locked (`flock`) for the life of the store: dropping it releases the
    // lock. Dropped last: closing a descriptor of the file would also drop SQLite's own POSIX
    // locks on it, so no connection may still be open then.
    lock: File,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Open (creating if needed) the database, take the exclusive lock, check durability
    /// settings, and migrate the schema.
    pub fn open(config: &SqliteConfig) -> Result<SqliteStore> {
        let path = config.path.clone();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| {
                        io_err(format!("cannot create data directory {}", dir.display()), e)
                    })?;
            }
        }
        let (lock, fresh) = lock_database(&path)?;
        let conn = open_read_write(&path)?;
        if !fresh {
            // Before anything is set: another program's database is refused unchanged.
            schema::check(&conn).map_err(|e| schema_error(&path, e))?;
        }
        prepare_writer(&conn, &path, fresh)?;
        schema::migrate(&conn).map_err(|e| schema_error(&path, e))?;
        journal_jobs_in_memory(&conn)?;
        let mut readers = Vec::with_capacity(config.readers.max(1));
        for _ in 0..config.readers.max(1) {
            let r = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| corrupt_or(&path, e))?;
            r.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
            stable_plans(&r)?;
            r.busy_timeout(std::time::Duration::from_secs(5))
                .map_err(map_err)?;
            readers.push(r);
        }
        let signal = Arc::new(checkpoint::CheckpointSignal::default());
        let checkpoint_conn = open_read_write(&path)?;
        checkpoint_conn
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(map_err)?;
        let checkpointer = checkpoint::Checkpointer::spawn(checkpoint_conn, Arc::clone(&signal))
            .map_err(|e| io_err("cannot start the checkpoint thread".into(), e))?;
        let reopen_path = path.clone();
        let reopen: writer::Reopen = Box::new(move || {
            let conn = open_read_write(&reopen_path)?;
            prepare_writer(&conn, &reopen_path, false)?;
            journal_jobs_in_memory(&conn)?;
            Ok(conn)
        });
        let writer = writer::Writer::spawn(conn, reopen, signal, config.clock.clone())?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                max_db_bytes: config.max_db_bytes,
                writer,
                _checkpointer: checkpointer,
                reader_permits: Arc::new(Semaphore::new(readers.len())),
                work_available: Arc::new(Notify::new()),
                tasks_available: Arc::new(Notify::new()),
                clock: config.clock.clone(),
                readers: Mutex::new(readers),
                lock,
            }),
        })
    }

    /// Notified (on the writer thread, right after the commit) whenever a write made work due:
    /// a created delivery, an operator's retry, a claim given back. It does not depend on the
    /// caller still waiting for its answer.
    pub fn work_available(&self) -> Arc<Notify> {
        Arc::clone(&self.inner.work_available)
    }

    fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.inner.work_available))
    }

    /// Notified after a commit that made a task due or asked to cancel a running one.
    pub fn tasks_available(&self) -> Arc<Notify> {
        Arc::clone(&self.inner.tasks_available)
    }

    fn task_waker(&self) -> Waker {
        Waker(Arc::clone(&self.inner.tasks_available))
    }

    pub async fn insert_task(&self, new: NewTask) -> Result<TaskInsert> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| tasks::insert(c, &new, now),
                move |r| wake.when(matches!(r, Ok(TaskInsert::Created(_)))),
            )
            .await
    }

    pub async fn claim_tasks(
        &self,
        limit: u32,
        types: Vec<ClaimType>,
        lease_ms: i64,
        executor: Executor,
    ) -> Result<Claimed> {
        self.inner
            .writer
            .write(move |c, now| tasks::claim(c, now, limit, &types, lease_ms, &executor))
            .await
    }

    pub async fn finish_task(&self, end: TaskAttemptEnd) -> Result<Option<TaskStatus>> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| crate::sql::ready(crate::task_changes::finish(c, &end, now)),
                move |r| wake.when(matches!(r, Ok(Some(TaskStatus::Pending)))),
            )
            .await
    }

    /// See [`crate::Store::finish_and_claim`].
    pub async fn finish_and_claim(
        &self,
        end: TaskAttemptEnd,
        types: Vec<ClaimType>,
        lease_ms: i64,
        executor: Executor,
    ) -> Result<(Option<TaskStatus>, Option<ClaimedTask>)> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    let status = crate::sql::ready(crate::task_changes::finish(c, &end, now))?;
                    let next = tasks::claim(c, now, 1, &types, lease_ms, &executor)?;
                    Ok((status, next.tasks.into_iter().next()))
                },
                move |r| wake.when(matches!(r, Ok((Some(TaskStatus::Pending), _)))),
            )
            .await
    }

    pub async fn expire_tasks(&self, limit: u32) -> Result<u64> {
        self.inner
            .writer
            .write(move |c, now| tasks::expire(c, now, limit))
            .await
    }

    pub async fn cancel_task(&self, id: String) -> Result<TaskAction> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| crate::sql::ready(crate::task_changes::cancel(c, &id, now)),
                move |r| wake.when(matches!(r, Ok(TaskAction::CancelRequested(_)))),
            )
            .await
    }

    pub async fn retry_task(&self, id: String, extra_attempts: u32) -> Result<TaskAction> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    crate::sql::ready(crate::task_changes::retry(c, &id, extra_attempts, now))
                },
                move |r| wake.when(matches!(r, Ok(TaskAction::Done(_)))),
            )
            .await
    }

    pub async fn decide_task(
        &self,
        id: String,
        to: TaskStatus,
        reason: String,
        note: Option<String>,
    ) -> Result<TaskAction> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    let why = (to, reason.as_str(), note.as_deref());
                    crate::sql::ready(crate::task_changes::decide(c, &id, why, now))
                },
                move |r| {
                    wake.when(
                        matches!(r, Ok(TaskAction::Done(t)) if t.status == TaskStatus::Pending),
                    )
                },
            )
            .await
    }

    pub async fn recover_tasks(&self, executor: Executor, lease_ms: i64) -> Result<Vec<Orphaned>> {
        self.inner
            .writer
            .write(move |c, now| tasks::recover(c, now, &executor, lease_ms))
            .await
    }

    pub async fn expire_task_leases(
        &self,
        executor: Executor,
        lease_ms: i64,
    ) -> Result<Vec<Orphaned>> {
        self.inner
            .writer
            .write(move |c, now| tasks::expire_leases(c, now, &executor, lease_ms))
            .await
    }

    pub async fn take_over_tasks_from(
        &self,
        dead: Vec<String>,
        executor: Executor,
        lease_ms: i64,
    ) -> Result<Vec<Orphaned>> {
        self.inner
            .writer
            .write(move |c, now| tasks::take_over_from(c, now, &dead, &executor, lease_ms))
            .await
    }

    pub async fn task_executors_on(&self, host: String, me: String) -> Result<Vec<String>> {
        self.read(move |c| tasks::executors_on(c, &host, &me)).await
    }

    pub async fn settle_orphan(&self, end: OrphanEnd) -> Result<Option<TaskStatus>> {
        let wake = self.task_waker();
        self.inner
            .writer
            .write_then(
                move |c, now| crate::sql::ready(crate::task_changes::settle_orphan(c, &end, now)),
                // Its locks and quota slot are free now, and it may be pending again.
                move |r| wake.when(matches!(r, Ok(Some(_)))),
            )
            .await
    }

    pub async fn review_undeclared_tasks(&self, declared: Vec<String>) -> Result<Vec<String>> {
        self.inner
            .writer
            .write(move |c, now| tasks::review_undeclared(c, &declared, now))
            .await
    }

    pub async fn renew_task_leases(
        &self,
        running: Vec<(String, u32)>,
        lease_ms: i64,
    ) -> Result<Vec<Renewed>> {
        self.inner
            .writer
            .write(move |c, now| tasks::renew_leases(c, now, &running, lease_ms))
            .await
    }

    pub async fn record_task_step(
        &self,
        id: String,
        attempt: u32,
        name: String,
    ) -> Result<StepRecord> {
        self.inner
            .writer
            .write(move |c, now| tasks::record_step(c, &id, attempt, &name, now))
            .await
    }

    pub async fn task_steps(&self, id: String) -> Result<Option<Vec<TaskStep>>> {
        self.read(move |c| tasks::steps(c, &id)).await
    }

    pub async fn held_task_locks(&self, max_waiting: u32) -> Result<Vec<HeldLock>> {
        self.read(move |c| tasks::held_locks(c, max_waiting)).await
    }

    pub async fn get_task(&self, id: String) -> Result<Option<Task>> {
        self.read(move |c| tasks::get(c, &id)).await
    }

    pub async fn list_tasks(
        &self,
        filter: crate::tasks::TaskFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<TaskPage> {
        self.read(move |c| tasks::list(c, &filter, limit, after.as_deref()))
            .await
    }

    pub async fn task_attempts(&self, id: String) -> Result<Option<Vec<TaskAttempt>>> {
        self.read(move |c| tasks::attempts(c, &id)).await
    }

    pub async fn task_transitions(&self, id: String) -> Result<Option<Vec<TaskTransition>>> {
        self.read(move |c| status_log::read(c, &id)).await
    }

    pub async fn next_task_due(&self, types: Vec<String>) -> Result<Option<Millis>> {
        self.read(move |c| tasks::next_due(c, &types)).await
    }

    pub async fn task_counts(&self) -> Result<Vec<(TaskStatus, u64)>> {
        self.read(tasks::counts).await
    }

    /// The store's clock: due times and leases are decided on it (read in the writer).
    pub fn now_ms(&self) -> Millis {
        self.inner.clock.now_ms()
    }

    pub fn writer_stats(&self) -> &WriterStats {
        &self.inner.writer.stats
    }

    pub async fn insert(&self, new: NewDelivery) -> Result<InsertOutcome> {
        let limit = self.inner.max_db_bytes;
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| deliveries::insert(c, &new, now, limit),
                move |r| wake.when(r.as_ref().is_ok_and(InsertOutcome::wakes)),
            )
            .await
    }

    pub async fn claim_due(
        &self,
        limit: u32,
        capacity: Capacity,
        lease_ms: i64,
    ) -> Result<ClaimBatch> {
        self.inner
            .writer
            .write(move |c, now| deliveries::claim(c, now, limit, capacity, lease_ms))
            .await
    }

    pub async fn complete(&self, result: AttemptResult) -> Result<Applied> {
        self.inner
            .writer
            .write(move |c, now| deliveries::complete(c, &result, now))
            .await
    }

    /// See [`crate::Store::reserve_next`].
    pub async fn reserve_next(&self, origin: String, lease_ms: i64) -> Result<Option<Reservation>> {
        self.inner
            .writer
            .write(move |c, now| deliveries::reserve_next(c, &origin, now, lease_ms))
            .await
    }

    /// See [`crate::Store::take_next`].
    pub async fn take_next(&self, origin: String, lease_ms: i64) -> Result<Option<Taken>> {
        self.inner
            .writer
            .write(move |c, now| deliveries::take_next(c, &origin, now, lease_ms))
            .await
    }

    /// See [`crate::Store::start`].
    pub async fn start(&self, reservation: Reservation, lease_ms: i64) -> Result<StartOutcome> {
        self.inner
            .writer
            .write(move |c, now| deliveries::start(c, &reservation, now, lease_ms))
            .await
    }

    /// See [`crate::Store::release`].
    pub async fn release(&self, id: String, claim_seq: u32) -> Result<bool> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    crate::sql::ready(crate::delivery_changes::release(
                        c, &id, claim_seq, now, "released",
                    ))
                },
                move |r| wake.when(matches!(r, Ok(true))),
            )
            .await
    }

    /// See [`crate::Store::unstart`].
    pub async fn unstart(&self, id: String, claim_seq: u32) -> Result<bool> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    crate::sql::ready(crate::delivery_changes::unstart(c, &id, claim_seq, now))
                },
                move |r| wake.when(matches!(r, Ok(true))),
            )
            .await
    }

    /// See [`crate::Store::park`].
    pub async fn park(&self, id: String, claim_seq: u32, started: bool) -> Result<bool> {
        self.inner
            .writer
            .write(move |c, now| {
                crate::sql::ready(crate::delivery_changes::park(
                    c, &id, claim_seq, started, now,
                ))
            })
            .await
    }

    /// See [`crate::Store::park_url`].
    pub async fn park_url(&self, origin: String, url: String) -> Result<u64> {
        self.inner
            .writer
            .write(move |c, now| {
                crate::sql::ready(crate::delivery_changes::park_url(c, &origin, &url, now))
            })
            .await
    }

    /// See [`crate::Store::unpark`].
    pub async fn unpark(&self, origin: String, url: Option<String>) -> Result<u64> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    crate::sql::ready(crate::delivery_changes::unpark(
                        c,
                        &origin,
                        url.as_deref(),
                        now,
                    ))
                },
                move |r| wake.when(matches!(r, Ok(n) if *n > 0)),
            )
            .await
    }

    /// See [`crate::Store::parked_urls`].
    pub async fn parked_urls(&self, limit: u32) -> Result<Vec<String>> {
        self.read(move |c| deliveries::parked_urls(c, limit)).await
    }

    /// See [`crate::Store::recover`].
    pub async fn recover(&self, check_in_ms: i64) -> Result<Reclaimed> {
        self.inner
            .writer
            .write(move |c, now| deliveries::recover(c, now, check_in_ms))
            .await
    }

    /// See [`crate::Store::renew_and_reclaim`].
    pub async fn renew_and_reclaim(
        &self,
        live: Vec<(String, u32)>,
        lease_ms: i64,
        check_in_ms: i64,
    ) -> Result<Reclaimed> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| deliveries::renew_and_reclaim(c, &live, now, lease_ms, check_in_ms),
                move |r| wake.when(matches!(r, Ok(taken) if taken.total() > 0)),
            )
            .await
    }

    pub async fn expire_overdue(&self, limit: u32) -> Result<u64> {
        self.inner
            .writer
            .write(move |c, now| deliveries::expire_overdue(c, now, limit))
            .await
    }

    pub async fn cancel(&self, id: String) -> Result<TransitionOutcome> {
        self.inner
            .writer
            .write(move |c, now| crate::sql::ready(crate::delivery_changes::cancel(c, &id, now)))
            .await
    }

    pub async fn retry(&self, id: String) -> Result<TransitionOutcome> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| crate::sql::ready(crate::delivery_changes::retry(c, &id, now)),
                move |r| wake.when(matches!(r, Ok(TransitionOutcome::Done(_)))),
            )
            .await
    }

    pub async fn retry_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| {
                    ids.iter()
                        .map(|id| crate::sql::ready(crate::delivery_changes::retry(c, id, now)))
                        .collect()
                },
                move |r| {
                    wake.when(r.as_ref().is_ok_and(|o: &Vec<TransitionOutcome>| {
                        o.iter().any(TransitionOutcome::is_done)
                    }))
                },
            )
            .await
    }

    pub async fn cancel_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        self.inner
            .writer
            .write(move |c, now| {
                ids.iter()
                    .map(|id| crate::sql::ready(crate::delivery_changes::cancel(c, id, now)))
                    .collect()
            })
            .await
    }

    /// See [`crate::Store::resolve`].
    pub async fn resolve(
        &self,
        id: String,
        resolution: Resolution,
        note: String,
    ) -> Result<TransitionOutcome> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, now| crate::sql::ready(crate::delivery_changes::resolve(c, &id, &resolution, &note, now)),
                move |r| wake.when(matches!(r, Ok(TransitionOutcome::Done(d)) if d.status == DeliveryStatus::Pending)),
            )
            .await
    }

    /// See [`crate::Store::late_answer`].
    pub async fn late_answer(&self, result: AttemptResult) -> Result<bool> {
        self.inner
            .writer
            .write(move |c, now| {
                crate::sql::ready(crate::delivery_changes::late_answer(c, &result, now))
            })
            .await
    }

    /// See [`crate::Store::record_check`].
    pub async fn record_check(&self, result: CheckResult) -> Result<Applied> {
        self.inner
            .writer
            .write(move |c, now| {
                crate::sql::ready(crate::delivery_changes::record_check(c, &result, now))
            })
            .await
    }

    pub async fn due_checks(&self, limit: u32) -> Result<Vec<Delivery>> {
        let now = self.now_ms();
        self.read(move |c| deliveries::due_checks(c, now, limit))
            .await
    }

    pub async fn next_check(&self) -> Result<Option<Millis>> {
        self.read(deliveries::next_check).await
    }

    pub async fn waiting_on_secret(&self, secret: String) -> Result<u64> {
        self.read(move |c| deliveries::waiting_on_secret(c, &secret))
            .await
    }

    pub async fn checks(&self, id: String) -> Result<Option<Vec<Check>>> {
        self.read(move |c| deliveries::checks(c, &id)).await
    }

    /// See [`crate::Store::purge_finished`].
    pub async fn purge_finished(&self, older_than_ms: i64, limit: u32) -> Result<u64> {
        let removed = self
            .inner
            .writer
            .write(move |c, now| deliveries::purge_finished(c, now - older_than_ms, limit))
            .await?;
        if removed > 0 {
            // A separate, small job: space comes back in steps without holding the writer long.
            self.inner
                .writer
                .write(|c, _| deliveries::reclaim_space(c, 2048))
                .await?;
        }
        Ok(removed)
    }

    /// A small real write that must reach the disk: proves the store can write right now.
    /// After a write has failed for lack of space, the filesystem must also have room for
    /// [`SPACE_PROBE_BYTES`] again: a small write alone proves nothing then, as it fits in the
    /// end of the WAL that the failed write had already extended, while every create goes on
    /// failing. That room is read from the filesystem, not written.
    pub async fn ping(&self) -> Result<()> {
        let stats = &self.inner.writer.stats;
        // Cleared before probing, so a failure that comes in meanwhile sets it again.
        if stats.short_of_space.swap(false, Ordering::Relaxed) {
            let free = self.free_bytes().inspect_err(|_| {
                stats.short_of_space.store(true, Ordering::Relaxed);
            })?;
            if free < SPACE_PROBE_BYTES {
                stats.short_of_space.store(true, Ordering::Relaxed);
                return Err(StoreError::DiskFull(format!(
                    "{free} bytes free on the database's filesystem; waiting for at least \
                     {SPACE_PROBE_BYTES}"
                )));
            }
        }
        self.inner
            .writer
            .write(|c, now| {
                c.execute(
                    "INSERT INTO meta (key, value) VALUES ('last_ping', ?1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    [now.to_string()],
                )
                .map_err(map_err)
                .map(drop)
            })
            .await
    }

    /// Bytes an unprivileged writer may still use on the database's filesystem.
    fn free_bytes(&self) -> Result<u64> {
        let vfs = rustix::fs::fstatvfs(&self.inner.lock).map_err(|e| {
            io_err(
                format!("cannot read free space of {}", self.inner.path.display()),
                e.into(),
            )
        })?;
        Ok(vfs.f_bavail.saturating_mul(vfs.f_frsize))
    }

    /// Read the durability settings back from the write connection. `synchronous` is a
    /// per-connection setting, so no other connection can observe it.
    pub async fn durability(&self) -> Result<Durability> {
        self.inner
            .writer
            .write(|c, _| {
                let journal_mode: String = c
                    .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                    .map_err(map_err)?;
                let synchronous: i64 = c
                    .query_row("PRAGMA synchronous", [], |r| r.get(0))
                    .map_err(map_err)?;
                Ok(Durability {
                    journal_mode: journal_mode.to_ascii_lowercase(),
                    synchronous,
                })
            })
            .await
    }

    pub async fn get(&self, id: String) -> Result<Option<Delivery>> {
        self.read(move |c| deliveries::get(c, &id)).await
    }

    /// See [`crate::Store::export`].
    pub async fn export(&self, id: String) -> Result<Option<crate::model::DeliveryRecord>> {
        // One snapshot: the delivery and its attempts, transitions and checks are read by
        // several statements, each of which would otherwise see the database as of its own
        // moment (a row one step past its log, for a delivery that is changing).
        self.read(move |c| snapshot(c, |c| transfer::export(c, &id)))
            .await
    }

    /// See [`crate::Store::import`].
    pub async fn import(
        &self,
        record: crate::model::DeliveryRecord,
    ) -> Result<crate::model::ImportOutcome> {
        let wake = self.waker();
        self.inner
            .writer
            .write_then(
                move |c, _now| transfer::import(c, &record),
                move |r| wake.when(matches!(r, Ok(crate::model::ImportOutcome::Imported))),
            )
            .await
    }

    pub async fn list(
        &self,
        filter: crate::model::ListFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<Page> {
        self.read(move |c| deliveries::list(c, &filter, limit, after.as_deref()))
            .await
    }

    pub async fn attempts(&self, id: String) -> Result<Option<Vec<Attempt>>> {
        self.read(move |c| deliveries::attempts(c, &id)).await
    }

    pub async fn transitions(&self, id: String) -> Result<Option<Vec<Transition>>> {
        self.read(move |c| status_log::read(c, &id)).await
    }

    pub async fn next_due(&self, saturated: Vec<String>) -> Result<Option<Millis>> {
        self.read(move |c| deliveries::next_due(c, &saturated))
            .await
    }

    pub async fn origins(&self, limit: u32, after: Option<String>) -> Result<Vec<OriginCounts>> {
        self.read(move |c| deliveries::origins(c, limit, after.as_deref()))
            .await
    }

    pub async fn stats(&self) -> Result<Stats> {
        let now = self.now_ms();
        self.read(move |c| deliveries::stats(c, now)).await
    }

    async fn read<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let permit = Arc::clone(&self.inner.reader_permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::WriterGone)?;
        let conn = self
            .inner
            .readers
            .lock()
            .map_err(|_| StoreError::Database("reader pool poisoned".into()))?
            .pop()
            .ok_or_else(|| StoreError::Database("reader pool empty".into()))?;
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let out = op(&conn);
            if let Ok(mut pool) = inner.readers.lock() {
                pool.push(conn);
            }
            // Not before: if the caller stopped waiting, the next reader must still find the
            // connection in the pool once it holds this permit.
            drop(permit);
            out
        })
        .await
        .map_err(|e| StoreError::Database(format!("reader task failed: {e}")))?
    }
}

/// A listing fetched `limit + 1` rows: keep `limit`, and the cursor of the next page (the id of
/// the last row kept) if there was one more.
fn next_page<T>(rows: &mut Vec<T>, limit: u32, id: impl Fn(&T) -> &String) -> Option<String> {
    if rows.len() <= limit as usize {
        return None;
    }
    rows.truncate(limit as usize);
    rows.last().map(|r| id(r).clone())
}

/// Wakes whoever waits for work, from a write's completion.
struct Waker(Arc<Notify>);

impl Waker {
    fn when(&self, made_work_due: bool) {
        if made_work_due {
            // Stores a permit if nobody waits yet: the next wait returns at once.
            self.0.notify_one();
        }
    }
}

/// The query planner's stability guarantee: plans do not depend on bound values. Without it,
/// SQLite re-prepares a statement whenever a value bound to it could change its plan (a range
/// on an indexed column, with STAT4; a table-valued function's argument) — that is, the claims
/// at every call. The hot queries name their index anyway.
fn stable_plans(conn: &Connection) -> Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )
    .map(drop)
    .map_err(map_err)
}

fn lock_database(path: &Path) -> Result<(File, bool)> {
    // SQLite gives the -wal and -shm files the mode of the main file.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| io_err(format!("cannot open database {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(StoreError::Locked {
                path: path.to_owned(),
            })
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(io_err(format!("cannot lock {}", path.display()), e))
        }
    }
    let len = file
        .metadata()
        .map_err(|e| io_err(format!("cannot stat {}", path.display()), e))?
        .len();
    Ok((file, len == 0))
}

/// A schema problem names the file it was found in.
fn schema_error(path: &Path, e: StoreError) -> StoreError {
    match e {
        StoreError::Database(detail) => StoreError::Corrupt {
            path: path.to_owned(),
            detail,
        },
        other => corrupt_path(path, other),
    }
}

/// Run `op`'s reads in one read transaction, so that they all see the same snapshot.
fn snapshot<T>(conn: &Connection, op: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.execute_batch("BEGIN").map_err(map_err)?;
    let out = op(conn);
    // A read transaction has nothing to keep: ending it can only fail if it is already over.
    if let Err(e) = conn.execute_batch(if out.is_ok() { "COMMIT" } else { "ROLLBACK" }) {
        if !conn.is_autocommit() {
            return Err(map_err(e));
        }
    }
    out
}

/// A read-write connection to `path`, used by one thread at a time.
fn open_read_write(path: &Path) -> Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| corrupt_or(path, e))
}

/// Set up the write connection: durability (`configure_writer`), its statement cache and
/// plans, and checkpoints left to their own thread. The same for the first connection and for
/// the one the writer opens after a failed COMMIT.
fn prepare_writer(conn: &Connection, path: &Path, fresh: bool) -> Result<()> {
    configure_writer(conn, path, fresh)?;
    // Every statement on the hot path is prepared once and kept (rusqlite keeps 16).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    stable_plans(conn)?;
    // Checkpoints run on their own thread and connection (see `checkpoint`).
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .map_err(map_err)?;
    // After a burst, give the WAL file's space back once it is checkpointed and reset.
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)
        .map_err(map_err)
}

/// The writer runs each job in a savepoint (see `writer`), and SQLite keeps the pages a job
/// changes, as they were, in a statement journal until the savepoint is released. By default
/// a journal past 64 KiB moves to a new temporary file (in `SQLITE_TMPDIR`, `TMPDIR` or
/// `/var/tmp`; created, unlinked, written to): a task's end and the next claim, which change
/// more pages than that, paid a file's creation and removal in every commit. `temp_store =
/// MEMORY` keeps every temporary structure of this connection in memory (statement journals,
/// and the sorts and temporary tables of its statements), each costing what its job touched:
/// every job is bounded (bulk actions, purges and claims go a page at a time). Set after the
/// migrations, whose index builds may sort more than memory should hold.
fn journal_jobs_in_memory(conn: &Connection) -> Result<()> {
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(map_err)
}

fn configure_writer(conn: &Connection, path: &Path, fresh: bool) -> Result<()> {
    if fresh {
        // Must precede the first table; lets retention hand space back without a full VACUUM.
        // (On a file that does hold tables, in a WAL not yet checkpointed, it is a no-op.)
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")
            .map_err(|e| corrupt_or(path, e))?;
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(|e| corrupt_or(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Durability(format!(
            "journal_mode is {mode}, expected wal"
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(map_err)?;
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .map_err(map_err)?;
    if sync != 2 {
        return Err(StoreError::Durability(format!(
            "synchronous is {sync}, expected 2 (FULL)"
        )));
    }
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(map_err)?;
    // Catches "file is not a database" and a damaged schema page before we start serving.
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
        r.get::<_, i64>(0)
    })
    .map_err(|e| corrupt_or(path, e))?;
    Ok(())
}

fn io_err(context: String, source: std::io::Error) -> StoreError {
    StoreError::Io { context, source }
}

fn corrupt_or(path: &Path, e: rusqlite::Error) -> StoreError {
    corrupt_path(path, map_err(e))
}

fn corrupt_path(path: &Path, e: StoreError) -> StoreError {
    match e {
        StoreError::Corrupt { detail, .. } => StoreError::Corrupt {
            path: path.to_owned(),
            detail,
        },
        other => other,
    }
}

/// Statements written once for both backends, run on SQLite (see [`crate::sql`]). Never waits.
impl Sql for Connection {
    const FOR_UPDATE: &'static str = "";

    async fn exec(&self, sql: &str, values: &[Value<'_>]) -> Result<u64> {
        self.prepare_cached(&sqlite_placeholders(sql))
            .and_then(|mut st| st.execute(rusqlite::params_from_iter(values)))
            .map(|n| n as u64)
            .map_err(map_err)
    }

    async fn row(&self, sql: &str, values: &[Value<'_>]) -> Result<Option<sql::Row>> {
        use rusqlite::types::ValueRef;
        use rusqlite::OptionalExtension as _;
        self.prepare_cached(&sqlite_placeholders(sql))
            .and_then(|mut st| {
                let columns = st.column_count();
                st.query_row(rusqlite::params_from_iter(values), |r| {
                    (0..columns)
                        .map(|i| {
                            Ok(match r.get_ref(i)? {
                                ValueRef::Null => Cell::Null,
                                ValueRef::Integer(n) => Cell::Int(n),
                                ValueRef::Text(t) => {
                                    Cell::Text(String::from_utf8_lossy(t).into_owned())
                                }
                                other => {
                                    return Err(rusqlite::Error::InvalidColumnType(
                                        i,
                                        format!("{other:?}"),
                                        other.data_type(),
                                    ))
                                }
                            })
                        })
                        .collect::<rusqlite::Result<Vec<Cell>>>()
                        .map(sql::Row)
                })
                .optional()
            })
            .map_err(map_err)
    }
}

/// Classify a SQLite error into the store's terms.
pub(crate) fn map_err(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    if let rusqlite::Error::SqliteFailure(f, _) = &e {
        match f.code {
            ErrorCode::DiskFull => return StoreError::DiskFull(e.to_string()),
            ErrorCode::SystemIoFailure
            | ErrorCode::OutOfMemory
            | ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked => return StoreError::Storage(e.to_string()),
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => {
                return StoreError::Corrupt {
                    path: PathBuf::new(),
                    detail: e.to_string(),
                }
            }
            _ => {}
        }
    }
    StoreError::Database(e.to_string())
}
