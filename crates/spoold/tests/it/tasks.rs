//! Tasks end to end: a real daemon with a configuration file declaring task types, real shell
//! scripts in a temporary directory, real process groups. Every process a test starts is
//! checked through `/proc` to be gone at the end.

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use spool_testkit::Api;
use tempfile::TempDir;

use crate::{InProcess, Targets, WAIT};

/// Scripts and the configuration that declares them, in `dir`.
pub(crate) struct Setup {
    pub(crate) dir: PathBuf,
}

impl Setup {
    pub(crate) fn new(dir: &Path) -> Setup {
        let setup = Setup {
            dir: dir.to_path_buf(),
        };
        setup.script(
            "record.sh",
            r#"printf '%s\n' "$SPOOLD_TASK_ID $SPOOLD_ATTEMPT $SPOOLD_TASK_TYPE" >> "$RUNS"
for arg in "$@"; do printf '[%s]' "$arg" >> "$RUNS"; done; echo >> "$RUNS"
echo "recorded" > "$SPOOLD_RESULT_FILE""#,
        );
        setup.script(
            "flaky.sh",
            r#"n=$(cat "$COUNTER.$SPOOLD_TASK_ID" 2>/dev/null || echo 0); n=$((n + 1))
echo "$n" > "$COUNTER.$SPOOLD_TASK_ID"
[ "$n" -lt 3 ] && { echo "try $n failed" >&2; exit 75; }
echo "done after $n attempts" > "$SPOOLD_RESULT_FILE""#,
        );
        setup.script("exit.sh", r#"exit "$1""#);
        // Leaves a background child in its group and a grandchild that escapes it with setsid,
        // writes all their pids down, then hangs.
        setup.script(
            "hang.sh",
            r#"sleep 1000 & echo "$!" >> "$PIDS"
setsid sh -c 'echo "$$" >> "$PIDS"; exec sleep 1000' &
echo "$$" >> "$PIDS"
sleep 1000"#,
        );
        setup
    }

    pub(crate) fn script(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .expect("chmod script");
    }

    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// The configuration file declaring every test type.
    pub(crate) fn config(&self) -> PathBuf {
        let d = |name: &str| self.path(name);
        let text = format!(
            r#"
[tasks.record]
command = ["{record}", "--db", "{{database}}", "--note={{note}}"]
params.database = {{ pattern = "[a-z0-9_]{{1,64}}" }}
params.note = {{ pattern = ".{{0,100}}", default = "" }}
idempotency_key = "record:{{database}}"
env = {{ RUNS = "{runs}" }}

[tasks.flaky]
command = ["{flaky}"]
max_attempts = 3
backoff = {{ base = "50ms", cap = "200ms" }}
env = {{ COUNTER = "{counter}" }}

[tasks.exit]
command = ["{exit}", "{{code}}"]
params.code = {{ pattern = "[0-9]{{1,3}}" }}
max_attempts = 3
backoff = {{ base = "50ms", cap = "100ms" }}

[tasks.hang]
command = ["{hang}"]
timeout = "1s"
kill_grace = "300ms"
queue_timeout = "2s"
env = {{ PIDS = "{pids}" }}
"#,
            record = d("record.sh"),
            runs = d("runs.log"),
            flaky = d("flaky.sh"),
            counter = d("counter"),
            exit = d("exit.sh"),
            hang = d("hang.sh"),
            pids = d("pids"),
        );
        let path = self.dir.join("spoold.toml");
        std::fs::write(&path, text).expect("write config");
        path
    }

    /// Live processes whose environment names this setup's directory (every script's
    /// `PIDS`/`RUNS`/`COUNTER`), found through /proc: what a test started, whatever became of
    /// its bookkeeping.
    pub(crate) fn processes(&self) -> Vec<i32> {
        let needle = self.dir.display().to_string();
        let me = std::process::id() as i32;
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| *pid != me && alive(*pid))
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|kv| String::from_utf8_lossy(kv).contains(&needle))
                })
            })
            .collect()
    }

    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("runs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Pids the hanging script wrote down.
    pub(crate) fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for Setup {
    /// Nothing a test started may outlive it: what is still running (after a short grace for
    /// processes being ended) is killed, and, unless the test already failed, fails it.
    fn drop(&mut self) {
        let mut left = self.processes();
        for _ in 0..100 {
            if left.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
            left = self.processes();
        }
        kill_all(&left);
        if !std::thread::panicking() {
            panic!("processes left running by the test: {left:?}");
        }
    }
}

/// A daemon on a fresh database with `setup`'s task types.
pub(crate) async fn boot(setup: &Setup, extra: &[&str]) -> InProcess {
    let config = setup.config().display().to_string();
    let mut flags = vec!["--config", config.as_str()];
    flags.extend_from_slice(extra);
    InProcess::boot_in(TempDir::new().expect("temp dir"), Targets::Loopback, &flags).await
}

pub(crate) async fn submit(api: &Api, body: Value) -> (u16, Value) {
    let (status, _, bytes) = api
        .request(
            Method::POST,
            "/v1/tasks",
            Some(body.to_string().into_bytes()),
        )
        .await
        .expect("submit");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) async fn get(api: &Api, path: &str) -> Value {
    let (status, _, bytes) = api.request(Method::GET, path, None).await.expect("get");
    assert_eq!(status, 200, "GET {path}");
    serde_json::from_slice(&bytes).expect("JSON")
}

pub(crate) async fn post(api: &Api, path: &str) -> (u16, Value) {
    let (status, _, bytes) = api.request(Method::POST, path, None).await.expect("post");
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Poll the task until its status is one of `want`.
pub(crate) async fn wait_task(api: &Api, id: &str, want: &[&str]) -> Value {
    let what = format!("{want:?}");
    wait_task_until(api, id, &what, |t| {
        t["status"].as_str().is_some_and(|s| want.contains(&s))
    })
    .await
}

/// Poll the task until `done` holds for it, or fail after [`WAIT`] naming `what`.
pub(crate) async fn wait_task_until(
    api: &Api,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let t = get(api, &format!("/v1/tasks/{id}")).await;
        if done(&t) {
            return t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "task never reached {what}: {t}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) fn id(v: &Value) -> String {
    v["id"].as_str().expect("task id").to_owned()
}

/// Whether `pid` is a live process (a zombie is not).
pub(crate) fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|s| s != "Z" && s != "X")
        })
        .unwrap_or(false)
}

