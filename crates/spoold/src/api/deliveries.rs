//! `/v1/deliveries`: create, list, get, attempts, cancel, retry. Converts store records to
//! wire views, masking secret header values unless `?reveal=true`.

use std::collections::BTreeMap;

use axum::body::Body as HttpBody;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::value::RawValue;
use spool_proto::units::format_time;
use spool_proto::{
    AttemptList, AttemptView, BulkRequest, BulkResult, CheckList, CheckView, CreateDelivery,
    DeliveryList, DeliveryMode, DeliveryStatus, DeliveryView, ErrorBody, ErrorCode, Reconcile,
    ResolveOutcome, ResolveRequest, TransitionList, TransitionView,
};
use spool_store::model::{self, Body, InsertOutcome, NewDelivery, TransitionOutcome};

use super::{first_values, json, page_cursor, page_limit, ApiError, SharedState};
use crate::deliveries::submission;

/// Shown instead of a secret header value.
pub const MASK: &str = "[redacted]";

#[utoipa::path(
    post, path = "/v1/deliveries", tag = "deliveries",
    params(
        ("id" = Option<String>, Query, pattern = "^[0-9a-f]{32}$", description = "The id the delivery is to have, chosen by the client (a UUIDv7 without its dashes): a create whose answer was lost is found again by it — asked again, it answers 200 with the delivery made under that id, whatever the request. `spoolctl send` sends one, and a request it drops into the maildrop carries the same"),
    ),
    request_body = CreateDelivery,
    responses(
        (status = 201, description = "Created and durable; `Location` names it", body = DeliveryView),
        (status = 200, description = "Same idempotency key and same request: the existing delivery", body = DeliveryView),
        (status = 400, description = "`invalid_request`, `invalid_delivery`, `target_blocked` or `unknown_secret`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`", body = ErrorBody),
        (status = 500, description = "`persistence_failed`", body = ErrorBody),
        (status = 503, description = "`storage_unavailable` (PostgreSQL cannot be reached); `shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 507, description = "`journal_full` or `storage_full`", body = ErrorBody),
    )
)]
pub async fn create(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
    body: HttpBody,
) -> Response {
    let limit = super::BodyLimit::AsV010(spool_proto::MAX_REQUEST_BYTES);
    let bytes = match super::read_body(body, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let chosen = match super::first_values(query.as_deref()).get("id") {
        None => None,
        Some(id) if id.is_empty() => None,
        Some(id) if spool_proto::maildrop::drop_id(&format!("{id}.drop")).is_some() => {
            Some(id.clone())
        }
        Some(_) => {
            return ApiError::new(
                ErrorCode::InvalidRequest,
                "id must be 32 lower-case hex digits (a UUID without its dashes)",
            )
            .into_response()
        }
    };
    let found = |d: model::Delivery| {
        let path = format!("/v1/deliveries/{}", d.id);
        super::at_location(StatusCode::OK, &path, &view(d, false))
    };
    // A client that chose the id asks again after an answer it lost: the delivery it made —
    // for a request that is one (what is not is refused, whatever the id).
    if let Err(r) =
        submission::decode(&bytes).and_then(|req| submission::validate(req, &state.rules))
    {
        if r.code == ErrorCode::TargetBlocked {
            state.metrics.blocked.inc();
        }
        return ApiError::new(r.code, r.message).into_response();
    }
    if let Some(id) = &chosen {
        if let Ok(Some(d)) = state.store.get(id.clone()).await {
            return found(d);
        }
    }
    match admit(&state, &bytes, chosen.clone()).await {
        Ok((status, delivery)) => {
            let path = format!("/v1/deliveries/{}", delivery.id);
            super::at_location(status, &path, &view(delivery, false))
        }
        Err(e) => match chosen {
            // Made meanwhile under that id (a racing pickup of its drop).
            Some(id) => match state.store.get(id).await {
                Ok(Some(d)) => found(d),
                _ => e.into_response(),
            },
            None => e.into_response(),
        },
    }
}

/// A create request's whole way in — decoded, validated against the address policy and the
/// declared secrets, and stored (durable when this returns `Ok`: 201 created, or 200 the
/// existing delivery of the same idempotency key) — for the API and for the maildrop's pickup,
/// which gives the delivery its drop's id (`id`).
pub(crate) async fn admit(
    state: &super::AppState,
    bytes: &[u8],
    id: Option<String>,
) -> Result<(StatusCode, model::Delivery), ApiError> {
    let mut new = submission::decode(bytes)
        .and_then(|req| {
            // Before the rules normalise it: v0.1.0 hashed the request as the client sent it.
            let v010 = spool_proto::journal::request_hashes(&req);
            submission::validate(req, &state.rules).map(|new| NewDelivery {
                v010_request_hashes: v010,
                ..new
            })
        })
        .map_err(|r| {
            if r.code == ErrorCode::TargetBlocked {
                state.metrics.blocked.inc();
            }
            ApiError::new(r.code, r.message)
        })?;
    if let Some(id) = id {
        new.id = id;
    }
    if let Some(name) = &new.sign_secret {
        let rules = state.target_rules.now();
        if rules.secret(name).is_none() {
            let declared: Vec<&str> = rules.secret_names().collect();
            return Err(ApiError::new(
                ErrorCode::UnknownSecret,
                format!(
                    "sign.secretRef {name:?} is not declared in [secrets] (declared: {})",
                    if declared.is_empty() {
                        "none".to_owned()
                    } else {
                        declared.join(", ")
                    }
                ),
            ));
        }
    }
    match state.store.insert(new).await {
        // The store wakes the scheduler itself, even if this client has gone.
        Ok(InsertOutcome::Created(d)) => Ok((StatusCode::CREATED, d)),
        Ok(InsertOutcome::Existing(d)) => {
            state.metrics.duplicates.inc();
            Ok((StatusCode::OK, d))
        }
        Ok(InsertOutcome::Conflict { existing_id }) => {
            state.metrics.conflicts.inc();
            Err(conflict(state, bytes, existing_id).await)
        }
        Ok(InsertOutcome::AlreadyExpired) => Err(ApiError::new(
            ErrorCode::InvalidDelivery,
            "expiresAt must be in the future",
        )),
        Ok(InsertOutcome::Full { db_bytes, limit }) => {
            state.metrics.admission_rejections.inc();
            Err(ApiError::new(
                ErrorCode::JournalFull,
                format!("journal admission limit reached ({db_bytes} of {limit} bytes used)"),
            ))
        }
        Err(e) => {
            let (code, message) = match e {
                spool_store::StoreError::DiskFull(_) => {
                    (ErrorCode::StorageFull, "delivery could not be persisted")
                }
                spool_store::StoreError::Unavailable(_) => (
                    ErrorCode::StorageUnavailable,
                    "the database cannot be reached; the delivery may not have been persisted: \
                     retry with the same Idempotency-Key",
                ),
                _ => (
                    ErrorCode::PersistenceFailed,
                    "delivery could not be persisted",
                ),
            };
            tracing::error!(error = %e, "create could not be persisted");
            Err(ApiError::new(code, message))
        }
    }
}

/// The 409 for an idempotency key already used for another request: it names the delivery
/// the key belongs to and what this request changes of it ([`submission::differences`]), so a
/// client that meant to repeat a request sees what it did not repeat. Only this rare answer
/// pays for reading the delivery and checking the request once more (the create itself was
/// moved into the store).
async fn conflict(state: &super::AppState, bytes: &[u8], existing_id: String) -> ApiError {
    let again = submission::decode(bytes)
        .and_then(|req| submission::validate(req, &state.rules))
        .ok();
    let existing = state.store.get(existing_id.clone()).await.ok().flatten();
    let changed = match (again, existing) {
        (Some(new), Some(existing)) => submission::differences(&new, &existing),
        _ => Vec::new(),
    };
    let what = match changed.as_slice() {
        [] => String::new(),
        [one] => format!(": this one differs in {one}"),
        [first @ .., last] => format!(": this one differs in {} and {last}", first.join(", ")),
    };
    ApiError::new(
        ErrorCode::IdempotencyConflict,
        format!(
            "idempotency key was already used for a different request (delivery \
             {existing_id}){what}; repeat that request exactly to get the delivery back, or use \
             another key"
        ),
    )
}

#[utoipa::path(
    get, path = "/v1/deliveries", tag = "deliveries",
    params(
        ("status" = Option<DeliveryStatus>, Query, description = "Only deliveries in this status"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1–500 (default 100)"),
        ("cursor" = Option<String>, Query, pattern = "^([0-9a-f]{32})?$", description = "`nextCursor` of the previous page"),
        ("target" = Option<String>, Query, pattern = "^(https?://([a-z][a-z0-9-]{0,20}\\.){0,3}[g-z][a-z0-9-]{0,20}(:[1-9][0-9]{0,3})?(/[a-z0-9/_-]*)?)?$", description = "Only deliveries to this target: `scheme://host[:port]` (all of its deliveries), or a URL with a path (the deliveries to that URL, whatever their query)"),
        ("createdAfter" = Option<String>, Query, format = DateTime, description = "Only deliveries created at or after this RFC 3339 time"),
        ("createdBefore" = Option<String>, Query, format = DateTime, description = "Only deliveries created before this RFC 3339 time"),
        ("lastErrorCode" = Option<String>, Query, pattern = "^([a-z_]{1,64})?$", description = "Only deliveries whose last attempt ended with this `lastErrorCode`"),
        ("order" = Option<spool_proto::ListOrder>, Query, description = "`asc` (default: oldest first) or `desc` (newest first)"),
    ),
    responses(
        (status = 200, description = "Oldest first (or newest first with `order=desc`), without headers and bodies", body = DeliveryList),
        (status = 400, description = "`invalid_status`, `invalid_limit`, `invalid_cursor`, or `invalid_request` for a bad `target`, `createdAfter`, `createdBefore`, `lastErrorCode` or `order`", body = ErrorBody),
    )
)]
pub async fn list(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = first_values(query.as_deref());
    let filter = list_filter(&params)?;
    let limit = page_limit(&params)?;
    let cursor = page_cursor(&params)?;
    let page = state.store.list_filtered(filter, limit, cursor).await?;
    let deliveries: Vec<DeliveryView> = page
        .deliveries
        .into_iter()
        .map(|d| view(d, false))
        .collect();
    Ok(json(
        StatusCode::OK,
        &DeliveryList {
            count: deliveries.len(),
            deliveries,
            next_cursor: page.next_cursor,
        },
    ))
}

