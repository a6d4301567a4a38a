//! The client of spoold's HTTP API, over loopback TCP or a unix socket (hyper's connection API,
//! one connection per request, no TLS). Every JSON request is bounded: 20 s in total and 4 MiB
//! of response body, so a stuck or hostile server cannot hang or exhaust the CLI. A task's
//! output is the exception: it is streamed to the caller as it arrives, never held whole, and
//! only its head (and, unless it is followed, every pause between chunks) is bounded in time.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST, USER_AGENT};
use http::{HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use spool_proto::transfer::{ExportPage, ImportRequest, ImportResults};
use spool_proto::{
    AttemptList, BulkRequest, BulkResult, CheckList, DeliveryFilter, DeliveryList, DeliveryStatus,
    DeliveryView, LockList, ReportStep, ResolveRequest, ResolveTask, StatsView, SubmitTask,
    TargetList, TaskAttemptList, TaskBulkRequest, TaskList, TaskStatus, TaskStepList, TaskStepView,
    TaskTransitionList, TaskTypeList, TaskView, TransitionList,
};
use tokio::net::{TcpStream, UnixStream};
use url::form_urlencoded;

/// Total time for one request: connect, send, and read the whole response.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a bulk action may take to answer: it acts on every match before it does (about
/// 15,000 deliveries a second on SQLite, 1,300 on PostgreSQL, on a small machine).
pub const BULK_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Largest response body read; more is an error, not a truncation.
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// `Host` header sent over a unix socket, where there is no host name.
const UNIX_HOST: &str = "spoold";
const USER_AGENT_VALUE: &str = concat!("spoolctl/", env!("CARGO_PKG_VERSION"));

/// Why a `--server` value was refused. All of these are usage errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServerUrlError {
    #[error("parse --server: {0}")]
    Parse(String),
    #[error("--server must be http://host:port (or host:port) or unix:///path/to/socket")]
    Scheme,
    #[error(
        "--server uses https, but spoolctl does not support TLS; \
         use a unix:///path socket or a loopback http:// address"
    )]
    TlsUnsupported,
    #[error("--server must include a host")]
    MissingHost,
    #[error("--server must not include user information, a query, or a fragment")]
    HttpExtras,
    #[error("unix --server must contain an absolute socket path")]
    UnixPath,
    #[error("unix --server must not include user information, a query, or a fragment")]
    UnixExtras,
}

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No HTTP response: connect, send or receive failed, or the time ran out.
    #[error("contact spoold at {server}: {reason}")]
    Unreachable {
        server: String,
        reason: String,
        /// Whether a connection was made (so the request may have reached spoold).
        connected: bool,
    },
    /// spoold answered with its JSON error envelope.
    #[error("spoold returned HTTP {status} ({code}): {message}")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// A non-success answer without an error envelope (a proxy, a routing error, …).
    #[error("spoold returned HTTP {status}: {message}")]
    Http { status: u16, message: String },
    /// An answer that is not spoold's: HTML from a web server, another API's JSON, …
    #[error("the server at {server} did not answer like spoold (HTTP {status}, {content_type})")]
    NotSpoold {
        server: String,
        status: u16,
        content_type: String,
    },
    #[error("spoold response exceeds size limit")]
    ResponseTooLarge,
    /// A 2xx answer that is not what spoold sends: another JSON API behind `--server`.
    #[error("the server did not answer like spoold ({0}): is --server (or SPOOLD_URL) spoold's address?")]
    Decode(String),
    #[error("build request: {0}")]
    Request(String),
    /// Streamed output could not be written where it goes (stdout): a closed pipe, a full disk.
    #[error("write output")]
    Output(#[source] io::Error),
}

impl ClientError {
    /// Whether the daemon did not take the request and may be on its way (down, starting,
    /// stopping): no answer at all, or its own 503 `not_ready` or `shutting_down` (nothing was
    /// done). What `send` drops into the maildrop; never a refusal.
    pub fn daemon_away(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } => true,
            ClientError::Api { status, code, .. } => {
                *status == 503 && matches!(code.as_str(), "not_ready" | "shutting_down")
            }
            _ => false,
        }
    }

    /// For a write that got no answer (a `send`, a `task submit`), whether anything was stored:
    /// the one fact a job must know to decide what to do. A connection never made stored
    /// nothing; a failure after the request went out may have come after spoold stored it, and
    /// only the same idempotency key finds it again. `again` says how to repeat it safely.
    pub fn said_whether_stored(self, again: &str) -> anyhow::Error {
        match &self {
            ClientError::Unreachable {
                connected: false, ..
            } => anyhow::anyhow!("{self}; nothing was queued"),
            ClientError::Unreachable { .. } => {
                anyhow::anyhow!("{self}; it may have been queued: {again}")
            }
            _ => self.into(),
        }
    }

    /// Whether spoold refused the request for good: its own error answer (not a proxy's) with a
    /// 4xx status — a bad field, a blocked target, an unknown task type or secret, an
    /// idempotency key used for another request, a token it does not take, a route it does not
    /// have. The same request would be refused again; only a change to it, to the token or to
    /// the daemon's configuration helps. 408 `request_timeout` is not one: nothing was wrong with
    /// the request, it did not arrive in time. A 5xx (507 `journal_full`, 503 `shutting_down`,
    /// …) or no answer at all may go another way next time.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ClientError::Api { status, .. } if (400..500).contains(status) && *status != 408)
    }

    /// The HTTP status of spoold's (or another server's) answer, if there was one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. }
            | ClientError::Http { status, .. }
            | ClientError::NotSpoold { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A parsed `--server`: where to connect and what to put in front of every path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// The value as the user gave it, for error messages.
    given: String,
    endpoint: Endpoint,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Tcp {
        /// Host to connect to, without IPv6 brackets.
        host: String,
        port: u16,
        /// `Host` header value: the URL's authority without user info.
        authority: String,
        /// Percent-encoded path prefix without a trailing `/`; empty for none.
        base_path: String,
    },
    Unix {
        path: PathBuf,
    },
}

