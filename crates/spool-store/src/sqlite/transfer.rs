//! Export and import of whole deliveries (`spoolctl export` / `import`): a delivery read with
//! its history, and written back with it, on this or another database.
//!
//! An import writes the row as exported, numbering its attempts, transitions and checks from
//! 1 in the order given and setting the claim and log counters past them, so that the next
//! claim or status change continues the history. It never overwrites: a delivery with the same
//! id is `Existing` if it is the same request and a `Conflict` otherwise, as is one whose
//! idempotency key another delivery holds.

use rusqlite::{params, Connection, OptionalExtension as _};

use super::deliveries::{attempts, checks, get};
use super::map_err;
use super::status_log;
use crate::error::{Result, StoreError};
use crate::model::{DeliveryRecord, ImportOutcome};
use crate::stored::{encode_body, encode_headers};

/// The delivery `id` with its history; `None` if there is none.
pub(crate) fn export(conn: &Connection, id: &str) -> Result<Option<DeliveryRecord>> {
    let Some(delivery) = get(conn, id)? else {
        return Ok(None);
    };
    let request_digest = match &delivery.idempotency_key {
        Some(key) => conn
            .prepare_cached(
                "SELECT fingerprint FROM idempotency_keys WHERE key = ?1 AND delivery_id = ?2",
            )
            .and_then(|mut st| st.query_row(params![key, id], |r| r.get(0)).optional())
            .map_err(map_err)?,
        None => None,
    };
    Ok(Some(DeliveryRecord {
        request_digest,
        attempts: attempts(conn, id)?.unwrap_or_default(),
        transitions: status_log::read(conn, id)?.unwrap_or_default(),
        checks: checks(conn, id)?.unwrap_or_default(),
        delivery,
    }))
}

/// Write `record` unless its id or idempotency key is taken (see the module documentation).
pub(crate) fn import(conn: &Connection, record: &DeliveryRecord) -> Result<ImportOutcome> {
    let d = &record.delivery;
    if let Some(existing) = get(conn, &d.id)? {
        return Ok(if record.same_request(&existing) {
            ImportOutcome::Existing
        } else {
            ImportOutcome::Conflict {
                existing_id: existing.id,
            }
        });
    }
    if let Some(key) = &d.idempotency_key {
        let holder: Option<String> = conn
            .prepare_cached("SELECT delivery_id FROM idempotency_keys WHERE key = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(map_err)?;
        if let Some(existing_id) = holder {
            return Ok(ImportOutcome::Conflict { existing_id });
        }
    }
    let body = d
        .body
        .as_ref()
        .ok_or_else(|| StoreError::Database("an imported delivery needs its body".into()))?;
    let (body_kind, body) = encode_body(body);
    let headers = encode_headers(d.headers.as_deref().unwrap_or_default())?;
    conn.prepare_cached(
        "INSERT INTO deliveries (id, idempotency_key, target_url, origin, method, headers, \
         body_kind, body, status, attempts, uncharged, max_attempts, claim_seq, cycle, \
         last_error, last_error_code, last_response_code, created_at, updated_at, \
         next_attempt_at, not_before, expires_at, lease_until, log_seq, mode, fingerprint, \
         reconcile, remote_id_pointer, window_ms, remote_id, unknown_since, review_at, \
         check_at, checks, sign_secret) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, \
         ?35)",
    )
    .and_then(|mut st| {
        st.execute(params![
            d.id,
            d.idempotency_key,
            d.target_url,
            d.origin,
            d.method,
            headers,
            body_kind,
            body,
            d.status.as_str(),
            d.attempts,
            d.uncharged,
            d.max_attempts,
            record.attempts.len() as i64,
            d.cycle,
            d.last_error,
            d.last_error_code,
            d.last_response_code,
            d.created_at,
            d.updated_at,
            d.next_attempt_at,
            d.not_before,
            d.expires_at,
            d.lease_until,
            record.transitions.len() as i64,
            d.mode.as_str(),
            d.fingerprint,
            d.reconcile,
            d.remote_id_pointer,
            d.observation_window_ms,
            d.remote_id,
            d.unknown_since,
            d.review_at,
            d.check_at,
            record.checks.len() as i64,
            d.sign_secret,
        ])
    })
    .map_err(map_err)?;
    if let Some(key) = &d.idempotency_key {
        conn.prepare_cached(
            "INSERT INTO idempotency_keys (key, delivery_id, fingerprint) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut st| {
            st.execute(params![
                key,
                d.id,
                record.request_digest.as_deref().unwrap_or_default()
            ])
        })
        .map_err(map_err)?;
    }
    for (seq, a) in (1i64..).zip(&record.attempts) {
        conn.prepare_cached(
            "INSERT INTO attempts (delivery_id, seq, cycle, number, started_at, finished_at, \
             outcome, http_status, error_code, error, duration_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .and_then(|mut st| {
            st.execute(params![
                d.id,
                seq,
                a.cycle,
                a.number,
                a.started_at,
                a.finished_at,
                a.outcome,
                a.http_status,
                a.error_code,
                a.error,
                a.duration_ms
            ])
        })
        .map_err(map_err)?;
    }
    for (seq, t) in (1i64..).zip(&record.transitions) {
        conn.prepare_cached(
            "INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, \
             reason, note) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut st| {
            st.execute(params![
                d.id,
                seq,
                t.from.map(|s| s.as_str()),
                t.to.as_str(),
                t.attempt,
                t.at,
                t.reason,
                t.note
            ])
        })
        .map_err(map_err)?;
    }
    for (seq, c) in (1i64..).zip(&record.checks) {
        conn.prepare_cached(
            "INSERT INTO checks (delivery_id, seq, at, http_status, matches, error_code, error, \
             duration_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .and_then(|mut st| {
            st.execute(params![
                d.id,
                seq,
                c.at,
                c.http_status,
                c.matches,
                c.error_code,
                c.error,
                c.duration_ms
            ])
        })
        .map_err(map_err)?;
    }
    Ok(ImportOutcome::Imported)
}
