//! SIGHUP reads the configuration again: task types change while the daemon runs, an attempt
//! already running is not disturbed, settings that cannot change live are named and kept, and
//! a configuration that does not load is refused whole.

use std::time::Duration;

use serde_json::json;
use spool_testkit::{Api, DaemonProcess};
use tempfile::TempDir;

use crate::tasks::{id, submit, wait_task};
use crate::{process_opts, WAIT};

/// Wait until the daemon's log has `n` lines containing `text`.
async fn logged(daemon: &DaemonProcess, text: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while daemon.stderr().matches(text).count() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never logged {text:?} {n} times:\n{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_task_types_and_keeps_what_cannot_change() {
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    let slow = "[tasks.slow]\ncommand = [\"/bin/sh\", \"-c\", \"sleep 1; echo done\"]\n";
    std::fs::write(&config, slow).expect("write config");
    let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    let mut daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, running) = submit(&api, json!({"type": "slow"})).await;
    assert_eq!(status, 201, "{running}");
    wait_task(&api, &id(&running), &["running"]).await;
    let (status, err) = submit(&api, json!({"type": "quick"})).await;
    assert_eq!(err["error"]["code"], "unknown_task_type", "{status} {err}");

    // A type added, and a setting that cannot change while running.
    std::fs::write(
        &config,
        format!("concurrency = 3\n{slow}[tasks.quick]\ncommand = [\"/bin/true\"]\n"),
    )
    .expect("write config");
    daemon.signal("HUP").await.expect("SIGHUP");
    logged(&daemon, "configuration reloaded", 1).await;
    let log = daemon.stderr();
    let kept = log
        .lines()
        .find(|l| l.contains("cannot while the daemon runs"))
        .unwrap_or_default();
    assert!(kept.contains("--concurrency"), "{log}");
    let (status, quick) = submit(&api, json!({"type": "quick"})).await;
    assert_eq!(status, 201, "{quick}");
    wait_task(&api, &id(&quick), &["succeeded"]).await;
    // The attempt that was running when the signal came ran to its end, once.
    let done = wait_task(&api, &id(&running), &["succeeded"]).await;
    assert_eq!(done["attempt"], 1, "{done}");

    // A configuration that does not load changes nothing.
    std::fs::write(&config, "[tasks.quick\ncommand = ").expect("write config");
    daemon.signal("HUP").await.expect("SIGHUP");
    logged(&daemon, "configuration not reloaded", 1).await;
    let (status, again) = submit(&api, json!({"type": "quick"})).await;
    assert_eq!(status, 201, "{again}");
    wait_task(&api, &id(&again), &["succeeded"]).await;
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
}

/// A type whose program, working directory or secret file is not there is said at start (a
/// warning each), not at the first submission; with `--strict` the start, or a reload that
/// brings one, is refused.
#[tokio::test(flavor = "multi_thread")]
async fn missing_task_files_are_named_at_start_and_refused_with_strict() {
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    let broken = format!(
        "[tasks.backup]\ncommand = [\"/nonexistent/backup.sh\"]\nworking_dir = \"{0}/nowhere\"\n\
         secret_env.TOKEN = {{ file = \"{0}/token\" }}\n",
        dir.path().display()
    );
    std::fs::write(&config, &broken).expect("write config");
    let args = |strict: bool| {
        let mut opts =
            process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
        if strict {
            opts = opts.arg("--strict");
        }
        opts
    };
    let (status, out) = DaemonProcess::run_to_exit(args(true)).await.expect("runs");
    assert_eq!(status.code(), Some(1), "{out}");
    let last = out.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("spoold: --strict: [tasks.backup] command: /nonexistent/backup.sh: ")
            && last.contains("[tasks.backup] working_dir: ")
            && last.contains("[tasks.backup] secret_env.TOKEN: "),
        "{out}"
    );

    let mut daemon = DaemonProcess::start(args(false))
        .await
        .expect("starts, warned");
    logged(&daemon, "the type's tasks will fail until it is there", 3).await;
    daemon.terminate().await.expect("stops");

    // With --strict, a reload that brings a missing program is refused; the old set stays.
    std::fs::write(&config, "[tasks.ok]\ncommand = [\"/bin/true\"]\n").expect("write config");
    let mut daemon = DaemonProcess::start(args(true)).await.expect("starts");
    std::fs::write(&config, &broken).expect("write config");
    daemon.signal("HUP").await.expect("SIGHUP");
    logged(&daemon, "configuration not reloaded", 1).await;
    assert!(
        daemon.stderr().contains("--strict: [tasks.backup] command"),
        "{}",
        daemon.stderr()
    );
    let api = Api::new(daemon.base_url());
    let (status, task) = submit(&api, json!({"type": "ok"})).await;
    assert_eq!(status, 201, "{task}");
    wait_task(&api, &id(&task), &["succeeded"]).await;
    daemon.terminate().await.expect("stops");
}

