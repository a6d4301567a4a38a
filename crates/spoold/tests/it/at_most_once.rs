//! At-most-once deliveries against a real "remote API" on 127.0.0.1 that keeps its own records:
//! a request that may have arrived is `unknown`, never resent by itself (not even by a restart),
//! and reconciliation asks the remote side instead. Every test counts the remote's creates.

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use spool_testkit::{
    Api, CreateBehavior, DaemonProcess, Receiver, RemoteApi, Reply, SearchBehavior,
};
use tempfile::TempDir;

use crate::{id_of, process_opts, wait_for, InProcess, Targets, WAIT};

/// Short timeouts so that `unknown` comes quickly, and quick reconciliation.
const FLAGS: &[&str] = &[
    "--request-timeout",
    "1s",
    "--lease",
    "4s",
    "--reconcile-base",
    "100ms",
];

/// An at-most-once order for the remote's create endpoint, searchable by its fingerprint.
fn order(remote: &RemoteApi, fingerprint: &str, window: &str) -> Value {
    json!({
        "targetUrl": remote.url("/records"),
        "mode": "at_most_once",
        "fingerprint": fingerprint,
        "body": {"fingerprint": fingerprint, "amount": 42},
        "maxAttempts": 3,
        "reconcile": {
            "url": remote.url("/records?fingerprint={fingerprint}"),
            "matchesPointer": "/data",
            "observationWindow": window,
        },
    })
}

