//! Leases belong to the attempts that hold them. An attempt still running in this daemon keeps
//! its claim whatever the wall clock does: the periodic sweep renews the leases of live attempts
//! and takes back only those of attempts that are gone, on the store's one clock. Observation
//! windows are counted on the same clock: a step of the host's wall clock closes none early.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use spool_testkit::{CreateBehavior, Receiver, RemoteApi, Reply, TestDatabase};
use tempfile::TempDir;

use crate::{id_of, wait_for, InProcess, Targets, WAIT};

/// The wall clock jumps an hour ahead while a request is on the wire (NTP correcting a clock
/// that was far behind): every lease now looks long expired. The sweep (every 1.5 s with this
/// lease) must renew the live attempt's lease, not take it back and send the delivery again.
#[tokio::test(flavor = "multi_thread")]
async fn a_wall_clock_step_does_not_take_back_a_live_attempt() {
    let shift = Arc::new(AtomicI64::new(0));
    let clock = spool_store::Clock::shifted(Arc::clone(&shift));
    let d = InProcess::boot_configured(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--request-timeout", "3s", "--lease", "6s"],
        move |config| config.clock = clock,
    )
    .await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(200).delay(Duration::from_millis(2500))]);
    let (status, created) = d
        .api
        .create(json!({"targetUrl": r.url("/slow")}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    r.wait_for_requests(1, WAIT).await.expect("sent");
    shift.store(3_600_000, Ordering::Relaxed);

    d.api
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    // A wrongly reclaimed delivery would be sent again at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.requests().len(), 1, "sent twice");
    let (_, history) = d.api.attempts(&id).await.expect("attempts");
    let outcomes: Vec<_> = history["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["outcome"].clone())
        .collect();
    assert_eq!(outcomes, [json!("succeeded")], "{history}");
}

/// An at-most-once delivery is `unknown` (the target answered 500) and its observation window
/// has 30 s to run; then the host's wall clock jumps an hour ahead. Checks go on (the remote
/// finds nothing), and the delivery stays `unknown`: the window closes 30 s after it opened,
/// not at the step. On SQLite the store counts elapsed time on the boot clock; on PostgreSQL
/// the host carries its estimate of the database's clock on that clock.
async fn a_wall_clock_step_closes_no_observation_window(pg: Option<&TestDatabase>) {
    let shift = Arc::new(AtomicI64::new(0));
    let clock = spool_store::Clock::shifted(Arc::clone(&shift));
    let pg_url = pg.map(|db| db.url().to_owned());
    let d = InProcess::boot_configured(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--request-timeout", "1s", "--reconcile-base", "200ms"],
        move |config| {
            config.clock = clock;
            if let Some(url) = pg_url {
                crate::use_postgres(config, url);
            }
        },
    )
    .await;
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Status(500));
    let (status, created) = d
        .api
        .create(json!({
            "targetUrl": remote.url("/records"),
            "mode": "at_most_once",
            "fingerprint": "order-1",
            "body": {"fingerprint": "order-1"},
            "reconcile": {
                "url": remote.url("/records?fingerprint={fingerprint}"),
                "matchesPointer": "/data",
                "observationWindow": "30s",
            },
        }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let before = wait_for(&d.api, &id, "a check", |d| d["checks"].as_u64() >= Some(1)).await;
    assert_eq!(before["status"], "unknown", "{before}");
    let checks = before["checks"].as_u64().unwrap_or_default();

    shift.store(3_600_000, Ordering::Relaxed);
    let after = wait_for(&d.api, &id, "three more checks", |d| {
        d["checks"].as_u64() >= Some(checks + 3) || d["status"] != "unknown"
    })
    .await;
    assert_eq!(
        after["status"], "unknown",
        "the window closed at the step: {after}"
    );
    assert_eq!(remote.creates(), 1, "nothing was resent");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wall_clock_step_closes_no_observation_window_on_sqlite() {
    a_wall_clock_step_closes_no_observation_window(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wall_clock_step_closes_no_observation_window_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    a_wall_clock_step_closes_no_observation_window(Some(&db)).await;
}