impl Server {
    /// Accepts `http://host[:port][/base]`, `host:port[/base]` (as `http://`) and
    /// `unix:///absolute/path`.
    pub fn parse(given: &str) -> Result<Server, ServerUrlError> {
        let s = given.trim();
        let endpoint = match s.split_once(':') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("unix") => parse_unix(rest)?,
            // `127.0.0.1:8080`, `localhost:8080`, `[::1]:8080`: an address, not a URL.
            _ if !s.contains("://") => parse_http(&format!("http://{s}"))?,
            _ => parse_http(s)?,
        };
        Ok(Server {
            given: given.trim().to_owned(),
            endpoint,
        })
    }
}

impl fmt::Display for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.given)
    }
}

fn parse_http(s: &str) -> Result<Endpoint, ServerUrlError> {
    let url = url::Url::parse(s).map_err(|e| match e {
        url::ParseError::EmptyHost => ServerUrlError::MissingHost,
        other => ServerUrlError::Parse(other.to_string()),
    })?;
    match url.scheme() {
        "http" => {}
        "https" => return Err(ServerUrlError::TlsUnsupported),
        _ => return Err(ServerUrlError::Scheme),
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => d.to_owned(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        _ => return Err(ServerUrlError::MissingHost),
    };
    let has_userinfo = !url.username().is_empty() || url.password().is_some();
    let has_query = url.query().is_some_and(|q| !q.is_empty());
    let has_fragment = url.fragment().is_some_and(|f| !f.is_empty());
    if has_userinfo || has_query || has_fragment {
        return Err(ServerUrlError::HttpExtras);
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let host_str = url.host_str().unwrap_or(&host);
    let authority = match url.port() {
        Some(p) => format!("{host_str}:{p}"),
        None => host_str.to_owned(),
    };
    Ok(Endpoint::Tcp {
        host,
        port,
        authority,
        base_path: url.path().trim_end_matches('/').to_owned(),
    })
}

/// `rest` is everything after `unix:`. Parsed by hand because a socket path is a file name, not
/// a URL path: only the authority (which must be empty), `?` and `#` are special.
fn parse_unix(rest: &str) -> Result<Endpoint, ServerUrlError> {
    let path = match rest.strip_prefix("//") {
        Some(after) => {
            let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
            let authority = &after[..authority_end];
            if authority.contains('@') {
                return Err(ServerUrlError::UnixExtras);
            }
            if !authority.is_empty() {
                return Err(ServerUrlError::UnixPath);
            }
            &after[authority_end..]
        }
        None => rest,
    };
    if path.contains(['?', '#']) {
        return Err(ServerUrlError::UnixExtras);
    }
    let path = percent_decode(path)?;
    if !path.starts_with('/') || path.len() < 2 {
        return Err(ServerUrlError::UnixPath);
    }
    Ok(Endpoint::Unix {
        path: PathBuf::from(path),
    })
}

fn percent_decode(s: &str) -> Result<String, ServerUrlError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(ServerUrlError::Parse(format!(
                    "invalid URL escape {:?}",
                    s.get(i..(i + 3).min(s.len())).unwrap_or("%")
                )));
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ServerUrlError::Parse("socket path is not UTF-8".into()))
}

/// A bearer token. Kept out of `Debug` output so it never lands in a log or panic message.
#[derive(Clone)]
pub struct Token(HeaderValue);

/// Why a token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    // Not `source`: the reason is said once, in this line.
    #[error("read token file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("token file {path} is empty")]
    Empty { path: String },
    #[error("token file {path} contains characters not allowed in an HTTP header")]
    Invalid { path: String },
}

impl Token {
    /// Reads the file; one trailing newline (`\n` or `\r\n`) is not part of the token.
    pub fn from_file(path: &Path) -> Result<Token, TokenError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| TokenError::Read {
            path: shown.clone(),
            error,
        })?;
        Token::from_contents(&text).ok_or_else(|| {
            if text.trim_end_matches(['\r', '\n']).is_empty() {
                TokenError::Empty { path: shown }
            } else {
                TokenError::Invalid { path: shown }
            }
        })
    }

    /// A token given as text (a file's contents, an environment variable); `None` if it is
    /// empty or not allowed in an HTTP header.
    pub fn from_contents(text: &str) -> Option<Token> {
        let token = text.strip_suffix('\n').unwrap_or(text);
        let token = token.strip_suffix('\r').unwrap_or(token);
        if token.is_empty() {
            return None;
        }
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        value.set_sensitive(true);
        Some(Token(value))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token([redacted])")
    }
}

/// Filter and page of `GET /v1/deliveries`.
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    pub status: Option<DeliveryStatus>,
    /// Only to this target (a URL or origin).
    pub target: Option<&'a str>,
    /// Only created at or after this RFC 3339 time.
    pub created_after: Option<&'a str>,
    pub newest_first: bool,
    pub limit: u32,
    pub cursor: Option<&'a str>,
}

/// Filter and page of `GET /v1/tasks`.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery<'a> {
    pub status: Option<TaskStatus>,
    pub task_type: Option<&'a str>,
    pub limit: u32,
    pub cursor: Option<&'a str>,
}

/// The two operator actions on a delivery (and on a task).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    Retry,
    Cancel,
}

impl Transition {
    pub fn as_str(self) -> &'static str {
        match self {
            Transition::Retry => "retry",
            Transition::Cancel => "cancel",
        }
    }
}

/// Result of a create: spoold says 201 for a new delivery and 200 for an idempotent replay.
#[derive(Debug, Clone)]
pub struct Created {
    pub is_new: bool,
    pub delivery: DeliveryView,
}

/// Result of a task submission: 201 for a new task, 200 for the one an idempotency key names.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub is_new: bool,
    pub task: TaskView,
}