async fn post(api: &Api, path: &str, body: Value) -> (u16, Value) {
    let (status, _, bytes) = api
        .request(Method::POST, path, Some(body.to_string().into_bytes()))
        .await
        .expect("request");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn get_json(api: &Api, path: &str) -> Value {
    let (status, _, bytes) = api.request(Method::GET, path, None).await.expect("request");
    assert_eq!(status, 200, "GET {path}");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The transition log as (from, to, reason) triples.
async fn log_of(api: &Api, id: &str) -> Vec<(String, String, String)> {
    let log = get_json(api, &format!("/v1/deliveries/{id}/transitions")).await;
    log["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .map(|t| {
            let text = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
            (text("from"), text("to"), text("reason"))
        })
        .collect()
}

/// The article's demo: the remote commits the record, then the client gets no reliable answer;
/// the daemon is killed and restarted; reconciliation finds the one record.
async fn demo(no_answer: CreateBehavior) {
    let dir = TempDir::new().expect("temp dir");
    let remote = RemoteApi::start().await;
    remote.set_create(no_answer);
    // The search is down at first, so the daemon dies with the outcome still unknown.
    remote.set_search(SearchBehavior::Fail(503));
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(FLAGS.iter().copied()))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, created) = api
        .create(order(&remote, "order-1", "1h"))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    assert_eq!(created["mode"], "at_most_once");
    let d = wait_for(&api, &id, "unknown after a failed check", |d| {
        d["status"] == "unknown" && d["checks"].as_u64() >= Some(1)
    })
    .await;
    assert!(
        d["unknownSince"].is_string() && d["reviewAt"].is_string(),
        "{d}"
    );
    let checks = get_json(&api, &format!("/v1/deliveries/{id}/checks")).await;
    assert_eq!(checks["checks"][0]["httpStatus"], 503, "{checks}");
    assert_eq!(checks["checks"][0]["errorCode"], "http_status", "{checks}");

    daemon.kill9();
    remote.set_search(SearchBehavior::Honest);
    let daemon = DaemonProcess::start(process_opts(&dir).args(FLAGS.iter().copied()))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let d = api
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("reconciled");
    assert_eq!(d["remoteId"], "rec-1", "{d}");
    assert_eq!(remote.creates(), 1, "the create endpoint was called once");
    let records = remote.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].delivery_id.as_deref(), Some(id.as_str()));
    let log = log_of(&api, &id).await;
    assert_eq!(
        log.last()
            .map(|(f, t, r)| (f.as_str(), t.as_str(), r.as_str())),
        Some(("unknown", "succeeded", "reconciled")),
        "{log:?}"
    );
    assert_eq!(
        api.metric("spoold_reconcile_checks_total{result=\"match\"}")
            .await
            .expect("metrics"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_remote_stalls_past_the_timeout_then_kill9_then_one_match() {
    demo(CreateBehavior::Stall).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_remote_resets_after_reading_then_kill9_then_one_match() {
    demo(CreateBehavior::Reset).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_matches_stay_unknown_until_the_window_closes() {
    let remote = RemoteApi::start().await;
    // A 500 leaves it open whether the order was taken; this remote did not take it.
    remote.set_create(CreateBehavior::Status(500));
    let daemon = InProcess::boot(FLAGS).await;
    let (status, created) = daemon
        .api
        .create(order(&remote, "order-0", "2s"))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    // Checked more than once inside the window, still unknown: the remote may only lag.
    let d = wait_for(&daemon.api, &id, "two checks", |d| {
        d["checks"].as_u64() >= Some(2) || d["status"] == "manual_review"
    })
    .await;
    assert_eq!(d["status"], "unknown", "{d}");
    assert_eq!(d["lastResponseCode"], 500, "{d}");
    assert_eq!(
        daemon
            .api
            .metric("spoold_deliveries{status=\"unknown\"}")
            .await
            .expect("metrics"),
        Some(1.0)
    );
    let d = daemon
        .api
        .wait_status(&id, &["manual_review"], WAIT)
        .await
        .expect("manual review");
    let log = log_of(&daemon.api, &id).await;
    assert_eq!(
        log.last().map(|(_, t, r)| (t.as_str(), r.as_str())),
        Some(("manual_review", "no_match_after_window")),
        "{log:?}"
    );
    let checks = get_json(&daemon.api, &format!("/v1/deliveries/{id}/checks")).await;
    let checks = checks["checks"].as_array().expect("checks").clone();
    assert!(checks.len() >= 2, "{checks:?}");
    assert!(checks.iter().all(|c| c["matches"] == 0), "{checks:?}");
    assert!(d["nextCheckAt"].is_null(), "{d}");
    assert_eq!(remote.creates(), 1, "nothing was resent");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_matches_go_to_manual_review_and_nothing_is_resent() {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Reset);
    remote.set_search(SearchBehavior::Duplicate);
    let daemon = InProcess::boot(FLAGS).await;
    let d = daemon
        .deliver(order(&remote, "order-2", "1h"), &["manual_review"])
        .await;
    let id = id_of(&d);
    let log = log_of(&daemon.api, &id).await;
    assert_eq!(
        log.last().map(|(_, t, r)| (t.as_str(), r.as_str())),
        Some(("manual_review", "multiple_matches")),
        "{log:?}"
    );
    assert_eq!(remote.creates(), 1);
    assert_eq!(d["remoteId"], Value::Null, "{d}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill9_while_in_flight_becomes_unknown_and_is_never_resent() {
    let dir = TempDir::new().expect("temp dir");
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Stall);
    // Long enough that the request is surely still on the wire at the kill.
    let slow = ["--request-timeout", "20s", "--lease", "45s"];
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(slow))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, created) = api
        .create(json!({
            "targetUrl": remote.url("/records"),
            "mode": "at_most_once",
            "body": {"fingerprint": "order-4"},
        }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    assert!(
        remote.wait_for_creates(1, WAIT).await,
        "request reached the remote"
    );
    daemon.kill9();

    // Whatever the remote does now, a restart must not ask it again.
    remote.set_create(CreateBehavior::Answer);
    let daemon = DaemonProcess::start(process_opts(&dir).args(slow))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let (_, d) = api.get(&id).await.expect("get");
    assert_eq!(d["status"], "unknown", "{d}");
    assert_eq!(d["lastErrorCode"], "daemon_restart", "{d}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, d) = api.get(&id).await.expect("get");
    assert_eq!(d["status"], "unknown", "{d}");
    assert_eq!(remote.creates(), 1, "resent after a restart");
    let log = log_of(&api, &id).await;
    assert!(
        log.contains(&(
            "in_flight".into(),
            "unknown".into(),
            "daemon_restart".into()
        )),
        "{log:?}"
    );
    let attempts = get_json(&api, &format!("/v1/deliveries/{id}/attempts")).await;
    assert_eq!(attempts["attempts"][0]["outcome"], "unknown", "{attempts}");
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_refused_is_retried_and_then_delivered_once() {
    let mut receiver = Receiver::start().await.expect("receiver");
    receiver.stop().await;
    let daemon = InProcess::boot(FLAGS).await;
    let (status, created) = daemon
        .api
        .create(json!({
            "targetUrl": receiver.url("/orders"),
            "mode": "at_most_once",
            "body": {"n": 5},
            "maxAttempts": 100,
        }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let d = wait_for(&daemon.api, &id, "two refused attempts", |d| {
        d["attempts"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(d["lastErrorCode"], "connect_failed", "{d}");
    assert!(
        matches!(d["status"].as_str(), Some("pending" | "in_flight")),
        "{d}"
    );
    receiver.restart().await.expect("receiver back");
    daemon
        .api
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    assert_eq!(receiver.requests().len(), 1, "delivered exactly once");
}

/// Every response class of the at-most-once rules: what the delivery becomes after the first
/// answer, and how often the remote's create endpoint was called in the end. (A 503 with
/// `Retry-After`, and statuses a target's rule trusts, are resent: see
/// `a_gateways_5xx_is_unknown_unless_the_targets_rule_trusts_it`.)
#[tokio::test(flavor = "multi_thread")]
async fn response_classes_follow_the_at_most_once_rules() {
    let daemon = InProcess::boot(FLAGS).await;
    // (first answer, final status, creates, lastErrorCode)
    let cases: &[(u16, &str, usize, Option<&str>)] = &[
        (200, "succeeded", 1, None),
        (201, "succeeded", 1, None),
        // The server says it did not process it: safe to send again (then answered 201).
        (408, "succeeded", 2, None),
        (425, "succeeded", 2, None),
        (429, "succeeded", 2, None),
        (400, "failed", 1, Some("http_status")),
        (404, "failed", 1, Some("http_status")),
        (409, "failed", 1, Some("http_status")),
        (422, "failed", 1, Some("http_status")),
        (501, "failed", 1, Some("http_status")),
        (505, "failed", 1, Some("http_status")),
        // The target got it and pointed elsewhere: what it did first is not known.
        (302, "unknown", 1, Some("redirect_not_followed")),
        (303, "unknown", 1, Some("redirect_not_followed")),
        (500, "unknown", 1, Some("http_status")),
        (502, "unknown", 1, Some("http_status")),
        (504, "unknown", 1, Some("http_status")),
        // Without `Retry-After`, perhaps a proxy's whose upstream reset mid-request.
        (503, "unknown", 1, Some("http_status")),
    ];
    for &(first, want, creates, code) in cases {
        let remote = RemoteApi::start().await;
        remote.set_create_once(CreateBehavior::Status(first));
        let d = daemon
            .deliver(
                json!({
                    "targetUrl": remote.url("/records"),
                    "mode": "at_most_once",
                    "body": {"fingerprint": format!("case-{first}")},
                    "maxAttempts": 3,
                }),
                &[want],
            )
            .await;
        assert_eq!(remote.creates(), creates, "{first}: {d}");
        assert_eq!(d["lastErrorCode"].as_str(), code, "{first}: {d}");
        if want != "succeeded" {
            assert_eq!(d["lastResponseCode"], first, "{first}: {d}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_remote_id_is_read_from_a_2xx_body() {
    let remote = RemoteApi::start().await;
    let daemon = InProcess::boot(FLAGS).await;
    let d = daemon
        .deliver(
            json!({
                "targetUrl": remote.url("/records"),
                "mode": "at_most_once",
                "body": {"fingerprint": "order-7"},
                "remoteIdPointer": "/id",
            }),
            &["succeeded"],
        )
        .await;
    assert_eq!(d["remoteId"], "rec-1", "{d}");
    assert_eq!(d["remoteIdPointer"], "/id", "{d}");
}

/// A daemon with one at-most-once delivery made `unknown` (the remote answered its create 502
/// once), without a reconcile query, so it stays unknown for its window (an hour by default):
/// the daemon, the remote and the delivery's id.
async fn one_unknown(fingerprint: &str) -> (InProcess, RemoteApi, String) {
    let remote = RemoteApi::start().await;
    remote.set_create_once(CreateBehavior::Status(502));
    let daemon = InProcess::boot(FLAGS).await;
    let d = daemon
        .deliver(
            json!({"targetUrl": remote.url("/records"), "mode": "at_most_once",
                   "body": {"fingerprint": fingerprint}}),
            &["unknown"],
        )
        .await;
    let id = id_of(&d);
    (daemon, remote, id)
}

#[tokio::test(flavor = "multi_thread")]
async fn resolve_only_from_unknown_or_manual_review_and_with_a_note() {
    let (daemon, remote, id) = one_unknown("order-8").await;
    let api = &daemon.api;
    // Neither cancel nor retry settles it: the answer says what does.
    for (status, err) in [
        api.cancel(&id).await.expect("cancel"),
        api.retry(&id).await.expect("retry"),
    ] {
        assert_eq!(status, 409, "{err}");
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("this delivery is unknown: whether this at-most-once request")
                && message.contains("settle it with resolve"),
            "{err}"
        );
    }
    let path = format!("/v1/deliveries/{id}/resolve");
    let resolve = |body: Value| post(api, &path, body);

    let (status, err) = resolve(json!({"outcome": "failed"})).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (400, &json!("invalid_request")),
        "{err}"
    );
    let (status, err) = resolve(json!({"outcome": "failed", "note": "  "})).await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = resolve(json!({"note": "x"})).await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = resolve(json!({"outcome": "maybe", "note": "x"})).await;
    assert_eq!(status, 400, "{err}");
    let (status, err) = resolve(json!({"outcome": "failed", "remoteId": "r", "note": "x"})).await;
    assert_eq!(status, 400, "{err}");
    // A person checked with the vendor: send it again.
    let (status, d) =
        resolve(json!({"outcome": "resend", "note": "vendor has no such order"})).await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["status"], "pending", "{d}");
    let d = api
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("resent");
    assert_eq!(remote.creates(), 2, "resent once, on the operator's word");
    let log = get_json(api, &format!("/v1/deliveries/{id}/transitions")).await;
    let resend = log["transitions"]
        .as_array()
        .expect("log")
        .iter()
        .find(|t| t["reason"] == "resend")
        .cloned()
        .expect("resend logged");
    assert_eq!(resend["from"], "unknown");
    assert_eq!(resend["note"], "vendor has no such order");
    // Settled: no longer resolvable.
    let (status, err) = resolve(json!({"outcome": "failed", "note": "x"})).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("invalid_transition")),
        "{d} {err}"
    );
    let (status, _) = post(
        api,
        "/v1/deliveries/0190f3c2a1b27c4e9d0a5b6c7d8e9f01/resolve",
        json!({"outcome": "failed", "note": "x"}),
    )
    .await;
    assert_eq!(status, 404);

    // unknown → succeeded with the remote id a person found.
    remote.set_create_once(CreateBehavior::Status(504));
    let d = daemon
        .deliver(
            json!({"targetUrl": remote.url("/records"), "mode": "at_most_once",
                   "body": {"fingerprint": "order-9"}}),
            &["unknown"],
        )
        .await;
    let id = id_of(&d);
    let (status, d) = post(
        api,
        &format!("/v1/deliveries/{id}/resolve"),
        json!({"outcome": "succeeded", "remoteId": "rec-77", "note": "found in the vendor UI"}),
    )
    .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        (&d["status"], &d["remoteId"]),
        (&json!("succeeded"), &json!("rec-77"))
    );
    // An at-most-once delivery in flight cannot be canceled: it may be at the target already.
    let stalled = RemoteApi::start().await;
    stalled.set_create(CreateBehavior::Stall);
    let (_, created) = api
        .create(
            json!({"targetUrl": stalled.url("/records"), "mode": "at_most_once",
                       "body": {"fingerprint": "order-10"}}),
        )
        .await
        .expect("create");
    let id = id_of(&created);
    assert!(stalled.wait_for_creates(1, WAIT).await);
    let (status, err) = api.cancel(&id).await.expect("cancel");
    assert_eq!(status, 409, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("may already have reached")),
        "{err}"
    );
}

/// An operator resolved an `unknown` delivery `failed`: it must not be sent. `retry` (meant
/// for deliveries the target certainly did not take) refuses it and says what would send it; a
/// deliberate `resolve` with `resend` and a note does. An at-most-once delivery whose request
/// never arrived (the target refused the connection every time) is retried as any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_resolved_failed_is_sent_again_only_by_a_resend() {
    let (daemon, remote, id) = one_unknown("order-11").await;
    let api = &daemon.api;
    let path = format!("/v1/deliveries/{id}/resolve");
    let (status, d) = post(
        api,
        &path,
        json!({"outcome": "failed", "note": "must not go"}),
    )
    .await;
    assert_eq!((status, &d["status"]), (200, &json!("failed")), "{d}");

    let (status, err) = api.retry(&id).await.expect("retry");
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("invalid_transition")),
        "{err}"
    );
    let message = err["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("resend"), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(remote.creates(), 1, "retry sent it again");
    assert_eq!(api.get(&id).await.expect("get").1["status"], "failed");

    // A person decides to send it after all.
    let (status, d) = post(
        api,
        &path,
        json!({"outcome": "resend", "note": "vendor asked"}),
    )
    .await;
    assert_eq!((status, &d["status"]), (200, &json!("pending")), "{d}");
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("resent");
    assert_eq!(remote.creates(), 2);
    let log = log_of(api, &id).await;
    assert!(
        log.iter()
            .any(|(from, to, why)| (from.as_str(), to.as_str(), why.as_str())
                == ("failed", "pending", "resend")),
        "{log:?}"
    );

    // Never `unknown`: refused connections only. Failed, and retried on request.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/records", closed.local_addr().expect("addr"));
    drop(closed);
    let d = daemon
        .deliver(
            json!({"targetUrl": url, "mode": "at_most_once", "maxAttempts": 2}),
            &["failed"],
        )
        .await;
    let (status, d) = api.retry(&id_of(&d)).await.expect("retry");
    assert_eq!((status, &d["status"]), (200, &json!("pending")), "{d}");
}

/// A reconcile query is not the delivery: it carries neither `X-Spoold-Delivery-ID` nor
/// `X-Spoold-Attempt`, and it follows no redirect even where deliveries do (`--max-redirects`):
/// a 307 pointing at the create endpoint is a failed check, not a request to it.
#[tokio::test(flavor = "multi_thread")]
async fn reconcile_queries_follow_no_redirect_and_carry_no_delivery_id() {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Status(500));
    let search = Receiver::start().await.expect("receiver");
    search.respond_with(Reply::status(307).header("location", remote.url("/records")));
    let mut flags = FLAGS.to_vec();
    flags.extend(["--max-redirects", "3"]);
    let daemon = InProcess::boot(&flags).await;
    let (status, created) = daemon
        .api
        .create(json!({
            "targetUrl": remote.url("/records"),
            "mode": "at_most_once",
            "fingerprint": "order-12",
            "body": {"fingerprint": "order-12"},
            "reconcile": {"url": search.url("/search?f={fingerprint}"), "matchesPointer": "/data"},
        }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let d = wait_for(&daemon.api, &id, "two checks", |d| {
        d["checks"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(d["status"], "unknown", "{d}");
    let checks = get_json(&daemon.api, &format!("/v1/deliveries/{id}/checks")).await;
    let first = &checks["checks"][0];
    assert_eq!(
        (&first["httpStatus"], &first["errorCode"]),
        (&json!(307), &json!("http_status")),
        "{checks}"
    );
    for r in search.requests() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/search"));
        for header in [spool_proto::DELIVERY_ID_HEADER, spool_proto::ATTEMPT_HEADER] {
            assert!(r.header(header).is_none(), "{header} on a reconcile query");
        }
    }
    assert_eq!(
        remote.creates(),
        1,
        "the redirect was followed to the create endpoint"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn at_most_once_fields_are_validated_and_part_of_idempotency() {
    let daemon = InProcess::boot(FLAGS).await;
    let api = &daemon.api;
    let base = json!({"targetUrl": "http://127.0.0.1:9/x", "mode": "at_most_once"});
    let with = |extra: Value| {
        let mut v = base.clone();
        v.as_object_mut()
            .expect("object")
            .extend(extra.as_object().expect("object").clone());
        v
    };
    let cases = [
        (
            json!({"mode": "sometimes"}),
            "invalid_request",
            "unknown variant",
        ),
        (
            json!({"mode": "at_least_once", "fingerprint": "f"}),
            "invalid_delivery",
            "only to mode at_most_once",
        ),
        (
            json!({"reconcile": {"url": "http://127.0.0.1:9/s?f={fingerprint}"}}),
            "invalid_delivery",
            "has none",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {"url": "http://127.0.0.1:9/{id}"}}),
            "invalid_delivery",
            "unknown placeholder {id}",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {}}),
            "invalid_delivery",
            "reconcile.url is required",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {"url": "ftp://h/x"}}),
            "invalid_delivery",
            "reconcile.url",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {"url": "http://127.0.0.1/", "matchesPointer": "data"}}),
            "invalid_delivery",
            "JSON pointer",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {"url": "http://127.0.0.1/", "observationWindow": "0s"}}),
            "invalid_delivery",
            "observationWindow",
        ),
        (
            json!({"fingerprint": "f", "reconcile": {"url": "http://127.0.0.1/", "nope": 1}}),
            "invalid_request",
            "unknown field",
        ),
    ];
    for (extra, code, text) in cases {
        let (status, err) = api.create(with(extra.clone())).await.expect("create");
        assert_eq!(status, 400, "{extra}: {err}");
        assert_eq!(err["error"]["code"], code, "{extra}: {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(text)),
            "{extra}: {err}"
        );
    }
    // The reconcile query is held to the outbound address policy, as the delivery is.
    let guarded = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::PolicyDefault,
        &["--allow-target", "127.0.0.1/32"],
    )
    .await;
    // Another loopback address, outside the allowed one: blocked like any other.
    let (status, err) = guarded
        .api
        .create(with(
            json!({"fingerprint": "f", "reconcile": {"url": "http://127.0.0.2/x"}}),
        ))
        .await
        .expect("create");
    assert_eq!(
        (status, &err["error"]["code"]),
        (400, &json!("target_blocked")),
        "{err}"
    );

    // The key covers mode and reconciliation: the same key with another mode is a conflict.
    let keyed = |mode: &str| {
        json!({"targetUrl": "http://127.0.0.1:9/x", "idempotencyKey": "k-1", "mode": mode,
               "notBefore": "2999-01-01T00:00:00Z"})
    };
    let (status, first) = api.create(keyed("at_most_once")).await.expect("create");
    assert_eq!(status, 201, "{first}");
    // The fingerprint defaults to the key; the view shows the defaults filled in.
    assert_eq!(first["fingerprint"], "k-1", "{first}");
    let (status, _) = api.create(keyed("at_most_once")).await.expect("create");
    assert_eq!(status, 200);
    let (status, err) = api.create(keyed("at_least_once")).await.expect("create");
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("idempotency_conflict"))
    );
    let (status, shown) = api
        .create(
            json!({"targetUrl": "http://127.0.0.1:9/x", "mode": "at_most_once",
                       "fingerprint": "f", "notBefore": "2999-01-01T00:00:00Z",
                       "reconcile": {"url": "http://127.0.0.1:9/s?f={fingerprint}",
                                     "headers": {"authorization": "Bearer s3cret"}}}),
        )
        .await
        .expect("create");
    assert_eq!(status, 201, "{shown}");
    assert_eq!(
        shown["reconcile"],
        json!({"url": "http://127.0.0.1:9/s?f={fingerprint}", "method": "GET",
               "headers": {"Authorization": "[redacted]"}, "matchesPointer": "",
               "remoteIdPointer": "/id", "observationWindow": "1h"})
    );
    // A client that never sets a mode sees no new field.
    let (_, plain) = api
        .create(json!({"targetUrl": "http://127.0.0.1:9/x", "notBefore": "2999-01-01T00:00:00Z"}))
        .await
        .expect("create");
    for field in [
        "mode",
        "fingerprint",
        "reconcile",
        "remoteId",
        "unknownSince",
        "checks",
    ] {
        assert!(plain.get(field).is_none(), "{field}: {plain}");
    }
}