#[utoipa::path(
    get, path = "/v1/deliveries/{id}", tag = "deliveries",
    params(
        ("id" = String, Path, description = "Delivery id"),
        ("reveal" = Option<bool>, Query, description = "`true` shows secret header values unmasked; `false` (the default) masks them"),
    ),
    responses(
        (status = 200, description = "The delivery with headers and body", body = DeliveryView),
        (status = 400, description = "`invalid_request`: `reveal` is not `true` or `false`", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn get(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let reveal = match first_values(query.as_deref())
        .get("reveal")
        .map(String::as_str)
    {
        None | Some("" | "false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "reveal must be true or false",
            ))
        }
    };
    match state.store.get(id).await? {
        Some(d) => Ok(json(StatusCode::OK, &view(d, reveal))),
        None => Err(not_found()),
    }
}

#[utoipa::path(
    get, path = "/v1/deliveries/{id}/attempts", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    responses(
        (status = 200, description = "Every attempt of every cycle, oldest first", body = AttemptList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn attempts(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(attempts) = state.store.attempts(id).await? else {
        return Err(not_found());
    };
    let attempts = attempts
        .into_iter()
        .map(|a| AttemptView {
            cycle: a.cycle,
            number: a.number,
            started_at: format_time(a.started_at),
            finished_at: a.finished_at.map(format_time),
            outcome: a.outcome,
            http_status: a.http_status,
            error_code: a.error_code,
            error: a.error,
            duration_ms: a.duration_ms,
        })
        .collect();
    Ok(json(StatusCode::OK, &AttemptList { attempts }))
}

#[utoipa::path(
    get, path = "/v1/deliveries/{id}/transitions", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    responses(
        (status = 200, description = "Every status change, oldest first: from, to, attempt, time, reason, note", body = TransitionList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn transitions(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(log) = state.store.transitions(id).await? else {
        return Err(not_found());
    };
    let transitions = log
        .into_iter()
        .map(|t| TransitionView {
            from: t.from.map(wire_status),
            to: wire_status(t.to),
            attempt: t.attempt,
            at: format_time(t.at),
            reason: t.reason,
            note: t.note,
        })
        .collect();
    Ok(json(StatusCode::OK, &TransitionList { transitions }))
}

#[utoipa::path(
    get, path = "/v1/deliveries/{id}/checks", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    responses(
        (status = 200, description = "Every reconciliation check, oldest first: time, HTTP status, matches, error", body = CheckList),
        (status = 404, description = "`not_found`", body = ErrorBody),
    )
)]
pub async fn checks(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Some(checks) = state.store.checks(id).await? else {
        return Err(not_found());
    };
    let checks = checks
        .into_iter()
        .map(|c| CheckView {
            at: format_time(c.at),
            http_status: c.http_status,
            matches: c.matches,
            error_code: c.error_code,
            error: c.error,
            duration_ms: c.duration_ms,
        })
        .collect();
    Ok(json(StatusCode::OK, &CheckList { checks }))
}

#[utoipa::path(
    post, path = "/v1/deliveries/{id}/resolve", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    request_body = ResolveRequest,
    responses(
        (status = 200, description = "Resolved: `succeeded`, `failed`, or `pending` again (resend, a new cycle)", body = DeliveryView),
        (status = 400, description = "`invalid_request`: no outcome, no note, or a bad field", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 503, description = "`shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: not unknown or manual_review (nor a failed at-most-once delivery that was unknown)", body = ErrorBody),
    )
)]
pub async fn resolve(
    State(state): State<SharedState>,
    Path(id): Path<String>,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidRequest, message);
    let req: ResolveRequest = super::decision(body).await?;
    let Some(outcome) = req.outcome else {
        return Err(invalid(
            "outcome is required: succeeded, failed or resend".into(),
        ));
    };
    let note = super::decision_note(req.note)?;
    let note = note.as_str();
    let remote_id = req
        .remote_id
        .map(|r| r.trim().to_owned())
        .filter(|r| !r.is_empty());
    if remote_id
        .as_ref()
        .is_some_and(|r| r.len() > spool_proto::MAX_KEY_BYTES)
    {
        return Err(invalid("remoteId must not exceed 256 bytes".into()));
    }
    let resolution = match outcome {
        ResolveOutcome::Succeeded => model::Resolution::Succeeded { remote_id },
        _ if remote_id.is_some() => {
            return Err(invalid("remoteId goes only with outcome succeeded".into()))
        }
        ResolveOutcome::Failed => model::Resolution::Failed,
        ResolveOutcome::Resend => model::Resolution::Resend,
    };
    // For the time-in-unknown metric only: a delivery in `manual_review` was counted when it
    // left `unknown`.
    let before = state.store.get(id.clone()).await?;
    let outcome = state.store.resolve(id, resolution, note.to_owned()).await?;
    if let TransitionOutcome::Done(d) = &outcome {
        if let Some(since) = before
            .filter(|b| b.status == model::DeliveryStatus::Unknown)
            .and_then(|b| b.unknown_since)
        {
            let spent = (state.store.now_ms() - since).max(0) as f64 / 1000.0;
            state.metrics.unknown_duration.observe(spent);
        }
        tracing::info!(delivery_id = %d.id, status = %d.status, note,
                       "delivery resolved by an operator");
    }
    transition_response(model::OperatorAction::Resolve, outcome)
}

