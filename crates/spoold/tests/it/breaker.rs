//! Pause, don't fail: a target answering a run of 5xx opens its breaker (its deliveries wait,
//! uncharged, one probe at a time — one request, spaced like retries, further apart after each
//! failed probe — and the first success closes it); a 410 Gone holds every delivery to the URL
//! that answered it (and nothing else of its origin) until an operator resumes it, with a
//! metric to alert on; an operator pauses
//! and resumes a target by hand; errors spread between answers never open the breaker. A real
//! spoold and a scripted receiver on 127.0.0.1; the 410 on SQLite and on PostgreSQL.

use std::time::{Duration, Instant};

use http::Method;
use serde_json::{json, Value};
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply, TestDatabase};
use tempfile::TempDir;

use crate::{db_path, id_of, postgres_opts, process_opts, WAIT};

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

/// A receiver failing from its very first request (the case: 503s to 100–200 waiting
/// deliveries, default flags): the errors of the burst that opened the breaker each doubled
/// the pause (826 ms to 108 s over 12 errors), and once a probe failed after the breaker's
/// window, the run of errors started again and a "probe" was eight requests at once. Now the
/// first probe comes `--retry-base` after the breaker opened, each probe is one request, the
/// pause doubles with each failed probe (to `--retry-cap`), and while the breaker is open no
/// two requests are in flight — also long after the window.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_failing_from_the_first_request_is_probed_one_request_at_a_time() {
    let dir = TempDir::new().expect("temp dir");
    let opts = DaemonOptions::new(db_path(&dir)).args([
        "--retry-base",
        "200ms",
        "--retry-cap",
        "800ms",
        "--breaker-window",
        "1s",
    ]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    // Each answer takes 30 ms: two requests in flight at once would arrive closer than that.
    const ANSWER: Duration = Duration::from_millis(30);
    r.respond_with(Reply::status(503).delay(ANSWER));
    create(&api, &r, 150).await;
    tokio::time::sleep(Duration::from_secs(7)).await;

    let at: Vec<Instant> = r.requests().iter().map(|q| q.received_at).collect();
    // The burst that opened the breaker: the requests before the first pause.
    let burst = at
        .windows(2)
        .position(|w| w[1] - w[0] > Duration::from_millis(100))
        .map_or(at.len(), |i| i + 1);
    assert!(burst <= 16, "{burst} requests before the breaker opened");
    let probes: Vec<Duration> = at[burst - 1..].windows(2).map(|w| w[1] - w[0]).collect();
    // The first probe: `--retry-base` (±20 %) after the burst's last answer.
    let first = probes.first().copied().unwrap_or_default();
    assert!(
        first > Duration::from_millis(150) && first < Duration::from_millis(600),
        "first probe {first:?} after the burst (gaps {probes:?})"
    );
    // One request at a time, each at least a (jittered) base apart, never more than the cap.
    assert!(
        probes.iter().all(|g| *g >= Duration::from_millis(150)),
        "two requests close together while the breaker was open: {probes:?}"
    );
    assert!(
        probes.iter().all(|g| *g < Duration::from_millis(1_400)),
        "a probe later than the cap: {probes:?}"
    );
    // Doubling per failed probe: the fourth is at the cap, well above the first.
    assert!(probes.len() >= 7, "too few probes in 7 s: {probes:?}");
    assert!(
        probes[3] > Duration::from_millis(600),
        "the pause did not grow per probe: {probes:?}"
    );
}

/// 410 Gone holds the URL that answered it, not its origin: the other URLs of the origin go
/// on whatever they answer, beside it, at the same time (200, 400, 422, 500, 503). No delivery
/// to the gone URL is sent again after its 410 — not the one that got it, not one a concurrent
/// slot had lined up — until an operator resumes the URL; its deliveries (whatever their query,
/// created before or after) wait, uncharged, parked in the store, across a restart. A resume
/// while it still answers 410 fails the delivery that meets it; a resume of the origin lifts
/// every gone URL of it; a cancel by URL drops that URL's deliveries and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn a_gone_url_holds_only_itself() {
    let dir = TempDir::new().expect("temp dir");
    a_gone_url_holds_only_itself_on(process_opts(&dir)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gone_url_holds_only_itself_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    a_gone_url_holds_only_itself_on(postgres_opts(&db, &dir)).await;
}

/// The statuses of `ids`, counted.
async fn statuses(api: &Api, ids: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut counted = std::collections::BTreeMap::new();
    for id in ids {
        let (_, d) = api.get(id).await.expect("get");
        let status = d["status"].as_str().unwrap_or("?").to_owned();
        *counted.entry(status).or_insert(0) += 1;
    }
    counted
}

