//! The shared backend: one PostgreSQL database that several spoold hosts use at once.
//!
//! **Invariants:**
//! - Correctness rests on rows, transactions and `FOR UPDATE SKIP LOCKED` alone. LISTEN/NOTIFY
//!   only wakes other hosts sooner (a slow poll stands in when it is down, or switched off:
//!   [`PgConfig::notify`]); the advisory lock only serialises migrations.
//! - Every transaction runs at READ COMMITTED, whatever the server's default (asked for by
//!   every session, read back at open): each statement sees what was committed before it
//!   began, which is what a statement after a row lock relies on to see the lock's previous
//!   holder's writes. The one exception reads: an export, several statements that must agree
//!   with each other, reads one snapshot (REPEATABLE READ, READ ONLY).
//! - A write returns `Ok` only after its COMMIT was answered, on a session with
//!   `synchronous_commit = on` (read back at open): acknowledged means flushed to disk.
//! - Due times, leases and timestamps are read from the database's clock (`clock_timestamp()`
//!   at the start of each transaction, or in the step functions of `functions/`), never from a
//!   host's: hosts may disagree on the time.
//! - No transaction stays open across an HTTP request or a child process: claims commit at once.

mod cluster;
mod connect;
mod db_clock;
mod deliveries;
mod notify;
mod schema;
mod status_log;
mod tasks;
mod transfer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::{GenericClient, Pool};
use tokio::sync::Notify;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

pub use cluster::{Fence, Replication, Seen};
pub use connect::redact_url;
/// The schema version this binary migrates a database to.
pub use schema::{Fit as SchemaFit, LATEST as SCHEMA_VERSION, OLDEST_HOST};

use crate::clock::Clock;
use crate::error::{Result, StoreError};
use crate::model::{
    Advanced, Applied, Attempt, AttemptResult, Capacity, Check, CheckResult, ClaimBatch, Delivery,
    DeliveryStatus, InsertOutcome, Millis, NewDelivery, OriginCounts, Page, Reclaimed, Reservation,
    Resolution, StartOutcome, Stats, Took, Transition, TransitionOutcome,
};
use crate::sql::{self, Cell, Sql, Value};
use crate::sqlite::WriterStats;
use crate::tasks::{
    ClaimType, Claimed, ClaimedTask, Executor, HeldLock, NewTask, OrphanEnd, Orphaned, Renewed,
    StepRecord, Task, TaskAction, TaskAttempt, TaskAttemptEnd, TaskInsert, TaskPage, TaskStatus,
    TaskStep, TaskTransition,
};

/// How long a reading of the server's replication is reused.
const REPLICATION_TTL: Duration = Duration::from_secs(5);

/// How a start-up step that waits is watched: the server session it runs on, and what is
/// already known to make commits wait.
struct Watch<'a> {
    pool: &'a Pool,
    pid: i32,
    hint: Option<String>,
}

impl Watch<'_> {
    /// What the step's session waits on, in words, as far as the server says.
    async fn waiting_on(&self) -> String {
        let asked = async {
            let client = self.pool.get().await.ok()?;
            client
                .query_opt(
                    "SELECT wait_event_type, wait_event, state FROM pg_stat_activity \
                     WHERE pid = $1",
                    &[&self.pid],
                )
                .await
                .ok()
                .flatten()
        };
        let row = tokio::time::timeout(Duration::from_secs(2), asked)
            .await
            .ok()
            .flatten();
        let said = row.map(|r| {
            let (kind, event, state): (Option<String>, Option<String>, Option<String>) =
                (r.get(0), r.get(1), r.get(2));
            match (kind.as_deref(), event.as_deref()) {
                (Some("IPC"), Some("SyncRep")) => {
                    "its commit waits for a synchronous standby to confirm it (wait event \
                     SyncRep)"
                        .to_owned()
                }
                (Some("Lock"), Some("advisory")) => {
                    "it waits for another host's migration (the schema's advisory lock)".to_owned()
                }
                (Some("Lock"), Some(what)) => {
                    format!("it waits for a lock another session holds (wait event Lock/{what})")
                }
                (Some(kind), Some(event)) => format!("wait event {kind}/{event}"),
                _ => format!(
                    "the server says its session is {}",
                    state.as_deref().unwrap_or("unknown")
                ),
            }
        });
        match (said, &self.hint) {
            (Some(said), Some(hint)) => format!("{said}; {hint}"),
            (Some(said), None) => said,
            (None, Some(hint)) => hint.clone(),
            (None, None) => "the server does not say on what".to_owned(),
        }
    }
}

/// Run start-up step `step`, at most `bound`: while it waits, what it waits on is logged every
/// [`START_REPORT_EVERY`] (with `watch`: the server's wait event); past `bound` the open fails
/// with that.
async fn starting<T>(
    step: &str,
    bound: Duration,
    watch: Option<&Watch<'_>>,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let started = tokio::time::Instant::now();
    let deadline = started + bound;
    tokio::pin!(work);
    let mut report = started + START_REPORT_EVERY;
    loop {
        tokio::select! {
            done = &mut work => return done,
            () = tokio::time::sleep_until(report.min(deadline)) => {
                let on = match watch {
                    Some(watch) => watch.waiting_on().await,
                    None => "no answer from the server".to_owned(),
                };
                let waited = started.elapsed();
                if tokio::time::Instant::now() >= deadline {
                    return Err(StoreError::Unavailable(format!(
                        "start-up: {step} did not finish within {} s (the start timeout): {on}",
                        bound.as_secs()
                    )));
                }
                tracing::warn!(step, waited_s = waited.as_secs(), waiting_on = %on,
                               "start-up is waiting on the database");
                report += START_REPORT_EVERY;
            }
        }
    }
}

/// A transaction on a pooled connection.
pub(crate) type Tx<'a> = deadpool_postgres::Transaction<'a>;

/// How a transaction that lost a race (serialization failure, deadlock) is retried.
const CONTENTION_RETRIES: u32 = 5;

/// The database's clock, in microseconds since the epoch.
const CLOCK_SQL: &str = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// Connections a host opens by default: ten hosts fit in PostgreSQL's default
/// `max_connections` (100, of which 3 are kept for superusers).
pub const DEFAULT_CONNECTIONS: usize = 9;

/// How often waiters look for other hosts' work without being told, under LISTEN/NOTIFY.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(5);

/// How long a session may sit inside a transaction without a word before the server ends it
/// ([`PgConfig::stalled_transaction`]): a third of the default task lease (30 s).
pub const DEFAULT_STALLED_TRANSACTION: Duration = Duration::from_secs(10);

/// As [`DEFAULT_POLL_INTERVAL`], without LISTEN/NOTIFY (`PgConfig::notify` off), where the poll
/// is the only news of other hosts' work: it bounds how long that work waits for a host with
/// room (half of it on average), at two idle transactions a second per host.
pub const DEFAULT_POLL_ONLY_INTERVAL: Duration = Duration::from_secs(1);