#[utoipa::path(
    post, path = "/v1/deliveries/{id}/cancel", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    responses(
        (status = 200, description = "Canceled", body = DeliveryView),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: not pending or in flight", body = ErrorBody),
    )
)]
pub async fn cancel(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    transition_response(model::OperatorAction::Cancel, state.store.cancel(id).await?)
}

#[utoipa::path(
    post, path = "/v1/deliveries/{id}/retry", tag = "deliveries",
    params(("id" = String, Path, description = "Delivery id")),
    responses(
        (status = 200, description = "A new cycle started: pending, attempts reset, history kept", body = DeliveryView),
        (status = 404, description = "`not_found`", body = ErrorBody),
        (status = 409, description = "`invalid_transition`: not failed, or an at-most-once delivery that may have reached the target (it was `unknown`; only a resolve with outcome `resend` sends it again)", body = ErrorBody),
    )
)]
pub async fn retry(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    transition_response(model::OperatorAction::Retry, state.store.retry(id).await?)
}

fn transition_response(
    action: model::OperatorAction,
    outcome: TransitionOutcome,
) -> Result<Response, ApiError> {
    match outcome {
        TransitionOutcome::Done(d) => Ok(json(StatusCode::OK, &view(d, false))),
        TransitionOutcome::NotFound => Err(not_found()),
        TransitionOutcome::Invalid(status) => Err(ApiError::new(
            ErrorCode::InvalidTransition,
            refused(action, status),
        )),
        TransitionOutcome::InvalidForMode(status) => Err(ApiError::new(
            ErrorCode::InvalidTransition,
            match status {
                model::DeliveryStatus::Failed => "this at-most-once delivery failed after its \
                    request reached the target or may have (the target answered it, or it was \
                    unknown), so retry does not send it again; if it must be sent, resolve it \
                    with outcome resend and a note"
                    .to_owned(),
                _ => format!(
                    "this at-most-once delivery is {status}: its request may already have \
                     reached the target, so it cannot be canceled; wait for its outcome"
                ),
            },
        )),
    }
}

