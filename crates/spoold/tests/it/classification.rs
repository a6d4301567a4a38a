//! Retry classification end to end: which responses succeed, are retried or fail at once;
//! Retry-After; expiresAt; notBefore; blocked targets.

use std::time::{Duration, Instant};

use serde_json::json;
use spool_testkit::{Receiver, Reply};

use crate::{commits, create_for_later, id_of, InProcess, Targets, WAIT};

/// (first response, final status, attempts, lastErrorCode)
#[tokio::test(flavor = "multi_thread")]
async fn status_table() {
    let d = InProcess::boot(&[]).await;
    let cases: &[(u16, &str, u64, Option<&str>)] = &[
        (200, "succeeded", 1, None),
        (201, "succeeded", 1, None),
        (204, "succeeded", 1, None),
        (301, "failed", 1, Some("redirect_not_followed")),
        (302, "failed", 1, Some("redirect_not_followed")),
        (400, "failed", 1, Some("http_status")),
        (401, "failed", 1, Some("http_status")),
        (404, "failed", 1, Some("http_status")),
        (409, "failed", 1, Some("http_status")),
        (422, "failed", 1, Some("http_status")),
        // Retried: the second response (200) succeeds.
        (408, "succeeded", 2, None),
        (425, "succeeded", 2, None),
        (429, "succeeded", 2, None),
        (500, "succeeded", 2, None),
        (502, "succeeded", 2, None),
        (503, "succeeded", 2, None),
    ];
    let mut receivers = Vec::new();
    for (first, ..) in cases {
        let r = Receiver::start().await.expect("receiver");
        let mut reply = Reply::status(*first).body(format!("reply {first}"));
        if (300..400).contains(first) {
            reply = reply.header("Location", "http://127.0.0.1:9/elsewhere");
        }
        r.push_replies([reply]);
        let (status, created) = d
            .api
            .create(json!({"targetUrl": r.url("/hook")}))
            .await
            .expect("create");
        assert_eq!(status, 201);
        receivers.push((r, id_of(&created)));
    }
    for ((first, want_status, want_attempts, want_code), (_r, id)) in cases.iter().zip(&receivers) {
        let done = d
            .api
            .wait_status(id, &["succeeded", "failed"], WAIT)
            .await
            .expect("terminal");
        assert_eq!(done["status"], *want_status, "{first}: {done}");
        assert_eq!(
            done["attempts"].as_u64(),
            Some(*want_attempts),
            "{first}: {done}"
        );
        assert_eq!(
            done["lastErrorCode"].as_str(),
            *want_code,
            "{first}: {done}"
        );
        if *want_status == "failed" {
            assert_eq!(done["lastResponseCode"].as_u64(), Some(u64::from(*first)));
            let err = done["lastError"].as_str().expect("lastError");
            assert!(err.starts_with(&format!("HTTP {first}")), "{err}");
            assert!(err.contains(&format!("reply {first}")), "{err}");
        }
        let (_, attempts) = d.api.attempts(id).await.expect("attempts");
        let outcomes: Vec<&str> = attempts["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| a["outcome"].as_str().unwrap_or("-"))
            .collect();
        let want: Vec<&str> = match (*want_status, *want_attempts) {
            ("succeeded", 1) => vec!["succeeded"],
            ("succeeded", _) => vec!["retry", "succeeded"],
            _ => vec!["failed"],
        };
        assert_eq!(outcomes, want, "{first}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn transport_errors_are_retried_until_max_attempts() {
    let d = InProcess::boot(&[]).await;
    let port = Receiver::refusing_port();
    let done = d
        .deliver(
            json!({"targetUrl": format!("http://127.0.0.1:{port}/x"), "maxAttempts": 3}),
            &["failed"],
        )
        .await;
    assert_eq!(done["attempts"], 3);
    assert_eq!(done["lastErrorCode"], "connect_failed");
    assert!(done.get("lastResponseCode").is_none(), "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_after_delays_the_next_attempt() {
    let d = InProcess::boot(&[]).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(429).header("Retry-After", "1")]);
    let (_, created) = d
        .api
        .create(json!({"targetUrl": r.url("/limited")}))
        .await
        .expect("create");
    r.wait_for_requests(1, WAIT).await.expect("first attempt");
    let first = Instant::now();
    r.wait_for_requests(2, WAIT).await.expect("second attempt");
    // Backoff alone would retry after ~50 ms; the server asked for a second.
    assert!(
        first.elapsed() >= Duration::from_millis(900),
        "{:?}",
        first.elapsed()
    );
    d.api
        .wait_status(&id_of(&created), &["succeeded"], WAIT)
        .await
        .expect("succeeds");
}

#[tokio::test(flavor = "multi_thread")]
async fn expires_at_ends_retries_as_expired() {
    let d = InProcess::boot(&[]).await;
    let port = Receiver::refusing_port();
    let expires = spool_proto::units::format_time(now_ms() + 700);
    let (status, created) = d
        .api
        .create(json!({"targetUrl": format!("http://127.0.0.1:{port}/x"),
                       "maxAttempts": 100, "expiresAt": expires}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let done = d
        .api
        .wait_status(&id_of(&created), &["failed"], WAIT)
        .await
        .expect("expires");
    assert_eq!(done["lastErrorCode"], "expired", "{done}");
    assert!(done["attempts"].as_u64() >= Some(1));
    assert!(done["attempts"].as_u64() < Some(100));
}

#[tokio::test(flavor = "multi_thread")]
async fn not_before_holds_the_first_attempt() {
    let d = InProcess::boot(&[]).await;
    let r = Receiver::start().await.expect("receiver");
    let not_before = now_ms() + 1200;
    let (created, _) = first_attempt(&d, &r, not_before).await;
    d.api
        .wait_status(&id_of(&created), &["succeeded"], WAIT)
        .await
        .expect("succeeds");
}

/// A delivery due later than the store's wake horizon wakes nobody at its create, and is
/// still sent when it is due: the scheduler's look after its next sweep finds it.
#[tokio::test(flavor = "multi_thread")]
async fn work_for_later_is_found_without_a_wake_up() {
    let d = InProcess::boot(&[]).await;
    let r = Receiver::start().await.expect("receiver");
    let not_before = now_ms() + spool_store::model::WAKE_WITHIN_MS + 1500;
    let (_, sent) = first_attempt(&d, &r, not_before).await;
    assert!(
        sent < not_before + 1000,
        "attempted {} ms late",
        sent - not_before
    );
}

/// Create a delivery to `r` with `notBefore` at `not_before` and wait for its first attempt,
/// which must not come earlier: the created delivery, and when the attempt was seen.
async fn first_attempt(d: &InProcess, r: &Receiver, not_before: i64) -> (serde_json::Value, i64) {
    let (_, created) = d
        .api
        .create(json!({"targetUrl": r.url("/later"),
                       "notBefore": spool_proto::units::format_time(not_before)}))
        .await
        .expect("create");
    assert_eq!(created["status"], "pending");
    r.wait_for_requests(1, WAIT)
        .await
        .expect("attempted eventually");
    let sent = now_ms();
    assert!(sent >= not_before, "attempted before notBefore");
    (created, sent)
}

/// Creates for later cost one commit each: none of them wakes the scheduler into a claim
/// (a write of its own) that finds nothing due.
#[tokio::test(flavor = "multi_thread")]
async fn creates_for_later_cost_no_claims() {
    let d = InProcess::boot(&[]).await;
    // Let start-up's own writes (recovery, the first sweep's claim) finish first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = commits(&d.api).await;
    const CREATES: u32 = 40;
    create_for_later(&d.api, CREATES).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let spent = commits(&d.api).await - before;
    // One commit a create, and at most a few for anything else that runs meanwhile (a sweep).
    assert!(
        spent >= f64::from(CREATES),
        "{spent} commits for {CREATES} creates"
    );
    assert!(
        spent <= f64::from(CREATES + 4),
        "{spent} commits for {CREATES} creates"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn blocked_targets_fail_without_retrying() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let d = InProcess::boot_in(dir, Targets::PolicyDefault, &[]).await;
    let r = Receiver::start().await.expect("receiver");
    // An IP literal is judged at submission.
    let (status, err) = d
        .api
        .create(json!({"targetUrl": r.url("/x")}))
        .await
        .expect("create");
    assert_eq!(status, 400);
    assert_eq!(err["error"]["code"], "target_blocked");
    // A name is judged when resolved: localhost resolves to loopback (from /etc/hosts).
    let (status, created) = d
        .api
        .create(json!({"targetUrl": format!("http://localhost:{}/x", r.port()), "maxAttempts": 5}))
        .await
        .expect("create");
    assert_eq!(status, 201);
    let done = d
        .api
        .wait_status(&id_of(&created), &["failed"], WAIT)
        .await
        .expect("fails");
    assert_eq!(
        done["attempts"], 1,
        "blocked targets are not retried: {done}"
    );
    assert_eq!(done["lastErrorCode"], "target_blocked");
    assert!(
        done["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("loopback")),
        "{done}"
    );
    assert!(
        r.requests().is_empty(),
        "a blocked target must not be contacted"
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Every transport failure is told as an operator would say it: what was tried, where, and
/// why, in one line; the stable `lastErrorCode` beside it. (Names that do not resolve and
/// blocked names are checked inside a network namespace, in `ssrf_netns`.)
#[tokio::test(flavor = "multi_thread")]
async fn transport_errors_read_like_sentences() {
    let d = InProcess::boot(&["--request-timeout", "500ms"]).await;
    let refusing = Receiver::refusing_port();
    let plain = Receiver::start().await.expect("receiver");
    let hung = Receiver::start().await.expect("receiver");
    hung.respond_with(Reply::hang());
    // Reads the request, then hangs up without a word.
    let rude = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let rude_port = rude.local_addr().expect("addr").port();
    let rude_task = tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        while let Ok((mut conn, _)) = rude.accept().await {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf).await;
            drop(conn);
        }
    });
    let cases = [
        (
            format!("http://127.0.0.1:{refusing}/x"),
            "connect_failed",
            format!("connect to 127.0.0.1:{refusing}: connection refused"),
        ),
        (
            format!("https://127.0.0.1:{}/x", plain.port()),
            "tls_failed",
            format!(
                "TLS handshake with 127.0.0.1:{}: the server did not answer with TLS (is it a \
                 plain-HTTP port?)",
                plain.port()
            ),
        ),
        (
            hung.url("/x"),
            "timeout",
            "no response within 500ms (request timeout)".to_owned(),
        ),
        (
            format!("http://127.0.0.1:{rude_port}/x"),
            "request_failed",
            format!(
                "request to 127.0.0.1:{rude_port} failed: connection closed before message \
                 completed"
            ),
        ),
    ];
    for (url, code, message) in cases {
        let done = d
            .deliver(json!({"targetUrl": url, "maxAttempts": 1}), &["failed"])
            .await;
        assert_eq!(done["lastErrorCode"], code, "{url}: {done}");
        assert_eq!(done["lastError"], message.as_str(), "{url}: {done}");
        let (_, history) = d.api.attempts(&id_of(&done)).await.expect("attempts");
        assert_eq!(history["attempts"][0]["error"], message.as_str(), "{url}");
    }
    rude_task.abort();
}

/// The default schedule is a time budget (`--retry-window`, 24 h by default; 2 s here, with the
/// tests' fast retries), not 8 attempts: a target down for longer than 8 attempts take, then
/// back, still gets its delivery; one that stays down past the window ends as `expired`. An
/// explicit maxAttempts means what it says.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_schedule_outlasts_downtime() {
    let d = InProcess::boot(&["--retry-window", "2500ms"]).await;
    let port = Receiver::refusing_port();
    let back = format!("http://127.0.0.1:{port}/back");
    let (status, created) = d
        .api
        .create(json!({"targetUrl": back}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["maxAttempts"], 100, "{created}");
    let windowed = id_of(&created);
    let (_, counted) = d
        .api
        .create(json!({"targetUrl": format!("http://127.0.0.1:{port}/counted"), "maxAttempts": 3}))
        .await
        .expect("create");
    let stays_down = Receiver::refusing_port();
    let (_, doomed) = d
        .api
        .create(json!({"targetUrl": format!("http://127.0.0.1:{stays_down}/never")}))
        .await
        .expect("create");

    // Longer than 8 attempts take at these speeds (about 1.2 s), shorter than the window.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let counted = d
        .api
        .wait_status(&id_of(&counted), &["failed"], WAIT)
        .await
        .expect("an explicit maxAttempts is spent");
    assert_eq!(counted["attempts"], 3, "{counted}");
    let receiver = Receiver::start_on(port).await.expect("target back");
    let delivered = d
        .api
        .wait_status(&windowed, &["succeeded", "failed"], WAIT)
        .await
        .expect("finishes");
    assert_eq!(delivered["status"], "succeeded", "{delivered}");
    assert!(receiver.requests().iter().any(|r| r.path == "/back"));

    let doomed = d
        .api
        .wait_status(&id_of(&doomed), &["failed"], WAIT)
        .await
        .expect("gives up after the window");
    assert_eq!(doomed["lastErrorCode"], "expired", "{doomed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_holding_a_nul_is_recorded() {
    answer_holding_a_nul(None).await;
}

/// PostgreSQL's `text` cannot hold a NUL: before the store kept one as U+FFFD, a target whose
/// error page held one failed the attempt's record there, and the delivery stayed `in_flight`
/// until its lease ran out — to be sent again, and fail the same way.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_holding_a_nul_is_recorded_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    answer_holding_a_nul(Some(&db)).await;
}

async fn answer_holding_a_nul(pg: Option<&spool_testkit::TestDatabase>) {
    let d = InProcess::boot_on(
        tempfile::TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &[],
        pg,
    )
    .await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([
        Reply::status(503).body("busy\0now"),
        Reply::status(201)
            .header("Content-Type", "application/json")
            .body(r#"{"id":"r\u0000x"}"#),
    ]);
    let (status, created) = d
        .api
        .create(json!({"targetUrl": r.url("/hook"), "remoteIdPointer": "/id"}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let done = d
        .api
        .wait_status(&id, &["succeeded", "failed"], WAIT)
        .await
        .expect("recorded, whatever the answers held");
    assert_eq!(
        (&done["status"], &done["attempts"], &done["remoteId"]),
        (&json!("succeeded"), &json!(2), &json!("r\u{FFFD}x")),
        "{done}"
    );
    let (_, attempts) = d.api.attempts(&id).await.expect("attempts");
    assert_eq!(
        attempts["attempts"][0]["error"], "HTTP 503: busy\u{FFFD}now",
        "{attempts}"
    );
}
