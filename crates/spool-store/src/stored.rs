//! How both backends store the parts of a delivery that have no column type of their own: the
//! body as a kind and bytes, headers as a JSON array of pairs, statuses and modes as their
//! names. One definition, so that a row written by either backend reads the same (and an
//! export moves between them unchanged).

/// A delivery row's columns without headers and body (listings), in the order both backends'
/// `row_to_delivery` read them (SQLite by position, PostgreSQL by name). A macro, so that
/// statements can `concat!` it into a constant.
macro_rules! list_columns {
    () => {
        "id, idempotency_key, target_url, origin, method, status, attempts, uncharged, \
         max_attempts, cycle, last_error, last_error_code, last_response_code, created_at, \
         updated_at, next_attempt_at, not_before, expires_at, lease_until, mode, fingerprint, \
         reconcile, remote_id_pointer, window_ms, remote_id, unknown_since, review_at, check_at, \
         checks, sign_secret"
    };
}

/// A full delivery row's columns: [`list_columns!`]'s, then headers and body.
macro_rules! full_columns {
    () => {
        concat!(
            $crate::stored::list_columns!(),
            ", headers, body_kind, body"
        )
    };
}

pub(crate) use {full_columns, list_columns};

use crate::error::{Result, StoreError};
use crate::model::{Body, DeliveryStatus, Mode, UnknownStatus};

/// `body_kind`: no body.
pub(crate) const BODY_NONE: i64 = 0;
/// `body_kind`: a JSON body (its bytes as sent).
pub(crate) const BODY_JSON: i64 = 1;
/// `body_kind`: any other body, bytes as given.
pub(crate) const BODY_BINARY: i64 = 2;

pub(crate) fn encode_body(body: &Body) -> (i64, Option<&[u8]>) {
    match body {
        Body::None => (BODY_NONE, None),
        Body::Json(b) => (BODY_JSON, Some(b)),
        Body::Binary(b) => (BODY_BINARY, Some(b)),
    }
}

pub(crate) fn decode_body(kind: i64, bytes: Option<Vec<u8>>) -> Body {
    match (kind, bytes) {
        (BODY_JSON, Some(b)) => Body::Json(b),
        (BODY_BINARY, Some(b)) => Body::Binary(b),
        (BODY_BINARY, None) => Body::Binary(Vec::new()),
        _ => Body::None,
    }
}

pub(crate) fn encode_headers(headers: &[(String, String)]) -> Result<String> {
    serde_json::to_string(headers).map_err(|e| StoreError::Database(e.to_string()))
}

pub(crate) fn decode_headers(text: &str) -> Result<Vec<(String, String)>> {
    serde_json::from_str(text).map_err(|e| StoreError::Database(format!("stored headers: {e}")))
}

pub(crate) fn parse_status(text: &str) -> Result<DeliveryStatus> {
    text.parse()
        .map_err(|e: UnknownStatus| StoreError::Database(e.to_string()))
}

pub(crate) fn parse_mode(text: &str) -> Result<Mode> {
    text.parse()
        .map_err(|e: UnknownStatus| StoreError::Database(e.to_string()))
}
