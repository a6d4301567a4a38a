//! Backups of the embedded database while the daemon runs, the two ways the book gives
//! (docs/src/production.md, "Backups"):
//! `sqlite3 spoold.db ".backup FILE"` and `VACUUM INTO`. Taken under a stream of creates, each
//! backup is a whole database (integrity check ok) that holds every delivery acknowledged before
//! it began, and a daemon starts on it and serves them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spool_testkit::privileged::{self, available};
use spool_testkit::{Api, DaemonOptions, DaemonProcess};
use tempfile::TempDir;

use crate::{db_path, id_of, WAIT};

const WRITERS: usize = 8;

#[tokio::test(flavor = "multi_thread")]
async fn backups_taken_under_load_hold_every_acknowledged_delivery() {
    let Some(_) = available(
        "SPOOLD_REQUIRE_TOOLS",
        privileged::run("sqlite3", ["--version"]),
    ) else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let db = db_path(&dir);
    let mut daemon = DaemonProcess::start(DaemonOptions::new(&db))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());

    // Creates of mixed sizes, never stopping until the backups are taken.
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (api, acknowledged, stop) = (api.clone(), acknowledged.clone(), stop.clone());
        writers.spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let body = "x".repeat((w * 7919 + n * 104_729) % 20_000);
                let (status, created) = api
                    .create(json!({"targetUrl": format!("http://127.0.0.1:9/{w}/{n}"),
                                   "notBefore": "2099-01-01T00:00:00Z", "body": body}))
                    .await
                    .expect("create");
                assert_eq!(status, 201, "{created}");
                acknowledged.lock().expect("lock").push(id_of(&created));
            }
        });
    }
    let acknowledged_by = |at_least: usize| {
        let acknowledged = acknowledged.clone();
        async move {
            let deadline = tokio::time::Instant::now() + WAIT;
            loop {
                let now: BTreeSet<String> =
                    acknowledged.lock().expect("lock").iter().cloned().collect();
                if now.len() >= at_least {
                    return now;
                }
                assert!(tokio::time::Instant::now() < deadline, "creates stalled");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };

    // sqlite3's .backup (the online backup API), as an operator would run it.
    let before_cli = acknowledged_by(300).await;
    let cli_copy = dir.path().join("backup-cli.db");
    let mut cli = tokio::process::Command::new("sqlite3");
    cli.arg(&db)
        .arg(format!(".backup '{}'", cli_copy.display()));
    let out = spool_testkit::run_in_group(cli, WAIT)
        .await
        .expect("sqlite3 .backup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // VACUUM INTO, from another connection of any SQLite (here rusqlite's).
    let before_vacuum = acknowledged_by(before_cli.len() + 300).await;
    let vacuum_copy = dir.path().join("backup-vacuum.db");
    let (from, to) = (db.clone(), vacuum_copy.clone());
    tokio::task::spawn_blocking(move || {
        rusqlite::Connection::open(&from)
            .expect("open the live database")
            .execute("VACUUM INTO ?1", [to.display().to_string()])
            .expect("VACUUM INTO")
    })
    .await
    .expect("vacuum");

    let after = acknowledged_by(before_vacuum.len() + 100).await;
    stop.store(true, Ordering::Relaxed);
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
    daemon.terminate().await.expect("stop");
    assert!(after.len() > before_vacuum.len());

    for (copy, wanted) in [(cli_copy, before_cli), (vacuum_copy, before_vacuum)] {
        assert_restorable(dir.path(), &copy, &wanted).await;
    }
}

/// `copy` is a whole database that a daemon starts on, serving every delivery in `wanted`.
async fn assert_restorable(dir: &Path, copy: &Path, wanted: &BTreeSet<String>) {
    let check: String = rusqlite::Connection::open(copy)
        .expect("open the backup")
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity_check");
    assert_eq!(check, "ok", "{}", copy.display());
    // Restored as an operator would: the file put where a daemon keeps its database.
    let restored: PathBuf = dir
        .join(copy.file_stem().expect("a name"))
        .join("spoold.db");
    std::fs::create_dir_all(restored.parent().expect("a parent")).expect("dir");
    std::fs::copy(copy, &restored).expect("restore");
    let mut daemon = DaemonProcess::start(DaemonOptions::new(&restored))
        .await
        .expect("a daemon on the backup");
    let api = Api::new(daemon.base_url());
    let (_, _, stats) = api
        .request(http::Method::GET, "/v1/stats", None)
        .await
        .expect("stats");
    let stats: serde_json::Value = serde_json::from_slice(&stats).expect("JSON");
    let pending = stats["deliveries"]["pending"].as_u64().unwrap_or(0);
    assert!(
        pending >= wanted.len() as u64,
        "{}: {pending} pending, {} acknowledged before the backup",
        copy.display(),
        wanted.len()
    );
    for id in wanted {
        let (status, delivery) = api.get(id).await.expect("get");
        assert_eq!(
            status,
            200,
            "{}: {id} is missing: {delivery}",
            copy.display()
        );
    }
    daemon.terminate().await.expect("stop");
}