/// How often, at most, a reservation looks for due work from the start of its origin's due
/// index rather than from where the last one left off (`spoold_reserve`).
const FULL_SEEK_EVERY: Duration = Duration::from_secs(1);

/// Origins whose reservation cursor is kept; past this, all are forgotten (and start over).
const MAX_RESERVE_CURSORS: usize = 10_000;

/// How long a database size read is reused (it lists the database's files).
const DB_SIZE_TTL: Duration = Duration::from_secs(1);

/// How to open the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// `postgres://user@host:port/database?sslmode=…`
    pub url: String,
    /// Refuse new deliveries once the database uses this many bytes; 0 = no limit.
    pub max_db_bytes: u64,
    /// Connections this host opens to the database in all: the creates' writers
    /// ([`enqueue::WRITERS`]), the one listening for notifications (with [`PgConfig::notify`]),
    /// and a pool for the rest (at least two).
    pub connections: usize,
    /// Hosts tell each other of new work with LISTEN/NOTIFY. Without it the store never sends
    /// LISTEN or NOTIFY (for PostgreSQL-wire databases that lack them): other hosts' work is
    /// found by the poll alone, this host's own wakes it in process as always.
    pub notify: bool,
    /// How often, without any notification, waiters are woken to look for work another host
    /// made due: the safety net under LISTEN/NOTIFY, or the only way without it.
    pub poll_interval: Duration,
    /// Carries the estimate of the database clock between readings ([`Clock::steady_micros`]:
    /// a step of this host's wall clock changes nothing).
    pub clock: Clock,
    /// The server ends a session of this host that stays this long inside a transaction without
    /// saying anything (`idle_in_transaction_session_timeout`): a host paused (SIGSTOP, a
    /// frozen VM) in the middle of a transaction would otherwise keep its row locks — the task
    /// claim gate, a task or delivery row — and every other host waiting behind them, until it
    /// resumes and then commits what it decided before the pause. Give it well under the
    /// shortest lease: spoold uses a third of it, from 1 s to 10 s. Zero: the server's setting.
    pub stalled_transaction: Duration,
    /// Where this host remembers the newest timeline of the database's cluster it has used
    /// ([`Fence`]): a primary behind it (failed over, back on its own) is refused, across
    /// restarts. `None`: remembered for this process's life only.
    pub fence_file: Option<std::path::PathBuf>,
    /// How long each step of opening the store (connecting, reading the server's settings,
    /// migrating, the first commit) may wait before the open fails, saying what it waits on.
    pub start_timeout: Duration,
}

/// [`PgConfig::start_timeout`] by default.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// While a start-up step waits, what it waits on is logged this often.
const START_REPORT_EVERY: Duration = Duration::from_secs(5);

impl PgConfig {
    pub fn new(url: impl Into<String>) -> Self {
        PgConfig {
            url: url.into(),
            max_db_bytes: 0,
            connections: DEFAULT_CONNECTIONS,
            notify: true,
            poll_interval: DEFAULT_POLL_INTERVAL,
            clock: Clock::system(),
            stalled_transaction: DEFAULT_STALLED_TRANSACTION,
            fence_file: None,
            start_timeout: DEFAULT_START_TIMEOUT,
        }
    }
}

/// A handle to the PostgreSQL store. Cheap to clone.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    max_db_bytes: u64,
    db_clock: db_clock::DbClock,
    db_size: Mutex<Option<(Instant, u64)>>,
    /// Per origin, how far this host's reservations got (see [`PgStore::reserve_from`]).
    reserve_cursors: Mutex<HashMap<String, ReserveCursor>>,
    stats: WriterStats,
    wake: notify::Wakeups,
    _listener: notify::Listener,
    /// Creates, written in batches (group commit), on connections of their own.
    enqueuer: enqueue::Enqueuer,
    /// Slots' steps, written in batches (group commit).
    advancer: advance::Advancer,
    enqueue_pool: Pool,
    /// The last reading of the server's replication, and when it was made.
    replication: Mutex<Option<(Instant, Replication)>>,
}

/// Where reservations for one origin start looking for due work.
struct ReserveCursor {
    /// The latest due time of a delivery this host reserved.
    due: Millis,
    /// When a reservation last looked from the start.
    full_seek_at: Instant,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

/// Run `$body` (an expression that may use `$tx: &Tx` and `$now: Millis`, the database clock
/// at the start of the transaction) in one transaction and commit it. A transaction that lost
/// a race is run again, from the start.
macro_rules! in_tx {
    ($store:expr, |$tx:ident, $now:ident| $body:expr) => {
        in_tx!($store, &$store.inner.pool, |$tx, $now| $body)
    };
    // On a connection of `$pool`.
    ($store:expr, $pool:expr, |$tx:ident, $now:ident| $body:expr) => {{
        let store: &PgStore = $store;
        let mut tries = 0;
        loop {
            let started = std::time::Instant::now();
            let out: $crate::error::Result<_> = async {
                let mut client = $pool.get().await.map_err($crate::postgres::map_pool_err)?;
                let $tx = client
                    .transaction()
                    .await
                    .map_err($crate::postgres::map_err)?;
                #[allow(unused_variables)]
                let $now = store.db_now(&$tx).await?;
                let out = $body.await?;
                $tx.commit().await.map_err($crate::postgres::map_err)?;
                Ok(out)
            }
            .await;
            store.observe(started, out.is_ok());
            match out {
                Err($crate::error::StoreError::Contention(_))
                    if tries < $crate::postgres::CONTENTION_RETRIES =>
                {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(tries) * 3))
                        .await;
                }
                other => break other,
            }
        }
    }};
}

/// Run `$body` (using `$c`, a pooled connection) outside any explicit transaction.
macro_rules! read {
    ($store:expr, |$c:ident| $body:expr) => {{
        let store: &PgStore = $store;
        let client = store.client().await?;
        let $c: &deadpool_postgres::Client = &client;
        $body.await
    }};
}

// After the macros, which they use.
mod advance;
mod batch;
mod enqueue;

