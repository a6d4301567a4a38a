//! Bulk actions over the API against a real spoold: a dry run counts what a retry or cancel
//! would change and changes nothing; the action itself changes exactly the matching
//! deliveries in a status it applies to and counts the others as skipped; every filter field
//! narrows the match; a request without an action or a filter, or with a malformed field, is
//! refused. On SQLite and on PostgreSQL. And kill -9 in the middle of a bulk retry leaves each
//! delivery either retried whole or untouched.

use serde_json::{json, Value};

use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply, TestDatabase};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

async fn bulk(api: &Api, body: Value) -> (u16, Value) {
    let (status, _, bytes) = api
        .request(
            http::Method::POST,
            "/v1/deliveries/bulk",
            Some(serde_json::to_vec(&body).expect("JSON")),
        )
        .await
        .expect("bulk");
    (status, serde_json::from_slice(&bytes).expect("JSON answer"))
}

async fn status_of(api: &Api, id: &str) -> Value {
    api.get(id).await.expect("get").1["status"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_retry_and_cancel_change_what_the_filter_matches() {
    let dir = TempDir::new().expect("temp dir");
    bulk_retry_and_cancel(process_opts(&dir)).await;
}

/// The same on PostgreSQL, where a page's actions are written in chunks, each one transaction.
#[tokio::test(flavor = "multi_thread")]
async fn bulk_retry_and_cancel_change_what_the_filter_matches_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    bulk_retry_and_cancel(crate::postgres_opts(&db, &dir)).await;
}

async fn bulk_retry_and_cancel(opts: DaemonOptions) {
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    let refused = format!("http://127.0.0.1:{}/x", Receiver::refusing_port());
    let before = spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            - 1_000,
    );

    // Four refused by the receiver, two that cannot connect, one waiting.
    r.push_replies((0..4).map(|_| Reply::status(404)));
    let mut rejected = Vec::new();
    for n in 0..4 {
        let (_, d) = api
            .create(json!({"targetUrl": r.url(&format!("/a/{n}")), "maxAttempts": 1}))
            .await
            .expect("create");
        rejected.push(id_of(&d));
    }
    let mut unreachable = Vec::new();
    for _ in 0..2 {
        let (_, d) = api
            .create(json!({"targetUrl": refused, "maxAttempts": 1}))
            .await
            .expect("create");
        unreachable.push(id_of(&d));
    }
    let (_, d) = api
        .create(json!({"targetUrl": r.url("/a/later"), "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    let waiting = id_of(&d);
    for id in rejected.iter().chain(&unreachable) {
        api.wait_status(id, &["failed"], WAIT)
            .await
            .expect("failed");
    }

    // Refused requests.
    for body in [
        json!({"filter": {"status": "failed"}}),
        json!({"action": "retry"}),
        json!({"action": "retry", "filter": {}}),
        json!({"action": "retry", "filter": {"status": null}}),
        json!({"action": "retry", "filter": {"targetOrigin": "ftp://h/"}}),
        json!({"action": "retry", "filter": {"lastErrorCode": "HTTP 404"}}),
        json!({"action": "retry", "filter": {"createdAfter": "yesterday"}}),
        json!({"action": "archive", "filter": {"status": "failed"}}),
    ] {
        let (status, answer) = bulk(&api, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}: {answer}"
        );
    }

    // A dry run counts, oldest first, and changes nothing.
    let origin = r.url("/");
    let (status, counted) = bulk(
        &api,
        json!({"action": "retry", "filter": {"targetOrigin": origin}, "dryRun": true}),
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(
        counted,
        json!({"action": "retry", "dryRun": true, "matched": 5, "changed": 4, "skipped": 1,
               "ids": rejected})
    );
    assert_eq!(status_of(&api, &rejected[0]).await, "failed");
    // Each field narrows the match.
    let count = |filter: Value| {
        let api = &api;
        async move {
            let (status, answer) = bulk(
                api,
                json!({"action": "retry", "filter": filter, "dryRun": true}),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            (answer["matched"].clone(), answer["changed"].clone())
        }
    };
    assert_eq!(
        count(json!({"lastErrorCode": "connect_failed"})).await,
        (json!(2), json!(2))
    );
    assert_eq!(
        count(json!({"status": "failed", "createdAfter": before})).await,
        (json!(6), json!(6))
    );
    assert_eq!(
        count(json!({"createdBefore": before})).await,
        (json!(0), json!(0))
    );
    assert_eq!(
        count(json!({"status": "pending"})).await,
        (json!(1), json!(0))
    );
    // The listing takes the same fields.
    let (_, listed) = api
        .list("lastErrorCode=connect_failed&status=failed")
        .await
        .expect("list");
    assert_eq!(listed["count"], 2, "{listed}");

    // The retry: those refused by the receiver only, which now answers 200.
    let (status, retried) = bulk(
        &api,
        json!({"action": "retry",
               "filter": {"status": "failed", "lastErrorCode": "http_status"}}),
    )
    .await;
    assert_eq!(status, 200, "{retried}");
    assert_eq!(
        (
            &retried["matched"],
            &retried["changed"],
            &retried["skipped"],
            &retried["dryRun"]
        ),
        (&json!(4), &json!(4), &json!(0), &json!(false))
    );
    for id in &rejected {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered on the new cycle");
    }
    for id in &unreachable {
        assert_eq!(status_of(&api, id).await, "failed");
    }
    // Done once: a second run finds nothing of theirs left to retry.
    let (_, again) = bulk(
        &api,
        json!({"action": "retry", "filter": {"lastErrorCode": "http_status"}}),
    )
    .await;
    assert_eq!(again["changed"], 0, "{again}");

    // Cancel: the waiting delivery; the delivered ones are skipped.
    let (status, canceled) = bulk(
        &api,
        json!({"action": "cancel", "filter": {"targetOrigin": origin}}),
    )
    .await;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(
        canceled,
        json!({"action": "cancel", "dryRun": false, "matched": 5, "changed": 1, "skipped": 4,
               "ids": [waiting]})
    );
    assert_eq!(status_of(&api, &waiting).await, "canceled");
    let (_, transitions) = api.transitions(&waiting).await.expect("transitions");
    assert_eq!(
        transitions["transitions"][1]["reason"], "canceled",
        "the same transition as a single cancel: {transitions}"
    );
}

/// kill -9 in the middle of a bulk retry: what it changed is changed whole (each retried
/// delivery logged `retried` and moved on, its counts with it), what it did not reach is still
/// `failed` and untouched, and running it again retries exactly those.
#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_retry_cut_by_kill9_leaves_each_delivery_whole() {
    const N: usize = 3000;
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    // One refusal for each delivery's only attempt; 200 after that.
    r.push_replies((0..N).map(|_| Reply::status(404)));
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..8 {
        let (api, url) = (api.clone(), r.url("/bulk"));
        clients.spawn(async move {
            for _ in (client..N).step_by(8) {
                let (status, d) = api
                    .create(json!({"targetUrl": url, "maxAttempts": 1}))
                    .await
                    .expect("create");
                assert_eq!(status, 201, "{d}");
            }
        });
    }
    while let Some(joined) = clients.join_next().await {
        joined.expect("client");
    }
    let failed = |api: Api| async move {
        let (_, _, body) = api
            .request(http::Method::GET, "/v1/stats", None)
            .await
            .expect("stats");
        let stats: Value = serde_json::from_slice(&body).expect("JSON");
        stats["deliveries"]["failed"]
            .as_u64()
            .expect("failed count") as usize
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while failed(api.clone()).await < N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{N} not failed in time"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }

    // The retry runs; once part of it is committed, the daemon dies.
    let retrying = tokio::spawn({
        let api = api.clone();
        async move {
            // Cut off by the kill: no answer is expected.
            let body = br#"{"action": "retry", "filter": {"status": "failed"}}"#.to_vec();
            let _ = api
                .request(http::Method::POST, "/v1/deliveries/bulk", Some(body))
                .await;
        }
    });
    let deadline = tokio::time::Instant::now() + WAIT;
    while failed(api.clone()).await == N {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the retry changed nothing"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    daemon.kill9();
    let _ = retrying.await;

    let db = rusqlite::Connection::open(crate::db_path(&dir)).expect("open the database");
    let count = |sql: &str| -> i64 { db.query_row(sql, [], |r| r.get(0)).expect(sql) };
    let retried = count(
        "SELECT COUNT(*) FROM transitions WHERE reason = 'retried' AND from_status = 'failed'",
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM deliveries d WHERE status <> 'failed' AND NOT EXISTS \
             (SELECT 1 FROM transitions t WHERE t.delivery_id = d.id AND t.reason = 'retried')"
        ),
        0,
        "moved on without a logged retry"
    );
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM deliveries d WHERE status = 'failed' AND EXISTS \
             (SELECT 1 FROM transitions t WHERE t.delivery_id = d.id AND t.reason = 'retried')"
        ),
        0,
        "a logged retry left failed"
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM deliveries WHERE status = 'failed'") + retried,
        N as i64
    );
    assert_eq!(
        count("SELECT COALESCE(SUM(n), 0) FROM status_counts WHERE status = 'failed'"),
        count("SELECT COUNT(*) FROM deliveries WHERE status = 'failed'"),
        "the count of failed deliveries"
    );
    drop(db);
    assert!(retried > 0, "the kill came before any retry was committed");
    eprintln!("kill -9 after {retried} of {N} retried");

    // Again: exactly the rest, and then every one arrives.
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let (status, answer) = bulk(
        &api,
        json!({"action": "retry", "filter": {"status": "failed"}}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["changed"], N as i64 - retried, "{answer}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, _, body) = api
            .request(http::Method::GET, "/v1/stats", None)
            .await
            .expect("stats");
        let stats: Value = serde_json::from_slice(&body).expect("JSON");
        if stats["deliveries"]["succeeded"] == N as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not all delivered: {stats}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
