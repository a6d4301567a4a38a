//! Terminal retention: finished deliveries go (with their attempts and idempotency keys) once
//! the retention has passed; pending work never does.

use std::time::Duration;

use serde_json::json;
use spool_testkit::Receiver;

use crate::{id_of, InProcess, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn finished_deliveries_are_removed_after_retention() {
    let d = InProcess::boot(&["--terminal-retention", "1s"]).await;
    let r = Receiver::start().await.expect("receiver");
    let request = json!({"targetUrl": r.url("/done"), "idempotencyKey": "reuse-me"});
    let (_, done) = d.api.create(request.clone()).await.expect("create");
    let done = id_of(&done);
    d.api
        .wait_status(&done, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let (_, waiting) = d
        .api
        .create(json!({"targetUrl": r.url("/later"), "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    let waiting = id_of(&waiting);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (status, _) = d.api.get(&done).await.expect("get");
        if status == 404 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not removed after retention"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _) = d.api.attempts(&done).await.expect("attempts");
    assert_eq!(status, 404);
    let (status, still) = d.api.get(&waiting).await.expect("get");
    assert_eq!((status, still["status"].as_str()), (200, Some("pending")));
    // The key was released with its delivery: the same key now creates a new one.
    let (status, again) = d.api.create(request).await.expect("create");
    assert_eq!(status, 201, "{again}");
    assert_ne!(id_of(&again), done);
    let (_, _, body) = d
        .api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    assert!(String::from_utf8_lossy(&body).contains("spoold_journal_pruned_deliveries_total 1"));
}
