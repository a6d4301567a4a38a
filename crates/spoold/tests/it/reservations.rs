//! A slot reserves its target's next due delivery while its current request is on the wire
//! (per-target concurrency 1 here, so the slot is the only way to the target). A reservation is
//! only that: immediately before its request leaves, the delivery is started in the store —
//! fenced, so a cancel or a passed deadline that came first wins — and its attempt record tells
//! when it really started. A target that answers 429 or 503 with `Retry-After` gets nothing more
//! until that time has passed.

use std::time::Duration;

use serde_json::{json, Value};
use spool_testkit::{Receiver, Reply};

use crate::{id_of, InProcess, WAIT};

/// One slot per target, the default timeouts.
async fn one_slot() -> InProcess {
    InProcess::boot(&["--per-target-concurrency", "1"]).await
}

/// `n` deliveries to `r` (paths `/0`, `/1`, …), due at the same moment 300 ms from now, so
/// that while one is on the wire the next are there to be reserved; `extra(i)` is merged into
/// the `i`th. The ids in the order they are sent (the first created is claimed first).
async fn due_together(
    d: &InProcess,
    r: &Receiver,
    n: usize,
    extra: impl Fn(usize) -> Value,
) -> Vec<String> {
    let due = spool_proto::units::format_time(now_ms() + 300);
    let mut ids = Vec::new();
    for i in 0..n {
        let mut request = json!({"targetUrl": r.url(&format!("/{i}")), "notBefore": due});
        for (k, v) in extra(i).as_object().expect("an object") {
            request[k] = v.clone();
        }
        let (status, created) = d.api.create(request).await.expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    ids
}

/// Two deliveries due together (see [`due_together`]); `extra` is merged into the second.
/// Returns once the first is sent.
async fn two_due_together(d: &InProcess, r: &Receiver, extra: Value) -> Vec<String> {
    let ids = due_together(d, r, 2, |i| if i == 1 { extra.clone() } else { json!({}) }).await;
    r.wait_for_requests(1, WAIT)
        .await
        .expect("the first is sent");
    assert_eq!(
        r.requests()[0].path,
        "/0",
        "the first created is sent first"
    );
    ids
}

/// Wait until every delivery of `ids` has succeeded.
async fn all_succeed(d: &InProcess, ids: &[String]) {
    for id in ids {
        d.api
            .wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
}

/// Wait until the delivery is reserved: in flight, no attempt started.
async fn wait_reserved(d: &InProcess, id: &str) {
    let v = d
        .api
        .wait_status(id, &["in_flight"], WAIT)
        .await
        .expect("reserved");
    assert_eq!(v["attempts"], 0, "{v}");
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_canceled_before_it_is_sent_is_never_sent() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(200).delay(Duration::from_millis(1500))]);
    let ids = two_due_together(&d, &r, json!({})).await;
    wait_reserved(&d, &ids[1]).await;
    let (status, canceled) = d.api.cancel(&ids[1]).await.expect("cancel");
    assert_eq!((status, &canceled["status"]), (200, &json!("canceled")));

    d.api
        .wait_status(&ids[0], &["succeeded"], WAIT)
        .await
        .expect("the first is delivered");
    // The slot has moved on by now; give a wrongly sent request time to arrive anyway.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.requests().len(), 1, "the canceled delivery was sent");
    let (_, v) = d.api.get(&ids[1]).await.expect("get");
    assert_eq!(
        (&v["status"], &v["attempts"]),
        (&json!("canceled"), &json!(0))
    );
    let (_, history) = d.api.attempts(&ids[1]).await.expect("attempts");
    assert_eq!(history["attempts"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_whose_deadline_passes_is_never_sent() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(200).delay(Duration::from_millis(1500))]);
    let expires = spool_proto::units::format_time(now_ms() + 900);
    let ids = two_due_together(&d, &r, json!({"expiresAt": expires})).await;
    wait_reserved(&d, &ids[1]).await;

    let v = d
        .api
        .wait_status(&ids[1], &["failed", "succeeded"], WAIT)
        .await
        .expect("finished");
    assert_eq!(
        (&v["lastErrorCode"], &v["attempts"]),
        (&json!("expired"), &json!(0)),
        "{v}"
    );
    d.api
        .wait_status(&ids[0], &["succeeded"], WAIT)
        .await
        .expect("the first is delivered");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(r.requests().len(), 1, "the expired delivery was sent");
}

