//! The operator's overview: `/v1/stats` and `/v1/targets` tell how bad it is without a grep
//! through `/metrics`.

use serde_json::json;
use spool_testkit::{Receiver, Reply};

use crate::{id_of, InProcess, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn stats_count_by_status_and_show_recent_results() {
    let d = InProcess::boot(&["--max-db-bytes", "64MiB"]).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(400)]);
    let failed = d
        .deliver(json!({"targetUrl": r.url("/a")}), &["failed"])
        .await;
    d.deliver(json!({"targetUrl": r.url("/b")}), &["succeeded"])
        .await;
    let (_, waiting) = d
        .api
        .create(json!({"targetUrl": r.url("/c"), "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    let (_, canceled) = d
        .api
        .create(json!({"targetUrl": r.url("/d"), "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    d.api.cancel(&id_of(&canceled)).await.expect("cancel");

    let (status, _, body) = d
        .api
        .request(http::Method::GET, "/v1/stats", None)
        .await
        .expect("stats");
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        stats["deliveries"],
        json!({"pending": 1, "in_flight": 0, "succeeded": 1, "failed": 1, "canceled": 1,
               "unknown": 0, "manual_review": 0}),
        "{stats}"
    );
    // No task types here: every task status, at zero (the dashboard test counts real ones).
    assert_eq!(
        stats["tasks"],
        json!({"pending": 0, "running": 0, "succeeded": 0, "failed": 0, "timed_out": 0,
               "interrupted": 0, "canceled": 0, "manual_review": 0}),
        "{stats}"
    );
    let recent = json!({"attempts": 2, "succeeded": 1, "retryableFailures": 0,
                        "terminalFailures": 1, "interrupted": 0, "unknown": 0});
    assert_eq!(stats["lastFiveMinutes"], recent, "{stats}");
    assert_eq!(stats["lastHour"], recent, "{stats}");
    assert_eq!(stats["pausedTargets"], 0, "{stats}");
    assert_eq!(stats["maxDatabaseBytes"], 64 << 20, "{stats}");
    assert!(stats["databaseBytes"].as_u64() > Some(0), "{stats}");
    // Nothing is due: the waiting delivery is due in 2099.
    assert!(stats.get("oldestDueAt").is_none(), "{stats}");
    // The windows count from this daemon's start, moments ago.
    let started = stats["startedAt"]
        .as_str()
        .and_then(|t| spool_proto::units::parse_time(t).ok())
        .expect("startedAt, a time");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    assert!((0..60_000).contains(&(now - started)), "{stats}");
    assert!(failed["id"].is_string() && waiting["id"].is_string());
}

/// A target that refuses connections is shown paused, with its failures in a row and its work
/// waiting; a target that failed deliveries in the last hour is shown with them; targets are
/// listed in origin order, page by page.
#[tokio::test(flavor = "multi_thread")]
async fn targets_show_waiting_work_failures_and_pauses() {
    let d = InProcess::boot(&[]).await;
    // The receiver first: a refusing port is one the OS handed out and took back, which it may
    // hand to the next bind (CI once saw the receiver get it, and the two targets were one).
    let r = Receiver::start().await.expect("receiver");
    let port = Receiver::refusing_port();
    let dead = format!("http://127.0.0.1:{port}");
    for n in 0..5 {
        let (status, _) = d
            .api
            .create(json!({"targetUrl": format!("{dead}/{n}"), "maxAttempts": 50}))
            .await
            .expect("create");
        assert_eq!(status, 201);
    }
    r.respond_with(Reply::status(404));
    d.deliver(json!({"targetUrl": r.url("/gone")}), &["failed"])
        .await;

    // Wait until the dead target has been paused (three refusals in a row).
    let live = format!("http://127.0.0.1:{}", r.port());
    let row = |targets: &serde_json::Value, origin: &str| {
        targets["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["origin"] == origin)
            .cloned()
            .unwrap_or_default()
    };
    let deadline = std::time::Instant::now() + WAIT;
    let targets = loop {
        let (status, _, body) = d
            .api
            .request(http::Method::GET, "/v1/targets", None)
            .await
            .expect("targets");
        assert_eq!(status, 200);
        let targets: serde_json::Value = serde_json::from_slice(&body).expect("json");
        if row(&targets, &dead)["paused"] == true || std::time::Instant::now() > deadline {
            break targets;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let origins: Vec<_> = targets["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["origin"].as_str().unwrap_or_default().to_owned())
        .collect();
    let mut sorted = vec![dead.clone(), live.clone()];
    sorted.sort();
    assert_eq!(origins, sorted, "both, in origin order: {targets}");
    let dead_row = row(&targets, &dead);
    assert_eq!(dead_row["paused"], true, "{targets}");
    assert!(dead_row["pausedUntil"].is_string(), "{targets}");
    assert!(dead_row["connectFailures"].as_u64() >= Some(3), "{targets}");
    assert_eq!(dead_row["lastErrorCode"], "connect_failed", "{targets}");
    let waiting =
        dead_row["pending"].as_u64().unwrap_or(0) + dead_row["inFlight"].as_u64().unwrap_or(0);
    assert_eq!(waiting, 5, "{targets}");
    let failing_row = row(&targets, &live);
    assert_eq!(failing_row["failedLastHour"], 1, "{targets}");
    assert_eq!(failing_row["lastErrorCode"], "http_status", "{targets}");
    assert_eq!(failing_row["paused"], false, "{targets}");

    // One per page, in origin order.
    let (_, _, body) = d
        .api
        .request(http::Method::GET, "/v1/targets?limit=1", None)
        .await
        .expect("targets");
    let page: serde_json::Value = serde_json::from_slice(&body).expect("json");
    let cursor = page["nextCursor"].as_str().expect("a next page").to_owned();
    let (_, _, body) = d
        .api
        .request(
            http::Method::GET,
            &format!("/v1/targets?limit=1&cursor={cursor}"),
            None,
        )
        .await
        .expect("targets");
    let next: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert!(next.get("nextCursor").is_none(), "{next}");
    assert_eq!(
        [&page["targets"][0]["origin"], &next["targets"][0]["origin"]],
        [&json!(sorted[0]), &json!(sorted[1])],
        "page by page, in origin order"
    );

    for bad in ["limit=0", "limit=501", "cursor=nonsense"] {
        let (status, _, body) = d
            .api
            .request(http::Method::GET, &format!("/v1/targets?{bad}"), None)
            .await
            .expect("targets");
        assert_eq!(status, 400, "{bad}: {}", String::from_utf8_lossy(&body));
    }
}
