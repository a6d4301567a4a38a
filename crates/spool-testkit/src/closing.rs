//! A receiver whose keep-alive runs out under its clients: after each answer it waits a short,
//! varying time (an idle timeout of 1–20 ms by default) for the connection's next request and
//! then closes the connection, unread — as a server with a short keep-alive timeout does. A
//! client that writes its next request on such a connection just as the timer fires has it
//! dropped unread (the server's close, or a reset), and cannot tell that from a request that
//! was read and then cut off.
//!
//! HTTP/1.1 only, served by hand rather than by hyper so that the close is exactly the timer's:
//! requests with a `Content-Length` body (what spoold sends), answers with `Content-Length`. A
//! request asking `Connection: close` is answered and its connection closed at once.

use std::net::{Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::receiver::{Recorded, Reply};

/// A receiver on `127.0.0.1` that closes each connection a little while after each answer.
/// Dropping it stops it.
pub struct ClosingReceiver {
    port: u16,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for ClosingReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClosingReceiver")
            .field("port", &self.port)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Shared {
    /// How long a connection waits for its next request after an answer, in milliseconds.
    idle_ms: RangeInclusive<u64>,
    reply: Mutex<Reply>,
    requests: Mutex<Vec<Recorded>>,
    count: watch::Sender<usize>,
    connections: AtomicUsize,
    /// Connections closed by the idle timer with bytes of a next request already unread.
    dropped_unread: AtomicUsize,
}

impl ClosingReceiver {
    /// Start on a port of the OS's choosing; each connection waits `idle_ms` (a time drawn
    /// anew after every answer, evenly from the range) for its next request.
    pub async fn start(idle_ms: RangeInclusive<u64>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("bind the closing receiver on 127.0.0.1")?;
        let port = listener.local_addr().context("its address")?.port();
        let shared = Arc::new(Shared {
            idle_ms,
            reply: Mutex::new(Reply::default()),
            requests: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            connections: AtomicUsize::new(0),
            dropped_unread: AtomicUsize::new(0),
        });
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(listener, Arc::clone(&shared), shutdown.clone()));
        Ok(Self {
            port,
            shared,
            shutdown,
        })
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Answer every request with `reply` from now on (its `hang` and `delay` are not used).
    pub fn respond_with(&self, reply: Reply) {
        *lock(&self.shared.reply) = reply;
    }

    /// Every whole request read so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Connections the idle timer closed although a next request had begun to arrive: the
    /// race this receiver is for.
    pub fn dropped_unread(&self) -> usize {
        self.shared.dropped_unread.load(Ordering::Relaxed)
    }

    /// Wait until at least `n` requests were read.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let mut count = self.shared.count.subscribe();
        // Drop the watch's read guard at once: recording takes the same lock.
        let reached = tokio::time::timeout(timeout, count.wait_for(|seen| *seen >= n))
            .await
            .map(|seen| seen.map(drop));
        match reached {
            Ok(seen) => seen.context("receiver state dropped"),
            Err(_) => anyhow::bail!(
                "closing receiver read {} requests within {timeout:?}, wanted {n}",
                self.requests().len()
            ),
        }
    }
}

impl Drop for ClosingReceiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let n = shared.connections.fetch_add(1, Ordering::Relaxed);
                    connections.spawn(connection(stream, Arc::clone(&shared), n as u64));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// Serve one connection: answer each request, then wait the idle time for the next one.
async fn connection(mut stream: TcpStream, shared: Arc<Shared>, seed: u64) {
    let mut rng = XorShift::new(seed);
    let mut buf: Vec<u8> = Vec::new();
    let mut answered = false;
    loop {
        if answered {
            let idle = Duration::from_millis(rng.within(&shared.idle_ms));
            // The timer runs from the answer; what arrives after it fires is never read.
            if tokio::time::timeout(idle, stream.readable()).await.is_err() {
                let mut probe = [0u8; 1];
                if matches!(stream.try_read(&mut probe), Ok(1)) {
                    shared.dropped_unread.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
        }
        let Some((request, close)) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let reply = lock(&shared.reply).clone();
        {
            let mut requests = lock(&shared.requests);
            requests.push(request);
            shared.count.send_replace(requests.len());
        }
        let mut head = format!(
            "HTTP/1.1 {} X\r\ncontent-length: {}\r\n",
            reply.status,
            reply.body.len()
        );
        for (name, value) in &reply.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if close {
            head.push_str("connection: close\r\n");
        }
        head.push_str("\r\n");
        head.push_str(&reply.body);
        if stream.write_all(head.as_bytes()).await.is_err() || close {
            return;
        }
        answered = true;
    }
}

/// Read one request (head and `Content-Length` body) from `stream`, keeping what follows it in
/// `buf`; `None` at the end of the stream or on anything unreadable. With it, whether the
/// client asked to close the connection.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(Recorded, bool)> {
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if !fill(stream, buf).await {
            return None;
        }
    };
    let head = std::str::from_utf8(&buf[..head_end]).ok()?.to_owned();
    let mut lines = head.split("\r\n");
    let mut start = lines.next()?.split(' ');
    let method = start.next()?.to_owned();
    let target = start.next()?.to_owned();
    let mut headers = HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.append(
            HeaderName::try_from(name.trim()).ok()?,
            HeaderValue::try_from(value.trim()).ok()?,
        );
    }
    let length: usize = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map_or(Some(0), |v| v.parse().ok())?;
    while buf.len() < head_end + length {
        if !fill(stream, buf).await {
            return None;
        }
    }
    let body = Bytes::copy_from_slice(&buf[head_end..head_end + length]);
    buf.drain(..head_end + length);
    let close = headers
        .get(http::header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (target, None),
    };
    let request = Recorded {
        method,
        path,
        query,
        headers,
        body,
        received_at: std::time::Instant::now(),
    };
    Some((request, close))
}

/// Read more of the stream into `buf`; false at its end or on an error.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 8192];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// A small deterministic generator for the idle times (xorshift64*), seeded per connection.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn within(&mut self, range: &RangeInclusive<u64>) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        let span = range.end().saturating_sub(*range.start()) + 1;
        range.start() + x % span
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a push or a clone: a poisoned value is still whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
