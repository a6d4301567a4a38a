//! Runs `spool-bench all --smoke --db <url> --hosts 2` (tiny sizes) against the workspace's
//! `spoold` on a PostgreSQL server: enqueue, e2e and the bulk retry run on two hosts sharing a
//! fresh database per run, so does the hand-off (with LISTEN/NOTIFY and without), the
//! scenarios that run on SQLite only are skipped, every row says its backend, and no database
//! is left behind.
//!
//! Skipped (with a message) without `SPOOLD_TEST_PG_URL`; `.ci/run` sets it, so there it is
//! mandatory.

use std::process::{Command, Stdio};

use serde_json::Value;
use spool_testkit::TestDatabase;

#[tokio::test(flavor = "multi_thread")]
async fn smoke_on_postgres_with_two_hosts() {
    // The benchmark connects to this database to create (and drop) one per run beside it.
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let spoold = spool_testkit::cargo_bin("spoold");
    let dir = tempfile::tempdir().expect("temporary directory");
    let json_out = dir.path().join("results.json");
    let child = Command::new(env!("CARGO_BIN_EXE_spool-bench"))
        .arg("all")
        .arg("--smoke")
        .arg("--spoold")
        .arg(&spoold)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("--json-out")
        .arg(&json_out)
        .args(["--db", db.url(), "--hosts", "2"])
        .args(["--requests", "300", "--e2e-deliveries", "300"])
        .args(["--fsync-writes", "20", "--bulk-failed", "500"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spool-bench starts");
    let pid = child.id();
    let output = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("waiter")
        .expect("spool-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "spool-bench failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("e2e (postgres, 2 hosts)"),
        "no labelled rows on stdout:\n{stdout}"
    );

    let doc: Value = serde_json::from_slice(&std::fs::read(&json_out).expect("JSON written"))
        .expect("results are JSON");
    assert_eq!(doc["errors"], serde_json::json!([]), "{doc:#}");
    assert_eq!(doc["backend"]["kind"], "postgres", "{doc:#}");
    assert_eq!(doc["backend"]["hosts"], 2, "{doc:#}");
    let results = doc["results"].as_array().expect("results array");
    let entry = |scenario: &str, case: &str, metric: &str| -> &Value {
        results
            .iter()
            .find(|e| e["scenario"] == scenario && e["case"] == case && e["metric"] == metric)
            .unwrap_or_else(|| panic!("no {scenario} / {case} / {metric} in {doc:#}"))
    };
    let median = |scenario: &str, case: &str, metric: &str| -> f64 {
        entry(scenario, case, metric)["median"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    let enqueue = "enqueue (postgres, 2 hosts)";
    let e2e = "e2e (postgres, 2 hosts)";
    for case in ["c=1", "c=16", "c=64"] {
        let v = median(enqueue, case, "throughput");
        assert!(v > 0.0, "{enqueue} / {case} throughput = {v}");
    }
    for case in ["per-target=8 (default)", "per-target=1", "per-target=64"] {
        let v = median(e2e, case, "delivery rate");
        assert!(v > 0.0, "{e2e} / {case} delivery rate = {v}");
        assert_eq!(median(e2e, case, "attempts per delivery"), 1.0, "{case}");
        let share = median(e2e, case, "least busy host's share of attempts");
        assert!(share > 0.0, "{case}: one host delivered nothing");
        let row = entry(e2e, case, "delivery rate");
        assert_eq!(row["backend"], "postgres", "{row}");
        assert_eq!(row["hosts"], 2, "{row}");
    }
    // The bulk retry of failed deliveries made through the API, every one retried (the run
    // fails otherwise).
    let bulk = "bulk (postgres, 2 hosts)";
    assert!(median(bulk, "retry 500 failed", "retried") > 0.0);
    assert_eq!(
        entry(bulk, "retry 500 failed", "retried")["backend"],
        "postgres"
    );
    // The hand-off, with and without LISTEN/NOTIFY, on two hosts whatever --hosts says.
    let handoff = "handoff (postgres, 2 hosts)";
    for case in ["notify on", "notify off (poll 1s)"] {
        let p50 = median(handoff, case, "hand-off p50");
        assert!(p50.is_finite() && p50 < 10_000.0, "{case}: p50 {p50} ms");
        assert_eq!(entry(handoff, case, "hand-off p50")["hosts"], 2);
    }
    // Baselines run as always; the SQLite-only scenarios are skipped, not run on SQLite.
    assert!(median("fsync", "256 B append + fdatasync", "rate") > 0.0);
    for skipped in ["backlog", "idle", "latency", "rate", "tasks"] {
        assert!(
            !results.iter().any(|e| e["scenario"] == skipped),
            "{skipped} ran under --db"
        );
    }

    let left = db
        .scalar(&format!(
            "SELECT count(*) FROM pg_database WHERE datname LIKE 'spoold\\_bench\\_{pid}\\_%'"
        ))
        .await
        .expect("count databases");
    assert_eq!(left.as_deref(), Some("0"), "databases left behind");
}
