//! A mixed trial at the edges: at-most-once and at-least-once deliveries at once, through
//! redirect chains and loops, to a receiver whose keep-alive timeout closes connections under
//! the next request, to gateways answering 502, 503 and 504, to a receiver that asks to come
//! back later and one that refuses — then an operator's retries, single and bulk. It must find
//! no at-most-once request received twice where the receiver took it, and no `unknown` whose
//! request never reached a receiver. On SQLite and on PostgreSQL.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{json, Value};
use spool_testkit::{
    Api, ClosingReceiver, DaemonOptions, DaemonProcess, Receiver, Recorded, Reply, TestDatabase,
};
use tempfile::TempDir;

use crate::{db_path, id_of, on_postgres, WAIT};

/// Deliveries of each kind in each mode.
const EACH: usize = 15;

/// Quick retries and probes (the 5xx targets' breakers open and probe), redirects followed.
const FLAGS: &[&str] = &[
    "--retry-base",
    "20ms",
    "--retry-cap",
    "60ms",
    "--max-redirects",
    "3",
    "--request-timeout",
    "2s",
    "--lease",
    "6s",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_mixed_trial_resends_no_at_most_once_request_and_leaves_no_spurious_unknown() {
    let dir = TempDir::new().expect("temp dir");
    trial(DaemonOptions::new(db_path(&dir)).args(FLAGS.iter().copied())).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mixed_trial_resends_no_at_most_once_request_and_leaves_no_spurious_unknown_on_postgres()
{
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    trial(on_postgres(&db, &dir).args(FLAGS.iter().copied())).await;
}

/// What a kind of delivery ends as, in each mode, and whether its receiver took the request
/// (so that receiving it twice would be a resend of what arrived).
struct Kind {
    name: &'static str,
    url: String,
    at_most_once: &'static str,
    at_least_once: &'static str,
    /// The receiver answers that it did not take it (429-like): resending is allowed.
    not_taken: bool,
}

async fn trial(opts: DaemonOptions) {
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());

    let closing = ClosingReceiver::start(1..=20).await.expect("receiver");
    let answering = |reply: Reply| async move {
        let r = Receiver::start().await.expect("receiver");
        r.respond_with(reply);
        r
    };
    let chain_b = answering(Reply::status(308).header("Location", closing.url("/end"))).await;
    let chain_a = answering(Reply::status(307).header("Location", chain_b.url("/b"))).await;
    let see_other = answering(Reply::status(303).header("Location", closing.url("/seen"))).await;
    let looping = Receiver::start().await.expect("receiver");
    looping.respond_with(Reply::status(307).header("Location", looping.url("/loop")));
    let bad_gateway = answering(Reply::status(502)).await;
    let unavailable = answering(Reply::status(503)).await;
    let gateway_timeout = answering(Reply::status(504)).await;
    let later = answering(Reply::status(503).header("Retry-After", "0")).await;
    let refusing = answering(Reply::status(422)).await;

    let kinds = [
        Kind {
            name: "closing",
            url: closing.url("/direct"),
            at_most_once: "succeeded",
            at_least_once: "succeeded",
            not_taken: false,
        },
        Kind {
            name: "chain",
            url: chain_a.url("/a"),
            at_most_once: "succeeded",
            at_least_once: "succeeded",
            not_taken: false,
        },
        Kind {
            name: "see_other",
            url: see_other.url("/form"),
            at_most_once: "succeeded",
            at_least_once: "succeeded",
            not_taken: false,
        },
        Kind {
            name: "loop",
            url: looping.url("/loop"),
            at_most_once: "unknown",
            at_least_once: "failed",
            not_taken: false,
        },
        Kind {
            name: "502",
            url: bad_gateway.url("/x"),
            at_most_once: "unknown",
            at_least_once: "failed",
            not_taken: false,
        },
        Kind {
            name: "503",
            url: unavailable.url("/x"),
            at_most_once: "unknown",
            at_least_once: "failed",
            not_taken: false,
        },
        Kind {
            name: "504",
            url: gateway_timeout.url("/x"),
            at_most_once: "unknown",
            at_least_once: "failed",
            not_taken: false,
        },
        Kind {
            name: "later",
            url: later.url("/x"),
            at_most_once: "failed",
            at_least_once: "failed",
            not_taken: true,
        },
        Kind {
            name: "422",
            url: refusing.url("/x"),
            at_most_once: "failed",
            at_least_once: "failed",
            not_taken: false,
        },
    ];

    // Every kind in both modes, interleaved, three attempts each.
    let mut made: Vec<(String, &Kind, bool)> = Vec::new();
    for n in 0..EACH {
        for kind in &kinds {
            for at_most_once in [true, false] {
                let mode = if at_most_once {
                    "at_most_once"
                } else {
                    "at_least_once"
                };
                let (status, created) = api
                    .create(
                        json!({"targetUrl": kind.url, "mode": mode, "maxAttempts": 3,
                                   "body": {"kind": kind.name, "mode": mode, "n": n}}),
                    )
                    .await
                    .expect("create");
                assert_eq!(status, 201, "{created}");
                made.push((id_of(&created), kind, at_most_once));
            }
        }
    }
    let settle = |made: &[(String, &Kind, bool)]| {
        let ids: Vec<String> = made.iter().map(|(id, _, _)| id.clone()).collect();
        let api = &api;
        async move {
            let mut settled = HashMap::new();
            for id in ids {
                let d = api
                    .wait_status(&id, &["succeeded", "failed", "unknown"], WAIT)
                    .await
                    .expect("settles");
                settled.insert(id, d);
            }
            settled
        }
    };
    let settled = settle(&made).await;
    let mut wrong = Vec::new();
    for (id, kind, at_most_once) in &made {
        let want = if *at_most_once {
            kind.at_most_once
        } else {
            kind.at_least_once
        };
        let d = &settled[id];
        if d["status"] != want {
            wrong.push(format!("{} {}: {d}", kind.name, d["mode"]));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} settled wrongly: {wrong:#?}",
        wrong.len()
    );

    // The operator: every at-most-once delivery whose request arrived is refused a retry...
    let mut refused = 0;
    for (id, kind, at_most_once) in &made {
        if *at_most_once && !kind.not_taken && settled[id]["status"] != "succeeded" {
            let (status, err) = api.retry(id).await.expect("retry");
            assert_eq!(status, 409, "{}: {err}", kind.name);
            refused += 1;
        }
    }
    // ...and a bulk retry of everything failed changes exactly those that did not arrive (or
    // are at least once), and skips the rest.
    let (status, _, bytes) = api
        .request(
            http::Method::POST,
            "/v1/deliveries/bulk",
            Some(
                serde_json::to_vec(&json!({"action": "retry", "filter": {"status": "failed"}}))
                    .expect("JSON"),
            ),
        )
        .await
        .expect("bulk retry");
    let answer: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(status, 200, "{answer}");
    let retried: Vec<&(String, &Kind, bool)> = made
        .iter()
        .filter(|(id, kind, at_most_once)| {
            settled[id]["status"] == "failed" && (!at_most_once || kind.not_taken)
        })
        .collect();
    assert_eq!(answer["changed"], retried.len(), "{answer}");
    let owned: Vec<(String, &Kind, bool)> = retried
        .iter()
        .map(|&(a, b, c)| (a.clone(), *b, *c))
        .collect();
    let again = settle(&owned).await;
    assert!(
        again.values().all(|d| d["status"] == "failed"),
        "retried deliveries settled otherwise"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;

    // What every receiver saw, by delivery.
    let mut seen: BTreeMap<String, Vec<(&str, usize)>> = BTreeMap::new();
    let receivers: [(&str, Vec<Recorded>); 10] = [
        ("closing", closing.requests()),
        ("chain_a", chain_a.requests()),
        ("chain_b", chain_b.requests()),
        ("see_other", see_other.requests()),
        ("loop", looping.requests()),
        ("502", bad_gateway.requests()),
        ("503", unavailable.requests()),
        ("504", gateway_timeout.requests()),
        ("later", later.requests()),
        ("422", refusing.requests()),
    ];
    for (name, requests) in &receivers {
        let mut per_id: HashMap<&str, usize> = HashMap::new();
        for r in requests {
            if let Some(id) = r.header("X-Spoold-Delivery-ID") {
                *per_id.entry(id).or_insert(0) += 1;
            }
        }
        for (id, n) in per_id {
            seen.entry(id.to_owned()).or_default().push((name, n));
        }
    }
    let mut twice = Vec::new();
    let mut never = Vec::new();
    for (id, kind, at_most_once) in &made {
        if !at_most_once {
            continue;
        }
        let got = seen.get(id).cloned().unwrap_or_default();
        if !kind.not_taken && got.iter().any(|(_, n)| *n > 1) {
            twice.push(format!("{}: {got:?}", kind.name));
        }
        if settled[id]["status"] == "unknown" && got.is_empty() {
            never.push(format!("{}: {}", kind.name, settled[id]));
        }
    }
    assert!(
        twice.is_empty(),
        "at-most-once requests received twice: {twice:#?}"
    );
    assert!(never.is_empty(), "unknown but never received: {never:#?}");
    assert_eq!(refused, 5 * EACH, "refused retries");
}
