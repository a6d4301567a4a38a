//! The SQLite backend: the conformance suite, plus what only a file-backed store has to get
//! right — the one-process lock, refusing corrupt or newer databases, private file modes and the
//! durability pragmas.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};
use spool_store::model::{DeliveryStatus, InsertOutcome};
use spool_store::sqlite::{Durability, SqliteConfig, SqliteStore};
use spool_store::{Store, StoreError};
use tempfile::TempDir;

use crate::conformance::{id, new_delivery, Backend, URL_A};

/// A database file in its own temporary directory, removed when the test ends.
pub struct SqliteBackend {
    path: PathBuf,
    _dir: TempDir,
}

impl Backend for SqliteBackend {
    async fn fresh() -> Option<(Self, Store)> {
        let dir = TempDir::new().expect("temp dir");
        let path = dir.path().join("spool.db");
        let store = open(&path, 0).expect("open a fresh store");
        Some((SqliteBackend { path, _dir: dir }, store))
    }

    async fn reopen(&self, store: Store, max_db_bytes: u64) -> Store {
        // Dropping the last handle releases the lock, so the same process may open it again.
        drop(store);
        open(&self.path, max_db_bytes).expect("reopen")
    }
}

mod suite {
    crate::conformance::conformance_suite!(super::SqliteBackend);
}

fn open(path: &Path, max_db_bytes: u64) -> Result<Store, StoreError> {
    let mut config = SqliteConfig::new(path);
    config.max_db_bytes = max_db_bytes;
    SqliteStore::open(&config).map(Store::Sqlite)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn second_open_is_locked() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let _first = open(&path, 0).expect("first open");
    match open(&path, 0) {
        Err(StoreError::Locked { path: locked }) => assert_eq!(locked, path),
        other => panic!("expected Locked, got {other:?}"),
    }
}

/// The lock is on the file, not on the name: another path to the same file is refused too
/// (a second owner would reclaim the first one's live claims and send them again).
#[tokio::test]
async fn another_path_to_the_same_file_is_locked() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let _first = open(&path, 0).expect("first open");
    let symlink = dir.path().join("symlink.db");
    std::os::unix::fs::symlink(&path, &symlink).expect("symlink");
    let hard_link = dir.path().join("hard-link.db");
    std::fs::hard_link(&path, &hard_link).expect("hard link");
    for other in [symlink, hard_link, dir.path().join(".").join("spool.db")] {
        match open(&other, 0) {
            Err(StoreError::Locked { path: locked }) => assert_eq!(locked, other),
            res => panic!("{}: expected Locked, got {res:?}", other.display()),
        }
    }
}

#[tokio::test]
async fn reopen_after_drop_keeps_data() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let store = open(&path, 0).expect("open");
    let created = match store
        .insert(new_delivery(&id(1), Some("order-1"), URL_A))
        .await
        .expect("insert")
    {
        InsertOutcome::Created(d) => d,
        other => panic!("expected Created, got {other:?}"),
    };
    store
        .insert(new_delivery(&id(2), None, URL_A))
        .await
        .expect("insert");
    store.cancel(id(2)).await.expect("cancel");
    let clone = store.clone();
    drop(store);
    assert!(
        matches!(open(&path, 0), Err(StoreError::Locked { .. })),
        "a live clone still holds the lock"
    );
    drop(clone);

    let store = open(&path, 0).expect("reopen");
    assert_eq!(store.get(id(1)).await.expect("get"), Some(created.clone()));
    let canceled = store.get(id(2)).await.expect("get").expect("exists");
    assert_eq!(canceled.status, DeliveryStatus::Canceled);
    // Idempotency keys survive too.
    match store
        .insert(new_delivery(&id(3), Some("order-1"), URL_A))
        .await
        .expect("insert")
    {
        InsertOutcome::Existing(d) => assert_eq!(d, created),
        other => panic!("expected Existing, got {other:?}"),
    }
}

#[tokio::test]
async fn garbage_file_is_corrupt_and_left_alone() {
    let dir = TempDir::new().expect("temp dir");
    for (name, len) in [
        ("tiny.db", 7),
        ("short.db", 150),
        ("page.db", 4096),
        ("big.db", 70_000),
    ] {
        let path = dir.path().join(name);
        let garbage: Vec<u8> = (0..len)
            .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&path, &garbage).expect("write garbage");
        match open(&path, 0) {
            Err(StoreError::Corrupt { path: bad, detail }) => {
                assert_eq!(bad, path, "{name}");
                assert!(!detail.is_empty(), "{name}");
            }
            other => panic!("{name} ({len} bytes): expected Corrupt, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(&path).expect("read back"),
            garbage,
            "{name}: a refused file is not modified"
        );
    }
}

