//! A thin client for the daemon's JSON API over TCP or a unix socket, for tests. Every call returns the HTTP
//! status with the parsed body, so a test asserts on error envelopes as easily as on
//! successes; only transport failures are errors.
//!
//! Routes: `POST /v1/deliveries`, `GET /v1/deliveries[?query]`, `GET /v1/deliveries/{id}`,
//! `GET /v1/deliveries/{id}/attempts`, `POST /v1/deliveries/{id}/cancel`,
//! `POST /v1/deliveries/{id}/retry`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::Value;

/// How long one request may take before it is an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often [`Api::wait_status`] polls.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A client for one daemon's API.
#[derive(Debug, Clone)]
pub struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    /// A client for the daemon at `base_url` (`http://127.0.0.1:PORT`).
    pub fn new(base_url: impl Into<String>) -> Self {
        let base = base_url.into().trim_end_matches('/').to_owned();
        let client = builder()
            .build()
            .expect("a proxy-less, root-less reqwest client always builds");
        Self { base, client }
    }

    /// A client for the daemon at `base_url` that sends `Authorization: Bearer <token>` on
    /// every request.
    pub fn with_token(base_url: impl Into<String>, token: &str) -> Self {
        let base = base_url.into().trim_end_matches('/').to_owned();
        let mut headers = http::HeaderMap::new();
        let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
            .expect("a test token is a valid header value");
        headers.insert(http::header::AUTHORIZATION, value);
        let client = builder()
            .default_headers(headers)
            .build()
            .expect("a proxy-less, root-less reqwest client always builds");
        Self { base, client }
    }

    /// A client for the daemon listening on the unix socket at `path`. [`Self::base_url`] is
    /// then `http://127.0.0.1`, never dialed: every connection goes to `path`.
    pub fn unix(path: impl Into<PathBuf>) -> Self {
        let client = builder()
            .unix_socket(path.into())
            .build()
            .expect("a proxy-less, root-less reqwest client always builds");
        Self {
            base: "http://127.0.0.1".to_owned(),
            client,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `POST /v1/deliveries` with `body` as JSON.
    pub async fn create(&self, body: Value) -> anyhow::Result<(u16, Value)> {
        self.create_raw(serde_json::to_vec(&body).context("encode create request")?)
            .await
    }

    /// `POST /v1/deliveries` with these exact bytes, for malformed-request tests.
    pub async fn create_raw(&self, body: impl Into<Vec<u8>>) -> anyhow::Result<(u16, Value)> {
        self.json(Method::POST, "/v1/deliveries", Some(body.into()))
            .await
    }

    /// `GET /v1/deliveries/{id}`.
    pub async fn get(&self, id: &str) -> anyhow::Result<(u16, Value)> {
        self.json(Method::GET, &format!("/v1/deliveries/{id}"), None)
            .await
    }

    /// `GET /v1/deliveries?{query}`; `query` may be empty (and may start with `?`).
    pub async fn list(&self, query: &str) -> anyhow::Result<(u16, Value)> {
        let query = query.trim_start_matches('?');
        let path = if query.is_empty() {
            "/v1/deliveries".to_owned()
        } else {
            format!("/v1/deliveries?{query}")
        };
        self.json(Method::GET, &path, None).await
    }

    /// `POST /v1/deliveries/{id}/cancel`.
    pub async fn cancel(&self, id: &str) -> anyhow::Result<(u16, Value)> {
        self.json(Method::POST, &format!("/v1/deliveries/{id}/cancel"), None)
            .await
    }

    /// `POST /v1/deliveries/{id}/retry`.
    pub async fn retry(&self, id: &str) -> anyhow::Result<(u16, Value)> {
        self.json(Method::POST, &format!("/v1/deliveries/{id}/retry"), None)
            .await
    }

    /// `GET /v1/deliveries/{id}/attempts`.
    pub async fn attempts(&self, id: &str) -> anyhow::Result<(u16, Value)> {
        self.json(Method::GET, &format!("/v1/deliveries/{id}/attempts"), None)
            .await
    }

    /// `GET /v1/deliveries/{id}/transitions`.
    pub async fn transitions(&self, id: &str) -> anyhow::Result<(u16, Value)> {
        self.json(
            Method::GET,
            &format!("/v1/deliveries/{id}/transitions"),
            None,
        )
        .await
    }

    /// The value of one sample in `GET /metrics`: `name` is the sample as exposed, labels
    /// included (`spoold_blocked_targets_total`, `spoold_deliveries{status="pending"}`).
    /// `None` if there is no such sample.
    pub async fn metric(&self, name: &str) -> anyhow::Result<Option<f64>> {
        let (status, _headers, body) = self.request(Method::GET, "/metrics", None).await?;
        anyhow::ensure!(status == 200, "GET /metrics answered {status}");
        Ok(sample(&String::from_utf8_lossy(&body), name))
    }

    /// Any request: `path` is appended to the base URL; a body is sent as
    /// `application/json`. Returns status, headers and the raw body.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(u16, HeaderMap, Bytes)> {
        let url = format!("{}{path}", self.base);
        let mut request = self.client.request(method.clone(), &url);
        if let Some(body) = body {
            request = request
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .with_context(|| format!("read the body of {method} {url}"))?;
        Ok((status, headers, bytes))
    }

    /// Poll `GET /v1/deliveries/{id}` every 20 ms until its `status` is one of `want`;
    /// return that delivery. On timeout the error shows the last response seen.
    pub async fn wait_status(
        &self,
        id: &str,
        want: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (code, delivery) = self.get(id).await?;
            let status = delivery.get("status").and_then(Value::as_str);
            if code == 200 && status.is_some_and(|s| want.contains(&s)) {
                return Ok(delivery);
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "delivery {id} not in {want:?} within {timeout:?}; last response {code}: {delivery}"
                );
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<(u16, Value)> {
        let (status, _headers, bytes) = self.request(method, path, body).await?;
        Ok((status, body_json(&bytes)))
    }
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        // Plain HTTP to loopback only: no certificate store to load, nothing to fail.
        .tls_built_in_root_certs(false)
        .timeout(REQUEST_TIMEOUT)
}

/// The value of sample `name` in Prometheus text.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
}

/// The body as JSON: `Null` when empty, a JSON string holding the text when it is not JSON
/// (so a test's assertion shows what came back instead of a parse error).
fn body_json(bytes: &[u8]) -> Value {
    if bytes.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_become_json() {
        assert_eq!(body_json(b""), Value::Null);
        assert_eq!(body_json(br#"{"id":"x"}"#), serde_json::json!({"id": "x"}));
        assert_eq!(body_json(b"not json"), Value::String("not json".into()));
    }

    #[test]
    fn samples_by_name() {
        let text = "# HELP a_total A.\n# TYPE a_total counter\na_total 3\nab 4\n\
                    b{x=\"1\"} 5.5 1700000000\n";
        assert_eq!(sample(text, "a_total"), Some(3.0));
        assert_eq!(sample(text, "ab"), Some(4.0));
        assert_eq!(sample(text, "b{x=\"1\"}"), Some(5.5));
        assert_eq!(sample(text, "a"), None);
        assert_eq!(sample(text, "b"), None);
    }
}
