//! `/v1/tasks` and `/v1/task-types`: submit a declared task type, read tasks, their attempts
//! and transitions, cancel and retry. Only declared types can run: the API never accepts a
//! command line.

use std::collections::BTreeMap;

use axum::body::Body as HttpBody;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use spool_proto::units::{format_duration, format_time};
use spool_proto::{
    BulkResult, ErrorBody, ErrorCode, ResolveTask, SubmitTask, TaskAttemptList, TaskAttemptView,
    TaskBulkRequest, TaskList, TaskParamView, TaskResolveOutcome, TaskStatus, TaskTransitionList,
    TaskTransitionView, TaskTypeList, TaskTypeView, TaskView,
};
use spool_store::tasks::{self as model, TaskAction, TaskInsert};

use super::{first_values, json, page_cursor, page_limit, ApiError, SharedState};
use crate::metrics::TypeLabel;
use crate::tasks::submission;

#[utoipa::path(
    post, path = "/v1/tasks", tag = "tasks",
    request_body = SubmitTask,
    responses(
        (status = 201, description = "Submitted and durable; `Location` names it", body = TaskView),
        (status = 200, description = "Same key and same parameters: the existing task, in its current state", body = TaskView),
        (status = 400, description = "`invalid_request`, `unknown_task_type`, `unknown_param`, `missing_param` or `invalid_params`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB plus room for the values of the declared type that takes the most, each at its `max_length` (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: same key, other parameters", body = ErrorBody),
        (status = 500, description = "`persistence_failed`", body = ErrorBody),
        (status = 507, description = "`storage_full`: the disk is full; nothing was stored", body = ErrorBody),
        (status = 503, description = "`storage_unavailable` (PostgreSQL cannot be reached); `shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
    )
)]
pub async fn submit(State(state): State<SharedState>, body: HttpBody) -> Response {
    match submit_inner(&state, body).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn submit_inner(state: &SharedState, body: HttpBody) -> Result<Response, ApiError> {
    let declared = state.task_types.now();
    let limit = super::BodyLimit::Bytes(submission::max_body_bytes(&declared));
    let bytes = super::read_body(body, limit).await?;
    let new = submission::decode(&bytes)
        .and_then(|req| submission::validate(req, &declared))
        .map_err(|r| ApiError::new(r.code, r.message))?;
    let label = TypeLabel {
        task_type: new.task_type.clone(),
    };
    let (status, task) = match state.store.insert_task(new).await {
        Ok(TaskInsert::Created(t)) => {
            state.metrics.task_submissions.get_or_create(&label).inc();
            (StatusCode::CREATED, t)
        }
        Ok(TaskInsert::Existing(t)) => {
            state.metrics.task_duplicates.get_or_create(&label).inc();
            (StatusCode::OK, t)
        }
        Ok(TaskInsert::Conflict { .. }) => {
            return Err(ApiError::new(
                ErrorCode::IdempotencyConflict,
                "idempotency key was already used for a task with other parameters",
            ))
        }
        Err(
            e @ (spool_store::StoreError::Unavailable(_) | spool_store::StoreError::DiskFull(_)),
        ) => return Err(e.into()),
        Err(e) => {
            tracing::error!(error = %e, "task submission could not be persisted");
            return Err(ApiError::new(
                ErrorCode::PersistenceFailed,
                "task could not be persisted",
            ));
        }
    };
    let path = format!("/v1/tasks/{}", task.id);
    Ok(super::at_location(status, &path, &view(task)))
}

#[utoipa::path(
    get, path = "/v1/tasks", tag = "tasks",
    params(
        ("status" = Option<TaskStatus>, Query, description = "Only tasks in this status"),
        ("type" = Option<String>, Query, description = "Only tasks of this type"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1–500 (default 100)"),
        ("cursor" = Option<String>, Query, pattern = "^([0-9a-f]{32})?$", description = "`nextCursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Oldest first", body = TaskList),
        (status = 400, description = "`invalid_status`, `invalid_limit` or `invalid_cursor`", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = first_values(query.as_deref());
    let status = match params.get("status").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<model::TaskStatus>()
                .map_err(|_| ApiError::new(ErrorCode::InvalidStatus, "unknown task status"))?,
        ),
    };
    let task_type = params.get("type").filter(|t| !t.is_empty()).cloned();
    let limit = page_limit(&params)?;
    let cursor = page_cursor(&params)?;
    let page = state
        .store
        .list_tasks(
            spool_store::tasks::TaskFilter {
                status,
                task_type,
                ..Default::default()
            },
            limit,
            cursor,
        )
        .await?;
    let tasks: Vec<TaskView> = page.tasks.into_iter().map(view).collect();
    Ok(json(
        StatusCode::OK,
        &TaskList {
            count: tasks.len(),
            tasks,
            next_cursor: page.next_cursor,
        },
    ))
}

#[utoipa::path(
    get, path = "/v1/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match state.store.get_task(id).await? {
        Some(t) => Ok(json(StatusCode::OK, &view(t))),
        None => Err(not_found()),
    }
}

