//! `spoolctl send` while the daemon cannot be reached: dropped into the maildrop (exit 0),
//! picked up when the daemon runs, delivered once — from many processes at once with the daemon
//! down, and from a send loop across daemon restarts (SIGTERM and kill -9 alternated).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use spool_testkit::{DaemonOptions, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::spoolctl;

/// `spoolctl send` of `{"n": n}` to `target` through `server`, dropping into `maildrop`.
fn send(server: &str, maildrop: &Path, target: &str, n: u32, key: bool) -> std::process::Output {
    let mut cmd: Command = spoolctl();
    cmd.args([
        "send",
        target,
        "-d",
        &format!("{{\"n\":{n}}}"),
        "--server",
        server,
    ])
    .env("SPOOLD_MAILDROP", maildrop);
    if key {
        cmd.args(["--idempotency-key", &format!("job-{n}")]);
    }
    cmd.output().expect("spoolctl runs")
}

/// The `n` of each request the receiver got, with the delivery ids it came as.
fn received(r: &Receiver) -> BTreeMap<u64, BTreeSet<String>> {
    let mut seen: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for q in r.requests() {
        let n = serde_json::from_slice::<serde_json::Value>(&q.body)
            .ok()
            .and_then(|v| v["n"].as_u64())
            .expect("a body with n");
        let id = q.header("X-Spoold-Delivery-ID").unwrap_or("?").to_owned();
        seen.entry(n).or_default().insert(id);
    }
    seen
}

fn daemon_opts(dir: &TempDir, socket: &Path, maildrop: &Path) -> DaemonOptions {
    DaemonOptions::new(dir.path().join("data/spoold.db"))
        .unix_socket(socket)
        .args(["--retry-base", "100ms", "--retry-cap", "200ms"])
        .args(["--maildrop".to_owned(), maildrop.display().to_string()])
}

/// With the daemon down, 8 processes send 25 requests each (half with idempotency keys): every
/// send exits 0 saying it dropped its request; the daemon, started, delivers each one once.
#[tokio::test(flavor = "multi_thread")]
async fn sends_while_the_daemon_is_down_are_each_delivered_once() {
    let dir = TempDir::new().expect("temp dir");
    let maildrop = dir.path().join("maildrop");
    std::fs::create_dir(&maildrop).expect("maildrop");
    let socket = dir.path().join("api.sock");
    let server = format!("unix://{}", socket.display());
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200));
    let target = r.url("/hook");
    let senders: Vec<_> = (0..8u32)
        .map(|p| {
            let (server, maildrop, target) = (server.clone(), maildrop.clone(), target.clone());
            std::thread::spawn(move || {
                (0..25u32)
                    .map(|i| {
                        let n = p * 100 + i;
                        let out = send(&server, &maildrop, &target, n, i % 2 == 0);
                        (n, out)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for sender in senders {
        for (n, out) in sender.join().expect("a sender") {
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && said.starts_with("dropped "),
                "send {n}: {out:?}"
            );
        }
    }
    // Something that is no drop, refused at pickup and listed by `spoolctl maildrop`.
    std::fs::write(maildrop.join("notes.txt"), b"hello").expect("write");
    let daemon = DaemonProcess::start(daemon_opts(&dir, &socket, &maildrop))
        .await
        .expect("daemon");
    r.wait_for_requests(200, Duration::from_secs(60))
        .await
        .expect("every drop delivered");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = received(&r);
    assert_eq!(seen.len(), 200, "every send delivered");
    assert!(
        seen.values().all(|ids| ids.len() == 1),
        "a send delivered as two deliveries: {seen:?}"
    );
    assert_eq!(r.requests().len(), 200, "a delivery sent twice");
    let out = spoolctl()
        .args(["maildrop", "--server", &server])
        .output()
        .expect("spoolctl runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.starts_with(&format!(
            "maildrop {}: 0 waiting, 1 refused",
            maildrop.display()
        )),
        "{said}"
    );
    assert!(
        said.lines()
            .any(|l| l.contains("bad_name") && l.contains("notes.txt")),
        "{said}"
    );
    drop(daemon);
}

/// A send loop across six restarts of the daemon — SIGTERM and kill -9 alternated — never
/// exits 1 (a send without an answer is dropped, with the id it was sent with), loses nothing
/// and makes no request two deliveries.
#[tokio::test(flavor = "multi_thread")]
async fn a_send_loop_across_restarts_loses_nothing() {
    let dir = TempDir::new().expect("temp dir");
    let maildrop = dir.path().join("maildrop");
    std::fs::create_dir(&maildrop).expect("maildrop");
    let socket = dir.path().join("api.sock");
    let server = format!("unix://{}", socket.display());
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200));
    let target = r.url("/hook");
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (stop, server, maildrop) = (Arc::clone(&stop), server.clone(), maildrop.clone());
        std::thread::spawn(move || {
            let mut results = Vec::new();
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                results.push((n, send(&server, &maildrop, &target, n, false)));
                n += 1;
            }
            results
        })
    };
    let mut daemon = DaemonProcess::start(daemon_opts(&dir, &socket, &maildrop))
        .await
        .expect("daemon");
    for cycle in 0..6 {
        tokio::time::sleep(Duration::from_millis(700)).await;
        if cycle % 2 == 0 {
            daemon.terminate().await.expect("SIGTERM");
        } else {
            daemon.kill9();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        daemon = DaemonProcess::start(daemon_opts(&dir, &socket, &maildrop))
            .await
            .expect("restart");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let results = tokio::task::spawn_blocking(move || sender.join().expect("the sender"))
        .await
        .expect("join");
    let failed: Vec<_> = results
        .iter()
        .filter(|(_, out)| !out.status.success())
        .collect();
    assert!(failed.is_empty(), "sends that failed: {failed:?}");
    let dropped = results
        .iter()
        .filter(|(_, out)| String::from_utf8_lossy(&out.stdout).starts_with("dropped "))
        .count();
    let sent = results.len();
    r.wait_for_requests(sent, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{sent} sends ({dropped} dropped) not all delivered: {e}"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = received(&r);
    let missing: Vec<u32> = (0..sent as u32)
        .filter(|n| !seen.contains_key(&u64::from(*n)))
        .collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
    let twice: Vec<_> = seen.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(twice.is_empty(), "one send, two deliveries: {twice:?}");
    assert!(sent > 20, "only {sent} sends in the loop");
    drop(daemon);
}
