//! A delivery's status changes that are the same statements in both dialects, written once over
//! [`Sql`]: the transition log's row, an attempt's start record, and the changes off the
//! delivery path — a reservation or an unsent attempt given back, an operator's cancel, retry
//! and decision, a late answer, a reconciliation check. What each change is, is decided in
//! `model.rs` (`Delivery::refusal`, `Resolution::decide`, the check's verdict); this is how it
//! is written.
//!
//! The delivery path itself (claims, results, the next delivery started in the same step) stays
//! in each backend: PostgreSQL runs it as one stored function per step (`functions/steps.sql`),
//! SQLite as statements its writer thread batches.

use crate::changes;
use crate::clock::Millis;
use crate::error::{Result, StoreError};
use crate::model::{
    clip_error, late_answer_note, Applied, AttemptResult, CheckResult, CheckVerdict, Claimed,
    Delivery, DeliveryStatus, Disposition, OperatorAction, Resolution, TransitionOutcome, UrlMatch,
    PARKED,
};
use crate::sql::{Row, Sql, Value};
use crate::stored::{decode_body, decode_headers, parse_mode};

/// A backend's connection that reads whole deliveries (the columns and their stored forms are
/// the backend's: `row_to_delivery`).
pub(crate) trait DeliveryRows: Sql {
    /// The delivery with everything kept of it, its row locked until the transaction ends
    /// where the backend has row locks: what an operator's action decides on cannot change
    /// before it writes.
    async fn delivery_for_update(&self, id: &str) -> Result<Option<Delivery>>;

    /// The delivery as it is now.
    async fn delivery(&self, id: &str) -> Result<Option<Delivery>>;
}

/// Where a status change stands in its delivery's life: the log sequence number and the attempt
/// count, as the statement that made the change returned them (`RETURNING log_seq, attempts`),
/// so that logging it costs one insert and no lookup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step {
    pub(crate) seq: i64,
    pub(crate) attempt: i64,
}

impl From<Step> for (i64, i64) {
    fn from(step: Step) -> (i64, i64) {
        (step.seq, step.attempt)
    }
}

impl Step {
    /// The first two columns of a row returned by `RETURNING log_seq, attempts`.
    pub(crate) fn read(row: &Row) -> Result<Step> {
        Ok(Step {
            seq: row.int(0)?,
            attempt: row.int(1)?,
        })
    }
}