#[utoipa::path(
    get, path = "/v1/tasks/{id}/attempts", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Every attempt, oldest first", body = TaskAttemptList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn attempts(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(attempts) = state.store.task_attempts(id).await? else {
        return Err(not_found());
    };
    let attempts = attempts
        .into_iter()
        .map(|a| TaskAttemptView {
            number: a.number,
            started_at: format_time(a.started_at),
            finished_at: a.finished_at.map(format_time),
            outcome: a.outcome,
            exit_code: a.exit_code,
            signal: a.signal,
            error_code: a.error_code,
            error: a.error,
            duration_ms: a.duration_ms,
            executor_id: a.executor_id,
            output_bytes: a.output_bytes,
            output_truncated: a.output_truncated,
            killed: a.killed,
            redactions: a.redactions,
        })
        .collect();
    Ok(json(StatusCode::OK, &TaskAttemptList { attempts }))
}

#[utoipa::path(
    get, path = "/v1/tasks/{id}/transitions", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Every status change, oldest first", body = TaskTransitionList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn transitions(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(log) = state.store.task_transitions(id).await? else {
        return Err(not_found());
    };
    let transitions = log
        .into_iter()
        .map(|t| TaskTransitionView {
            from: t.from.map(wire_status),
            to: wire_status(t.to),
            attempt: t.attempt,
            at: format_time(t.at),
            reason: t.reason,
            note: t.note,
        })
        .collect();
    Ok(json(StatusCode::OK, &TaskTransitionList { transitions }))
}

#[utoipa::path(
    post, path = "/v1/tasks/{id}/cancel", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Canceled; or, if it was running, `cancelRequested` and its process group is being stopped", body = TaskView),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: already ended", body = ErrorBody),
    )
)]
pub async fn cancel(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let action = state.store.cancel_task(id.clone()).await?;
    if let TaskAction::CancelRequested(_) = &action {
        state.running_tasks.cancel(&id);
    }
    action_response(Operator::Cancel, action)
}

#[utoipa::path(
    post, path = "/v1/tasks/{id}/retry", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 200, description = "Pending again, with the type's max_attempts more attempts", body = TaskView),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: not failed, timed out, interrupted or in manual review, or the type does not allow operator retries", body = ErrorBody),
    )
)]
pub async fn retry(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(task) = state.store.get_task(id.clone()).await? else {
        return Err(not_found());
    };
    let declared = state.task_types.now();
    let kind = declared.get(&task.task_type);
    if !kind.is_some_and(|k| k.operator_retry) {
        return Err(ApiError::new(
            ErrorCode::InvalidTransition,
            format!(
                "task type {} does not allow operator retries (operator_retry = false, or it is \
                 no longer declared)",
                task.task_type
            ),
        ));
    }
    let extra = kind.map_or(1, |k| k.max_attempts);
    action_response(Operator::Retry, state.store.retry_task(id, extra).await?)
}

