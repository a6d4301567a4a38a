//! `spoolctl task …` against a real `spoold` process whose `--config` declares task types
//! backed by small `/bin/sh` scripts in a temp directory: the rows, one-line errors and exit
//! codes (0 succeeded, 3 failed, 4 canceled, 5 wait timed out, 6 timed_out, 7 manual_review,
//! 13 refused) a script sees. Every script ends by itself or is stopped by spoold (timeout, cancel,
//! shutdown) before the test ends, so no process outlives a test.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use serde_json::Value;
use spool_testkit::{DaemonOptions, DaemonProcess};
use tempfile::TempDir;

use crate::{check_error, check_ok, path_str, row_id as task_id, stderr, stdout, Spoold, WAIT};

/// Passed to every `--timeout` of `task wait` and `task submit --wait`: far above what any
/// task here needs, and still a bound.
const WAIT_ARG: &str = "20s";

/// How a submission spoold refused for good ends its line (exit 13).
const REFUSED: &str = "; nothing was submitted, and the same command would be refused again";

/// A daemon with the task types below, and the directory holding their scripts and the
/// configuration file. Fields drop in order: the daemon is killed before the scripts go.
struct TaskSpoold {
    s: Spoold,
    config: String,
    _scripts: TempDir,
}

impl TaskSpoold {
    async fn start(extra: &[&str]) -> TaskSpoold {
        let scripts = TempDir::new().expect("temp dir");
        let dir = scripts.path();
        script(
            dir,
            "ok.sh",
            "printf 'hello %s\\n' \"$1\" > \"$SPOOLD_RESULT_FILE\"\n",
        );
        script(dir, "fail.sh", "echo boom >&2\nexit 1\n");
        // In the foreground: the process group spoold stops is all there is.
        script(dir, "sleep.sh", "exec sleep 10\n");
        let p = |name: &str| toml_string(&dir.join(name));
        let config_text = format!(
            r#"
[tasks.ok]
description = "Say hello"
command = [{ok}, "{{name}}"]
params.name = {{ pattern = "[a-z]{{1,10}}" }}

[tasks.fail]
command = [{fail}]
max_attempts = 1

[tasks.slow]
command = [{sleep}]
timeout = "500ms"
kill_grace = "200ms"

[tasks.hang]
command = [{sleep}]
timeout = "20s"
kill_grace = "200ms"
"#,
            ok = p("ok.sh"),
            fail = p("fail.sh"),
            sleep = p("sleep.sh"),
        );
        let config = dir.join("spoold.toml");
        std::fs::write(&config, config_text).expect("write the config");
        let config = path_str(&config).to_owned();
        let args: Vec<&str> = ["--config", config.as_str()]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        let s = Spoold::start_args(&args).await;
        TaskSpoold {
            s,
            config,
            _scripts: scripts,
        }
    }

    async fn ctl(&self, args: &[&str]) -> Output {
        self.s.ctl(args).await
    }

    /// Submits without waiting; returns the new task's id.
    async fn submit(&self, args: &[&str]) -> String {
        let out = check_ok(&self.ctl(&[&["task", "submit"][..], args].concat()).await);
        assert!(out.starts_with("submitted  "), "{out}");
        task_id(&out)
    }

    /// The task as `task get --json` shows it.
    async fn task(&self, id: &str) -> Value {
        let out = check_ok(&self.ctl(&["task", "get", id, "--json"]).await);
        serde_json::from_str(&out).expect("task JSON")
    }

