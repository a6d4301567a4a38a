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
    spool_testkit::skip::skipped(
        "promtool is not installed: the metrics and alert rules were not checked with it",
        "Debian package prometheus; SPOOLD_REQUIRE_TOOLS=1 makes this a failure",
    );
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

/// Each attempt's log line and `spoold_attempt_duration_seconds{outcome}` say what the store
/// decided, for every way a delivery ends: its attempts spent (the last retryable failure is
/// `failed`, not `retry`), its deadline passed, a permanent 4xx, a cancel while on the wire
/// (`superseded`), at most once `unknown`, and success after retries. Checked line by line
/// against the attempts the API records.
#[tokio::test(flavor = "multi_thread")]
async fn attempts_are_logged_and_counted_as_the_store_decided() {
    let dir = TempDir::new().expect("temp dir");
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(503));
    let (refusing, failing) = (
        Receiver::start().await.expect("receiver"),
        Receiver::start().await.expect("receiver"),
    );
    refusing.respond_with(Reply::status(400));
    failing.respond_with(Reply::status(500));
    let slow = Receiver::start().await.expect("receiver");
    slow.respond_with(Reply::status(200).delay(std::time::Duration::from_secs(2)));
    let mut daemon = DaemonProcess::start(process_opts(&dir).args(["--request-timeout", "3s"]))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let create = |body: serde_json::Value| {
        let api = &api;
        async move {
            let (status, d) = api.create(body).await.expect("create");
            assert_eq!(status, 201, "{d}");
            id_of(&d)
        }
    };
    let spent = create(json!({"targetUrl": r.url("/spent"), "maxAttempts": 3})).await;
    let deadline = {
        let at = std::time::SystemTime::now() + std::time::Duration::from_millis(400);
        let at = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_millis() as i64;
        create(json!({"targetUrl": r.url("/late"),
                      "expiresAt": spool_proto::units::format_time(at)}))
        .await
    };
    let rejected = create(json!({"targetUrl": refusing.url("/reject"), "maxAttempts": 3})).await;
    let unknown = create(json!({"targetUrl": failing.url("/once"), "mode": "at_most_once"})).await;
    let canceled = create(json!({"targetUrl": slow.url("/cancel")})).await;
    slow.wait_for_requests(1, WAIT).await.expect("on the wire");
    let (status, _) = api.cancel(&canceled).await.expect("cancel");
    assert_eq!(status, 200);
    for (id, want) in [
        (&spent, "failed"),
        (&deadline, "failed"),
        (&rejected, "failed"),
        (&unknown, "unknown"),
        (&canceled, "canceled"),
    ] {
        api.wait_status(id, &[want], WAIT)
            .await
            .unwrap_or_else(|e| panic!("{id}: {e:#}"));
    }
    // The canceled attempt's answer comes 2 s after it left.
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let lines: Vec<serde_json::Value> = daemon
        .stderr()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["message"] == "delivery attempt finished")
        .collect();
    let mut counted = std::collections::HashMap::<String, u64>::new();
    for line in &lines {
        *counted
            .entry(line["outcome"].as_str().unwrap_or_default().to_owned())
            .or_default() += 1;
    }
    for id in [&spent, &deadline, &rejected, &unknown] {
        let (_, tried) = api.attempts(id).await.expect("attempts");
        let recorded: Vec<(u64, String)> = tried["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .map(|a| {
                (
                    a["number"].as_u64().unwrap_or_default(),
                    a["outcome"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let logged: Vec<(u64, String)> = lines
            .iter()
            .filter(|l| l["delivery_id"] == id.as_str())
            .map(|l| {
                (
                    l["attempt"].as_u64().unwrap_or_default(),
                    l["outcome"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        assert_eq!(logged, recorded, "{id}");
    }
    let of = |id: &str| -> Vec<String> {
        lines
            .iter()
            .filter(|l| l["delivery_id"] == id)
            .map(|l| l["outcome"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(of(&spent), ["retry", "retry", "failed"]);
    assert_eq!(of(&unknown), ["unknown"]);
    assert_eq!(of(&canceled), ["superseded"]);
    assert_eq!(of(&rejected), ["failed"]);
    for (outcome, n) in &counted {
        let series = format!("spoold_attempt_duration_seconds_count{{outcome=\"{outcome}\"}}");
        let value = api.metric(&series).await.expect("metrics");
        assert_eq!(value, Some(*n as f64), "{series}");
    }
    daemon.terminate().await.expect("stops");
}

/// Runs spoold with its stderr on a pseudo-terminal until it logs `listening`, and returns what
/// the terminal showed (the daemon is killed and reaped before returning).
fn log_on_a_terminal(no_color: bool) -> String {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    use std::io::Read;

    let dir = TempDir::new().expect("temp dir");
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("a pseudo-terminal");
    grantpt(&master).expect("grantpt");
    unlockpt(&master).expect("unlockpt");
    let name = ptsname(&master, Vec::new()).expect("ptsname");
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(name.to_str().expect("UTF-8 pty name"))
        .expect("open the terminal");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spoold"));
    cmd.args(["--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("spoold.db"))
        .env_remove("SPOOLD_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave));
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    let mut child = cmd.spawn().expect("spoold starts");
    // The command holds the terminal's other end: dropped, the daemon holds the only one.
    drop(cmd);
    // The reader ends when the terminal closes (EIO once the daemon is gone).
    let (tx, rx) = std::sync::mpsc::channel();
    let mut master = std::fs::File::from(master);
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + WAIT;
    let mut shown = Vec::new();
    while !String::from_utf8_lossy(&shown).contains("listening") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(bytes) => shown.extend(bytes),
            Err(_) => break,
        }
    }
    child.kill().expect("kill spoold");
    child.wait().expect("reap spoold");
    drop(rx);
    reader.join().expect("reader");
    String::from_utf8_lossy(&shown).into_owned()
}

#[test]
fn logs_on_a_terminal_are_text_coloured_unless_no_color() {
    let coloured = log_on_a_terminal(false);
    let line = coloured
        .lines()
        .find(|l| l.contains("listening"))
        .unwrap_or_else(|| panic!("no listening line in {coloured:?}"));
    assert!(
        !line.trim_start().starts_with('{'),
        "text, not JSON: {line:?}"
    );
    assert!(line.contains("\u{1b}["), "coloured: {line:?}");
    assert!(line.contains("INFO"), "{line:?}");

    let plain = log_on_a_terminal(true);
    let line = plain
        .lines()
        .find(|l| l.contains("listening"))
        .unwrap_or_else(|| panic!("no listening line in {plain:?}"));
    assert!(!line.contains('\u{1b}'), "NO_COLOR: {line:?}");
    assert!(
        line.contains(" INFO ") && line.contains("addr="),
        "{line:?}"
    );
}