impl PgStore {
    /// Connect, check that commits are durable, and migrate the schema (under an advisory
    /// lock: two hosts starting together apply each migration once). Each step is bounded by
    /// [`PgConfig::start_timeout`]; while one waits, what it waits on is logged (the server's
    /// wait event: a synchronous standby, another host's migration, a lock), and an open that
    /// times out says so.
    pub async fn open(config: &PgConfig) -> Result<PgStore> {
        let fence =
            cluster::Fence::open(config.fence_file.clone()).map_err(|source| StoreError::Io {
                context: format!(
                    "the database's remembered timeline ({})",
                    config
                        .fence_file
                        .as_deref()
                        .map_or_else(String::new, |p| p.display().to_string())
                ),
                source,
            })?;
        let target =
            connect::Target::parse(&config.url, config.stalled_transaction, Arc::new(fence))?;
        let listening = usize::from(config.notify);
        let pool = target.pool(
            config
                .connections
                .saturating_sub(enqueue::WRITERS + listening)
                .max(2),
        )?;
        // Creates have connections of their own: a client waiting for its acknowledgement
        // never queues behind delivery work.
        let enqueue_pool = target.pool(enqueue::WRITERS)?;
        let bound = config.start_timeout;
        // The first connection says where it went: a daemon that cannot start names the server.
        let client = starting("connect", bound, None, async {
            pool.get().await.map_err(|e| match map_pool_err(e) {
                StoreError::Unavailable(why) => {
                    StoreError::Unavailable(format!("PostgreSQL at {}: {why}", target.address()))
                }
                other => other,
            })
        })
        .await?;
        let watch = Watch {
            pool: &pool,
            pid: one(&client, "SELECT pg_backend_pid()", &[]).await?.get(0),
            hint: None,
        };
        let replication = starting(
            "read the server's replication",
            bound,
            Some(&watch),
            async { cluster::replication(&client).await.map_err(map_err) },
        )
        .await;
        let replication = match replication {
            Ok(replication) => Some(replication),
            // A PostgreSQL-wire database without `pg_stat_replication`: nothing to say.
            Err(StoreError::Database(e)) => {
                tracing::warn!(error = %e, "the database's replication cannot be read");
                None
            }
            Err(e) => return Err(e),
        };
        let risk = replication.as_ref().and_then(Replication::risk);
        match (&risk, &replication) {
            (Some(risk), _) => tracing::warn!("PostgreSQL: {risk}"),
            (None, Some(replication)) => tracing::info!(
                synchronous_standbys = replication.synchronous,
                asynchronous_standbys = replication.asynchronous,
                "PostgreSQL replication read"
            ),
            (None, None) => {}
        }
        let watch = Watch {
            hint: risk.clone(),
            ..watch
        };
        let (sync, isolation) =
            starting("read the session's settings", bound, Some(&watch), async {
                let sync: String = one(&client, "SHOW synchronous_commit", &[]).await?.get(0);
                let isolation: String = one(&client, "SHOW transaction_isolation", &[])
                    .await?
                    .get(0);
                Ok((sync, isolation))
            })
            .await?;
        if sync != "on" {
            return Err(StoreError::Durability(format!(
                "synchronous_commit is {sync}, expected on"
            )));
        }
        check_isolation(&isolation)?;
        let fit = starting(
            "migrate the schema",
            bound,
            Some(&watch),
            schema::migrate(&client),
        )
        .await?;
        if let SchemaFit::NewerCompatible { found } = fit {
            tracing::warn!(
                "the database's schema ({found}) is newer than this spoold's ({SCHEMA_VERSION}); \
                 the spoold that migrated it lets this one run beside it: upgrade this host"
            );
        }
        drop(client);
        let wake = notify::Wakeups::default();
        let listener = if config.notify {
            notify::Listener::spawn(target, wake.clone(), config.poll_interval)
        } else {
            tracing::info!(
                poll_ms = config.poll_interval.as_millis() as u64,
                "PostgreSQL without LISTEN/NOTIFY: other hosts' work is found by polling"
            );
            notify::Listener::poll_only(wake.clone(), config.poll_interval)
        };
        let store = PgStore {
            inner: Arc::new_cyclic(|inner| Inner {
                pool,
                max_db_bytes: config.max_db_bytes,
                db_clock: db_clock::DbClock::new(config.clock.clone()),
                db_size: Mutex::new(None),
                reserve_cursors: Mutex::new(HashMap::new()),
                stats: WriterStats::default(),
                wake,
                _listener: listener,
                enqueuer: enqueue::spawn(inner.clone()),
                advancer: advance::spawn(inner.clone()),
                enqueue_pool,
                replication: Mutex::new(replication.map(|r| (Instant::now(), r))),
            }),
        };
        starting(
            "read the database's clock",
            bound,
            None,
            store.learn_clock(),
        )
        .await?;
        Ok(store)
    }