    /// Polls (bounded by [`WAIT`]) until the task is in `status`.
    async fn wait_for(&self, id: &str, status: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let task = self.task(id).await;
            if task["status"] == status {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {id} not {status} within {WAIT:?}: {task}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// Writes an executable `#!/bin/sh` script.
fn script(dir: &Path, name: &str, body: &str) {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A path as a TOML basic string (temp paths need no escapes; checked).
fn toml_string(path: &Path) -> String {
    let text = path_str(path);
    assert!(!text.contains(['"', '\\']), "{text}");
    format!("\"{text}\"")
}

/// One task row as `task submit`, `wait`, `cancel` and `retry` print it.
fn row(action: &str, id: &str, status: &str, attempts: &str, task_type: &str) -> String {
    format!("{action}  {id}  {status}  {attempts}  {task_type}\n")
}

/// The whitespace-separated cells of the table line that mentions `needle`.
fn cells<'a>(table: &'a str, needle: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{table}"))
        .split_whitespace()
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn submit_wait_succeeds_and_every_view_shows_the_task() {
    let t = TaskSpoold::start(&[]).await;
    let o = t
        .ctl(&[
            "task",
            "submit",
            "ok",
            "-p",
            "name=abc",
            "--wait",
            "--timeout",
            WAIT_ARG,
        ])
        .await;
    let out = check_ok(&o);
    let id = task_id(&out);
    assert_eq!(
        out,
        format!(
            "{}{}",
            row("submitted", &id, "pending", "0/1", "ok"),
            row("wait", &id, "succeeded", "1/1", "ok")
        )
    );

    // get: the row, the fields, the parameters and what the script wrote.
    let got = check_ok(&t.ctl(&["task", "get", &id]).await);
    assert!(
        got.starts_with(&row("get", &id, "succeeded", "1/1", "ok")),
        "{got}"
    );
    for line in [
        &["type:", "ok"][..],
        &["exit", "code:", "0"],
        &["retryable:", "no"],
    ] {
        assert!(
            got.lines()
                .any(|l| l.split_whitespace().eq(line.iter().copied())),
            "{line:?} in\n{got}"
        );
    }
    for part in ["\nparams:\n  name: abc\n", "\nresult:\n  hello abc\n"] {
        assert!(got.contains(part), "{part:?} in\n{got}");
    }
    assert!(!got.contains("last error"), "{got}");
    let json = t.task(&id).await;
    assert_eq!(json["status"], "succeeded");
    assert_eq!(json["params"]["name"], "abc");
    assert_eq!(json["resultSummary"], "hello abc");

    // list, with and without filters.
    let listed = check_ok(&t.ctl(&["task", "list"]).await);
    assert_eq!(
        cells(&listed, "ID"),
        ["ID", "STATUS", "ATTEMPTS", "UPDATED", "TYPE", "PARAMS"]
    );
    // Finished a moment ago: `now` or `1s ago`.
    let row = cells(&listed, &id);
    let (age, rest) = match row.iter().position(|c| *c == "ago") {
        Some(ago) => (
            row[3..=ago].join(" "),
            [&row[..3], &row[ago + 1..]].concat(),
        ),
        None => (row[3].to_owned(), [&row[..3], &row[4..]].concat()),
    };
    assert!(age == "now" || age.ends_with("s ago"), "{listed}");
    assert_eq!(rest, [id.as_str(), "succeeded", "1/1", "ok", "name=abc"]);
    let filtered = check_ok(
        &t.ctl(&["task", "list", "--status", "succeeded", "--type", "ok"])
            .await,
    );
    assert!(filtered.contains(&id), "{filtered}");
    let none = check_ok(&t.ctl(&["task", "list", "--type", "fail"]).await);
    assert_eq!(none, "", "no rows, nothing printed");
    let all = check_ok(&t.ctl(&["task", "list", "--all", "--limit", "1"]).await);
    assert!(all.contains(&id), "{all}");
    let json: Value =
        serde_json::from_str(&check_ok(&t.ctl(&["task", "list", "--json"]).await)).expect("JSON");
    assert_eq!(json["count"], 1);
    assert_eq!(json["tasks"][0]["id"], id.as_str());

    // attempts: one, exit code 0.
    let attempts = check_ok(&t.ctl(&["task", "attempts", &id]).await);
    assert_eq!(
        cells(&attempts, "ATTEMPT"),
        ["ATTEMPT", "STARTED", "OUTCOME", "EXIT", "SIGNAL", "CODE", "DURATION", "ERROR"]
    );
    let first = cells(&attempts, "succeeded");
    assert_eq!(first[0], "1");
    assert_eq!(&first[2..6], ["succeeded", "0", "-", "-"]);
    assert_eq!(attempts.lines().count(), 2, "{attempts}");

    // transitions: submitted, started, succeeded.
    let log = check_ok(&t.ctl(&["task", "transitions", &id]).await);
    assert_eq!(
        cells(&log, "REASON"),
        ["AT", "FROM", "TO", "ATTEMPT", "REASON", "NOTE"]
    );
    let tos: Vec<&str> = log
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).expect("a TO column"))
        .collect();
    assert_eq!(tos, ["pending", "running", "succeeded"], "{log}");

    // types: one row per declared type.
    let types = check_ok(&t.ctl(&["task", "types"]).await);
    assert_eq!(
        cells(&types, "TYPE"),
        [
            "TYPE",
            "PARAMS",
            "MAX_ATTEMPTS",
            "TIMEOUT",
            "ON_INTERRUPT",
            "DESCRIPTION"
        ]
    );
    assert_eq!(
        cells(&types, "Say hello"),
        ["ok", "name", "1", "1h", "review", "Say", "hello"]
    );
    assert_eq!(
        cells(&types, "500ms"),
        ["slow", "-", "1", "500ms", "review", "-"]
    );
    let json: Value =
        serde_json::from_str(&check_ok(&t.ctl(&["task", "types", "--json"]).await)).expect("JSON");
    assert_eq!(json["types"].as_array().map(Vec::len), Some(4));

    // An ended task cannot be canceled: spoold's 409, in one line.
    check_error(
        &t.ctl(&["task", "cancel", &id]).await,
        1,
        "spoold returned HTTP 409 (invalid_transition): this task already succeeded; cancel \
         applies only to pending, running and manual_review tasks",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotency_keys_return_the_existing_task_or_conflict() {
    let t = TaskSpoold::start(&[]).await;
    let submit = |name: &'static str| {
        [
            "task",
            "submit",
            "ok",
            "-p",
            name,
            "--idempotency-key",
            "nightly",
            "--not-before",
            "2099-01-01T00:00:00Z",
        ]
    };
    let first = check_ok(&t.ctl(&submit("name=abc")).await);
    let id = task_id(&first);
    assert_eq!(first, row("submitted", &id, "pending", "0/1", "ok"));
    let again = check_ok(&t.ctl(&submit("name=abc")).await);
    assert_eq!(again, row("existing", &id, "pending", "0/1", "ok"));
    check_error(
        &t.ctl(&submit("name=xyz")).await,
        13,
        &format!(
            "spoold returned HTTP 409 (idempotency_conflict): idempotency key was already used \
             for a task with other parameters{REFUSED}"
        ),
    );
    // Not before 2099: still pending; canceling a pending task ends it at once.
    let canceled = check_ok(&t.ctl(&["task", "cancel", &id]).await);
    assert_eq!(canceled, row("cancel", &id, "canceled", "0/1", "ok"));
    let o = t.ctl(&["task", "wait", &id, "--timeout", WAIT_ARG]).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert_eq!(stdout(&o), row("wait", &id, "canceled", "0/1", "ok"));
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_submissions_are_one_line_errors() {
    let t = TaskSpoold::start(&[]).await;
    let cases: &[(&[&str], &str)] = &[
        (
            &["ok", "-p", "name=ABC"],
            "spoold returned HTTP 400 (invalid_params): parameter name does not match \
             [a-z]{1,10}",
        ),
        (
            &["ok", "-p", "name=abc", "-p", "other=x"],
            "spoold returned HTTP 400 (unknown_param): task type ok has no parameter \"other\"",
        ),
        (
            &["ok"],
            "spoold returned HTTP 400 (missing_param): parameter name is required",
        ),
        (
            &["nope"],
            "spoold returned HTTP 400 (unknown_task_type): task type \"nope\" is not declared; \
             declared: fail, hang, ok, slow (spoolctl task types, GET /v1/task-types)",
        ),
    ];
    // Refused for good: exit 13, not the 1 of "try again later".
    for (args, message) in cases {
        let o = t.ctl(&[&["task", "submit"][..], args].concat()).await;
        check_error(&o, 13, &format!("{message}{REFUSED}"));
    }
    let missing = "0190f3c2a1b27c4e9d0a5b6c7d8e9f01";
    for command in ["get", "attempts", "transitions", "cancel", "retry", "wait"] {
        let o = t.ctl(&["task", command, missing]).await;
        check_error(
            &o,
            1,
            "spoold returned HTTP 404 (not_found): task not found",
        );
    }

    // Usage errors: exit 2 before any request.
    let usage: &[(&[&str], &str)] = &[
        (
            &["submit", "ok", "-p", "name"],
            "parameter \"name\" must be KEY=VALUE (-p name=…)",
        ),
        (
            &["submit", "ok", "-p", "=abc"],
            "parameter \"=abc\" has no name before '='",
        ),
        (
            &["submit", "ok", "-p", "name=a", "--param", "name=b"],
            "parameter \"name\" was given more than once",
        ),
        (
            &["submit", "ok", "--wait", "--interval", "1ms"],
            "--interval must be at least 10ms",
        ),
        (&["get", " "], "task ID must not be empty"),
        (&["wait", ""], "task ID must not be empty"),
    ];
    for (args, message) in usage {
        let o = t.ctl(&[&["task"][..], args].concat()).await;
        check_error(&o, 2, message);
    }
    // Nothing was submitted by any of it: no rows, nothing printed.
    let listed = check_ok(&t.ctl(&["task", "list"]).await);
    assert_eq!(listed, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_and_timed_out_tasks_have_their_own_exit_codes() {
    let t = TaskSpoold::start(&[]).await;

    let o = t
        .ctl(&["task", "submit", "fail", "--wait", "--timeout", WAIT_ARG])
        .await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let out = stdout(&o);
    let id = task_id(&out);
    assert_eq!(
        out,
        format!(
            "{}{}last error: exited with 1 (script_error)\n",
            row("submitted", &id, "pending", "0/1", "fail"),
            row("wait", &id, "failed", "1/1", "fail"),
        )
    );
    let attempts = check_ok(&t.ctl(&["task", "attempts", &id]).await);
    let first = cells(&attempts, "script_error");
    assert_eq!(&first[2..6], ["failed", "1", "-", "script_error"]);

    // An operator retry gives it the type's max_attempts more; it fails again.
    let retried = check_ok(&t.ctl(&["task", "retry", &id]).await);
    assert!(
        retried.starts_with(&row("retry", &id, "pending", "1/2", "fail")),
        "{retried}"
    );
    let o = t.ctl(&["task", "wait", &id, "--timeout", WAIT_ARG]).await;
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&row("wait", &id, "failed", "2/2", "fail")),
        "{}",
        stdout(&o)
    );
    let attempts = check_ok(&t.ctl(&["task", "attempts", &id]).await);
    assert_eq!(attempts.lines().count(), 3, "{attempts}");

    // The type's own timeout: 6, and the JSON of --wait is the final task only.
    let o = t
        .ctl(&[
            "task",
            "submit",
            "slow",
            "--wait",
            "--timeout",
            WAIT_ARG,
            "--json",
        ])
        .await;
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 1, "{out}");
    let task: Value = serde_json::from_str(&out).expect("task JSON");
    assert_eq!(task["status"], "timed_out");
    assert_eq!(task["errorCode"], "timed_out");
    let id = task["id"].as_str().expect("an id");
    let o = t.ctl(&["task", "wait", id]).await;
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}last error: ran longer than its timeout of 500ms\n",
            row("wait", id, "timed_out", "1/1", "slow")
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_times_out_and_a_running_task_is_canceled() {
    let t = TaskSpoold::start(&[]).await;
    let id = t.submit(&["hang"]).await;
    t.wait_for(&id, "running").await;

    let o = t
        .ctl(&[
            "task",
            "wait",
            &id,
            "--timeout",
            "300ms",
            "--interval",
            "50ms",
        ])
        .await;
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert_eq!(stdout(&o), row("wait", &id, "running", "1/1", "hang"));
    assert_eq!(
        stderr(&o),
        format!("spoolctl: timed out after 300ms: task {id} is still running\n")
    );

    let out = check_ok(&t.ctl(&["task", "cancel", &id]).await);
    assert_eq!(
        out,
        format!(
            "{}cancel requested: spoold is stopping the running attempt\n",
            row("cancel", &id, "running", "1/1", "hang")
        )
    );
    let o = t.ctl(&["task", "wait", &id, "--timeout", WAIT_ARG]).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&row("wait", &id, "canceled", "1/1", "hang")),
        "{}",
        stdout(&o)
    );
}

/// A task whose attempt a daemon shutdown interrupts goes to manual review (the default
/// `on_interrupt`); `task wait` passes `interrupted` and exits 7 on `manual_review`.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_task_waits_in_manual_review() {
    let mut t = TaskSpoold::start(&["--shutdown-timeout", "200ms"]).await;
    let id = t.submit(&["hang"]).await;
    t.wait_for(&id, "running").await;

