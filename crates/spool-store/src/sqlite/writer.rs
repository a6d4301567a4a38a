//! Group-commit writer. This thread is the only owner of the write connection; every write
//! (enqueue, claim, result, operator action) runs here, batched into one transaction, and each
//! caller gets its reply only after COMMIT has returned with `synchronous=FULL`.
//!
//! Each job runs inside its own SAVEPOINT, so one job's ordinary error (a constraint, a logic
//! error) rolls back only that job and the rest of the batch still commits.
//!
//! **Invariant: an answer always matches what is on disk.** After an I/O error, a full disk or
//! an out-of-memory condition, SQLite may roll back the *whole* transaction by itself (typically
//! when spilling a large batch's pages fails). The writer never lets that go unnoticed: it checks
//! after every job that the batch's transaction is still open, never lets a job's SAVEPOINT open
//! a transaction of its own, and treats such an error as the end of the transaction. Every job
//! that ran in a transaction that did not commit is answered with an error, the earlier ones
//! too; the jobs not yet run go on in a fresh transaction.
//!
//! **Invariant: a write answered with an error is not stored, even when COMMIT itself failed.**
//! A COMMIT that fails (typically its fsync: `EIO`, or `ENOSPC` while appending) may have left
//! the whole transaction in the WAL file, commit frame included: the file system's cache holds
//! it even if the disk does not, and after a crash SQLite's recovery would read it back as
//! committed. Linux also forgets the failed writes once an fsync has reported them
//! ("fsyncgate"), so retrying the fsync would prove nothing. So after a failed COMMIT the
//! writer never retries it: it drops its connection, opens a new one, and commits a *fence*
//! (one small write to `meta`) before it answers the failed jobs. The fence's frames go where
//! the failed transaction's began, and its commit breaks their checksum chain, so recovery can
//! never reach them again. Until a fence has committed, no job runs: each is answered with the
//! error (and readiness, which writes, fails), so a disk that keeps failing stops writes instead
//! of piling more on an unknown state. If the fence cannot commit, the failed jobs are still
//! answered with an error, but that error can no longer promise the write is absent after a
//! crash: it says so.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::checkpoint::CheckpointSignal;
use super::map_err;
use crate::clock::Clock;
use crate::error::{Result, StoreError};
use crate::model::Millis;

/// Largest number of jobs folded into one batch. Bounds the latency a job can add to the
/// others in its batch.
const MAX_BATCH: usize = 1024;

/// The fence committed after a failed COMMIT (see the module documentation): it must change a
/// page, so that it writes a frame.
const FENCE: &str = "INSERT INTO meta (key, value) VALUES ('write_fence', ?1) \
                     ON CONFLICT (key) DO UPDATE SET value = excluded.value";

/// Opens a new write connection, set up like the first, for the writer to start over with after
/// a failed COMMIT.
pub(crate) type Reopen = Box<dyn Fn() -> Result<Connection> + Send>;

/// Sends a job's answer once the fate of its transaction is known: `None` if it committed.
type Reply = Box<dyn FnOnce(Option<&CommitError>) + Send>;
/// Runs the job's statements inside the current transaction (or, given `None`, skips them
/// because no transaction could be begun).
type Job = Box<dyn FnOnce(Option<&Connection>) -> Ran + Send>;

/// A job that has run: its reply, and whether it left the transaction unusable.
struct Ran {
    reply: Reply,
    broke: Option<CommitError>,
}

/// Why a transaction did not commit, in a form every caller of it can receive.
#[derive(Debug, Clone)]
pub(crate) struct CommitError {
    full: bool,
    message: String,
}

impl CommitError {
    fn to_store_error(&self) -> StoreError {
        if self.full {
            StoreError::DiskFull(self.message.clone())
        } else {
            StoreError::Storage(self.message.clone())
        }
    }

    fn from_store_error(e: &StoreError) -> CommitError {
        CommitError {
            full: matches!(e, StoreError::DiskFull(_)),
            message: e.to_string(),
        }
    }

