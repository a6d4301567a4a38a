//! Runs `spool-bench all --smoke` (sizes cut further, to stay well inside a CI minute on two
//! cores in a debug build) against the workspace's `spoold`, and checks that every scenario
//! produced sane numbers and the JSON document.

use std::process::Command;

use serde_json::Value;

#[test]
fn smoke_suite_runs_every_scenario() {
    let spoold = spool_testkit::cargo_bin("spoold");
    let dir = tempfile::tempdir().expect("temporary directory");
    let json_out = dir.path().join("results.json");
    let data = dir.path().join("data");
    let output = Command::new(env!("CARGO_BIN_EXE_spool-bench"))
        .arg("all")
        .arg("--smoke")
        .arg("--spoold")
        .arg(&spoold)
        .arg("--data-dir")
        .arg(&data)
        .arg("--json-out")
        .arg(&json_out)
        .args(["--requests", "500", "--e2e-deliveries", "500"])
        .args(["--backlog-pending", "5000", "--backlog-batch", "300"])
        .args(["--idle-pending", "500", "--idle-seconds", "1"])
        .args(["--latency-seconds", "1", "--fsync-writes", "50"])
        .args(["--rate-pending", "1000", "--rate-seconds", "1"])
        .args(["--bulk-failed", "1000"])
        .output()
        .expect("spool-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "spool-bench failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("median"), "no table on stdout:\n{stdout}");

    let doc: Value = serde_json::from_slice(&std::fs::read(&json_out).expect("JSON written"))
        .expect("results are JSON");
    assert_eq!(doc["errors"], serde_json::json!([]), "{doc:#}");
    assert!(doc["machine"]["cpus"].as_u64().unwrap_or(0) > 0, "{doc:#}");
    assert!(doc["spoold_version"].as_str().is_some(), "{doc:#}");
    assert!(doc["plan"]["smoke"].as_bool().unwrap_or(false));

    let median = |scenario: &str, case: &str, metric: &str| -> f64 {
        doc["results"]
            .as_array()
            .expect("results array")
            .iter()
            .find(|e| e["scenario"] == scenario && e["case"] == case && e["metric"] == metric)
            .and_then(|e| e["median"].as_f64())
            .unwrap_or_else(|| panic!("no {scenario} / {case} / {metric} in {doc:#}"))
    };
    let positive = [
        ("fsync", "256 B append + fdatasync", "rate"),
        ("http-ceiling", "c=1", "throughput"),
        ("http-ceiling", "c=64", "throughput"),
        ("enqueue", "c=1", "throughput"),
        ("enqueue", "c=16", "throughput"),
        ("enqueue", "c=64", "throughput"),
        ("enqueue", "c=64", "p99.9 latency"),
        ("e2e", "per-target=8 (default)", "delivery rate"),
        ("e2e", "per-target=1", "delivery rate"),
        ("e2e", "per-target=64", "delivery rate"),
        ("e2e", "per-target=64", "store commits per delivery"),
        ("backlog", "5000 pending", "restart to ready"),
        ("backlog", "5000 pending", "RSS at ready"),
        ("backlog", "5000 pending", "database size"),
        ("backlog", "5000 pending, fresh 300", "delivery rate"),
        ("idle", "500 pending, target refuses", "RSS at end"),
        (
            "idle",
            "500 pending, target refuses",
            "attempts since start",
        ),
        ("latency", "200/s for 1s", "achieved rate"),
        ("bulk", "retry 1000 failed", "bulk retry time"),
        ("bulk", "retry 1000 failed", "retried"),
    ];
    for (scenario, case, metric) in positive {
        let v = median(scenario, case, metric);
        assert!(v > 0.0, "{scenario} / {case} / {metric} = {v}");
    }
    // Every delivery was sent once: the receiver never saw more requests than deliveries.
    for case in ["per-target=8 (default)", "per-target=1", "per-target=64"] {
        assert_eq!(median("e2e", case, "attempts per delivery"), 1.0, "{case}");
    }
    assert!(median("idle", "500 pending, target refuses", "CPU use") >= 0.0);
    // Each operation's CPU and its floor, measured in the same run (tiny counts: the clock
    // ticks may well show zero, so only their presence is checked).
    let cpu = [
        (
            "enqueue",
            "c=64",
            "daemon CPU per request (utime + stime, all threads)",
        ),
        (
            "enqueue",
            "c=64",
            "HTTP floor: CPU per request (bare axum handler, reads the body, answers 201)",
        ),
        (
            "e2e",
            "per-target=8 (default)",
            "daemon CPU per delivery (utime + stime, all threads)",
        ),
        (
            "e2e",
            "per-target=8 (default)",
            "sending floor: CPU per request (bare reqwest loop)",
        ),
        (
            "e2e",
            "per-target=1",
            "floor per delivery (HTTP floor + sending floor)",
        ),
        (
            "tasks",
            "task-concurrency=16",
            "spawning floor: CPU per spawn (posix_spawn + pidfd_open + waitid)",
        ),
        (
            "tasks",
            "task-concurrency=2",
            "spawning floor: reaped children's CPU per spawn (/bin/true)",
        ),
        (
            "tasks",
            "task-concurrency=2",
            "floor per task (HTTP floor + spawning floor)",
        ),
    ];
    for (scenario, case, metric) in cpu {
        let v = median(scenario, case, metric);
        assert!(
            v >= 0.0 && v.is_finite(),
            "{scenario} / {case} / {metric} = {v}"
        );
    }
    assert!(stdout.contains("× floor"), "no × floor column:\n{stdout}");
    // 100/s with a burst of 1: about 100 a second, never much more.
    let rate = median("rate", "100/s, 1000 pending", "delivered rate");
    assert!(
        (50.0..=110.0).contains(&rate),
        "rate-limited target got {rate}/s"
    );
    let p99 = median("latency", "200/s for 1s", "ack → arrival p99");
    assert!(
        p99.is_finite() && p99 < 10_000.0,
        "ack → arrival p99 = {p99} ms"
    );
}
