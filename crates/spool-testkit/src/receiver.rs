//! A scripted HTTP receiver on 127.0.0.1, standing in for a delivery target: it records every
//! request and answers from a script (one-shot replies in order, then a default). `stop`
//! closes the listener *and* drops every open connection, so the port refuses connections as
//! a crashed target's would; this is why connections are served here rather than by
//! `axum::serve`, whose per-connection tasks outlive the server.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse as _, Response};
use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// The ports [`Receiver::refusing_port`] handed out, held bound (never listening).
static HELD_PORTS: Mutex<Vec<(u16, tokio::net::TcpSocket)>> = Mutex::new(Vec::new());

/// A scripted receiver listening on `127.0.0.1`. Dropping it stops it.
pub struct Receiver {
    port: u16,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    server: Option<JoinHandle<()>>,
    /// Serves HTTPS with this configuration (see [`crate::tls`]) instead of plain HTTP.
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `POST`, `PUT`, …
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the whole request had arrived.
    pub received_at: std::time::Instant,
}

/// How the receiver answers one request. The default is `200` with an empty body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long before answering.
    pub delay: Option<Duration>,
    /// Never answer: hold the request open until the receiver is stopped.
    pub hang: bool,
}

impl Reply {
    /// Answer with this status (and no body).
    pub fn status(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: None,
            hang: false,
        }
    }

    /// Never answer; the connection is dropped when the receiver stops.
    pub fn hang() -> Self {
        Self {
            hang: true,
            ..Self::default()
        }
    }

    /// Add a response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the response body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }

    /// Wait this long before answering.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }
}

impl Default for Reply {
    fn default() -> Self {
        Self::status(200)
    }
}

impl Recorded {
    /// A header's value, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl Receiver {
    /// Start on `127.0.0.1` with a port of the OS's choosing.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on(0).await
    }

    /// Start an HTTPS receiver on `127.0.0.1` with a port of the OS's choosing, serving with
    /// `config` (see [`crate::tls::server_config`]).
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> anyhow::Result<Self> {
        Self::start_with(0, Some(tokio_rustls::TlsAcceptor::from(config))).await
    }

    /// Start on `127.0.0.1:port`, e.g. to come back on a stopped receiver's port or on a
    /// [`Receiver::refusing_port`] (which is let go of first).
    pub async fn start_on(port: u16) -> anyhow::Result<Self> {
        lock(&HELD_PORTS).retain(|(held, _)| *held != port);
        Self::start_with(port, None).await
    }

    async fn start_with(port: u16, tls: Option<tokio_rustls::TlsAcceptor>) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            script: Mutex::new(Script::default()),
            requests: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
        });
        let mut receiver = Self {
            port,
            shared,
            shutdown: CancellationToken::new(),
            server: None,
            tls,
        };
        receiver.listen().await?;
        Ok(receiver)
    }

    /// A port on 127.0.0.1 where nothing listens, for a target that refuses connections. The
    /// port stays bound (a socket that never listens: a connection to it is refused) until this
    /// process ends or [`Receiver::start_on`] comes up on it, so the OS cannot hand it to
    /// anything else meanwhile — a receiver of this test, or another test's daemon.
    ///
    /// # Panics
    /// If 127.0.0.1 cannot be bound at all.
    pub fn refusing_port() -> u16 {
        let socket = tokio::net::TcpSocket::new_v4().expect("a test machine can make a socket");
        socket
            .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .expect("a test machine can bind 127.0.0.1:0");
        let port = socket
            .local_addr()
            .expect("a bound socket has an address")
            .port();
        lock(&HELD_PORTS).push((port, socket));
        port
    }

    /// `http://127.0.0.1:PORT{path}` (`https://` for a TLS receiver).
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Every request recorded so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Forget the recorded requests.
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
        self.shared.count.send_replace(0);
    }

    /// Wait until at least `n` requests have been recorded; return them all.
    pub async fn wait_for_requests(
        &self,
        n: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<Recorded>> {
        let mut count = self.shared.count.subscribe();
        // Drop the watch's read guard at once: `record` takes the same lock.
        let reached = tokio::time::timeout(timeout, count.wait_for(|seen| *seen >= n))
            .await
            .map(|seen| seen.map(drop));
        match reached {
            Ok(seen) => {
                seen.context("receiver state dropped")?;
                Ok(self.requests())
            }
            Err(_elapsed) => {
                let seen: Vec<String> = self
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                anyhow::bail!(
                    "receiver saw {} requests within {timeout:?}, wanted {n}: {seen:?}",
                    seen.len()
                )
            }
        }
    }

    /// Answer with `reply` once the one-shot replies are used up.
    pub fn respond_with(&self, reply: Reply) {
        lock(&self.shared.script).default = reply;
    }

    /// Answer every request for `path` (whatever its query) with `reply`, before the
    /// one-shot replies and the default.
    pub fn respond_to(&self, path: &str, reply: Reply) {
        lock(&self.shared.script)
            .by_path
            .insert(path.to_owned(), reply);
    }

    /// Queue one-shot replies, used in order before the default.
    pub fn push_replies(&self, replies: impl IntoIterator<Item = Reply>) {
        lock(&self.shared.script).queue.extend(replies);
    }

    /// Close the listener and drop every open connection (hung and delayed requests
    /// included); afterwards the port refuses connections. Idempotent.
    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            // The task only ends by cancellation; a panic has nothing left to clean up.
            let _ = server.await;
        }
    }

    /// Listen again on the same port after [`Self::stop`], keeping the script and the
    /// recorded requests.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await;
        self.shutdown = CancellationToken::new();
        self.listen().await
    }

    async fn listen(&mut self) -> anyhow::Result<()> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, self.port))
            .await
            .with_context(|| format!("bind receiver on 127.0.0.1:{}", self.port))?;
        self.port = listener
            .local_addr()
            .context("read the receiver's bound address")?
            .port();
        let router = Router::new()
            .fallback(record_and_reply)
            .with_state(Arc::clone(&self.shared));
        self.server = Some(tokio::spawn(serve(
            listener,
            router,
            self.tls.clone(),
            self.shutdown.clone(),
        )));
        Ok(())
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(server) = &self.server {
            // Dropping the server future drops its JoinSet, which aborts every connection.
            server.abort();
        }
    }
}

