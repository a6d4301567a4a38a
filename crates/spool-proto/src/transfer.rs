//! Export and import: deliveries with everything spoold keeps of them, one JSON object a line
//! (`spoolctl export > spool.ndjson`, `spoolctl import spool.ndjson`), between hosts and
//! between the SQLite and PostgreSQL backends. Bodies travel as base64 of the stored bytes, so
//! a round trip is byte-exact; times are integer milliseconds since the epoch, as stored.
//! Counts and codes are 64-bit integers on the wire: the importing daemon checks their ranges
//! (a record out of range is reported `invalid`), so that the document and the daemon agree
//! on what a record may hold.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{DeliveryMode, DeliveryStatus};

/// The format of an [`ExportRecord`]; an import refuses a record of another.
pub const EXPORT_FORMAT: i64 = 1;

/// One delivery, as `GET /v1/export` gives it and `POST /v1/import` takes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportRecord {
    /// `1`; an import reports a record of another format `invalid`.
    pub format: i64,
    pub delivery: ExportedDelivery,
    /// Oldest first.
    #[serde(default)]
    pub attempts: Vec<ExportedAttempt>,
    /// Every status change, oldest first.
    #[serde(default)]
    pub transitions: Vec<ExportedTransition>,
    /// Reconciliation checks, oldest first.
    #[serde(default)]
    pub checks: Vec<ExportedCheck>,
}

/// The delivery itself, every stored field; headers and body as stored (secret header values
/// included: an export is a copy of the queue, to be kept as carefully as the database).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedDelivery {
    /// 32 lowercase hex digits (an import reports any other `invalid`).
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Base64 of the digest the idempotency key is compared by; absent, the importing spoold
    /// computes it from the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<String>,
    pub target_url: String,
    pub method: String,
    /// Name → value, as stored (names canonical).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub body_kind: BodyKind,
    /// Standard base64 of the body's bytes (empty for none).
    #[serde(default)]
    pub body_base64: String,
    pub status: DeliveryStatus,
    pub attempts: i64,
    #[serde(default)]
    pub uncharged: i64,
    pub max_attempts: i64,
    #[serde(default = "one")]
    pub cycle: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_response_code: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    pub mode: DeliveryMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// The reconcile query, as the daemon stores it (JSON text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id_pointer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation_window_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_since_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign_secret: Option<String>,
}

/// What a delivery's body is: none, JSON (sent as `application/json` unless its headers say
/// otherwise) or bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BodyKind {
    None,
    Json,
    Binary,
}

fn one() -> i64 {
    1
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedAttempt {
    pub cycle: i64,
    pub number: i64,
    pub started_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedTransition {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DeliveryStatus>,
    pub to: DeliveryStatus,
    pub attempt: i64,
    pub at_ms: i64,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportedCheck {
    pub at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// `GET /v1/export`: a page of records.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportPage {
    pub records: Vec<ExportRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/import`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImportRequest {
    /// At most 500.
    #[schema(max_items = 500)]
    pub records: Vec<ExportRecord>,
}

/// What became of one record of an import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImportOutcome {
    /// Written, with its history.
    Imported,
    /// The same delivery is there already: left as it is.
    Existing,
    /// Its id or idempotency key belongs to another request (`existingId`): not written.
    Conflict,
    /// The record does not describe a delivery this spoold would keep (`error` says why).
    Invalid,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    pub id: String,
    pub outcome: ImportOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The answer to `POST /v1/import`: one result per record, in order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportResults {
    pub results: Vec<ImportResult>,
}
