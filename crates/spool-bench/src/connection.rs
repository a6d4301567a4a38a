//! One keep-alive HTTP/1.1 connection to a loopback address, on hyper's connection API: one
//! request at a time, the connection reused for the next. The load generator owns one per
//! worker; scenarios use one for the daemon's control calls.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// Longest a single request may take before the benchmark gives up on it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// An open connection. Dropping it closes the connection.
pub struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    host: String,
    driver: JoinHandle<()>,
}

impl Connection {
    /// Connect to `addr`, which must be a loopback address.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        if !addr.ip().is_loopback() {
            bail!("refusing to connect to {addr}: the benchmark stays on loopback");
        }
        let stream = tokio::time::timeout(REQUEST_TIMEOUT, TcpStream::connect(addr))
            .await
            .with_context(|| format!("connect to {addr}: timed out"))?
            .with_context(|| format!("connect to {addr}"))?;
        // Small requests, one at a time: Nagle would add tens of milliseconds to each.
        stream.set_nodelay(true).context("set TCP_NODELAY")?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .with_context(|| format!("HTTP/1.1 handshake with {addr}"))?;
        let driver = tokio::spawn(async move {
            // Ends when the sender is dropped or the peer closes; errors show up on the sender.
            let _ = conn.await;
        });
        Ok(Connection {
            sender,
            host: addr.to_string(),
            driver,
        })
    }

    /// Whether the peer has closed it (spoold closes a keep-alive connection left idle past
    /// its `--header-read-timeout`).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed() || self.driver.is_finished()
    }

    /// Send one request and read the whole response body, within [`REQUEST_TIMEOUT`].
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        self.send_within(method, path, body, REQUEST_TIMEOUT).await
    }

    /// As [`Connection::send`], within `limit`.
    pub async fn send_within(
        &mut self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        limit: Duration,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, &self.host);
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(body.unwrap_or_default()))
            .context("build request")?;
        let exchange = async {
            self.sender.ready().await.context("connection closed")?;
            let response = self.sender.send_request(request).await?;
            let status = response.status();
            let bytes = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, bytes))
        };
        tokio::time::timeout(limit, exchange)
            .await
            .with_context(|| format!("{method} {path}: no response within {limit:?}"))?
            .with_context(|| format!("{method} {path}"))
    }

    /// `GET path`, expecting 200 and a JSON body.
    pub async fn get_json(&mut self, path: &str) -> anyhow::Result<serde_json::Value> {
        let (status, body) = self.send(Method::GET, path, None).await?;
        if status != StatusCode::OK {
            bail!(
                "GET {path}: {status}: {}",
                String::from_utf8_lossy(&body).trim()
            );
        }
        serde_json::from_slice(&body).with_context(|| format!("GET {path}: body is not JSON"))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.driver.abort();
    }
}