/// Why an operator's `action` does not apply to a delivery in `status`, said the way a person
/// reads it: where the delivery is, and which statuses the action is for (the refusal rules
/// are `model::Delivery::refusal`'s).
fn refused(action: model::OperatorAction, status: model::DeliveryStatus) -> String {
    use model::DeliveryStatus as S;
    use model::OperatorAction as A;
    let (verb, applies_to) = match action {
        A::Cancel => ("cancel", "pending and in_flight deliveries"),
        A::Retry => ("retry", "failed deliveries"),
        A::Resolve => (
            "resolve",
            "unknown and manual_review deliveries (and a failed at-most-once one that may have \
             arrived)",
        ),
    };
    let where_it_is = match status {
        S::Pending => "is still pending (its next attempt is scheduled)",
        S::InFlight => "is being attempted right now",
        S::Succeeded => "already succeeded",
        S::Failed => "already failed",
        S::Canceled => "was canceled",
        // Only a person settles these: say how.
        S::Unknown | S::ManualReview => {
            return format!(
                "this delivery is {status}: whether this at-most-once request arrived is not \
                 known, so {verb} does not apply; settle it with resolve (POST \
                 /v1/deliveries/{{id}}/resolve, spoolctl resolve) as succeeded, failed or resend"
            )
        }
    };
    format!("this delivery {where_it_is}; {verb} applies only to {applies_to}")
}

