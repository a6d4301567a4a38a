//! Redirects and at most once. An answer proves that the request arrived: a 3xx that is not
//! followed (a 303 after a POST usually means it was processed) ends `unknown`, and an
//! at-most-once delivery the target answered with a final 4xx is `failed` — neither is sent
//! again by `retry`, a bulk retry or an import, only by a person's `resolve --resend`. On
//! SQLite and on PostgreSQL. And a redirect back to a hop this attempt already sent is not
//! followed (`redirect_loop`), in both modes.

use std::time::Duration;

use serde_json::{json, Value};
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply, TestDatabase};
use tempfile::TempDir;

use crate::{id_of, postgres_opts, process_opts, InProcess, WAIT};

async fn post(api: &Api, path: &str, body: Value) -> (u16, Value) {
    let (status, _, bytes) = api
        .request(
            http::Method::POST,
            path,
            Some(serde_json::to_vec(&body).expect("JSON")),
        )
        .await
        .expect("request");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// How many requests carried delivery `id`.
fn sent(r: &Receiver, id: &str) -> usize {
    r.requests()
        .iter()
        .filter(|q| q.header("X-Spoold-Delivery-ID") == Some(id))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_proves_arrival_is_never_resent_but_by_a_person() {
    let dir = TempDir::new().expect("temp dir");
    let other = TempDir::new().expect("temp dir");
    never_resent_but_by_a_person(process_opts(&dir), process_opts(&other)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_proves_arrival_is_never_resent_but_by_a_person_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let Some(other_db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let other_dir = TempDir::new().expect("temp dir");
    never_resent_but_by_a_person(
        postgres_opts(&db, &dir),
        postgres_opts(&other_db, &other_dir),
    )
    .await;
}

async fn never_resent_but_by_a_person(opts: DaemonOptions, elsewhere: DaemonOptions) {
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    // (answer, status it leaves, lastErrorCode); redirects are not followed (the default).
    let cases: [(u16, &str, &str); 8] = [
        (301, "unknown", "redirect_not_followed"),
        (302, "unknown", "redirect_not_followed"),
        (303, "unknown", "redirect_not_followed"),
        (307, "unknown", "redirect_not_followed"),
        (308, "unknown", "redirect_not_followed"),
        (404, "failed", "http_status"),
        (422, "failed", "http_status"),
        (501, "failed", "http_status"),
    ];
    let mut ids = Vec::new();
    for (answer, want, code) in cases {
        r.push_replies([Reply::status(answer).header("Location", r.url("/elsewhere"))]);
        let (status, created) = api
            .create(json!({"targetUrl": r.url(&format!("/orders/{answer}")),
                           "mode": "at_most_once", "body": {"order": answer},
                           "maxAttempts": 5}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        let id = id_of(&created);
        let d = api
            .wait_status(&id, &["unknown", "failed", "succeeded", "pending"], WAIT)
            .await
            .expect("answered");
        let d = if d["status"] == "pending" {
            api.wait_status(&id, &["unknown", "failed", "succeeded"], WAIT)
                .await
                .expect("answered")
        } else {
            d
        };
        assert_eq!(
            (d["status"].as_str(), d["lastErrorCode"].as_str()),
            (Some(want), Some(code)),
            "{answer}: {d}"
        );
        assert_eq!(d["lastResponseCode"], answer, "{d}");
        ids.push((answer, id));
    }

    // An operator's retry is refused, saying what would send it.
    for (answer, id) in &ids {
        let (status, err) = api.retry(id).await.expect("retry");
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (409, Some("invalid_transition")),
            "{answer}: {err}"
        );
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("resend"), "{answer}: {message}");
    }
    // So is a bulk retry: every one of them is skipped.
    for filter in [json!({"status": "failed"}), json!({"status": "unknown"})] {
        let (status, answer) = post(
            &api,
            "/v1/deliveries/bulk",
            json!({"action": "retry", "filter": filter}),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["changed"], 0, "{filter}: {answer}");
        assert!(answer["skipped"].as_u64() > Some(0), "{filter}: {answer}");
    }

    // Exported and imported into another daemon: as they were, and still not retried there.
    let (status, _, bytes) = api
        .request(http::Method::GET, "/v1/export?limit=100", None)
        .await
        .expect("export");
    assert_eq!(status, 200);
    let page: Value = serde_json::from_slice(&bytes).expect("JSON");
    let other = DaemonProcess::start(elsewhere).await.expect("daemon");
    let other_api = Api::new(other.base_url());
    let (status, imported) = post(
        &other_api,
        "/v1/import",
        json!({"records": page["records"]}),
    )
    .await;
    assert_eq!(status, 200, "{imported}");
    for (answer, id) in &ids {
        let (_, d) = other_api.get(id).await.expect("get");
        assert!(
            matches!(d["status"].as_str(), Some("unknown" | "failed")),
            "{answer}: imported as {d}"
        );
        let (status, err) = other_api.retry(id).await.expect("retry");
        assert_eq!(status, 409, "{answer}: retried after an import: {err}");
    }
    let (status, answer) = post(
        &other_api,
        "/v1/deliveries/bulk",
        json!({"action": "retry", "filter": {"status": "failed"}}),
    )
    .await;
    assert_eq!((status, &answer["changed"]), (200, &json!(0)), "{answer}");

    // Time for anything that would have been sent again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (answer, id) in &ids {
        assert_eq!(sent(&r, id), 1, "{answer}: sent again");
    }

    // A person decides: resend, with a note. Then (and only then) it goes again.
    for (answer, id) in [&ids[2], &ids[5]] {
        let (status, d) = post(
            &api,
            &format!("/v1/deliveries/{id}/resolve"),
            json!({"outcome": "resend", "note": "the vendor lost it"}),
        )
        .await;
        assert_eq!(
            (status, &d["status"]),
            (200, &json!("pending")),
            "{answer}: {d}"
        );
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("resent");
        assert_eq!(sent(&r, id), 2, "{answer}");
    }
}

/// A receiver answering every request with `status` to `location`.
async fn redirecting(status: u16, location: &str) -> Receiver {
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(status).header("Location", location));
    r
}

/// The requests a receiver saw, as `METHOD /path`.
fn seen(r: &Receiver) -> Vec<String> {
    r.requests()
        .iter()
        .map(|q| format!("{} {}", q.method, q.path))
        .collect()
}

/// Deliver to `url` in `mode`: the attempt ends in a redirect loop, as `want` (its one
/// attempt), saying which hop it would have sent again.
async fn looped(d: &InProcess, url: &str, mode: &str, want: &str) {
    let done = d
        .deliver(
            json!({"targetUrl": url, "mode": mode, "body": {"k": 1}, "maxAttempts": 3}),
            &[want],
        )
        .await;
    assert_eq!(
        (&done["lastErrorCode"], &done["attempts"]),
        (&json!("redirect_loop"), &json!(1)),
        "{url} {mode}: {done}"
    );
    let error = done["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("already sent"), "{error}");
}

/// `--max-redirects 3`: a 307 to its own URL sent one POST four times, `/a → /b → /a` two to
/// each. Now no hop is sent twice in one attempt: the loop ends it, `unknown` at most once
/// (the target has answered), `failed` at least once, as any redirect spoold will not follow.
#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_back_to_a_hop_already_sent_is_not_followed() {
    let d = InProcess::boot(&["--max-redirects", "3"]).await;
    for mode in ["at_most_once", "at_least_once"] {
        let want = if mode == "at_most_once" {
            "unknown"
        } else {
            "failed"
        };
        for status in [307, 308, 303, 301] {
            // To itself.
            let own = Receiver::start().await.expect("receiver");
            own.respond_with(Reply::status(status).header("Location", own.url("/self")));
            looped(&d, &own.url("/self"), mode, want).await;
            let want_seen = if matches!(status, 307 | 308) {
                vec!["POST /self"]
            } else {
                // The body-less GET that follows a 301/303 is another request: sent once.
                vec!["POST /self", "GET /self"]
            };
            assert_eq!(seen(&own), want_seen, "{mode} {status}");

            // Between two receivers: /a → /b → /a.
            let b = Receiver::start().await.expect("receiver");
            let a = redirecting(status, &b.url("/b")).await;
            b.respond_with(Reply::status(status).header("Location", a.url("/a")));
            looped(&d, &a.url("/a"), mode, want).await;
            let (want_a, want_b) = if matches!(status, 307 | 308) {
                (vec!["POST /a"], vec!["POST /b"])
            } else {
                (vec!["POST /a", "GET /a"], vec!["GET /b"])
            };
            assert_eq!(seen(&a), want_a, "{mode} {status}");
            assert_eq!(seen(&b), want_b, "{mode} {status}");
        }
    }
    // A chain that does not loop is followed as before.
    let end = Receiver::start().await.expect("receiver");
    let b = redirecting(307, &end.url("/end")).await;
    let a = redirecting(307, &b.url("/b")).await;
    let done = d
        .deliver(
            json!({"targetUrl": a.url("/a"), "mode": "at_most_once", "body": {"k": 3}}),
            &["succeeded"],
        )
        .await;
    assert_eq!(seen(&end), vec!["POST /end"], "{done}");
}
