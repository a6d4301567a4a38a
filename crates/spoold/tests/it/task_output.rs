//! Task output end to end, against a daemon process: a script prints 50 MiB with a secret from
//! `secret_env` split across two writes and a password the `redact` patterns catch. What is kept
//! is within the limit, with the marker; the secret is nowhere — output file, API, result
//! summary, the daemon's log, the database file; and the daemon's memory does not grow with
//! the output.

use std::time::Duration;

use serde_json::json;
use spool_testkit::{Api, DaemonProcess};
use tempfile::TempDir;

use crate::task_locks::config_with;
use crate::tasks::{get, id, submit, wait_task, Setup};

const SECRET: &str = "s3cr3t-t0ken-abcdefgh-XYZ";
const LIMIT: usize = 1 << 20;

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread")]
async fn output_is_bounded_and_redacted_everywhere() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    std::fs::write(setup.dir.join("token"), format!("{SECRET}\n")).expect("secret file");
    setup.script(
        "chatty.sh",
        r#"first=${TOKEN%????????}
rest=${TOKEN#"$first"}
printf 'token=%s' "$first"; sleep 0.05; printf '%s\n' "$rest"
echo "PASSWORD=hunter2 and password=swordfish"
yes 'a line of output that goes on and on, 0123456789' | head -c 52428800
printf 'closing token=%s' "$first"; sleep 0.05; printf '%s\n' "$rest"
echo "summary with $TOKEN" > "$SPOOLD_RESULT_FILE""#,
    );
    let extra = format!(
        r#"
[tasks.chatty]
command = ["{script}"]
output_limit = "1MiB"
secret_env.TOKEN = {{ file = "{token}" }}
redact = ["(?i)password=\\S+"]
"#,
        script = setup.path("chatty.sh"),
        token = setup.path("token"),
    );
    let config = config_with(&setup, &extra);
    let data = TempDir::new().expect("data dir");
    let mut daemon = DaemonProcess::start(crate::process_opts(&data).args(["--config", &config]))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let before = rss(daemon.pid());
    let (status, task) = submit(&api, json!({"type": "chatty", "idempotencyKey": "c"})).await;
    assert_eq!(status, 201, "{task}");
    let task_id = id(&task);
    let mut peak = before;
    loop {
        peak = peak.max(rss(daemon.pid()));
        let t = get(&api, &format!("/v1/tasks/{task_id}")).await;
        if t["status"] != "pending" && t["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let t = wait_task(&api, &task_id, &["succeeded"]).await;
    assert!(
        peak < before + (32 << 20),
        "the daemon's memory grew with the output: {before} → {peak} bytes"
    );
    assert_eq!(t["resultSummary"], "summary with [REDACTED]", "{t}");

    let attempts = get(&api, &format!("/v1/tasks/{task_id}/attempts")).await;
    let a = &attempts["attempts"][0];
    assert_eq!(a["outputTruncated"], true, "{a}");
    assert!(
        a["outputBytes"].as_u64().is_some_and(|n| n > 50 << 20),
        "{a}"
    );
    assert!(a["redactions"].as_u64().is_some_and(|n| n >= 4), "{a}");

    let (status, headers, body) = api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{task_id}/output"),
            None,
        )
        .await
        .expect("output");
    assert_eq!(status, 200);
    assert!(headers[http::header::CONTENT_TYPE]
        .to_str()
        .is_ok_and(|t| t.starts_with("text/plain")));
    assert!(body.len() <= LIMIT + 100, "{} bytes kept", body.len());
    assert!(
        body.starts_with(b"token=[REDACTED]\n[REDACTED] and [REDACTED]\n"),
        "{:?}",
        String::from_utf8_lossy(&body[..body.len().min(200)])
    );
    assert!(body.ends_with(b"closing token=[REDACTED]\n"));
    assert!(contains(&body, "bytes of output omitted]"));
    for leaked in [SECRET, "hunter2", "swordfish"] {
        assert!(!contains(&body, leaked), "{leaked} in the API's output");
    }

    // Nowhere on disk either, nor in the daemon's log.
    let file = data
        .path()
        .join(format!("data/task-output/{task_id}-1.log"));
    let meta = std::fs::metadata(&file).expect("output file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let stored = std::fs::read(&file).expect("output file");
    assert_eq!(stored, body.to_vec());
    let mut db = std::fs::read(data.path().join("data/spoold.db")).expect("db");
    db.extend(std::fs::read(data.path().join("data/spoold.db-wal")).unwrap_or_default());
    let metrics = api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics")
        .2;
    daemon.terminate().await.expect("stop");
    let log = daemon.stderr();
    for (what, bytes) in [
        ("database", &db[..]),
        ("log", log.as_bytes()),
        ("metrics", &metrics[..]),
    ] {
        assert!(!contains(bytes, SECRET), "the secret is in the {what}");
    }
    assert!(contains(
        &metrics,
        "spoold_task_redactions_total{task_type=\"chatty\"}"
    ));
}

/// `follow=true` streams a running attempt's output as it is printed, and ends with it.
#[tokio::test(flavor = "multi_thread")]
async fn following_streams_a_running_attempt() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "ticks.sh",
        r#"for i in 1 2 3 4 5; do echo "tick $i"; sleep 0.1; done
echo "done" >&2"#,
    );
    let extra = format!(
        "\n[tasks.ticks]\ncommand = [\"{}\"]\n",
        setup.path("ticks.sh")
    );
    let d = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let (_, task) = submit(&d.api, json!({"type": "ticks", "idempotencyKey": "t"})).await;
    let task_id = id(&task);
    wait_task(&d.api, &task_id, &["running"]).await;
    let started = std::time::Instant::now();
    let (status, _, body) = d
        .api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{task_id}/output?follow=true"),
            None,
        )
        .await
        .expect("follow");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "the stream ended before the attempt did"
    );
    let text = String::from_utf8_lossy(&body);
    assert!(text.ends_with("tick 5\ndone\n"), "{text:?}");
    wait_task(&d.api, &task_id, &["succeeded"]).await;
    // Afterwards the stored log is the same output; an attempt that does not exist has none.
    let (_, _, stored) = d
        .api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{task_id}/output?attempt=1"),
            None,
        )
        .await
        .expect("output");
    assert_eq!(
        String::from_utf8_lossy(&stored),
        "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ndone\n"
    );
    let (status, _, body) = d
        .api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{task_id}/output?attempt=2"),
            None,
        )
        .await
        .expect("output");
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&body).contains("output_not_found"));
}

