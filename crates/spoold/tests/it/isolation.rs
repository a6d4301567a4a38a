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
