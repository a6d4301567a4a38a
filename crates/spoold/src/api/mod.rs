//! The control API (axum): routing, the JSON error envelope, and request logging. One file per
//! resource below this module.
//!
//! **Invariant:** a response that acknowledges a write is built only from the store's `Ok`,
//! which the store returns only after COMMIT. **API boundary:** store types never reach the
//! wire; [`deliveries`] converts them to `spool_proto` types.

pub mod deliveries;
pub mod locks;
pub mod maildrop;
pub mod openapi;
pub mod server;
pub mod stats;
pub mod steps;
pub mod system;
pub mod targets;
pub mod task_output;
pub mod tasks;
pub mod transfer;
pub mod ui;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::Serialize;
use spool_proto::{BulkAction, BulkResult, ErrorBody, ErrorCode};
use spool_store::Store;
use tracing::{debug, info};

use crate::config::AuthToken;
use crate::metrics::Metrics;

/// What every handler can reach.
pub struct AppState {
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// The address policy and the default retry window, for creates.
    pub rules: crate::deliveries::submission::Rules,
    /// When set, every route but the health probes requires `Authorization: Bearer <token>`.
    pub auth_token: Option<AuthToken>,
    pub readiness: system::Readiness,
    /// Recent attempts and targets, for `/v1/stats` and `/v1/targets`.
    pub activity: Arc<crate::deliveries::activity::Activity>,
    /// When the daemon started (the store's clock): `activity` counts from then.
    pub started_at: spool_store::model::Millis,
    /// Operators' pauses and resumes of targets.
    pub control: Arc<crate::deliveries::scheduler::TargetControl>,
    /// URLs that answered 410 Gone.
    pub gone: Arc<crate::deliveries::gone::GoneUrls>,
    /// The maildrop picked up, unless `--maildrop off`.
    pub maildrop: Option<crate::maildrop::Maildrop>,
    /// The admission limit (`--max-db-bytes`); 0 = none.
    pub max_db_bytes: u64,
    /// The declared task types.
    /// The declared task types now (a reload replaces them).
    pub task_types: Arc<crate::tasks::Declared>,
    /// Attempts running here: to stop one whose task an operator canceled, to check a step
    /// token, to follow an attempt's output.
    pub running_tasks: Arc<crate::tasks::runner::Running>,
    /// Where attempts' output logs are.
    pub task_output_dir: std::path::PathBuf,
    /// The `[[targets]]` rules and `[secrets]` now (a reload replaces them): a create that names
    /// a secret must name a declared one.
    pub target_rules: Arc<crate::deliveries::targets::LiveRules>,
}

/// A request to a task's steps route authenticated by a step token: the attempt it belongs to.
#[derive(Debug, Clone, Copy)]
pub struct StepAuth {
    pub attempt: u32,
}

pub type SharedState = Arc<AppState>;

