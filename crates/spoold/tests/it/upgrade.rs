//! Upgrades of the embedded database: a file an older spoold wrote (committed as a fixture by
//! `tests/fixtures/make-sqlite-fixture`) is migrated on start and everything in it is served and
//! worked on; a file from a newer spoold is refused, untouched, with a message that says so.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::tasks::{get, submit};
use crate::{db_path, id_of, WAIT};

/// The database spoold at commit 7095ed0 (SQLite schema 8: deliveries, at-most-once, tasks)
/// left after the fixture script's run.
const FIXTURE: &str = "spoold-7095ed0.db";

/// The task type the fixture's tasks were submitted to, as the script declared it.
const TASK_TYPES: &str = r#"
[tasks.echo]
command = ["/bin/sh", "-c", "echo \"$0\"; exit \"$1\"", "{word}", "{code}"]
params.word = { pattern = "[a-z]{1,16}" }
params.code = { pattern = "[0-9]" }
idempotency_key = "echo:{word}"
"#;

/// A copy of the fixture where a test daemon keeps its database, and a configuration file with
/// the fixture's task type.
fn copy_fixture(dir: &TempDir) -> (PathBuf, PathBuf) {
    let db = db_path(dir);
    std::fs::create_dir_all(db.parent().expect("a parent")).expect("data dir");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(FIXTURE),
        &db,
    )
    .expect("copy the fixture");
    let config = dir.path().join("spoold.toml");
    std::fs::write(&config, TASK_TYPES).expect("write the configuration");
    (db, config)
}

/// The fixture's deliveries were created with the default expiry of a day, so the pending one
/// would expire a day after the fixture was made and the test would mean something else on
/// every later date. Its expiry moves a century on, in the copy only: the test is about the
/// migration, and the row is otherwise as the old spoold left it.
fn keep_pending_unexpired(db: &Path) {
    let moved = rusqlite::Connection::open(db)
        .expect("open")
        .execute(
            "UPDATE deliveries SET expires_at = expires_at + 100 * 365 * 86400000 \
             WHERE status = 'pending'",
            [],
        )
        .expect("move the expiry");
    assert_eq!(moved, 1, "the fixture has one pending delivery");
}

fn user_version(db: &Path) -> i64 {
    rusqlite::Connection::open(db)
        .expect("open")
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("user_version")
}

