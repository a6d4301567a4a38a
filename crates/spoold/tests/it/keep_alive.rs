//! Kept-alive connections and at most once: a receiver whose keep-alive timeout (1–20 ms after
//! each answer) closes connections just as the next request is written drops that request
//! unread — and the sender cannot tell it from a request read and then cut off. At most once
//! such a request would end `unknown` although it never arrived, so each at-most-once request
//! goes out on a connection of its own; at least once (where a resend is allowed) connections
//! are still reused.

use std::collections::HashMap;

use serde_json::{json, Value};
use spool_testkit::{ClosingReceiver, Recorded};

use crate::{id_of, InProcess, WAIT};

/// Create `n` deliveries to `r` at once (`mode`), and wait for each to settle.
async fn send_all(d: &InProcess, r: &ClosingReceiver, mode: &str, n: usize) -> Vec<Value> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let (status, created) = d
            .api
            .create(
                json!({"targetUrl": r.url(&format!("/{mode}/{i}")), "mode": mode,
                           "body": {"mode": mode, "n": i}, "maxAttempts": 5}),
            )
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    let mut settled = Vec::with_capacity(n);
    for id in &ids {
        settled.push(
            d.api
                .wait_status(id, &["succeeded", "failed", "unknown"], WAIT)
                .await
                .expect("settles"),
        );
    }
    settled
}

/// How often each delivery's request was read, by delivery id.
fn received(requests: &[Recorded]) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in requests {
        if let Some(id) = r.header("X-Spoold-Delivery-ID") {
            *seen.entry(id.to_owned()).or_insert(0) += 1;
        }
    }
    seen
}

/// The reproduction: with kept-alive connections, 15–30 of 60 at-most-once deliveries
/// to such a receiver ended `unknown` although none of those requests had been read.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_closing_idle_connections_makes_no_at_most_once_request_unknown() {
    let d = InProcess::boot(&["--request-timeout", "2s", "--lease", "6s"]).await;
    let r = ClosingReceiver::start(1..=20).await.expect("receiver");

    let settled = send_all(&d, &r, "at_most_once", 100).await;
    let unknown: Vec<&Value> = settled
        .iter()
        .filter(|d| d["status"] != "succeeded")
        .collect();
    assert!(
        unknown.is_empty(),
        "{} of 100 not delivered, e.g. {}",
        unknown.len(),
        unknown[0]
    );
    let seen = received(&r.requests());
    assert_eq!(seen.len(), 100);
    assert!(seen.values().all(|n| *n == 1), "received twice: {seen:?}");
    // One connection each: none was left open for the receiver's timer to close.
    assert_eq!(
        r.connections(),
        100,
        "at-most-once requests shared connections"
    );
    assert_eq!(r.dropped_unread(), 0);

    // At least once, connections are kept and reused (a request dropped unread is sent
    // again).
    let before = r.connections();
    let settled = send_all(&d, &r, "at_least_once", 100).await;
    assert!(
        settled.iter().all(|d| d["status"] == "succeeded"),
        "{settled:?}"
    );
    let used = r.connections() - before;
    assert!(
        used < 100,
        "at least once, every request took a connection of its own ({used})"
    );
}
