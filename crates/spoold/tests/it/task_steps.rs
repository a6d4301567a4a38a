//! Checkpoints end to end, with `--auth-token-file` on: a real script records its steps with
//! the real `spoolctl step done` (authenticated by its attempt's step token, never the
//! operator's), fails after one, goes to review, and on an operator's retry skips what is done.

use serde_json::json;
use spool_testkit::Api;
use tempfile::TempDir;

use crate::task_locks::config_with;
use crate::tasks::{id, wait_task, Setup};

#[tokio::test(flavor = "multi_thread")]
async fn a_partial_failure_is_reviewed_and_a_retry_skips_finished_steps() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let spoolctl = spool_testkit::cargo_bin("spoolctl");
    // Step A creates something (the ledger shows how often); then it fails while FAIL exists.
    setup.script(
        "steps.sh",
        r#"printf '%s\n' "$SPOOLD_STEP_TOKEN" > "$TOKENS"
if ! "$SPOOLCTL" step check create; then
  echo create >> "$LEDGER"
  "$SPOOLCTL" step done create || exit 70
fi
[ -e "$FAIL" ] && { echo "upload failed" >&2; exit 1; }
"$SPOOLCTL" step done upload || exit 70
echo upload >> "$LEDGER""#,
    );
    let extra = format!(
        r#"
[tasks.steps]
command = ["{script}"]
env = {{ SPOOLCTL = "{spoolctl}", LEDGER = "{ledger}", FAIL = "{fail}", TOKENS = "{tokens}" }}
"#,
        script = setup.path("steps.sh"),
        spoolctl = spoolctl.display(),
        ledger = setup.path("ledger"),
        fail = setup.path("fail"),
        tokens = setup.path("tokens"),
    );
    let config = config_with(&setup, &extra);
    std::fs::write(setup.dir.join("fail"), "").expect("fail marker");
    let token_file = setup.dir.join("operator-token");
    std::fs::write(&token_file, "operator-secret-0123456789abcdefghijklmnop\n")
        .expect("token file");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600))
            .expect("chmod token file");
    }
    let d = crate::InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        crate::Targets::Loopback,
        &[
            "--config",
            &config,
            "--auth-token-file",
            token_file.to_str().expect("utf-8"),
        ],
    )
    .await;
    let api = Api::with_token(
        d.api.base_url(),
        "operator-secret-0123456789abcdefghijklmnop",
    );
    let (status, _, body) = api
        .request(
            http::Method::POST,
            "/v1/tasks",
            Some(
                json!({"type": "steps", "idempotencyKey": "s1"})
                    .to_string()
                    .into_bytes(),
            ),
        )
        .await
        .expect("submit");
    assert_eq!(status, 201);
    let task: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let task_id = id(&task);
    let t = wait_task(&api, &task_id, &["manual_review", "succeeded", "failed"]).await;
    assert_eq!(
        (&t["status"], &t["errorCode"], &t["completedSteps"]),
        (
            &json!("manual_review"),
            &json!("partial_failure"),
            &json!(["create"])
        ),
        "{t}"
    );
    let ledger = || std::fs::read_to_string(setup.dir.join("ledger")).unwrap_or_default();
    assert_eq!(ledger(), "create\n");

    // The step token of an attempt that ended opens nothing, and never opened other routes.
    let old = std::fs::read_to_string(setup.dir.join("tokens")).expect("token written");
    let script_api = Api::with_token(d.api.base_url(), old.trim());
    let steps = format!("/v1/tasks/{task_id}/steps");
    for (method, path, body) in [
        (
            http::Method::POST,
            steps.as_str(),
            Some(json!({"name": "x", "attempt": 1})),
        ),
        (http::Method::GET, steps.as_str(), None),
        (http::Method::GET, "/v1/tasks", None),
    ] {
        let (status, _, _) = script_api
            .request(
                method.clone(),
                path,
                body.map(|b| b.to_string().into_bytes()),
            )
            .await
            .expect("request");
        assert_eq!(status, 401, "{method} {path} with an old step token");
    }

    // An operator retries once the cause is fixed: the script skips the step already done.
    std::fs::remove_file(setup.dir.join("fail")).expect("fix");
    let (status, _, _) = api
        .request(
            http::Method::POST,
            &format!("/v1/tasks/{task_id}/retry"),
            None,
        )
        .await
        .expect("retry");
    assert_eq!(status, 200);
    let t = wait_task(&api, &task_id, &["succeeded", "manual_review", "failed"]).await;
    assert_eq!(t["status"], "succeeded", "{t}");
    assert_eq!(t["completedSteps"], json!(["create", "upload"]));
    assert_eq!(
        ledger(),
        "create\nupload\n",
        "the resource was created once"
    );
    let (_, _, body) = api
        .request(http::Method::GET, &steps, None)
        .await
        .expect("steps");
    let steps: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    let by_attempt: Vec<_> = steps["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| (s["name"].clone(), s["attempt"].clone()))
        .collect();
    assert_eq!(
        by_attempt,
        [(json!("create"), json!(1)), (json!("upload"), json!(2))]
    );
    // The step tokens were never the operator's, and never stored.
    let tokens = std::fs::read_to_string(setup.dir.join("tokens")).expect("tokens");
    assert!(!tokens.contains("operator-secret-0123456789abcdefghijklmnop"));
    let mut db = std::fs::read(d.dir.path().join("data/spoold.db")).expect("db");
    db.extend(std::fs::read(d.dir.path().join("data/spoold.db-wal")).unwrap_or_default());
    for token in [old.trim(), tokens.trim()] {
        assert!(
            !db.windows(token.len()).any(|w| w == token.as_bytes()),
            "a step token was stored"
        );
    }
}