#[utoipa::path(
    post, path = "/v1/tasks/bulk", tag = "tasks",
    request_body = TaskBulkRequest,
    responses(
        (status = 200, description = "What the action changed — or, with `dryRun`, would change: the tasks matched, changed and skipped (in a status the action does not apply to, or, for a retry, of a type that allows no operator retry), and the first ids changed", body = BulkResult),
        (status = 400, description = "`invalid_request`: the JSON, no action, no filter, or a bad `createdAfter` or `createdBefore`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 503, description = "`storage_unavailable` (PostgreSQL cannot be reached); `shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 507, description = "`storage_full`", body = ErrorBody),
    )
)]
pub async fn bulk(State(state): State<SharedState>, body: HttpBody) -> Result<Response, ApiError> {
    let req: TaskBulkRequest = super::decision(body).await?;
    let (action, filter, dry_run) = super::bulk_request(
        req.action,
        req.filter,
        req.dry_run,
        "filter needs at least one of status, type, createdAfter, createdBefore (to act on \
         every task in manual review, say status: manual_review)",
    )?;
    let filter = model::TaskFilter {
        status: filter.status.map(store_status),
        created_after: super::filter_time("createdAfter", filter.created_after.as_deref())?,
        created_before: super::filter_time("createdBefore", filter.created_before.as_deref())?,
        task_type: filter.task_type,
    };
    let types = state.task_types.now();
    let result: BulkResult = crate::tasks::bulk::run(
        &state.store,
        &types,
        &state.running_tasks,
        action,
        filter.clone(),
        dry_run,
    )
    .await?;
    Ok(super::bulk_done(
        "tasks",
        (action, dry_run),
        &filter,
        &result,
    ))
}

#[utoipa::path(
    get, path = "/v1/task-types", tag = "tasks",
    responses((status = 200, description = "The declared task types, without environment values", body = TaskTypeList))
)]
pub async fn types(State(state): State<SharedState>) -> Response {
    let types = state
        .task_types
        .now()
        .iter()
        .map(|t| TaskTypeView {
            name: t.name.clone(),
            description: t.description.clone(),
            command: t.command.clone(),
            params: t
                .params
                .iter()
                .map(|(name, p)| {
                    (
                        name.clone(),
                        TaskParamView {
                            pattern: p.pattern.clone(),
                            max_length: p.max_length,
                            default: p.default.clone(),
                        },
                    )
                })
                .collect(),
            idempotency_key: t.idempotency_key.clone(),
            scope: t.scope.clone(),
            timeout: format_duration(t.timeout),
            queue_timeout: t.queue_timeout.map(format_duration),
            retry_deadline: t.retry_deadline.map(format_duration),
            max_attempts: t.max_attempts,
            backoff_base: format_duration(t.backoff_base),
            backoff_cap: format_duration(t.backoff_cap),
            kill_grace: format_duration(t.kill_grace),
            retry_on_timeout: t.retry_on_timeout,
            exit_codes: t
                .exit_codes()
                .into_iter()
                .map(|(code, class)| (code.to_string(), class.as_str().to_owned()))
                .collect(),
            on_interrupt: t.on_interrupt.as_str().to_owned(),
            operator_retry: t.operator_retry,
            env: t.env.keys().cloned().collect(),
            secret_env: t.secret_env.keys().cloned().collect(),
            redact_patterns: t.redact.len(),
            concurrency: t.concurrency,
            locks: t.locks.clone(),
            hold_locks_between_attempts: t.hold_locks_between_attempts,
            output_limit: spool_proto::units::format_size(t.output_limit),
            on_partial_failure: match t.on_partial_failure {
                crate::tasks::types::OnPartialFailure::Review => "review",
                crate::tasks::types::OnPartialFailure::Retry => "retry",
            }
            .to_owned(),
        })
        .collect();
    json(StatusCode::OK, &TaskTypeList { types })
}

#[utoipa::path(
    post, path = "/v1/tasks/{id}/resolve", tag = "tasks",
    params(("id" = String, Path, description = "Task id")),
    request_body = ResolveTask,
    responses(
        (status = 200, description = "Settled as the person decided: `succeeded` or `failed` (the note is in the transition log)", body = TaskView),
        (status = 400, description = "`invalid_request`: no outcome, no note, or a bad field", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: not in manual review", body = ErrorBody),
    )
)]
pub async fn resolve(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let req: ResolveTask = super::decision(body).await?;
    let Some(outcome) = req.outcome else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "outcome is required: succeeded or failed (to run it again: retry; to drop it: \
             cancel)",
        ));
    };
    let note = super::decision_note(req.note)?;
    let to = match outcome {
        TaskResolveOutcome::Succeeded => model::TaskStatus::Succeeded,
        TaskResolveOutcome::Failed => model::TaskStatus::Failed,
    };
    // Only from review: a failed or running task is not a person's to settle this way.
    if let Some(task) = state.store.get_task(id.clone()).await? {
        if task.status != model::TaskStatus::ManualReview {
            return Err(ApiError::new(
                ErrorCode::InvalidTransition,
                refused(Operator::Resolve, task.status),
            ));
        }
    }
    let action = state
        .store
        .decide_task(id, to, "resolved".into(), Some(note.clone()))
        .await?;
    if let TaskAction::Done(t) = &action {
        tracing::info!(task_id = %t.id, status = %t.status, note, "task resolved by an operator");
    }
    action_response(Operator::Resolve, action)
}

/// An operator's action on one task, for what a refusal says.
#[derive(Debug, Clone, Copy)]
enum Operator {
    Cancel,
    Retry,
    Resolve,
}

fn action_response(operator: Operator, action: TaskAction) -> Result<Response, ApiError> {
    match action {
        TaskAction::Done(t) | TaskAction::CancelRequested(t) => Ok(json(StatusCode::OK, &view(t))),
        TaskAction::NotFound => Err(not_found()),
        TaskAction::Invalid(status) => Err(ApiError::new(
            ErrorCode::InvalidTransition,
            refused(operator, status),
        )),
    }
}

/// Why an operator's action does not apply to a task in `status`: where the task is, and
/// which statuses the action is for (the store's `CancelOf::decide`, `TaskStatus::retryable`
/// and the resolve check above).
fn refused(operator: Operator, status: model::TaskStatus) -> String {
    use model::TaskStatus as S;
    let (verb, applies_to) = match operator {
        Operator::Cancel => ("cancel", "pending, running and manual_review tasks"),
        Operator::Retry => (
            "retry",
            "failed, timed_out, interrupted and manual_review tasks",
        ),
        Operator::Resolve => ("resolve", "manual_review tasks"),
    };
    let where_it_is = match status {
        S::Pending => "is still pending (waiting to run)",
        S::Running => "is running",
        S::Succeeded => "already succeeded",
        S::Failed => "already failed",
        S::TimedOut => "already timed out",
        S::Interrupted => "was interrupted",
        S::Canceled => "was canceled",
        S::ManualReview => "is in manual_review",
    };
    format!("this task {where_it_is}; {verb} applies only to {applies_to}")
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "task not found")
}

/// Store record → wire view.
pub fn view(t: model::Task) -> TaskView {
    let params: BTreeMap<String, String> = serde_json::from_str(&t.params).unwrap_or_default();
    TaskView {
        status: wire_status(t.status),
        retryable: !t.status.is_final() && t.attempts < t.max_attempts,
        id: t.id,
        task_type: t.task_type,
        attempt: t.attempts,
        max_attempts: t.max_attempts,
        params,
        idempotency_key: t.idempotency_key,
        scope: t.scope,
        created_at: format_time(t.created_at),
        started_at: t.started_at.map(format_time),
        finished_at: t.finished_at.map(format_time),
        next_run_at: t.next_run_at.map(format_time),
        queue_deadline: t
            .queue_deadline
            .filter(|_| t.attempts == 0)
            .map(format_time),
        retry_deadline: t.retry_deadline.map(format_time),
        error_code: t.error_code,
        error: t.error,
        exit_code: t.exit_code,
        signal: t.signal,
        result_summary: t.result_summary,
        completed_steps: t.completed_steps,
        locks: t.locks,
        cancel_requested: t.cancel_requested,
        ending: t.ending,
    }
}

fn store_status(s: TaskStatus) -> model::TaskStatus {
    match s {
        TaskStatus::Pending => model::TaskStatus::Pending,
        TaskStatus::Running => model::TaskStatus::Running,
        TaskStatus::Succeeded => model::TaskStatus::Succeeded,
        TaskStatus::Failed => model::TaskStatus::Failed,
        TaskStatus::TimedOut => model::TaskStatus::TimedOut,
        TaskStatus::Interrupted => model::TaskStatus::Interrupted,
        TaskStatus::Canceled => model::TaskStatus::Canceled,
        TaskStatus::ManualReview => model::TaskStatus::ManualReview,
    }
}

pub(crate) fn wire_status(s: model::TaskStatus) -> TaskStatus {
    match s {
        model::TaskStatus::Pending => TaskStatus::Pending,
        model::TaskStatus::Running => TaskStatus::Running,
        model::TaskStatus::Succeeded => TaskStatus::Succeeded,
        model::TaskStatus::Failed => TaskStatus::Failed,
        model::TaskStatus::TimedOut => TaskStatus::TimedOut,
        model::TaskStatus::Interrupted => TaskStatus::Interrupted,
        model::TaskStatus::Canceled => TaskStatus::Canceled,
        model::TaskStatus::ManualReview => TaskStatus::ManualReview,
    }
}
