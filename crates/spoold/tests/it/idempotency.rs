//! Idempotency keys: duplicates resolve to the original (also after a restart), different
//! requests conflict, and concurrent duplicates create exactly one delivery.

use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::{id_of, process_opts, InProcess};

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_returns_original_even_after_restart() {
    let dir = TempDir::new().expect("temp dir");
    let receiver = Receiver::start().await.expect("receiver");
    let request = json!({
        "targetUrl": receiver.url("/hook"),
        "idempotencyKey": "nightly-2026-11-29",
        "headers": {"X-Event": "build"},
        "body": {"result": "passed"},
    });
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, created) = api.create(request.clone()).await.expect("create");
    assert_eq!(status, 201);
    let (status, again) = api.create(request.clone()).await.expect("duplicate");
    assert_eq!(status, 200);
    assert_eq!(id_of(&again), id_of(&created));

    let mut different = request.clone();
    different["body"] = json!({"result": "failed"});
    let (status, err) = api.create(different.clone()).await.expect("conflict");
    assert_eq!(status, 409);
    assert_eq!(err["error"]["code"], "idempotency_conflict");

    daemon.kill9();
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let (status, after) = api.create(request).await.expect("duplicate after restart");
    assert_eq!(status, 200);
    assert_eq!(id_of(&after), id_of(&created));
    let (status, _) = api.create(different).await.expect("conflict after restart");
    assert_eq!(status, 409);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_identical_creates_make_one_delivery() {
    let d = InProcess::boot(&[]).await;
    let receiver = Receiver::start().await.expect("receiver");
    let request = json!({"targetUrl": receiver.url("/x"), "idempotencyKey": "once", "body": [1]});
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let api = d.api.clone();
        let request = request.clone();
        tasks.spawn(async move { api.create(request).await.expect("create") });
    }
    let mut statuses = Vec::new();
    let mut ids = std::collections::HashSet::new();
    while let Some(joined) = tasks.join_next().await {
        let (status, body) = joined.expect("task");
        statuses.push(status);
        ids.insert(id_of(&body));
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        1,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        31,
        "{statuses:?}"
    );
    assert_eq!(ids.len(), 1);
    let (_, list) = d.api.list("limit=500").await.expect("list");
    assert_eq!(list["count"], 1, "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_field_takes_part_in_the_comparison() {
    every_field_compared(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_field_takes_part_in_the_comparison_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    every_field_compared(Some(&db)).await;
}

/// Each field of a request takes part in the comparison, and the 409 says which differ (with
/// both values where they are short and hold no secret) and which delivery the key names: a
/// job run again with one flag changed sees what it changed.
async fn every_field_compared(pg: Option<&spool_testkit::TestDatabase>) {
    let d = InProcess::boot_either(pg).await;
    let base = json!({"targetUrl": "http://127.0.0.1:9/a", "idempotencyKey": "k",
                      "body": {"a": 1}, "maxAttempts": 3, "notBefore": "2099-01-01T00:00:00Z"});
    let (status, created) = d.api.create(base.clone()).await.expect("create");
    assert_eq!(status, 201);
    let id = id_of(&created);
    let refused = |what: &str| {
        format!(
            "idempotency key was already used for a different request (delivery {id}): this one \
             differs in {what}; repeat that request exactly to get the delivery back, or use \
             another key"
        )
    };
    for (field, value, what) in [
        ("targetUrl", json!("http://127.0.0.1:9/b"), "targetUrl"),
        ("method", json!("PUT"), "method (POST there, PUT here)"),
        ("maxAttempts", json!(4), "maxAttempts (3 there, 4 here)"),
        ("headers", json!({"X-A": "1"}), "headers"),
        ("body", json!({"a": 2}), "body"),
        (
            "notBefore",
            json!("2099-01-02T00:00:00Z"),
            "notBefore (2099-01-01T00:00:00.000Z there, 2099-01-02T00:00:00.000Z here)",
        ),
        (
            "expiresAt",
            json!("2099-06-01T00:00:00Z"),
            "expiresAt (none there, 2099-06-01T00:00:00.000Z here)",
        ),
    ] {
        let mut changed = base.clone();
        changed[field] = value;
        let (status, err) = d.api.create(changed).await.expect("create");
        assert_eq!(status, 409, "{field}: {err}");
        assert_eq!(err["error"]["code"], "idempotency_conflict", "{err}");
        assert_eq!(err["error"]["message"], refused(what).as_str(), "{field}");
    }
    // Two at once, in one line.
    let mut changed = base.clone();
    changed["method"] = json!("PUT");
    changed["body"] = json!({"a": 2});
    let (_, err) = d.api.create(changed).await.expect("create");
    assert_eq!(
        err["error"]["message"],
        refused("method (POST there, PUT here) and body").as_str()
    );
    // The body is compared byte for byte: the same JSON value spelled differently conflicts.
    let (status, err) = d
        .api
        .create_raw(
            r#"{"targetUrl":"http://127.0.0.1:9/a","idempotencyKey":"k","body":{ "a": 1 },
                "maxAttempts":3,"notBefore":"2099-01-01T00:00:00Z"}"#,
        )
        .await
        .expect("create");
    assert_eq!(status, 409);
    assert_eq!(err["error"]["message"], refused("body").as_str());
    // Whitespace around the key is not part of the key.
    let mut padded = base.clone();
    padded["idempotencyKey"] = json!("  k  ");
    let (status, _) = d.api.create(padded).await.expect("create");
    assert_eq!(status, 200);
}

/// A job that retries its create after the original's `expiresAt` has passed gets the original
/// back (200), not a 400 for a deadline in the past: the key is looked up before time is judged.
/// A new create whose deadline has passed is still refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_retried_create_whose_deadline_has_passed_finds_the_original() {
    let d = InProcess::boot(&[]).await;
    // Never attempted: notBefore is just before the deadline, and the port would refuse.
    let now = now_ms();
    let request = json!({
        "targetUrl": "http://127.0.0.1:9/never",
        "idempotencyKey": "report-7",
        "notBefore": spool_proto::units::format_time(now + 290),
        "expiresAt": spool_proto::units::format_time(now + 300),
    });
    let (status, created) = d.api.create(request.clone()).await.expect("create");
    assert_eq!(status, 201, "{created}");
    d.api
        .wait_status(&id_of(&created), &["failed"], crate::WAIT)
        .await
        .expect("expires");

    let (status, again) = d.api.create(request.clone()).await.expect("retry");
    assert_eq!(status, 200, "{again}");
    assert_eq!(id_of(&again), id_of(&created));
    assert_eq!(again["lastErrorCode"], "expired", "{again}");

    let mut fresh = request;
    fresh["idempotencyKey"] = json!("report-8");
    let (status, err) = d.api.create(fresh).await.expect("create");
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "invalid_delivery", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("expiresAt must be in the future")),
        "{err}"
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