/// A step its script reports while the attempt is being stopped (its SIGTERM handler finished
/// the step before exiting) is recorded: the work was done, and a later attempt must not do it
/// again. The task still ends as the stop says (`canceled`), with the step among its
/// `completedSteps`.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_done_while_the_attempt_is_stopped_is_recorded() {
    let dir = TempDir::new().expect("temp dir");
    let setup = crate::tasks::Setup::new(dir.path());
    let spoolctl = spool_testkit::cargo_bin("spoolctl");
    setup.script(
        "finishing.sh",
        r#"trap '"$SPOOLCTL" step done flush; echo "step done: $?" >> "$LOG"; exit 143' TERM
echo started >> "$LOG"
while :; do sleep 0.05; done"#,
    );
    let extra = format!(
        "\n[tasks.finishing]\ncommand = [\"{}\"]\nkill_grace = \"5s\"\n\
         env = {{ SPOOLCTL = \"{}\", LOG = \"{}\" }}\n",
        setup.path("finishing.sh"),
        spoolctl.display(),
        setup.path("log"),
    );
    let d = crate::task_locks::boot_with(&setup, &extra, &[]).await;
    let (_, t) =
        crate::tasks::submit(&d.api, json!({"type": "finishing", "idempotencyKey": "f"})).await;
    for _ in 0..500 {
        if std::fs::read_to_string(setup.dir.join("log")).is_ok_and(|l| l.contains("started")) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, _) = crate::tasks::post(&d.api, &format!("/v1/tasks/{}/cancel", id(&t))).await;
    assert_eq!(status, 200);
    let done = wait_task(&d.api, &id(&t), &["canceled"]).await;
    assert_eq!(done["completedSteps"], json!(["flush"]), "{done}");
    let log = std::fs::read_to_string(setup.dir.join("log")).expect("log");
    assert!(log.contains("step done: 0"), "{log}");
}

/// The book's checkpoint script, taken from its tasks page and run as it is written (with a
/// stand-in `pg_dump` on the type's `PATH`): it finds `spoolctl` through `SPOOLD_CTL`, which
/// the daemon sets to the `spoolctl` beside it. Its first attempt dumps and records the step,
/// then fails (the type's command fails after the script while a marker exists), and goes to
/// review; the operator's retry skips the dump.
#[tokio::test(flavor = "multi_thread")]
async fn the_books_checkpoint_script_runs_as_written() {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/tasks.md"),
    )
    .expect("docs/src/tasks.md");
    let marker = "# A task's script: steps done by an earlier attempt are not done again.";
    let at = page.find(marker).expect("the checkpoint example");
    let start = page[..at].rfind("#!/bin/sh").expect("its first line");
    let end = at + page[at..].find("```").expect("its end");
    let script = &page[start..end];

    let dir = TempDir::new().expect("temp dir");
    let path = |name: &str| dir.path().join(name).display().to_string();
    let write_script = |name: &str, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path(name), body).expect("write");
        std::fs::set_permissions(path(name), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    };
    write_script("backup.sh", script);
    std::fs::create_dir(path("bin")).expect("bin");
    write_script(
        "bin/pg_dump",
        "#!/bin/sh\necho \"dump of $1\"\necho dumped >> \"$BACKUP_DIR/ledger\"\n",
    );
    std::fs::write(path("fail"), "").expect("marker");
    let config = path("spoold.toml");
    std::fs::write(
        &config,
        format!(
            r#"[tasks.backup]
command = ["/bin/sh", "-c", "\"$0\" && [ ! -e \"$FAIL\" ]", "{script}"]
env = {{ PATH = "{bin}:/usr/bin:/bin", DB = "shop", BACKUP_DIR = "{dir}", FAIL = "{fail}" }}
"#,
            script = path("backup.sh"),
            bin = path("bin"),
            dir = dir.path().display(),
            fail = path("fail"),
        ),
    )
    .expect("config");
    // The daemon's spoolctl is the one beside its executable.
    spool_testkit::cargo_bin("spoolctl");
    let data = TempDir::new().expect("temp dir");
    let mut daemon = spool_testkit::DaemonProcess::start(
        crate::process_opts(&data).args(["--config".to_owned(), config]),
    )
    .await
    .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, task) = crate::tasks::submit(&api, json!({"type": "backup"})).await;
    assert_eq!(status, 201, "{task}");
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    assert_eq!(t["completedSteps"], json!(["dump"]), "{t}");
    let dumped = std::fs::read_to_string(path("ledger")).expect("ledger");
    assert_eq!(dumped, "dumped\n");
    assert_eq!(
        std::fs::read_to_string(path("db.sql")).expect("the dump"),
        "dump of shop\n"
    );

    std::fs::remove_file(path("fail")).expect("marker");
    let (status, _) = crate::tasks::post(&api, &format!("/v1/tasks/{}/retry", id(&task))).await;
    assert_eq!(status, 200);
    wait_task(&api, &id(&task), &["succeeded"]).await;
    assert_eq!(
        std::fs::read_to_string(path("ledger")).expect("ledger"),
        "dumped\n",
        "dumped again"
    );
    let (_, _, output) = api
        .request(
            http::Method::GET,
            &format!("/v1/tasks/{}/output?attempt=2", id(&task)),
            None,
        )
        .await
        .expect("output");
    let output = String::from_utf8_lossy(&output);
    assert!(
        output.contains("dump: done by an earlier attempt"),
        "{output}"
    );
    daemon.terminate().await.expect("stops");
}