/// Build the router with every route, the JSON fallbacks and request logging.
pub fn router(state: SharedState) -> Router {
    Router::new()
        .route("/healthz", get(system::healthz))
        .route("/readyz", get(system::readyz))
        .route("/metrics", get(system::metrics))
        .route("/v1/openapi.json", get(openapi::openapi))
        .route("/", get(ui::root))
        .route("/ui", get(ui::index))
        .route("/ui/", get(ui::index))
        .route("/ui/app.js", get(ui::app))
        .route("/ui/style.css", get(ui::style))
        .route(
            "/v1/deliveries",
            post(deliveries::create).get(deliveries::list),
        )
        .route("/v1/deliveries/bulk", post(deliveries::bulk))
        .route("/v1/export", get(transfer::export))
        .route("/v1/import", post(transfer::import))
        .route("/v1/deliveries/{id}", get(deliveries::get))
        .route("/v1/deliveries/{id}/attempts", get(deliveries::attempts))
        .route(
            "/v1/deliveries/{id}/transitions",
            get(deliveries::transitions),
        )
        .route("/v1/deliveries/{id}/checks", get(deliveries::checks))
        .route("/v1/deliveries/{id}/resolve", post(deliveries::resolve))
        .route("/v1/deliveries/{id}/cancel", post(deliveries::cancel))
        .route("/v1/deliveries/{id}/retry", post(deliveries::retry))
        .route("/v1/tasks", post(tasks::submit).get(tasks::list))
        .route("/v1/tasks/bulk", post(tasks::bulk))
        .route("/v1/tasks/{id}", get(tasks::get))
        .route("/v1/tasks/{id}/attempts", get(tasks::attempts))
        .route("/v1/tasks/{id}/transitions", get(tasks::transitions))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel))
        .route("/v1/tasks/{id}/retry", post(tasks::retry))
        .route("/v1/tasks/{id}/resolve", post(tasks::resolve))
        .route("/v1/tasks/{id}/steps", post(steps::report).get(steps::list))
        .route("/v1/tasks/{id}/output", get(task_output::output))
        .route("/v1/locks", get(locks::list))
        .route("/v1/task-types", get(tasks::types))
        .route("/v1/stats", get(stats::stats))
        .route("/v1/targets", get(targets::targets))
        .route("/v1/maildrop", get(maildrop::maildrop))
        .route("/v1/targets/{origin}/pause", post(targets::pause))
        .route("/v1/targets/{origin}/resume", post(targets::resume))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            require_token,
        ))
        .layer(middleware::from_fn(log_request))
        // The create handler enforces its own limit with a JSON error.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

/// An error response: the stable code decides the HTTP status.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let close = matches!(
            self.code,
            ErrorCode::RequestTimeout | ErrorCode::ShuttingDown | ErrorCode::PayloadTooLarge
        );
        let mut response = json(status, &ErrorBody::new(self.code, self.message));
        if close {
            // What is left of the body would be read as the next request.
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

/// How large a route's body may be, and how a larger one is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLimit {
    /// At most this many bytes; a larger body is 413 `payload_too_large`, naming the limit.
    Bytes(usize),
    /// `POST /v1/deliveries`: at most this many bytes; a larger body is 400 `invalid_request`
    /// "decode JSON: request body too large", as spoold v0.1.0 answers it.
    AsV010(usize),
}

impl BodyLimit {
    fn bytes(self) -> usize {
        match self {
            BodyLimit::Bytes(n) | BodyLimit::AsV010(n) => n,
        }
    }

    fn refusal(self) -> ApiError {
        match self {
            BodyLimit::Bytes(n) => ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("request body too large: at most {n} bytes"),
            ),
            BodyLimit::AsV010(_) => ApiError::new(
                ErrorCode::InvalidRequest,
                "decode JSON: request body too large",
            ),
        }
    }
}

/// A request's whole body, within `limit` (a larger one is refused as `limit` says, and the
/// connection closed: the rest of the body is not read); a body that did not arrive within
/// `--body-read-timeout` is 408 `request_timeout`; one still arriving when the daemon begins to
/// shut down is 503 `shutting_down`; a connection that broke mid-body is 400 (nobody reads it).
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: BodyLimit,
) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, limit.bytes())
        .await
        .map_err(|e| {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(cause) = source {
                if let Some(timeout) = cause.downcast_ref::<server::BodyTimedOut>() {
                    return ApiError::new(ErrorCode::RequestTimeout, timeout.to_string());
                }
                if cause.is::<server::ShuttingDown>() {
                    return ApiError::new(ErrorCode::ShuttingDown, cause.to_string());
                }
                if cause.is::<http_body_util::LengthLimitError>() {
                    return limit.refusal();
                }
                source = cause.source();
            }
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("reading the request body: {e}"),
            )
        })
}