    // SIGTERM: after the shutdown timeout the attempt is stopped and recorded as interrupted.
    t.s.daemon.terminate().await.expect("spoold stops");
    let db = t.s.dir.path().join("data/spoold.db");
    let daemon = DaemonProcess::start(DaemonOptions::new(db).args(["--config", t.config.as_str()]))
        .await
        .expect("spoold starts again");
    t.s.server = daemon.base_url();
    t.s.daemon = daemon;

    let o = t.ctl(&["task", "wait", &id, "--timeout", WAIT_ARG]).await;
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&row("wait", &id, "manual_review", "1/1", "hang")),
        "{}",
        stdout(&o)
    );
    let log = check_ok(&t.ctl(&["task", "transitions", &id]).await);
    let tos: Vec<&str> = log
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).expect("a TO column"))
        .collect();
    assert_eq!(
        tos,
        ["pending", "running", "interrupted", "manual_review"],
        "{log}"
    );

    // A person looked: it succeeded after all. Said with a note, kept in the log.
    let o = t.ctl(&["task", "resolve", &id, "--succeeded"]).await;
    assert_eq!(o.status.code(), Some(2), "the note is required");
    let out = check_ok(
        &t.ctl(&[
            "task",
            "resolve",
            &id,
            "--succeeded",
            "--note",
            "deployed, checked by hand",
        ])
        .await,
    );
    assert!(
        out.starts_with(&row("resolve", &id, "succeeded", "1/1", "hang")),
        "{out}"
    );
    let log = check_ok(&t.ctl(&["task", "transitions", &id]).await);
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.contains("succeeded")
            && last.contains("resolved")
            && last.contains("deployed, checked by hand"),
        "{log}"
    );
    // Settled: a second decision is refused.
    let o = t
        .ctl(&["task", "resolve", &id, "--failed", "--note", "x"])
        .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("this task already succeeded; resolve applies only to manual_review tasks"),
        "{}",
        stderr(&o)
    );
}

