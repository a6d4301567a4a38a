//! `GET /v1/stats`: how bad is it, at a glance. Store counts of deliveries and tasks (kept with
//! every change, so this costs the same at a million as at ten) and the daemon's recent
//! activity.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use spool_proto::units::{format_duration, format_time};
use spool_proto::{ActivityView, StatsView};
use spool_store::model::DeliveryStatus;
use spool_store::tasks::TaskStatus;

use super::{json, ApiError, SharedState};
use crate::deliveries::activity::Window;

#[utoipa::path(get, path = "/v1/stats", tag = "overview",
    responses((status = 200, description = "Deliveries and tasks by status, the oldest due delivery, recent attempts, paused targets, database size", body = StatsView)))]
pub async fn stats(State(state): State<SharedState>) -> Result<Response, ApiError> {
    let stats = state.store.stats().await?;
    let task_counts = state.store.task_counts().await?;
    let now = state.store.now_ms();
    let (five, hour) = state.activity.windows();
    let view = StatsView {
        deliveries: every_status(
            DeliveryStatus::ALL,
            &stats.by_status,
            DeliveryStatus::as_str,
        ),
        tasks: every_status(TaskStatus::ALL, &task_counts, TaskStatus::as_str),
        oldest_due_at: stats.oldest_due_at.map(format_time),
        oldest_due_age: stats
            .oldest_due_at
            .map(|at| format_duration(Duration::from_millis((now - at).max(0) as u64))),
        started_at: Some(format_time(state.started_at)),
        last_five_minutes: window(five),
        last_hour: window(hour),
        by_minute: state.activity.by_minute().into_iter().map(window).collect(),
        paused_targets: state.metrics.paused_targets.get().max(0) as u64,
        database_bytes: stats.db_bytes,
        max_database_bytes: (state.max_db_bytes > 0).then_some(state.max_db_bytes),
    };
    Ok(json(StatusCode::OK, &view))
}

/// Every status by name with its count, zero for those the store has none of.
fn every_status<S: Copy + PartialEq>(
    all: impl IntoIterator<Item = S>,
    counts: &[(S, u64)],
    name: fn(S) -> &'static str,
) -> BTreeMap<String, u64> {
    all.into_iter()
        .map(|status| {
            let n = counts
                .iter()
                .find(|(s, _)| *s == status)
                .map_or(0, |(_, n)| *n);
            (name(status).to_owned(), n)
        })
        .collect()
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