/// Each delivery of a listing, by the path of its target URL.
fn by_path(listing: &Value) -> std::collections::BTreeMap<String, Value> {
    listing["deliveries"]
        .as_array()
        .expect("deliveries")
        .iter()
        .map(|d| {
            let url = d["targetUrl"].as_str().expect("targetUrl");
            let path = url.splitn(4, '/').nth(3).unwrap_or_default().to_owned();
            (path, d.clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_of_the_previous_release_is_migrated_and_served() {
    let dir = TempDir::new().expect("temp dir");
    let (db, config) = copy_fixture(&dir);
    assert_eq!(user_version(&db), 8, "the fixture is schema 8");
    keep_pending_unexpired(&db);
    // Finished deliveries are kept forever here: from a week after the fixture was made, the
    // default retention (7 days) would have the first purge (a minute after start) remove the
    // fixture's, and a run slow enough to reach it would find fewer.
    let mut daemon = DaemonProcess::start(DaemonOptions::new(&db).args([
        "--config".to_owned(),
        config.display().to_string(),
        "--terminal-retention".to_owned(),
        "0".to_owned(),
    ]))
    .await
    .expect("spoold starts on the old database");
    let api = Api::new(daemon.base_url());

    // Every delivery is there, as the old spoold left it.
    let listing = get(&api, "/v1/deliveries?limit=100").await;
    let found = by_path(&listing);
    let status_of = |path: &str| {
        found[path]["status"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(found.len(), 5, "{listing}");
    assert_eq!(status_of("delivered"), "succeeded");
    assert_eq!(status_of("refused"), "failed");
    assert_eq!(status_of("delivered-once"), "succeeded");
    assert_eq!(status_of("later"), "canceled");
    // Pending after a refused attempt, its next one due an hour after the fixture was made:
    // by now it may be due, and be tried again (to a port where nothing listens).
    assert!(
        ["pending", "in_flight"].contains(&status_of("closed").as_str()),
        "{listing}"
    );
    assert_eq!(found["delivered-once"]["mode"], "at_most_once", "{listing}");
    let closed = id_of(&found["closed"]);
    let (_, attempts) = api.attempts(&closed).await.expect("attempts");
    let attempts = attempts["attempts"].as_array().expect("attempts").clone();
    assert!(!attempts.is_empty(), "{attempts:?}");
    assert_eq!(attempts[0]["errorCode"], "connect_failed", "{attempts:?}");
    let (_, transitions) = api
        .transitions(&id_of(&found["refused"]))
        .await
        .expect("log");
    assert!(
        transitions.to_string().contains("failed"),
        "the transition log came along: {transitions}"
    );

    // Its idempotency keys still answer: the same request is the same delivery, another is a
    // conflict.
    let delivered = &found["delivered"];
    let (_, original) = api.get(&id_of(delivered)).await.expect("get");
    let again = json!({
        "targetUrl": original["targetUrl"],
        "body": {"n": 1},
        "idempotencyKey": "fixture-delivered",
    });
    let (status, same) = api.create(again.clone()).await.expect("create");
    assert_eq!((status, id_of(&same)), (200, id_of(delivered)), "{same}");
    let mut other = again;
    other["body"] = json!({"n": 100});
    let (status, conflict) = api.create(other).await.expect("create");
    assert_eq!(status, 409, "{conflict}");

    // Its tasks, their attempts and business keys.
    let tasks = get(&api, "/v1/tasks?type=echo").await;
    assert_eq!(tasks["count"], 2, "{tasks}");
    let (status, existing) = submit(
        &api,
        json!({"type": "echo", "params": {"word": "hello", "code": "0"}}),
    )
    .await;
    assert_eq!(
        (status, &existing["status"]),
        (200, &json!("succeeded")),
        "{existing}"
    );
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id_of(&existing))).await;
    assert_eq!(attempts["attempts"][0]["exitCode"], 0, "{attempts}");

    // Old rows are worked on (the pending one is canceled), and new work goes through.
    let (status, canceled) = api.cancel(&closed).await.expect("cancel");
    assert_eq!((status, &canceled["status"]), (200, &json!("canceled")));
    let receiver = Receiver::start().await.expect("receiver");
    let (status, created) = api
        .create(json!({"targetUrl": receiver.url("/after-upgrade"), "body": {"n": 6}}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    api.wait_status(&id_of(&created), &["succeeded"], WAIT)
        .await
        .expect("a new delivery after the upgrade");
    let (status, task) = submit(
        &api,
        json!({"type": "echo", "params": {"word": "upgraded", "code": "0"}}),
    )
    .await;
    assert_eq!(status, 201, "{task}");

    daemon.terminate().await.expect("stop");
    assert_eq!(
        user_version(&db),
        spool_store::sqlite::SCHEMA_VERSION,
        "the file is at this spoold's schema now"
    );
}

#[tokio::test]
async fn a_database_of_a_newer_release_is_refused_untouched() {
    let dir = TempDir::new().expect("temp dir");
    let (db, _) = copy_fixture(&dir);
    let newer = spool_store::sqlite::SCHEMA_VERSION + 1;
    rusqlite::Connection::open(&db)
        .expect("open")
        .pragma_update(None, "user_version", newer)
        .expect("a newer spoold's schema version");
    let before = std::fs::read(&db).expect("read");

    let (status, out) = DaemonProcess::run_to_exit(DaemonOptions::new(&db))
        .await
        .expect("run");
    assert_eq!(status.code(), Some(1), "{out}");
    let said = out
        .lines()
        .find(|l| l.contains("newer than this spoold supports"))
        .unwrap_or_else(|| panic!("the refusal says why: {out}"));
    assert!(
        said.contains(&format!("version {newer}")) && said.contains("upgrade spoold"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&db).expect("read"),
        before,
        "the file is untouched"
    );
}