/// Wait (bounded) until none of `pids` is alive; the ones still alive.
pub(crate) async fn wait_gone(pids: &[i32]) -> Vec<i32> {
    wait_gone_within(pids, Duration::from_secs(2)).await
}

/// Like [`wait_gone`], waiting up to `bound`.
pub(crate) async fn wait_gone_within(pids: &[i32], bound: Duration) -> Vec<i32> {
    let rounds = bound.as_millis() / 20;
    for _ in 0..rounds {
        if pids.iter().all(|p| !alive(*p)) {
            return Vec::new();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pids.iter().copied().filter(|p| alive(*p)).collect()
}

/// End whatever a failed test left alive, by pid.
pub(crate) fn kill_all(pids: &[i32]) {
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn duplicate_submissions_make_one_task_and_one_run() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    let body = json!({"type": "record", "params": {"database": "db1"}});
    let (status, first) = submit(api, body.clone()).await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["idempotencyKey"], "record:db1");
    let (status, again) = submit(api, body.clone()).await;
    assert_eq!((status, id(&again)), (200, id(&first)));
    let (status, err) = submit(
        api,
        json!({"type": "record", "params": {"database": "db1", "note": "other"}}),
    )
    .await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("idempotency_conflict")),
        "{err}"
    );
    let done = wait_task(api, &id(&first), &["succeeded"]).await;
    assert_eq!(done["resultSummary"], "recorded", "{done}");
    // A succeeded task is returned with its result; it does not run again.
    let (status, again) = submit(api, body).await;
    assert_eq!((status, &again["status"]), (200, &json!("succeeded")));

    let mut racers = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let api = api.clone();
        racers.spawn(async move {
            submit(
                &api,
                json!({"type": "record", "params": {"database": "db2"}}),
            )
            .await
        });
    }
    let mut ids = std::collections::HashSet::new();
    let mut created = 0;
    while let Some(r) = racers.join_next().await {
        let (status, task) = r.expect("racer");
        assert!(matches!(status, 200 | 201), "{task}");
        created += usize::from(status == 201);
        ids.insert(id(&task));
    }
    assert_eq!((created, ids.len()), (1, 1));
    let only = ids.into_iter().next().expect("one id");
    wait_task(api, &only, &["succeeded"]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let runs = setup.runs();
    assert_eq!(
        runs.iter().filter(|l| l.starts_with(&only)).count(),
        1,
        "one execution: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn parameters_reach_argv_literally_and_never_a_shell() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    let cases = [
        (json!({"type": "nope"}), "unknown_task_type"),
        (json!({"params": {}}), "unknown_task_type"),
        (json!({"type": "record", "params": {}}), "missing_param"),
        (
            json!({"type": "record", "params": {"database": "db1", "x": "1"}}),
            "unknown_param",
        ),
        (
            json!({"type": "record", "params": {"database": "db1; rm -rf /"}}),
            "invalid_params",
        ),
        (
            json!({"type": "record", "params": {"database": "$(id)"}}),
            "invalid_params",
        ),
        (
            json!({"type": "record", "params": {"database": 7}}),
            "invalid_params",
        ),
        (
            json!({"type": "record", "command": "/bin/sh"}),
            "invalid_request",
        ),
        (
            json!({"type": "record", "params": {"database": "a"}, "idempotencyKey": "k"}),
            "invalid_request",
        ),
    ];
    for (body, code) in cases {
        let (status, err) = submit(api, body.clone()).await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (400, Some(code)),
            "{body}: {err}"
        );
    }
    // Metacharacters the pattern allows are one argv element, exactly as given.
    let note = r#"x; touch /tmp/pwned $(id) `id` 'q' "d" | & > <"#;
    let (status, task) = submit(
        api,
        json!({"type": "record", "params": {"database": "db3", "note": note}}),
    )
    .await;
    assert_eq!(status, 201, "{task}");
    wait_task(api, &id(&task), &["succeeded"]).await;
    let runs = setup.runs();
    assert!(
        runs.contains(&format!("[--db][db3][--note={note}]")),
        "{runs:?}"
    );
    assert!(!Path::new("/tmp/pwned").exists());
    let types = get(api, "/v1/task-types").await;
    let record = types["types"]
        .as_array()
        .expect("types")
        .iter()
        .find(|t| t["name"] == "record")
        .cloned()
        .expect("record type");
    assert_eq!(record["env"], json!(["RUNS"]), "names only: {record}");
    assert_eq!(record["idempotencyKey"], "record:{database}");
}

