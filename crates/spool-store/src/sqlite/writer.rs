//! Group-commit writer. This thread is the only owner of the write connection; every write
//! (enqueue, claim, result, operator action) runs here, batched into one transaction, and each
//! caller gets its reply only after COMMIT has returned with `synchronous=FULL`.
//!
//! Each job runs inside its own SAVEPOINT, so one job's error rolls back only that job and the
//! rest of the batch still commits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::checkpoint::CheckpointSignal;
use super::map_err;
use crate::error::{Result, StoreError};

/// Largest number of jobs folded into one transaction. Bounds the latency a job can add to the
/// others in its batch.
const MAX_BATCH: usize = 1024;

type Reply = Box<dyn FnOnce(&Result<(), CommitError>) + Send>;
/// Runs the job's statements (or, given `None`, skips them because the batch could not begin)
/// and returns the reply to send once the batch's fate is known.
type Job = Box<dyn FnOnce(Option<&Connection>) -> Reply + Send>;

/// Why a batch did not commit, in a form every caller of the batch can receive.
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
            StoreError::Database(self.message.clone())
        }
    }
}

/// Counters the writer keeps for observability.
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Set while the last transaction failed; cleared by the next one that commits.
    pub failing: AtomicBool,
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
    pub(crate) stats: Arc<WriterStats>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Writer {
    /// Start the thread; it stops when the handle is dropped.
    pub(crate) fn spawn(conn: Connection, checkpoints: Arc<CheckpointSignal>) -> Result<Writer> {
        let (tx, rx) = mpsc::channel::<Job>();
        let stats = Arc::new(WriterStats::default());
        let thread_stats = Arc::clone(&stats);
        let handle = thread::Builder::new()
            .name("spool-writer".into())
            .spawn(move || run(conn, rx, &thread_stats, &checkpoints))
            .map_err(|e| StoreError::Io {
                context: "cannot start the store writer thread".into(),
                source: e,
            })?;
        Ok(Writer {
            tx,
            stats,
            thread: Some(handle),
        })
    }

    /// Run `op` in the next batch; resolves after that batch has committed (or failed).
    pub(crate) async fn write<T, F>(&self, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let (reply_tx, reply_rx) = oneshot::channel::<Result<T>>();
        let stats = Arc::clone(&self.stats);
        let job: Job = Box::new(move |conn: Option<&Connection>| {
            let outcome = conn.map(|conn| in_savepoint(conn, op));
            Box::new(move |commit: &Result<(), CommitError>| {
                let result = match (commit, outcome) {
                    (Ok(()), Some(outcome)) => outcome,
                    // The job's own error is more specific than the commit's, when it has one.
                    (Err(_), Some(Err(own))) => Err(own),
                    (Err(e), _) => Err(e.to_store_error()),
                    (Ok(()), None) => Err(StoreError::WriterGone),
                };
                // Here, on the writer thread, so that it is noted even if the caller has gone.
                if matches!(result, Err(StoreError::DiskFull(_))) {
                    stats.short_of_space.store(true, Ordering::Relaxed);
                }
                // The caller may have gone away (client disconnected); the write stands anyway.
                let _ = reply_tx.send(result);
            })
        });
        self.tx.send(job).map_err(|_| StoreError::WriterGone)?;
        reply_rx.await.map_err(|_| StoreError::WriterGone)?
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

fn in_savepoint<T>(conn: &Connection, op: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    // Cached statements: these run twice per write, so parsing them every time would show.
    let exec = |sql: &str| {
        conn.prepare_cached(sql)
            .and_then(|mut st| st.execute([]))
            .map_err(map_err)
    };
    exec("SAVEPOINT job")?;
    match op(conn) {
        Ok(v) => {
            exec("RELEASE job")?;
            Ok(v)
        }
        Err(e) => {
            // If even the rollback fails the transaction is broken; COMMIT will report it.
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            Err(e)
        }
    }
}

fn run(
    conn: Connection,
    rx: mpsc::Receiver<Job>,
    stats: &WriterStats,
    checkpoints: &CheckpointSignal,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut replies: Vec<Reply> = Vec::with_capacity(MAX_BATCH);
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = std::time::Instant::now();
        let size = batch.len();
        let commit = match conn.execute_batch("BEGIN IMMEDIATE") {
            Ok(()) => {
                replies.extend(batch.drain(..).map(|job| job(Some(&conn))));
                conn.execute_batch("COMMIT").map_err(|e| {
                    let _ = conn.execute_batch("ROLLBACK");
                    commit_error(&e)
                })
            }
            Err(e) => Err(commit_error(&e)),
        };
        if !batch.is_empty() {
            // BEGIN failed: the jobs do not run; they are answered with the error below.
            replies.extend(batch.drain(..).map(|job| job(None)));
        }
        let ok = commit.is_ok();
        if ok {
            checkpoints.commits.fetch_add(1, Ordering::Relaxed);
        }
        stats.failing.store(!ok, Ordering::Relaxed);
        if let Err(e) = &commit {
            tracing::error!(error = %e.message, batch = size, "store commit failed");
        }
        if let Some(obs) = stats.observer.get() {
            obs.committed(size, started.elapsed().as_secs_f64(), ok);
        }
        for reply in replies.drain(..) {
            reply(&commit);
        }
        if checkpoints
            .writer_should_checkpoint
            .swap(false, Ordering::Relaxed)
        {
            // Between batches, after every caller has its answer (see `checkpoint`).
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::warn!(error = %e, "checkpoint by the writer failed");
            }
        }
    }
    tracing::debug!("store writer stopped");
}

fn commit_error(e: &rusqlite::Error) -> CommitError {
    let full = matches!(map_err(clone_rusqlite(e)), StoreError::DiskFull(_));
    CommitError {
        full,
        message: e.to_string(),
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