/// A failed check changes nothing and is asked again: an answer that is not JSON, and a query
/// the address policy no longer allows (blocked at check time, not only at submission).
#[tokio::test(flavor = "multi_thread")]
async fn failed_checks_change_nothing_and_are_asked_again() {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Status(502));
    remote.set_search(SearchBehavior::NotJson);
    let open = ["--allow-target", "127.0.0.0/8"];
    let daemon = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::PolicyDefault,
        &[FLAGS, &open[..]].concat(),
    )
    .await;
    let mut request = order(&remote, "order-11", "1h");
    let answered = daemon.deliver(request.clone(), &["unknown"]).await;
    let answered = id_of(&answered);
    // The second order's query goes to 127.0.0.2, allowed now, blocked after the restart.
    request["fingerprint"] = json!("order-12");
    request["reconcile"]["url"] = json!(format!(
        "http://127.0.0.2:{}/records?fingerprint={{fingerprint}}",
        remote.port()
    ));
    let blocked = id_of(&daemon.deliver(request, &["unknown"]).await);
    // Checks the first daemon made (at most one more may come before it stops).
    let mut before = Vec::new();
    for id in [&answered, &blocked] {
        let (_, d) = daemon.api.get(id).await.expect("get");
        before.push(d["checks"].as_u64().unwrap_or(0));
    }
    let dir = daemon.stop().await;

    let only_loopback_one = ["--allow-target", "127.0.0.1/32"];
    let daemon = InProcess::boot_in(
        dir,
        Targets::PolicyDefault,
        &[FLAGS, &only_loopback_one[..]].concat(),
    )
    .await;
    for ((id, code), before) in [
        (&answered, "invalid_response"),
        (&blocked, "target_blocked"),
    ]
    .into_iter()
    .zip(before)
    {
        let d = wait_for(&daemon.api, id, "checks by the restarted daemon", |d| {
            d["checks"].as_u64() >= Some(before + 2)
        })
        .await;
        assert_eq!(d["status"], "unknown", "{d}");
        let checks = get_json(&daemon.api, &format!("/v1/deliveries/{id}/checks")).await;
        // The last check is the restarted daemon's (the first may have been made before).
        let last = checks["checks"]
            .as_array()
            .and_then(|c| c.last())
            .expect("checks");
        assert_eq!(last["errorCode"], code, "{checks}");
        assert!(last.get("matches").is_none(), "{checks}");
    }
    assert_eq!(remote.creates(), 2, "nothing was resent");
    assert_eq!(
        daemon
            .api
            .metric("spoold_reconcile_checks_total{result=\"failed\"}")
            .await
            .expect("metrics")
            .map(|n| n >= 4.0),
        Some(true)
    );
}