/// Run an `UPDATE … RETURNING log_seq, attempts` of one delivery that must find its row.
async fn step(db: &impl Sql, id: &str, sql: &str, values: &[Value<'_>]) -> Result<Step> {
    let row = db
        .row(sql, values)
        .await?
        .ok_or_else(|| StoreError::Database(format!("delivery {id} vanished")))?;
    Step::read(&row)
}

/// What starting an attempt reads back from the delivery, as each backend reads it from its
/// `RETURNING claim_seq, attempts, cycle, target_url, method, headers, body_kind, body, mode,
/// remote_id_pointer, sign_secret`.
pub(crate) struct StartedRow {
    pub(crate) claim_seq: u32,
    pub(crate) attempt: u32,
    pub(crate) cycle: u32,
    pub(crate) target_url: String,
    pub(crate) method: String,
    pub(crate) headers: String,
    pub(crate) body_kind: i64,
    pub(crate) body: Option<Vec<u8>>,
    pub(crate) mode: String,
    pub(crate) remote_id_pointer: Option<String>,
    pub(crate) sign_secret: Option<String>,
}

impl StartedRow {
    /// Record the attempt as started (its row, with `started_at`) and hand out the request.
    pub(crate) async fn into_claimed(
        self,
        db: &impl Sql,
        id: &str,
        origin: &str,
        now: Millis,
        lease_until: Millis,
    ) -> Result<Claimed> {
        db.exec(
            "INSERT INTO attempts (delivery_id, seq, cycle, number, started_at) \
             VALUES ($1, $2, $3, $4, $5)",
            &[
                id.into(),
                self.claim_seq.into(),
                self.cycle.into(),
                self.attempt.into(),
                now.into(),
            ],
        )
        .await?;
        Ok(Claimed {
            id: id.to_owned(),
            claim_seq: self.claim_seq,
            attempt: self.attempt,
            target_url: self.target_url,
            origin: origin.to_owned(),
            method: self.method,
            headers: decode_headers(&self.headers)?,
            body: decode_body(self.body_kind, self.body),
            started_at: now,
            lease_until,
            mode: parse_mode(&self.mode)?,
            remote_id_pointer: self.remote_id_pointer,
            sign_secret: self.sign_secret,
        })
    }
}

/// Give back a reservation whose attempt never started: pending again, as if never reserved.
/// `false` if the claim is no longer current or its attempt has started.
pub(crate) async fn release<S: Sql>(
    db: &S,
    id: &str,
    claim_seq: u32,
    now: Millis,
    reason: &str,
) -> Result<bool> {
    give_back(db, id, claim_seq, now, reason, None).await
}

/// [`release`], due at `due` when given (else when it was due before).
async fn give_back<S: Sql>(
    db: &S,
    id: &str,
    claim_seq: u32,
    now: Millis,
    reason: &str,
    due: Option<Millis>,
) -> Result<bool> {
    // Locked first (PostgreSQL), so that the statement below (a new snapshot) sees an attempt
    // row that a concurrent start committed while we waited.
    let lock = format!("SELECT 1 FROM deliveries WHERE id = $1{}", S::FOR_UPDATE);
    if db.row(&lock, &[id.into()]).await?.is_none() {
        return Ok(false);
    }
    let changed = db
        .row(
            "UPDATE deliveries SET status = 'pending', lease_until = NULL, updated_at = $3, \
             next_attempt_at = COALESCE($4, next_attempt_at), log_seq = log_seq + 1 \
             WHERE id = $1 AND status = 'in_flight' AND claim_seq = $2 \
             AND NOT EXISTS (SELECT 1 FROM attempts WHERE delivery_id = $1 AND seq = $2) \
             RETURNING log_seq, attempts",
            &[id.into(), claim_seq.into(), now.into(), due.into()],
        )
        .await?;
    let Some(changed) = changed else {
        return Ok(false);
    };
    let (from, to) = (DeliveryStatus::InFlight, DeliveryStatus::Pending);
    let step = Step::read(&changed)?;
    changes::log(db, id, Some(from), to, step, now, reason, None).await?;
    Ok(true)
}

/// Give back an attempt that started but whose request was never sent (see
/// [`crate::Store::unstart`]): its record removed and its count undone, then released as a
/// reservation is.
pub(crate) async fn unstart<S: Sql>(db: &S, id: &str, claim_seq: u32, now: Millis) -> Result<bool> {
    undo_start(db, id, claim_seq, now, "released", None).await
}

/// Give back a claimed delivery whose URL answered 410 Gone to another request (see
/// [`crate::Store::park`]): unsent, its attempt undone if it had started, pending and parked.
pub(crate) async fn park<S: Sql>(
    db: &S,
    id: &str,
    claim_seq: u32,
    started: bool,
    now: Millis,
) -> Result<bool> {
    if started {
        undo_start(db, id, claim_seq, now, "gone", Some(PARKED)).await
    } else {
        give_back(db, id, claim_seq, now, "gone", Some(PARKED)).await
    }
}

/// Park every pending delivery to `url` (without its query) at `origin`: not due until
/// [`unpark`]ed. The number parked.
pub(crate) async fn park_url<S: Sql>(db: &S, origin: &str, url: &str, now: Millis) -> Result<u64> {
    set_due(db, origin, Some(url), Parked::No, PARKED, now).await
}

/// Make the parked deliveries of `origin` (only those to `url`, without its query, if given)
/// due now. The number made due.
pub(crate) async fn unpark<S: Sql>(
    db: &S,
    origin: &str,
    url: Option<&str>,
    now: Millis,
) -> Result<u64> {
    set_due(db, origin, url, Parked::Yes, now, now).await
}

/// Which pending deliveries [`set_due`] changes.
#[derive(Clone, Copy)]
enum Parked {
    Yes,
    No,
}

/// Make the pending deliveries of `origin` (only those to `url` whatever its query, if given)
/// that are parked, or are not, due at `due`. The number changed.
async fn set_due<S: Sql>(
    db: &S,
    origin: &str,
    url: Option<&str>,
    which: Parked,
    due: Millis,
    now: Millis,
) -> Result<u64> {
    let parked = match which {
        Parked::Yes => ">=",
        Parked::No => "<",
    };
    let mut sql = format!(
        "UPDATE deliveries SET next_attempt_at = $2, updated_at = $3 \
         WHERE status = 'pending' AND origin = $1 AND next_attempt_at {parked} $4"
    );
    let mut values: Vec<Value<'_>> = vec![origin.into(), due.into(), now.into(), PARKED.into()];
    let m = url.map(UrlMatch::new);
    if let Some(m) = &m {
        // Stored URLs are ASCII, so the prefix's length in characters is its length in bytes.
        sql.push_str(
            " AND (target_url = $5 \
             OR substr(target_url, 1, CAST(CAST($6 AS BIGINT) AS INTEGER)) IN ($7, $8))",
        );
        values.extend::<[Value<'_>; 4]>([
            m.url.as_str().into(),
            m.prefix_len.into(),
            (&m.with_query).into(),
            (&m.with_fragment).into(),
        ]);
    }
    db.exec(&sql, &values).await
}