/// Create one delivery to `url` (one attempt: one charged for a 410 would fail it).
async fn create_to(api: &Api, url: &str) -> String {
    let (status, created) = api
        .create(json!({"targetUrl": url, "maxAttempts": 1}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    id_of(&created)
}

/// The delivery ids the receiver got requests for at `path`, in order.
fn sent_to(r: &Receiver, path: &str) -> Vec<String> {
    r.requests()
        .iter()
        .filter(|q| q.path == path)
        .map(|q| q.header("X-Spoold-Delivery-ID").unwrap_or("?").to_owned())
        .collect()
}

/// A resume (or pause) of `target` (an origin or a URL).
async fn control_of(api: &Api, target: &str, action: &str) -> Value {
    let named: String = url::form_urlencoded::byte_serialize(target.as_bytes()).collect();
    let (status, _, body) = api
        .request(Method::POST, &format!("/v1/targets/{named}/{action}"), None)
        .await
        .expect("control");
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(status, 200, "{body}");
    body
}

/// Wait (at most [`WAIT`]) until `done` says so.
async fn until<F: std::future::Future<Output = bool>>(done: impl Fn() -> F) {
    let deadline = Instant::now() + WAIT;
    while !done().await {
        assert!(Instant::now() < deadline, "not within {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn a_gone_url_holds_only_itself_on(opts: DaemonOptions) {
    let mut daemon = DaemonProcess::start(opts.clone()).await.expect("daemon");
    let mut api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    // Every answer takes a while, so that the requests of the slots are on the wire together
    // when the 410 comes back.
    let slow = |status| Reply::status(status).delay(Duration::from_millis(150));
    for (path, status) in [
        ("/gone", 410),
        ("/ok", 200),
        ("/bad", 400),
        ("/unprocessable", 422),
        ("/error", 500),
        ("/busy", 503),
    ] {
        r.respond_to(path, slow(status));
    }
    let mut gone = Vec::new();
    let mut others = Vec::new();
    for i in 0..8 {
        gone.push(create_to(&api, &r.url(&format!("/gone?n={i}"))).await);
        for path in ["/ok", "/bad", "/unprocessable", "/error", "/busy"] {
            others.push(create_to(&api, &r.url(&format!("{path}?n={i}"))).await);
        }
    }
    // The rest of the origin ends as its answers say, not held by the 410 beside it.
    for id in &others {
        api.wait_status(id, &["succeeded", "failed"], WAIT)
            .await
            .expect("the origin's other URLs go on");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let first = sent_to(&r, "/gone");
    assert!(!first.is_empty(), "the gone URL was never tried");
    let mut once = first.clone();
    once.sort();
    once.dedup();
    assert_eq!(
        once.len(),
        first.len(),
        "a delivery sent again after its 410: {first:?}"
    );
    assert_eq!(
        statuses(&api, &gone).await,
        [("pending".to_owned(), 8)].into(),
        "every delivery to the gone URL waits alike"
    );
    for id in &first {
        let (_, d) = api.get(id).await.expect("get");
        assert_eq!(
            (&d["lastErrorCode"], &d["lastResponseCode"], &d["attempts"]),
            (&json!("gone"), &json!(410), &json!(1)),
            "{d}"
        );
    }
    let row = target(&api, &r).await;
    assert_eq!(row["paused"], false, "the origin is not held: {row}");
    assert_eq!(row["goneUrls"][0]["url"], r.url("/gone"), "{row}");
    assert_eq!(row["goneUrls"].as_array().map(Vec::len), Some(1), "{row}");
    assert_eq!(
        api.metric("spoold_gone_targets").await.expect("metrics"),
        Some(1.0)
    );
    let origin = format!("http://127.0.0.1:{}", r.port());
    assert_eq!(
        api.metric(&format!("spoold_gone_urls{{origin=\"{origin}\"}}"))
            .await
            .expect("metrics"),
        Some(1.0)
    );

    // Created after, with another query: waits too; another URL still goes.
    gone.push(create_to(&api, &r.url("/gone?late=1")).await);
    let ok = create_to(&api, &r.url("/ok?late=1")).await;
    api.wait_status(&ok, &["succeeded"], WAIT)
        .await
        .expect("the origin goes on");

    // Across a restart: still held, still listed.
    daemon.terminate().await.expect("stop");
    daemon = DaemonProcess::start(opts.clone())
        .await
        .expect("daemon again");
    api = Api::new(daemon.base_url());
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(sent_to(&r, "/gone"), first, "sent to a gone URL");
    assert_eq!(
        statuses(&api, &gone).await,
        [("pending".to_owned(), 9)].into()
    );
    let row = target(&api, &r).await;
    assert_eq!(row["goneUrls"][0]["url"], r.url("/gone"), "{row}");

    // Resumed while it still answers 410: the delivery that meets it fails, the rest wait.
    let resumed = control_of(&api, &r.url("/gone"), "resume").await;
    assert_eq!(resumed["unparked"], 9, "{resumed}");
    until(|| async { statuses(&api, &gone).await.get("failed").copied() == Some(1) }).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let counted = statuses(&api, &gone).await;
    assert_eq!(counted.get("failed"), Some(&1), "{counted:?}");
    assert_eq!(counted.get("pending"), Some(&8), "{counted:?}");

    // Back: a resume of the origin sends every one of them.
    r.respond_to("/gone", Reply::status(200));
    let resumed = control_of(&api, &origin, "resume").await;
    assert_eq!(resumed["resumedUrls"], json!([r.url("/gone")]), "{resumed}");
    for id in &gone {
        api.wait_status(id, &["succeeded", "failed"], WAIT)
            .await
            .expect("delivered after the resume");
    }
    assert_eq!(
        statuses(&api, &gone).await,
        [("failed".to_owned(), 1), ("succeeded".to_owned(), 8)].into()
    );
    assert_eq!(
        api.metric("spoold_gone_targets").await.expect("metrics"),
        Some(0.0)
    );

    // Gone again elsewhere; a cancel by that URL drops its deliveries and nothing else.
    r.respond_to("/gone-too", slow(410));
    let mut doomed = Vec::new();
    for i in 0..5 {
        doomed.push(create_to(&api, &r.url(&format!("/gone-too?n={i}"))).await);
    }
    until(|| async { target(&api, &r).await["goneUrls"][0]["url"] == r.url("/gone-too") }).await;
    control_of(&api, &origin, "pause").await;
    let kept = create_to(&api, &r.url("/ok?kept=1")).await;
    let (status, _, body) = api
        .request(
            Method::POST,
            "/v1/deliveries/bulk",
            Some(
                serde_json::to_vec(&json!({"action": "cancel",
                                           "filter": {"targetOrigin": r.url("/gone-too")}}))
                .expect("JSON"),
            ),
        )
        .await
        .expect("bulk cancel");
    let answer: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!((status, &answer["changed"]), (200, &json!(5)), "{answer}");
    assert_eq!(
        statuses(&api, &doomed).await,
        [("canceled".to_owned(), 5)].into()
    );
    assert_eq!(api.get(&kept).await.expect("get").1["status"], "pending");
    control_of(&api, &origin, "resume").await;
    api.wait_status(&kept, &["succeeded"], WAIT)
        .await
        .expect("the rest of the origin");
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

/// A target down for `outage` (503 to everything), then back, with the default retry backoff
/// (1 s, doubling to an hour) and probe cap (10 s): once the breaker opened, no two probes are
/// more than the cap apart, and the first success comes within the cap (plus a request) of
/// the recovery, however long the outage — before the cap, probes came at 0.9, 3.1, 6.5, 14.2,
/// 32.5 s, and a target that healed at 40.5 s waited 24 s more.
async fn a_recovery_is_noticed_within_the_probe_cap(outage: Duration) {
    let dir = TempDir::new().expect("temp dir");
    let daemon = DaemonProcess::start(DaemonOptions::new(db_path(&dir)))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(503));
    let ids = create(&api, &r, 20).await;
    tokio::time::sleep(outage).await;
    r.respond_with(Reply::status(200));
    let healed = Instant::now();
    for id in &ids {
        api.wait_status(id, &["succeeded"], Duration::from_secs(60))
            .await
            .expect("delivered after the recovery");
    }
    let at: Vec<Instant> = r.requests().iter().map(|q| q.received_at).collect();
    let first_after = at
        .iter()
        .find(|t| **t >= healed)
        .copied()
        .expect("a request after the recovery");
    assert!(
        first_after - healed < Duration::from_secs(11),
        "the recovery was noticed {:?} after it",
        first_after - healed
    );
    let before: Vec<Instant> = at.iter().copied().filter(|t| *t < healed).collect();
    let gaps: Vec<Duration> = before.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g <= Duration::from_millis(10_500)),
        "probes further apart than the cap: {gaps:?}"
    );
    // A probe is one request: a long outage costs about one a cap, not one a delivery.
    let probes = before.len() as f64;
    let most = 16.0 + outage.as_secs_f64() / 1.5;
    assert!(probes <= most, "{probes} requests in a {outage:?} outage");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_40_s_outage_is_noticed_within_the_probe_cap() {
    a_recovery_is_noticed_within_the_probe_cap(Duration::from_secs(40)).await;
}

/// Ten minutes of the same: run by hand (`cargo nextest run -p spoold --run-ignored only
/// breaker::a_10_minute`), results in the book's testing page.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "ten minutes long: run by hand"]
async fn a_10_minute_outage_is_noticed_within_the_probe_cap() {
    a_recovery_is_noticed_within_the_probe_cap(Duration::from_secs(600)).await;
}