#[derive(Debug)]
struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<Recorded>>,
    /// Number of recorded requests, for waiters.
    count: watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct Script {
    queue: VecDeque<Reply>,
    default: Reply,
    /// Paths answered always so, before the queue and the default.
    by_path: std::collections::HashMap<String, Reply>,
}

impl Shared {
    fn record(&self, request: Recorded) {
        let mut requests = lock(&self.requests);
        requests.push(request);
        self.count.send_replace(requests.len());
    }

    fn next_reply(&self, path: &str) -> Reply {
        let mut script = lock(&self.script);
        if let Some(reply) = script.by_path.get(path) {
            return reply.clone();
        }
        match script.queue.pop_front() {
            Some(reply) => reply,
            None => script.default.clone(),
        }
    }
}

/// Accept connections until cancelled; then close the listener and abort every connection.
async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: CancellationToken,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let service = TowerToHyperService::new(router.clone());
                    let tls = tls.clone();
                    connections.spawn(async move {
                        let http = hyper::server::conn::http1::Builder::new();
                        // A connection error (client gone, a refused handshake) concerns only
                        // that connection.
                        match tls {
                            None => {
                                let _ = http.serve_connection(TokioIo::new(stream), service).await;
                            }
                            Some(acceptor) => {
                                if let Ok(stream) = acceptor.accept(stream).await {
                                    let _ =
                                        http.serve_connection(TokioIo::new(stream), service).await;
                                }
                            }
                        }
                    });
                }
                // Out of descriptors or the like: pause rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn record_and_reply(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    shared.record(Recorded {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts.headers,
        body,
        received_at: std::time::Instant::now(),
    });
    let reply = shared.next_reply(parts.uri.path());
    if reply.hang {
        // Cancelled by `stop`, which aborts this connection's task.
        std::future::pending::<()>().await;
    }
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    build_response(&reply).unwrap_or_else(|problem| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("testkit: {problem}"),
        )
            .into_response()
    })
}

fn build_response(reply: &Reply) -> Result<Response, String> {
    let status =
        StatusCode::from_u16(reply.status).map_err(|_| format!("bad status {}", reply.status))?;
    let mut response = Response::new(Body::from(reply.body.clone()));
    *response.status_mut() = status;
    for (name, value) in &reply.headers {
        let name = HeaderName::try_from(name.as_str()).map_err(|_| format!("bad header {name}"))?;
        let value = HeaderValue::try_from(value.as_str())
            .map_err(|_| format!("bad value for header {name}"))?;
        response.headers_mut().append(name, value);
    }
    Ok(response)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a single push/pop/clone: a poisoned value is still whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