/// The listing filter a query asks for: `status`, `target`, `createdAfter`, `createdBefore`,
/// `lastErrorCode` and `order` (for `GET /v1/deliveries` and `GET /v1/export`).
pub(crate) fn list_filter(
    params: &BTreeMap<String, String>,
) -> Result<model::ListFilter, ApiError> {
    let status = match params.get("status").map(String::as_str) {
        None | Some("") => None,
        Some(s) => Some(
            s.parse::<model::DeliveryStatus>()
                .map_err(|_| ApiError::new(ErrorCode::InvalidStatus, "unknown delivery status"))?,
        ),
    };
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidRequest, message);
    let target = match params.get("target").map(String::as_str) {
        None | Some("") => None,
        Some(t) => Some(
            crate::deliveries::submission::target_filter(t).ok_or_else(|| {
                invalid(format!(
                    "target {t:?} is not an http(s) URL or origin, e.g. https://hooks.example.com"
                ))
            })?,
        ),
    };
    let (origin, url) = target.map_or((None, None), |t| (Some(t.origin), t.url));
    let time = |name: &str| match params.get(name).map(String::as_str) {
        None | Some("") => Ok(None),
        Some(t) => spool_proto::units::parse_time(t)
            .map(Some)
            .map_err(|e| invalid(format!("{name}: {e}"))),
    };
    let created_after = time("createdAfter")?;
    let created_before = time("createdBefore")?;
    let last_error_code = match params.get("lastErrorCode").map(String::as_str) {
        None | Some("") => None,
        Some(code) => Some(error_code(code).ok_or_else(|| {
            invalid(format!(
                "lastErrorCode {code:?} is not an error code (lowercase letters and '_')"
            ))
        })?),
    };
    let newest_first = match params.get("order").map(String::as_str) {
        None | Some("") | Some("asc") => false,
        Some("desc") => true,
        Some(other) => return Err(invalid(format!("order {other:?} is not asc or desc"))),
    };
    Ok(model::ListFilter {
        status,
        origin,
        url,
        created_after,
        created_before,
        last_error_code,
        newest_first,
    })
}

