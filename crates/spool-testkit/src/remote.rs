//! The "remote API" of the at-most-once tests: a scripted service on 127.0.0.1 that keeps its
//! own records, so a test can tell what the far side committed from what the daemon was told.
//! `POST /records` reads the whole body and commits a record, then answers, stalls past the
//! client's timeout or resets the connection ([`CreateBehavior`]); `GET /records?fingerprint=X`
//! lists the records with that fingerprint and can return 0, 1 or 2 matches, fail, answer
//! something that is not JSON, or lag behind the commits ([`SearchBehavior`]).
//!
//! Connections are served here (not by `axum::serve`) for the same reason as in
//! [`crate::receiver`]: dropping the [`RemoteApi`] must drop every open connection, stalled
//! ones included. Each connection also keeps a second descriptor of its socket so that a
//! scripted reset can close it with `SO_LINGER` 0: the peer then sees a reset, not an end of
//! stream.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use http::{header, HeaderMap, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

/// How often [`RemoteApi::wait_for_creates`] re-checks the count when it was not woken.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// A scripted remote API listening on `127.0.0.1`. Dropping it closes the listener and every
/// open connection; no task outlives it.
#[derive(Debug)]
pub struct RemoteApi {
    port: u16,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// A record the remote API committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `rec-1`, `rec-2`, … in commit order.
    pub id: String,
    /// The body's `"fingerprint"` string, else the `X-Fingerprint` header.
    pub fingerprint: Option<String>,
    /// The request body, as received.
    pub body: Vec<u8>,
    /// The `X-Spoold-Delivery-ID` header.
    pub delivery_id: Option<String>,
    /// The `X-Spoold-Attempt` header, when it is a number.
    pub attempt: Option<u32>,
    /// When the record was committed.
    pub committed_at: Instant,
}

/// How `POST /records` answers after it has read the whole request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CreateBehavior {
    /// Commit, then answer `201` with `{"id":"rec-N","fingerprint":…}`.
    #[default]
    Answer,
    /// Do not commit; answer this status with `{"error":"…"}`.
    Status(u16),
    /// Commit, then answer this status with `{"error":"…"}`.
    CommitThenStatus(u16),
    /// Commit, then never answer: the connection stays open until the client gives up or the
    /// remote API is dropped.
    Stall,
    /// Commit, then reset the connection (`SO_LINGER` 0 and close) without writing a byte of
    /// response.
    Reset,
}

/// How `GET /records` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchBehavior {
    /// `200` with every committed match.
    #[default]
    Honest,
    /// Eventual consistency: `200` without the records committed less than this long ago.
    Lag(Duration),
    /// Answer this status with `{"error":"…"}`.
    Fail(u16),
    /// `200` listing every match twice, as `rec-N` and `rec-N-dup`.
    Duplicate,
    /// `200` with `<html>oops</html>` as `text/html`.
    NotJson,
}

