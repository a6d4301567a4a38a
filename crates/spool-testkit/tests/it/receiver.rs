//! Receiver: recording, scripted replies, hang, stop and restart on the same port.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use http::Method;
use spool_testkit::{Api, Receiver, Reply};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn records_requests() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let client = Api::new(receiver.url(""));
    let (status, _, body) = client
        .request(Method::PUT, "/hook/a?x=1&y=2", Some(b"{\"n\":1}".to_vec()))
        .await?;
    assert_eq!((status, body.len()), (200, 0));

    let seen = receiver.wait_for_requests(1, WAIT).await?;
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(request.method, "PUT");
    assert_eq!(request.path, "/hook/a");
    assert_eq!(request.query.as_deref(), Some("x=1&y=2"));
    assert_eq!(request.header("content-type"), Some("application/json"));
    assert_eq!(request.body_text(), "{\"n\":1}");
    assert_eq!(
        receiver.url("/p"),
        format!("http://127.0.0.1:{}/p", receiver.port())
    );
    Ok(())
}

#[tokio::test]
async fn scripted_replies_in_order_then_default() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.respond_with(Reply::status(202).body("default"));
    receiver.push_replies(vec![
        Reply::status(503).header("Retry-After", "1"),
        Reply::status(429).body("slow down"),
    ]);
    let client = Api::new(receiver.url(""));
    let mut answers = Vec::new();
    for _ in 0..4 {
        let (status, headers, body) = client.request(Method::POST, "/", None).await?;
        let retry_after = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        answers.push((status, retry_after, String::from_utf8(body.to_vec())?));
    }
    let expected = [
        (503, Some("1".to_owned()), String::new()),
        (429, None, "slow down".to_owned()),
        (202, None, "default".to_owned()),
        (202, None, "default".to_owned()),
    ];
    assert_eq!(answers, expected);
    assert_eq!(receiver.requests().len(), 4);
    Ok(())
}

#[tokio::test]
async fn delayed_reply_waits() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.push_replies([Reply::status(200).delay(Duration::from_millis(150))]);
    let started = Instant::now();
    let (status, _, _) = Api::new(receiver.url(""))
        .request(Method::GET, "/slow", None)
        .await?;
    assert_eq!(status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
    Ok(())
}

#[tokio::test]
async fn hung_request_fails_when_stopped() -> anyhow::Result<()> {
    let mut receiver = Receiver::start().await?;
    receiver.respond_with(Reply::hang());
    let client = Api::new(receiver.url(""));
    let pending = tokio::spawn(async move { client.request(Method::POST, "/hang", None).await });
    receiver.wait_for_requests(1, WAIT).await?;
    receiver.stop().await;
    let outcome = tokio::time::timeout(WAIT, pending).await??;
    assert!(
        outcome.is_err(),
        "a hung request must fail on stop: {outcome:?}"
    );
    Ok(())
}

#[tokio::test]
async fn stopped_receiver_refuses_then_restarts_on_same_port() -> anyhow::Result<()> {
    let mut receiver = Receiver::start().await?;
    let port = receiver.port();
    let client = Api::new(receiver.url(""));
    client.request(Method::GET, "/before", None).await?;
    receiver.stop().await;
    assert_refused(port).await;
    assert!(client.request(Method::GET, "/down", None).await.is_err());

    let again = Receiver::start_on(port).await?;
    assert_eq!(again.port(), port);
    let (status, _, _) = client.request(Method::GET, "/after", None).await?;
    assert_eq!(status, 200);
    assert_eq!(again.wait_for_requests(1, WAIT).await?[0].path, "/after");
    Ok(())
}

#[tokio::test]
async fn restart_keeps_script_and_recordings() -> anyhow::Result<()> {
    let mut receiver = Receiver::start().await?;
    receiver.respond_with(Reply::status(204));
    let client = Api::new(receiver.url(""));
    client.request(Method::GET, "/one", None).await?;
    receiver.stop().await;
    assert_refused(receiver.port()).await;
    receiver.restart().await?;
    let (status, _, _) = client.request(Method::GET, "/two", None).await?;
    assert_eq!(status, 204);
    let paths: Vec<_> = receiver.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/one", "/two"]);
    Ok(())
}

#[tokio::test]
async fn wait_for_requests_times_out_with_what_it_saw() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    Api::new(receiver.url(""))
        .request(Method::GET, "/only", None)
        .await?;
    let err = receiver
        .wait_for_requests(2, Duration::from_millis(100))
        .await
        .expect_err("only one request was sent");
    assert!(err.to_string().contains("GET /only"), "{err}");
    Ok(())
}

#[tokio::test]
async fn refusing_port_refuses() {
    assert_refused(Receiver::refusing_port()).await;
}

/// A refusing port stays taken while the test runs: the OS hands it to no receiver started
/// meanwhile (nor to any other socket bound to port 0), and it still refuses afterwards; a
/// receiver can come up on it on purpose.
#[tokio::test]
async fn refusing_port_is_not_handed_out_again() -> anyhow::Result<()> {
    let port = Receiver::refusing_port();
    // Asked for by number, as a receiver coming up on it would be: taken.
    let taken = std::net::TcpListener::bind(("127.0.0.1", port))
        .expect_err("a refusing port is still bound by the testkit");
    assert_eq!(taken.kind(), ErrorKind::AddrInUse, "{taken}");
    let mut others = Vec::new();
    for _ in 0..200 {
        let receiver = Receiver::start().await?;
        assert_ne!(receiver.port(), port);
        others.push(receiver);
    }
    assert_refused(port).await;
    let back = Receiver::start_on(port).await?;
    let (status, _, _) = Api::new(back.url(""))
        .request(Method::GET, "/up", None)
        .await?;
    assert_eq!(status, 200);
    Ok(())
}

async fn assert_refused(port: u16) {
    match TcpStream::connect(("127.0.0.1", port)).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("127.0.0.1:{port} accepted a connection"),
    }
}