/// The configuration of [`a_reload_that_removes_a_type_settles_the_locks_its_tasks_kept`]:
/// `next` wants the lock `db`, and so does `gone` (when declared), which fails with a transient
/// code and keeps the lock through an hour's backoff.
fn locking_types(with_gone: bool) -> String {
    let next = "[tasks.next]\ncommand = [\"/bin/true\"]\nlocks = [\"db\"]\n";
    let gone = "[tasks.gone]\ncommand = [\"/bin/sh\", \"-c\", \"exit 75\"]\nlocks = [\"db\"]\n\
                max_attempts = 5\nhold_locks_between_attempts = true\n\
                backoff = { base = \"1h\", cap = \"1h\" }\n";
    if with_gone {
        format!("{next}{gone}")
    } else {
        next.to_owned()
    }
}

/// A reload that removes a type while one of its tasks waits for a retry holding a lock: on
/// SQLite the task goes to `manual_review` (`type_undeclared`) as a restart would send it, and
/// the lock is free at once for the task that waits for it; on PostgreSQL, where another host
/// may still declare the type, the reload's warning names the lock and who keeps it, and a
/// cancel frees it.
async fn a_reload_that_removes_a_type_settles_the_locks_its_tasks_kept(
    db: Option<&spool_testkit::TestDatabase>,
) {
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    std::fs::write(&config, locking_types(true)).expect("write config");
    let config_arg = ["--config".to_owned(), config.display().to_string()];
    let opts = match db {
        Some(db) => spool_testkit::DaemonOptions::new(std::path::PathBuf::from(db.url()))
            .args(["--data-dir".to_owned(), dir.path().display().to_string()])
            .args(config_arg),
        None => process_opts(&dir).args(config_arg),
    };
    let mut daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, gone) = submit(&api, json!({"type": "gone", "idempotencyKey": "g"})).await;
    crate::tasks::wait_task_until(&api, &id(&gone), "a failed first attempt", |t| {
        t["status"] == "pending" && t["attempt"] == 1
    })
    .await;
    let (_, next) = submit(&api, json!({"type": "next", "idempotencyKey": "n"})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = crate::tasks::get(&api, &format!("/v1/tasks/{}", id(&next))).await;
    assert_eq!(t["status"], "pending", "it waits for the lock: {t}");

    std::fs::write(&config, locking_types(false)).expect("write config");
    daemon.signal("HUP").await.expect("SIGHUP");
    logged(&daemon, "configuration reloaded", 1).await;
    let log = daemon.stderr();
    if db.is_none() {
        assert!(
            log.contains("went to manual_review") && log.contains(&id(&gone)),
            "{log}"
        );
        let t = wait_task(&api, &id(&gone), &["manual_review"]).await;
        assert_eq!(t["errorCode"], "type_undeclared", "{t}");
        wait_task(&api, &id(&next), &["succeeded"]).await;
    } else {
        let warning = log
            .lines()
            .find(|l| l.contains("keep these locks"))
            .unwrap_or_default();
        assert!(
            warning.contains(&format!("db (gone task {})", id(&gone))),
            "{log}"
        );
        let t = crate::tasks::get(&api, &format!("/v1/tasks/{}", id(&next))).await;
        assert_eq!(t["status"], "pending", "{t}");
        let (status, _) =
            crate::tasks::post(&api, &format!("/v1/tasks/{}/cancel", id(&gone))).await;
        assert_eq!(status, 200);
        wait_task(&api, &id(&next), &["succeeded"]).await;
    }
    daemon.terminate().await.expect("stops");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_removes_a_type_frees_its_tasks_locks() {
    a_reload_that_removes_a_type_settles_the_locks_its_tasks_kept(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_removes_a_type_names_its_tasks_locks_on_postgres() {
    let Some(db) = spool_testkit::TestDatabase::create()
        .await
        .expect("test database")
    else {
        return;
    };
    a_reload_that_removes_a_type_settles_the_locks_its_tasks_kept(Some(&db)).await;
}