/// [`unstart`], the delivery given back with `reason`, due at `due` when given.
async fn undo_start<S: Sql>(
    db: &S,
    id: &str,
    claim_seq: u32,
    now: Millis,
    reason: &str,
    due: Option<Millis>,
) -> Result<bool> {
    let current = format!(
        "SELECT 1 FROM deliveries WHERE id = $1 AND status = 'in_flight' AND claim_seq = $2{}",
        S::FOR_UPDATE
    );
    if db
        .row(&current, &[id.into(), claim_seq.into()])
        .await?
        .is_none()
    {
        return Ok(false);
    }
    let removed = db
        .exec(
            "DELETE FROM attempts WHERE delivery_id = $1 AND seq = $2 AND outcome IS NULL",
            &[id.into(), claim_seq.into()],
        )
        .await?;
    if removed == 0 {
        return Ok(false);
    }
    db.exec(
        "UPDATE deliveries SET attempts = attempts - 1 WHERE id = $1",
        &[id.into()],
    )
    .await?;
    give_back(db, id, claim_seq, now, reason, due).await
}

/// An operator's cancel of a pending delivery, or of an at-least-once one in flight (what
/// `Delivery::refusal` allows).
pub(crate) async fn cancel(
    db: &impl DeliveryRows,
    id: &str,
    now: Millis,
) -> Result<TransitionOutcome> {
    let from = match judge(db, id, OperatorAction::Cancel).await? {
        Ok(from) => from,
        Err(refused) => return Ok(refused),
    };
    let step = step(
        db,
        id,
        "UPDATE deliveries SET status = 'canceled', next_attempt_at = NULL, \
         lease_until = NULL, updated_at = $2, log_seq = log_seq + 1 WHERE id = $1 \
         RETURNING log_seq, attempts",
        &[id.into(), now.into()],
    )
    .await?;
    let to = DeliveryStatus::Canceled;
    changes::log(db, id, Some(from), to, step, now, "canceled", None).await?;
    done(db, id).await
}

/// What a new cycle sets, for an operator's retry and a resend: a fresh attempt budget, due at
/// once, the last error forgotten, a deadline that has passed dropped.
const NEW_CYCLE: &str = "status = 'pending', attempts = 0, uncharged = 0, cycle = cycle + 1, \
     next_attempt_at = $2, lease_until = NULL, last_error = NULL, last_error_code = NULL, \
     last_response_code = NULL, updated_at = $2, \
     expires_at = CASE WHEN expires_at <= $2 THEN NULL ELSE expires_at END, \
     log_seq = log_seq + 1";