/// The refusals a newcomer meets first say what to do: an unknown type lists the declared ones
/// (a close one first) and where to see them; a key given to a type that derives its own names
/// the template and the flag; retry and cancel of a task that ended say what they apply to.
#[tokio::test(flavor = "multi_thread")]
async fn refusals_name_the_declared_types_the_key_template_and_what_applies() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    let declared = "declared: exit, flaky, hang, record (spoolctl task types, GET /v1/task-types)";
    for (body, code, message) in [
        (
            json!({"type": "recrod"}),
            "unknown_task_type",
            format!("task type \"recrod\" is not declared (did you mean \"record\"?); {declared}"),
        ),
        (
            json!({"type": "backup"}),
            "unknown_task_type",
            format!("task type \"backup\" is not declared; {declared}"),
        ),
        (
            json!({"params": {}}),
            "unknown_task_type",
            format!("type is required; {declared}"),
        ),
        (
            json!({"type": "record", "params": {"database": "a"}, "idempotencyKey": "k"}),
            "invalid_request",
            "task type record derives its idempotency key from its parameters \
             (idempotency_key = \"record:{database}\" in its declaration), so a submission with \
             the same parameters is already the same task: leave out idempotencyKey (spoolctl \
             task submit: --idempotency-key)"
                .to_owned(),
        ),
    ] {
        let (status, err) = submit(api, body.clone()).await;
        assert_eq!(status, 400, "{body}: {err}");
        assert_eq!(err["error"]["code"], code, "{body}: {err}");
        assert_eq!(err["error"]["message"], message.as_str(), "{body}");
    }

    let (status, task) = submit(
        api,
        json!({"type": "record", "params": {"database": "done"}}),
    )
    .await;
    assert_eq!(status, 201, "{task}");
    let task = id(&task);
    wait_task(api, &task, &["succeeded"]).await;
    for (action, applies_to) in [
        (
            "retry",
            "failed, timed_out, interrupted and manual_review tasks",
        ),
        ("cancel", "pending, running and manual_review tasks"),
    ] {
        let (status, err) = post(api, &format!("/v1/tasks/{task}/{action}")).await;
        assert_eq!(
            (status, err["error"]["code"].as_str()),
            (409, Some("invalid_transition")),
            "{action}: {err}"
        );
        assert_eq!(
            err["error"]["message"],
            format!("this task already succeeded; {action} applies only to {applies_to}").as_str()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn transient_failures_are_retried_until_success() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    let (_, task) = submit(api, json!({"type": "flaky", "idempotencyKey": "f-1"})).await;
    let done = wait_task(api, &id(&task), &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(done["attempt"], 3);
    assert_eq!(done["resultSummary"], "done after 3 attempts");
    let attempts = get(api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    let outcomes: Vec<_> = attempts["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["outcome"].clone(),
                a["exitCode"].clone(),
                a["errorCode"].clone(),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            (json!("failed"), json!(75), json!("transient")),
            (json!("failed"), json!(75), json!("transient")),
            (json!("succeeded"), json!(0), Value::Null),
        ]
    );
    assert!(attempts["attempts"][0]["executorId"]
        .as_str()
        .is_some_and(|e| e.contains(':')));
    let metric = |name: &'static str| async move { api.metric(name).await.expect("metrics") };
    assert_eq!(
        metric("spoold_task_retries_total{task_type=\"flaky\"}").await,
        Some(2.0)
    );
    assert_eq!(
        metric(
            "spoold_tasks_finished_total{task_type=\"flaky\",status=\"succeeded\",error_code=\"none\"}"
        )
        .await,
        Some(1.0)
    );
    assert_eq!(
        metric("spoold_tasks{status=\"succeeded\"}").await,
        Some(1.0)
    );
    assert_eq!(
        metric("spoold_task_submissions_total{task_type=\"flaky\"}").await,
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_are_classified() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    // (exit code, attempts, error code): script errors are retried to max_attempts, invalid
    // params and permission denied never.
    for (code, attempts, error_code) in [
        ("1", 3, "script_error"),
        ("64", 1, "invalid_params"),
        ("77", 1, "permission_denied"),
    ] {
        let (_, task) = submit(
            api,
            json!({"type": "exit", "params": {"code": code}, "idempotencyKey": code}),
        )
        .await;
        let done = wait_task(api, &id(&task), &["failed"]).await;
        assert_eq!(done["attempt"], attempts, "{code}: {done}");
        assert_eq!(done["errorCode"], error_code, "{code}: {done}");
        assert_eq!(done["retryable"], false, "{done}");
        tokio::time::sleep(Duration::from_millis(150)).await;
        let again = get(api, &format!("/v1/tasks/{}", id(&task))).await;
        assert_eq!(again["attempt"], attempts, "no further attempts: {again}");
    }
    let log = get(api, "/v1/tasks?status=failed&type=exit").await;
    assert_eq!(log["count"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_ends_the_whole_group_and_what_escaped_it() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let api = &daemon.api;
    let (_, task) = submit(api, json!({"type": "hang", "idempotencyKey": "h-1"})).await;
    let done = wait_task(api, &id(&task), &["timed_out", "failed", "succeeded"]).await;
    let pids = setup.pids();
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert_eq!(done["status"], "timed_out", "{done}");
    assert_eq!(
        pids.len(),
        3,
        "leader, background child, setsid grandchild: {pids:?}"
    );
    assert!(left.is_empty(), "still alive after the timeout: {left:?}");
    let attempts = get(api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    assert_eq!(
        attempts["attempts"].as_array().map(Vec::len),
        Some(1),
        "no retry"
    );
    assert!(attempts["attempts"][0]["durationMs"].as_i64() >= Some(1000));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_pending_and_running_and_queue_timeout() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    // One slot: the first hanging task holds it, the next waits in the queue.
    let daemon = boot(&setup, &["--task-concurrency", "1"]).await;
    let api = &daemon.api;
    let (_, running) = submit(api, json!({"type": "hang", "idempotencyKey": "r"})).await;
    wait_task(api, &id(&running), &["running"]).await;
    let (_, waiting) = submit(api, json!({"type": "record", "params": {"database": "w"}})).await;
    let (status, canceled) = post(api, &format!("/v1/tasks/{}/cancel", id(&waiting))).await;
    assert_eq!(
        (status, &canceled["status"]),
        (200, &json!("canceled")),
        "{canceled}"
    );
    let (_, queued) = submit(api, json!({"type": "hang", "idempotencyKey": "q"})).await;
    // Give the script time to write its pids, then cancel it while it runs.
    for _ in 0..100 {
        if setup.pids().len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (status, asked) = post(api, &format!("/v1/tasks/{}/cancel", id(&running))).await;
    assert_eq!(
        (status, &asked["cancelRequested"]),
        (200, &json!(true)),
        "{asked}"
    );
    let ended = wait_task(api, &id(&running), &["canceled", "timed_out"]).await;
    assert_eq!(ended["status"], "canceled", "{ended}");
    let pids = setup.pids();
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert!(left.is_empty(), "still alive after cancel: {left:?}");
    // The queued one started when the slot freed, or timed out in the queue: either way it
    // never outlives its limits.
    let q = wait_task(api, &id(&queued), &["timed_out"]).await;
    assert!(
        matches!(q["errorCode"].as_str(), Some("queue_timeout" | "timed_out")),
        "{q}"
    );
    let left = wait_gone(&setup.pids()).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
    let (status, err) = post(api, &format!("/v1/tasks/{}/cancel", id(&running))).await;
    assert_eq!(
        (status, &err["error"]["code"]),
        (409, &json!("invalid_transition"))
    );
    let log = get(api, &format!("/v1/tasks/{}/transitions", id(&running))).await;
    let reasons: Vec<_> = log["transitions"]
        .as_array()
        .expect("log")
        .iter()
        .map(|t| t["reason"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(reasons, ["submitted", "started", "canceled"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_queue_timeout_ends_a_task_that_never_started() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &["--task-concurrency", "1"]).await;
    let api = &daemon.api;
    // One slot, each attempt holding it for its 1 s timeout and the group's end; queue_timeout
    // is 2 s. Submitted back to back (not once the first runs: under load that wait ate the
    // margin, and the third started 1.997 s after its submission), the second starts about 1 s
    // after its submission and the third could start no sooner than 2 s after the first did,
    // later than its own submission: it times out in the queue.
    let (_, first) = submit(api, json!({"type": "hang", "idempotencyKey": "a"})).await;
    let (_, second) = submit(api, json!({"type": "hang", "idempotencyKey": "b"})).await;
    let (_, third) = submit(api, json!({"type": "hang", "idempotencyKey": "c"})).await;
    wait_task(api, &id(&first), &["timed_out"]).await;
    let t = wait_task(api, &id(&third), &["timed_out"]).await;
    assert_eq!(t["errorCode"], "queue_timeout", "{t}");
    assert_eq!(t["attempt"], 0, "{t}");
    wait_task(api, &id(&second), &["timed_out"]).await;
    let left = wait_gone(&setup.pids()).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn configuration_errors_stop_the_daemon_naming_file_type_and_key() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("spoold.toml");
    std::fs::write(&path, "[tasks.backup]\ncommand = [\"backup.sh\"]\n").expect("write");
    let argv = || -> Vec<String> {
        ["spoold", "--config", path.to_str().expect("utf-8")]
            .map(String::from)
            .to_vec()
    };
    let err = spoold::config::load(argv()).expect_err("a relative program is refused");
    assert!(
        err.contains("spoold.toml: [tasks.backup] command: the program"),
        "{err}"
    );
    // A value no argument can hold is refused at start, not at the first submission.
    std::fs::write(
        &path,
        "[tasks.backup]\ncommand = [\"/bin/echo\", \"{note}\"]\n\
         params.note = { pattern = \"[a-z]*\", max_length = 200000 }\n",
    )
    .expect("write");
    let err = spoold::config::load(argv()).expect_err("an unreachable max_length");
    assert!(
        err.contains(
            "spoold.toml: [tasks.backup] params.note.max_length: must be 1–131071 bytes (the \
             longest argument Linux passes to a program)"
        ),
        "{err}"
    );
    std::fs::write(&path, "listen = \"127.0.0.1:0\"\nnope = 1\n").expect("write");
    let err = spoold::config::load(argv()).expect_err("unknown key");
    assert!(err.contains("unknown key \"nope\""), "{err}");
    // A typo gets a suggestion, in one readable line.
    std::fs::write(&path, "lisen = \"127.0.0.1:0\"\n").expect("write");
    let err = spoold::config::load(argv()).expect_err("a typo");
    assert_eq!(
        err,
        format!(
            "{}: unknown key \"lisen\" (did you mean \"listen\"? a daemon setting is a flag's \
             long name, e.g. listen, db; task types go in [tasks.NAME])",
            path.display()
        )
    );
    // A setting after a table belongs to the table: said, with TOML's own caret kept.
    std::fs::write(
        &path,
        "[tasks.backup]\ncommand = [\"/bin/true\"]\nlisten = \"127.0.0.1:0\"\n",
    )
    .expect("write");
    let err = spoold::config::load(argv()).expect_err("a setting inside a table");
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() > 3, "{err}");
    assert!(lines.contains(&"  | ^^^^^^"), "{err}");
    assert_eq!(
        lines.last().copied(),
        Some(
            "`listen` is a daemon setting, but keys after the [tasks.backup] header belong to \
             that table: put daemon settings at the top of the file, before the first table"
        ),
        "{err}"
    );
    std::fs::write(&path, "[tasks.backup\n").expect("write");
    let err = spoold::config::load(argv()).expect_err("a TOML error");
    let caret = |l: &str| l.starts_with("  |") && l.trim_end().ends_with('^');
    assert!(err.lines().any(caret), "{err}");
}

/// A cgroup v2 directory for this test, removed on drop.
struct TestCgroup(PathBuf);

impl TestCgroup {
    fn create() -> anyhow::Result<TestCgroup> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        let mount = info
            .lines()
            .find_map(|line| {
                let (left, right) = line.split_once(" - ")?;
                (right.split_whitespace().next()? == "cgroup2")
                    .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
            })
            .ok_or_else(|| anyhow::anyhow!("no cgroup v2 hierarchy is mounted"))?;
        let dir = mount.join(format!("spoold-test-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
        if !dir.join("cgroup.kill").exists() {
            let _ = std::fs::remove_dir(&dir);
            anyhow::bail!("the kernel has no cgroup.kill");
        }
        Ok(TestCgroup(dir))
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// With a cgroup: a descendant that leaves the process group and clears its environment is
/// ended with its attempt (its supervisor's descendant, and in its cgroup), and the attempt's
/// cgroup is removed after.
#[tokio::test(flavor = "multi_thread")]
async fn a_cgroup_ends_what_left_the_group_and_cleared_its_tag() {
    let Some(cgroup) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_MOUNT", TestCgroup::create())
    else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "escape.sh",
        r#"env -i /usr/bin/setsid /bin/sh -c 'echo "$$" >> "$1"; exec sleep 1000' sh "$PIDS" &
echo "$$" >> "$PIDS"
sleep 1000"#,
    );
    let config = setup.config();
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[tasks.escape]\ncommand = [\"{}\"]\ntimeout = \"1s\"\nkill_grace = \"300ms\"\nenv = {{ PIDS = \"{}\" }}\n",
        setup.path("escape.sh"),
        setup.path("pids")
    ));
    std::fs::write(&config, text).expect("config");
    let config = config.display().to_string();
    let cgroup_dir = cgroup.0.display().to_string();
    let daemon = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--config", &config, "--task-cgroup", &cgroup_dir],
    )
    .await;
    let api = &daemon.api;
    let (_, task) = submit(api, json!({"type": "escape", "idempotencyKey": "e"})).await;
    let done = wait_task(api, &id(&task), &["timed_out", "failed", "succeeded"]).await;
    let pids = setup.pids();
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert_eq!(done["status"], "timed_out", "{done}");
    assert_eq!(pids.len(), 2, "the leader and the escapee: {pids:?}");
    assert!(left.is_empty(), "still alive: {left:?}");
    // The attempt's own cgroup is gone with it.
    let children: Vec<_> = std::fs::read_dir(&cgroup.0)
        .expect("read cgroup")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name())
        .collect();
    assert!(children.is_empty(), "{children:?}");
}

/// kill -9 while tasks run: each attempt's supervisor ends it at once, with no daemon running;
/// after the restart no task is left `running`. Each type's `on_interrupt` decides: `review`
/// (the default) → `manual_review`, `retry` → run again.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_leaves_no_task_running() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = setup.config();
    let mut text = std::fs::read_to_string(&config).expect("config");
    // A type known to be safe to re-run: after a crash it simply runs again.
    text.push_str(&format!(
        "\n[tasks.rerun]\ncommand = [\"{}\"]\ntimeout = \"60s\"\non_interrupt = \"retry\"\n\
         env = {{ PIDS = \"{}\" }}\n",
        setup.path("hang.sh"),
        setup.path("pids")
    ));
    text = text.replace(
        "[tasks.hang]\ncommand = [",
        "[tasks.hang]\ntimeout = \"60s\"\ncommand = [",
    );
    text = text.replace("timeout = \"1s\"\nkill_grace", "kill_grace");
    std::fs::write(&config, text).expect("config");
    let data = TempDir::new().expect("data dir");
    let opts = || crate::process_opts(&data).args(["--config", config.to_str().expect("utf-8")]);
    let mut daemon = spool_testkit::DaemonProcess::start(opts())
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, hung) = submit(&api, json!({"type": "hang", "idempotencyKey": "crash"})).await;
    let (_, rerun) = submit(&api, json!({"type": "rerun", "idempotencyKey": "crash"})).await;
    wait_task(&api, &id(&hung), &["running"]).await;
    wait_task(&api, &id(&rerun), &["running"]).await;
    // Three processes per attempt: the script, its background sleep, a setsid'ed sleep.
    for _ in 0..500 {
        if setup.pids().len() >= 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let orphans = setup.pids();
    assert!(orphans.len() >= 6, "{orphans:?}");
    daemon.kill9();
    // Their supervisors end them: no daemon is needed for that.
    let left = wait_gone(&orphans).await;
    kill_all(&left);
    assert!(
        left.is_empty(),
        "the crash left an attempt running: {left:?}"
    );

    let daemon = spool_testkit::DaemonProcess::start(opts())
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let t = wait_task(&api, &id(&hung), &["manual_review"]).await;
    assert_eq!(t["errorCode"], "daemon_restart", "{t}");

    let log = get(&api, &format!("/v1/tasks/{}/transitions", id(&hung))).await;
    let reasons: Vec<_> = log["transitions"]
        .as_array()
        .expect("log")
        .iter()
        .map(|t| (t["to"].clone(), t["reason"].clone()))
        .collect();
    assert_eq!(
        reasons,
        [
            (json!("pending"), json!("submitted")),
            (json!("running"), json!("started")),
            (json!("interrupted"), json!("daemon_restart")),
            (json!("manual_review"), json!("on_interrupt")),
        ]
    );
    // The re-runnable one runs again by itself (its first attempt is taken over first): cancel
    // it (it hangs).
    wait_task_until(&api, &id(&rerun), "its second attempt", |t| {
        t["status"] == "running" && t["attempt"] == 2
    })
    .await;
    // Both crashed attempts were ended by their supervisors, who recorded it (the re-run starts
    // only after its old one is gone).
    let recovered = api
        .metric("spoold_task_recovered_processes_total")
        .await
        .expect("metrics");
    assert!(recovered >= Some(6.0), "{recovered:?}");
    let (status, _) = post(&api, &format!("/v1/tasks/{}/cancel", id(&rerun))).await;
    assert_eq!(status, 200);
    wait_task(&api, &id(&rerun), &["canceled"]).await;
    // A person decides for the other: run it again (it hangs again, so cancel it then).
    let (status, retried) = post(&api, &format!("/v1/tasks/{}/retry", id(&hung))).await;
    assert_eq!(
        (status, &retried["status"]),
        (200, &json!("pending")),
        "{retried}"
    );
    wait_task(&api, &id(&hung), &["running"]).await;
    let (status, _) = post(&api, &format!("/v1/tasks/{}/cancel", id(&hung))).await;
    assert_eq!(status, 200);
    wait_task(&api, &id(&hung), &["canceled"]).await;
    // The escapee of the last attempt (a setsid'ed sleep, out of its group) is ended after the
    // attempt is recorded canceled; on a loaded CI machine that once took more than 2 s.
    let left = wait_gone_within(&setup.processes(), Duration::from_secs(10)).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
}

/// An attempt that exits 0 but leaves an escapee behind (setsid, out of its group) does not
/// leave it running: the escapee is re-parented to the daemon and ended with the attempt.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_clean_exit_leaves_behind_is_ended() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "leave.sh",
        r#"setsid sh -c 'echo "$$" >> "$PIDS"; exec sleep 1000' &
sleep 0.2
echo "$$" >> "$PIDS""#,
    );
    let config = setup.config();
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        "\n[tasks.leave]\ncommand = [\"{}\"]\nkill_grace = \"300ms\"\nenv = {{ PIDS = \"{}\" }}\n",
        setup.path("leave.sh"),
        setup.path("pids")
    ));
    std::fs::write(&config, text).expect("config");
    let config = config.display().to_string();
    let daemon = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--config", &config, "--task-cgroup", "off"],
    )
    .await;
    let (_, task) = submit(&daemon.api, json!({"type": "leave", "idempotencyKey": "l"})).await;
    let done = wait_task(&daemon.api, &id(&task), &["succeeded", "failed"]).await;
    let pids = setup.pids();
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert_eq!(done["status"], "succeeded", "{done}");
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(left.is_empty(), "left running after a clean exit: {left:?}");
}

/// The article's executor interruption: kill -9 the daemon while a script keeps writing to a
/// file. The attempt's supervisor ends it at once (the file stops growing while no daemon
/// runs); after the restart the task is `interrupted`, then follows `on_interrupt`.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_attempt_stops_writing_after_the_restart() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "writer.sh",
        r#"echo $$ > "$GROW.pid"
while :; do echo x >> "$GROW"; sleep 0.02; done"#,
    );
    let config = crate::task_locks::config_with(
        &setup,
        &format!(
            "\n[tasks.writer]\ncommand = [\"{}\"]\ntimeout = \"60s\"\nenv = {{ GROW = \"{}\" }}\n",
            setup.path("writer.sh"),
            setup.path("grow")
        ),
    );
    let data = TempDir::new().expect("data dir");
    let opts = || crate::process_opts(&data).args(["--config", config.as_str()]);
    let mut daemon = spool_testkit::DaemonProcess::start(opts())
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "writer", "idempotencyKey": "w"})).await;
    wait_task(&api, &id(&task), &["running"]).await;
    let size = || std::fs::metadata(dir.path().join("grow")).map_or(0, |m| m.len());
    for _ in 0..200 {
        if size() > 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pgid: i32 = std::fs::read_to_string(dir.path().join("grow.pid"))
        .expect("the script's pid")
        .trim()
        .parse()
        .expect("a pid");
    daemon.kill9();
    let left = wait_gone(&[pgid]).await;
    kill_all(&left);
    assert!(left.is_empty(), "the attempt outlived its daemon");
    let stopped = size();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(size(), stopped, "the file still grows while no daemon runs");

    let daemon = spool_testkit::DaemonProcess::start(opts())
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    assert_eq!(t["errorCode"], "daemon_restart", "{t}");
    assert_eq!(size(), stopped, "the old attempt ran again");
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    assert_eq!(attempts["attempts"][0]["outcome"], "interrupted");
}

