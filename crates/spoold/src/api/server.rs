//! The control API's connections: HTTP/1.1 on the TCP or unix listener, with the limits a
//! server that untrusted clients can reach needs.
//!
//! - **Header read timeout** (`--header-read-timeout`): a connection must deliver a request's
//!   whole head within this long of being accepted, and of its last response (so it also ends
//!   a keep-alive connection left idle that long). A client holding a connection open with
//!   nothing or half a header (slowloris) is closed.
//! - **Connection cap** (`--max-connections`): at most this many connections are open at once;
//!   at the cap, new ones wait in the listen backlog until one closes (as Go's `LimitListener`),
//!   and the daemon keeps serving the ones it has.
//!
//! On shutdown, accepting stops and every connection finishes its request in progress, then
//! closes (as `axum::serve`'s graceful shutdown did).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The limits of the API's connections.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
}

/// Serve `router` on `listener` until `stop`, then let open connections finish.
pub async fn serve<L>(
    mut listener: L,
    router: axum::Router,
    limits: Limits,
    stop: CancellationToken,
) where
    L: axum::serve::Listener,
{
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
