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
        "/v1/deliveries/{id}/transitions",
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

/// The document states the rules the daemon applies (and `scripts/api-fuzz` holds it to them):
/// what a create requires and allows, the listing bounds, bodies of any JSON type.
#[test]
fn the_document_states_the_rules() {
    let doc = spoold::api::openapi::value();
    let create = &doc["components"]["schemas"]["CreateDelivery"];
    assert_eq!(create["required"], serde_json::json!(["targetUrl"]));
    let field = |name: &str| &create["properties"][name];
    assert_eq!(field("targetUrl")["type"], "string", "not nullable");
    assert_eq!(field("targetUrl")["format"], "uri");
    assert_eq!(field("targetUrl")["maxLength"], 4096);
    assert_eq!(
        (
            &field("maxAttempts")["minimum"],
            &field("maxAttempts")["maximum"]
        ),
        (&serde_json::json!(0), &serde_json::json!(100))
    );
    for time in ["notBefore", "expiresAt"] {
        assert_eq!(field(time)["format"], "date-time", "{time}");
    }
    assert!(field("method")["pattern"].is_string());
    assert!(field("bodyBase64")["pattern"].is_string());
    assert!(field("headers")["propertyNames"]["pattern"].is_string());
    assert!(field("headers")["propertyNames"]["not"]["pattern"]
        .as_str()
        .is_some_and(|p| p.contains("[Hh][Oo][Ss][Tt]")));
    assert_eq!(
        create["not"]["required"],
        serde_json::json!(["body", "bodyBase64"])
    );
    // Any JSON value: no type at all.
    assert!(field("body").get("type").is_none(), "{}", field("body"));
    assert!(
        doc["components"]["schemas"]["DeliveryView"]["properties"]["body"]
            .get("type")
            .is_none()
    );
    let limit = doc["paths"]["/v1/deliveries"]["get"]["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "limit")
        .expect("limit")["schema"]["anyOf"][0]
        .clone();
    assert_eq!(
        (&limit["minimum"], &limit["maximum"]),
        (&serde_json::json!(1), &serde_json::json!(500))
    );
}

/// A URL whose host begins with whitespace (a no-break space, which the daemon refuses: "must
/// include a host") does not match the document's patterns for `targetUrl` and
/// `reconcile.url`, so a client generated from the document does not send one either (the API
/// fuzzing found `reconcile.url` missing the `\s` its pattern meant to have).
#[test]
fn url_patterns_refuse_a_blank_host() {
    let doc: serde_json::Value =
        serde_json::from_str(&spoold::api::openapi::document()).expect("json");
    let schemas = &doc["components"]["schemas"];
    for (schema, field) in [
        (
            &schemas["CreateDelivery"]["properties"]["targetUrl"],
            "targetUrl",
        ),
        (&schemas["Reconcile"]["properties"]["url"], "reconcile.url"),
    ] {
        let pattern = schema["pattern"].as_str().expect("a pattern");
        let re = regex::Regex::new(pattern).expect("the pattern compiles");
        assert!(re.is_match("https://example.test/x"), "{field}: {pattern}");
        for blank in ["hTTPs://\u{a0}", "https:// x", "https://\tx", "https://\\x"] {
            assert!(!re.is_match(blank), "{field} {blank:?}: {pattern}");
        }
    }
}