impl RemoteApi {
    /// Start on `127.0.0.1` with a port of the OS's choosing; it serves until dropped.
    ///
    /// # Panics
    /// If 127.0.0.1 cannot be bound at all.
    pub async fn start() -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("a test machine can bind 127.0.0.1:0");
        let port = listener
            .local_addr()
            .expect("a bound listener has an address")
            .port();
        let shared = Arc::new(Shared {
            state: Mutex::new(RemoteState::default()),
            creates: watch::Sender::new(0),
        });
        let router = Router::new()
            .route(
                "/records",
                get(search).post(create).fallback(not_found_handler),
            )
            .fallback(not_found_handler)
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(serve(listener, router));
        Self {
            port,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Answer creates this way once the one-shot behaviours are used up.
    pub fn set_create(&self, behavior: CreateBehavior) {
        lock(&self.shared.state).create = behavior;
    }

    /// Answer the next create not yet scripted this way, then go back to the standing
    /// behaviour. One-shot behaviours queue up and are used in the order they were set.
    pub fn set_create_once(&self, behavior: CreateBehavior) {
        lock(&self.shared.state).create_once.push_back(behavior);
    }

    /// Answer every search from now on this way.
    pub fn set_search(&self, behavior: SearchBehavior) {
        lock(&self.shared.state).search = behavior;
    }

    /// The number of `POST /records` calls received so far, whatever they were answered. A
    /// call is counted once its body has been read and, if it commits, after the commit.
    pub fn creates(&self) -> usize {
        *self.shared.creates.borrow()
    }

    /// The committed records, in commit order.
    pub fn records(&self) -> Vec<Record> {
        lock(&self.shared.state).records.clone()
    }

    /// The number of `GET /records` calls received so far, whatever they were answered.
    pub fn searches(&self) -> usize {
        lock(&self.shared.state).searches
    }

    /// Wait at most `timeout` until at least `n` creates have been received; whether they were.
    pub async fn wait_for_creates(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut creates = self.shared.creates.subscribe();
        loop {
            if *creates.borrow_and_update() >= n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            // Woken by the next create; the poll interval only bounds a missed wake-up.
            let _ = tokio::time::timeout_at(
                deadline.min(tokio::time::Instant::now() + POLL_INTERVAL),
                creates.changed(),
            )
            .await;
        }
    }
}

impl Drop for RemoteApi {
    fn drop(&mut self) {
        // Dropping the server future drops its JoinSet, which aborts every connection.
        self.server.abort();
    }
}

#[derive(Debug)]
struct Shared {
    state: Mutex<RemoteState>,
    /// Number of create calls, for [`RemoteApi::wait_for_creates`].
    creates: watch::Sender<usize>,
}

#[derive(Debug, Default)]
struct RemoteState {
    records: Vec<Record>,
    create_once: VecDeque<CreateBehavior>,
    create: CreateBehavior,
    search: SearchBehavior,
    searches: usize,
}

/// Handed to the handlers of one connection: cancelling it resets that connection.
#[derive(Debug, Clone)]
struct ConnectionReset(CancellationToken);

/// The fields of a create request that a record keeps.
struct Incoming {
    fingerprint: Option<String>,
    body: Bytes,
    delivery_id: Option<String>,
    attempt: Option<u32>,
}

impl Shared {
    /// Count a create call and, unless the script says otherwise, commit its record; the
    /// count is published after the commit so that a waiter sees the record.
    fn receive_create(&self, incoming: Incoming) -> (CreateBehavior, Option<Record>) {
        let mut state = lock(&self.state);
        let behavior = match state.create_once.pop_front() {
            Some(once) => once,
            None => state.create,
        };
        let record = match behavior {
            CreateBehavior::Status(_) => None,
            CreateBehavior::Answer
            | CreateBehavior::CommitThenStatus(_)
            | CreateBehavior::Stall
            | CreateBehavior::Reset => {
                let record = Record {
                    id: format!("rec-{}", state.records.len() + 1),
                    fingerprint: incoming.fingerprint,
                    body: incoming.body.to_vec(),
                    delivery_id: incoming.delivery_id,
                    attempt: incoming.attempt,
                    committed_at: Instant::now(),
                };
                state.records.push(record.clone());
                Some(record)
            }
        };
        self.creates.send_modify(|creates| *creates += 1);
        (behavior, record)
    }
}

/// Accept connections until aborted; aborting drops the listener and every connection.
async fn serve(listener: TcpListener, router: Router) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let reset = CancellationToken::new();
                    let router = router.clone().layer(Extension(ConnectionReset(reset.clone())));
                    connections.spawn(serve_connection(stream, router, reset));
                }
                // Out of descriptors or the like: pause rather than spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serve one connection until it ends or a handler asks for it to be reset.
async fn serve_connection(stream: TcpStream, router: Router, reset: CancellationToken) {
    // A second descriptor of the socket: the socket lives until both are closed, so `spare`,
    // closed last, decides how it ends.
    let spare = stream.as_fd().try_clone_to_owned();
    let mut connection = Box::pin(
        hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(router)),
    );
    tokio::select! {
        // A connection error (client gone) concerns only that connection.
        _ = &mut connection => return,
        () = reset.cancelled() => {}
    }
    let spare = spare.and_then(linger_zero);
    drop(connection);
    // Without a spare descriptor (out of descriptors) the client sees a plain close.
    drop(spare);
}

