//! Remote API: commits and each create behaviour (answer, status, stall, reset), one-shot
//! scripts, search by fingerprint with each search behaviour, and cleanup on drop.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use spool_testkit::{CreateBehavior, RemoteApi, SearchBehavior};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn answer_commits_then_returns_the_id() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    let response = client(WAIT)
        .post(remote.url("/records"))
        .header("X-Spoold-Delivery-ID", "dlv-1")
        .header("X-Spoold-Attempt", "2")
        .body(r#"{"fingerprint":"fp-1","n":1}"#)
        .send()
        .await?;
    assert_eq!(response.status(), 201);
    assert_eq!(content_type(&response), "application/json");
    let body: Value = serde_json::from_slice(&response.bytes().await?)?;
    assert_eq!(body, json!({ "id": "rec-1", "fingerprint": "fp-1" }));

    assert_eq!(remote.creates(), 1);
    let records = remote.records();
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!(record.id, "rec-1");
    assert_eq!(record.fingerprint.as_deref(), Some("fp-1"));
    assert_eq!(record.body, br#"{"fingerprint":"fp-1","n":1}"#);
    assert_eq!(record.delivery_id.as_deref(), Some("dlv-1"));
    assert_eq!(record.attempt, Some(2));
    assert!(record.committed_at.elapsed() < WAIT);
    Ok(())
}

#[tokio::test]
async fn fingerprint_from_body_else_header_else_none() -> anyhow::Result<()> {
    async fn check(body: &str, header: Option<&str>, expected: Option<&str>) -> anyhow::Result<()> {
        let remote = RemoteApi::start().await;
        let mut request = client(WAIT)
            .post(remote.url("/records"))
            .body(body.to_owned());
        if let Some(header) = header {
            request = request.header("X-Fingerprint", header);
        }
        let response = request.send().await?;
        assert_eq!(response.status(), 201, "{body} {header:?}");
        let answer: Value = serde_json::from_slice(&response.bytes().await?)?;
        assert_eq!(answer["fingerprint"], json!(expected), "{body} {header:?}");
        let records = remote.records();
        assert_eq!(
            records[0].fingerprint.as_deref(),
            expected,
            "{body} {header:?}"
        );
        Ok(())
    }
    check(r#"{"fingerprint":"body"}"#, Some("header"), Some("body")).await?;
    check(r#"{"fingerprint":"body"}"#, None, Some("body")).await?;
    check(r#"{"n":1}"#, Some("header"), Some("header")).await?;
    check(r#"{"fingerprint":7}"#, Some("header"), Some("header")).await?;
    check("not json", Some("header"), Some("header")).await?;
    check("not json", None, None).await?;
    check("", None, None).await?;
    Ok(())
}

#[tokio::test]
async fn status_answers_without_commit_commit_then_status_commits() -> anyhow::Result<()> {
    async fn check(behavior: CreateBehavior, status: u16, committed: usize) -> anyhow::Result<()> {
        let remote = RemoteApi::start().await;
        remote.set_create(behavior);
        let response = client(WAIT)
            .post(remote.url("/records"))
            .body(r#"{"fingerprint":"fp"}"#)
            .send()
            .await?;
        assert_eq!(response.status(), status, "{behavior:?}");
        let body: Value = serde_json::from_slice(&response.bytes().await?)?;
        assert!(body["error"].is_string(), "{behavior:?}: {body}");
        assert_eq!(remote.creates(), 1, "{behavior:?}");
        assert_eq!(remote.records().len(), committed, "{behavior:?}");
        Ok(())
    }
    for status in [400, 408, 500, 503] {
        check(CreateBehavior::Status(status), status, 0).await?;
        check(CreateBehavior::CommitThenStatus(status), status, 1).await?;
    }
    Ok(())
}

#[tokio::test]
async fn one_shot_behaviours_come_first_in_order() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::CommitThenStatus(500));
    remote.set_create_once(CreateBehavior::Status(503));
    remote.set_create_once(CreateBehavior::Answer);
    let client = client(WAIT);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let response = client
            .post(remote.url("/records"))
            .body("{}")
            .send()
            .await?;
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [503, 201, 500, 500]);
    assert_eq!(remote.creates(), 4);
    let ids: Vec<String> = remote.records().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["rec-1", "rec-2", "rec-3"]);
    Ok(())
}

#[tokio::test]
async fn stall_commits_and_never_answers() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Stall);
    let started = Instant::now();
    let outcome = client(Duration::from_millis(300))
        .post(remote.url("/records"))
        .body(r#"{"fingerprint":"fp"}"#)
        .send()
        .await;
    let error = outcome.expect_err("a stalled create never answers");
    assert!(error.is_timeout(), "{error:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(remote.creates(), 1);
    assert_eq!(remote.records()[0].fingerprint.as_deref(), Some("fp"));
    Ok(())
}

#[tokio::test]
async fn reset_commits_then_resets_the_connection() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Reset);
    let outcome = client(WAIT)
        .post(remote.url("/records"))
        .body(r#"{"fingerprint":"fp"}"#)
        .send()
        .await;
    let error = outcome.expect_err("a reset create never answers");
    assert!(chain(&error).contains("reset"), "{}", chain(&error));
    assert_eq!(remote.creates(), 1);
    assert_eq!(remote.records()[0].fingerprint.as_deref(), Some("fp"));

    // On a raw connection: not one response byte, then a reset rather than an end of stream.
    let mut stream = TcpStream::connect(remote.addr()).await?;
    let body = r#"{"fingerprint":"raw"}"#;
    let request = format!(
        "POST /records HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut received = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut received)).await?;
    let error = read.expect_err("a reset connection fails the read");
    assert_eq!(error.kind(), ErrorKind::ConnectionReset, "{error}");
    assert!(received.is_empty(), "{received:?}");
    assert_eq!(remote.creates(), 2);
    assert_eq!(remote.records()[1].fingerprint.as_deref(), Some("raw"));
    Ok(())
}

#[tokio::test]
async fn honest_search_lists_the_matches() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    for fingerprint in ["a b/c", "a b/c", "other"] {
        create(&remote, fingerprint).await?;
    }
    async fn check(remote: &RemoteApi, query: &str, expected: Value) -> anyhow::Result<()> {
        let (status, body) = search(remote, query).await?;
        assert_eq!(
            (status, body),
            (200, json!({ "data": expected })),
            "{query}"
        );
        Ok(())
    }
    check(
        &remote,
        "?fingerprint=a%20b%2Fc",
        json!([
            { "id": "rec-1", "fingerprint": "a b/c" },
            { "id": "rec-2", "fingerprint": "a b/c" },
        ]),
    )
    .await?;
    check(
        &remote,
        "?fingerprint=other",
        json!([{ "id": "rec-3", "fingerprint": "other" }]),
    )
    .await?;
    check(&remote, "?fingerprint=none", json!([])).await?;
    check(
        &remote,
        "",
        json!([
            { "id": "rec-1", "fingerprint": "a b/c" },
            { "id": "rec-2", "fingerprint": "a b/c" },
            { "id": "rec-3", "fingerprint": "other" },
        ]),
    )
    .await?;
    assert_eq!(remote.searches(), 4);
    Ok(())
}

#[tokio::test]
async fn duplicate_search_lists_each_match_twice() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    create(&remote, "fp").await?;
    create(&remote, "other").await?;
    remote.set_search(SearchBehavior::Duplicate);
    let (status, body) = search(&remote, "?fingerprint=fp").await?;
    let expected = json!({ "data": [
        { "id": "rec-1", "fingerprint": "fp" },
        { "id": "rec-1-dup", "fingerprint": "fp" },
    ]});
    assert_eq!((status, body), (200, expected));
    Ok(())
}