#[tokio::test]
async fn newer_schema_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    drop(open(&path, 0).expect("create"));
    let supported: i64 = {
        let conn = Connection::open(&path).expect("open with rusqlite");
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("read user_version");
        conn.pragma_update(None, "user_version", 99)
            .expect("set user_version");
        version
    };
    assert!(supported >= 1);
    match open(&path, 0) {
        Err(StoreError::TooNew {
            found,
            supported: s,
        }) => {
            assert_eq!(found, 99);
            assert_eq!(s, supported);
        }
        other => panic!("expected TooNew, got {other:?}"),
    }

    // The refusal released the lock and changed nothing: back at the known version it opens.
    Connection::open(&path)
        .expect("open with rusqlite")
        .pragma_update(None, "user_version", supported)
        .expect("restore user_version");
    let store = open(&path, 0).expect("open at the supported version");
    store.ping().await.expect("ping");
}

#[tokio::test]
async fn created_files_are_private() {
    let dir = TempDir::new().expect("temp dir");
    let data = dir.path().join("state").join("spool");
    let path = data.join("spool.db");
    let store = open(&path, 0).expect("open");
    store
        .insert(new_delivery(&id(1), None, URL_A))
        .await
        .expect("insert");

    assert_eq!(mode(&dir.path().join("state")), 0o700);
    assert_eq!(mode(&data), 0o700);
    for file in [path.clone(), sibling(&path, "-wal"), sibling(&path, "-shm")] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
}