impl From<spool_store::StoreError> for ApiError {
    fn from(e: spool_store::StoreError) -> Self {
        tracing::error!(error = %e, "store operation failed");
        match e {
            spool_store::StoreError::DiskFull(_) => ApiError::new(
                ErrorCode::StorageFull,
                "storage is full; nothing was written",
            ),
            spool_store::StoreError::Unavailable(_) => ApiError::new(
                ErrorCode::StorageUnavailable,
                "the database cannot be reached; try again",
            ),
            _ => ApiError::new(
                ErrorCode::InternalError,
                "delivery state could not be updated",
            ),
        }
    }
}

/// A JSON response with a trailing newline, as spoold's encoder writes it.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(mut body) => {
            body.push(b'\n');
            (
                status,
                [(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                )],
                body,
            )
                .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "response serialisation failed");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A created (201) or existing (200) resource's view, with the resource's path as `Location`.
pub(crate) fn at_location<T: Serialize>(status: StatusCode, path: &str, view: &T) -> Response {
    let mut response = json(status, view);
    if let Ok(location) = HeaderValue::from_str(path) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

/// What every bulk request must say, checked alike for deliveries and tasks: an action, and a
/// filter with at least one field (`empty_filter` is the error that explains which). The
/// action, the filter, and whether it is a dry run.
pub(crate) fn bulk_request<F: Default + PartialEq>(
    action: Option<BulkAction>,
    filter: Option<F>,
    dry_run: Option<bool>,
    empty_filter: &str,
) -> Result<(BulkAction, F, bool), ApiError> {
    let invalid = |message: &str| ApiError::new(ErrorCode::InvalidRequest, message);
    let action = action.ok_or_else(|| invalid("action is required: retry or cancel"))?;
    let filter = filter.unwrap_or_default();
    if filter == F::default() {
        return Err(invalid(empty_filter));
    }
    Ok((action, filter, dry_run.unwrap_or(false)))
}

/// The answer to a bulk action, logged with what it did to which `resource` (`deliveries`,
/// `tasks`).
pub(crate) fn bulk_done(
    resource: &'static str,
    (action, dry_run): (BulkAction, bool),
    filter: &impl std::fmt::Debug,
    result: &BulkResult,
) -> Response {
    info!(
        resource,
        action = action.as_str(),
        dry_run,
        matched = result.matched,
        changed = result.changed,
        skipped = result.skipped,
        filter = ?filter,
        "bulk action"
    );
    json(StatusCode::OK, result)
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}

/// Query parameters, first value wins (as in spoold).
pub(crate) fn first_values(query: Option<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        out.entry(k.into_owned()).or_insert_with(|| v.into_owned());
    }
    out
}

/// The `limit` of a listing: 1–500, 100 when absent.
pub(crate) fn page_limit(params: &BTreeMap<String, String>) -> Result<u32, ApiError> {
    match params.get("limit").map(String::as_str) {
        None | Some("") => Ok(spool_proto::DEFAULT_LIST_LIMIT),
        // `50.0` is an integer too (as JSON Schema, and so generated clients, see it).
        Some(s) => s
            .parse::<i64>()
            .ok()
            .or_else(|| {
                s.parse::<f64>()
                    .ok()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 1e9)
                    .map(|f| f as i64)
            })
            .filter(|n| (1..=i64::from(spool_proto::MAX_LIST_LIMIT)).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| {
                ApiError::new(ErrorCode::InvalidLimit, "limit must be between 1 and 500")
            }),
    }
}

/// The `cursor` of a listing: the id (32 lowercase hex) of the last row of the previous page;
/// absent or empty for the first page.
pub(crate) fn page_cursor(params: &BTreeMap<String, String>) -> Result<Option<String>, ApiError> {
    match params.get("cursor").map(String::as_str) {
        None | Some("") => Ok(None),
        Some(c) if is_id(c) => Ok(Some(c.to_owned())),
        Some(_) => Err(ApiError::new(
            ErrorCode::InvalidCursor,
            "cursor must be the nextCursor of a previous page",
        )),
    }
}