/// `code` if it can be a `lastErrorCode` (1 to 64 lowercase letters and `_`).
fn error_code(code: &str) -> Option<String> {
    ((1..=64).contains(&code.len()) && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .then(|| code.to_owned())
}

#[utoipa::path(
    post, path = "/v1/deliveries/bulk", tag = "deliveries",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "What the action changed — or, with `dryRun`, would change: the deliveries matched, changed and skipped (in a status the action does not apply to), and the first ids changed", body = BulkResult),
        (status = 400, description = "`invalid_request`: the JSON, no action, no filter, or a bad `targetOrigin`, `lastErrorCode`, `createdAfter` or `createdBefore`", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 503, description = "`storage_unavailable` (PostgreSQL cannot be reached); `shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 507, description = "`storage_full`", body = ErrorBody),
    )
)]
pub async fn bulk(State(state): State<SharedState>, body: HttpBody) -> Result<Response, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidRequest, message);
    let req: BulkRequest = super::decision(body).await?;
    let (action, filter, dry_run) = super::bulk_request(
        req.action,
        req.filter,
        req.dry_run,
        "filter needs at least one of status, targetOrigin, lastErrorCode, createdAfter, \
         createdBefore (to act on every failed delivery, say status: failed)",
    )?;
    let target = filter
        .target_origin
        .as_deref()
        .map(super::targets::target)
        .transpose()?;
    let filter = model::ListFilter {
        status: filter.status.map(store_status),
        origin: target.as_ref().map(|t| t.origin.clone()),
        url: target.and_then(|t| t.url),
        created_after: super::filter_time("createdAfter", filter.created_after.as_deref())?,
        created_before: super::filter_time("createdBefore", filter.created_before.as_deref())?,
        last_error_code: filter
            .last_error_code
            .map(|code| {
                error_code(&code).ok_or_else(|| {
                    invalid(format!(
                        "filter.lastErrorCode {code:?} is not an error code (lowercase letters and '_')"
                    ))
                })
            })
            .transpose()?,
        newest_first: false,
    };
    let result =
        crate::deliveries::bulk::run(&state.store, action, filter.clone(), dry_run).await?;
    Ok(super::bulk_done(
        "deliveries",
        (action, dry_run),
        &filter,
        &result,
    ))
}

fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "delivery not found")
}

