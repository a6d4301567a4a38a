//! The control API's connections: HTTP/1.1 on the TCP or unix listener, with the limits a
//! server that untrusted clients can reach needs.
//!
//! - **Header read timeout** (`--header-read-timeout`): a connection must deliver a request's
//!   whole head within this long of being accepted, and of its last response (so it also ends
//!   a keep-alive connection left idle that long). A client holding a connection open with
//!   nothing or half a header (slowloris) is closed.
//! - **Body read timeout** (`--body-read-timeout`): a request's body must arrive in full within
//!   this long of its head. A client that trickles a body (or stops sending one) gets 408
//!   `request_timeout` and the connection is closed; bodies are size-limited as well, so a
//!   request can hold neither memory nor a connection without bound.
//! - **Connection cap** (`--max-connections`): at most this many connections are open at once;
//!   at the cap, new ones wait in the listen backlog until one closes (as Go's `LimitListener`),
//!   and the daemon keeps serving the ones it has.
//!
//! On shutdown, accepting stops and every connection finishes its request in progress, then
//! closes (as `axum::serve`'s graceful shutdown did) — except a request whose body is still
//! arriving: nothing of it has been done, so it is answered 503 `shutting_down` at once and
//! its connection closed, and a client trickling a body cannot hold the shutdown up for
//! `--body-read-timeout`.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Frame, SizeHint};

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::ConnectionLimits;

/// Serve `router` on `listener` until `stop`, then let open connections finish.
pub async fn serve<L>(
    mut listener: L,
    router: axum::Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) where
    L: axum::serve::Listener,
{
    let body_timeout = limits.body_read_timeout;
    let stopping = stop.clone();
    // Runs as the request's head has been read, before routing: the body's clock starts there.
    let router = router.layer(axum::middleware::map_request(
        move |request: axum::extract::Request| {
            let stop = stopping.clone();
            async move {
                Ok::<_, std::convert::Infallible>(
                    // Most requests (GET, POST without a body) have nothing to wait for: no
                    // timer.
                    request.map(|body| {
                        if http_body::Body::is_end_stream(&body) {
                            body
                        } else {
                            axum::body::Body::new(Deadline::new(body, body_timeout, stop))
                        }
                    }),
                )
            }
        },
    ));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connections = TaskTracker::new();
    loop {
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => slot,
            () = stop.cancelled() => break,
        };
        let Ok(slot) = slot else { break };
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = stop.cancelled() => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(io), service);
        let stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = stop.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(slot);
        });
    }
    connections.close();
    connections.wait().await;
}

/// The error a body gives once its deadline has passed (see `Deadline`).
#[derive(Debug)]
pub struct BodyTimedOut(pub Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive in full within {:?} (--body-read-timeout)",
            self.0
        )
    }
}

impl std::error::Error for BodyTimedOut {}

/// The error a body gives once the daemon begins to shut down (see `Deadline`).
#[derive(Debug)]
pub struct ShuttingDown;

impl std::fmt::Display for ShuttingDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "the daemon is shutting down and did not wait for the rest of the body; \
             nothing was done",
        )
    }
}

impl std::error::Error for ShuttingDown {}

/// A request body that fails with [`BodyTimedOut`] if it has not ended by a deadline, and with
/// [`ShuttingDown`] as soon as the daemon begins to shut down.
struct Deadline {
    inner: axum::body::Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    stop: Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    after: Duration,
}

impl Deadline {
    fn new(inner: axum::body::Body, after: Duration, stop: CancellationToken) -> Deadline {
        Deadline {
            inner,
            sleep: Box::pin(tokio::time::sleep(after)),
            stop: Box::pin(stop.cancelled_owned()),
            after,
        }
    }
}

impl http_body::Body for Deadline {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if self.stop.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(axum::Error::new(ShuttingDown))));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(self.after))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
