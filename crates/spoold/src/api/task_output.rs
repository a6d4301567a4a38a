//! `/v1/tasks/{id}/output`: an attempt's output log (stdout and stderr, redacted, head and tail
//! within the type's `output_limit`), as `text/plain`. With `follow=true` and a running attempt
//! the response streams (chunked) what the script prints until the attempt ends.
//!
//! **Invariant:** only redacted bytes are served: the log file and the live chunks both come
//! from the attempt's [`OutputLog`](crate::tasks::output::OutputLog), which redacts first.

use std::path::PathBuf;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use spool_proto::ErrorCode;
use tokio::io::AsyncReadExt;
use tokio::sync::broadcast;

use super::{first_values, ApiError, SharedState};
use crate::tasks::runner::output_path;

/// How long a reader waits for an attempt that just ended to have its log completed.
const SETTLE: Duration = Duration::from_secs(5);

#[utoipa::path(
    get, path = "/v1/tasks/{id}/output", tag = "tasks",
    params(
        ("id" = String, Path, description = "Task id"),
        ("attempt" = Option<u32>, Query, minimum = 1, description = "Attempt number, from 1 (default: the latest)"),
        ("follow" = Option<bool>, Query, description = "Stream a running attempt's output until it ends"),
    ),
    responses(
        (status = 200, description = "The output (redacted), `text/plain`; with `follow=true`, chunked until the attempt ends", content_type = "text/plain", body = String),
        (status = 400, description = "`invalid_request`: a bad `attempt` or `follow`", body = spool_proto::ErrorBody),
        (status = 404, description = "`not_found` (no such task) or `output_not_found` (no such attempt, or its log is gone)", body = spool_proto::ErrorBody),
    )
)]
pub async fn output(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = first_values(query.as_deref());
    let invalid = |m: &str| ApiError::new(ErrorCode::InvalidRequest, m);
    let follow = match params.get("follow").map(String::as_str) {
        None | Some("") | Some("false") => false,
        Some("true") => true,
        Some(_) => return Err(invalid("follow must be true or false")),
    };
    let wanted = match params.get("attempt").map(String::as_str) {
        None | Some("") => None,
        Some(n) => Some(
            n.parse::<u32>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| invalid("attempt must be a number from 1"))?,
        ),
    };
    let Some(task) = state.store.get_task(id.clone()).await? else {
        return Err(ApiError::new(ErrorCode::NotFound, "task not found"));
    };
    let number = wanted.unwrap_or(task.attempts);
    let missing = || {
        ApiError::new(
            ErrorCode::OutputNotFound,
            format!("task {id} has no output for attempt {number}"),
        )
    };
    if number == 0 || number > task.attempts {
        return Err(missing());
    }
    if let Some((path, sub)) = state.running_tasks.follow(&id, number) {
        let head = read_prefix(&path, sub.from).await;
        let omitted = sub.from.saturating_sub(head.len() as u64);
        let mut parts: Vec<Bytes> = vec![Bytes::from(head)];
        if omitted > 0 {
            parts.push(Bytes::from(format!(
                "\n[spoold: {omitted} bytes of output omitted so far; the whole tail is kept when the attempt ends]\n"
            )));
        }
        let start = stream::iter(parts.into_iter().map(Ok::<_, std::io::Error>));
        return Ok(if follow {
            text(Body::from_stream(start.chain(live(sub.chunks))))
        } else {
            text(Body::from_stream(start))
        });
    }
    // Not running here: wait (bounded) until the store has the attempt's end, which the runner
    // records only after the log is complete.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let attempt = loop {
        let attempts = state
            .store
            .task_attempts(id.clone())
            .await?
            .unwrap_or_default();
        let attempt = attempts.into_iter().find(|a| a.number == number);
        match attempt {
            Some(a) if a.finished_at.is_some() => break a,
            _ if tokio::time::Instant::now() >= deadline => return Err(missing()),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let path = output_path(&state.task_output_dir, &id, number);
    match tokio::fs::File::open(&path).await {
        Ok(file) => Ok(text(Body::from_stream(tokio_util::io::ReaderStream::new(
            file,
        )))),
        // Nothing was printed: no log was written.
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                && attempt.output_bytes.unwrap_or(0) == 0 =>
        {
            Ok(text(Body::empty()))
        }
        // Another executor's log lives on its host, in its data directory: say which.
        Err(_) => Err(ApiError::new(
            ErrorCode::OutputNotFound,
            format!(
                "task {id} has no output for attempt {number} here: {}",
                ran_on(&attempt.executor_id)
            ),
        )),
    }
}

/// Where an attempt's log is kept, from its executor (`host:pid:run`), for a reader who asked
/// another spoold.
fn ran_on(executor: &str) -> String {
    let mut parts = executor.rsplitn(3, ':');
    let (_run, pid, host) = (parts.next(), parts.next(), parts.next());
    match (host, pid) {
        (Some(host), Some(pid)) => format!(
            "it ran on host {host} (spoold pid {pid}), whose data directory keeps its log: ask \
             that spoold"
        ),
        _ => format!("it ran under executor {executor}, whose data directory keeps its log"),
    }
}

fn text(body: Body) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        body,
    )
        .into_response()
}

/// The first `len` bytes of the log file (what it holds of the head when a follower joins).
async fn read_prefix(path: &PathBuf, len: u64) -> Vec<u8> {
    let Ok(file) = tokio::fs::File::open(path).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let _ = file.take(len).read_to_end(&mut out).await;
    out
}

/// Live chunks until the attempt's log is finished (the channel closes). A follower that falls
/// behind is told how much it missed.
fn live(chunks: broadcast::Receiver<Bytes>) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    stream::unfold(chunks, |mut rx| async move {
        match rx.recv().await {
            Ok(chunk) => Some((Ok(chunk), rx)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some((
                Ok(Bytes::from(format!(
                    "\n[spoold: {n} chunks of output skipped: this reader fell behind]\n"
                ))),
                rx,
            )),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    })
}
