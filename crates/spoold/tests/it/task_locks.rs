//! Quotas and resource locks end to end: real scripts record when they start and end, and the
//! records show that no limit was ever exceeded and no two holders of a lock overlapped.

use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::tasks::{get, id, post, submit, wait_task, Setup};

/// A script that records `start NAME NANOS` and `end NAME NANOS` around a short sleep.
const SPAN: &str = r#"echo "start $1 $(date +%s%N)" >> "$LOG"
sleep "${2:-0.3}"
echo "end $1 $(date +%s%N)" >> "$LOG""#;

/// (name, start, end) of every span in the log.
fn spans(setup: &Setup, log: &str) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(setup.dir.join(log)).unwrap_or_default();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [kind, name, at] = parts[..] else {
            panic!("bad log line {line:?}")
        };
        let at: u128 = at.parse().expect("nanoseconds");
        match kind {
            "start" => {
                starts.insert(name.to_owned(), at);
            }
            _ => out.push((name.to_owned(), starts[name], at)),
        }
    }
    out
}

/// The most spans running at one instant.
fn peak(spans: &[(String, u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = spans
        .iter()
        .flat_map(|(_, s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // At equal times an end comes before a start.
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    most as usize
}

fn overlap(a: &(String, u128, u128), b: &(String, u128, u128)) -> bool {
    a.1 < b.2 && b.1 < a.2
}

/// Write `setup`'s configuration with `extra` task types appended; its path.
pub(crate) fn config_with(setup: &Setup, extra: &str) -> String {
    let path = setup.config();
    let mut text = std::fs::read_to_string(&path).expect("config");
    text.push_str(extra);
    std::fs::write(&path, text).expect("config");
    path.display().to_string()
}

/// A daemon with `setup`'s types and `extra` ones.
pub(crate) async fn boot_with(setup: &Setup, extra: &str, flags: &[&str]) -> crate::InProcess {
    let config = config_with(setup, extra);
    let mut all = vec!["--config", config.as_str()];
    all.extend_from_slice(flags);
    crate::InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        crate::Targets::Loopback,
        &all,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quota_and_a_lock_are_never_exceeded() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script("span.sh", SPAN);
    let extra = format!(
        r#"
[tasks.quota]
command = ["{span}", "q{{n}}"]
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "q{{n}}"
concurrency = 2
env = {{ LOG = "{log}" }}

[tasks.deploy]
command = ["{span}", "{{env}}{{n}}", "0.4"]
params.env = {{ pattern = "prod|dev" }}
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "{{env}}{{n}}"
locks = ["env:{{env}}"]
env = {{ LOG = "{deploys}" }}
"#,
        span = setup.path("span.sh"),
        log = setup.path("quota.log"),
        deploys = setup.path("deploy.log"),
    );
    let d = boot_with(&setup, &extra, &["--task-concurrency", "8"]).await;
    let mut ids = Vec::new();
    // Three times the quota.
    for n in 0..6 {
        let (status, t) = submit(
            &d.api,
            json!({"type": "quota", "params": {"n": n.to_string()}}),
        )
        .await;
        assert_eq!(status, 201, "{t}");
        ids.push(id(&t));
    }
    for (env, n) in [("prod", 1), ("prod", 2), ("dev", 1)] {
        let (status, t) = submit(
            &d.api,
            json!({"type": "deploy", "params": {"env": env, "n": n.to_string()}}),
        )
        .await;
        assert_eq!(status, 201, "{t}");
        ids.push(id(&t));
    }
    // While they run, the lock shows its holder and who waits.
    let mut saw_waiter = false;
    for _ in 0..50 {
        let locks = get(&d.api, "/v1/locks").await;
        if let Some(prod) = locks["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .find(|l| l["name"] == "env:prod")
        {
            if prod["waiting"].as_array().is_some_and(|w| w.len() == 1) {
                assert_eq!(prod["taskStatus"], "running", "{prod}");
                assert_eq!(prod["taskType"], "deploy");
                saw_waiter = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(saw_waiter, "the second prod deploy was never seen waiting");
    for task in &ids {
        wait_task(&d.api, task, &["succeeded"]).await;
    }
    let quota = spans(&setup, "quota.log");
    assert_eq!(quota.len(), 6, "none lost: {quota:?}");
    assert_eq!(
        peak(&quota),
        2,
        "at most the quota ran at once, and it was used: {quota:?}"
    );
    let deploys = spans(&setup, "deploy.log");
    let find = |name: &str| deploys.iter().find(|s| s.0 == name).expect("ran").clone();
    let (prod1, prod2, dev1) = (find("prod1"), find("prod2"), find("dev1"));
    assert!(
        !overlap(&prod1, &prod2),
        "two holders of env:prod overlapped: {deploys:?}"
    );
    assert!(
        overlap(&dev1, &prod1) || overlap(&dev1, &prod2),
        "different envs do not wait for each other: {deploys:?}"
    );
    assert!(get(&d.api, "/v1/locks").await["locks"]
        .as_array()
        .expect("locks")
        .is_empty());
    let waits = d
        .api
        .metric("spoold_task_waits_total{task_type=\"quota\",reason=\"quota\"}")
        .await
        .expect("metrics");
    assert!(waits.is_some_and(|n| n >= 1.0), "{waits:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_is_kept_through_backoff_and_a_waiter_can_time_out() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script("span.sh", SPAN);
    // Fails (75) its first time, then succeeds.
    setup.script(
        "twice.sh",
        r#"if [ ! -e "$MARK" ]; then
  : > "$MARK"; echo "start first $(date +%s%N)" >> "$LOG"; echo "end first $(date +%s%N)" >> "$LOG"
  exit 75
fi
echo "start second $(date +%s%N)" >> "$LOG"
echo "end second $(date +%s%N)" >> "$LOG""#,
    );
    let extra = format!(
        r#"
[tasks.holder]
command = ["{twice}"]
locks = ["res:x"]
hold_locks_between_attempts = true
max_attempts = 2
backoff = {{ base = "700ms", cap = "700ms" }}
env = {{ LOG = "{log}", MARK = "{mark}" }}

[tasks.waiter]
command = ["{span}", "waiter", "0"]
locks = ["res:x"]
env = {{ LOG = "{log}" }}

[tasks.blocker]
command = ["{span}", "blocker", "2"]
locks = ["res:y"]
timeout = "10s"
env = {{ LOG = "{other}" }}

[tasks.queued]
command = ["{span}", "queued", "0"]
locks = ["res:y"]
queue_timeout = "500ms"
env = {{ LOG = "{other}" }}
"#,
        twice = setup.path("twice.sh"),
        span = setup.path("span.sh"),
        log = setup.path("hold.log"),
        mark = setup.path("mark"),
        other = setup.path("other.log"),
    );
    let d = boot_with(&setup, &extra, &[]).await;
    let (_, holder) = submit(&d.api, json!({"type": "holder", "idempotencyKey": "h"})).await;
    // Its first attempt failed: pending for the backoff, still holding res:x.
    let mut held: Option<Value> = None;
    for _ in 0..100 {
        let t = get(&d.api, &format!("/v1/tasks/{}", id(&holder))).await;
        if t["status"] == "pending" && t["attempt"] == 1 {
            let locks = get(&d.api, "/v1/locks").await;
            held = locks["locks"].as_array().and_then(|l| l.first().cloned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let held = held.expect("the holder's first attempt failed and it kept its lock");
    assert_eq!(
        (&held["name"], &held["taskId"], &held["taskStatus"]),
        (&json!("res:x"), &holder["id"], &json!("pending")),
        "{held}"
    );
    let (_, waiter) = submit(&d.api, json!({"type": "waiter", "idempotencyKey": "w"})).await;
    wait_task(&d.api, &id(&holder), &["succeeded"]).await;
    wait_task(&d.api, &id(&waiter), &["succeeded"]).await;
    let log = spans(&setup, "hold.log");
    let second = log
        .iter()
        .find(|s| s.0 == "second")
        .expect("second attempt");
    let waited = log.iter().find(|s| s.0 == "waiter").expect("waiter ran");
    assert!(
        waited.1 >= second.2,
        "the waiter ran before the holder's retry, during its backoff: {log:?}"
    );

    // A task waiting for a lock still has a queue timeout.
    let (_, blocker) = submit(&d.api, json!({"type": "blocker", "idempotencyKey": "b"})).await;
    wait_task(&d.api, &id(&blocker), &["running"]).await;
    let (_, queued) = submit(&d.api, json!({"type": "queued", "idempotencyKey": "q"})).await;
    let t = wait_task(&d.api, &id(&queued), &["timed_out", "succeeded"]).await;
    assert_eq!(
        (&t["status"], &t["errorCode"]),
        (&json!("timed_out"), &json!("queue_timeout")),
        "{t}"
    );
    assert_eq!(
        get(&d.api, &format!("/v1/tasks/{}", id(&blocker))).await["status"],
        "running",
        "the lock was still held when the waiter timed out"
    );
    let (status, _) = post(&d.api, &format!("/v1/tasks/{}/cancel", id(&blocker))).await;
    assert_eq!(status, 200);
    wait_task(&d.api, &id(&blocker), &["canceled"]).await;
}
