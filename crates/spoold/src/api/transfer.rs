//! `GET /v1/export` and `POST /v1/import`: deliveries with their history as export records
//! (`spool_proto::transfer`), to and from the store's [`DeliveryRecord`].
//!
//! An imported record is checked by the very rules a create is: its request is rebuilt as a
//! create and validated ([`submission::validate`]: URL, address policy, method, headers, body,
//! at-most-once fields, signing), so an import cannot hold what the API would refuse — with
//! one exception, a `Keep-Alive` header: spoold v0.1.0 took one in a create and sent it, so a
//! delivery moved in from its journal keeps it and is sent as it was ([`V010_HEADERS`]). The
//! rest — status, counters, times, history — is taken as exported, except for a delivery that
//! was in flight: its claim belonged to the exporting daemon, so it is imported as crash
//! recovery would leave it — an at-least-once delivery pending again (the open attempt
//! recorded as interrupted, not charged), an at-most-once one whose attempt had started
//! `unknown` (it may have arrived), one only reserved pending again.

use super::{first_values, json, page_cursor, page_limit, ApiError, SharedState};
use crate::deliveries::submission::{self, Rules};
use axum::body::Body as HttpBody;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use futures_util::future::join_all;
use serde_json::value::RawValue;
use spool_proto::transfer::{
    BodyKind, ExportPage, ExportRecord, ExportedAttempt, ExportedCheck, ExportedDelivery,
    ExportedTransition, ImportRequest, ImportResult, ImportResults, EXPORT_FORMAT,
};
use spool_proto::{CreateDelivery, DeliveryMode, ErrorBody, ErrorCode, Reconcile, Sign};
use spool_store::model::{
    self, Attempt, Body, Check, Delivery, DeliveryRecord, DeliveryStatus, Millis, Mode, Transition,
    DEFAULT_OBSERVATION_WINDOW_MS,
};

/// The most records one import request may carry.
pub const MAX_IMPORT_RECORDS: usize = 500;
/// Body bytes after which an export page ends early: with one more body of at most 1 MiB, a
/// page stays under spoolctl's 4 MiB answer limit.
const MAX_PAGE_BODY_BYTES: usize = 1 << 20;
/// The largest import request: 500 records of small deliveries, or a few with 1 MiB bodies.
const MAX_IMPORT_BYTES: usize = 64 << 20;

#[utoipa::path(
    get, path = "/v1/export", tag = "deliveries",
    params(
        ("status" = Option<spool_proto::DeliveryStatus>, Query, description = "Only deliveries in this status"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size, 1–500 (default 100)"),
        ("cursor" = Option<String>, Query, pattern = "^([0-9a-f]{32})?$", description = "`nextCursor` of the previous page"),
        ("target" = Option<String>, Query, pattern = "^(https?://([a-z][a-z0-9-]{0,20}\\.){0,3}[g-z][a-z0-9-]{0,20}(:[1-9][0-9]{0,3})?(/[a-z0-9/_-]*)?)?$", description = "Only deliveries to this target: `scheme://host[:port]`, or a URL with a path (the deliveries to that URL, whatever their query)"),
        ("createdAfter" = Option<String>, Query, format = DateTime, description = "Only deliveries created at or after this RFC 3339 time"),
        ("createdBefore" = Option<String>, Query, format = DateTime, description = "Only deliveries created before this RFC 3339 time"),
        ("lastErrorCode" = Option<String>, Query, pattern = "^([a-z_]{1,64})?$", description = "Only deliveries whose last attempt ended with this `lastErrorCode`"),
    ),
    responses(
        (status = 200, description = "A page of deliveries with everything kept of them (headers unmasked, bodies as base64 of the stored bytes, attempts, transitions, checks), oldest first", body = ExportPage),
        (status = 400, description = "`invalid_status`, `invalid_limit`, `invalid_cursor`, or `invalid_request` for a bad filter", body = ErrorBody),
    )
)]
pub async fn export(
    State(state): State<SharedState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let params = first_values(query.as_deref());
    let filter = super::deliveries::list_filter(&params)?;
    let limit = page_limit(&params)?;
    let cursor = page_cursor(&params)?;
    let page = state.store.list_filtered(filter, limit, cursor).await?;
    let rows = page.deliveries.len();
    let mut records = Vec::with_capacity(rows);
    let mut next_cursor = page.next_cursor;
    let mut body_bytes = 0;
    for (n, d) in page.deliveries.into_iter().enumerate() {
        let id = d.id.clone();
        // One purged since the page was read is left out.
        if let Some(record) = state.store.export(d.id).await? {
            body_bytes += record.delivery.body.as_ref().map_or(0, |b| b.bytes().len());
            records.push(to_export(record));
        }
        // Large bodies end a page early (the next one starts after this delivery), so that a
        // page stays a few MiB whatever the bodies.
        if body_bytes >= MAX_PAGE_BODY_BYTES && n + 1 < rows {
            next_cursor = Some(id);
            break;
        }
    }
    Ok(json(
        StatusCode::OK,
        &ExportPage {
            records,
            next_cursor,
        },
    ))
}

