//! Redirects under the address policy, and the bearer-token control plane.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;
use spool_testkit::{Receiver, Reply};

use crate::{id_of, InProcess, Targets, WAIT};

async fn redirecting(status: u16, to: &str) -> Receiver {
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(status).header("Location", to));
    r
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_keep_method_and_body_only_for_307_and_308() {
    let d = InProcess::boot(&["--max-redirects", "3"]).await;
    for (status, want_method, want_body) in [
        (307, "POST", "{\"k\":1}"),
        (308, "POST", "{\"k\":1}"),
        (301, "GET", ""),
        (302, "GET", ""),
        (303, "GET", ""),
    ] {
        let end = Receiver::start().await.expect("receiver");
        let hop = redirecting(status, &end.url("/end")).await;
        let request = json!({"targetUrl": hop.url("/start"), "body": {"k": 1},
                             "headers": {"Authorization": "Bearer t", "Cookie": "c=1",
                                         "Proxy-Authorization": "Basic p", "X-Api-Key": "k",
                                         "X-Webhook-Secret": "s", "X-Auth-Token": "t",
                                         "X-Keep": "yes"}});
        d.deliver(request, &["succeeded"]).await;
        let seen = end.requests();
        assert_eq!(seen.len(), 1, "{status}");
        assert_eq!(seen[0].method, want_method, "{status}");
        assert_eq!(seen[0].body_text(), want_body, "{status}");
        // Another port is another origin: every header `get` masks as a secret stays behind.
        for secret in [
            "Authorization",
            "Cookie",
            "Proxy-Authorization",
            "X-Api-Key",
            "X-Webhook-Secret",
            "X-Auth-Token",
        ] {
            assert_eq!(seen[0].header(secret), None, "{status} {secret}");
        }
        assert_eq!(seen[0].header("X-Keep"), Some("yes"), "{status}");
        assert!(seen[0].header("X-Spoold-Delivery-ID").is_some());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn same_origin_redirect_keeps_credentials() {
    let d = InProcess::boot(&["--max-redirects", "1"]).await;
    let r = Receiver::start().await.expect("receiver");
    r.push_replies([Reply::status(307).header("Location", "/moved")]);
    d.deliver(
        json!({"targetUrl": r.url("/start"),
               "headers": {"Authorization": "Bearer t", "X-Api-Key": "k"}}),
        &["succeeded"],
    )
    .await;
    let seen = r.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].path, "/moved");
    assert_eq!(seen[1].header("Authorization"), Some("Bearer t"));
    assert_eq!(seen[1].header("X-Api-Key"), Some("k"));
}

#[tokio::test(flavor = "multi_thread")]
async fn redirect_limits_and_refusals() {
    // Not followed by default.
    let d = InProcess::boot(&[]).await;
    let end = Receiver::start().await.expect("receiver");
    let hop = redirecting(302, &end.url("/end")).await;
    let done = d
        .deliver(json!({"targetUrl": hop.url("/")}), &["failed"])
        .await;
    assert_eq!(done["lastErrorCode"], "redirect_not_followed", "{done}");
    assert_eq!(done["attempts"], 1);
    assert!(end.requests().is_empty());

    // A chain longer than --max-redirects stops there.
    let d = InProcess::boot(&["--max-redirects", "1"]).await;
    let third = Receiver::start().await.expect("receiver");
    let second = redirecting(302, &third.url("/3")).await;
    let first = redirecting(302, &second.url("/2")).await;
    let done = d
        .deliver(json!({"targetUrl": first.url("/1")}), &["failed"])
        .await;
    assert_eq!(done["lastErrorCode"], "redirect_not_followed", "{done}");
    assert!(third.requests().is_empty());

    // Only http and https.
    let odd = redirecting(302, "ftp://127.0.0.1/file").await;
    let done = d
        .deliver(json!({"targetUrl": odd.url("/")}), &["failed"])
        .await;
    assert_eq!(done["lastErrorCode"], "redirect_refused", "{done}");
}

