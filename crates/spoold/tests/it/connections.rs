//! The control API's connection limits, against the real binary over raw TCP: a head that does
//! not arrive in time (slowloris) and an idle keep-alive connection are closed after
//! `--header-read-timeout`, a body that trickles in is answered 408 and closed after
//! `--body-read-timeout` (and a whole body in time is served) or at once on shutdown, and
//! `--max-connections` caps what is open at once while the daemon keeps serving the connections
//! it has.

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

/// Read what the server sends on `conn` until it closes it (at most `within`).
async fn read_to_close(conn: &mut TcpStream, within: Duration) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let _ = tokio::time::timeout(within, async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_trickles_in_is_answered_408_and_closed() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = daemon(&dir, &["--body-read-timeout", "1s"]).await;
    let body = br#"{"targetUrl":"http://127.0.0.1:9/hook","notBefore":"2099-01-01T00:00:00Z"}"#;
    let head = format!(
        "POST /v1/deliveries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    // Slow bodies: one announced by its length, one chunked; each sends a few bytes and stops.
    let mut slow = Vec::new();
    for chunked in [false, true] {
        let mut conn = connect(&daemon).await;
        let start = if chunked {
            "POST /v1/deliveries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Transfer-Encoding: chunked\r\n\r\n5\r\n{\"tar\r\n"
                .to_owned()
        } else {
            format!("{head}{{\"tar")
        };
        conn.write_all(start.as_bytes()).await.expect("write");
        slow.push(conn);
    }
    // Meanwhile a whole body sent in pieces, within the time, is served.
    let mut patient = connect(&daemon).await;
    patient.write_all(head.as_bytes()).await.expect("write");
    for piece in body.chunks(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        patient.write_all(piece).await.expect("write");
    }
    let mut answer = [0u8; 12];
    patient.read_exact(&mut answer).await.expect("read");
    assert_eq!(
        &answer,
        b"HTTP/1.1 201",
        "{}",
        String::from_utf8_lossy(&answer)
    );

    let started = std::time::Instant::now();
    for conn in &mut slow {
        let answer = read_to_close(conn, Duration::from_secs(10)).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("\"request_timeout\""), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the slow bodies were not cut off in time: {:?}",
        started.elapsed()
    );
    // Nothing of the slow requests was stored: one delivery, the patient one.
    let mut conn = connect(&daemon).await;
    conn.write_all(b"GET /v1/deliveries HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let listing = read_to_close(&mut conn, Duration::from_secs(10)).await;
    assert_eq!(listing.matches("\"targetUrl\"").count(), 1, "{listing}");
}

/// A shutdown does not wait for bodies still arriving: each such request is answered 503
/// `shutting_down` (nothing of it done) and its connection closed, and the daemon exits well
/// within `--body-read-timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_shutdown_cuts_off_bodies_still_arriving() {
    let dir = TempDir::new().expect("temp dir");
    let mut daemon = daemon(&dir, &["--body-read-timeout", "1h"]).await;
    let mut slow = Vec::new();
    for _ in 0..3 {
        let mut conn = connect(&daemon).await;
        conn.write_all(
            b"POST /v1/deliveries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
              Content-Length: 2147483648\r\n\r\n{\"tar",
        )
        .await
        .expect("write");
        slow.push(conn);
    }
    // The heads are read (the requests are in progress) before the shutdown begins.
    let mut other = connect(&daemon).await;
    healthz(&mut other).await;
    let started = std::time::Instant::now();
    daemon.signal("TERM").await.expect("SIGTERM");
    for conn in &mut slow {
        let answer = read_to_close(conn, Duration::from_secs(20)).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(answer.contains("\"shutting_down\""), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("connection: close"),
            "{answer}"
        );
    }
    let status = daemon
        .wait_exit(Duration::from_secs(20))
        .await
        .expect("the daemon exits without waiting for the bodies");
    assert!(status.success(), "{status:?}\n{}", daemon.stderr());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the shutdown waited for the bodies: {:?}",
        started.elapsed()
    );
}

/// A client streaming a huge body (2 GiB announced, chunked or not) is refused once the limit
/// is passed and its connection closed; the daemon does not read, let alone keep, the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_past_the_size_limit_is_refused_and_not_read_to_its_end() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = daemon(&dir, &[]).await;
    for chunked in [false, true] {
        let mut conn = connect(&daemon).await;
        let framing = if chunked {
            "Transfer-Encoding: chunked".to_owned()
        } else {
            format!("Content-Length: {}", 2u64 << 30)
        };
        let head = format!(
            "POST /v1/deliveries HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             {framing}\r\n\r\n"
        );
        conn.write_all(head.as_bytes()).await.expect("write");
        let (mut reader, mut writer) = conn.into_split();
        // Keep sending 64 KiB pieces until the server stops taking them (at most 64 MiB).
        let sender = tokio::spawn(async move {
            let piece = vec![b'x'; 64 * 1024];
            let chunk = format!("{:x}\r\n", piece.len());
            let mut sent = 0usize;
            while sent < 64 << 20 {
                let wrote = if chunked {
                    writer
                        .write_all(chunk.as_bytes())
                        .await
                        .and(writer.write_all(&piece).await)
                        .and(writer.write_all(b"\r\n").await)
                } else {
                    writer.write_all(&piece).await
                };
                if wrote.is_err() {
                    break;
                }
                sent += piece.len();
            }
            sent
        });
        let mut answer = Vec::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(20), reader.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert!(
            answer.starts_with("HTTP/1.1 400"),
            "chunked {chunked}: {answer}"
        );
        assert!(answer.contains("too large"), "{answer}");
        let sent = tokio::time::timeout(Duration::from_secs(20), sender)
            .await
            .expect("the server stops reading")
            .expect("sender");
        assert!(
            sent < 64 << 20,
            "chunked {chunked}: the server read all of 64 MiB instead of closing"
        );
    }
}