/// A NUL byte cannot be passed in argv, and a control character in a parameter is a mistake
/// or an attack far more often than a value: both are refused at submission (400
/// `invalid_params`), even by a pattern like `[^/]*` that matches them, unless the pattern
/// names control characters itself.
#[tokio::test(flavor = "multi_thread")]
async fn control_characters_in_parameters_are_refused_at_submission() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = crate::task_locks::config_with(
        &setup,
        &format!(
            "\n[tasks.named]\ncommand = [\"{}\", \"{{name}}\"]\nparams.name = {{ pattern = \"[^/]*\" }}\n",
            setup.path("exit.sh")
        ),
    );
    let daemon = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--config", &config],
    )
    .await;
    for bad in ["a\u{0}b", "a\u{1b}[31mred", "line\nbreak"] {
        let (status, body) = submit(
            &daemon.api,
            json!({"type": "named", "params": {"name": bad}}),
        )
        .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (400, &json!("invalid_params")),
            "{bad:?}: {body}"
        );
    }
    let (status, body) = submit(
        &daemon.api,
        json!({"type": "named", "params": {"name": "0"}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

/// Unicode's invisible characters — format characters (U+200B, U+FEFF, the bidi control
/// U+202E) and line and paragraph separators (U+2028) — pass permissive patterns such as `.*`
/// or `[^/]+`, and make a value read as another: refused (400 `invalid_params`, naming the
/// parameter and the character) unless the pattern names them itself.
#[tokio::test(flavor = "multi_thread")]
async fn invisible_characters_in_parameters_are_refused_at_submission() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let extra = format!(
        "\n[tasks.loose]\ncommand = [\"{exit}\", \"0\", \"{{any}}\", \"{{path}}\"]\n\
         params.any = {{ pattern = '.*', default = \"\" }}\n\
         params.path = {{ pattern = '[^/]+', default = \"x\" }}\n\
         \n[tasks.named]\ncommand = [\"{exit}\", \"0\", \"{{word}}\"]\n\
         params.word = {{ pattern = '[a-z\\x{{200B}}]+' }}\n",
        exit = setup.path("exit.sh")
    );
    let daemon = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let api = &daemon.api;
    for (bad, code_point) in [
        ("a\u{2028}b", "U+2028"),
        ("evil\u{202E}txt.sh", "U+202E"),
        ("zero\u{200B}width", "U+200B"),
        ("\u{FEFF}bom", "U+FEFF"),
    ] {
        for param in ["any", "path"] {
            let (status, body) =
                submit(api, json!({"type": "loose", "params": {param: bad}})).await;
            assert_eq!(
                (status, &body["error"]["code"]),
                (400, &json!("invalid_params")),
                "{param} {bad:?}: {body}"
            );
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(&format!(
                    "parameter {param} must not contain the invisible character {code_point}"
                )),
                "{message}"
            );
        }
    }
    // A pattern that names one lets it through; other characters beyond ASCII are values.
    let (status, body) = submit(
        api,
        json!({"type": "named", "params": {"word": "zero\u{200B}width"}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = submit(
        api,
        json!({"type": "loose", "params": {"any": "café 日本 🙂", "path": "naïve"}}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn task_keys_refuse_what_parameters_refuse() {
    task_keys(None).await;
}

/// On PostgreSQL a NUL in a key was a 500 `persistence_failed` (its `text` cannot hold one)
/// where SQLite stored it: both refuse it now, before the store.
#[tokio::test(flavor = "multi_thread")]
async fn task_keys_refuse_what_parameters_refuse_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    task_keys(Some(&db)).await;
}

/// `idempotencyKey` is refused (400 `invalid_request`, naming the field) when empty, and when
/// it holds a control character (a NUL, a newline, an escape) or an invisible one, wherever.
async fn task_keys(pg: Option<&spool_testkit::TestDatabase>) {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot_on(&setup, "", pg).await;
    let api = &daemon.api;
    let cases = [
        ("", "idempotencyKey must not be empty"),
        ("   ", "idempotencyKey must not be empty"),
        ("a\u{0}b", "idempotencyKey must not contain a NUL byte"),
        (
            "line\nbreak",
            "idempotencyKey must not contain the control character '\\n'",
        ),
        (
            "trailing\n",
            "idempotencyKey must not contain the control character '\\n'",
        ),
        (
            "tab\there",
            "idempotencyKey must not contain the control character '\\t'",
        ),
        (
            "esc\u{1b}[2J",
            "idempotencyKey must not contain the control character '\\u{1b}'",
        ),
        (
            "a\u{2028}b",
            "idempotencyKey must not contain the invisible character U+2028",
        ),
        (
            "evil\u{202E}",
            "idempotencyKey must not contain the invisible character U+202E",
        ),
        (
            "zero\u{200B}w",
            "idempotencyKey must not contain the invisible character U+200B",
        ),
        (
            "\u{FEFF}bom",
            "idempotencyKey must not contain the invisible character U+FEFF",
        ),
    ];
    for (key, want) in cases {
        let (status, body) = submit(
            api,
            json!({"type": "exit", "params": {"code": "0"}, "idempotencyKey": key}),
        )
        .await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{key:?}: {body}"
        );
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(want), "{key:?}: {message}");
    }
    let (status, body) = submit(
        api,
        json!({"type": "exit", "params": {"code": "0"}, "idempotencyKey": " café-日本 "}),
    )
    .await;
    assert_eq!(
        (status, &body["idempotencyKey"]),
        (201, &json!("café-日本")),
        "{body}"
    );
}

/// JSON allows a name twice in an object, and serde_json keeps the last: a task must not run
/// with a value its client did not mean. Refused, naming the parameter.
#[tokio::test(flavor = "multi_thread")]
async fn a_parameter_given_twice_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let daemon = boot(&setup, &[]).await;
    let (status, _, bytes) = daemon
        .api
        .request(
            Method::POST,
            "/v1/tasks",
            Some(
                br#"{"type":"record","params":{"database":"prod","note":"n","database":"test"}}"#
                    .to_vec(),
            ),
        )
        .await
        .expect("submit");
    let body: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_request")),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(r#"params: parameter "database" is given twice"#),
        "{message}"
    );
    let page = get(&daemon.api, "/v1/tasks").await;
    assert_eq!(page["count"], 0, "nothing was stored: {page}");
}

/// The body of a submission may hold every value its type accepts — its limit follows the
/// declared types: 64 KiB and room for the values of the type that takes the most, each at its
/// `max_length` however JSON escapes it — and one over it is 413 `payload_too_large`, naming
/// the limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_submission_can_reach_every_max_length_and_a_larger_one_is_413() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let extra = format!(
        "\n[tasks.long]\ncommand = [\"{}\", \"0\", \"{{text}}\"]\n\
         params.text = {{ pattern = '[a-z\\n]*', max_length = 100000 }}\n",
        setup.path("exit.sh")
    );
    let daemon = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let api = &daemon.api;
    // At its max_length, in the longest escapes JSON has: 600 KB of body.
    let text = "\n".repeat(100_000);
    let body = json!({"type": "long", "params": {"text": text}}).to_string();
    let escaped = body.replace("\\n", "\\u000a");
    assert!(escaped.len() > 600_000, "{}", escaped.len());
    let (status, _, bytes) = api
        .request(Method::POST, "/v1/tasks", Some(escaped.into_bytes()))
        .await
        .expect("submit");
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&bytes));
    let t: Value = serde_json::from_slice(&bytes).expect("JSON");
    wait_task(api, &id(&t), &["succeeded"]).await;

    // Of the declared types, `long` takes the most: 100000 bytes, 6 bytes each at most.
    let limit = 64 * 1024 + 6 * 100_000;
    let (status, _, bytes) = api
        .request(Method::POST, "/v1/tasks", Some(vec![b' '; limit + 1]))
        .await
        .expect("submit");
    let body: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    assert_eq!(
        body["error"]["message"],
        format!("request body too large: at most {limit} bytes")
    );
}

