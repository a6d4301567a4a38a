//! `/v1/locks`: the resource locks tasks hold, and the pending tasks waiting for each.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use spool_proto::units::format_time;
use spool_proto::{LockList, LockView};

use super::{json, ApiError, SharedState};

/// Pending tasks with locks looked at to list who waits.
const MAX_WAITING_SCANNED: u32 = 1000;

#[utoipa::path(
    get, path = "/v1/locks", tag = "tasks",
    responses((status = 200, description = "Held locks by name, each with the pending tasks that want it (of the first 1000 pending tasks with locks), in the order they will get it", body = LockList))
)]
pub async fn list(State(state): State<SharedState>) -> Result<Response, ApiError> {
    let locks = state
        .store
        .held_task_locks(MAX_WAITING_SCANNED)
        .await?
        .into_iter()
        .map(|l| LockView {
            name: l.name,
            task_id: l.task_id,
            task_type: l.task_type,
            task_status: super::tasks::wire_status(l.task_status),
            attempt: l.attempt,
            ending: l.ending,
            since: format_time(l.since),
            waiting: l.waiting,
        })
        .collect();
    Ok(json(StatusCode::OK, &LockList { locks }))
}
