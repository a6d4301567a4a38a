//! systemd's notification protocol against a fake `NOTIFY_SOCKET` (a unix datagram socket the
//! test binds): `READY=1` once the API answers, `WATCHDOG=1` at half `WATCHDOG_USEC`,
//! `RELOADING=1` and `READY=1` around a SIGHUP, `STOPPING=1` when SIGTERM begins the shutdown.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use spool_testkit::{Api, DaemonProcess};
use tempfile::TempDir;

use crate::{process_opts, WAIT};

/// The next notification, within `WAIT`.
fn next(socket: &UnixDatagram) -> String {
    socket.set_read_timeout(Some(WAIT)).expect("read timeout");
    let mut buf = [0u8; 4096];
    let n = socket
        .recv(&mut buf)
        .expect("a notification within the wait");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Notifications until one starts with `prefix` (watchdog pings may come between), within
/// `WAIT`; that one.
fn until(socket: &UnixDatagram, prefix: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let said = next(socket);
        if said.starts_with(prefix) {
            return said;
        }
        assert!(Instant::now() < deadline, "no {prefix} (last: {said:?})");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn systemd_hears_ready_watchdog_reloading_and_stopping() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    let opts = process_opts(&dir)
        .env("NOTIFY_SOCKET", path.display().to_string())
        .env("WATCHDOG_USEC", "200000");
    let mut daemon = DaemonProcess::start(opts).await.expect("daemon");
    let socket = std::sync::Arc::new(socket);

    let ready = tokio::task::spawn_blocking({
        let socket = std::sync::Arc::clone(&socket);
        move || until(&socket, "READY=1")
    })
    .await
    .expect("reader");
    assert!(
        ready.contains("STATUS=listening on 127.0.0.1:"),
        "{ready:?}"
    );
    let (status, _) = Api::new(daemon.base_url())
        .get("0123456789abcdef0123456789abcdef")
        .await
        .expect("the API answers once ready");
    assert_eq!(status, 404);

    // Pinged at half the interval: several within a second.
    let started = Instant::now();
    let pings = tokio::task::spawn_blocking({
        let socket = std::sync::Arc::clone(&socket);
        move || {
            (0..3)
                .map(|_| until(&socket, "WATCHDOG=1"))
                .collect::<Vec<_>>()
        }
    })
    .await
    .expect("reader");
    assert!(pings.iter().all(|p| p == "WATCHDOG=1"), "{pings:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    daemon.signal("HUP").await.expect("SIGHUP");
    let (reloading, ready_again) = tokio::task::spawn_blocking({
        let socket = std::sync::Arc::clone(&socket);
        move || (until(&socket, "RELOADING=1"), until(&socket, "READY=1"))
    })
    .await
    .expect("reader");
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading:?}");
    assert!(ready_again.starts_with("READY=1"), "{ready_again:?}");

    let stopping = tokio::task::spawn_blocking({
        let socket = std::sync::Arc::clone(&socket);
        move || until(&socket, "STOPPING=1")
    });
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
    let stopping = stopping.await.expect("reader");
    assert!(stopping.starts_with("STOPPING=1"), "{stopping:?}");
}

/// `deploy/systemd/spoold.service` with its `ExecStart` binary replaced by `spoold`, and its
/// command line with the configuration file the package installs as /etc/spoold/spoold.toml
/// read from the repository (`deploy/spoold.toml`).
fn unit_for(spoold: &std::path::Path) -> (String, Vec<String>) {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let unit =
        std::fs::read_to_string(deploy.join("systemd/spoold.service")).expect("the unit file");
    let shipped = deploy.join("spoold.toml").display().to_string();
    let exec: Vec<String> = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart line")
        .split_whitespace()
        .map(|arg| arg.replace("/etc/spoold/spoold.toml", &shipped))
        .collect();
    let unit = unit.replace("/usr/bin/spoold", &spoold.display().to_string());
    (unit, exec)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_unit_file_verifies_and_its_command_line_is_accepted() {
    let spoold = spool_testkit::cargo_bin("spoold");
    let (unit, exec) = unit_for(&spoold);
    for wanted in [
        "Type=notify",
        "KillMode=mixed",
        "WatchdogSec=",
        "StateDirectory=spoold",
        "Delegate=yes",
        "--config /etc/spoold/spoold.toml",
    ] {
        assert!(unit.contains(wanted), "{wanted}");
    }
    // The flags it starts spoold with, and the configuration file the package ships, are ones
    // spoold takes; they keep the queue in the state directory and the API on loopback.
    let mut check = tokio::process::Command::new(&spoold);
    check.args(&exec[1..]).arg("--check-config");
    let out = spool_testkit::run_in_group(check, WAIT)
        .await
        .expect("spoold --check-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut print = tokio::process::Command::new(&spoold);
    print.args(&exec[1..]).arg("--print-config");
    let out = spool_testkit::run_in_group(print, WAIT)
        .await
        .expect("spoold --print-config");
    let effective = String::from_utf8_lossy(&out.stdout);
    for wanted in [
        r#"db = "/var/lib/spoold/spoold.db""#,
        r#"listen = "127.0.0.1:8080""#,
    ] {
        assert!(effective.contains(wanted), "{wanted}: {effective}");
    }

    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
    else {
        assert!(
            std::env::var_os("SPOOLD_REQUIRE_TOOLS").is_none(),
            "systemd-analyze is needed to verify the unit"
        );
        spool_testkit::skip::skipped(
            "systemd-analyze is missing: the unit file was not verified",
            "systemd's tools; SPOOLD_REQUIRE_TOOLS=1 makes this a failure",
        );
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let file = dir.path().join("spoold.service");
    std::fs::write(&file, unit).expect("write the unit");
    let mut verify = tokio::process::Command::new(analyze);
    verify.arg("verify").arg(&file);
    let out = spool_testkit::run_in_group(verify, WAIT)
        .await
        .expect("systemd-analyze verify");
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
