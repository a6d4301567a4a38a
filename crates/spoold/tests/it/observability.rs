//! Metrics pass `promtool check metrics`, the example alert rules pass `promtool check rules`,
//! and attempts are logged with their stable fields.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{id_of, process_opts, InProcess, WAIT};

/// `promtool`, or `None` (with a note) where it is not installed. CI installs it and sets
/// `SPOOLD_REQUIRE_TOOLS=1`, which turns its absence into a failure.
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some("promtool");
    }
    assert!(
        std::env::var_os("SPOOLD_REQUIRE_TOOLS").is_none(),
        "promtool is required (Debian package `prometheus`)"
    );
    eprintln!("promtool not installed: check not run");
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_pass_promtool() {
    let Some(promtool) = promtool() else { return };
    let d = InProcess::boot(&[]).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(503)]);
    d.deliver(json!({"targetUrl": r.url("/x")}), &["succeeded"])
        .await;
    let (_, _, body) = d
        .api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&body)
        .expect("feed metrics");
    let out = child.wait_with_output().expect("promtool finishes");
    assert!(
        out.status.success(),
        "promtool: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&body)
    );
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("spoold_delivery_results_total{result=\"retryable_failure\"} 1"));
    assert!(text.contains("spoold_ready 1"), "{text}");
}

#[test]
fn alert_rules_pass_promtool() {
    let Some(promtool) = promtool() else { return };
    let rules = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/prometheus/spoold-alerts.yml"
    );
    let out = Command::new(promtool)
        .args(["check", "rules", rules])
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One JSON line per attempt with stable fields; header values and bodies never appear.
#[tokio::test(flavor = "multi_thread")]
async fn attempts_are_logged_with_stable_fields_and_no_secrets() {
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, created) = api
        .create(
            json!({"targetUrl": r.url("/log"), "headers": {"Authorization": "Bearer hunter2"},
                       "body": {"secret": "body-value-xyz"}}),
        )
        .await
        .expect("create");
    let id = id_of(&created);
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    daemon.terminate().await.expect("stops");
    let logs = daemon.stderr();
    assert!(!logs.contains("hunter2"), "a header value was logged");
    assert!(!logs.contains("body-value-xyz"), "a body was logged");
    let attempt: serde_json::Value = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "delivery attempt finished" && v["delivery_id"] == id.as_str())
        .expect("an attempt log line");
    assert_eq!(attempt["attempt"], 1);
    assert_eq!(attempt["outcome"], "succeeded");
    assert_eq!(attempt["http_status"], 200);
    assert_eq!(
        attempt["target_origin"],
        format!("http://127.0.0.1:{}", r.port())
    );
    assert!(attempt["duration_ms"].is_u64());
    let requests: Vec<serde_json::Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == "api request")
        .collect();
    // The create is logged; the polls of wait_status (GETs) are not, at the default level.
    assert!(
        requests
            .iter()
            .any(|v| v.to_string().contains("\"route\":\"/v1/deliveries\"")
                && v.to_string().contains("\"method\":\"POST\"")),
        "{requests:?}"
    );
    assert!(
        !requests
            .iter()
            .any(|v| v.to_string().contains("\"method\":\"GET\"")),
        "{requests:?}"
    );
}