    /// What the server's replication promises an acknowledged commit, read at most every
    /// [`REPLICATION_TTL`].
    pub async fn replication(&self) -> Result<Replication> {
        {
            let last = self
                .inner
                .replication
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some((at, r)) = &*last {
                if at.elapsed() < REPLICATION_TTL {
                    return Ok(r.clone());
                }
            }
        }
        let client = self.client().await?;
        let read = cluster::replication(&client).await.map_err(map_err)?;
        *self
            .inner
            .replication
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), read.clone()));
        Ok(read)
    }

    /// The last reading of the server's replication, without asking the server.
    pub fn last_replication(&self) -> Option<Replication> {
        self.inner
            .replication
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|(_, r)| r.clone())
    }

    async fn client(&self) -> Result<deadpool_postgres::Client> {
        self.inner.pool.get().await.map_err(map_pool_err)
    }

    /// The database's clock, in milliseconds; also a reading for [`PgStore::now_ms`]'s estimate
    /// ([`db_clock`]).
    async fn db_now(&self, tx: &Tx<'_>) -> Result<Millis> {
        let clock = &self.inner.db_clock;
        let sent = clock.steady_micros();
        let db: i64 = one(tx, CLOCK_SQL, &[]).await?.get(0);
        clock.sample(sent, db, clock.steady_micros());
        Ok(db.div_euclid(1000))
    }

    /// Learn the database clock before anyone asks for it: of a few readings, the one with the
    /// shortest round trip (the first also prepares the statement).
    async fn learn_clock(&self) -> Result<()> {
        let client = self.client().await?;
        for _ in 0..8 {
            let clock = &self.inner.db_clock;
            let sent = clock.steady_micros();
            let db: i64 = one(&client, CLOCK_SQL, &[]).await?.get(0);
            clock.sample(sent, db, clock.steady_micros());
        }
        Ok(())
    }

    fn observe(&self, started: Instant, ok: bool) {
        if !ok {
            self.inner.stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(observer) = self.inner.stats.observer.get() {
            observer.committed(1, started.elapsed().as_secs_f64(), ok);
        }
    }

    /// The database clock as this host estimates it (see [`db_clock`]). Decisions in the
    /// database are made on the database clock itself.
    pub fn now_ms(&self) -> Millis {
        self.inner.db_clock.now_ms()
    }

    pub fn writer_stats(&self) -> &WriterStats {
        &self.inner.stats
    }

    /// Notified when work may be due: a write here made some, another host announced some,
    /// the notification connection came back, or the slow poll ticked.
    pub fn work_available(&self) -> Arc<Notify> {
        self.inner.wake.deliveries()
    }

    /// As [`PgStore::work_available`], for tasks.
    pub fn tasks_available(&self) -> Arc<Notify> {
        self.inner.wake.tasks()
    }

    /// The database's size, read at most once per [`DB_SIZE_TTL`].
    async fn db_bytes(&self) -> Result<u64> {
        if let Ok(cached) = self.inner.db_size.lock() {
            if let Some((at, bytes)) = *cached {
                if at.elapsed() < DB_SIZE_TTL {
                    return Ok(bytes);
                }
            }
        }
        let client = self.client().await?;
        let bytes: i64 = one(&client, "SELECT pg_database_size(current_database())", &[])
            .await?
            .get(0);
        let bytes = bytes.max(0) as u64;
        if let Ok(mut cached) = self.inner.db_size.lock() {
            *cached = Some((Instant::now(), bytes));
        }
        Ok(bytes)
    }

    /// See [`crate::Store::insert`]: queued, and written with the creates that came in
    /// meanwhile in one transaction (`enqueue`).
    pub async fn insert(&self, new: NewDelivery) -> Result<InsertOutcome> {
        self.inner.enqueuer.submit(new).await
    }

    /// One create in a transaction of its own.
    async fn insert_one(&self, new: NewDelivery) -> Result<InsertOutcome> {
        let limit = self.inner.max_db_bytes;
        let used = if limit > 0 { self.db_bytes().await? } else { 0 };
        let out = in_tx!(self, |tx, now| deliveries::insert(
            &tx, &new, now, used, limit
        ));
        self.inner
            .wake
            .deliveries_when(out.as_ref().is_ok_and(InsertOutcome::wakes));
        out
    }

    pub async fn claim_due(
        &self,
        limit: u32,
        capacity: Capacity,
        lease_ms: i64,
    ) -> Result<ClaimBatch> {
        in_tx!(self, |tx, now| deliveries::claim(
            &tx,
            now,
            limit,
            capacity.clone(),
            lease_ms
        ))
    }

    pub async fn complete(&self, result: AttemptResult) -> Result<Applied> {
        let rows = self.step(&deliveries::complete(&result)).await?;
        let applied = deliveries::applied(&rows);
        self.woken_by(&applied);
        applied
    }

    pub async fn reserve_next(&self, origin: String, lease_ms: i64) -> Result<Option<Reservation>> {
        let from = self.reserve_from(&origin);
        let rows = self
            .step(&deliveries::reserve_next(&origin, lease_ms, from))
            .await?;
        self.reserved(&rows, &origin)
    }

    pub async fn start(&self, reservation: Reservation, lease_ms: i64) -> Result<StartOutcome> {
        let rows = self
            .step(&deliveries::start(&reservation, lease_ms))
            .await?;
        deliveries::started(&rows, &reservation, lease_ms)
    }

    /// See [`crate::Store::advance`]: the three steps in one statement (one transaction, one
    /// round trip), written with the steps other slots are taking at the same time (`advance`:
    /// group commit). They commit or fail together; a failure is reported for each.
    pub async fn advance(
        &self,
        result: Option<AttemptResult>,
        next: Reservation,
        reserve_after: bool,
        lease_ms: i64,
    ) -> Advanced {
        let from = self.reserve_from(&next.origin);
        let step = advance::Step {
            result,
            next: Some(next.clone()),
            origin: reserve_after.then(|| next.origin.clone()),
            take: false,
            lease_ms,
            from,
        };
        let (row, applied) = self.submit_step(step).await;
        match row {
            Ok(row) => {
                let rows = std::slice::from_ref(&row);
                Advanced {
                    applied,
                    started: deliveries::started(rows, &next, lease_ms),
                    reserved: self.reserved(rows, &next.origin),
                }
            }
            Err(e) => Advanced {
                applied,
                started: Err(e.duplicate()),
                reserved: Err(e),
            },
        }
    }

    /// See [`crate::Store::take_next`]: written with the other slots' steps, as
    /// [`PgStore::advance`] writes them.
    pub async fn take_next(
        &self,
        result: Option<AttemptResult>,
        origin: String,
        lease_ms: i64,
    ) -> Took {
        let from = self.reserve_from(&origin);
        let step = advance::Step {
            result,
            next: None,
            origin: Some(origin.clone()),
            take: true,
            lease_ms,
            from,
        };
        let (row, applied) = self.submit_step(step).await;
        match row {
            Ok(row) => {
                let rows = std::slice::from_ref(&row);
                let taken = deliveries::taken(rows, &origin, lease_ms).map(|taken| {
                    taken.map(|(taken, due)| {
                        self.reserved_up_to(&origin, due);
                        taken
                    })
                });
                Took { applied, taken }
            }
            Err(e) => Took {
                applied,
                taken: Err(e),
            },
        }
    }

    /// Write one slot's step with the other slots' steps: its row, and — if it records a
    /// result — what recording it applied (the failure too, when the write failed).
    async fn submit_step(&self, step: advance::Step) -> (Result<Row>, Option<Result<Applied>>) {
        let recorded = step.result.is_some();
        let row = self.inner.advancer.submit(step).await;
        let applied = recorded.then(|| match &row {
            Ok(row) => deliveries::applied(std::slice::from_ref(row)),
            Err(e) => Err(e.duplicate()),
        });
        if let Some(applied) = &applied {
            self.woken_by(applied);
        }
        (row, applied)
    }

    /// A result that made its delivery pending again (a retry, an interruption) makes work
    /// that this or another host may be due for sooner than anything it waits for.
    fn woken_by(&self, applied: &Result<Applied>) {
        self.inner
            .wake
            .deliveries_when(matches!(applied, Ok(Applied::Now(DeliveryStatus::Pending))));
    }

    /// Run one step function (`functions/steps.sql`) as a transaction of its own: outside
    /// BEGIN, the server commits the statement before it answers (at the protocol's Sync). A
    /// step that lost a race (deadlock, serialization failure) is run again.
    async fn step(&self, call: &Call) -> Result<Vec<Row>> {
        let mut tries = 0;
        loop {
            let started = Instant::now();
            let out = async {
                let client = self.client().await?;
                let statement = client.prepare_cached(call.sql).await.map_err(map_err)?;
                client
                    .query(&statement, &call.params())
                    .await
                    .map_err(map_err)
            }
            .await;
            self.observe(started, out.is_ok());
            match out {
                Err(StoreError::Contention(_)) if tries < CONTENTION_RETRIES => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(u64::from(tries) * 3)).await;
                }
                other => return other,
            }
        }
    }

    /// Where the next reservation for `origin` starts looking: at the due time of the last one
    /// this host made, except once per [`FULL_SEEK_EVERY`] (and the first time), when it looks
    /// from the start so that due work behind that point waits at most that long.
    fn reserve_from(&self, origin: &str) -> Option<Millis> {
        let mut cursors = self.inner.reserve_cursors.lock().ok()?;
        let cursor = cursors.get_mut(origin)?;
        if cursor.full_seek_at.elapsed() >= FULL_SEEK_EVERY {
            cursor.full_seek_at = Instant::now();
            return None;
        }
        Some(cursor.due)
    }

    /// The reservation a `spoold_reserve` call made, remembering how far it got.
    fn reserved(&self, rows: &[Row], origin: &str) -> Result<Option<Reservation>> {
        let Some((reservation, due)) = deliveries::reserved(rows, origin)? else {
            return Ok(None);
        };
        self.reserved_up_to(origin, due);
        Ok(Some(reservation))
    }

    /// This host reserved (or took) a delivery of `origin` due at `due`: its next reservation
    /// there starts looking from the latest such time.
    fn reserved_up_to(&self, origin: &str, due: Millis) {
        if let Ok(mut cursors) = self.inner.reserve_cursors.lock() {
            if cursors.len() >= MAX_RESERVE_CURSORS && !cursors.contains_key(origin) {
                cursors.clear();
            }
            let cursor = cursors.entry(origin.to_owned()).or_insert(ReserveCursor {
                due,
                full_seek_at: Instant::now(),
            });
            cursor.due = cursor.due.max(due);
        }
    }

    pub async fn release(&self, id: String, claim_seq: u32) -> Result<bool> {
        let out = in_tx!(self, |tx, now| crate::delivery_changes::release(
            &tx, &id, claim_seq, now, "released"
        ));
        self.inner.wake.deliveries_when(matches!(out, Ok(true)));
        out
    }

    pub async fn unstart(&self, id: String, claim_seq: u32) -> Result<bool> {
        let out = in_tx!(self, |tx, now| crate::delivery_changes::unstart(
            &tx, &id, claim_seq, now
        ));
        self.inner.wake.deliveries_when(matches!(out, Ok(true)));
        out
    }

    pub async fn park(&self, id: String, claim_seq: u32, started: bool) -> Result<bool> {
        in_tx!(self, |tx, now| crate::delivery_changes::park(
            &tx, &id, claim_seq, started, now
        ))
    }

    pub async fn park_url(&self, origin: String, url: String) -> Result<u64> {
        in_tx!(self, |tx, now| crate::delivery_changes::park_url(
            &tx, &origin, &url, now
        ))
    }

    pub async fn unpark(&self, origin: String, url: Option<String>) -> Result<u64> {
        let out = in_tx!(self, |tx, now| crate::delivery_changes::unpark(
            &tx,
            &origin,
            url.as_deref(),
            now
        ));
        self.inner
            .wake
            .deliveries_when(matches!(out, Ok(n) if n > 0));
        out
    }

    pub async fn parked_urls(&self, limit: u32) -> Result<Vec<String>> {
        read!(self, |c| deliveries::parked_urls(c, limit))
    }

    pub async fn recover(&self, check_in_ms: i64) -> Result<Reclaimed> {
        let out = in_tx!(self, |tx, now| deliveries::recover(&tx, now, check_in_ms));
        self.inner
            .wake
            .deliveries_when(matches!(&out, Ok(taken) if taken.total() > 0));
        out
    }

    pub async fn renew_and_reclaim(
        &self,
        live: Vec<(String, u32)>,
        lease_ms: i64,
        check_in_ms: i64,
    ) -> Result<Reclaimed> {
        let out = in_tx!(self, |tx, now| deliveries::renew_and_reclaim(
            &tx,
            &live,
            now,
            lease_ms,
            check_in_ms
        ));
        self.inner
            .wake
            .deliveries_when(matches!(&out, Ok(taken) if taken.total() > 0));
        // Every host sweeps a few times per lease: a good moment to fold the count deltas,
        // which claims past saturated targets read.
        if out.is_ok() {
            in_tx!(self, |tx, now| compact_counts(&tx))?;
        }
        out
    }

    pub async fn expire_overdue(&self, limit: u32) -> Result<u64> {
        in_tx!(self, |tx, now| deliveries::expire_overdue(&tx, now, limit))
    }

    pub async fn cancel(&self, id: String) -> Result<TransitionOutcome> {
        in_tx!(self, |tx, now| crate::delivery_changes::cancel(
            &tx, &id, now
        ))
    }

    pub async fn retry(&self, id: String) -> Result<TransitionOutcome> {
        let out = in_tx!(self, |tx, now| crate::delivery_changes::retry(
            &tx, &id, now
        ));
        self.inner
            .wake
            .deliveries_when(matches!(out, Ok(TransitionOutcome::Done(_))));
        out
    }

    pub async fn retry_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        let out = in_tx!(self, |tx, now| async {
            let mut outcomes = Vec::with_capacity(ids.len());
            for id in &ids {
                outcomes.push(crate::delivery_changes::retry(&tx, id, now).await?);
            }
            Ok::<_, crate::StoreError>(outcomes)
        });
        self.inner.wake.deliveries_when(
            out.as_ref()
                .is_ok_and(|o| o.iter().any(TransitionOutcome::is_done)),
        );
        out
    }

    pub async fn cancel_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        in_tx!(self, |tx, now| async {
            let mut outcomes = Vec::with_capacity(ids.len());
            for id in &ids {
                outcomes.push(crate::delivery_changes::cancel(&tx, id, now).await?);
            }
            Ok::<_, crate::StoreError>(outcomes)
        })
    }

    pub async fn resolve(
        &self,
        id: String,
        resolution: Resolution,
        note: String,
    ) -> Result<TransitionOutcome> {
        let out = in_tx!(self, |tx, now| crate::delivery_changes::resolve(
            &tx,
            &id,
            &resolution,
            &note,
            now
        ));
        self.inner.wake.deliveries_when(
            matches!(&out, Ok(TransitionOutcome::Done(d)) if d.status == DeliveryStatus::Pending),
        );
        out
    }

    /// How this binary fits the database's schema now (another host may have migrated it).
    pub async fn schema_fit(&self) -> Result<SchemaFit> {
        read!(self, |c| schema::fit(c))
    }

    pub async fn late_answer(&self, result: AttemptResult) -> Result<bool> {
        in_tx!(self, |tx, now| crate::delivery_changes::late_answer(
            &tx, &result, now
        ))
    }

    pub async fn record_check(&self, result: CheckResult) -> Result<Applied> {
        in_tx!(self, |tx, now| crate::delivery_changes::record_check(
            &tx, &result, now
        ))
    }

    pub async fn due_checks(&self, limit: u32) -> Result<Vec<Delivery>> {
        let now = self.now_ms();
        read!(self, |c| deliveries::due_checks(c, now, limit))
    }

    pub async fn next_check(&self) -> Result<Option<Millis>> {
        read!(self, |c| deliveries::next_check(c))
    }

    pub async fn waiting_on_secret(&self, secret: String) -> Result<u64> {
        read!(self, |c| deliveries::waiting_on_secret(c, &secret))
    }

    pub async fn checks(&self, id: String) -> Result<Option<Vec<Check>>> {
        read!(self, |c| deliveries::checks(c, &id))
    }

    pub async fn purge_finished(&self, older_than_ms: i64, limit: u32) -> Result<u64> {
        in_tx!(self, |tx, now| deliveries::purge_finished(
            &tx,
            now - older_than_ms,
            limit
        ))
    }

    /// A small real write, committed durably: proves the database can be written right now.
    pub async fn ping(&self) -> Result<()> {
        in_tx!(self, |tx, now| async {
            exec(
                &tx,
                "INSERT INTO meta (key, value) VALUES ('last_ping', $1) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&now.to_string()],
            )
            .await
            .map(drop)
        })
    }

    /// `synchronous_commit` as a pooled session reports it (always `on`: checked at open).
    pub async fn synchronous_commit(&self) -> Result<String> {
        read!(self, |c| async {
            Ok(one(c, "SHOW synchronous_commit", &[]).await?.get(0))
        })
    }

    /// The isolation level of a pooled session's transactions (always `read committed` on
    /// PostgreSQL: asked for by every session).
    pub async fn transaction_isolation(&self) -> Result<String> {
        read!(self, |c| async {
            Ok(one(c, "SHOW transaction_isolation", &[]).await?.get(0))
        })
    }

    pub async fn get(&self, id: String) -> Result<Option<Delivery>> {
        read!(self, |c| deliveries::get(c, &id))
    }

    /// The delivery with its history, read in one snapshot: its row, attempts, transitions and
    /// checks are separate statements, which at READ COMMITTED could each see another moment
    /// of a delivery that is changing (a row one step past its log). A read-only REPEATABLE
    /// READ transaction never conflicts with anything.
    pub async fn export(&self, id: String) -> Result<Option<crate::model::DeliveryRecord>> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(map_err)?;
        let record = transfer::export(&tx, &id).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(record)
    }

    pub async fn import(
        &self,
        record: crate::model::DeliveryRecord,
    ) -> Result<crate::model::ImportOutcome> {
        let out = in_tx!(self, |tx, _now| transfer::import(&tx, &record));
        self.inner
            .wake
            .deliveries_when(matches!(out, Ok(crate::model::ImportOutcome::Imported)));
        out
    }

    pub async fn list(
        &self,
        filter: crate::model::ListFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<Page> {
        read!(self, |c| deliveries::list(
            c,
            &filter,
            limit,
            after.as_deref()
        ))
    }

    pub async fn attempts(&self, id: String) -> Result<Option<Vec<Attempt>>> {
        read!(self, |c| deliveries::attempts(c, &id))
    }

    pub async fn transitions(&self, id: String) -> Result<Option<Vec<Transition>>> {
        read!(self, |c| status_log::read(c, &id))
    }

    pub async fn next_due(&self, saturated: Vec<String>) -> Result<Option<Millis>> {
        read!(self, |c| deliveries::next_due(c, &saturated))
    }

    pub async fn origins(&self, limit: u32, after: Option<String>) -> Result<Vec<OriginCounts>> {
        read!(self, |c| deliveries::origins(c, limit, after.as_deref()))
    }

    /// Counts by status (summed from the kept deltas, which this folds first), the oldest due
    /// time and the database size.
    pub async fn stats(&self) -> Result<Stats> {
        in_tx!(self, |tx, now| compact_counts(&tx))?;
        let db_bytes = self.db_bytes().await?;
        let now = self.now_ms();
        read!(self, |c| deliveries::stats(c, now, db_bytes))
    }

    pub async fn insert_task(&self, new: NewTask) -> Result<TaskInsert> {
        let out = in_tx!(self, |tx, now| tasks::insert(&tx, &new, now));
        self.inner
            .wake
            .tasks_when(matches!(out, Ok(TaskInsert::Created(_))));
        out
    }

    pub async fn claim_tasks(
        &self,
        limit: u32,
        types: Vec<ClaimType>,
        lease_ms: i64,
        executor: Executor,
    ) -> Result<Claimed> {
        in_tx!(self, |tx, now| tasks::claim(
            &tx, now, limit, &types, lease_ms, &executor
        ))
    }

    pub async fn finish_task(&self, end: TaskAttemptEnd) -> Result<Option<TaskStatus>> {
        let out = in_tx!(self, |tx, now| crate::task_changes::finish(&tx, &end, now));
        // Locks or a quota slot may have come free for another host's tasks.
        self.inner.wake.tasks_when(out.is_ok());
        out
    }

    pub async fn finish_and_claim(
        &self,
        end: TaskAttemptEnd,
        types: Vec<ClaimType>,
        lease_ms: i64,
        executor: Executor,
    ) -> Result<(Option<TaskStatus>, Option<ClaimedTask>)> {
        let out = in_tx!(self, |tx, now| async {
            let status = crate::task_changes::finish(&tx, &end, now).await?;
            let next = tasks::claim(&tx, now, 1, &types, lease_ms, &executor).await?;
            Ok((status, next.tasks.into_iter().next()))
        });
        self.inner.wake.tasks_when(out.is_ok());
        out
    }

    pub async fn expire_tasks(&self, limit: u32) -> Result<u64> {
        in_tx!(self, |tx, now| tasks::expire(&tx, now, limit))
    }

    pub async fn cancel_task(&self, id: String) -> Result<TaskAction> {
        let out = in_tx!(self, |tx, now| crate::task_changes::cancel(&tx, &id, now));
        self.inner
            .wake
            .tasks_when(matches!(out, Ok(TaskAction::CancelRequested(_))));
        out
    }

    pub async fn retry_task(&self, id: String, extra_attempts: u32) -> Result<TaskAction> {
        let out = in_tx!(self, |tx, now| crate::task_changes::retry(
            &tx,
            &id,
            extra_attempts,
            now
        ));
        self.inner
            .wake
            .tasks_when(matches!(out, Ok(TaskAction::Done(_))));
        out
    }

    pub async fn decide_task(
        &self,
        id: String,
        to: TaskStatus,
        reason: String,
        note: Option<String>,
    ) -> Result<TaskAction> {
        let out = in_tx!(self, |tx, now| crate::task_changes::decide(
            &tx,
            &id,
            (to, reason.as_str(), note.as_deref()),
            now
        ));
        self.inner
            .wake
            .tasks_when(matches!(&out, Ok(TaskAction::Done(t)) if t.status == TaskStatus::Pending));
        out
    }

    pub async fn recover_tasks(&self, executor: Executor, lease_ms: i64) -> Result<Vec<Orphaned>> {
        in_tx!(self, |tx, now| tasks::recover(
            &tx, now, &executor, lease_ms
        ))
    }

    pub async fn expire_task_leases(
        &self,
        executor: Executor,
        lease_ms: i64,
    ) -> Result<Vec<Orphaned>> {
        in_tx!(self, |tx, now| tasks::expire_leases(
            &tx, now, &executor, lease_ms
        ))
    }

    pub async fn take_over_tasks_from(
        &self,
        dead: Vec<String>,
        executor: Executor,
        lease_ms: i64,
    ) -> Result<Vec<Orphaned>> {
        in_tx!(self, |tx, now| tasks::take_over_from(
            &tx, now, &dead, &executor, lease_ms
        ))
    }

    pub async fn task_executors_on(&self, host: String, me: String) -> Result<Vec<String>> {
        read!(self, |c| tasks::executors_on(c, &host, &me))
    }

    pub async fn settle_orphan(&self, end: OrphanEnd) -> Result<Option<TaskStatus>> {
        let out = in_tx!(self, |tx, now| crate::task_changes::settle_orphan(
            &tx, &end, now
        ));
        // Its locks and quota slot are free now (for any host), and it may be pending again.
        self.inner.wake.tasks_when(matches!(&out, Ok(Some(_))));
        out
    }

    pub async fn review_undeclared_tasks(&self, declared: Vec<String>) -> Result<Vec<String>> {
        in_tx!(self, |tx, now| tasks::review_undeclared(
            &tx, &declared, now
        ))
    }

    pub async fn renew_task_leases(
        &self,
        running: Vec<(String, u32)>,
        lease_ms: i64,
    ) -> Result<Vec<Renewed>> {
        in_tx!(self, |tx, now| tasks::renew_leases(
            &tx, now, &running, lease_ms
        ))
    }

    pub async fn record_task_step(
        &self,
        id: String,
        attempt: u32,
        name: String,
    ) -> Result<StepRecord> {
        in_tx!(self, |tx, now| tasks::record_step(
            &tx, &id, attempt, &name, now
        ))
    }

    pub async fn task_steps(&self, id: String) -> Result<Option<Vec<TaskStep>>> {
        read!(self, |c| tasks::steps(c, &id))
    }

    pub async fn held_task_locks(&self, max_waiting: u32) -> Result<Vec<HeldLock>> {
        read!(self, |c| tasks::held_locks(c, max_waiting))
    }

    pub async fn get_task(&self, id: String) -> Result<Option<Task>> {
        read!(self, |c| tasks::get(c, &id))
    }

    pub async fn list_tasks(
        &self,
        filter: crate::tasks::TaskFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<TaskPage> {
        read!(self, |c| tasks::list(c, &filter, limit, after.as_deref()))
    }

    pub async fn task_attempts(&self, id: String) -> Result<Option<Vec<TaskAttempt>>> {
        read!(self, |c| tasks::attempts(c, &id))
    }

    pub async fn task_transitions(&self, id: String) -> Result<Option<Vec<TaskTransition>>> {
        read!(self, |c| status_log::read(c, &id))
    }

    pub async fn next_task_due(&self, types: Vec<String>) -> Result<Option<Millis>> {
        read!(self, |c| tasks::next_due(c, &types))
    }

    pub async fn task_counts(&self) -> Result<Vec<(TaskStatus, u64)>> {
        in_tx!(self, |tx, now| compact_counts(&tx))?;
        read!(self, |c| tasks::counts(c))
    }
}

/// Every statement is written for READ COMMITTED (ARCHITECTURE.md, "every PostgreSQL statement
/// is correct under READ COMMITTED"), which each session asks for (`connect`): a statement after
/// a lock sees what the lock's previous holder committed. SERIALIZABLE keeps every invariant too,
/// at the price of retried conflicts. REPEATABLE READ (snapshot isolation) does not: a claim
/// would count running tasks and held locks as of its first statement, before the claim gate
/// let it in.
fn check_isolation(level: &str) -> Result<()> {
    match level {
        "read committed" => Ok(()),
        "serializable" => {
            tracing::warn!(
                "the database runs transactions as serializable, not read committed as spoold \
                 asks: correct, but conflicting transactions fail and are retried"
            );
            Ok(())
        }
        other => Err(StoreError::Database(format!(
            "transactions run at isolation level {other}; spoold needs read committed \
             (or serializable)"
        ))),
    }
}

/// Fold the count deltas into one row per count. Concurrent writers keep appending meanwhile
/// (their rows are not in this transaction's snapshot); a concurrent fold waits for this one
/// and then finds the rows it would delete gone.
async fn compact_counts(tx: &Tx<'_>) -> Result<()> {
    exec(
        tx,
        "WITH gone AS (DELETE FROM delivery_count_deltas RETURNING origin, status, n) \
         INSERT INTO delivery_count_deltas (origin, status, n) \
         SELECT origin, status, SUM(n) FROM gone GROUP BY origin, status HAVING SUM(n) <> 0",
        &[],
    )
    .await?;
    exec(
        tx,
        "WITH gone AS (DELETE FROM task_count_deltas RETURNING status, n) \
         INSERT INTO task_count_deltas (status, n) \
         SELECT status, SUM(n) FROM gone GROUP BY status HAVING SUM(n) <> 0",
        &[],
    )
    .await
    .map(drop)
}

/// One statement with its parameters owned, built by the module that knows the step and run
/// by [`PgStore::step`] (or inside a transaction).
pub(crate) struct Call {
    pub sql: &'static str,
    pub params: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Call {
    pub fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// Rows of a statement prepared once per connection.
pub(crate) async fn rows<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let statement = c.prepare_cached(sql).await.map_err(map_err)?;
    c.query(&statement, params).await.map_err(map_err)
}

/// The one row of a statement, or `None`.
pub(crate) async fn row<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Option<Row>> {
    let statement = c.prepare_cached(sql).await.map_err(map_err)?;
    c.query_opt(&statement, params).await.map_err(map_err)
}

/// The one row of a statement that always returns exactly one.
pub(crate) async fn one<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let statement = c.prepare_cached(sql).await.map_err(map_err)?;
    c.query_one(&statement, params).await.map_err(map_err)
}

/// Run a statement; the number of rows it changed.
pub(crate) async fn exec<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64> {
    let statement = c.prepare_cached(sql).await.map_err(map_err)?;
    c.execute(&statement, params).await.map_err(map_err)
}

/// Read a column, naming it if the row does not hold what we expect.
pub(crate) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a Row,
    column: &str,
) -> Result<T> {
    r.try_get(column)
        .map_err(|e| StoreError::Database(format!("column {column}: {e}")))
}

