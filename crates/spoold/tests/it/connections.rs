//! The control API's connection limits, against the real binary over raw TCP: a head that does
//! not arrive in time (slowloris) and an idle keep-alive connection are closed after
//! `--header-read-timeout`, and `--max-connections` caps what is open at once while the daemon
//! keeps serving the connections it has.

use std::time::Duration;

use spool_testkit::{DaemonOptions, DaemonProcess};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::db_path;

async fn daemon(dir: &TempDir, args: &[&str]) -> DaemonProcess {
    DaemonProcess::start(DaemonOptions::new(db_path(dir)).args(args.iter().copied()))
        .await
        .expect("daemon")
}

async fn connect(daemon: &DaemonProcess) -> TcpStream {
    TcpStream::connect(daemon.addr().expect("a TCP address"))
        .await
        .expect("connect")
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// Send a request on `conn` and read until its response's body (`{"status":"ok"}`) is in.
async fn healthz(conn: &mut TcpStream) -> String {
    conn.write_all(HEALTHZ).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(
            n > 0,
            "closed before the answer: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Whether the server closes `conn` within `within` (reads until EOF or an error).
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(within, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn heads_that_do_not_arrive_and_idle_connections_are_closed() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = daemon(&dir, &["--header-read-timeout", "1s"]).await;
    // Fifty clients: nothing, or half a head, then silence.
    let mut slow = Vec::new();
    for i in 0..50 {
        let mut conn = connect(&daemon).await;
        if i % 2 == 1 {
            conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .await
                .expect("write");
        }
        slow.push(conn);
    }
    // Meanwhile others are served.
    let mut fresh = connect(&daemon).await;
    assert!(healthz(&mut fresh).await.starts_with("HTTP/1.1 200"));
    for (i, conn) in slow.iter_mut().enumerate() {
        assert!(
            closed_within(conn, Duration::from_secs(5)).await,
            "slow connection {i} is still open"
        );
    }
    // A keep-alive connection idle after its response is closed too.
    assert!(
        closed_within(&mut fresh, Duration::from_secs(5)).await,
        "an idle keep-alive connection is still open"
    );
    // One that keeps asking stays open past the timeout.
    let mut busy = connect(&daemon).await;
    for _ in 0..6 {
        healthz(&mut busy).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_the_cap_wait_for_a_free_one() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = daemon(
        &dir,
        &["--max-connections", "3", "--header-read-timeout", "30s"],
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = connect(&daemon).await;
        healthz(&mut conn).await;
        held.push(conn);
    }
    // The fourth is accepted by the kernel, not by the daemon: no answer while three are open.
    let mut fourth = connect(&daemon).await;
    fourth.write_all(HEALTHZ).await.expect("write");
    let mut buf = [0u8; 256];
    assert!(
        tokio::time::timeout(Duration::from_millis(700), fourth.read(&mut buf))
            .await
            .is_err(),
        "a fourth connection was served with the cap at 3"
    );
    // The open ones are still served; once one closes, the fourth is answered.
    healthz(&mut held[0]).await;
    drop(held.pop());
    let mut got = Vec::new();
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = tokio::time::timeout(Duration::from_secs(10), fourth.read(&mut buf))
            .await
            .expect("answered once a connection closed")
            .expect("read");
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
}