#[tokio::test]
async fn lagging_search_hides_recent_commits() -> anyhow::Result<()> {
    let lag = Duration::from_millis(300);
    let remote = RemoteApi::start().await;
    remote.set_search(SearchBehavior::Lag(lag));
    create(&remote, "fp").await?;
    let committed_at = remote.records()[0].committed_at;
    let (status, body) = search(&remote, "?fingerprint=fp").await?;
    assert_eq!((status, body), (200, json!({ "data": [] })));

    // Time passing is the point here: poll until the record shows, bounded.
    let shown = loop {
        let (_, body) = search(&remote, "?fingerprint=fp").await?;
        if body["data"].as_array().is_some_and(|data| !data.is_empty()) {
            break body;
        }
        assert!(committed_at.elapsed() < WAIT, "the record never showed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(committed_at.elapsed() >= lag);
    assert_eq!(
        shown,
        json!({ "data": [{ "id": "rec-1", "fingerprint": "fp" }] })
    );
    Ok(())
}

#[tokio::test]
async fn failing_search_answers_the_status() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    create(&remote, "fp").await?;
    remote.set_search(SearchBehavior::Fail(500));
    let (status, body) = search(&remote, "?fingerprint=fp").await?;
    assert_eq!(status, 500);
    assert!(body["error"].is_string(), "{body}");
    assert_eq!(remote.searches(), 1);
    Ok(())
}

#[tokio::test]
async fn not_json_search_answers_html() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    create(&remote, "fp").await?;
    remote.set_search(SearchBehavior::NotJson);
    let response = client(WAIT)
        .get(remote.url("/records?fingerprint=fp"))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(content_type(&response), "text/html");
    assert_eq!(response.text().await?, "<html>oops</html>");
    Ok(())
}