/// Which output `GET /v1/tasks/{id}/output` streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutputQuery {
    /// `None`: spoold picks the latest attempt.
    pub attempt: Option<u32>,
    /// Keep streaming while the attempt runs; the response ends when it ends.
    pub follow: bool,
}

/// One spoold, reached by one `--server`. Cheap to keep; each request opens its own connection.
#[derive(Debug, Clone)]
pub struct Client {
    server: Server,
    token: Option<Token>,
    timeout: Duration,
}

/// A complete response: status and the whole body.
struct RawResponse {
    status: StatusCode,
    /// `Content-Type`, for telling spoold's JSON from another server's page.
    content_type: String,
    body: Bytes,
}

impl Client {
    /// How the daemon this client asks names the file that says where its maildrop is
    /// ([`spool_proto::maildrop::pointer_name`]): a daemon on this machine — a loopback
    /// address's port, or a unix socket — and `None` for another machine's.
    pub fn maildrop_pointer(&self) -> Option<spool_proto::maildrop::PointerOf<'_>> {
        use spool_proto::maildrop::PointerOf;
        match &self.server.endpoint {
            Endpoint::Tcp { host, port, .. } => {
                let local = host.eq_ignore_ascii_case("localhost")
                    || host
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback());
                local.then_some(PointerOf::Port(*port))
            }
            Endpoint::Unix { path } => path.to_str().map(PointerOf::Socket),
        }
    }

    pub fn new(server: Server, token: Option<Token>) -> Client {
        Client {
            server,
            token,
            timeout: REQUEST_TIMEOUT,
        }
    }

    /// `POST /v1/deliveries`
    /// `POST /v1/deliveries[?id=…]` of `body` (a create request's JSON): with `id`, the
    /// delivery gets that id, and a create asked again finds the one it made.
    pub async fn create_as(&self, body: Vec<u8>, id: Option<&str>) -> Result<Created, ClientError> {
        let path = match id {
            Some(id) => format!("/v1/deliveries?id={id}"),
            None => "/v1/deliveries".to_owned(),
        };
        let resp = self.send(Method::POST, &path, Some(body.into())).await?;
        let is_new = resp.status == StatusCode::CREATED;
        let delivery = decode(&resp)?;
        Ok(Created { is_new, delivery })
    }

    /// `GET /v1/deliveries/{id}[?reveal=true]`
    pub async fn get(&self, id: &str, reveal: bool) -> Result<DeliveryView, ClientError> {
        let mut path = delivery_path(id);
        if reveal {
            path.push_str("?reveal=true");
        }
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/deliveries?limit=…[&status=…][&cursor=…]`
    pub async fn list(&self, query: &ListQuery<'_>) -> Result<DeliveryList, ClientError> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", &query.limit.to_string());
        if let Some(status) = query.status {
            q.append_pair("status", status.as_str());
        }
        if let Some(target) = query.target {
            q.append_pair("target", target);
        }
        if let Some(after) = query.created_after {
            q.append_pair("createdAfter", after);
        }
        if query.newest_first {
            q.append_pair("order", "desc");
        }
        if let Some(cursor) = query.cursor {
            q.append_pair("cursor", cursor);
        }
        let path = format!("/v1/deliveries?{}", q.finish());
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/export`: a page of export records, `filter`'s deliveries.
    pub async fn export_page(
        &self,
        filter: &DeliveryFilter,
        cursor: Option<&str>,
    ) -> Result<ExportPage, ClientError> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", "100");
        if let Some(status) = filter.status {
            q.append_pair("status", status.as_str());
        }
        for (name, value) in [
            ("target", &filter.target_origin),
            ("createdAfter", &filter.created_after),
            ("createdBefore", &filter.created_before),
            ("lastErrorCode", &filter.last_error_code),
        ] {
            if let Some(value) = value {
                q.append_pair(name, value);
            }
        }
        if let Some(cursor) = cursor {
            q.append_pair("cursor", cursor);
        }
        let path = format!("/v1/export?{}", q.finish());
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `POST /v1/import`
    pub async fn import(&self, req: &ImportRequest) -> Result<ImportResults, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        decode(
            &self
                .send(Method::POST, "/v1/import", Some(body.into()))
                .await?,
        )
    }

    /// `GET /v1/deliveries/{id}/attempts`
    pub async fn attempts(&self, id: &str) -> Result<AttemptList, ClientError> {
        let path = format!("{}/attempts", delivery_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/deliveries/{id}/transitions`
    pub async fn transitions(&self, id: &str) -> Result<TransitionList, ClientError> {
        let path = format!("{}/transitions", delivery_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/deliveries/{id}/checks`
    pub async fn checks(&self, id: &str) -> Result<CheckList, ClientError> {
        let path = format!("{}/checks", delivery_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/stats`
    pub async fn stats(&self) -> Result<StatsView, ClientError> {
        decode(&self.send(Method::GET, "/v1/stats", None).await?)
    }

    /// `POST /v1/targets/{target}/pause` (or `resume`).
    pub async fn pause_target(
        &self,
        target: &str,
        pause: bool,
    ) -> Result<spool_proto::TargetPause, ClientError> {
        let action = if pause { "pause" } else { "resume" };
        let path = format!("{}/{action}", item_path("/v1/targets/", target));
        decode(&self.send(Method::POST, &path, None).await?)
    }

    /// `GET /v1/targets?limit=…[&cursor=…]`
    /// `GET /v1/maildrop`
    pub async fn maildrop(&self) -> Result<spool_proto::maildrop::MaildropView, ClientError> {
        decode(&self.send(Method::GET, "/v1/maildrop", None).await?)
    }

    pub async fn targets(
        &self,
        limit: u32,
        cursor: Option<&str>,
    ) -> Result<TargetList, ClientError> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", &limit.to_string());
        if let Some(cursor) = cursor {
            q.append_pair("cursor", cursor);
        }
        let path = format!("/v1/targets?{}", q.finish());
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `POST /v1/deliveries/{id}/retry` or `/cancel`
    pub async fn transition(
        &self,
        id: &str,
        action: Transition,
    ) -> Result<DeliveryView, ClientError> {
        let path = format!("{}/{}", delivery_path(id), action.as_str());
        decode(&self.send(Method::POST, &path, None).await?)
    }

    /// `POST /v1/deliveries/bulk`, waiting up to [`BULK_TIMEOUT`] for the answer.
    pub async fn bulk(&self, req: &BulkRequest) -> Result<BulkResult, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        decode(
            &self
                .patient()
                .send(Method::POST, "/v1/deliveries/bulk", Some(body.into()))
                .await?,
        )
    }

    /// `POST /v1/tasks/bulk`, waiting up to [`BULK_TIMEOUT`] for the answer.
    pub async fn task_bulk(&self, req: &TaskBulkRequest) -> Result<BulkResult, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        decode(
            &self
                .patient()
                .send(Method::POST, "/v1/tasks/bulk", Some(body.into()))
                .await?,
        )
    }

    /// This client, waiting for a bulk action's answer (a dry run reads every match too).
    fn patient(&self) -> Client {
        Client {
            timeout: BULK_TIMEOUT,
            ..self.clone()
        }
    }

    /// `POST /v1/deliveries/{id}/resolve`
    pub async fn resolve(
        &self,
        id: &str,
        req: &ResolveRequest,
    ) -> Result<DeliveryView, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        let path = format!("{}/resolve", delivery_path(id));
        decode(&self.send(Method::POST, &path, Some(body.into())).await?)
    }

    /// `POST /v1/tasks`
    pub async fn submit_task(&self, req: &SubmitTask) -> Result<Submitted, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        let resp = self
            .send(Method::POST, "/v1/tasks", Some(body.into()))
            .await?;
        let is_new = resp.status == StatusCode::CREATED;
        let task = decode(&resp)?;
        Ok(Submitted { is_new, task })
    }

    /// `GET /v1/tasks/{id}`
    pub async fn task(&self, id: &str) -> Result<TaskView, ClientError> {
        decode(&self.send(Method::GET, &task_path(id), None).await?)
    }

    /// `GET /v1/tasks?limit=…[&status=…][&type=…][&cursor=…]`
    pub async fn tasks(&self, query: &TaskQuery<'_>) -> Result<TaskList, ClientError> {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("limit", &query.limit.to_string());
        if let Some(status) = query.status {
            // The wire name is whatever the shared type serialises to.
            let name =
                serde_json::to_value(status).map_err(|e| ClientError::Request(e.to_string()))?;
            q.append_pair("status", name.as_str().unwrap_or_default());
        }
        if let Some(task_type) = query.task_type {
            q.append_pair("type", task_type);
        }
        if let Some(cursor) = query.cursor {
            q.append_pair("cursor", cursor);
        }
        let path = format!("/v1/tasks?{}", q.finish());
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/tasks/{id}/attempts`
    pub async fn task_attempts(&self, id: &str) -> Result<TaskAttemptList, ClientError> {
        let path = format!("{}/attempts", task_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/tasks/{id}/transitions`
    pub async fn task_transitions(&self, id: &str) -> Result<TaskTransitionList, ClientError> {
        let path = format!("{}/transitions", task_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `POST /v1/tasks/{id}/retry` or `/cancel`
    pub async fn task_transition(
        &self,
        id: &str,
        action: Transition,
    ) -> Result<TaskView, ClientError> {
        let path = format!("{}/{}", task_path(id), action.as_str());
        decode(&self.send(Method::POST, &path, None).await?)
    }

    /// `POST /v1/tasks/{id}/resolve`
    pub async fn resolve_task(&self, id: &str, req: &ResolveTask) -> Result<TaskView, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        let path = format!("{}/resolve", task_path(id));
        decode(&self.send(Method::POST, &path, Some(body.into())).await?)
    }

    /// `GET /v1/task-types`
    pub async fn task_types(&self) -> Result<TaskTypeList, ClientError> {
        decode(&self.send(Method::GET, "/v1/task-types", None).await?)
    }

    /// `POST /v1/tasks/{id}/steps`: the record, whether spoold made it now (201) or the step
    /// was done before (200, by the attempt the record names).
    pub async fn report_step(
        &self,
        id: &str,
        req: &ReportStep,
    ) -> Result<TaskStepView, ClientError> {
        let body = serde_json::to_vec(req).map_err(|e| ClientError::Request(e.to_string()))?;
        let path = format!("{}/steps", task_path(id));
        decode(&self.send(Method::POST, &path, Some(body.into())).await?)
    }

    /// `GET /v1/tasks/{id}/steps`
    pub async fn task_steps(&self, id: &str) -> Result<TaskStepList, ClientError> {
        let path = format!("{}/steps", task_path(id));
        decode(&self.send(Method::GET, &path, None).await?)
    }

    /// `GET /v1/locks`
    pub async fn locks(&self) -> Result<LockList, ClientError> {
        decode(&self.send(Method::GET, "/v1/locks", None).await?)
    }

    /// `GET /v1/tasks/{id}/output[?attempt=N][&follow=true]`: hands each chunk of the body to
    /// `write` as it arrives, so output of any size passes through in bounded memory.
    ///
    /// The response head must come within the request timeout. Without `follow` every pause
    /// between chunks is bounded the same way (spoold has the whole output); with it there is
    /// no bound, since a quiet script may print nothing for hours: the stream ends when the
    /// attempt does. The time `write` takes is never counted (a slow pager is not a stall).
    pub async fn task_output(
        &self,
        id: &str,
        query: OutputQuery,
        mut write: impl FnMut(&[u8]) -> io::Result<()>,
    ) -> Result<(), ClientError> {
        let path = output_path(id, query);
        let req = self.build_accepting(Method::GET, &path, None, OUTPUT_ACCEPT)?;
        let opened = match tokio::time::timeout(self.timeout, self.open(req)).await {
            Ok(result) => result?,
            Err(_) => return Err(self.no_response_within()),
        };
        if !opened.status.is_success() {
            let resp = match tokio::time::timeout(self.timeout, self.read_whole(opened)).await {
                Ok(result) => result?,
                Err(_) => return Err(self.no_response_within()),
            };
            return Err(status_error(&resp, &self.server));
        }
        if !is_output_type(&opened.content_type) {
            return Err(ClientError::NotSpoold {
                server: self.server.to_string(),
                status: opened.status.as_u16(),
                content_type: media_type(&opened.content_type),
            });
        }
        let idle = (!query.follow).then_some(self.timeout);
        let Opened {
            mut body, mut conn, ..
        } = opened;
        loop {
            let frame = conn
                .run(async {
                    match idle {
                        Some(idle) => tokio::time::timeout(idle, body.frame()).await.ok(),
                        None => Some(body.frame().await),
                    }
                })
                .await;
            let frame = match frame {
                None => {
                    return Err(
                        self.unreachable(format!("output stalled for {}s", self.timeout.as_secs()))
                    )
                }
                Some(None) => return Ok(()),
                Some(Some(Err(e))) => {
                    return Err(self.unreachable(format!("read output: {}", error_chain(&e))))
                }
                Some(Some(Ok(frame))) => frame,
            };
            // Trailers carry nothing for us.
            if let Ok(data) = frame.into_data() {
                if !data.is_empty() {
                    write(&data).map_err(ClientError::Output)?;
                }
            }
        }
    }

    /// Sends one request and returns the response if it is a 2xx; anything else becomes an
    /// error carrying spoold's message.
    async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Bytes>,
    ) -> Result<RawResponse, ClientError> {
        let req = self.build(method, path_and_query, body)?;
        let resp = match tokio::time::timeout(self.timeout, self.exchange(req)).await {
            Ok(result) => result?,
            Err(_) => return Err(self.no_response_within()),
        };
        let json = resp.content_type.starts_with("application/json");
        if resp.status.is_success() && json {
            Ok(resp)
        } else if resp.status.is_success() {
            Err(not_spoold(&resp, &self.server))
        } else {
            Err(status_error(&resp, &self.server))
        }
    }

    fn build(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        self.build_accepting(method, path_and_query, body, "application/json")
    }

    fn build_accepting(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Bytes>,
        accept: &'static str,
    ) -> Result<Request<Full<Bytes>>, ClientError> {
        let (host, uri) = match &self.server.endpoint {
            Endpoint::Tcp {
                authority,
                base_path,
                ..
            } => (authority.as_str(), format!("{base_path}{path_and_query}")),
            Endpoint::Unix { .. } => (UNIX_HOST, path_and_query.to_owned()),
        };
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(HOST, host)
            .header(ACCEPT, accept)
            .header(USER_AGENT, USER_AGENT_VALUE);
        if body.is_some() {
            builder = builder.header(CONTENT_TYPE, "application/json");
        } else if method == Method::POST {
            // hyper sends no framing for an empty body; say so, as Go's client does.
            builder = builder.header(CONTENT_LENGTH, "0");
        }
        if let Some(token) = &self.token {
            builder = builder.header(AUTHORIZATION, token.0.clone());
        }
        builder
            .body(Full::new(body.unwrap_or_default()))
            .map_err(|e| ClientError::Request(e.to_string()))
    }

    /// One request and its whole response (at most [`MAX_RESPONSE_BYTES`] of body).
    async fn exchange(&self, req: Request<Full<Bytes>>) -> Result<RawResponse, ClientError> {
        let opened = self.open(req).await?;
        self.read_whole(opened).await
    }

    /// Connects, sends the request and waits for the response head; the body is left to read.
    async fn open(&self, req: Request<Full<Bytes>>) -> Result<Opened, ClientError> {
        match &self.server.endpoint {
            Endpoint::Tcp { host, port, .. } => {
                let stream = TcpStream::connect((host.as_str(), *port))
                    .await
                    .map_err(|e| self.not_connected(format!("connect: {e}")))?;
                self.handshake(TokioIo::new(stream), req).await
            }
            Endpoint::Unix { path } => {
                let stream = UnixStream::connect(path)
                    .await
                    .map_err(|e| self.not_connected(format!("connect: {e}")))?;
                self.handshake(TokioIo::new(stream), req).await
            }
        }
    }

    /// Runs the HTTP/1 exchange on one connection up to the response head.
    async fn handshake<T>(&self, io: T, req: Request<Full<Bytes>>) -> Result<Opened, ClientError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(io)
            .await
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        let mut conn = Connection {
            future: Box::pin(conn),
            done: false,
        };
        let resp = conn
            .run(sender.send_request(req))
            .await
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        let (parts, body) = resp.into_parts();
        Ok(Opened {
            status: parts.status,
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("no content type")
                .to_owned(),
            body,
            conn,
            _sender: sender,
        })
    }

    /// Reads the rest of a response, at most [`MAX_RESPONSE_BYTES`] of body.
    async fn read_whole(&self, opened: Opened) -> Result<RawResponse, ClientError> {
        let Opened {
            status,
            content_type,
            body,
            mut conn,
            ..
        } = opened;
        let collected = conn
            .run(Limited::new(body, MAX_RESPONSE_BYTES).collect())
            .await
            .map_err(|e| {
                if e.downcast_ref::<LengthLimitError>().is_some() {
                    ClientError::ResponseTooLarge
                } else {
                    self.unreachable(format!("read response: {}", error_chain(&*e)))
                }
            })?;
        Ok(RawResponse {
            status,
            content_type,
            body: collected.to_bytes(),
        })
    }

    fn no_response_within(&self) -> ClientError {
        self.unreachable(format!(
            "no complete response within {}s",
            self.timeout.as_secs()
        ))
    }

    /// No connection could be made: nothing reached spoold.
    fn not_connected(&self, reason: String) -> ClientError {
        self.no_answer(reason, false)
    }

    /// A connection was made, and no answer came.
    fn unreachable(&self, reason: String) -> ClientError {
        self.no_answer(reason, true)
    }

    fn no_answer(&self, mut reason: String, connected: bool) -> ClientError {
        if reason.to_ascii_lowercase().contains("refused") || reason.contains("No such file") {
            reason.push_str(
                ": is spoold running there? (it listens on --listen, 127.0.0.1:8080 by default; \
                 spoolctl asks --server or SPOOLD_URL)",
            );
        }
        ClientError::Unreachable {
            server: self.server.given.clone(),
            reason,
            connected,
        }
    }
}

/// What `task_output` asks for: the output is bytes (not necessarily UTF-8); errors are JSON.
const OUTPUT_ACCEPT: &str = "text/plain, application/octet-stream, application/json";

/// A response whose head has arrived, with its body still to read on its connection.
struct Opened {
    status: StatusCode,
    content_type: String,
    body: Incoming,
    conn: Connection,
    /// Kept until the body is read: the connection is not told it may close before then.
    _sender: http1::SendRequest<Full<Bytes>>,
}

/// The connection of one exchange. It is polled alongside whatever waits on it (the request,
/// then each read of the body) instead of being spawned, so nothing outlives the call.
struct Connection {
    future: Pin<Box<dyn Future<Output = hyper::Result<()>>>>,
    done: bool,
}

impl Connection {
    /// Runs `work` while driving the connection.
    async fn run<F: Future>(&mut self, work: F) -> F::Output {
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                // A finished connection also fails the pending request or read, which reports it.
                _ = &mut self.future, if !self.done => self.done = true,
            }
        }
    }
}

/// `/v1/tasks/{id}/output` with the attempt and `follow=true` when asked.
fn output_path(id: &str, query: OutputQuery) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if let Some(attempt) = query.attempt {
        q.append_pair("attempt", &attempt.to_string());
    }
    if query.follow {
        q.append_pair("follow", "true");
    }
    let q = q.finish();
    if q.is_empty() {
        format!("{}/output", task_path(id))
    } else {
        format!("{}/output?{q}", task_path(id))
    }
}

/// Output comes as `text/plain` (any charset); `application/octet-stream` is taken too. Any
/// other type of 2xx answer (HTML, JSON) is not spoold's output and is not printed.
fn is_output_type(content_type: &str) -> bool {
    matches!(
        media_type(content_type).to_ascii_lowercase().as_str(),
        "text/plain" | "application/octet-stream"
    )
}

/// `text/plain; charset=utf-8` → `text/plain`.
fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `/v1/deliveries/{id}` with the id as one escaped path segment.
fn delivery_path(id: &str) -> String {
    item_path("/v1/deliveries/", id)
}

/// `/v1/tasks/{id}` with the id as one escaped path segment.
fn task_path(id: &str) -> String {
    item_path("/v1/tasks/", id)
}

/// `collection` (ending in `/`) followed by `id`, percent-encoded as one path segment.
fn item_path(collection: &str, id: &str) -> String {
    let mut path = String::from(collection);
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            path.push(char::from(b));
        } else {
            path.push_str(&format!("%{b:02X}"));
        }
    }
    path
}

fn decode<T: DeserializeOwned>(resp: &RawResponse) -> Result<T, ClientError> {
    serde_json::from_slice(&resp.body).map_err(|e| ClientError::Decode(e.to_string()))
}

/// The error for a non-2xx response: spoold's envelope if there is one (always one line); any
/// other answer means the server is not spoold, or a proxy in front of it answered.
fn status_error(resp: &RawResponse, server: &Server) -> ClientError {
    let status = resp.status.as_u16();
    match serde_json::from_slice::<spool_proto::ErrorBody>(&resp.body) {
        Ok(body) if !body.error.code.is_empty() => ClientError::Api {
            status,
            message: match status {
                401 => format!(
                    "{}: give spoolctl the token spoold requires with --token-file or \
                     SPOOLD_TOKEN_FILE",
                    one_line(&body.error.message)
                ),
                _ => one_line(&body.error.message),
            },
            code: body.error.code,
        },
        Ok(body) if !body.error.message.is_empty() => ClientError::Http {
            status,
            message: one_line(&body.error.message),
        },
        _ => not_spoold(resp, server),
    }
}

fn not_spoold(resp: &RawResponse, server: &Server) -> ClientError {
    ClientError::NotSpoold {
        server: server.to_string(),
        status: resp.status.as_u16(),
        content_type: media_type(&resp.content_type),
    }
}

/// Trimmed, control characters turned into spaces, at most 512 characters.
fn one_line(s: &str) -> String {
    const MAX_CHARS: usize = 512;
    let cleaned: String = s
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if cleaned.chars().count() > MAX_CHARS {
        let mut cut: String = cleaned.chars().take(MAX_CHARS).collect();
        cut.push('…');
        cut
    } else {
        cleaned
    }
}

/// `outer: inner: root`, skipping a cause whose text the outer message already contains.
fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, authority: &str, base_path: &str) -> Endpoint {
        Endpoint::Tcp {
            host: host.into(),
            port,
            authority: authority.into(),
            base_path: base_path.into(),
        }
    }

    #[test]
    fn server_urls() {
        let ok = [
            (
                "http://127.0.0.1:8080",
                tcp("127.0.0.1", 8080, "127.0.0.1:8080", ""),
            ),
            (
                " http://127.0.0.1:8080/ ",
                tcp("127.0.0.1", 8080, "127.0.0.1:8080", ""),
            ),
            (
                "http://127.0.0.1:9/spool/api/",
                tcp("127.0.0.1", 9, "127.0.0.1:9", "/spool/api"),
            ),
            ("http://localhost", tcp("localhost", 80, "localhost", "")),
            ("HTTP://[::1]:7000", tcp("::1", 7000, "[::1]:7000", "")),
            (
                "http://127.0.0.1:8080/?",
                tcp("127.0.0.1", 8080, "127.0.0.1:8080", ""),
            ),
            (
                "unix:///run/spoold/api.sock",
                Endpoint::Unix {
                    path: "/run/spoold/api.sock".into(),
                },
            ),
            (
                "unix:/tmp/a%20b.sock",
                Endpoint::Unix {
                    path: "/tmp/a b.sock".into(),
                },
            ),
            (
                "UNIX:///tmp/x@y.sock",
                Endpoint::Unix {
                    path: "/tmp/x@y.sock".into(),
                },
            ),
        ];
        for (input, endpoint) in ok {
            assert_eq!(
                Server::parse(input).map(|s| s.endpoint),
                Ok(endpoint),
                "{input}"
            );
        }
    }

    #[test]
    fn bad_server_urls() {
        use ServerUrlError as E;
        let bad = [
            ("https://127.0.0.1:8443", E::TlsUnsupported),
            ("ftp://127.0.0.1", E::Scheme),
            ("http://", E::MissingHost),
            ("http://user:pw@127.0.0.1", E::HttpExtras),
            ("http://127.0.0.1/?a=b", E::HttpExtras),
            ("http://127.0.0.1/#frag", E::HttpExtras),
            ("unix://relative/x.sock", E::UnixPath),
            ("unix:relative.sock", E::UnixPath),
            ("unix://", E::UnixPath),
            ("unix:///", E::UnixPath),
            ("unix://me@/x.sock", E::UnixExtras),
            ("unix:///x.sock?a=b", E::UnixExtras),
            ("unix:///x.sock#f", E::UnixExtras),
        ];
        for (input, err) in bad {
            assert_eq!(Server::parse(input), Err(err), "{input}");
        }
        for input in [
            "",
            "not a url",
            "http://127.0.0.1:99999",
            "127.0.0.1:99999",
            "unix:///a%zz",
            "unix:///a%+1",
        ] {
            assert!(Server::parse(input).is_err(), "{input}");
        }
    }

    #[test]
    fn an_address_is_an_http_server() {
        for (given, host, port) in [
            ("127.0.0.1:8080", "127.0.0.1", 8080),
            ("localhost:9000", "localhost", 9000),
            ("[::1]:8080", "::1", 8080),
        ] {
            match Server::parse(given).map(|s| s.endpoint) {
                Ok(Endpoint::Tcp {
                    host: h, port: p, ..
                }) => {
                    assert_eq!((h.as_str(), p), (host, port), "{given}")
                }
                other => panic!("{given}: {other:?}"),
            }
        }
    }

    #[test]
    fn server_keeps_the_given_text_for_messages() {
        let server = Server::parse("http://127.0.0.1:8080/").expect("valid");
        assert_eq!(server.to_string(), "http://127.0.0.1:8080/");
    }

    #[test]
    fn paths_escape_the_id() {
        assert_eq!(delivery_path("abc123"), "/v1/deliveries/abc123");
        assert_eq!(delivery_path("a/b c?"), "/v1/deliveries/a%2Fb%20c%3F");
        assert_eq!(task_path("a/b"), "/v1/tasks/a%2Fb");
    }

    #[test]
    fn output_paths() {
        let path = |attempt, follow| output_path("a/b", OutputQuery { attempt, follow });
        assert_eq!(path(None, false), "/v1/tasks/a%2Fb/output");
        assert_eq!(path(Some(2), false), "/v1/tasks/a%2Fb/output?attempt=2");
        assert_eq!(path(None, true), "/v1/tasks/a%2Fb/output?follow=true");
        assert_eq!(
            path(Some(3), true),
            "/v1/tasks/a%2Fb/output?attempt=3&follow=true"
        );
    }

    #[test]
    fn output_content_types() {
        for ok in [
            "text/plain",
            "text/plain; charset=utf-8",
            "Text/Plain",
            "application/octet-stream",
        ] {
            assert!(is_output_type(ok), "{ok}");
        }
        for bad in [
            "application/json",
            "text/html; charset=utf-8",
            "no content type",
        ] {
            assert!(!is_output_type(bad), "{bad}");
        }
    }

    /// A server for one connection on 127.0.0.1: reads the request head, hands its first line
    /// to `respond` along with the socket, and lets it write whatever answer it likes.
    async fn serve_once<F, Fut>(respond: F) -> (Client, tokio::task::JoinHandle<()>)
    where
        F: FnOnce(String, TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        use tokio::io::AsyncReadExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("bound address");
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("a connection");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                socket.read_exact(&mut byte).await.expect("request head");
                head.push(byte[0]);
            }
            let head = String::from_utf8(head).expect("ASCII head");
            let line = head.lines().next().unwrap_or_default().to_owned();
            respond(line, socket).await;
        });
        let client = Client::new(Server::parse(&addr.to_string()).expect("valid"), None);
        (client, server)
    }

    #[tokio::test]
    async fn output_is_handed_on_as_it_arrives() {
        use tokio::io::AsyncWriteExt as _;
        let (first_seen, seen) = tokio::sync::oneshot::channel::<()>();
        let (client, server) = serve_once(move |line, mut socket| async move {
            assert_eq!(
                line,
                "GET /v1/tasks/t1/output?attempt=2&follow=true HTTP/1.1"
            );
            socket
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\n\
                      transfer-encoding: chunked\r\n\r\n6\r\nhello\n\r\n",
                )
                .await
                .expect("write");
            // The rest only once the client has handed on the first chunk: a client that
            // waited for the whole body would never get here.
            seen.await.expect("the first chunk was handed on");
            socket
                .write_all(b"3\r\n\xff\xfe\n\r\n0\r\n\r\n")
                .await
                .expect("write");
        })
        .await;
        let mut got = Vec::new();
        let mut first_seen = Some(first_seen);
        let query = OutputQuery {
            attempt: Some(2),
            follow: true,
        };
        let result = tokio::time::timeout(
            Duration::from_secs(10),
            client.task_output("t1", query, |chunk| {
                got.extend_from_slice(chunk);
                if let Some(tx) = first_seen.take() {
                    let _ = tx.send(());
                }
                Ok(())
            }),
        )
        .await
        .expect("no deadlock");
        result.expect("streamed");
        assert_eq!(got, b"hello\n\xff\xfe\n");
        server.await.expect("server done");
    }

    #[tokio::test]
    async fn output_errors() {
        use tokio::io::AsyncWriteExt as _;
        let answer = |status: &'static str, content_type: &'static str, body: &'static [u8]| {
            move |_line: String, mut socket: TcpStream| async move {
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n\
                     content-length: {}\r\n\r\n",
                    body.len()
                );
                socket.write_all(head.as_bytes()).await.expect("write");
                socket.write_all(body).await.expect("write");
                socket.shutdown().await.expect("shutdown");
            }
        };
        let query = OutputQuery::default();

        let (client, server) = serve_once(answer(
            "404 Not Found",
            "application/json",
            br#"{"error":{"code":"output_not_found","message":"no output kept"}}"#,
        ))
        .await;
        let err = client
            .task_output("t1", query, |_| Ok(()))
            .await
            .expect_err("a 404");
        assert!(
            matches!(&err, ClientError::Api { status: 404, code, .. } if code == "output_not_found"),
            "{err:?}"
        );
        server.await.expect("server done");

        let (client, server) = serve_once(answer("200 OK", "text/html", b"<html>")).await;
        let err = client
            .task_output("t1", query, |_| panic!("nothing is written"))
            .await
            .expect_err("not spoold");
        assert!(
            matches!(err, ClientError::NotSpoold { status: 200, .. }),
            "{err:?}"
        );
        server.await.expect("server done");

        let (client, server) = serve_once(answer("200 OK", "text/plain", b"ok")).await;
        let err = client
            .task_output("t1", query, |_| Err(io::ErrorKind::BrokenPipe.into()))
            .await
            .expect_err("stdout closed");
        let ClientError::Output(io_err) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(io_err.kind(), io::ErrorKind::BrokenPipe);
        // `main` finds it in the chain and exits quietly.
        let err = anyhow::Error::from(err);
        assert!(err.chain().any(|e| e.downcast_ref::<io::Error>().is_some()));
        server.await.expect("server done");
    }

    #[test]
    fn requests_carry_the_standard_headers() {
        let token = Token::from_contents("s3cret\n");
        let client = Client::new(
            Server::parse("http://127.0.0.1:8080/base").expect("valid"),
            token,
        );
        let req = client
            .build(
                Method::POST,
                "/v1/deliveries",
                Some(Bytes::from_static(b"{}")),
            )
            .expect("valid request");
        assert_eq!(req.uri(), "/base/v1/deliveries");
        let h = req.headers();
        assert_eq!(h[HOST], "127.0.0.1:8080");
        assert_eq!(h[ACCEPT], "application/json");
        assert_eq!(h[CONTENT_TYPE], "application/json");
        assert_eq!(
            h[USER_AGENT],
            concat!("spoolctl/", env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(h[AUTHORIZATION], "Bearer s3cret");

        let client = Client::new(Server::parse("unix:///tmp/s.sock").expect("valid"), None);
        let req = client
            .build(Method::GET, "/v1/deliveries/x", None)
            .expect("valid request");
        assert_eq!(req.uri(), "/v1/deliveries/x");
        assert_eq!(req.headers()[HOST], "spoold");
        assert!(req.headers().get(CONTENT_TYPE).is_none());
        assert!(req.headers().get(AUTHORIZATION).is_none());

        let req = client
            .build(Method::POST, "/v1/deliveries/x/cancel", None)
            .expect("valid request");
        assert_eq!(req.headers()[CONTENT_LENGTH], "0");
    }

    #[test]
    fn tokens() {
        let value = |s: &str| Token::from_contents(s).map(|t| t.0);
        assert_eq!(value("abc\n").expect("valid"), "Bearer abc");
        assert_eq!(value("abc\r\n").expect("valid"), "Bearer abc");
        assert_eq!(value("abc").expect("valid"), "Bearer abc");
        assert_eq!(value("abc\n\n").map(|_| ()), None, "inner newline");
        assert!(value("\n").is_none());
        assert!(value("").is_none());
        let token = Token::from_contents("abc").expect("valid");
        assert_eq!(format!("{token:?}"), "Token([redacted])");
    }

    #[test]
    fn error_responses() {
        let server = Server::parse("127.0.0.1:8080").expect("an address");
        let check = |status: u16, content_type: &str, body: &str, expected: &str| {
            let resp = RawResponse {
                status: StatusCode::from_u16(status).expect("valid status"),
                content_type: content_type.to_owned(),
                body: Bytes::copy_from_slice(body.as_bytes()),
            };
            assert_eq!(status_error(&resp, &server).to_string(), expected, "{body}");
        };
        check(
            409,
            "application/json",
            r#"{"error":{"code":"idempotency_conflict","message":"key reused"}}"#,
            "spoold returned HTTP 409 (idempotency_conflict): key reused",
        );
        check(
            404,
            "text/html; charset=utf-8",
            "<html><body>Not Found</body></html>",
            "the server at 127.0.0.1:8080 did not answer like spoold (HTTP 404, text/html)",
        );
        check(
            502,
            "no content type",
            "",
            "the server at 127.0.0.1:8080 did not answer like spoold (HTTP 502, no content type)",
        );
    }
}
