//! DaemonProcess against a shell script standing in for `spoold`: it logs like the daemon,
//! echoes its arguments, and exits 0 on SIGTERM.

use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use spool_testkit::{DaemonOptions, DaemonProcess};
use tempfile::TempDir;

/// Logs its arguments and a `listening` line, then waits for SIGTERM. The `sleep` keeps no
/// pipe open, so the script's exit closes them. It is started, and the trap that ends it set,
/// before `listening` is logged: a SIGTERM can only come after that line, and must find both.
/// Everything it prints comes before that line too, or the SIGTERM would race it.
const FAKE_DAEMON: &str = r#"#!/bin/sh
sleep 300 </dev/null >/dev/null 2>&1 &
pid=$!
trap 'echo "{\"fields\":{\"message\":\"shutting down\"}}" >&2; kill $pid; exit 0' TERM
echo "args: $*" >&2
echo "env: ${SPOOLD_TEST_VAR:-unset} ${RUST_LOG:-no-rust-log}" >&2
echo "not json" >&2
echo '{"fields":{"message":"store opened"}}' >&2
echo "hello on stdout"
echo '{"timestamp":"t","level":"INFO","fields":{"message":"listening","addr":"127.0.0.1:4567"},"target":"spoold"}' >&2
wait $pid
"#;

const REFUSING_DAEMON: &str = r#"#!/bin/sh
echo '{"fields":{"message":"database is locked by another spoold"}}' >&2
exit 1
"#;

/// Never logs `listening`; keeps stderr open.
const SILENT_DAEMON: &str = r#"#!/bin/sh
echo "starting" >&2
exec sleep 300 </dev/null >/dev/null
"#;

/// Never logs `listening`; closes stderr but keeps running.
const MUTE_DAEMON: &str = r#"#!/bin/sh
echo "starting" >&2
exec sleep 300 </dev/null >/dev/null 2>/dev/null
"#;

#[tokio::test]
async fn start_reads_the_listening_line() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let opts = options(&dir, FAKE_DAEMON)
        .arg("--workers")
        .env("SPOOLD_TEST_VAR", "set");
    let mut daemon = DaemonProcess::start(opts).await?;
    assert_eq!(daemon.base_url(), "http://127.0.0.1:4567");
    assert_eq!(daemon.addr(), Some("127.0.0.1:4567".parse()?));
    assert!(daemon.pid() > 0);
    let stderr = daemon.stderr();
    let db = dir.path().join("spool.db");
    assert!(
        stderr.contains(&format!(
            "args: --db {} --listen 127.0.0.1:0 --allow-private-targets --log-format json --workers",
            db.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("env: set no-rust-log"), "{stderr}");

    let pgid = daemon.pid();
    let status = daemon.terminate().await?;
    assert_eq!(status.code(), Some(0));
    assert!(daemon.stderr().contains("shutting down"));
    assert_group_gone(pgid).await;
    assert_eq!(daemon.stdout(), "hello on stdout\n");
    // Terminating again reports the same exit.
    assert_eq!(daemon.terminate().await?.code(), Some(0));
    Ok(())
}

/// Processes still alive (not zombies) in process group `pgid`, read from /proc.
fn group_members(pgid: u32) -> Vec<u32> {
    let mut alive = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After "pid (comm)": state, ppid, pgrp, …; comm may hold spaces, so split after ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            alive.push(pid);
        }
    }
    alive
}

/// Wait (bounded) until nothing of the group is left.
async fn assert_group_gone(pgid: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let left = group_members(pgid);
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes of group {pgid} left behind: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn unix_socket_replaces_listen() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let script = FAKE_DAEMON.replace("127.0.0.1:4567", "/tmp/fake.sock");
    let opts = options(&dir, &script).unix_socket("/tmp/fake.sock");
    let daemon = DaemonProcess::start(opts).await?;
    let pgid = daemon.pid();
    assert_eq!(daemon.base_url(), "unix:///tmp/fake.sock");
    assert_eq!(daemon.addr(), None);
    assert_eq!(daemon.unix_socket(), Some(Path::new("/tmp/fake.sock")));
    assert!(daemon
        .stderr()
        .contains("--unix-socket /tmp/fake.sock --allow-private-targets"));
    // Dropped without a word: the script and the `sleep` it started are gone.
    drop(daemon);
    assert_group_gone(pgid).await;
    Ok(())
}

#[tokio::test]
async fn kill9_reports_sigkill() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let mut daemon = DaemonProcess::start(options(&dir, FAKE_DAEMON)).await?;
    let status = daemon.kill9();
    assert_eq!(status.signal(), Some(9));
    // The `sleep` the script started in the background goes with it.
    assert_group_gone(daemon.pid()).await;
    assert_eq!(
        daemon.wait_exit(Duration::from_secs(1)).await?.signal(),
        Some(9)
    );
    assert!(
        daemon.signal("TERM").await.is_err(),
        "an exited daemon is never signalled"
    );
    Ok(())
}

#[tokio::test]
async fn exit_before_ready_is_an_error_with_stderr() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let err = DaemonProcess::start(options(&dir, REFUSING_DAEMON))
        .await
        .expect_err("the script exits 1");
    let message = format!("{err:#}");
    assert!(message.contains("database is locked"), "{message}");
    assert!(message.contains("1"), "{message}");
    Ok(())
}

#[tokio::test]
async fn not_ready_in_time_is_an_error() -> anyhow::Result<()> {
    for script in [SILENT_DAEMON, MUTE_DAEMON] {
        let dir = TempDir::new()?;
        let opts = options(&dir, script).ready_timeout(Duration::from_millis(300));
        let err = DaemonProcess::start(opts)
            .await
            .expect_err("the script never logs listening");
        let message = format!("{err:#}");
        assert!(message.contains("not ready within"), "{message}");
        assert!(message.contains("starting"), "{message}");
    }
    Ok(())
}

#[tokio::test]
async fn run_to_exit_returns_status_and_stderr() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let (status, stderr) = DaemonProcess::run_to_exit(options(&dir, REFUSING_DAEMON)).await?;
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("database is locked"), "{stderr}");

    let still_running = options(&dir, SILENT_DAEMON).ready_timeout(Duration::from_millis(200));
    let err = DaemonProcess::run_to_exit(still_running)
        .await
        .expect_err("a daemon that keeps running is an error");
    assert!(err.to_string().contains("still running"), "{err}");
    Ok(())
}

/// Options running `script` (written into `dir`) on a database in `dir`.
fn options(dir: &TempDir, script: &str) -> DaemonOptions {
    let path = write_script(dir.path(), script);
    DaemonOptions::new(dir.path().join("spool.db")).program(path)
}

fn write_script(dir: &Path, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("fake-spoold");
    std::fs::write(&path, script).expect("write the fake daemon");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
        .expect("make the fake daemon executable");
    path
}