#[tokio::test]
async fn anything_else_is_a_json_404() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    let client = client(WAIT);
    for request in [
        client.get(remote.url("/")),
        client.get(remote.url("/records/rec-1")),
        client.put(remote.url("/records")),
        client.delete(remote.url("/records")),
    ] {
        let response = request.send().await?;
        assert_eq!(response.status(), 404);
        let body: Value = serde_json::from_slice(&response.bytes().await?)?;
        assert_eq!(body, json!({ "error": "not found" }));
    }
    assert_eq!((remote.creates(), remote.searches()), (0, 0));
    Ok(())
}

#[tokio::test]
async fn wait_for_creates_is_bounded() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    let started = Instant::now();
    assert!(!remote.wait_for_creates(1, Duration::from_millis(100)).await);
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(started.elapsed() < WAIT);

    remote.set_create(CreateBehavior::Status(503));
    let url = remote.url("/records");
    let request = tokio::spawn(async move { client(WAIT).post(url).body("{}").send().await });
    assert!(remote.wait_for_creates(1, WAIT).await);
    assert_eq!(request.await??.status(), 503);
    assert!(remote.wait_for_creates(0, Duration::ZERO).await);
    Ok(())
}

#[tokio::test]
async fn drop_closes_stalled_connections_and_the_port() -> anyhow::Result<()> {
    let remote = RemoteApi::start().await;
    remote.set_create(CreateBehavior::Stall);
    let url = remote.url("/records");
    let request = tokio::spawn(async move { client(WAIT * 2).post(url).body("{}").send().await });
    assert!(remote.wait_for_creates(1, WAIT).await);
    let addr = remote.addr();
    drop(remote);

    let outcome = tokio::time::timeout(WAIT, request).await??;
    let error = outcome.expect_err("a dropped remote never answers");
    assert!(!error.is_timeout(), "{error:?}");
    match TcpStream::connect(addr).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("a dropped remote still accepts on {addr}"),
    }
    Ok(())
}

fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("a proxy-less reqwest client builds")
}

fn content_type(response: &reqwest::Response) -> &str {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

async fn create(remote: &RemoteApi, fingerprint: &str) -> anyhow::Result<()> {
    let response = client(WAIT)
        .post(remote.url("/records"))
        .body(json!({ "fingerprint": fingerprint }).to_string())
        .send()
        .await?;
    anyhow::ensure!(response.status() == 201, "create: {}", response.status());
    Ok(())
}

async fn search(remote: &RemoteApi, query: &str) -> anyhow::Result<(u16, Value)> {
    let response = client(WAIT)
        .get(remote.url(&format!("/records{query}")))
        .send()
        .await?;
    let status = response.status().as_u16();
    Ok((status, serde_json::from_slice(&response.bytes().await?)?))
}

/// The error and its sources, for failure messages.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