/// A BIGINT column as the narrower integer the model uses.
pub(crate) fn int<T: TryFrom<i64>>(r: &Row, column: &str) -> Result<T> {
    let value: i64 = get(r, column)?;
    T::try_from(value).map_err(|_| out_of_range(column, value))
}

/// A nullable BIGINT column as the narrower integer the model uses.
pub(crate) fn opt_int<T: TryFrom<i64>>(r: &Row, column: &str) -> Result<Option<T>> {
    let value: Option<i64> = get(r, column)?;
    value
        .map(|v| T::try_from(v).map_err(|_| out_of_range(column, v)))
        .transpose()
}

pub(crate) fn out_of_range(column: &str, value: i64) -> StoreError {
    StoreError::Database(format!("column {column}: {value} is out of range"))
}

/// Not getting a connection — refused, timed out, or the server turning it away — means the
/// database is unavailable: nothing was written.
pub(crate) fn map_pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e)
            if e.as_db_error()
                .is_some_and(|db| *db.code() == SqlState::TOO_MANY_CONNECTIONS) =>
        {
            let message = format!(
                "the database refused a connection ({}): its max_connections is taken; every \
                 host opens up to --db-connections (default {DEFAULT_CONNECTIONS}), so lower it \
                 or raise max_connections",
                describe(&e)
            );
            warn_every(&REFUSED_LOGGED, &message);
            StoreError::Unavailable(message)
        }
        deadpool_postgres::PoolError::Backend(e) => {
            StoreError::Unavailable(format!("cannot connect: {}", describe(&e)))
        }
        // The connection's server was refused (a standby, a stale primary): the reason as is.
        deadpool_postgres::PoolError::PostCreateHook(deadpool_postgres::HookError::Message(
            why,
        )) => StoreError::Unavailable(why.into_owned()),
        other => StoreError::Unavailable(format!("no database connection: {other}")),
    }
}

