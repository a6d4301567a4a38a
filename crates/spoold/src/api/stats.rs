//! `GET /v1/stats`: how bad is it, at a glance. Store counts (kept with every change, so this
//! costs the same at a million deliveries as at ten) and the daemon's recent activity.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use spool_proto::units::{format_duration, format_time};
use spool_proto::{ActivityView, StatsView};
use spool_store::model::DeliveryStatus;

use super::{json, ApiError, SharedState};
use crate::deliveries::activity::Window;

#[utoipa::path(get, path = "/v1/stats", tag = "overview",
    responses((status = 200, description = "Counts by status, the oldest due delivery, recent attempts, paused targets, database size", body = StatsView)))]
pub async fn stats(State(state): State<SharedState>) -> Result<Response, ApiError> {
    let stats = state.store.stats().await?;
    let now = state.store.now_ms();
    let deliveries = DeliveryStatus::ALL
        .into_iter()
        .map(|status| {
            let n = stats
                .by_status
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            (status.as_str().to_owned(), n)
        })
        .collect();
    let (five, hour) = state.activity.windows();
    let view = StatsView {
        deliveries,
        oldest_due_at: stats.oldest_due_at.map(format_time),
        oldest_due_age: stats
            .oldest_due_at
            .map(|at| format_duration(Duration::from_millis((now - at).max(0) as u64))),
        last_five_minutes: window(five),
        last_hour: window(hour),
        by_minute: state.activity.by_minute().into_iter().map(window).collect(),
        paused_targets: state.metrics.paused_targets.get().max(0) as u64,
        database_bytes: stats.db_bytes,
        max_database_bytes: (state.max_db_bytes > 0).then_some(state.max_db_bytes),
    };
    Ok(json(StatusCode::OK, &view))
}

fn window(w: Window) -> ActivityView {
    ActivityView {
        attempts: w.attempts,
        succeeded: w.succeeded,
        retryable_failures: w.retryable_failures,
        terminal_failures: w.terminal_failures,
        interrupted: w.interrupted,
        unknown: w.unknown,
    }
}
