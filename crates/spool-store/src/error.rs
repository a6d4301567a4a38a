//! Errors at the store boundary, in terms the daemon can act on (refuse to start, answer 500/507,
//! turn not-ready) without knowing which backend produced them.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds the database.
    #[error("database {path} is in use by another spoold (it holds a lock on the file)")]
    Locked { path: PathBuf },

    /// The file is not a usable database.
    #[error("database {path} is corrupt or not a spoold database: {detail}")]
    Corrupt { path: PathBuf, detail: String },

    /// The schema is newer than this binary understands.
    #[error("database schema version {found} is newer than this spoold supports ({supported}); upgrade spoold")]
    TooNew { found: i64, supported: i64 },

    /// A durability setting did not take effect.
    #[error("durability check failed: {0}")]
    Durability(String),

    /// The disk is full.
    #[error("storage is full: {0}")]
    DiskFull(String),

    /// Filesystem trouble around the database (directories, permissions, lock file).
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// The database file could not be read or written (an I/O error, or SQLite ran out of
    /// memory or found the file busy). SQLite may have rolled back the whole transaction.
    #[error("storage error: {0}")]
    Storage(String),

    /// The database server cannot be reached right now (connection refused or lost, no pooled
    /// connection within the wait): nothing was written, or — if the connection broke during
    /// COMMIT — the outcome is unknown to us. The store reconnects by itself.
    #[error("database unavailable: {0}")]
    Unavailable(String),

    /// The transaction lost a race with another one (a serialization failure or a deadlock)
    /// and was rolled back whole: it is safe to run again. The store retries it a few times
    /// before giving up with this error.
    #[error("database contention: {0}")]
    Contention(String),

    /// Any other database error.
    #[error("database error: {0}")]
    Database(String),

    /// A task status change the state machine does not allow: a bug in the caller, refused
    /// before anything was written.
    #[error("illegal task transition {from} → {to} for task {id}")]
    IllegalTransition {
        id: String,
        from: crate::tasks::TaskStatus,
        to: crate::tasks::TaskStatus,
    },

    /// The writer thread is gone (the store was shut down, or it panicked).
    #[error("store writer has stopped")]
    WriterGone,
}

impl StoreError {
    /// This error again, for another step of a transaction that failed as a whole: the same
    /// variant where the caller acts on it (unavailable, contention, full, storage), its text
    /// otherwise.
    pub fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Unavailable(m) => StoreError::Unavailable(m.clone()),
            StoreError::Contention(m) => StoreError::Contention(m.clone()),
            StoreError::DiskFull(m) => StoreError::DiskFull(m.clone()),
            StoreError::Storage(m) => StoreError::Storage(m.clone()),
            StoreError::WriterGone => StoreError::WriterGone,
            other => StoreError::Database(other.to_string()),
        }
    }

    /// Whether, after this error inside a transaction, the transaction can no longer be
    /// trusted: SQLite documents that it "may or may not" have rolled it back, and advises a
    /// full ROLLBACK.
    pub fn breaks_transaction(&self) -> bool {
        matches!(
            self,
            StoreError::DiskFull(_) | StoreError::Storage(_) | StoreError::Corrupt { .. }
        )
    }

    /// A stable code for logs and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::DiskFull(_) => "storage_full",
            StoreError::Corrupt { .. } => "storage_corrupt",
            StoreError::Unavailable(_) => "storage_unavailable",
            _ => "storage_error",
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
