//! Leases belong to the attempts that hold them. An attempt still running in this daemon keeps
//! its claim whatever the wall clock does: the periodic sweep renews the leases of live attempts
//! and takes back only those of attempts that are gone, on the store's one clock.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use spool_testkit::{Receiver, Reply};
use tempfile::TempDir;

use crate::{id_of, InProcess, Targets, WAIT};

/// The wall clock jumps an hour ahead while a request is on the wire (NTP correcting a clock
/// that was far behind): every lease now looks long expired. The sweep (every 1.5 s with this
/// lease) must renew the live attempt's lease, not take it back and send the delivery again.
#[tokio::test(flavor = "multi_thread")]
async fn a_wall_clock_step_does_not_take_back_a_live_attempt() {
    let shift = Arc::new(AtomicI64::new(0));
    let clock = spool_store::Clock::shifted(Arc::clone(&shift));
    let d = InProcess::boot_configured(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--request-timeout", "3s", "--lease", "6s"],
        move |config| config.clock = clock,
    )
    .await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(200).delay(Duration::from_millis(2500))]);
    let (status, created) = d
        .api
        .create(json!({"targetUrl": r.url("/slow")}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    r.wait_for_requests(1, WAIT).await.expect("sent");
    shift.store(3_600_000, Ordering::Relaxed);

    d.api
        .wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    // A wrongly reclaimed delivery would be sent again at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.requests().len(), 1, "sent twice");
    let (_, history) = d.api.attempts(&id).await.expect("attempts");
    let outcomes: Vec<_> = history["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["outcome"].clone())
        .collect();
    assert_eq!(outcomes, [json!("succeeded")], "{history}");
}