/// A busy target's slot starts at-least-once attempts ahead of their turn, never at-most-once
/// ones: killed mid-stream (three times), the daemon leaves `unknown` (or, with nothing to
/// reconcile with, in `manual_review`) only what the target received, or per kill the one
/// attempt whose start had just been answered (its request about to leave).
#[tokio::test(flavor = "multi_thread")]
async fn kill9_mid_stream_leaves_unknown_only_what_may_have_been_sent() {
    const KILLS: usize = 3;
    const DELIVERIES: usize = 300;
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    // Quick enough that at-least-once attempts would be started ahead.
    r.respond_with(Reply::status(200).delay(Duration::from_millis(5)));
    let one_slot = ["--per-target-concurrency", "1"];
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("daemon");
    let due = spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + 1_000,
    );
    let api = Api::new(daemon.base_url());
    for n in 0..DELIVERIES {
        let (status, created) = api
            .create(json!({
                "targetUrl": r.url(&format!("/{n}")),
                "mode": "at_most_once",
                "notBefore": due,
            }))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
    }
    for kill in 1..=KILLS {
        r.wait_for_requests(50 * kill, WAIT)
            .await
            .expect("the stream is under way");
        daemon.kill9();
        daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
            .await
            .expect("restart");
    }
    // The last kill too freezes what the target received.
    r.wait_for_requests(50 * (KILLS + 1), WAIT)
        .await
        .expect("the stream is under way");
    daemon.kill9();

    let received: std::collections::HashSet<String> = r
        .requests()
        .iter()
        .filter_map(|q| q.header(spool_proto::DELIVERY_ID_HEADER).map(str::to_owned))
        .collect();
    assert!(
        received.len() < DELIVERIES,
        "the kills came too late to tell"
    );
    let daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let mut ambiguous = Vec::new();
    for status in ["unknown", "manual_review"] {
        let (_, listed) = api
            .list(&format!("status={status}&limit=500"))
            .await
            .expect("list");
        ambiguous.extend(
            listed["deliveries"]
                .as_array()
                .expect("deliveries")
                .iter()
                .map(id_of),
        );
    }
    assert!(
        ambiguous.len() > KILLS,
        "a kill missed the stream: {ambiguous:?}"
    );
    let never_received: Vec<&String> = ambiguous
        .iter()
        .filter(|id| !received.contains(*id))
        .collect();
    assert!(
        never_received.len() <= KILLS + 1,
        "started but never sent, now ambiguous: {never_received:?} of {}",
        ambiguous.len()
    );
}