async fn bulk(api: &Api, body: Value) -> (u16, Value) {
    let (status, _, bytes) = api
        .request(
            Method::POST,
            "/v1/tasks/bulk",
            Some(body.to_string().into_bytes()),
        )
        .await
        .expect("bulk");
    (status, serde_json::from_slice(&bytes).expect("JSON"))
}

#[tokio::test(flavor = "multi_thread")]
async fn bulk_retry_and_cancel_change_the_tasks_a_filter_matches() {
    bulk_retry_and_cancel_of_tasks(None).await;
}

/// The same on PostgreSQL, where a page's actions are written a few at a time.
#[tokio::test(flavor = "multi_thread")]
async fn bulk_retry_and_cancel_change_the_tasks_a_filter_matches_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    bulk_retry_and_cancel_of_tasks(Some(&db)).await;
}

async fn bulk_retry_and_cancel_of_tasks(pg: Option<&spool_testkit::TestDatabase>) {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let once = format!(
        "\n[tasks.once]\ncommand = [\"{}\", \"1\"]\noperator_retry = false\n",
        setup.path("exit.sh")
    );
    let daemon = boot_on(&setup, &once, pg).await;
    let api = &daemon.api;
    // Two failed tasks that may be retried, one whose type says no, one running, one waiting.
    let mut failed = Vec::new();
    for key in ["a", "b"] {
        let (_, t) = submit(
            api,
            json!({"type": "exit", "params": {"code": "64"}, "idempotencyKey": key}),
        )
        .await;
        failed.push(id(&t));
    }
    let (_, no_retry) = submit(api, json!({"type": "once"})).await;
    for task in failed.iter().chain([&id(&no_retry)]) {
        wait_task(api, task, &["failed"]).await;
    }
    let (_, running) = submit(api, json!({"type": "hang", "idempotencyKey": "h"})).await;
    wait_task(api, &id(&running), &["running"]).await;
    let (_, waiting) = submit(
        api,
        json!({"type": "record", "params": {"database": "later"},
               "notBefore": "2099-01-01T00:00:00Z"}),
    )
    .await;

    for body in [
        json!({"filter": {"status": "failed"}}),
        json!({"action": "retry", "filter": {}}),
        json!({"action": "retry", "filter": {"type": null}}),
        json!({"action": "retry", "filter": {"createdBefore": "soon"}}),
    ] {
        let (status, answer) = bulk(api, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("invalid_request")),
            "{body}: {answer}"
        );
    }

    // Counted: the failed ones of a type that allows it; the other is skipped.
    let (status, counted) = bulk(
        api,
        json!({"action": "retry", "filter": {"status": "failed"}, "dryRun": true}),
    )
    .await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(
        counted,
        json!({"action": "retry", "dryRun": true, "matched": 3, "changed": 2, "skipped": 1,
               "ids": failed})
    );
    let (_, retried) = bulk(api, json!({"action": "retry", "filter": {"type": "exit"}})).await;
    assert_eq!(
        (&retried["changed"], &retried["skipped"]),
        (&json!(2), &json!(0))
    );
    for task in &failed {
        let log = get(api, &format!("/v1/tasks/{task}/transitions")).await;
        assert!(
            log["transitions"]
                .as_array()
                .expect("log")
                .iter()
                .any(|t| t["reason"] == "retried"),
            "{log}"
        );
        wait_task(api, task, &["failed"]).await;
    }

    // Cancel what is not over: the running one is asked to stop, the waiting one at once.
    let (_, canceled) = bulk(
        api,
        json!({"action": "cancel", "filter": {"createdAfter": "2000-01-01T00:00:00Z"}}),
    )
    .await;
    assert_eq!(
        (
            &canceled["matched"],
            &canceled["changed"],
            &canceled["skipped"]
        ),
        (&json!(5), &json!(2), &json!(3)),
        "{canceled}"
    );
    assert_eq!(
        wait_task(api, &id(&waiting), &["canceled"]).await["status"],
        "canceled"
    );
    let ended = wait_task(api, &id(&running), &["canceled", "timed_out"]).await;
    assert_eq!(ended["status"], "canceled", "{ended}");
    let left = wait_gone(&setup.pids()).await;
    kill_all(&left);
    assert!(
        left.is_empty(),
        "still alive after the bulk cancel: {left:?}"
    );
}

