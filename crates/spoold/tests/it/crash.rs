//! Durability across kill -9 (the book's Semantics: "Durable before acknowledged"), and
//! acknowledged creates surviving a crash under concurrent load.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

/// Receiver up → delivered. Receiver answers 503 then goes down → pending, attempts and
/// lastError grow. kill -9 → still there after restart. Receiver back → delivered, with one
/// delivery id and a rising attempt number on every request the receiver saw.
#[tokio::test(flavor = "multi_thread")]
async fn drill_survives_kill9_and_target_downtime() {
    let dir = TempDir::new().expect("temp dir");
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());

    // 1. Receiver up: delivered.
    let (status, first) = api
        .create(json!({"targetUrl": receiver.url("/hook"), "body": {"n": 1}}))
        .await
        .expect("create");
    assert_eq!(status, 201);
    api.wait_status(&id_of(&first), &["succeeded"], WAIT)
        .await
        .expect("first delivery succeeds");

    // 2. Receiver fails twice, then goes down: the delivery stays pending and keeps trying.
    receiver.push_replies([Reply::status(503), Reply::status(503)]);
    let (status, second) = api
        .create(json!({"targetUrl": receiver.url("/hook"), "body": {"n": 2}, "maxAttempts": 100}))
        .await
        .expect("create");
    assert_eq!(status, 201);
    let id = id_of(&second);
    receiver.wait_for_requests(3, WAIT).await.expect("two 503s");
    receiver.stop().await;
    let mut seen_attempts = 0;
    for _ in 0..200 {
        let (_, d) = api.get(&id).await.expect("get");
        seen_attempts = d["attempts"].as_u64().unwrap_or(0);
        if seen_attempts >= 4 {
            assert_eq!(d["status"].as_str().map(|s| s != "succeeded"), Some(true));
            assert!(
                d["lastError"].as_str().is_some_and(|e| !e.is_empty()),
                "{d}"
            );
            assert_eq!(d["lastErrorCode"], "connect_failed", "{d}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_attempts >= 4,
        "attempts did not grow while the receiver was down"
    );

    // 3. kill -9 and restart: the delivery is still there, not lost, not finished.
    daemon.kill9();
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let (status, after) = api.get(&id).await.expect("get after restart");
    assert_eq!(status, 200);
    // Not finished, and being retried: the restarted daemon may already be attempting it.
    let status = after["status"].as_str().unwrap_or_default();
    assert!(matches!(status, "pending" | "in_flight"), "{after}");
    assert!(after["attempts"].as_u64() >= Some(4), "{after}");

    // 4. Receiver back: delivered.
    receiver.restart().await.expect("receiver back");
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered after the receiver returns");

    let seen: Vec<_> = receiver
        .requests()
        .into_iter()
        .filter(|r| r.header("X-Spoold-Delivery-ID") == Some(id.as_str()))
        .collect();
    assert!(seen.len() >= 3, "receiver saw {} attempts", seen.len());
    let numbers: Vec<u64> = seen
        .iter()
        .map(|r| {
            r.header("X-Spoold-Attempt")
                .and_then(|a| a.parse().ok())
                .expect("attempt header")
        })
        .collect();
    assert_eq!(numbers[0], 1);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    assert!(seen.iter().all(|r| r.body_text() == r#"{"n":2}"#));
}

/// Several cycles of: 16 clients enqueue as fast as they can, the daemon is SIGKILLed
/// mid-stream, restarted; every create that was answered 2xx must exist afterwards.
#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_creates_survive_kill9_under_load() {
    let dir = TempDir::new().expect("temp dir");
    let receiver = Receiver::start().await.expect("receiver");
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    for cycle in 0..3 {
        let mut daemon = DaemonProcess::start(process_opts(&dir))
            .await
            .expect("daemon");
        let api = Api::new(daemon.base_url());
        let mut clients = tokio::task::JoinSet::new();
        for client in 0..16 {
            let api = api.clone();
            let acknowledged = Arc::clone(&acknowledged);
            let url = receiver.url(&format!("/c{cycle}/{client}"));
            clients.spawn(async move {
                for n in 0.. {
                    let body = json!({"targetUrl": url, "body": {"cycle": cycle, "n": n}});
                    match api.create(body).await {
                        Ok((201, d)) => acknowledged.lock().expect("lock").push(id_of(&d)),
                        // The daemon is gone: stop this client.
                        _ => break,
                    }
                }
            });
        }
        tokio::time::sleep(Duration::from_millis(400 + 150 * cycle)).await;
        daemon.kill9();
        while clients.join_next().await.is_some() {}
    }
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("final restart");
    let api = Api::new(daemon.base_url());
    let ids = acknowledged.lock().expect("lock").clone();
    assert!(
        ids.len() > 50,
        "too little load to prove anything: {}",
        ids.len()
    );
    for id in &ids {
        let (status, d) = api.get(id).await.expect("get");
        assert_eq!(status, 200, "acknowledged delivery {id} lost: {d}");
    }
}

/// The counts by status and by origin that metrics and stats read are kept in the same
/// transactions as the changes they count: after kill -9 in the middle of creates, deliveries,
/// retries and cancels they still equal what the rows say.
#[tokio::test(flavor = "multi_thread")]
async fn counts_stay_exact_across_kill9() {
    let dir = TempDir::new().expect("temp dir");
    let receiver = Receiver::start().await.expect("receiver");
    // Every third request fails, so some deliveries are retried.
    receiver.push_replies((0..300).map(|n| {
        if n % 3 == 0 {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    }));
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..8 {
        let api = api.clone();
        let url = receiver.url(&format!("/{client}"));
        clients.spawn(async move {
            for n in 0.. {
                let body = json!({"targetUrl": url, "body": {"n": n}});
                let Ok((201, d)) = api.create(body).await else {
                    break;
                };
                if n % 4 == 0 && api.cancel(&id_of(&d)).await.is_err() {
                    break;
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    daemon.kill9();
    while clients.join_next().await.is_some() {}

    let db = rusqlite::Connection::open(crate::db_path(&dir)).expect("open the database");
    let query = |sql: &str| -> Vec<(String, String, i64)> {
        let mut st = db.prepare(sql).expect("prepare");
        let rows = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query");
        let mut rows: Vec<_> = rows.collect::<Result<_, _>>().expect("rows");
        rows.sort();
        rows
    };
    let kept = query("SELECT '', status, n FROM status_counts WHERE n <> 0");
    let counted = query("SELECT '', status, COUNT(*) FROM deliveries GROUP BY status");
    assert!(
        counted.iter().map(|r| r.2).sum::<i64>() > 50,
        "too little load: {counted:?}"
    );
    assert_eq!(kept, counted, "counts by status");
    let kept = query("SELECT origin, status, n FROM origin_counts WHERE n <> 0");
    let counted = query(
        "SELECT origin, status, COUNT(*) FROM deliveries \
         WHERE status IN ('pending', 'in_flight') GROUP BY origin, status",
    );
    assert_eq!(kept, counted, "counts by origin");
}

/// An attempt cut short by kill -9 is sent again after the restart and not charged: the
/// delivery shows it as interrupted, beside the attempts that count.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_cut_short_by_a_crash_is_shown_as_interrupted() {
    let dir = TempDir::new().expect("temp dir");
    let receiver = Receiver::start().await.expect("receiver");
    receiver.push_replies([Reply::hang()]);
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, created) = api
        .create(json!({"targetUrl": receiver.url("/cut"), "maxAttempts": 2}))
        .await
        .expect("create");
    receiver.wait_for_requests(1, WAIT).await.expect("sent");
    daemon.kill9();

    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let done = api
        .wait_status(&id_of(&created), &["succeeded"], WAIT)
        .await
        .expect("delivered after the restart");
    assert_eq!(
        (
            &done["attempts"],
            &done["interruptedAttempts"],
            &done["maxAttempts"]
        ),
        (&json!(2), &json!(1), &json!(2)),
        "{done}"
    );
}