#[tokio::test]
async fn durability_settings_hold() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let config = SqliteConfig::new(&path);
    let sqlite = SqliteStore::open(&config).expect("open");
    assert_eq!(
        sqlite.durability().await.expect("durability"),
        Durability {
            journal_mode: "wal".to_owned(),
            synchronous: 2,
        }
    );

    // WAL is a property of the file: a separate, read-only connection sees it too.
    let reader = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let journal_mode: String = reader
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("journal_mode");
    assert_eq!(journal_mode.to_ascii_lowercase(), "wal");
    let auto_vacuum: i64 = reader
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .expect("auto_vacuum");
    assert_eq!(
        auto_vacuum, 2,
        "incremental auto-vacuum, so retention can shrink the file"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelled_read_does_not_starve_the_reader_pool() {
    use std::future::Future;
    use std::task::Poll;

    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let mut config = SqliteConfig::new(&path);
    config.readers = 1;
    let store = Store::Sqlite(SqliteStore::open(&config).expect("open"));
    // Concurrent inserts share commits, so this costs a handful of fsyncs, not thousands.
    let mut inserts = tokio::task::JoinSet::new();
    for n in 1..=3000 {
        let store = store.clone();
        inserts.spawn(async move {
            store
                .insert(new_delivery(&id(n), None, URL_A))
                .await
                .expect("insert")
        });
    }
    inserts.join_all().await;
    // Start a slow read on the only reader connection, then walk away from it, as an API
    // handler does when its client disconnects.
    let mut slow = Box::pin(store.list(None, 3000, None));
    let first = std::future::poll_fn(|cx| Poll::Ready(slow.as_mut().poll(cx))).await;
    assert!(first.is_pending(), "the read runs on a blocking thread");
    drop(slow);
    // The next read must wait for the connection, not fail for the lack of one.
    let got = store.get(id(1)).await.expect("read after a cancelled read");
    assert!(got.is_some());
}

#[tokio::test]
async fn foreign_database_is_refused_and_left_alone() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("photos.db");
    Connection::open(&path)
        .expect("create with rusqlite")
        .execute_batch(
            "CREATE TABLE photos (id INTEGER PRIMARY KEY); INSERT INTO photos VALUES (7);",
        )
        .expect("another program's schema");
    let before = std::fs::read(&path).expect("read");
    match open(&path, 0) {
        Err(StoreError::Corrupt { path: bad, detail }) => {
            assert_eq!(bad, path);
            assert!(detail.contains("schema version"), "{detail}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
        .expect("list tables");
    assert_eq!(tables, ["photos"]);
    // Not a byte changed, and no WAL was set up beside it.
    assert!(
        std::fs::read(&path).expect("read") == before,
        "the file was changed"
    );
    assert!(!sibling(&path, "-wal").exists());
}

#[tokio::test]
async fn empty_file_is_set_up_like_a_new_one() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    std::fs::write(&path, b"").expect("touch");
    let store = open(&path, 0).expect("open");
    store
        .insert(new_delivery(&id(1), None, URL_A))
        .await
        .expect("insert");
    let auto_vacuum: i64 = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only")
        .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
        .expect("auto_vacuum");
    assert_eq!(auto_vacuum, 2, "incremental");
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_writes_finish_before_the_lock_is_released() {
    use std::future::Future;
    use std::task::Poll;

    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let store = open(&path, 0).expect("open");
    // Callers that hand a write to the store and then stop waiting (a client that
    // disconnects): the writes stand, and they belong to this store's tenure.
    let mut abandoned = Vec::new();
    for n in 1..=500 {
        let mut insert = Box::pin(store.insert(new_delivery(&id(n), None, URL_A)));
        let first = std::future::poll_fn(|cx| Poll::Ready(insert.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        abandoned.push(insert);
    }
    drop(abandoned);
    drop(store);

    let store = open(&path, 0).expect("reopen");
    let page = store.list(None, 1000, None).await.expect("list");
    assert_eq!(
        page.deliveries.len(),
        500,
        "every queued write landed before the reopen"
    );
}

/// Checkpoints run off the write path, but they do run: thousands of small commits leave a WAL
/// far smaller than the sum of what they wrote (each commit appends at least two 4 KiB pages),
/// even when commits never pause long enough for a background checkpoint to finish. How long
/// the WAL grows before a checkpoint rewinds it depends on how late the checkpoint thread gets
/// to run (it reached 22 MB once, on a CI machine busy with other tests), not on how many
/// commits there are: so enough commits that a bounded WAL stays far below their sum.
#[tokio::test(flavor = "multi_thread")]
async fn the_wal_is_checkpointed_in_the_background() {
    const COMMITS: u32 = 16_000;
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let store = open(&path, 0).expect("open");
    for n in 0..COMMITS {
        match store
            .insert(new_delivery(&id(n), None, URL_A))
            .await
            .expect("insert")
        {
            InsertOutcome::Created(_) => {}
            other => panic!("{other:?}"),
        }
    }
    let wal = std::fs::metadata(sibling(&path, "-wal"))
        .expect("wal")
        .len();
    let unbounded = u64::from(COMMITS) * 2 * 4096;
    assert!(
        wal < unbounded / 3,
        "WAL is {wal} bytes after {COMMITS} commits"
    );
}

/// A database from before the counts (schema 3) gets them at the upgrade, counted once from its
/// rows; from then on the triggers keep them.
#[tokio::test]
async fn counts_are_built_when_an_older_database_is_upgraded() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spool.db");
    let store = open(&path, 0).expect("open");
    for n in 1..=5 {
        store
            .insert(new_delivery(&id(n), None, URL_A))
            .await
            .expect("insert");
    }
    store.cancel(id(1)).await.expect("cancel");
    drop(store);
    // Back to schema 3, as an older spoold left it.
    Connection::open(&path)
        .expect("open with rusqlite")
        .execute_batch(
            "DROP TRIGGER deliveries_counted_in; DROP TRIGGER deliveries_counted_out; \
             DROP TRIGGER deliveries_counted_moved; DROP TABLE status_counts; \
             DROP TABLE origin_counts; DROP TABLE transitions; \
             DROP TABLE tasks; DROP TABLE task_attempts; DROP TABLE task_transitions; \
             DROP TABLE task_counts; DROP TABLE task_locks; DROP TABLE task_steps; \
             ALTER TABLE deliveries DROP COLUMN log_seq; DROP INDEX deliveries_checks; \
             DROP TABLE checks; ALTER TABLE deliveries DROP COLUMN mode; \
             ALTER TABLE deliveries DROP COLUMN fingerprint; \
             ALTER TABLE deliveries DROP COLUMN reconcile; \
             ALTER TABLE deliveries DROP COLUMN remote_id_pointer; \
             ALTER TABLE deliveries DROP COLUMN window_ms; \
             ALTER TABLE deliveries DROP COLUMN remote_id; \
             ALTER TABLE deliveries DROP COLUMN unknown_since; \
             ALTER TABLE deliveries DROP COLUMN review_at; \
             ALTER TABLE deliveries DROP COLUMN check_at; \
             ALTER TABLE deliveries DROP COLUMN checks; \
             ALTER TABLE deliveries DROP COLUMN sign_secret; PRAGMA user_version = 3;",
        )
        .expect("downgrade");

    let store = open(&path, 0).expect("upgrade");
    let stats = store.stats().await.expect("stats");
    let mut counts: Vec<_> = stats.by_status;
    counts.sort_by_key(|(s, _)| s.as_str());
    assert_eq!(
        counts,
        [(DeliveryStatus::Canceled, 1), (DeliveryStatus::Pending, 4)]
    );
    let origins = store.origins(10, None).await.expect("origins");
    assert_eq!(origins.len(), 1);
    assert_eq!((origins[0].pending, origins[0].in_flight), (4, 0));
    store.cancel(id(2)).await.expect("cancel");
    let stats = store.stats().await.expect("stats");
    assert!(stats.by_status.contains(&(DeliveryStatus::Pending, 3)));
}