/// A script that replaces its result file with a FIFO, a directory (with a file in it), or a
/// symbolic link to a file only the daemon may read: none is read (the open does not block,
/// does not follow the link), the attempt ends as it exited, nothing of it is left in
/// `task-results/`, the next task runs, and a graceful shutdown is as quick as ever.
#[tokio::test(flavor = "multi_thread")]
async fn a_result_file_that_is_not_a_regular_file_is_not_read() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "fifo.sh",
        r#"rm -f "$SPOOLD_RESULT_FILE"; mkfifo "$SPOOLD_RESULT_FILE""#,
    );
    setup.script("link.sh", r#"ln -sf "$PRIVATE" "$SPOOLD_RESULT_FILE""#);
    setup.script(
        "dir.sh",
        r#"rm -f "$SPOOLD_RESULT_FILE"; mkdir "$SPOOLD_RESULT_FILE"; echo x > "$SPOOLD_RESULT_FILE/inside""#,
    );
    std::fs::write(setup.dir.join("private"), "only-the-daemon-may-read-this").expect("file");
    let config = crate::task_locks::config_with(
        &setup,
        &format!(
            "\n[tasks.fifo]\ncommand = [\"{}\"]\n\n[tasks.link]\ncommand = [\"{}\"]\n\
             env = {{ PRIVATE = \"{}\" }}\n\n[tasks.dir]\ncommand = [\"{}\"]\n",
            setup.path("fifo.sh"),
            setup.path("link.sh"),
            setup.path("private"),
            setup.path("dir.sh"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let mut daemon = spool_testkit::DaemonProcess::start(crate::process_opts(&data).args([
        "--config",
        config.as_str(),
        "--shutdown-timeout",
        "3s",
    ]))
    .await
    .expect("daemon");
    let api = Api::new(daemon.base_url());
    for (n, kind) in ["fifo", "link", "dir", "fifo"].into_iter().enumerate() {
        let key = format!("{kind}-{n}");
        let (_, t) = submit(&api, json!({"type": kind, "idempotencyKey": key})).await;
        let t = wait_task(&api, &id(&t), &["succeeded", "failed"]).await;
        assert_eq!(t["status"], "succeeded", "{t}");
        assert!(t.get("resultSummary").is_none_or(Value::is_null), "{t}");
    }
    assert!(
        daemon.stderr().contains("was not read"),
        "{}",
        daemon.stderr()
    );
    let left: Vec<_> = std::fs::read_dir(data.path().join("data/task-results"))
        .expect("task-results")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in task-results: {left:?}");
    assert!(
        setup.dir.join("private").exists(),
        "a link's target is not removed"
    );
    let started = std::time::Instant::now();
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// A program that cannot be started (gone since the daemon started, say) fails its attempt as
/// `spawn_failed`, naming the program and why, and is not retried; the next task runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_program_that_cannot_start_fails_its_attempt() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let missing = setup.path("gone.sh");
    let config = crate::task_locks::config_with(
        &setup,
        &format!("\n[tasks.gone]\ncommand = [\"{missing}\"]\nmax_attempts = 3\n"),
    );
    let daemon = InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &["--config", &config],
    )
    .await;
    let (_, t) = submit(&daemon.api, json!({"type": "gone", "idempotencyKey": "g"})).await;
    let t = wait_task(&daemon.api, &id(&t), &["failed"]).await;
    assert_eq!(
        (&t["errorCode"], &t["attempt"]),
        (&json!("spawn_failed"), &json!(1)),
        "{t}"
    );
    let error = t["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("cannot start {missing}")) && error.contains("No such file"),
        "{t}"
    );
}

/// A daemon with `setup`'s types and `extra` ones, on SQLite or on the PostgreSQL database `pg`.
async fn boot_on(
    setup: &Setup,
    extra: &str,
    pg: Option<&spool_testkit::TestDatabase>,
) -> InProcess {
    InProcess::boot_on(
        TempDir::new().expect("temp dir"),
        Targets::Loopback,
        &[
            "--config",
            crate::task_locks::config_with(setup, extra).as_str(),
        ],
        pg,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nul_in_the_result_file_ends_the_attempt_and_frees_its_lock() {
    nul_in_the_result_file(None).await;
}

/// PostgreSQL's `text` cannot hold a NUL: before the store kept one as U+FFFD, the attempt's
/// record failed there, and the task stayed `running` with its lock until a restart — the next
/// task of the lock never started.
#[tokio::test(flavor = "multi_thread")]
async fn a_nul_in_the_result_file_ends_the_attempt_and_frees_its_lock_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    nul_in_the_result_file(Some(&db)).await;
}

async fn nul_in_the_result_file(pg: Option<&spool_testkit::TestDatabase>) {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "nul.sh",
        r#"printf 'a\0b' > "$SPOOLD_RESULT_FILE"; printf 'out\0put\n'; printf 'err\0or\n' >&2"#,
    );
    let extra = format!(
        "\n[tasks.nul]\ncommand = [\"{}\"]\nlocks = [\"shared\"]\n",
        setup.path("nul.sh")
    );
    let daemon = boot_on(&setup, &extra, pg).await;
    let api = &daemon.api;
    let mut tasks = Vec::new();
    for key in ["first", "second"] {
        let (status, t) = submit(api, json!({"type": "nul", "idempotencyKey": key})).await;
        assert_eq!(status, 201, "{t}");
        tasks.push(id(&t));
    }
    for task in &tasks {
        let t = wait_task(api, task, &["succeeded", "failed"]).await;
        assert_eq!(
            (&t["status"], &t["resultSummary"]),
            (&json!("succeeded"), &json!("a\u{FFFD}b")),
            "{t}"
        );
    }
    let (status, _, output) = api
        .request(Method::GET, &format!("/v1/tasks/{}/output", tasks[0]), None)
        .await
        .expect("output");
    assert_eq!(status, 200);
    // The output log is a file of bytes: kept as the script wrote it.
    assert!(
        output.windows(8).any(|w| w == b"out\0put\n"),
        "{:?}",
        String::from_utf8_lossy(&output)
    );
}