#[utoipa::path(
    post, path = "/v1/import", tag = "deliveries",
    request_body = ImportRequest,
    responses(
        (status = 200, description = "One result per record, in order: `imported`, `existing` (the same delivery is there), `conflict` (its id or idempotency key belongs to another request, `existingId`; nothing overwritten) or `invalid` (`error` says why)", body = ImportResults),
        (status = 400, description = "`invalid_request`: the JSON, or more than 500 records", body = ErrorBody),
        (status = 408, description = "`request_timeout`: the body did not arrive within `--body-read-timeout`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 MiB (nothing was done; the connection is closed)", body = ErrorBody),
        (status = 503, description = "`storage_unavailable` (PostgreSQL cannot be reached); `shutting_down`: the daemon began to shut down while the body was arriving (nothing was done)", body = ErrorBody),
        (status = 507, description = "`storage_full`", body = ErrorBody),
    )
)]
pub async fn import(
    State(state): State<SharedState>,
    body: HttpBody,
) -> Result<Response, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidRequest, message);
    let bytes = super::read_body(body, super::BodyLimit::Bytes(MAX_IMPORT_BYTES)).await?;
    let mut value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| invalid(format!("decode JSON: {e}")))?;
    integral_numbers(&mut value);
    let request: ImportRequest =
        serde_json::from_value(value).map_err(|e| invalid(format!("decode JSON: {e}")))?;
    if request.records.len() > MAX_IMPORT_RECORDS {
        return Err(invalid(format!(
            "at most {MAX_IMPORT_RECORDS} records a request, not {}",
            request.records.len()
        )));
    }
    let now = state.store.now_ms();
    // Written concurrently: the store's group commit carries many in one transaction.
    let results = join_all(request.records.into_iter().map(|record| {
        let state = &state;
        async move {
            let id = record.delivery.id.clone();
            let checked = from_export(record, &state.rules, now).and_then(|checked| {
                declared_secret(&checked, &state.target_rules.now()).map(|()| checked)
            });
            let checked = match checked {
                Ok(checked) => checked,
                Err(error) => {
                    return Ok(ImportResult {
                        id,
                        outcome: spool_proto::transfer::ImportOutcome::Invalid,
                        existing_id: None,
                        error: Some(error),
                    })
                }
            };
            let (outcome, existing_id) = match state.store.import(checked).await? {
                model::ImportOutcome::Imported => {
                    (spool_proto::transfer::ImportOutcome::Imported, None)
                }
                model::ImportOutcome::Existing => {
                    (spool_proto::transfer::ImportOutcome::Existing, None)
                }
                model::ImportOutcome::Conflict { existing_id } => (
                    spool_proto::transfer::ImportOutcome::Conflict,
                    Some(existing_id),
                ),
            };
            Ok::<_, ApiError>(ImportResult {
                id,
                outcome,
                existing_id,
                error: None,
            })
        }
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    Ok(json(StatusCode::OK, &ImportResults { results }))
}

/// The reason logged for the change an import makes to a delivery that was in flight.
const IMPORTED: &str = "imported";

/// Headers a create refuses (spoold manages them) that spoold v0.1.0 took and sent as given:
/// an import keeps them, so that a delivery moved in is sent as v0.1.0 sent it.
pub const V010_HEADERS: &[&str] = &["Keep-Alive"];

/// The store's record as an export line.
pub fn to_export(record: DeliveryRecord) -> ExportRecord {
    let d = record.delivery;
    let (body_kind, body) = match d.body.unwrap_or(Body::None) {
        Body::None => (BodyKind::None, Vec::new()),
        Body::Json(b) => (BodyKind::Json, b),
        Body::Binary(b) => (BodyKind::Binary, b),
    };
    ExportRecord {
        format: EXPORT_FORMAT,
        delivery: ExportedDelivery {
            id: d.id,
            idempotency_key: d.idempotency_key,
            request_digest: record.request_digest.map(|b| STANDARD.encode(b)),
            target_url: d.target_url,
            method: d.method,
            headers: d.headers.unwrap_or_default().into_iter().collect(),
            body_kind,
            body_base64: STANDARD.encode(body),
            status: wire_status(d.status),
            attempts: i64::from(d.attempts),
            uncharged: i64::from(d.uncharged),
            max_attempts: i64::from(d.max_attempts),
            cycle: i64::from(d.cycle),
            last_error: d.last_error,
            last_error_code: d.last_error_code,
            last_response_code: d.last_response_code.map(i64::from),
            created_at_ms: d.created_at,
            updated_at_ms: d.updated_at,
            next_attempt_at_ms: d.next_attempt_at,
            not_before_ms: d.not_before,
            expires_at_ms: d.expires_at,
            mode: match d.mode {
                Mode::AtLeastOnce => DeliveryMode::AtLeastOnce,
                Mode::AtMostOnce => DeliveryMode::AtMostOnce,
            },
            fingerprint: d.fingerprint,
            reconcile: d.reconcile,
            remote_id_pointer: d.remote_id_pointer,
            observation_window_ms: d.observation_window_ms,
            remote_id: d.remote_id,
            unknown_since_ms: d.unknown_since,
            review_at_ms: d.review_at,
            check_at_ms: d.check_at,
            sign_secret: d.sign_secret,
        },
        attempts: record
            .attempts
            .into_iter()
            .map(|a| ExportedAttempt {
                cycle: i64::from(a.cycle),
                number: i64::from(a.number),
                started_at_ms: a.started_at,
                finished_at_ms: a.finished_at,
                outcome: a.outcome,
                http_status: a.http_status.map(i64::from),
                error_code: a.error_code,
                error: a.error,
                duration_ms: a.duration_ms,
            })
            .collect(),
        transitions: record
            .transitions
            .into_iter()
            .map(|t| ExportedTransition {
                from: t.from.map(wire_status),
                to: wire_status(t.to),
                attempt: i64::from(t.attempt),
                at_ms: t.at,
                reason: t.reason,
                note: t.note,
            })
            .collect(),
        checks: record
            .checks
            .into_iter()
            .map(|c| ExportedCheck {
                at_ms: c.at,
                http_status: c.http_status.map(i64::from),
                matches: c.matches.map(i64::from),
                error_code: c.error_code,
                error: c.error,
                duration_ms: c.duration_ms,
            })
            .collect(),
    }
}

/// An export line as the store's record, checked as a create would be; in-flight work is
/// settled as of `now` (see the module documentation). `Err` says what is wrong with it.
pub fn from_export(
    record: ExportRecord,
    rules: &Rules,
    now: Millis,
) -> Result<DeliveryRecord, String> {
    if record.format != EXPORT_FORMAT {
        return Err(format!(
            "format {} is not one this spoold reads (it reads {EXPORT_FORMAT})",
            record.format
        ));
    }
    let e = record.delivery;
    if !super::is_id(&e.id) {
        return Err("id must be 32 lowercase hex digits".into());
    }
    let bytes = STANDARD
        .decode(&e.body_base64)
        .map_err(|err| format!("bodyBase64: {err}"))?;
    let body = match e.body_kind {
        BodyKind::None if bytes.is_empty() => Body::None,
        BodyKind::None => return Err("bodyKind none with a body".into()),
        BodyKind::Json => Body::Json(bytes),
        BodyKind::Binary => Body::Binary(bytes),
    };
    let mode = match e.mode {
        DeliveryMode::AtLeastOnce => Mode::AtLeastOnce,
        DeliveryMode::AtMostOnce => Mode::AtMostOnce,
    };
    // The request, checked by the rules of a create.
    let (raw_body, body_base64) = match &body {
        Body::None => (None, None),
        Body::Json(b) => (
            Some(
                String::from_utf8(b.clone())
                    .map_err(|err| format!("the JSON body is not UTF-8: {err}"))
                    .and_then(|text| {
                        RawValue::from_string(text)
                            .map_err(|err| format!("the JSON body does not parse: {err}"))
                    })?,
            ),
            None,
        ),
        Body::Binary(b) => (None, Some(STANDARD.encode(b))),
    };
    let reconcile = e
        .reconcile
        .as_deref()
        .map(serde_json::from_str::<Reconcile>)
        .transpose()
        .map_err(|err| format!("reconcile: {err}"))?;
    let (v010_headers, headers): (Vec<_>, Vec<_>) = e.headers.iter().partition(|(n, _)| {
        V010_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(n.trim_matches(' ')))
    });
    let create = CreateDelivery {
        idempotency_key: e.idempotency_key.clone(),
        target_url: Some(e.target_url.clone()),
        method: Some(e.method.clone()),
        headers: Some(
            headers
                .into_iter()
                .map(|(n, v)| (n.clone(), Some(v.clone())))
                .collect(),
        ),
        body: raw_body,
        body_base64,
        max_attempts: Some(e.max_attempts),
        not_before: None,
        expires_at: None,
        mode: (mode == Mode::AtMostOnce).then_some(DeliveryMode::AtMostOnce),
        fingerprint: e.fingerprint.clone(),
        reconcile,
        remote_id_pointer: e.remote_id_pointer.clone(),
        sign: e.sign_secret.clone().map(|name| Sign {
            secret_ref: Some(name),
        }),
    };
    let mut checked = submission::validate(create, rules).map_err(|r| r.message)?;
    for (name, value) in v010_headers {
        let canonical = spool_proto::headers::canonical_name(name.trim_matches(' '));
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            return Err(format!("header {canonical:?} contains a control character"));
        }
        if checked.headers.iter().any(|(n, _)| *n == canonical) {
            return Err(format!(
                "header {canonical:?} is duplicated after canonicalization"
            ));
        }
        checked.headers.push((canonical, value.clone()));
    }
    checked.headers.sort();
    let request_digest = match (&e.request_digest, &checked.idempotency_key) {
        (Some(digest), _) => Some(
            STANDARD
                .decode(digest)
                .map_err(|err| format!("requestDigest: {err}"))?,
        ),
        (None, Some(_)) => Some(checked.request_digest.clone()),
        (None, None) => None,
    };
    let mut delivery = Delivery {
        id: e.id,
        idempotency_key: checked.idempotency_key,
        target_url: checked.target_url,
        origin: checked.origin,
        method: checked.method,
        headers: Some(checked.headers),
        body: Some(body),
        status: store_status(e.status),
        attempts: count("attempts", e.attempts)?,
        uncharged: count("uncharged", e.uncharged)?,
        // As the create's rules read it: 0 is the default, not "no attempt".
        max_attempts: checked.max_attempts,
        cycle: count("cycle", e.cycle)?.max(1),
        last_error: e.last_error,
        last_error_code: e.last_error_code,
        last_response_code: e
            .last_response_code
            .map(|c| code("lastResponseCode", c))
            .transpose()?,
        created_at: e.created_at_ms,
        updated_at: e.updated_at_ms,
        next_attempt_at: e.next_attempt_at_ms,
        not_before: e.not_before_ms,
        expires_at: e.expires_at_ms,
        lease_until: None,
        mode,
        fingerprint: checked.fingerprint,
        reconcile: checked.reconcile,
        remote_id_pointer: checked.remote_id_pointer,
        observation_window_ms: e.observation_window_ms,
        remote_id: e.remote_id,
        unknown_since: e.unknown_since_ms,
        review_at: e.review_at_ms,
        check_at: e.check_at_ms,
        checks: record.checks.len() as u32,
        sign_secret: checked.sign_secret,
    };
    let checks: Vec<Check> = record
        .checks
        .into_iter()
        .map(|c| {
            Ok(Check {
                at: c.at_ms,
                http_status: c
                    .http_status
                    .map(|s| code("checks.httpStatus", s))
                    .transpose()?,
                matches: c.matches.map(|m| count("checks.matches", m)).transpose()?,
                error_code: c.error_code,
                error: c.error,
                duration_ms: c.duration_ms,
            })
        })
        .collect::<Result<_, String>>()?;
    let mut attempts: Vec<Attempt> = record
        .attempts
        .into_iter()
        .map(|a| {
            Ok(Attempt {
                cycle: count("attempts.cycle", a.cycle)?,
                number: count("attempts.number", a.number)?,
                started_at: a.started_at_ms,
                finished_at: a.finished_at_ms,
                outcome: a.outcome,
                http_status: a
                    .http_status
                    .map(|c| code("attempts.httpStatus", c))
                    .transpose()?,
                error_code: a.error_code,
                error: a.error,
                duration_ms: a.duration_ms,
            })
        })
        .collect::<Result<_, String>>()?;
    let mut transitions: Vec<Transition> = record
        .transitions
        .into_iter()
        .map(|t| {
            Ok(Transition {
                from: t.from.map(store_status),
                to: store_status(t.to),
                attempt: count("transitions.attempt", t.attempt)?,
                at: t.at_ms,
                reason: t.reason,
                note: t.note,
            })
        })
        .collect::<Result<_, String>>()?;
    check_history(&delivery, &attempts, &transitions, &checks, now)?;
    if delivery.status == DeliveryStatus::InFlight {
        settle_in_flight(&mut delivery, &mut attempts, &mut transitions, now);
    }
    Ok(DeliveryRecord {
        delivery,
        request_digest,
        attempts,
        transitions,
        checks,
    })
}