/// The text of an attempt's output as the API serves it.
async fn output_of(api: &Api, task: &str) -> String {
    let (status, _, body) = api
        .request(http::Method::GET, &format!("/v1/tasks/{task}/output"), None)
        .await
        .expect("output");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    String::from_utf8_lossy(&body).into_owned()
}

/// A secret printed partly to stdout and partly to stderr, with no line end in between, is
/// found in the merged output; a result summary is redacted before it is cut, so a secret
/// cut by the 4 KiB limit leaves no start of itself; a cut inside a UTF-8 character keeps the
/// summary (up to the character); the result file is private while the attempt runs.
#[tokio::test(flavor = "multi_thread")]
async fn secrets_split_across_streams_or_cut_by_the_summary_limit_never_show() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    std::fs::write(setup.dir.join("token"), format!("{SECRET}\n")).expect("secret file");
    setup.script(
        "split.sh",
        r#"first=${TOKEN%????????}
rest=${TOKEN#"$first"}
printf 'out=%s' "$first"; sleep 0.05; printf '%s' "$rest" >&2; sleep 0.05
case "$1" in
  cut) printf '%04090d%s' 0 "$TOKEN" > "$SPOOLD_RESULT_FILE" ;;
  utf8) printf '%04095d\303\251 and more' 0 > "$SPOOLD_RESULT_FILE" ;;
  mode) echo "mode $(stat -c %a "$SPOOLD_RESULT_FILE")" > "$SPOOLD_RESULT_FILE" ;;