/// The body of an operator's decision (`resolve`), decoded: at most 64 KiB of JSON.
pub(crate) async fn decision<T: serde::de::DeserializeOwned>(
    body: axum::body::Body,
) -> Result<T, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidRequest, message);
    let bytes = read_body(body, BodyLimit::Bytes(64 * 1024)).await?;
    serde_json::from_slice(&bytes).map_err(|e| invalid(format!("decode JSON: {e}")))
}

/// The note a decision must carry (kept in the transition log): given, not blank, at most
/// 4096 bytes; trimmed.
pub(crate) fn decision_note(note: Option<String>) -> Result<String, ApiError> {
    let invalid = |message: &str| ApiError::new(ErrorCode::InvalidRequest, message);
    let note = note.unwrap_or_default();
    let note = note.trim();
    if note.is_empty() {
        return Err(invalid("note is required: say why, for the transition log"));
    }
    if note.len() > spool_store::model::MAX_ERROR_BYTES {
        return Err(invalid("note must not exceed 4096 bytes"));
    }
    Ok(note.to_owned())
}

/// A bulk filter's time field (`filter.createdAfter`, …): RFC 3339, in milliseconds.
pub(crate) fn filter_time(
    name: &str,
    value: Option<&str>,
) -> Result<Option<spool_store::model::Millis>, ApiError> {
    value
        .map(|t| {
            spool_proto::units::parse_time(t).map_err(|e| {
                ApiError::new(ErrorCode::InvalidRequest, format!("filter.{name}: {e}"))
            })
        })
        .transpose()
}

/// 32 lowercase hex characters: a delivery's or a task's id.
pub(crate) fn is_id(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Routes that answer without a token: load balancers and supervisors probe them.
const OPEN_ROUTES: [&str; 2] = ["/healthz", "/readyz"];

async fn require_token(
    axum::extract::State(state): axum::extract::State<SharedState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.auth_token else {
        return next.run(request).await;
    };
    let path = request.uri().path();
    if OPEN_ROUTES.contains(&path) || ui::PATHS.contains(&path) {
        return next.run(request).await;
    }
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|p| tokens_match(p, token.expose())) {
        return next.run(request).await;
    }
    // A script's step token opens its own task's steps, while its attempt runs.
    if let (Some(presented), Some(task_id)) = (presented, steps_task(request.uri().path())) {
        if let Some(attempt) = state.running_tasks.step_token_attempt(task_id, presented) {
            request.extensions_mut().insert(StepAuth { attempt });
            return next.run(request).await;
        }
    }
    let mut response = ApiError::new(
        ErrorCode::Unauthorized,
        "a valid bearer token is required (Authorization: Bearer <token>)",
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The task id of a `/v1/tasks/{id}/steps` path.
fn steps_task(path: &str) -> Option<&str> {
    path.strip_prefix("/v1/tasks/")?
        .strip_suffix("/steps")
        .filter(|id| !id.is_empty() && !id.contains('/'))
}

/// Constant-time comparison: both sides are hashed first, so neither the position of the first
/// difference nor the token's length shows in the timing.
fn tokens_match(presented: &str, expected: &str) -> bool {
    use sha2::{Digest, Sha256};
    let a = Sha256::digest(presented.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// One log line per API request, with the route pattern rather than the raw path: at INFO for
/// requests that change something, at DEBUG for reads (`spoolctl wait` polls five times a
/// second).
async fn log_request(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let duration_ms = started.elapsed().as_millis() as u64;
    if method == axum::http::Method::GET || method == axum::http::Method::HEAD {
        debug!(method = %method, route = %route, status, duration_ms, "api request");
    } else {
        info!(method = %method, route = %route, status, duration_ms, "api request");
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins() {
        let p = first_values(Some("limit=5&limit=7&status=failed&x=%20y"));
        assert_eq!(p.get("limit").map(String::as_str), Some("5"));
        assert_eq!(p.get("status").map(String::as_str), Some("failed"));
        assert_eq!(p.get("x").map(String::as_str), Some(" y"));
    }
}