    fn from_sqlite(e: &rusqlite::Error) -> CommitError {
        CommitError::from_store_error(&map_err(clone_rusqlite(e)))
    }

    /// This failure's COMMIT could not be fenced: the answer can no longer say the write is
    /// absent for good.
    fn unfenced(self) -> CommitError {
        CommitError {
            full: self.full,
            message: format!(
                "{}; the database could not be written again since, so this write may still be \
                 found after a restart",
                self.message
            ),
        }
    }

    fn lost() -> CommitError {
        CommitError {
            full: false,
            message: "the transaction was rolled back by SQLite after an error".into(),
        }
    }
}

/// Counters the writer keeps for observability.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Transactions that did not commit, since the store was opened.
    pub failures: AtomicU64,
    /// Set when a write fails for lack of space; cleared by a readiness probe that finds room
    /// (see `SqliteStore::ping`).
    pub short_of_space: AtomicBool,
    pub observer: std::sync::OnceLock<Arc<dyn CommitObserver>>,
}

/// Told about every commit: how many jobs it carried and how long it took.
pub trait CommitObserver: Send + Sync + std::fmt::Debug {
    fn committed(&self, batch_size: usize, seconds: f64, ok: bool);
}

/// Handle to the writer thread. Dropping it closes the queue and waits for the thread to commit
/// what was already queued and close its connection, so that whoever drops it may then release
/// the database lock knowing no write of theirs is still to come.
pub(crate) struct Writer {
    tx: mpsc::Sender<Job>,
    clock: Clock,
    pub(crate) stats: Arc<WriterStats>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    /// Start the thread; it stops when the handle is dropped.
    pub(crate) fn spawn(
        conn: Connection,
        reopen: Reopen,
        checkpoints: Arc<CheckpointSignal>,
        clock: Clock,
    ) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let thread_stats = Arc::clone(&stats);
        let fence_clock = clock.clone();
        let handle = thread::Builder::new()
            .name("spool-writer".into())
            .spawn(move || {
                let fencing = Fencing {
                    reopen,
                    clock: fence_clock,
                };
                run(conn, &fencing, rx, &thread_stats, &checkpoints);
            })
            .map_err(|e| StoreError::Io {
                context: "cannot start the store writer thread".into(),
                source: e,
            })?;
        Ok(Writer {
            tx,
            clock,
            stats,
            thread: Some(handle),
        })
    }

    /// Run `op` in the next batch, given the store's clock read just before it runs; resolves
    /// after that batch has committed (or failed).
    pub(crate) async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Millis) -> Result<T> + Send + 'static,
    {
        self.write_then(op, |_| ()).await
    }

    /// Like [`Self::write`], and `then` sees the result on the writer thread, before the caller
    /// does: it runs even if the caller has stopped waiting (a client that hung up).
    pub(crate) async fn write_then<T, F, G>(&self, op: F, then: G) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Millis) -> Result<T> + Send + 'static,
        G: FnOnce(&Result<T>) + Send + 'static,
    {
        self.submit(op, then)?
            .await
            .map_err(|_| StoreError::WriterGone)?
    }

    /// Queue `op` at once; the receiver yields its result after its transaction's fate is known.
    fn submit<T, F, G>(&self, op: F, then: G) -> Result<oneshot::Receiver<Result<T>>>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Millis) -> Result<T> + Send + 'static,
        G: FnOnce(&Result<T>) + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel::<Result<T>>();
        let stats = Arc::clone(&self.stats);
        let clock = self.clock.clone();
        let job: Job = Box::new(move |conn: Option<&Connection>| {
            let (outcome, broke) = match conn {
                Some(conn) => {
                    let (outcome, broke) = in_savepoint(conn, |c| op(c, clock.now_ms()));
                    (Some(outcome), broke)
                }
                None => (None, None),
            };
            let reply: Reply = Box::new(move |fate: Option<&CommitError>| {
                let result = match (fate, outcome) {
                    (None, Some(outcome)) => outcome,
                    // The job's own error is more specific than the transaction's, when it has one.
                    (Some(_), Some(Err(own))) => Err(own),
                    (Some(e), _) => Err(e.to_store_error()),
                    (None, None) => Err(StoreError::WriterGone),
                };
                // Here, on the writer thread, so that it is noted even if the caller has gone.
                if matches!(result, Err(StoreError::DiskFull(_))) {
                    stats.short_of_space.store(true, Ordering::Relaxed);
                }
                then(&result);
                // The caller may have gone away (client disconnected); the write stands anyway.
                let _ = reply_tx.send(result);
            });
            Ran { reply, broke }
        });
        self.tx.send(job).map_err(|_| StoreError::WriterGone)?;
        Ok(reply_rx)
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Swap in a sender whose receiver is already gone: ours is the only one, so the thread
        // sees the queue close once it has drained the jobs already sent.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.tx, closed));
        if let Some(thread) = self.thread.take() {
            // Jobs never own a store handle, so this is never the writer thread itself; the
            // check keeps a future mistake from turning into a self-join.
            if thread.thread().id() != thread::current().id() {
                // A writer that panicked has nothing left to finish.
                let _ = thread.join();
            }
        }
    }
}

