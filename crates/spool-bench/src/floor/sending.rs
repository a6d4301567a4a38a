//! The sending floor's process: a bare reqwest loop (the reqwest spoold uses, with spoold's
//! features and client settings: no proxy, no redirects, keep-alive pool of the concurrency)
//! POSTing what spoold sends for a delivery — the JSON body, `content-type`, `user-agent`, the
//! delivery id and attempt headers — and reading each response whole. What is left of a
//! delivery's sending here is what any client on this stack pays.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, USER_AGENT};

/// spoold's `user-agent` (the daemon's version is this workspace's).
const AGENT: &str = concat!("spoold/", env!("CARGO_PKG_VERSION"));

/// Send `requests` requests to `url` at `concurrency`, once told to go.
pub fn run(url: &str, requests: u64, concurrency: usize, body_bytes: usize) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(1))
        .pool_max_idle_per_host(concurrency)
        .pool_idle_timeout(Duration::from_secs(60))
        .tcp_keepalive(Duration::from_secs(30))
        .build()
        .context("build the client")?;
    let url = reqwest::Url::parse(url).context("parse the URL")?;
    super::ready_go_done(|| {
        runtime.block_on(async {
            let next = Arc::new(AtomicU64::new(0));
            let mut workers = tokio::task::JoinSet::new();
            for _ in 0..concurrency.max(1) {
                let (client, url, next) = (client.clone(), url.clone(), Arc::clone(&next));
                workers.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= requests {
                            return anyhow::Ok(());
                        }
                        let response = client
                            .post(url.clone())
                            .headers(headers(i)?)
                            .body(body(i, body_bytes))
                            .timeout(Duration::from_secs(10))
                            .send()
                            .await
                            .with_context(|| format!("request {i}"))?;
                        let status = response.status();
                        response
                            .bytes()
                            .await
                            .with_context(|| format!("response {i}"))?;
                        if status != reqwest::StatusCode::OK {
                            bail!("request {i}: {status}");
                        }
                    }
                });
            }
            while let Some(joined) = workers.join_next().await {
                joined.context("a sender panicked")??;
            }
            Ok(())
        })
    })
}

/// The headers spoold sends with delivery attempt 1 of a delivery (an id of the same length
/// as its UUIDs, unique per request).
fn headers(i: u64) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(USER_AGENT, HeaderValue::from_static(AGENT));
    let id = format!("00000000-0000-7000-8000-{i:012x}");
    headers.insert(
        spool_proto::DELIVERY_ID_HEADER,
        HeaderValue::from_str(&id).context("delivery id")?,
    );
    headers.insert(spool_proto::ATTEMPT_HEADER, HeaderValue::from(1u32));
    Ok(headers)
}

/// The body of delivery `i`, as the benchmark's creates give it (padded with `--body-bytes`).
fn body(i: u64, bytes: usize) -> Bytes {
    if bytes == 0 {
        return Bytes::from(format!(r#"{{"seq":{i}}}"#));
    }
    let pad = "x".repeat(bytes.saturating_sub(30));
    Bytes::from(format!(r#"{{"seq":{i},"pad":"{pad}"}}"#))
}
