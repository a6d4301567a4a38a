//! A hung destination occupies only its own per-target slots; others keep flowing.

use std::time::Duration;

use serde_json::json;
use spool_testkit::{Receiver, Reply};

use crate::{id_of, InProcess, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn hung_destination_does_not_starve_another() {
    let d = InProcess::boot(&[
        "--concurrency",
        "8",
        "--per-target-concurrency",
        "4",
        "--request-timeout",
        "30s",
        "--lease",
        "60s",
    ])
    .await;
    let hung = Receiver::start().await.expect("receiver");
    hung.respond_with(Reply::hang());
    let healthy = Receiver::start().await.expect("receiver");

    // More hung work than the hung target's slots, queued first.
    for n in 0..20 {
        let (status, _) = d
            .api
            .create(json!({"targetUrl": hung.url(&format!("/slow/{n}"))}))
            .await
            .expect("create");
        assert_eq!(status, 201);
    }
    hung.wait_for_requests(4, WAIT)
        .await
        .expect("hung slots taken");

    let mut ids = Vec::new();
    for n in 0..20 {
        let (_, created) = d
            .api
            .create(json!({"targetUrl": healthy.url(&format!("/fast/{n}"))}))
            .await
            .expect("create");
        ids.push(id_of(&created));
    }
    for id in &ids {
        d.api
            .wait_status(id, &["succeeded"], Duration::from_secs(10))
            .await
            .expect("healthy target is served while the other hangs");
    }
    // The hung target never got more than its share.
    assert_eq!(hung.requests().len(), 4);
}

/// A target that refuses connections is paused after a few failures: the queued deliveries wait
/// uncharged while single probes find out when it is back, and then all of them go through.
#[tokio::test(flavor = "multi_thread")]
async fn refusing_target_is_paused_and_probed() {
    let d = InProcess::boot(&[]).await;
    let port = Receiver::refusing_port();
    let mut ids = Vec::new();
    for n in 0..60 {
        let (_, created) = d
            .api
            .create(json!({"targetUrl": format!("http://127.0.0.1:{port}/{n}"), "maxAttempts": 50}))
            .await
            .expect("create");
        ids.push(id_of(&created));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut attempts = 0;
    for id in &ids {
        let (_, v) = d.api.get(id).await.expect("get");
        // Waiting, or being probed at this very moment; never finished.
        let status = v["status"].as_str().unwrap_or_default();
        assert!(matches!(status, "pending" | "in_flight"), "{v}");
        attempts += v["attempts"].as_u64().unwrap_or(0);
    }
    // Without the pause every delivery would have been tried several times by now (~60 × 8).
    assert!(attempts < 45, "{attempts} attempts against a dead target");
    let (_, _, metrics) = d
        .api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    assert!(String::from_utf8_lossy(&metrics).contains("spoold_paused_targets"));

    let receiver = Receiver::start_on(port).await.expect("target comes up");
    for id in &ids {
        d.api
            .wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered once the target is back");
    }
    assert_eq!(receiver.requests().len(), ids.len());
}