/// An operator's retry of a failed delivery: a new cycle.
pub(crate) async fn retry(
    db: &impl DeliveryRows,
    id: &str,
    now: Millis,
) -> Result<TransitionOutcome> {
    let from = match judge(db, id, OperatorAction::Retry).await? {
        Ok(from) => from,
        Err(refused) => return Ok(refused),
    };
    let sql =
        format!("UPDATE deliveries SET {NEW_CYCLE} WHERE id = $1 RETURNING log_seq, attempts");
    let step = step(db, id, &sql, &[id.into(), now.into()]).await?;
    let to = DeliveryStatus::Pending;
    changes::log(db, id, Some(from), to, step, now, "retried", None).await?;
    done(db, id).await
}

/// An operator's decision on an `unknown` or `manual_review` delivery (or a `failed` one whose
/// request may have arrived), with the note that explains it in the transition log.
pub(crate) async fn resolve(
    db: &impl DeliveryRows,
    id: &str,
    resolution: &Resolution,
    note: &str,
    now: Millis,
) -> Result<TransitionOutcome> {
    let from = match judge(db, id, OperatorAction::Resolve).await? {
        Ok(from) => from,
        Err(refused) => return Ok(refused),
    };
    let (to, reason, remote_id) = resolution.decide();
    let step = match resolution {
        // A new cycle, as an operator's retry, with the reconciliation's state cleared.
        Resolution::Resend => {
            let sql = format!(
                "UPDATE deliveries SET {NEW_CYCLE}, check_at = NULL, review_at = NULL, \
                 unknown_since = NULL, remote_id = NULL WHERE id = $1 \
                 RETURNING log_seq, attempts"
            );
            step(db, id, &sql, &[id.into(), now.into()]).await?
        }
        _ => {
            step(
                db,
                id,
                "UPDATE deliveries SET status = $3, check_at = NULL, next_attempt_at = NULL, \
                 remote_id = COALESCE($4, remote_id), updated_at = $2, \
                 log_seq = log_seq + 1 WHERE id = $1 RETURNING log_seq, attempts",
                &[id.into(), now.into(), to.as_str().into(), remote_id.into()],
            )
            .await?
        }
    };
    changes::log(db, id, Some(from), to, step, now, reason, Some(note)).await?;
    done(db, id).await
}

/// A 2xx that answered an at-most-once attempt after its claim was taken back (recording the
/// result said `Fenced`): the request arrived and was taken. When the delivery is still
/// `unknown` or in `manual_review` because of that very attempt (its claim unchanged), the
/// answer is recorded on the attempt and settles the delivery `succeeded` (`late_answer`).
/// Whether it did.
pub(crate) async fn late_answer<S: Sql>(
    db: &S,
    result: &AttemptResult,
    now: Millis,
) -> Result<bool> {
    if result.disposition != Disposition::Succeeded {
        return Ok(false);
    }
    let id = result.id.as_str();
    let current = format!(
        "SELECT status FROM deliveries WHERE id = $1 AND claim_seq = $2 \
         AND mode = 'at_most_once' AND status IN ('unknown', 'manual_review'){}",
        S::FOR_UPDATE
    );
    let Some(from) = db
        .row(&current, &[id.into(), result.claim_seq.into()])
        .await?
    else {
        return Ok(false);
    };
    let from = crate::stored::parse_status(&from.text(0)?)?;
    db.exec(
        "UPDATE attempts SET outcome = 'succeeded', http_status = $3, error_code = NULL, \
         error = NULL, finished_at = $4 WHERE delivery_id = $1 AND seq = $2",
        &[
            id.into(),
            result.claim_seq.into(),
            result.http_status.into(),
            now.into(),
        ],
    )
    .await?;
    let step = step(
        db,
        id,
        "UPDATE deliveries SET status = 'succeeded', check_at = NULL, next_attempt_at = NULL, \
         remote_id = COALESCE($3, remote_id), last_response_code = $4, last_error = NULL, \
         last_error_code = NULL, updated_at = $2, log_seq = log_seq + 1 \
         WHERE id = $1 RETURNING log_seq, attempts",
        &[
            id.into(),
            now.into(),
            (&result.remote_id).into(),
            result.http_status.into(),
        ],
    )
    .await?;
    let note = late_answer_note(result.http_status);
    let to = DeliveryStatus::Succeeded;
    changes::log(
        db,
        id,
        Some(from),
        to,
        step,
        now,
        "late_answer",
        Some(&note),
    )
    .await?;
    Ok(true)
}

