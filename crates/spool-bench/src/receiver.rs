//! The fast delivery target: an HTTP/1.1 server on 127.0.0.1 that answers every request with an
//! empty 200 at once, keeping connections alive. It notes when each delivery id was first seen
//! (read from `X-Spoold-Delivery-ID` as soon as the request head arrives), so scenarios can
//! tell when a batch has fully arrived and how long after its ack a delivery came in.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use spool_proto::DELIVERY_ID_HEADER;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A running receiver. [`Receiver::stop`] closes the listener and every connection.
pub struct Receiver {
    addr: SocketAddr,
    state: Arc<State>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

struct State {
    requests: AtomicU64,
    first_seen: Mutex<HashMap<String, Instant>>,
    /// Distinct delivery ids seen so far.
    unique: watch::Sender<u64>,
}

impl Receiver {
    /// Listen on 127.0.0.1 with a port of the OS's choosing.
    pub async fn start() -> anyhow::Result<Receiver> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("bind the receiver on 127.0.0.1")?;
        let addr = listener.local_addr().context("receiver address")?;
        let state = Arc::new(State {
            requests: AtomicU64::new(0),
            first_seen: Mutex::new(HashMap::new()),
            unique: watch::Sender::new(0),
        });
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        tasks.spawn(accept(
            listener,
            Arc::clone(&state),
            stop.clone(),
            tasks.clone(),
        ));
        Ok(Receiver {
            addr,
            state,
            stop,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The origin spoold files these URLs under (`scheme://host:port`).
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests answered so far, duplicates included.
    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::Relaxed)
    }

    /// Distinct delivery ids seen so far.
    pub fn unique(&self) -> u64 {
        *self.state.unique.borrow()
    }

    /// Wait until `n` distinct delivery ids have arrived.
    pub async fn wait_unique(&self, n: u64, timeout: Duration) -> anyhow::Result<()> {
        let mut rx = self.state.unique.subscribe();
        let reached = tokio::time::timeout(timeout, async {
            rx.wait_for(|seen| *seen >= n).await.map(|_| ())
        })
        .await;
        match reached {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => bail!("receiver stopped"),
            Err(_) => bail!(
                "only {} of {n} deliveries reached the receiver within {timeout:?}",
                self.unique()
            ),
        }
    }

    /// When each delivery id was first seen; empties the record.
    pub fn take_arrivals(&self) -> HashMap<String, Instant> {
        std::mem::take(&mut *lock(&self.state.first_seen))
    }

    /// The latest first arrival, if any.
    pub fn last_arrival(&self) -> Option<Instant> {
        lock(&self.state.first_seen).values().max().copied()
    }

    /// Close the listener and drop every connection.
    pub async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept(
    listener: TcpListener,
    state: Arc<State>,
    stop: CancellationToken,
    tasks: TaskTracker,
) {
    serve(
        listener,
        move |req| answer(Arc::clone(&state), req),
        stop,
        tasks,
    )
    .await;
}

/// Accept connections on `listener` until `stop`, each served on a task of `tasks` (HTTP/1.1,
/// keep-alive) by `answer`; an error from it drops the connection without a response.
pub(crate) async fn serve<F, Fut, E>(
    listener: TcpListener,
    answer: F,
    stop: CancellationToken,
    tasks: TaskTracker,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of descriptors and the like: back off rather than spin.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let (answer, stop) = (answer.clone(), stop.clone());
        tasks.spawn(async move {
            let conn = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service_fn(answer));
            tokio::select! {
                () = stop.cancelled() => {}
                _ = conn => {}
            }
        });
    }
}

async fn answer(
    state: Arc<State>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let seen = Instant::now();
    let id = request
        .headers()
        .get(DELIVERY_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // Read the body so the connection can carry the next request.
    let _ = request.into_body().collect().await;
    state.requests.fetch_add(1, Ordering::Relaxed);
    if let Some(id) = id {
        let new = {
            let mut first_seen = lock(&state.first_seen);
            let before = first_seen.len();
            first_seen.entry(id).or_insert(seen);
            first_seen.len() > before
        };
        if new {
            state.unique.send_modify(|n| *n += 1);
        }
    }
    Ok(Response::new(Full::new(Bytes::new())))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A port on 127.0.0.1 where nothing listens: bound (never listening) for the rest of this
/// process, so the OS cannot hand it to the receiver or anything else meanwhile. Connections to
/// it are refused, as a target that is down would refuse them.
pub fn refusing_port() -> anyhow::Result<u16> {
    static HELD: Mutex<Vec<tokio::net::TcpSocket>> = Mutex::new(Vec::new());
    let socket = tokio::net::TcpSocket::new_v4().context("make a socket")?;
    socket
        .bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .context("bind 127.0.0.1:0 to find a free port")?;
    let port = socket.local_addr().context("bound address")?.port();
    lock(&HELD).push(socket);
    Ok(port)
}
