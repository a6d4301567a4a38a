//! The committed OpenAPI document is exactly what the daemon serves.
//! Regenerate with `UPDATE_SNAPSHOTS=1 cargo nextest run -p spoold openapi`.

use std::path::PathBuf;

use crate::InProcess;

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json")
}

#[test]
fn committed_document_matches_generated() {
    let generated = spoold::api::openapi::document() + "\n";
    let path = committed_path();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &generated).expect("write docs/openapi.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is stale; regenerate with UPDATE_SNAPSHOTS=1 cargo nextest run -p spoold openapi"
    );
}

#[tokio::test]
async fn served_document_lists_every_route() {
    let d = InProcess::boot(&[]).await;
    let (status, _, doc) = d
        .api
        .request(http::Method::GET, "/v1/openapi.json", None)
        .await
        .expect("request");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_slice(&doc).expect("json");
    let paths = doc["paths"].as_object().expect("paths");
    for p in [
        "/v1/deliveries",
        "/v1/deliveries/{id}",
        "/v1/deliveries/{id}/attempts",
        "/v1/deliveries/{id}/cancel",
        "/v1/deliveries/{id}/retry",
        "/v1/stats",
        "/v1/targets",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(paths.contains_key(p), "missing {p}");
    }
    assert!(doc["components"]["schemas"]["DeliveryView"].is_object());
}