/// Record a reconciliation step for an `unknown` delivery: the check (always kept), and its
/// verdict (applied only while the delivery is still `unknown`, so an operator's decision that
/// came first wins).
pub(crate) async fn record_check<S: Sql>(
    db: &S,
    result: &CheckResult,
    now: Millis,
) -> Result<Applied> {
    let id = result.id.as_str();
    let current = format!(
        "SELECT status, checks FROM deliveries WHERE id = $1{}",
        S::FOR_UPDATE
    );
    let Some(current) = db.row(&current, &[id.into()]).await? else {
        return Ok(Applied::Fenced);
    };
    let status = current.text(0)?;
    let checks: i64 = current.int(1)?;
    if let Some(check) = &result.check {
        let error = check.error.as_deref().map(clip_error);
        db.exec(
            "INSERT INTO checks (delivery_id, seq, at, http_status, matches, error_code, error, \
             duration_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            &[
                id.into(),
                (checks + 1).into(),
                check.at.into(),
                check.http_status.into(),
                check.matches.into(),
                (&check.error_code).into(),
                (&error).into(),
                check.duration_ms.into(),
            ],
        )
        .await?;
        db.exec(
            "UPDATE deliveries SET checks = checks + 1 WHERE id = $1",
            &[id.into()],
        )
        .await?;
    }
    if status != DeliveryStatus::Unknown.as_str() {
        return Ok(Applied::Fenced);
    }
    let (to, reason, note, remote_id) = match &result.verdict {
        CheckVerdict::AskAgain { at } => {
            db.exec(
                "UPDATE deliveries SET check_at = $2 WHERE id = $1",
                &[id.into(), (*at).into()],
            )
            .await?;
            return Ok(Applied::Now(DeliveryStatus::Unknown));
        }
        CheckVerdict::Succeeded { remote_id } => (
            DeliveryStatus::Succeeded,
            "reconciled",
            Some(match remote_id {
                Some(rid) => format!("the target has it, as {rid}"),
                None => "the target has it".to_owned(),
            }),
            remote_id.as_deref(),
        ),
        CheckVerdict::ManualReview { reason, note } => (
            DeliveryStatus::ManualReview,
            reason.as_str(),
            note.clone(),
            None,
        ),
    };
    let step = step(
        db,
        id,
        "UPDATE deliveries SET status = $2, check_at = NULL, updated_at = $3, \
         remote_id = COALESCE($4, remote_id), log_seq = log_seq + 1 WHERE id = $1 \
         RETURNING log_seq, attempts",
        &[id.into(), to.as_str().into(), now.into(), remote_id.into()],
    )
    .await?;
    let from = Some(DeliveryStatus::Unknown);
    changes::log(db, id, from, to, step, now, reason, note.as_deref()).await?;
    Ok(Applied::Now(to))
}

/// The first half of an operator's action: read the delivery (locked where the backend has row
/// locks) and judge it. `Ok(status)` to go ahead from `status`; `Err(outcome)` to answer
/// `outcome` without changing anything.
async fn judge(
    db: &impl DeliveryRows,
    id: &str,
    action: OperatorAction,
) -> Result<std::result::Result<DeliveryStatus, TransitionOutcome>> {
    let Some(current) = db.delivery_for_update(id).await? else {
        return Ok(Err(TransitionOutcome::NotFound));
    };
    Ok(match current.refusal(action) {
        Some(refused) => Err(refused),
        None => Ok(current.status),
    })
}

/// The second half of an operator's action: the delivery as it now is.
async fn done(db: &impl DeliveryRows, id: &str) -> Result<TransitionOutcome> {
    db.delivery(id)
        .await?
        .map(TransitionOutcome::Done)
        .ok_or_else(|| StoreError::Database(format!("delivery {id} vanished")))
}