/// Run `op` inside a savepoint of the open transaction. Returns its result, and why the
/// transaction can no longer be used, if it cannot: then it must be rolled back as a whole.
fn in_savepoint<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> Result<T>,
) -> (Result<T>, Option<CommitError>) {
    // Outside a transaction, SAVEPOINT would open one of its own and RELEASE would commit it,
    // behind the batch's back.
    if conn.is_autocommit() {
        return (
            Err(CommitError::lost().to_store_error()),
            Some(CommitError::lost()),
        );
    }
    // Cached statements: these run twice per write, so parsing them every time would show.
    let exec = |sql: &str| conn.prepare_cached(sql).and_then(|mut st| st.execute([]));
    if let Err(e) = exec("SAVEPOINT job") {
        return (
            Err(map_err(clone_rusqlite(&e))),
            Some(CommitError::from_sqlite(&e)),
        );
    }
    let outcome = op(conn);
    let broke = match &outcome {
        _ if conn.is_autocommit() => Some(match &outcome {
            Err(e) => CommitError::from_store_error(e),
            Ok(_) => CommitError::lost(),
        }),
        Ok(_) => exec("RELEASE job")
            .err()
            // Its changes would stay in the transaction although it is answered with an error.
            .map(|e| CommitError::from_sqlite(&e)),
        Err(e) if e.breaks_transaction() => Some(CommitError::from_store_error(e)),
        Err(_) => conn
            .execute_batch("ROLLBACK TO job; RELEASE job")
            .err()
            .map(|e| CommitError::from_sqlite(&e)),
    };
    match broke {
        Some(why) => {
            let own = match outcome {
                Err(e) => e,
                Ok(_) => why.to_store_error(),
            };
            (Err(own), Some(why))
        }
        None => (outcome, None),
    }
}

/// How the writer starts over after a failed COMMIT.
struct Fencing {
    reopen: Reopen,
    clock: Clock,
}

impl Fencing {
    /// A new connection in place of `conn` (dropped first), with a fence committed on it.
    fn fence(&self, conn: &mut Option<Connection>) -> Result<(), CommitError> {
        drop(conn.take());
        let fresh = (self.reopen)().map_err(|e| CommitError::from_store_error(&e))?;
        let now = self.clock.now_ms().to_string();
        let committed = fresh
            .execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| fresh.execute(FENCE, [now]))
            .and_then(|_| fresh.execute_batch("COMMIT"));
        if let Err(e) = committed {
            rollback(&fresh);
            return Err(CommitError::from_sqlite(&e));
        }
        *conn = Some(fresh);
        Ok(())
    }
}

