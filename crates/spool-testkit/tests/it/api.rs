//! Api: routes, bodies and `wait_status`, checked against the scripted receiver.

use std::time::Duration;

use serde_json::json;
use spool_testkit::{Api, Receiver, Reply};

#[tokio::test]
async fn routes_and_bodies() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.respond_with(Reply::status(200).body(r#"{"ok":true}"#));
    let api = Api::new(receiver.url("/"));

    assert_eq!(
        api.create(json!({"targetUrl": "x"})).await?,
        (200, json!({"ok": true}))
    );
    api.create_raw("{not json").await?;
    api.get("d1").await?;
    api.list("").await?;
    api.list("?status=failed&limit=2").await?;
    api.cancel("d1").await?;
    api.retry("d1").await?;
    api.attempts("d1").await?;

    let seen: Vec<_> = receiver
        .requests()
        .into_iter()
        .map(|r| {
            let target = match &r.query {
                Some(q) => format!("{} {}?{q}", r.method, r.path),
                None => format!("{} {}", r.method, r.path),
            };
            (target, r.body_text())
        })
        .collect();
    let expected = [
        ("POST /v1/deliveries", r#"{"targetUrl":"x"}"#),
        ("POST /v1/deliveries", "{not json"),
        ("GET /v1/deliveries/d1", ""),
        ("GET /v1/deliveries", ""),
        ("GET /v1/deliveries?status=failed&limit=2", ""),
        ("POST /v1/deliveries/d1/cancel", ""),
        ("POST /v1/deliveries/d1/retry", ""),
        ("GET /v1/deliveries/d1/attempts", ""),
    ]
    .map(|(t, b)| (t.to_owned(), b.to_owned()));
    assert_eq!(seen, expected);
    Ok(())
}

#[tokio::test]
async fn non_json_and_empty_bodies() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.push_replies([Reply::status(502).body("bad gateway"), Reply::status(204)]);
    let api = Api::new(receiver.url(""));
    assert_eq!(api.get("x").await?, (502, json!("bad gateway")));
    assert_eq!(api.get("x").await?, (204, serde_json::Value::Null));
    Ok(())
}

#[tokio::test]
async fn wait_status_polls_until_wanted() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    let body = |status: &str| json!({"id": "d1", "status": status}).to_string();
    receiver.push_replies([
        Reply::status(200).body(body("pending")),
        Reply::status(200).body(body("in_flight")),
    ]);
    receiver.respond_with(Reply::status(200).body(body("succeeded")));
    let api = Api::new(receiver.url(""));
    let delivery = api
        .wait_status("d1", &["succeeded", "failed"], Duration::from_secs(5))
        .await?;
    assert_eq!(delivery["status"], "succeeded");
    assert_eq!(receiver.requests().len(), 3);
    Ok(())
}

#[tokio::test]
async fn wait_status_times_out_with_last_seen() -> anyhow::Result<()> {
    let receiver = Receiver::start().await?;
    receiver.respond_with(Reply::status(200).body(r#"{"status":"pending"}"#));
    let err = Api::new(receiver.url(""))
        .wait_status("d1", &["succeeded"], Duration::from_millis(100))
        .await
        .expect_err("never succeeds");
    assert!(err.to_string().contains(r#""status":"pending""#), "{err}");
    Ok(())
}