/// Store record → wire view.
pub fn view(d: model::Delivery, reveal: bool) -> DeliveryView {
    let (body, body_base64) = match d.body {
        Some(Body::Json(bytes)) => match String::from_utf8(bytes)
            .map_err(|e| e.into_bytes())
            .and_then(|s| RawValue::from_string(s).map_err(|e| e.to_string().into_bytes()))
        {
            Ok(raw) => (Some(raw), None),
            Err(bytes) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            ),
        },
        Some(Body::Binary(bytes)) if !bytes.is_empty() => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
        _ => (None, None),
    };
    DeliveryView {
        headers: d.headers.filter(|h| !h.is_empty()).map(|h| {
            h.into_iter()
                .map(|(name, value)| {
                    let value = if !reveal && spool_proto::headers::is_secret_header(&name) {
                        MASK.to_owned()
                    } else {
                        value
                    };
                    (name, value)
                })
                .collect::<BTreeMap<_, _>>()
        }),
        status: wire_status(d.status),
        id: d.id,
        idempotency_key: d.idempotency_key,
        target_url: d.target_url,
        method: d.method,
        attempts: d.attempts,
        interrupted_attempts: (d.uncharged > 0).then_some(d.uncharged),
        max_attempts: d.max_attempts,
        last_error: d.last_error,
        last_error_code: d.last_error_code,
        last_response_code: d.last_response_code,
        created_at: format_time(d.created_at),
        updated_at: format_time(d.updated_at),
        next_attempt_at: d.next_attempt_at.map(format_time),
        lease_until: d.lease_until.map(format_time),
        not_before: d.not_before.map(format_time),
        expires_at: d.expires_at.map(format_time),
        body,
        body_base64,
        mode: (d.mode == model::Mode::AtMostOnce).then_some(DeliveryMode::AtMostOnce),
        fingerprint: d.fingerprint,
        reconcile: reconcile_view(d.reconcile.as_deref(), reveal),
        remote_id_pointer: d.remote_id_pointer,
        sign: d.sign_secret.map(|name| spool_proto::Sign {
            secret_ref: Some(name),
        }),
        remote_id: d.remote_id,
        unknown_since: d.unknown_since.map(format_time),
        review_at: d.review_at.map(format_time),
        next_check_at: d
            .check_at
            .filter(|_| d.status == model::DeliveryStatus::Unknown)
            .map(format_time),
        checks: (d.checks > 0).then_some(d.checks),
    }
}

pub(crate) fn wire_status(s: model::DeliveryStatus) -> DeliveryStatus {
    match s {
        model::DeliveryStatus::Pending => DeliveryStatus::Pending,
        model::DeliveryStatus::InFlight => DeliveryStatus::InFlight,
        model::DeliveryStatus::Succeeded => DeliveryStatus::Succeeded,
        model::DeliveryStatus::Failed => DeliveryStatus::Failed,
        model::DeliveryStatus::Canceled => DeliveryStatus::Canceled,
        model::DeliveryStatus::Unknown => DeliveryStatus::Unknown,
        model::DeliveryStatus::ManualReview => DeliveryStatus::ManualReview,
    }
}

pub(crate) fn store_status(s: DeliveryStatus) -> model::DeliveryStatus {
    match s {
        DeliveryStatus::Pending => model::DeliveryStatus::Pending,
        DeliveryStatus::InFlight => model::DeliveryStatus::InFlight,
        DeliveryStatus::Succeeded => model::DeliveryStatus::Succeeded,
        DeliveryStatus::Failed => model::DeliveryStatus::Failed,
        DeliveryStatus::Canceled => model::DeliveryStatus::Canceled,
        DeliveryStatus::Unknown => model::DeliveryStatus::Unknown,
        DeliveryStatus::ManualReview => model::DeliveryStatus::ManualReview,
    }
}

/// The stored reconcile query as shown: every field, secret header values masked unless
/// `reveal`.
fn reconcile_view(stored: Option<&str>, reveal: bool) -> Option<Reconcile> {
    let mut spec: Reconcile = serde_json::from_str(stored?).ok()?;
    if !reveal {
        for (name, value) in spec.headers.iter_mut().flatten() {
            if spool_proto::headers::is_secret_header(name) {
                *value = Some(MASK.to_owned());
            }
        }
    }
    if spec.headers.as_ref().is_some_and(BTreeMap::is_empty) {
        spec.headers = None;
    }
    Some(spec)
}
