//! `/v1/tasks/{id}/steps`: checkpoints. A running script reports a step done (`spoolctl step
//! done NAME`), and asks whether one was done by any attempt (`spoolctl step check NAME`).
//!
//! **Invariant:** a step is recorded only for the task's running attempt (fenced in the store),
//! and the 201 is sent only after it is durable. With `--auth-token-file` a script authenticates
//! with its attempt's step token (`SPOOLD_STEP_TOKEN`), which opens these two routes of its own
//! task only, and only while that attempt runs.

use axum::body::Body as HttpBody;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::Extension;
use spool_proto::units::format_time;
use spool_proto::{ErrorCode, ReportStep, StepName, TaskStepList, TaskStepView};
use spool_store::tasks::{StepRecord, TaskStep};

use super::{json, ApiError, SharedState, StepAuth};

/// The largest step report accepted.
const MAX_REPORT_BYTES: usize = 4096;

#[utoipa::path(
    post, path = "/v1/tasks/{id}/steps", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    request_body = ReportStep,
    responses(
        (status = 201, description = "Recorded now, and durable", body = TaskStepView),
        (status = 200, description = "Done before (by this attempt or an earlier one): the first record", body = TaskStepView),
        (status = 400, description = "`invalid_request`: not JSON, or a bad name or attempt", body = spool_proto::ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = spool_proto::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 4 KiB (nothing was done; the connection is closed)", body = spool_proto::ErrorBody),
        (status = 503, description = "`shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = spool_proto::ErrorBody),
        (status = 403, description = "`forbidden`: a step token of another attempt", body = spool_proto::ErrorBody),
        (status = 404, description = "`not_found`", body = spool_proto::ErrorBody),
        (status = 409, description = "`not_current_attempt`: that attempt is not the task's running attempt", body = spool_proto::ErrorBody),
    )
)]
pub async fn report(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    auth: Option<Extension<StepAuth>>,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let invalid = |m: String| ApiError::new(ErrorCode::InvalidRequest, m);
    let bytes = super::read_body(body, super::BodyLimit::Bytes(MAX_REPORT_BYTES)).await?;
    let req: ReportStep =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("decode JSON: {e}")))?;
    let name = StepName::parse(req.name.as_deref().unwrap_or_default())
        .map_err(|e| invalid(e.to_string()))?;
    let attempt = req
        .attempt
        .and_then(|a| u32::try_from(a).ok())
        .filter(|a| *a >= 1)
        .ok_or_else(|| {
            invalid("attempt is required: the attempt reporting it (SPOOLD_ATTEMPT)".into())
        })?;
    if let Some(Extension(auth)) = auth {
        if auth.attempt != attempt {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "this step token belongs to attempt {}, not attempt {attempt}",
                    auth.attempt
                ),
            ));
        }
    }
    match state
        .store
        .record_task_step(id, attempt, name.as_str().to_owned())
        .await?
    {
        StepRecord::Recorded(step) => Ok(json(StatusCode::CREATED, &view(step))),
        StepRecord::AlreadyDone(step) => Ok(json(StatusCode::OK, &view(step))),
        StepRecord::NotFound => Err(ApiError::new(ErrorCode::NotFound, "task not found")),
        StepRecord::NotCurrent {
            status,
            attempt: current,
        } => Err(ApiError::new(
            ErrorCode::NotCurrentAttempt,
            format!("attempt {attempt} is not running: the task is {status} (attempt {current})"),
        )),
    }
}

#[utoipa::path(
    get, path = "/v1/tasks/{id}/steps", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "The steps done, in the order they were reported", body = TaskStepList),
        (status = 404, description = "`not_found`", body = spool_proto::ErrorBody),
    )
)]
pub async fn list(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(steps) = state.store.task_steps(id).await? else {
        return Err(ApiError::new(ErrorCode::NotFound, "task not found"));
    };
    let steps = steps.into_iter().map(view).collect();
    Ok(json(StatusCode::OK, &TaskStepList { steps }))
}

fn view(step: TaskStep) -> TaskStepView {
    TaskStepView {
        name: step.name,
        attempt: step.attempt,
        at: format_time(step.at),
    }
}