/// The attempt of a reserved delivery starts when its request leaves, after the previous one
/// was answered, and that is the time its record shows.
#[tokio::test(flavor = "multi_thread")]
async fn a_reserved_attempt_records_when_it_really_started() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(200).delay(Duration::from_millis(1000))]);
    let ids = two_due_together(&d, &r, json!({})).await;
    all_succeed(&d, &ids).await;
    let started = |v: &Value| {
        spool_proto::units::parse_time(v["attempts"][0]["startedAt"].as_str().expect("time"))
            .expect("RFC 3339")
    };
    let (_, first) = d.api.attempts(&ids[0]).await.expect("attempts");
    let (_, second) = d.api.attempts(&ids[1]).await.expect("attempts");
    let gap = started(&second) - started(&first);
    assert!(
        gap >= 950,
        "the second attempt is recorded {gap} ms after the first"
    );
}

/// 429 or 503 with `Retry-After`: the reserved delivery is given back, and the target gets no
/// request at all until the time it asked for has passed.
#[tokio::test(flavor = "multi_thread")]
async fn retry_after_holds_the_target_back() {
    for status in [429, 503] {
        let d = one_slot().await;
        let r = Receiver::start().await.expect("receiver");
        r.push_replies([Reply::status(status)
            .header("Retry-After", "2")
            .delay(Duration::from_millis(300))]);
        let ids = two_due_together(&d, &r, json!({})).await;
        wait_reserved(&d, &ids[1]).await;
        for id in &ids {
            d.api
                .wait_status(id, &["succeeded"], WAIT)
                .await
                .expect("delivered");
        }
        let seen = r.requests();
        assert_eq!(seen.len(), 3, "{status}");
        let pause = seen[1].received_at - seen[0].received_at;
        assert!(
            pause >= Duration::from_millis(2000),
            "{status}: the next request came {pause:?} after the one that was told to wait"
        );
        let (_, second) = d.api.attempts(&ids[1]).await.expect("attempts");
        assert_eq!(
            second["attempts"].as_array().map(Vec::len),
            Some(1),
            "{status}"
        );
    }
}

/// When the current request fails, the reservation is given back without a trace: the next
/// delivery is sent normally later and its history shows only the attempt that really happened.
#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_is_given_back_when_the_target_fails() {
    let d = InProcess::boot(&[
        "--per-target-concurrency",
        "1",
        "--request-timeout",
        "500ms",
        "--lease",
        "5s",
    ])
    .await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::hang()]);
    let ids = two_due_together(&d, &r, json!({})).await;
    all_succeed(&d, &ids).await;
    let outcomes = |v: serde_json::Value| -> Vec<String> {
        v["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| a["outcome"].as_str().unwrap_or("-").to_owned())
            .collect()
    };
    let (_, first) = d.api.attempts(&ids[0]).await.expect("attempts");
    assert_eq!(outcomes(first), ["retry", "succeeded"]);
    let (_, second) = d.api.attempts(&ids[1]).await.expect("attempts");
    assert_eq!(outcomes(second), ["succeeded"]);
}

/// Once the target answers quickly, its slot starts the next attempts ahead of their turn; when
/// the target then asks it to wait, those attempts are undone. Every delivery's attempt count
/// and record match the requests the target really got, and `X-Spoold-Attempt` numbers them
/// from 1 without a gap.
#[tokio::test(flavor = "multi_thread")]
async fn attempts_started_ahead_are_undone_when_the_target_stops_answering() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    let mut replies: Vec<Reply> = (0..10).map(|_| Reply::status(200)).collect();
    replies.push(Reply::status(503).header("Retry-After", "1"));
    r.push_replies(replies);
    let ids = due_together(&d, &r, 20, |_| json!({})).await;
    all_succeed(&d, &ids).await;
    let undone = d
        .api
        .metric("spoold_delivery_attempts_undone_total")
        .await
        .expect("metrics");
    assert!(
        undone.is_some_and(|n| n >= 1.0),
        "no attempt was started ahead and undone: {undone:?}"
    );
    let seen = r.requests();
    assert_eq!(seen.len(), 21, "20 deliveries, one of them asked to wait");
    for id in &ids {
        let numbers: Vec<u64> = seen
            .iter()
            .filter(|q| q.header(spool_proto::DELIVERY_ID_HEADER) == Some(id.as_str()))
            .map(|q| {
                q.header(spool_proto::ATTEMPT_HEADER)
                    .and_then(|n| n.parse().ok())
                    .expect("an attempt number")
            })
            .collect();
        let sent = numbers.len() as u64;
        assert_eq!(numbers, (1..=sent).collect::<Vec<_>>(), "{id}");
        let (_, v) = d.api.get(id).await.expect("get");
        assert_eq!(v["attempts"], sent, "{id}: {v}");
        let (_, record) = d.api.attempts(id).await.expect("attempts");
        assert_eq!(
            record["attempts"].as_array().map(Vec::len),
            Some(sent as usize),
            "{id}: {record}"
        );
    }
}