/// The socket behind `fd`, set to send a reset when its last descriptor is closed.
fn linger_zero(fd: OwnedFd) -> std::io::Result<TcpStream> {
    // The dup shares the socket's O_NONBLOCK flag, which `from_std` requires.
    let stream = TcpStream::from_std(std::net::TcpStream::from(fd))?;
    stream.set_zero_linger()?;
    Ok(stream)
}

async fn create(
    State(shared): State<Arc<Shared>>,
    Extension(ConnectionReset(reset)): Extension<ConnectionReset>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
        return error(StatusCode::BAD_REQUEST, "unreadable request body");
    };
    let incoming = Incoming {
        fingerprint: fingerprint(&body, &parts.headers),
        delivery_id: header_text(&parts.headers, "x-spoold-delivery-id"),
        attempt: header_text(&parts.headers, "x-spoold-attempt").and_then(|a| a.parse().ok()),
        body,
    };
    let (behavior, record) = shared.receive_create(incoming);
    match behavior {
        CreateBehavior::Answer => {
            let record = record.expect("an answered create has committed");
            json_response(
                StatusCode::CREATED,
                &json!({ "id": record.id, "fingerprint": record.fingerprint }),
            )
        }
        CreateBehavior::Status(status) | CreateBehavior::CommitThenStatus(status) => {
            scripted_error(status)
        }
        CreateBehavior::Stall => std::future::pending().await,
        CreateBehavior::Reset => {
            reset.cancel();
            // `serve_connection` drops this handler together with the connection.
            std::future::pending().await
        }
    }
}

async fn search(
    State(shared): State<Arc<Shared>>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Response {
    let (behavior, records) = {
        let mut state = lock(&shared.state);
        state.searches += 1;
        (state.search, state.records.clone())
    };
    let Ok(Query(query)) = query else {
        return error(StatusCode::BAD_REQUEST, "malformed query");
    };
    let wanted = query.get("fingerprint");
    let matches = records
        .iter()
        .filter(|record| wanted.is_none() || record.fingerprint.as_ref() == wanted);
    let listed: Vec<Value> = match behavior {
        SearchBehavior::Honest => matches.map(|r| listing(&r.id, r)).collect(),
        SearchBehavior::Lag(lag) => matches
            .filter(|r| r.committed_at.elapsed() >= lag)
            .map(|r| listing(&r.id, r))
            .collect(),
        SearchBehavior::Duplicate => matches
            .flat_map(|r| [listing(&r.id, r), listing(&format!("{}-dup", r.id), r)])
            .collect(),
        SearchBehavior::Fail(status) => return scripted_error(status),
        SearchBehavior::NotJson => {
            return (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "text/html")],
                "<html>oops</html>",
            )
                .into_response()
        }
    };
    json_response(StatusCode::OK, &json!({ "data": listed }))
}

async fn not_found_handler() -> Response {
    error(StatusCode::NOT_FOUND, "not found")
}

/// The body's `"fingerprint"` string, else the `X-Fingerprint` header.
fn fingerprint(body: &[u8], headers: &HeaderMap) -> Option<String> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|body| body.get("fingerprint")?.as_str().map(str::to_owned))
        .or_else(|| header_text(headers, "x-fingerprint"))
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

fn listing(id: &str, record: &Record) -> Value {
    json!({ "id": id, "fingerprint": record.fingerprint })
}

/// `status` with `{"error":"<reason>"}`; a status outside 100..=999 becomes a 500.
fn scripted_error(status: u16) -> Response {
    match StatusCode::from_u16(status) {
        Ok(status) => {
            let reason = status.canonical_reason().unwrap_or("scripted error");
            error(status, &reason.to_lowercase())
        }
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("testkit: bad scripted status {status}"),
        ),
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    json_response(status, &json!({ "error": message }))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section here is a push, a pop or a clone: a poisoned value is still whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