/// When (seconds on the steady clock) a refused connection was last logged.
static REFUSED_LOGGED: AtomicI64 = AtomicI64::new(i64::MIN);

/// Log `message` at warning level unless it was logged in the last ten seconds.
fn warn_every(last: &AtomicI64, message: &str) {
    let now = crate::clock::steady_micros() / 1_000_000;
    let before = last.load(Ordering::Relaxed);
    if now.saturating_sub(before) >= 10
        && last
            .compare_exchange(before, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!("{message}");
    }
}

/// The server's own words for a database error; otherwise the error with its causes (`error
/// connecting to server: Connection refused (os error 111)`), passwords redacted.
fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{}: {}", db.severity(), db.message());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    redact_url(&text)
}

/// Statements written once for both backends, run in a PostgreSQL transaction (see
/// [`crate::sql`]).
impl Sql for Tx<'_> {
    const FOR_UPDATE: &'static str = " FOR UPDATE";

    async fn exec(&self, sql: &str, values: &[Value<'_>]) -> Result<u64> {
        let values: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        exec(self, sql, &values).await
    }

    async fn row(&self, sql: &str, values: &[Value<'_>]) -> Result<Option<sql::Row>> {
        use tokio_postgres::types::Type;
        let values: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v as _).collect();
        let Some(r) = row(self, sql, &values).await? else {
            return Ok(None);
        };
        let cell = |i: usize| -> std::result::Result<Cell, tokio_postgres::Error> {
            let ty = r.columns()[i].type_();
            Ok(if *ty == Type::INT8 {
                r.try_get::<_, Option<i64>>(i)?
                    .map_or(Cell::Null, Cell::Int)
            } else if *ty == Type::INT4 {
                r.try_get::<_, Option<i32>>(i)?
                    .map_or(Cell::Null, |n| Cell::Int(n.into()))
            } else if *ty == Type::BOOL {
                r.try_get::<_, Option<bool>>(i)?
                    .map_or(Cell::Null, Cell::Bool)
            } else {
                r.try_get::<_, Option<String>>(i)?
                    .map_or(Cell::Null, Cell::Text)
            })
        };
        (0..r.len())
            .map(|i| cell(i).map_err(|e| StoreError::Database(format!("column {i}: {e}"))))
            .collect::<Result<Vec<Cell>>>()
            .map(|cells| Some(sql::Row(cells)))
    }
}