/// `task logs -f` on a task that has not started yet waits for its attempt (saying so once on
/// stderr), then prints its output; without `-f` there is no output yet, said as an error.
#[tokio::test(flavor = "multi_thread")]
async fn following_the_logs_of_a_task_not_yet_started_waits_for_it() {
    let t = TaskSpoold::start(&[]).await;
    let id = t.submit(&["fail", "--not-before", "1s"]).await;
    let o = t.ctl(&["task", "logs", &id]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let o = t.ctl(&["task", "logs", &id, "-f"]).await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "boom\n");
    assert_eq!(
        stderr(&o),
        format!("spoolctl: task {id} is pending; waiting for attempt 1 to start\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn task_retry_and_cancel_take_several_ids_or_a_filter() {
    let t = TaskSpoold::start(&[]).await;
    let mut failed = Vec::new();
    for _ in 0..2 {
        let id = t.submit(&["fail"]).await;
        t.wait_for(&id, "failed").await;
        failed.push(id);
    }
    let out = check_ok(
        &t.ctl(&[
            "task",
            "retry",
            "--type",
            "fail",
            "--since",
            "1h",
            "--dry-run",
        ])
        .await,
    );
    assert_eq!(
        out,
        format!(
            "would retry 2 of 2 matching tasks\nfirst: {}\n",
            failed.join(" ")
        )
    );
    let o = t.ctl(&["task", "retry", "--type", "fail"]).await;
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = check_ok(
        &t.ctl(&["task", "retry", "--status", "failed", "--yes"])
            .await,
    );
    assert_eq!(
        out,
        format!(
            "retried 2 of 2 matching tasks\nfirst: {}\n",
            failed.join(" ")
        )
    );
    for id in &failed {
        t.wait_for(id, "failed").await;
    }

    // Several IDs: each one's row; one that cannot be canceled is reported, the rest go on.
    let a = t
        .submit(&["ok", "-p", "name=a", "--not-before", "2099-01-01T00:00:00Z"])
        .await;
    let b = t
        .submit(&["ok", "-p", "name=b", "--not-before", "2099-01-01T00:00:00Z"])
        .await;
    let o = t.ctl(&["task", "cancel", &a, &failed[0], &b]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}{}",
            row("cancel", &a, "canceled", "0/1", "ok"),
            row("cancel", &b, "canceled", "0/1", "ok")
        )
    );
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "spoolctl: {}: spoold returned HTTP 409",
            failed[0]
        )) && err.ends_with("spoolctl: 1 of 3 tasks could not cancel\n"),
        "{err}"
    );
    for args in [
        &["task", "cancel"][..],
        &["task", "cancel", &a, "--type", "ok"][..],
        &["task", "cancel", &a, "--dry-run"][..],
    ] {
        let o = t.ctl(args).await;
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

/// The refusals a first `task submit` may meet, as spoolctl prints them: a type that derives its
/// key names its template and the flag to leave out; an unknown type lists the declared ones
/// (a close one first) and `spoolctl task types`.
#[tokio::test(flavor = "multi_thread")]
async fn submit_refusals_name_the_flag_and_the_declared_types() {
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        "[tasks.backup]\ncommand = [\"/bin/true\", \"{db}\"]\nparams.db = { pattern = \"[a-z]{1,10}\" }\nidempotency_key = \"backup:{db}\"\n",
    )
    .expect("write the config");
    let s = Spoold::start_args(&["--config", path_str(&config)]).await;
    check_error(
        &s.ctl(&[
            "task",
            "submit",
            "backup",
            "-p",
            "db=orders",
            "--idempotency-key",
            "nightly",
        ])
        .await,
        13,
        &format!(
            "spoold returned HTTP 400 (invalid_request): task type backup derives its \
             idempotency key from its parameters (idempotency_key = \"backup:{{db}}\" in its \
             declaration), so a submission with the same parameters is already the same task: \
             leave out idempotencyKey (spoolctl task submit: --idempotency-key){REFUSED}"
        ),
    );
    check_error(
        &s.ctl(&["task", "submit", "bakup", "-p", "db=orders"]).await,
        13,
        &format!(
            "spoold returned HTTP 400 (unknown_task_type): task type \"bakup\" is not declared \
             (did you mean \"backup\"?); declared: backup (spoolctl task types, GET \
             /v1/task-types){REFUSED}"
        ),
    );
}
