//! Pause, don't fail: a target answering a run of 5xx opens its breaker (its deliveries wait,
//! uncharged, one probe at a time, and the first success closes it); a 410 Gone pauses the
//! target until an operator resumes it, with a metric to alert on; an operator pauses and
//! resumes a target by hand; errors spread between answers never open the breaker. A real spoold and a scripted receiver on 127.0.0.1.

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{db_path, id_of, WAIT};

/// One request at a time to a target, retries and pauses 700 ms apart, the breaker at 3.
async fn daemon(dir: &TempDir) -> (DaemonProcess, Api) {
    let opts = DaemonOptions::new(db_path(dir)).args([
        "--per-target-concurrency",
        "1",
        "--retry-base",
        "700ms",
        "--retry-cap",
        "700ms",
        "--breaker-failures",
        "3",
    ]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    (daemon, api)
}

async fn create(api: &Api, r: &Receiver, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let (status, created) = api
            .create(json!({"targetUrl": r.url(&format!("/{i}"))}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    ids
}

/// The `GET /v1/targets` row of `r`.
async fn target(api: &Api, r: &Receiver) -> Value {
    let (status, _, body) = api
        .request(Method::GET, "/v1/targets", None)
        .await
        .expect("targets");
    assert_eq!(status, 200);
    let list: Value = serde_json::from_slice(&body).expect("JSON");
    let origin = format!("http://127.0.0.1:{}", r.port());
    list["targets"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["origin"] == origin.as_str()))
        .cloned()
        .unwrap_or_else(|| panic!("no row for {origin}: {list}"))
}

async fn control(api: &Api, r: &Receiver, action: &str) -> (u16, Value) {
    let origin = format!("http%3A%2F%2F127.0.0.1%3A{}", r.port());
    let (status, _, body) = api
        .request(
            Method::POST,
            &format!("/v1/targets/{origin}/{action}"),
            None,
        )
        .await
        .expect("control");
    (status, serde_json::from_slice(&body).expect("JSON"))
}

async fn all_succeed(api: &Api, ids: &[String]) -> u64 {
    let mut attempts = 0;
    for id in ids {
        let d = api
            .wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
        attempts += d["attempts"].as_u64().expect("attempts");
    }
    attempts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_of_5xx_opens_the_breaker_and_the_first_success_closes_it() {
    let dir = TempDir::new().expect("temp dir");
    let (_daemon, api) = daemon(&dir).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(500), Reply::status(502), Reply::status(500)]);
    let ids = create(&api, &r, 20).await;
    r.wait_for_requests(3, WAIT).await.expect("three failures");
    // Open: nothing more goes out while the pause lasts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.requests().len(), 3, "sent while the breaker was open");
    let row = target(&api, &r).await;
    assert_eq!(row["paused"], true, "{row}");
    assert_eq!(row["pauseReason"], "failing", "{row}");
    // Then one probe: a success closes it, and everything goes, each delivery charged only
    // for what was really sent.
    let attempts = all_succeed(&api, &ids).await;
    assert_eq!(attempts, 20 + 3, "attempts spent");
    let row = target(&api, &r).await;
    assert_eq!(row["paused"], false, "{row}");
}

/// A busy target that fails one request in five is not failing "in a row": a slot goes on
/// while the target answers and reports only how it ended, so the answers before its last
/// request must count (found by the soak: at 200 creates/s against a receiver failing 20 %, the
/// breaker kept the target paused most of the time).
#[tokio::test(flavor = "multi_thread")]
async fn errors_between_answers_do_not_open_the_breaker() {
    let dir = TempDir::new().expect("temp dir");
    let (daemon, api) = daemon(&dir).await;
    let r = Receiver::start().await.expect("receiver");
    let one_in_five = [200, 200, 200, 200, 503].map(Reply::status);
    r.push_replies((0..8).flat_map(|_| one_in_five.clone()));
    let ids = create(&api, &r, 40).await;
    let attempts = all_succeed(&api, &ids).await;
    assert_eq!(attempts, 40 + 8, "attempts spent");
    let log = daemon.stderr();
    assert!(!log.contains("breaker open"), "the breaker opened: {log}");
    let row = target(&api, &r).await;
    assert_eq!(row["paused"], false, "{row}");
}

#[tokio::test(flavor = "multi_thread")]
async fn gone_pauses_the_target_until_an_operator_resumes_it() {
    let dir = TempDir::new().expect("temp dir");
    let (_daemon, api) = daemon(&dir).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(410)]);
    let ids = create(&api, &r, 5).await;
    // The one that met the 410 failed: 410 is not retried.
    let first = r.wait_for_requests(1, WAIT).await.expect("one request");
    let failed_path = first[0].path.clone();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(r.requests().len(), 1, "sent to a gone target");
    assert_eq!(
        api.metric("spoold_gone_targets").await.expect("metrics"),
        Some(1.0)
    );
    let row = target(&api, &r).await;
    assert_eq!(row["pauseReason"], "gone", "{row}");
    assert_eq!(row["pending"], 4, "{row}");

    let (status, body) = control(&api, &r, "resume").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["paused"], false);
    let rest: Vec<String> = ids
        .iter()
        .filter(|id| {
            !failed_path.ends_with(&format!(
                "/{}",
                ids.iter().position(|i| i == *id).expect("index")
            ))
        })
        .cloned()
        .collect();
    assert_eq!(rest.len(), 4);
    assert_eq!(all_succeed(&api, &rest).await, 4, "one attempt each");
    assert_eq!(
        api.metric("spoold_gone_targets").await.expect("metrics"),
        Some(0.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_pauses_and_resumes_a_target() {
    let dir = TempDir::new().expect("temp dir");
    let (_daemon, api) = daemon(&dir).await;
    let r = Receiver::start().await.expect("receiver");
    let (status, body) = control(&api, &r, "pause").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"origin": format!("http://127.0.0.1:{}", r.port()), "paused": true})
    );
    let ids = create(&api, &r, 3).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(r.requests().is_empty(), "sent to a paused target");
    let row = target(&api, &r).await;
    assert_eq!(row["pauseReason"], "operator", "{row}");
    assert_eq!(row["pending"], 3, "{row}");
    let (status, _) = control(&api, &r, "resume").await;
    assert_eq!(status, 200);
    assert_eq!(all_succeed(&api, &ids).await, 3);

    let (status, _, body) = api
        .request(Method::POST, "/v1/targets/ftp%3A%2F%2Fx/pause", None)
        .await
        .expect("control");
    assert_eq!(status, 400);
    let err: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(err["error"]["code"], "invalid_request", "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_target_still_fails_its_expired_deliveries_on_time() {
    let dir = TempDir::new().expect("temp dir");
    // A short lease: the sweep that expires overdue deliveries runs every quarter of it.
    let opts = DaemonOptions::new(db_path(&dir)).args(["--lease", "4s", "--request-timeout", "1s"]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    let (status, _) = control(&api, &r, "pause").await;
    assert_eq!(status, 200);
    let expires = spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + 1_000,
    );
    let (status, created) = api
        .create(json!({"targetUrl": r.url("/late"), "expiresAt": expires}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let d = api
        .wait_status(&id_of(&created), &["failed"], WAIT)
        .await
        .expect("expired while the target was paused");
    assert_eq!(d["lastErrorCode"], "expired", "{d}");
    assert_eq!(d["attempts"], 0, "{d}");
    assert!(r.requests().is_empty());
}
