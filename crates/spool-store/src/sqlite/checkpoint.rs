//! WAL checkpoints off the write path. SQLite's automatic checkpoint runs inside the COMMIT
//! that crosses the threshold, so every thousandth commit would also copy the WAL into the
//! database and fsync it, and every caller in that batch would wait. Instead the writer's
//! auto-checkpoint is off and this thread, with its own connection, runs PASSIVE checkpoints
//! (which never block the writer) shortly after commits happen.
//!
//! A passive checkpoint cannot finish while the writer keeps appending, and the WAL is only
//! rewound once a checkpoint has finished. So when the WAL passes [`FORCE_FRAMES`], the writer
//! is asked to run one checkpoint itself between two batches: by then nearly every frame has
//! been copied already, so that checkpoint is short, and the WAL starts over.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rusqlite::Connection;

/// How often the thread looks for new commits.
const EVERY: Duration = Duration::from_millis(100);
/// WAL frames (pages) after which the writer is asked to finish a checkpoint: 8 MiB.
pub(crate) const FORCE_FRAMES: i64 = 2048;

/// Shared between the writer (which counts commits) and the checkpointer.
#[derive(Debug, Default)]
pub(crate) struct CheckpointSignal {
    pub(crate) commits: AtomicU64,
    /// Set by the checkpointer when the WAL is long; taken by the writer.
    pub(crate) writer_should_checkpoint: AtomicBool,
    stop: AtomicBool,
}

/// Handle to the checkpoint thread; dropping it stops and joins the thread.
pub(crate) struct Checkpointer {
    signal: Arc<CheckpointSignal>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Checkpointer {
    pub(crate) fn spawn(conn: Connection, signal: Arc<CheckpointSignal>) -> std::io::Result<Self> {
        let thread_signal = Arc::clone(&signal);
        let thread = thread::Builder::new()
            .name("spool-checkpoint".into())
            .spawn(move || run(&conn, &thread_signal))?;
        Ok(Checkpointer {
            signal,
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.signal.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn run(conn: &Connection, signal: &CheckpointSignal) {
    let mut seen = 0;
    while !signal.stop.load(Ordering::Relaxed) {
        thread::park_timeout(EVERY);
        let commits = signal.commits.load(Ordering::Relaxed);
        if commits == seen {
            continue;
        }
        seen = commits;
        // A failure (disk full, busy) is not fatal: the WAL keeps the data, and the next round
        // tries again.
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1)) {
            Ok(frames) if frames >= FORCE_FRAMES => {
                signal
                    .writer_should_checkpoint
                    .store(true, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "passive checkpoint failed; will retry"),
        }
    }
}