/// How far past the importing daemon's clock a recorded time may lie: the exporting host's
/// clock may have been ahead of this one's.
const CLOCK_SKEW_MS: Millis = spool_proto::journal::CLOCK_SKEW_MS;
/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z): the latest time a
/// create accepts.
const LAST_TIME_MS: Millis = 253_402_300_799_999;

/// Whether a record's history adds up: counts a delivery can reach, attempt numbers unique
/// and increasing within each cycle, a status its attempts can reach, times within what a
/// create accepts and in order. `Err` names the field (as the export record spells it) and
/// says what is wrong: a history that does not add up would be kept, shown and acted on as if
/// it were true.
fn check_history(
    d: &Delivery,
    attempts: &[Attempt],
    transitions: &[Transition],
    checks: &[Check],
    now: Millis,
) -> Result<(), String> {
    let latest = now.saturating_add(CLOCK_SKEW_MS);
    let when = |ms: Millis| spool_proto::units::format_time(ms);
    let past = |field: String, ms: Millis| {
        if (0..=latest).contains(&ms) {
            Ok(())
        } else {
            Err(format!(
                "{field} {ms} ({}): out of range (a recorded time is from 1970 to now, give or \
                 take a day of clock skew)",
                when(ms)
            ))
        }
    };
    // `later` (named `later_field`) must not come before `earlier`.
    let in_order = |later_field: &str, later: Millis, earlier_field: &str, earlier: Millis| {
        if later < earlier {
            Err(format!(
                "{later_field} {} is before {earlier_field} {}",
                when(later),
                when(earlier)
            ))
        } else {
            Ok(())
        }
    };
    let scheduled = |field: &str, ms: Option<Millis>| match ms {
        Some(ms) if !(0..=LAST_TIME_MS).contains(&ms) => Err(format!(
            "delivery.{field} {ms}: out of range (1970 to 9999-12-31T23:59:59.999Z)"
        )),
        _ => Ok(()),
    };
    if d.uncharged > d.attempts {
        return Err(format!(
            "delivery.uncharged {} is more than delivery.attempts {}",
            d.uncharged, d.attempts
        ));
    }
    let charged = d.attempts - d.uncharged;
    if charged > d.max_attempts {
        return Err(format!(
            "delivery.attempts {} ({charged} charged): more than maxAttempts {}",
            d.attempts, d.max_attempts
        ));
    }
    // At least once, a delivery is failed after its last charged attempt: one still pending
    // has an attempt left.
    if d.status == DeliveryStatus::Pending
        && d.mode == Mode::AtLeastOnce
        && charged >= d.max_attempts
    {
        return Err(format!(
            "delivery.attempts {} of maxAttempts {}: a pending delivery has an attempt left",
            d.attempts, d.max_attempts
        ));
    }
    if matches!(
        d.status,
        DeliveryStatus::Succeeded | DeliveryStatus::Unknown | DeliveryStatus::ManualReview
    ) && charged == 0
    {
        return Err(format!(
            "delivery.status {}: reached only by an attempt, and delivery.attempts is {} ({} \
             charged)",
            wire_status(d.status).as_str(),
            d.attempts,
            charged
        ));
    }
    past("delivery.createdAtMs".into(), d.created_at)?;
    past("delivery.updatedAtMs".into(), d.updated_at)?;
    in_order(
        "delivery.updatedAtMs",
        d.updated_at,
        "delivery.createdAtMs",
        d.created_at,
    )?;
    if let Some(since) = d.unknown_since {
        past("delivery.unknownSinceMs".into(), since)?;
    }
    scheduled("nextAttemptAtMs", d.next_attempt_at)?;
    scheduled("notBeforeMs", d.not_before)?;
    scheduled("expiresAtMs", d.expires_at)?;
    scheduled("reviewAtMs", d.review_at)?;
    scheduled("checkAtMs", d.check_at)?;
    let mut previous: Option<(u32, u32)> = None;
    for (i, a) in attempts.iter().enumerate() {
        let at = format!("attempts[{i}]");
        if a.cycle == 0 || a.cycle > d.cycle {
            return Err(format!(
                "{at}.cycle {}: the delivery's cycles are 1 to {}",
                a.cycle, d.cycle
            ));
        }
        if a.number == 0 {
            return Err(format!("{at}.number 0: attempts are numbered from 1"));
        }
        if let Some((cycle, number)) = previous.filter(|p| *p >= (a.cycle, a.number)) {
            return Err(format!(
                "{at}: attempt {} of cycle {} after attempt {number} of cycle {cycle} (attempt \
                 numbers are unique and increase within a cycle, oldest first)",
                a.number, a.cycle
            ));
        }
        previous = Some((a.cycle, a.number));
        if a.cycle == d.cycle && a.number > d.attempts {
            return Err(format!(
                "{at}.number {}: more than delivery.attempts {} of its cycle",
                a.number, d.attempts
            ));
        }
        past(format!("{at}.startedAtMs"), a.started_at)?;
        in_order(
            &format!("{at}.startedAtMs"),
            a.started_at,
            "delivery.createdAtMs",
            d.created_at,
        )?;
        if let Some(finished) = a.finished_at {
            past(format!("{at}.finishedAtMs"), finished)?;
            in_order(
                &format!("{at}.finishedAtMs"),
                finished,
                &format!("{at}.startedAtMs"),
                a.started_at,
            )?;
        }
    }
    for (i, t) in transitions.iter().enumerate() {
        past(format!("transitions[{i}].atMs"), t.at)?;
        in_order(
            &format!("transitions[{i}].atMs"),
            t.at,
            "delivery.createdAtMs",
            d.created_at,
        )?;
    }
    for (i, c) in checks.iter().enumerate() {
        past(format!("checks[{i}].atMs"), c.at)?;
    }
    Ok(())
}