/// The policy is applied to every hop: 127.0.0.1 is opened with --allow-target, but a redirect
/// to 127.0.0.2 (also loopback, not opened) is refused before any connection.
#[tokio::test(flavor = "multi_thread")]
async fn every_hop_is_judged_by_the_policy() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let d = InProcess::boot_in(
        dir,
        Targets::PolicyDefault,
        &["--max-redirects", "2", "--allow-target", "127.0.0.1/32"],
    )
    .await;
    let hop = redirecting(307, "http://127.0.0.2:9/internal").await;
    let (status, created) = d
        .api
        .create(json!({"targetUrl": hop.url("/")}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let done = d
        .api
        .wait_status(&id_of(&created), &["failed"], WAIT)
        .await
        .expect("fails");
    assert_eq!(done["lastErrorCode"], "target_blocked", "{done}");
    assert!(
        done["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("127.0.0.2")),
        "{done}"
    );
    assert_eq!(hop.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn bearer_token_guards_everything_but_health() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let token = "s3cr3t-token-for-tests-0123456789abcdef";
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{token}\n")).expect("write token");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let path = path.display().to_string();
    let d = InProcess::boot_in(dir, Targets::Loopback, &["--auth-token-file", &path]).await;

    for open in ["/healthz", "/readyz"] {
        let (status, _, _) = d
            .api
            .request(http::Method::GET, open, None)
            .await
            .expect("probe");
        assert_eq!(status, 200, "{open}");
    }
    // `/` only sends a browser to the dashboard, which asks for the token itself.
    let (status, headers, _) = d
        .api
        .request(http::Method::GET, "/", None)
        .await
        .expect("the root");
    assert_eq!(
        (
            status,
            headers.get("location").and_then(|v| v.to_str().ok())
        ),
        (303, Some("ui"))
    );
    for (auth, want) in [(None, 401), (Some("Bearer wrong"), 401), (Some(token), 401)] {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let mut req = client.get(format!("{}/v1/deliveries", d.api.base_url()));
        if let Some(a) = auth {
            req = req.header("Authorization", a);
        }
        let resp = req.send().await.expect("request");
        assert_eq!(resp.status().as_u16(), want, "{auth:?}");
        assert_eq!(
            resp.headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok()),
            Some("Bearer")
        );
        let body: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.expect("body")).expect("json");
        assert_eq!(body["error"]["code"], "unauthorized");
    }
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for path in ["/v1/deliveries", "/metrics", "/v1/openapi.json"] {
        let resp = client
            .get(format!("{}{path}", d.api.base_url()))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status().as_u16(), 200, "{path}");
    }
}

/// A followed redirect means the request reached the target (a 303 after a POST usually means
/// it was processed). At most once, whatever fails after that ends `unknown` — never a resend
/// from the first hop, never `failed`: a later hop that answers 503, 429 or 404, refuses the
/// connection, or is an address the policy blocks. At least once, the last hop decides (a 503
/// is retried, sending the request again from the first hop, and counted as such).
#[tokio::test(flavor = "multi_thread")]
async fn after_a_followed_redirect_at_most_once_never_resends() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let d = InProcess::boot_in(
        dir,
        Targets::PolicyDefault,
        &["--max-redirects", "1", "--allow-target", "127.0.0.1/32"],
    )
    .await;
    let end = Receiver::start().await.expect("receiver");
    let refusing = format!("http://127.0.0.1:{}/gone", Receiver::refusing_port());
    let cases: [(&str, Option<u16>, String); 5] = [
        ("503", Some(503), end.url("/end")),
        ("429", Some(429), end.url("/end")),
        ("404", Some(404), end.url("/end")),
        ("refused", None, refusing),
        ("blocked", None, "http://127.0.0.2:9/internal".to_owned()),
    ];
    for (case, end_status, location) in cases {
        if let Some(status) = end_status {
            end.respond_with(Reply::status(status));
        }
        let first = redirecting(303, &location).await;
        let (status, created) = d
            .api
            .create(
                json!({"targetUrl": first.url("/start"), "mode": "at_most_once",
                           "body": {"case": case}, "maxAttempts": 5}),
            )
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        let done = d
            .api
            .wait_status(&id_of(&created), &["unknown", "failed", "succeeded"], WAIT)
            .await
            .expect("settles");
        assert_eq!(done["status"], "unknown", "{case}: {done}");
        assert!(
            done["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("303") && e.contains("reached")),
            "{case}: {done}"
        );
        // Time for retries that must not come.
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        assert_eq!(first.requests().len(), 1, "{case}: the POST was sent again");
    }
    // At least once: the 503 after the 303 is retried from the first hop, and counted.
    end.push_replies([Reply::status(503)]);
    end.respond_with(Reply::status(200));
    let first = redirecting(303, &end.url("/end")).await;
    let (_, created) = d
        .api
        .create(json!({"targetUrl": first.url("/start"), "body": {"case": "alo"}}))
        .await
        .expect("create");
    d.api
        .wait_status(&id_of(&created), &["succeeded"], WAIT)
        .await
        .expect("succeeds");
    assert_eq!(first.requests().len(), 2, "sent again from the first hop");
    let resent = d
        .api
        .metric("spoold_delivery_resent_after_redirect_total")
        .await
        .expect("metrics");
    assert_eq!(resent, Some(1.0));
}
