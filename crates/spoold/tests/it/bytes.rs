//! Bodies reach the receiver byte for byte as submitted, before and after a restart.

use base64::Engine as _;
use serde_json::json;
use spool_testkit::{Api, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

const JSON_BODY: &str =
    "{ \"a\" :  [1,2 ,3],\n\t\"html\": \"<b>&amp;</b> <&>\",  \"u\": \"\\u00e9\" }";

fn binary_body() -> Vec<u8> {
    (0..=255u8).chain((0..=255u8).rev()).collect()
}

fn create_json() -> String {
    format!(r#"{{"targetUrl":"{{URL}}","body":{JSON_BODY}}}"#)
}

async fn submit(api: &Api, url: &str) -> (String, String) {
    let (status, json_delivery) = api
        .create_raw(create_json().replace("{URL}", url))
        .await
        .expect("create json");
    assert_eq!(status, 201, "{json_delivery}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(binary_body());
    let (status, bin_delivery) = api
        .create(json!({"targetUrl": url, "bodyBase64": b64}))
        .await
        .expect("create binary");
    assert_eq!(status, 201, "{bin_delivery}");
    (id_of(&json_delivery), id_of(&bin_delivery))
}

async fn check_received(receiver: &Receiver, json_id: &str, bin_id: &str) {
    let seen = receiver.requests();
    let by_id = |id: &str| {
        seen.iter()
            .find(|r| r.header("X-Spoold-Delivery-ID") == Some(id))
            .unwrap_or_else(|| panic!("receiver never saw {id}"))
            .clone()
    };
    let j = by_id(json_id);
    assert_eq!(j.body.as_ref(), JSON_BODY.as_bytes());
    assert_eq!(j.header("Content-Type"), Some("application/json"));
    let b = by_id(bin_id);
    assert_eq!(b.body.as_ref(), binary_body().as_slice());
    assert_eq!(b.header("Content-Type"), Some("application/octet-stream"));
    // A body of known length, never chunked (the body written through the lease's gate too).
    for r in [j, b] {
        let len = r.body.len().to_string();
        assert_eq!(r.header("Content-Length"), Some(len.as_str()));
        assert_eq!(r.header("Transfer-Encoding"), None);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_arrive_byte_identical_before_and_after_restart() {
    let dir = TempDir::new().expect("temp dir");
    let mut receiver = Receiver::start().await.expect("receiver");
    let mut daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());

    // Delivered straight away.
    let (j, b) = submit(&api, &receiver.url("/now")).await;
    api.wait_status(&j, &["succeeded"], WAIT)
        .await
        .expect("json delivered");
    api.wait_status(&b, &["succeeded"], WAIT)
        .await
        .expect("binary delivered");
    check_received(&receiver, &j, &b).await;

    // The API shows the body exactly as submitted.
    let (_, _, got) = api
        .request(http::Method::GET, &format!("/v1/deliveries/{j}"), None)
        .await
        .expect("get");
    let text = String::from_utf8(got.to_vec()).expect("utf-8");
    assert!(text.contains(&format!("\"body\":{JSON_BODY}")), "{text}");

    // Stored while the receiver is down, delivered after a crash and restart.
    receiver.stop().await;
    receiver.clear_requests();
    let (j, b) = submit(&api, &receiver.url("/later")).await;
    daemon.kill9();
    receiver.restart().await.expect("receiver back");
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("restart");
    let api = Api::new(daemon.base_url());
    api.wait_status(&j, &["succeeded"], WAIT)
        .await
        .expect("json delivered");
    api.wait_status(&b, &["succeeded"], WAIT)
        .await
        .expect("binary delivered");
    check_received(&receiver, &j, &b).await;
}