/// The ids of the deliveries the receiver `r` saw, each with how many requests.
fn received_by(r: &Receiver) -> std::collections::HashMap<String, usize> {
    let mut seen = std::collections::HashMap::new();
    for q in r.requests() {
        if let Some(id) = q.header(spool_proto::DELIVERY_ID_HEADER) {
            *seen.entry(id.to_owned()).or_insert(0) += 1;
        }
    }
    seen
}

/// One slot on a quick target, which it would keep attempts started ahead for, and a mixed
/// sequence: at least once, at least once, at least once (the target stalls on this one), at
/// most once. The at-most-once delivery is only reserved while the stalled request is on the
/// wire — never started — so kill -9 then leaves it pending, not `unknown`: after the restart it
/// is sent, once.
#[tokio::test(flavor = "multi_thread")]
async fn an_at_most_once_delivery_is_not_started_while_another_request_is_on_the_wire() {
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    // The second answer takes a while, so that every take the first answer set off is in
    // before it: the at-most-once delivery is then reserved, and the stalled one lined up.
    r.push_replies([
        Reply::status(200),
        Reply::status(200).delay(Duration::from_millis(200)),
        Reply::hang(),
    ]);
    r.respond_with(Reply::status(200));
    let one_slot = ["--per-target-concurrency", "1"];
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    // All due together, so that one slot takes them one after another.
    let due = spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + 1_000,
    );
    let mut ids = Vec::new();
    for (n, mode) in [
        "at_least_once",
        "at_least_once",
        "at_least_once",
        "at_most_once",
    ]
    .into_iter()
    .enumerate()
    {
        let (status, created) = api
            .create(json!({"targetUrl": r.url(&format!("/{n}")), "mode": mode, "notBefore": due}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    r.wait_for_requests(3, WAIT)
        .await
        .expect("the third stalls");
    // Time for the slot to do whatever it does while the stalled request is on the wire.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(received_by(&r).get(&ids[3]), None, "not sent yet");
    daemon.kill9();
    let daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let done = api
        .wait_status(&ids[3], &["succeeded", "unknown", "failed"], WAIT)
        .await
        .expect("settles");
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(received_by(&r).get(&ids[3]), Some(&1));
    drop(daemon);
}

/// Mixed modes on one busy slot, kill -9 three times in the middle of the stream: an
/// at-most-once delivery is `unknown` after a restart only if the target received it — save at
/// most the one request per kill whose start had just been committed when the kill came (its
/// bytes about to leave: the intent is durable before anything is sent, so that window cannot
/// close; reconciliation asks about it).
#[tokio::test(flavor = "multi_thread")]
async fn kill9_of_a_mixed_stream_leaves_unknown_only_what_was_received() {
    const KILLS: usize = 3;
    const DELIVERIES: usize = 300;
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200).delay(Duration::from_millis(5)));
    let one_slot = ["--per-target-concurrency", "1"];
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("daemon");
    let due = spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + 1_000,
    );
    let api = Api::new(daemon.base_url());
    let mut at_most_once = std::collections::HashSet::new();
    for n in 0..DELIVERIES {
        // Two at least once, one at most once, over and over.
        let mode = if n % 3 == 2 {
            "at_most_once"
        } else {
            "at_least_once"
        };
        let (status, created) = api
            .create(json!({"targetUrl": r.url(&format!("/{n}")), "mode": mode, "notBefore": due}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        if mode == "at_most_once" {
            at_most_once.insert(id_of(&created));
        }
    }
    for kill in 1..=KILLS {
        r.wait_for_requests(60 * kill, WAIT)
            .await
            .expect("the stream is under way");
        daemon.kill9();
        daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
            .await
            .expect("restart");
    }
    r.wait_for_requests(60 * (KILLS + 1), WAIT)
        .await
        .expect("the stream is under way");
    daemon.kill9();
    let received = received_by(&r);
    let daemon = DaemonProcess::start(process_opts(&dir).args(one_slot))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let mut ambiguous = Vec::new();
    for status in ["unknown", "manual_review"] {
        let (_, listed) = api
            .list(&format!("status={status}&limit=500"))
            .await
            .expect("list");
        ambiguous.extend(
            listed["deliveries"]
                .as_array()
                .expect("deliveries")
                .iter()
                .map(id_of),
        );
    }
    assert!(
        ambiguous.iter().all(|id| at_most_once.contains(id)),
        "only at-most-once deliveries can be ambiguous"
    );
    let never_received: Vec<&String> = ambiguous
        .iter()
        .filter(|id| !received.contains_key(*id))
        .collect();
    assert!(
        never_received.len() <= KILLS + 1,
        "started but never sent, now ambiguous: {never_received:?} of {}",
        ambiguous.len()
    );
    // Nothing was sent twice.
    let twice: Vec<_> = received
        .iter()
        .filter(|(id, n)| at_most_once.contains(*id) && **n > 1)
        .collect();
    assert!(twice.is_empty(), "{twice:?}");
    drop(daemon);
}

/// A 502 or 504 comes from a proxy in front of the receiver, which may have taken the request
/// already; some proxies answer 503 when the upstream reset mid-request. At most once these are
/// `unknown` by default — a 503 is resent only with `Retry-After`, the receiver's own word that
/// it did not take it — unless the target's rule names the statuses its receiver answers
/// before any work (`at_most_once_resend_on`).
#[tokio::test(flavor = "multi_thread")]
async fn a_gateways_5xx_is_unknown_unless_the_targets_rule_trusts_it() {
    let trusting = Receiver::start().await.expect("receiver");
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[[targets]]\nmatch = \"{}\"\nat_most_once_resend_on = [502, 503]\n",
            trusting.url("/*")
        ),
    )
    .expect("write config");
    let config = config.display().to_string();
    let mut flags = FLAGS.to_vec();
    flags.extend(["--config", &config]);
    let daemon = InProcess::boot_in(dir, Targets::Loopback, &flags).await;
    let plain = Receiver::start().await.expect("receiver");
    // (receiver, first answer, final status, requests)
    let cases: [(&Receiver, Reply, &str, usize); 8] = [
        (&plain, Reply::status(502), "unknown", 1),
        (&plain, Reply::status(504), "unknown", 1),
        (&plain, Reply::status(503), "unknown", 1),
        (
            &plain,
            Reply::status(503).header("Retry-After", "1"),
            "succeeded",
            2,
        ),
        (&plain, Reply::status(429), "succeeded", 2),
        (&trusting, Reply::status(502), "succeeded", 2),
        (&trusting, Reply::status(503), "succeeded", 2),
        (&trusting, Reply::status(504), "unknown", 1),
    ];
    for (r, first, want, requests) in cases {
        r.clear_requests();
        r.push_replies([first.clone()]);
        let d = daemon
            .deliver(
                json!({"targetUrl": r.url("/orders"), "mode": "at_most_once",
                       "body": {"order": first.status}, "maxAttempts": 3}),
                &[want],
            )
            .await;
        assert_eq!(r.requests().len(), requests, "{first:?}: {d}");
    }
}