/// Classify a PostgreSQL error into the store's terms.
pub(crate) fn map_err(e: tokio_postgres::Error) -> StoreError {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        let message = format!("{}: {}", db.severity(), db.message());
        return if *code == SqlState::DISK_FULL {
            StoreError::DiskFull(message)
        } else if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
        {
            StoreError::Contention(message)
        } else if code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW
            || *code == SqlState::TOO_MANY_CONNECTIONS
            // The server ended a session that sat inside a transaction (this host was paused:
            // `PgConfig::stalled_transaction`): the connection is gone, as in a restart.
            || *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
        {
            StoreError::Unavailable(message)
        } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
            // A standby (a failover demoted this server), or one set read-only: nothing was
            // written, and another server may take the write.
            StoreError::Unavailable(format!(
                "{message}: the server accepts no writes (a standby, or \
                 default_transaction_read_only); point --db at the primary, or list every \
                 member with target_session_attrs=read-write"
            ))
        } else if *code == SqlState::IO_ERROR || *code == SqlState::OUT_OF_MEMORY {
            StoreError::Storage(message)
        } else {
            StoreError::Database(message)
        };
    }
    let text = describe(&e);
    if e.is_closed() || std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()) {
        StoreError::Unavailable(text)
    } else {
        StoreError::Database(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session the server ends for sitting in a transaction (SQLSTATE 25P03: this host was
    /// stopped between two statements, [`PgConfig::stalled_transaction`]) is `Unavailable`, as
    /// a lost connection is: whoever gets the server's last word, the connection or the next
    /// statement, is told to try again, not that the database failed.
    #[tokio::test]
    async fn a_session_ended_for_idling_in_a_transaction_is_unavailable() {
        let Some(db) = spool_testkit::pg::TestDatabase::create()
            .await
            .expect("test database")
        else {
            return;
        };
        let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
            .await
            .expect("connect");
        let connection = tokio::spawn(connection);
        client
            .batch_execute("SET idle_in_transaction_session_timeout = '200ms'; BEGIN")
            .await
            .expect("begin");
        // Nothing more is sent: the server ends the session 200 ms in, and says why.
        let ended = tokio::time::timeout(Duration::from_secs(10), connection)
            .await
            .expect("the server ended the session within 10 s")
            .expect("the connection's task");
        let e = ended.expect_err("the server ended the session");
        assert_eq!(
            e.code(),
            Some(&SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT),
            "{e}"
        );
        assert!(matches!(map_err(e), StoreError::Unavailable(_)));
        // The statement the resumed host sends next finds the connection closed.
        let next = client
            .simple_query("SELECT 1")
            .await
            .expect_err("a closed connection");
        assert!(matches!(map_err(next), StoreError::Unavailable(_)));
    }
}
