//! Fairness at scale: a million deliveries waiting for two targets — one that never answers
//! (its slots are all taken), one held to a rate of one a second — do not delay another
//! target's first delivery. The backlog is written straight into a real SQLite file (as a
//! million creates would have left it), then a real spoold serves it.

use std::time::{Duration, Instant};

use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{db_path, id_of, process_opts, WAIT};

/// The backlog: half to each waiting target.
const BACKLOG: u32 = 1_000_000;

/// Write `BACKLOG` pending deliveries, due over the last `BACKLOG` milliseconds, alternately to
/// `hanging` and `limited`, into the database of a daemon that has migrated it and stopped.
fn write_backlog(db: &std::path::Path, hanging: &str, limited: &str) {
    let conn = rusqlite::Connection::open(db).expect("open the database");
    let origin = |url: &str| url.trim_end_matches('/').to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1) \
         INSERT INTO deliveries (id, target_url, origin, method, headers, body_kind, status, \
             max_attempts, created_at, updated_at, next_attempt_at, log_seq) \
         SELECT printf('%032x', i), CASE i % 2 WHEN 0 THEN ?2 ELSE ?3 END, \
             CASE i % 2 WHEN 0 THEN ?4 ELSE ?5 END, 'POST', '[]', 0, 'pending', 5, ?6, ?6, \
             ?6 - ?1 + i, 1 FROM n",
        rusqlite::params![
            BACKLOG,
            format!("{hanging}backlog"),
            format!("{limited}backlog"),
            origin(hanging),
            origin(limited),
            now
        ],
    )
    .expect("write the backlog");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_million_waiting_deliveries_do_not_delay_another_targets_first() {
    let dir = TempDir::new().expect("temp dir");
    let hanging = Receiver::start().await.expect("receiver");
    hanging.respond_with(Reply::hang());
    let limited = Receiver::start().await.expect("receiver");
    let other = Receiver::start().await.expect("receiver");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[[targets]]\nmatch = \"{}\"\nrate = \"1/s\"\n",
            limited.url("/*")
        ),
    )
    .expect("write config");
    let opts = || process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    // Migrated by a daemon, filled while it is stopped.
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
    let written = Instant::now();
    write_backlog(&db_path(&dir), &hanging.url("/"), &limited.url("/"));
    eprintln!("backlog of {BACKLOG} written in {:?}", written.elapsed());

    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    // The waiting targets are busy: every slot of the one that hangs is taken, the limited
    // one has had its token.
    let deadline = Instant::now() + WAIT;
    while hanging.requests().is_empty() || limited.requests().is_empty() {
        assert!(Instant::now() < deadline, "the backlog is not being sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut waited = Vec::new();
    for n in 0..5 {
        let asked = Instant::now();
        let (status, created) = api
            .create(json!({"targetUrl": other.url(&format!("/first/{n}"))}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        api.wait_status(&id_of(&created), &["succeeded"], WAIT)
            .await
            .expect("delivered");
        waited.push(asked.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("another target's deliveries, create to delivered: {waited:?}");
    let worst = waited.iter().max().copied().unwrap_or_default();
    assert!(
        worst < Duration::from_secs(1),
        "another target waited {worst:?} behind the backlog: {waited:?}"
    );
    // The limited target kept its rate meanwhile, and the backlog is still there.
    let sent = limited.requests().len();
    assert!(sent <= 8, "the limited target got {sent} requests");
    let (_, _, stats) = api
        .request(http::Method::GET, "/v1/stats", None)
        .await
        .expect("stats");
    let stats: serde_json::Value = serde_json::from_slice(&stats).expect("JSON");
    assert!(
        stats["deliveries"]["pending"].as_u64().unwrap_or(0) >= u64::from(BACKLOG) - 100,
        "{stats}"
    );
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
}