/// JSON counts `6708.0` as an integer, and so does the document; serde does not. Such numbers
/// become integers (records hold no number that is not one).
fn integral_numbers(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
                if f.fract() == 0.0 && f > i64::MIN as f64 && f < i64::MAX as f64 {
                    *value = Value::from(f as i64);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers),
        Value::Object(fields) => fields.values_mut().for_each(integral_numbers),
        _ => {}
    }
}

/// A count of a record (attempts, a cycle, …): 0 to 2³² − 1.
fn count(name: &str, value: i64) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{name} {value} is out of range"))
}

/// An HTTP status code of a record: 0 to 65535.
fn code(name: &str, value: i64) -> Result<u16, String> {
    u16::try_from(value).map_err(|_| format!("{name} {value} is out of range"))
}

/// A delivery that was in flight where it was exported, as crash recovery would leave it.
fn settle_in_flight(
    d: &mut Delivery,
    attempts: &mut [Attempt],
    transitions: &mut Vec<Transition>,
    now: Millis,
) {
    let open = attempts
        .last_mut()
        .filter(|a| a.outcome.is_none() && a.cycle == d.cycle);
    let to = match (d.mode, open) {
        (Mode::AtMostOnce, Some(attempt)) => {
            attempt.outcome = Some(model::AttemptOutcome::Unknown.as_str().to_owned());
            attempt.finished_at = Some(now);
            attempt.error_code = Some(IMPORTED.to_owned());
            attempt.error = Some(
                "in flight when it was exported: it may have arrived; at most once, so it is \
                 not sent again"
                    .into(),
            );
            d.unknown_since = Some(now);
            d.review_at = Some(
                now + d
                    .observation_window_ms
                    .unwrap_or(DEFAULT_OBSERVATION_WINDOW_MS),
            );
            d.check_at = Some(now);
            d.next_attempt_at = None;
            DeliveryStatus::Unknown
        }
        (_, open) => {
            if let Some(attempt) = open {
                attempt.outcome = Some(model::AttemptOutcome::Interrupted.as_str().to_owned());
                attempt.finished_at = Some(now);
                attempt.error_code = Some(IMPORTED.to_owned());
                attempt.error =
                    Some("in flight when it was exported; it will be sent again".into());
                d.uncharged += 1;
            }
            d.next_attempt_at = Some(now);
            DeliveryStatus::Pending
        }
    };
    transitions.push(Transition {
        from: Some(DeliveryStatus::InFlight),
        to,
        attempt: d.attempts,
        at: now,
        reason: IMPORTED.to_owned(),
        note: None,
    });
    d.status = to;
    d.updated_at = now;
    d.last_error_code = Some(IMPORTED.to_owned());
    d.last_error = Some("in flight when it was exported".into());
}

use super::deliveries::{store_status, wire_status};

/// A delivery that will still be sent and names a secret must name one declared here.
fn declared_secret(
    record: &DeliveryRecord,
    rules: &crate::deliveries::targets::TargetRules,
) -> Result<(), String> {
    let d = &record.delivery;
    match &d.sign_secret {
        Some(name) if d.status == DeliveryStatus::Pending && rules.secret(name).is_none() => {
            Err(format!(
                "sign.secretRef {name:?} is not declared in [secrets] here, and the delivery is \
                 still to be sent"
            ))
        }
        _ => Ok(()),
    }
}