esac"#,
    );
    let extra = format!(
        r#"
[tasks.split]
command = ["{script}", "{{case}}"]
params.case = {{ pattern = "cut|utf8|mode" }}
idempotency_key = "{{case}}"
secret_env.TOKEN = {{ file = "{token}" }}
"#,
        script = setup.path("split.sh"),
        token = setup.path("token"),
    );
    let daemon = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let mut done = std::collections::BTreeMap::new();
    for case in ["cut", "utf8", "mode"] {
        let (_, t) = submit(
            &daemon.api,
            json!({"type": "split", "params": {"case": case}}),
        )
        .await;
        let t = wait_task(&daemon.api, &id(&t), &["succeeded", "failed"]).await;
        assert_eq!(t["status"], "succeeded", "{t}");
        done.insert(case, t);
    }
    let prefix = &SECRET[..4];
    for (case, t) in &done {
        let out = output_of(&daemon.api, &id(t)).await;
        assert!(
            !out.contains(prefix),
            "{case}: the secret in the output: {out:?}"
        );
        assert!(out.contains("[REDACTED]"), "{case}: {out:?}");
        let summary = t["resultSummary"].as_str().unwrap_or_default();
        assert!(
            !summary.contains(prefix),
            "{case}: the secret in the summary"
        );
    }
    let cut = done["cut"]["resultSummary"].as_str().expect("a summary");
    assert!(cut.len() <= 4096, "{}", cut.len());
    assert!(cut.starts_with("0000"), "{cut}");
    let utf8 = done["utf8"]["resultSummary"].as_str().expect("a summary");
    assert_eq!(utf8.len(), 4095, "cut before the character it would split");
    assert_eq!(done["mode"]["resultSummary"], "mode 600");
}

/// What the book says of output (docs/src/tasks.md), true: what a script prints during its kill grace (its
/// SIGTERM handler's clean-up) is kept; an attempt that printed nothing has an empty output
/// (200), an attempt that does not exist has none (404 `output_not_found`).
#[tokio::test(flavor = "multi_thread")]
async fn output_during_the_grace_is_kept_and_no_output_is_empty() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "graceful.sh",
        r#"trap 'echo "cleaning up after SIGTERM"; exit 143' TERM
echo "working"
while :; do sleep 0.05; done"#,
    );
    setup.script("quiet.sh", "exit 0");
    let extra = format!(
        "\n[tasks.graceful]\ncommand = [\"{}\"]\ntimeout = \"500ms\"\nkill_grace = \"2s\"\n\
         \n[tasks.quiet]\ncommand = [\"{}\"]\n",
        setup.path("graceful.sh"),
        setup.path("quiet.sh"),
    );
    let daemon = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let (_, g) = submit(
        &daemon.api,
        json!({"type": "graceful", "idempotencyKey": "g"}),
    )
    .await;
    let (_, q) = submit(&daemon.api, json!({"type": "quiet", "idempotencyKey": "q"})).await;
    let g = wait_task(&daemon.api, &id(&g), &["timed_out"]).await;
    wait_task(&daemon.api, &id(&q), &["succeeded"]).await;
    // (The shell also says its `sleep` was terminated.)
    let out = output_of(&daemon.api, &id(&g)).await;
    assert!(
        out.starts_with("working\n") && out.contains("cleaning up after SIGTERM\n"),
        "{out:?}"
    );
    assert_eq!(output_of(&daemon.api, &id(&q)).await, "");
    let (status, _, body) = daemon
        .api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{}/output?attempt=2", id(&q)),
            None,
        )
        .await
        .expect("output");
    let body: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("output_not_found"))
    );
}

/// stdout and stderr are one pipe, as a terminal shows `2>&1`: the output is kept in the exact
/// order the script wrote it (a line one stream leaves unfinished is continued by the other's
/// output), with or without `redact` patterns.
#[tokio::test(flavor = "multi_thread")]
async fn output_keeps_the_order_it_was_written_in() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "interleave.sh",
        r#"printf 'out: one'; sleep 0.05