fn run(
    conn: Connection,
    fencing: &Fencing,
    rx: mpsc::Receiver<Job>,
    stats: &WriterStats,
    checkpoints: &CheckpointSignal,
) {
    let mut queue: VecDeque<Job> = VecDeque::with_capacity(MAX_BATCH);
    // `None` while a failed COMMIT still waits for its fence.
    let mut conn = Some(conn);
    while let Ok(first) = rx.recv() {
        queue.push_back(first);
        while queue.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => queue.push_back(job),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let size = queue.len();
        let mut ok = true;
        while !queue.is_empty() {
            let failed = match conn.as_ref() {
                // Nothing runs before the fence has committed.
                None => match fencing.fence(&mut conn) {
                    Ok(()) => continue,
                    Err(e) => {
                        refuse(&mut queue, &e);
                        Some(e)
                    }
                },
                Some(c) => {
                    let settled = transaction(c, &mut queue);
                    let mut fate = settled.fate;
                    if settled.commit_failed {
                        // Before anyone hears "failed": see the module documentation.
                        if let Err(e) = fencing.fence(&mut conn) {
                            tracing::error!(error = %e.message, "store fence after a failed commit failed");
                            fate = fate.map_err(|why| why.unfenced());
                        }
                    }
                    for reply in settled.replies {
                        reply(fate.as_ref().err());
                    }
                    fate.err()
                }
            };
            if let Some(e) = failed {
                tracing::error!(error = %e.message, batch = size, "store commit failed");
                stats.failures.fetch_add(1, Ordering::Relaxed);
                ok = false;
            }
        }
        if ok {
            checkpoints.commits.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(obs) = stats.observer.get() {
            obs.committed(size, started.elapsed().as_secs_f64(), ok);
        }
        if checkpoints
            .writer_should_checkpoint
            .swap(false, Ordering::Relaxed)
        {
            // Between batches, after every caller has its answer (see `checkpoint`).
            let checkpoint = conn
                .as_ref()
                .map(|c| c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())));
            if let Some(Err(e)) = checkpoint {
                tracing::warn!(error = %e, "checkpoint by the writer failed");
            }
        }
    }
    tracing::debug!("store writer stopped");
}

/// Answer every job in `queue` with `err` without running it.
fn refuse(queue: &mut VecDeque<Job>, err: &CommitError) {
    for job in queue.drain(..) {
        (job(None).reply)(Some(err));
    }
}

/// A transaction's jobs, to be answered with its fate.
struct Settled {
    replies: Vec<Reply>,
    fate: Result<(), CommitError>,
    /// COMMIT itself failed: the transaction may be in the WAL file all the same.
    commit_failed: bool,
}

/// Run jobs from the front of `queue` in one transaction until the queue is empty or a job
/// leaves the transaction unusable, then commit (or roll back). Always takes at least one job
/// off the queue. The jobs are answered by the caller, once the fate is final.
fn transaction(conn: &Connection, queue: &mut VecDeque<Job>) -> Settled {
    if !conn.is_autocommit() {
        // Only a failed rollback leaves a transaction open; never carry it into a new batch.
        rollback(conn);
    }
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        // Nothing can run: every job waiting is answered with the error.
        let err = CommitError::from_sqlite(&e);
        refuse(queue, &err);
        return Settled {
            replies: Vec::new(),
            fate: Err(err),
            commit_failed: false,
        };
    }
    let mut replies = Vec::new();
    let mut broken = None;
    while let Some(job) = queue.pop_front() {
        let ran = job(Some(conn));
        replies.push(ran.reply);
        if let Some(why) = ran
            .broke
            .or_else(|| conn.is_autocommit().then(CommitError::lost))
        {
            broken = Some(why);
            break;
        }
    }
    let (fate, commit_failed) = match broken {
        Some(why) => {
            rollback(conn);
            (Err(why), false)
        }
        None => match conn.execute_batch("COMMIT") {
            Ok(()) => (Ok(()), false),
            Err(e) => {
                rollback(conn);
                (Err(CommitError::from_sqlite(&e)), true)
            }
        },
    };
    Settled {
        replies,
        fate,
        commit_failed,
    }
}

