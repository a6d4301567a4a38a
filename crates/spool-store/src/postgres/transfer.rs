//! Export and import of whole deliveries on PostgreSQL: the same rules as
//! `sqlite/transfer.rs` (read there), for writers that run at the same time — the row goes in
//! with `ON CONFLICT DO NOTHING` first, so two imports of one delivery (two hosts) settle on
//! one, and a key another delivery holds takes the row back out in the same transaction.

use deadpool_postgres::GenericClient;

use super::deliveries::{attempts, checks, get};
use super::status_log;
use super::{exec, get as col, row, Tx};
use crate::error::{Result, StoreError};
use crate::model::{DeliveryRecord, ImportOutcome};
use crate::stored::{encode_body, encode_headers};

/// The delivery `id` with its history; `None` if there is none.
pub(crate) async fn export<C: GenericClient>(c: &C, id: &str) -> Result<Option<DeliveryRecord>> {
    let Some(delivery) = get(c, id).await? else {
        return Ok(None);
    };
    let request_digest = match &delivery.idempotency_key {
        Some(key) => row(
            c,
            "SELECT fingerprint FROM idempotency_keys WHERE key = $1 AND delivery_id = $2",
            &[key, &id],
        )
        .await?
        .map(|r| col::<Vec<u8>>(&r, "fingerprint"))
        .transpose()?,
        None => None,
    };
    Ok(Some(DeliveryRecord {
        request_digest,
        attempts: attempts(c, id).await?.unwrap_or_default(),
        transitions: status_log::read(c, id).await?.unwrap_or_default(),
        checks: checks(c, id).await?.unwrap_or_default(),
        delivery,
    }))
}

/// Write `record` unless its id or idempotency key is taken.
pub(crate) async fn import(tx: &Tx<'_>, record: &DeliveryRecord) -> Result<ImportOutcome> {
    let d = &record.delivery;
    let body = d
        .body
        .as_ref()
        .ok_or_else(|| StoreError::Database("an imported delivery needs its body".into()))?;
    let (body_kind, body) = encode_body(body);
    let headers = encode_headers(d.headers.as_deref().unwrap_or_default())?;
    let n = |v: u32| i64::from(v);
    let inserted = exec(
        tx,
        "INSERT INTO deliveries (id, idempotency_key, target_url, origin, method, headers, \
         body_kind, body, status, attempts, uncharged, max_attempts, claim_seq, cycle, \
         last_error, last_error_code, last_response_code, created_at, updated_at, \
         next_attempt_at, not_before, expires_at, lease_until, log_seq, mode, fingerprint, \
         reconcile, remote_id_pointer, window_ms, remote_id, unknown_since, review_at, \
         check_at, checks, sign_secret) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
         $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, \
         $35) ON CONFLICT (id) DO NOTHING",
        &[
            &d.id,
            &d.idempotency_key,
            &d.target_url,
            &d.origin,
            &d.method,
            &headers,
            &body_kind,
            &body,
            &d.status.as_str(),
            &n(d.attempts),
            &n(d.uncharged),
            &n(d.max_attempts),
            &(record.attempts.len() as i64),
            &n(d.cycle),
            &d.last_error,
            &d.last_error_code,
            &d.last_response_code.map(i64::from),
            &d.created_at,
            &d.updated_at,
            &d.next_attempt_at,
            &d.not_before,
            &d.expires_at,
            &d.lease_until,
            &(record.transitions.len() as i64),
            &d.mode.as_str(),
            &d.fingerprint,
            &d.reconcile,
            &d.remote_id_pointer,
            &d.observation_window_ms,
            &d.remote_id,
            &d.unknown_since,
            &d.review_at,
            &d.check_at,
            &(record.checks.len() as i64),
            &d.sign_secret,
        ],
    )
    .await?;
    if inserted == 0 {
        let existing = get(tx, &d.id)
            .await?
            .ok_or_else(|| StoreError::Database("a conflicting delivery vanished".into()))?;
        return Ok(if record.same_request(&existing) {
            ImportOutcome::Existing
        } else {
            ImportOutcome::Conflict {
                existing_id: existing.id,
            }
        });
    }
    if let Some(key) = &d.idempotency_key {
        let digest = record.request_digest.clone().unwrap_or_default();
        let kept = exec(
            tx,
            "INSERT INTO idempotency_keys (key, delivery_id, fingerprint) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO NOTHING",
            &[key, &d.id, &digest],
        )
        .await?;
        if kept == 0 {
            exec(tx, "DELETE FROM deliveries WHERE id = $1", &[&d.id]).await?;
            let holder = row(
                tx,
                "SELECT delivery_id FROM idempotency_keys WHERE key = $1",
                &[key],
            )
            .await?
            .map(|r| col::<String>(&r, "delivery_id"))
            .transpose()?
            .unwrap_or_default();
            return Ok(ImportOutcome::Conflict {
                existing_id: holder,
            });
        }
    }
    for (seq, a) in (1i64..).zip(&record.attempts) {
        exec(
            tx,
            "INSERT INTO attempts (delivery_id, seq, cycle, number, started_at, finished_at, \
             outcome, http_status, error_code, error, duration_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &d.id,
                &seq,
                &n(a.cycle),
                &n(a.number),
                &a.started_at,
                &a.finished_at,
                &a.outcome,
                &a.http_status.map(i64::from),
                &a.error_code,
                &a.error,
                &a.duration_ms,
            ],
        )
        .await?;
    }
    for (seq, t) in (1i64..).zip(&record.transitions) {
        exec(
            tx,
            "INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, \
             reason, note) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &d.id,
                &seq,
                &t.from.map(|s| s.as_str()),
                &t.to.as_str(),
                &n(t.attempt),
                &t.at,
                &t.reason,
                &t.note,
            ],
        )
        .await?;
    }
    for (seq, c) in (1i64..).zip(&record.checks) {
        exec(
            tx,
            "INSERT INTO checks (delivery_id, seq, at, http_status, matches, error_code, error, \
             duration_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                &d.id,
                &seq,
                &c.at,
                &c.http_status.map(i64::from),
                &c.matches.map(i64::from),
                &c.error_code,
                &c.error,
                &c.duration_ms,
            ],
        )
        .await?;
    }
    Ok(ImportOutcome::Imported)
}