printf 'err: A\n' >&2; sleep 0.05
printf ' two\n'; sleep 0.05
printf 'err: unfinished' >&2; sleep 0.05
printf 'out: unfinished'"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.plain]\ncommand = [\"{script}\"]\n\
             \n[tasks.patterned]\ncommand = [\"{script}\"]\nredact = [\"password=\\\\S+\"]\n",
            script = setup.path("interleave.sh")
        ),
    );
    let daemon = crate::InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        crate::Targets::Loopback,
        &["--config", &config],
    )
    .await;
    let mut out = Vec::new();
    for kind in ["plain", "patterned"] {
        let (_, t) = submit(&daemon.api, json!({"type": kind, "idempotencyKey": kind})).await;
        wait_task(&daemon.api, &id(&t), &["succeeded"]).await;
        out.push(output_of(&daemon.api, &id(&t)).await);
    }
    let written = "out: oneerr: A\n two\nerr: unfinishedout: unfinished";
    assert_eq!(out, [written, written]);
}

/// The issue's reproduction of a secret rotated by the order two pipes were read in: a script
/// prints a secret's first bytes to stderr and the rest to stdout back to back (and in three
/// pieces: stderr, stdout, stderr), with and without `redact` patterns, many times. stdout and
/// stderr are one pipe, so the bytes arrive in the order they were written and the secret
/// whole: no piece of it of 4 bytes or more is in any output (API, log file) nor in the
/// database.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_split_across_stdout_and_stderr_never_shows_in_pieces() {
    const ROTATED: &str = "b7NcH4sJd6FgQ1aEZq8vXw3Kp9LmT2rY";
    const RUNS: usize = 12;
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    std::fs::write(setup.dir.join("token"), ROTATED).expect("token");
    setup.script(
        "two.sh",
        r#"printf 'a %s' "${TOKEN%????????????????}" >&2
printf '%s b\n' "${TOKEN#????????????????}""#,
    );
    setup.script(
        "three.sh",
        r#"head=${TOKEN%??????????????????????}
rest=${TOKEN#??????????}
printf 'a %s' "$head" >&2
printf '%s' "${rest%??????????}"
printf '%s b\n' "${TOKEN#??????????????????????}" >&2"#,
    );
    let mut types = String::new();
    for script in ["two", "three"] {
        for (kind, redact) in [("plain", ""), ("lines", "redact = [\"password=\\\\S+\"]\n")] {
            types.push_str(&format!(
                "\n[tasks.{script}-{kind}]\ncommand = [\"{}\"]\n{redact}\
                 secret_env.TOKEN = {{ file = \"{}\" }}\nparams.n = {{ pattern = \"[0-9]+\" }}\n",
                setup.path(&format!("{script}.sh")),
                setup.path("token"),
            ));
        }
    }
    let config = config_with(&setup, &types);
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(crate::process_opts(&data).args([
        "--config",
        config.as_str(),
        "--task-concurrency",
        "4",
    ]))
    .await
    .expect("daemon");
    let api = Api::new(daemon.base_url());
    let mut ids = Vec::new();
    for n in 0..RUNS {
        for kind in ["two-plain", "two-lines", "three-plain", "three-lines"] {
            let (status, t) =
                submit(&api, json!({"type": kind, "params": {"n": n.to_string()}})).await;
            assert_eq!(status, 201, "{t}");
            ids.push(id(&t));
        }
    }
    let pieces: Vec<&str> = (0..=ROTATED.len() - 4)
        .map(|i| &ROTATED[i..i + 4])
        .collect();
    let found = |what: &str, bytes: &[u8]| {
        let hits: Vec<&&str> = pieces.iter().filter(|p| contains(bytes, p)).collect();
        assert!(
            hits.is_empty(),
            "{what} holds pieces of the secret: {hits:?}"
        );
    };
    for task in &ids {
        wait_task(&api, task, &["succeeded"]).await;
        let out = output_of(&api, task).await;
        assert_eq!(out, "a [REDACTED] b\n", "task {task}");
        found("the API's output", out.as_bytes());
    }
    for entry in std::fs::read_dir(data.path().join("data/task-output")).expect("logs") {
        let path = entry.expect("entry").path();
        found(
            &path.display().to_string(),
            &std::fs::read(&path).expect("log"),
        );
    }
    for entry in std::fs::read_dir(data.path().join("data")).expect("data") {
        let path = entry.expect("entry").path();
        if path.is_file() {
            found(
                &path.display().to_string(),
                &std::fs::read(&path).expect("db"),
            );
        }
    }
    found("the daemon's log", daemon.stderr().as_bytes());
}