/// Roll back whatever is open. SQLite may already have done so itself, and then says so in an
/// error that means nothing here.
fn rollback(conn: &Connection) {
    if conn.is_autocommit() {
        return;
    }
    if let Err(e) = conn.execute_batch("ROLLBACK") {
        tracing::error!(error = %e, "store rollback failed");
    }
}

fn clone_rusqlite(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, msg) => {
            rusqlite::Error::SqliteFailure(*code, msg.clone())
        }
        other => rusqlite::Error::InvalidParameterName(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    //! The writer's bookkeeping when SQLite ends a transaction by itself. SQLite does that
    //! after an I/O error while spilling pages; here a job ends it with `ROLLBACK`, which leaves
    //! the connection in exactly that state, so the failure lands deterministically in the
    //! middle of a batch.

    use std::path::PathBuf;
    use std::sync::mpsc as std_mpsc;

    use super::*;

    struct Fixture {
        _dir: tempfile::TempDir,
        path: PathBuf,
        writer: Writer,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::TempDir::new().expect("temp dir");
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER NOT NULL UNIQUE); \
             CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        )
        .expect("schema");
        let reopen_path = path.clone();
        let reopen: Reopen = Box::new(move || {
            Connection::open(&reopen_path).map_err(|e| StoreError::Storage(e.to_string()))
        });
        let writer = Writer::spawn(
            conn,
            reopen,
            Arc::new(CheckpointSignal::default()),
            Clock::system(),
        )
        .expect("writer thread");
        Fixture {
            _dir: dir,
            path,
            writer,
        }
    }

    fn insert(conn: &Connection, x: i64) -> Result<()> {
        conn.execute("INSERT INTO t (x) VALUES (?1)", [x])
            .map(drop)
            .map_err(map_err)
    }

    /// What SQLite does to a transaction after an I/O error, and the error it reports.
    fn lose_transaction(conn: &Connection) -> Result<()> {
        conn.execute_batch("ROLLBACK").map_err(map_err)?;
        Err(StoreError::Storage("disk I/O error (simulated)".into()))
    }

    type Op = Box<dyn FnOnce(&Connection, Millis) -> Result<()> + Send>;

    impl Fixture {
        /// Run `ops` as one batch: the writer is held inside an earlier batch until all of
        /// them are queued. Returns each op's answer.
        fn batch(&self, ops: Vec<Op>) -> Vec<Result<()>> {
            let (started_tx, started_rx) = std_mpsc::channel::<()>();
            let (release_tx, release_rx) = std_mpsc::channel::<()>();
            let hold = self
                .writer
                .submit(
                    move |_, _| {
                        let _ = started_tx.send(());
                        let _ = release_rx.recv();
                        Ok(())
                    },
                    |_| (),
                )
                .expect("queue");
            started_rx.recv().expect("the writer runs the holding job");
            let replies: Vec<_> = ops
                .into_iter()
                .map(|op| self.writer.submit(op, |_| ()).expect("queue"))
                .collect();
            release_tx.send(()).expect("release the writer");
            hold.blocking_recv().expect("reply").expect("holding job");
            replies
                .into_iter()
                .map(|r| r.blocking_recv().expect("reply"))
                .collect()
        }

        fn stored(&self) -> Vec<i64> {
            let conn = Connection::open(&self.path).expect("open");
            let mut st = conn.prepare("SELECT x FROM t ORDER BY x").expect("query");
            let rows = st.query_map([], |r| r.get(0)).expect("rows");
            rows.collect::<rusqlite::Result<_>>().expect("values")
        }
    }

    fn oks(answers: &[Result<()>]) -> Vec<bool> {
        answers.iter().map(Result::is_ok).collect()
    }

    #[test]
    fn a_transaction_lost_mid_batch_fails_every_job_that_ran_in_it() {
        let f = fixture();
        let answers = f.batch(vec![
            Box::new(|c, _| insert(c, 1)),
            Box::new(|c, _| {
                insert(c, 2)?;
                lose_transaction(c)
            }),
            Box::new(|c, _| insert(c, 3)),
            Box::new(|c, _| insert(c, 4)),
        ]);
        // 1 ran in the lost transaction: answered with an error, and indeed not stored. 3 and
        // 4 ran in a fresh transaction that committed.
        assert_eq!(oks(&answers), [false, false, true, true], "{answers:?}");
        assert!(
            matches!(answers[0], Err(StoreError::Storage(_))),
            "{answers:?}"
        );
        assert_eq!(f.stored(), [3, 4]);
    }

    #[test]
    fn a_job_that_ends_the_transaction_but_reports_success_fails_too() {
        let f = fixture();
        let answers = f.batch(vec![
            Box::new(|c, _| insert(c, 1)),
            Box::new(|c, _| {
                insert(c, 2)?;
                c.execute_batch("ROLLBACK").map_err(map_err)
            }),
            Box::new(|c, _| insert(c, 3)),
        ]);
        assert_eq!(oks(&answers), [false, false, true], "{answers:?}");
        assert_eq!(f.stored(), [3]);
    }

    #[test]
    fn a_job_whose_savepoint_cannot_be_released_is_not_kept() {
        let f = fixture();
        let answers = f.batch(vec![
            Box::new(|c, _| insert(c, 1)),
            Box::new(|c, _| {
                insert(c, 2)?;
                // Releases the job's savepoint early, so the writer's own RELEASE fails.
                c.execute_batch("RELEASE job").map_err(map_err)
            }),
            Box::new(|c, _| insert(c, 3)),
        ]);
        assert_eq!(oks(&answers), [false, false, true], "{answers:?}");
        assert_eq!(f.stored(), [3]);
    }

    #[test]
    fn an_ordinary_error_fails_only_its_own_job() {
        let f = fixture();
        let answers = f.batch(vec![
            Box::new(|c, _| insert(c, 1)),
            // A unique-constraint violation: rolled back to its savepoint alone.
            Box::new(|c, _| {
                insert(c, 2)?;
                insert(c, 1)
            }),
            Box::new(|c, _| insert(c, 3)),
        ]);
        assert_eq!(oks(&answers), [true, false, true], "{answers:?}");
        assert_eq!(f.stored(), [1, 3]);
    }

    #[test]
    fn an_io_error_the_transaction_survived_still_ends_it() {
        let f = fixture();
        let answers = f.batch(vec![
            Box::new(|c, _| insert(c, 1)),
            // SQLite kept the transaction open, but advises a full rollback after such errors.
            Box::new(|_, _| Err(StoreError::DiskFull("database or disk is full".into()))),
            Box::new(|c, _| insert(c, 3)),
        ]);
        assert_eq!(oks(&answers), [false, false, true], "{answers:?}");
        assert!(
            matches!(answers[1], Err(StoreError::DiskFull(_))),
            "{answers:?}"
        );
        assert_eq!(f.stored(), [3]);
    }

    #[test]
    fn then_runs_on_the_writer_even_when_the_caller_is_gone() {
        let f = fixture();
        let (seen_tx, seen_rx) = std_mpsc::channel::<bool>();
        let reply = f
            .writer
            .submit(
                |c, _| insert(c, 7),
                move |r: &Result<()>| {
                    let _ = seen_tx.send(r.is_ok());
                },
            )
            .expect("queue");
        drop(reply);
        assert_eq!(
            seen_rx.recv_timeout(std::time::Duration::from_secs(10)),
            Ok(true)
        );
        assert_eq!(f.stored(), [7]);
    }
}
