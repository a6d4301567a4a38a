//! Liveness, readiness and metrics.
//!
//! Readiness is a real durable write, and `/readyz` needs no token: so the write is made at most
//! once per [`READINESS_TTL`] (or sooner if a write has failed since), and every probe in between
//! is answered from its result.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use spool_proto::{ErrorBody, ErrorCode};
use utoipa::ToSchema;

use super::{json, ApiError, SharedState};

/// `{"status":"ok"}`
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusOk {
    #[schema(example = "ok")]
    pub status: &'static str,
}

const OK: StatusOk = StatusOk { status: "ok" };

#[utoipa::path(get, path = "/healthz", tag = "system",
    responses((status = 200, description = "The process is alive", body = StatusOk)))]
pub async fn healthz() -> Response {
    json(StatusCode::OK, &OK)
}

/// `{"status":"ok"}`, and what the store's promise lacks, if anything.
#[derive(Debug, Serialize, ToSchema)]
pub struct Ready {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// What an operator should know although the store can write: with PostgreSQL, a
    /// replication under which a failover may lose acknowledged writes (asynchronous standbys
    /// only), or under which commits wait (a synchronous standby named and none streaming).
    /// Absent when there is nothing to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Ready means the store can make a write durable right now: a real write is attempted (and
/// given [`READINESS_WRITE_TIMEOUT`] to commit).
#[utoipa::path(get, path = "/readyz", tag = "system",
    responses(
        (status = 200, description = "The store can write", body = Ready),
        (status = 503, description = "`not_ready`", body = ErrorBody),
    ))]
pub async fn readyz(State(state): State<SharedState>) -> Response {
    match probe_store(&state).await {
        Ok(()) => {
            let warnings = replication_risk(&state).await.into_iter().collect();
            json(
                StatusCode::OK,
                &Ready {
                    status: OK.status,
                    warnings,
                },
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            ApiError::new(
                ErrorCode::NotReady,
                format!("journal persistence is unavailable: {e}"),
            )
            .into_response()
        }
    }
}

/// Prometheus text format 0.0.4 by default (as spoold v0.1.0); OpenMetrics when the scraper
/// asks for it in `Accept`.
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus metrics: text format 0.0.4, or OpenMetrics if requested", content_type = "text/plain")))]
pub async fn metrics(State(state): State<SharedState>, headers: HeaderMap) -> Response {
    // Readiness as a metric, so "not ready" can be alerted on from the scrape alone.
    let _ = probe_store(&state).await;
    match state.store.stats().await {
        Ok(stats) => state.metrics.observe_store(&stats, state.store.now_ms()),
        Err(e) => tracing::warn!(error = %e, "store statistics unavailable for metrics"),
    }
    match state.store.task_counts().await {
        Ok(counts) => state.metrics.observe_tasks(&counts),
        Err(e) => tracing::warn!(error = %e, "task counts unavailable for metrics"),
    }
    let _ = replication_risk(&state).await;
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/openmetrics-text"));
    let (content_type, body) = if wants_openmetrics {
        (
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            state.metrics.encode_openmetrics(),
        )
    } else {
        ("text/plain; version=0.0.4", state.metrics.encode_classic())
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

/// How long one probe's result answers for.
pub const READINESS_TTL: Duration = Duration::from_secs(1);

/// How long the readiness write may take to commit before the daemon says it is not ready
/// (a commit that waits for a synchronous standby that is not there never does).
pub const READINESS_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// With PostgreSQL: what its replication does not promise, if anything (and the metrics that
/// say so); read at most every few seconds.
async fn replication_risk(state: &SharedState) -> Option<String> {
    match state.store.replication().await {
        Ok(Some(replication)) => {
            state.metrics.observe_replication(&replication);
            replication.risk()
        }
        Ok(None) => None,
        Err(e) => {
            tracing::debug!(error = %e, "the server's replication could not be read");
            None
        }
    }
}

/// The last readiness probe and when it was made.
#[derive(Debug, Default)]
pub struct Readiness {
    // An async mutex, held across the probe on purpose: concurrent callers wait for the one
    // probe in progress and share its result instead of each making a write. If the prober's
    // request is dropped, the guard goes with it and the next caller probes.
    last: tokio::sync::Mutex<Option<Probe>>,
}

#[derive(Debug)]
struct Probe {
    at: Instant,
    /// The store's count of failed writes when the probe was made.
    failures: u64,
    result: Result<(), String>,
}

/// A durable write at most once per [`READINESS_TTL`] (and after a write has failed since the
/// last one), recorded in the `spoold_ready` gauge.
async fn probe_store(state: &SharedState) -> Result<(), String> {
    let mut last = state.readiness.last.lock().await;
    let failures = state.store.write_failures();
    if let Some(probe) = &*last {
        if probe.at.elapsed() < READINESS_TTL && probe.failures == failures {
            return probe.result.clone();
        }
    }
    let result = match tokio::time::timeout(READINESS_WRITE_TIMEOUT, state.store.ping()).await {
        Ok(done) => done.map_err(|e| e.to_string()),
        Err(_) => {
            // A read commits nothing: it is answered even while commits wait for a standby.
            let replication =
                tokio::time::timeout(Duration::from_secs(2), state.store.replication());
            let why = match replication.await {
                Ok(Ok(Some(r))) => {
                    state.metrics.observe_replication(&r);
                    r.risk()
                }
                _ => None,
            }
            .unwrap_or_else(|| "the database did not answer".into());
            Err(format!(
                "a write did not commit within {} s: {why}",
                READINESS_WRITE_TIMEOUT.as_secs()
            ))
        }
    };
    state.metrics.ready.set(i64::from(result.is_ok()));
    *last = Some(Probe {
        at: Instant::now(),
        failures,
        result: result.clone(),
    });
    result
}