/// Once a quick target has answered, its slot takes its next deliveries — each claimed with
/// its attempt started in one step (`claimed` in its history), not reserved first and started
/// in a later step — and each is still sent once, as attempt 1.
#[tokio::test(flavor = "multi_thread")]
async fn a_quick_targets_slot_takes_its_next_deliveries() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    let ids = due_together(&d, &r, 20, |_| json!({})).await;
    all_succeed(&d, &ids).await;
    let mut taken = 0;
    for id in &ids {
        let (_, log) = d.api.transitions(id).await.expect("transitions");
        let reasons: Vec<&str> = log["transitions"]
            .as_array()
            .expect("transitions")
            .iter()
            .filter_map(|t| t["reason"].as_str())
            .collect();
        match reasons.as_slice() {
            ["created", "claimed", "delivered"] => taken += 1,
            ["created", "reserved", "delivered"] => {}
            other => panic!("{id}: {other:?}"),
        }
    }
    // The first is the scheduler's claim, the second reserved before the target's first
    // answer said it is quick; after that the slot takes.
    assert!(taken >= 15, "only {taken} of 20 claimed or taken");
    let seen = r.requests();
    assert_eq!(seen.len(), ids.len(), "each sent once");
    assert!(seen
        .iter()
        .all(|q| q.header(spool_proto::ATTEMPT_HEADER) == Some("1")));
}

/// A slow target's slot starts nothing ahead: each delivery is started only when its turn has
/// come, so a cancel made while the requests before it are on the wire still wins.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_target_gets_no_attempt_started_ahead() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200).delay(Duration::from_millis(500)));
    let ids = due_together(&d, &r, 5, |_| json!({})).await;
    // The third request is on the wire: with a fast target the fourth delivery would have been
    // started by now.
    r.wait_for_requests(3, WAIT)
        .await
        .expect("three requests sent");
    let (_, fourth) = d.api.get(&ids[3]).await.expect("get");
    assert_eq!(fourth["attempts"], 0, "started ahead: {fourth}");
    let (status, canceled) = d.api.cancel(&ids[3]).await.expect("cancel");
    assert_eq!((status, &canceled["status"]), (200, &json!("canceled")));
    for n in [0, 1, 2, 4] {
        d.api
            .wait_status(&ids[n], &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
    let paths: Vec<String> = r.requests().into_iter().map(|q| q.path).collect();
    assert_eq!(paths, ["/0", "/1", "/2", "/4"]);
}

/// At-least-once deliveries followed by at-most-once ones to the same quick target: the slot
/// that was starting attempts ahead stops doing so at the first at-most-once one, and each is
/// sent once, as attempt 1, and recorded once.
#[tokio::test(flavor = "multi_thread")]
async fn a_slot_turns_careful_at_the_first_at_most_once_delivery() {
    let d = one_slot().await;
    let r = Receiver::start().await.expect("receiver");
    let ids = due_together(
        &d,
        &r,
        40,
        |i| json!({"mode": if i < 20 { "at_least_once" } else { "at_most_once" }}),
    )
    .await;
    all_succeed(&d, &ids).await;
    let seen = r.requests();
    assert_eq!(seen.len(), ids.len(), "each sent once");
    for id in &ids {
        let attempts: Vec<&str> = seen
            .iter()
            .filter(|q| q.header(spool_proto::DELIVERY_ID_HEADER) == Some(id.as_str()))
            .filter_map(|q| q.header(spool_proto::ATTEMPT_HEADER))
            .collect();
        assert_eq!(attempts, ["1"], "{id}");
        let (_, record) = d.api.attempts(id).await.expect("attempts");
        assert_eq!(
            record["attempts"].as_array().map(Vec::len),
            Some(1),
            "{record}"
        );
    }
}
