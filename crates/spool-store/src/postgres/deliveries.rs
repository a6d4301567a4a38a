//! Deliveries on PostgreSQL: the same rules as `sqlite/deliveries.rs`, for several hosts at once.
//! Write functions run in one READ COMMITTED transaction each (see `in_tx!`); read functions
//! run on a pooled connection. All state changes follow the rules in `model`: claims are fenced
//! by `claim_seq`, terminal rows are never reopened except by retry or an operator's resend.
//!
//! **Invariant:** a delivery is in flight under at most one claim, whichever host took it.
//! SQLite has one writer; here every host writes at once, so:
//! - claims pick their rows with `FOR UPDATE SKIP LOCKED`: two hosts never take the same row,
//!   and neither waits for the other;
//! - every fenced read-modify-write locks the row it decides on (`SELECT … FOR UPDATE`) before
//!   reading what it decides by, so no other host changes it between the read and the write;
//! - an idempotency key is claimed by inserting its row first (`ON CONFLICT DO NOTHING` waits
//!   for a concurrent inserter's outcome): one key creates one delivery, whoever races;
//! - statements that wait for many row locks take them in id order (no deadlocks among us).

use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::{exec, get as col, int, opt_int, row, rows, Call, Tx};
use crate::claim::{self, Candidate, ClaimIo};
use crate::delivery_changes::{self, StartedRow, Step};
use crate::error::{Result, StoreError};
use crate::model::{
    clip_error, Applied, Attempt, AttemptResult, Capacity, Check, ClaimBatch, ClaimPass, Claimed,
    Delivery, DeliveryStatus, Disposition, InsertOutcome, ListFilter, Millis, Mode, NewDelivery,
    OriginCounts, Page, Reclaimed, Reservation, StartOutcome, Stats, Taken,
    DEFAULT_OBSERVATION_WINDOW_MS,
};
use crate::stored::{
    decode_body, decode_headers, encode_body, encode_headers, full_columns, list_columns,
    parse_mode, parse_status,
};

// No index hints: PostgreSQL's planner picks the partial indexes of `migrations/` by itself
// (`deliveries_due`, `deliveries_origin_due`, `deliveries_expiry`, `deliveries_finished`,
// `deliveries_checks`) as long as a query repeats the index's predicate literally
// (`status = 'pending'`, …), which every query here does, so that generic plans of prepared
// statements can use them too; in-flight claims are found through `deliveries_status`. Ties in
// due order are broken by id (ids are time-ordered): first come, first served.

/// Create a delivery, unless its idempotency key is known (the existing delivery, or a
/// conflict if the request differs), its deadline has passed, or the database is over its
/// admission limit (`db_bytes`, measured by the caller, against `max_db_bytes`; 0 = none).
///
/// The key's row is inserted first: of several hosts racing on one key, exactly one inserts
/// it, and the others wait for that transaction and then answer from what it committed,
/// without writing anything. A delivery id that exists already is refused with an error, as
/// SQLite refuses it (its primary key), and nothing of the refused insert is kept.
pub(crate) async fn insert(
    tx: &Tx<'_>,
    new: &NewDelivery,
    now: Millis,
    db_bytes: u64,
    max_db_bytes: u64,
) -> Result<InsertOutcome> {
    if let Some(key) = &new.idempotency_key {
        let inserted = exec(
            tx,
            "INSERT INTO idempotency_keys (key, delivery_id, fingerprint) VALUES ($1, $2, $3) \
             ON CONFLICT (key) DO NOTHING",
            &[key, &new.id, &new.request_digest],
        )
        .await?;
        if inserted == 0 {
            return known_key(tx, key, new).await;
        }
    }
    // Judged after the key: a retry of a create whose deadline has passed since finds the
    // original above.
    let refused = if new.expires_at.is_some_and(|exp| exp <= now) {
        Some(InsertOutcome::AlreadyExpired)
    } else if max_db_bytes > 0 && db_bytes >= max_db_bytes {
        Some(InsertOutcome::Full {
            db_bytes,
            limit: max_db_bytes,
        })
    } else {
        None
    };
    if let Some(refused) = refused {
        // Nothing was written: give the key back (a host waiting on it then takes it).
        if let Some(key) = &new.idempotency_key {
            exec(tx, "DELETE FROM idempotency_keys WHERE key = $1", &[key]).await?;
        }
        return Ok(refused);
    }
    let (body_kind, body) = encode_body(&new.body);
    let headers = encode_headers(&new.headers)?;
    let due = new.not_before.map_or(now, |nb| nb.max(now));
    let expires_at = new
        .expires_at
        .or_else(|| new.retry_window_ms.map(|w| due + w));
    let inserted = exec(
        tx,
        "INSERT INTO deliveries (id, idempotency_key, target_url, origin, method, headers, \
         body_kind, body, status, max_attempts, created_at, updated_at, next_attempt_at, \
         not_before, expires_at, log_seq, mode, fingerprint, reconcile, remote_id_pointer, \
         window_ms, sign_secret) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'pending', $9, $10, $10, $11, $12, $13, 1, $14, \
         $15, $16, $17, $18, $19) \
         ON CONFLICT (id) DO NOTHING",
        &[
            &new.id,
            &new.idempotency_key,
            &new.target_url,
            &new.origin,
            &new.method,
            &headers,
            &body_kind,
            &body,
            &i64::from(new.max_attempts),
            &now,
            &due,
            &new.not_before,
            &expires_at,
            &new.mode.as_str(),
            &new.fingerprint,
            &new.reconcile,
            &new.remote_id_pointer,
            &new.observation_window_ms,
            &new.sign_secret,
        ],
    )
    .await?;
    if inserted == 0 {
        // The error rolls the whole transaction back: the key inserted above goes with it.
        return Err(StoreError::Database(format!(
            "a delivery with id {} exists already (ids are never reused)",
            new.id
        )));
    }
    let first = Step { seq: 1, attempt: 0 };
    crate::changes::log(
        tx,
        &new.id,
        None,
        DeliveryStatus::Pending,
        first,
        now,
        "created",
        None,
    )
    .await?;
    // The row is exactly what was inserted: build it instead of reading it back.
    Ok(InsertOutcome::Created(Delivery::created(
        new, now, due, expires_at,
    )))
}

/// The answer to an insert whose idempotency key is taken: the delivery it names if the
/// request is the same, a conflict if not.
pub(super) async fn known_key(tx: &Tx<'_>, key: &str, new: &NewDelivery) -> Result<InsertOutcome> {
    // A new statement, so a new snapshot: the key the insert above waited for is visible.
    let Some(known) = row(
        tx,
        "SELECT delivery_id, fingerprint FROM idempotency_keys WHERE key = $1",
        &[&key],
    )
    .await?
    else {
        // Purged between the two statements: run the insert again.
        return Err(StoreError::Contention(format!(
            "idempotency key {key} went away while it was read"
        )));
    };
    let id: String = col(&known, "delivery_id")?;
    let fingerprint: Vec<u8> = col(&known, "fingerprint")?;
    if !new.same_request(&fingerprint) {
        return Ok(InsertOutcome::Conflict { existing_id: id });
    }
    match get(tx, &id).await? {
        Some(existing) => Ok(InsertOutcome::Existing(existing)),
        None => Err(StoreError::Database(format!(
            "idempotency key refers to missing delivery {id}"
        ))),
    }
}

/// Claim up to `limit` due deliveries, oldest due first, within `capacity`: each is in flight
/// under a new claim with its attempt started. Due deliveries past their deadline are failed as
/// `expired` instead. Rows another host is claiming at the same moment are skipped, not waited
/// for.
pub(crate) async fn claim(
    tx: &Tx<'_>,
    now: Millis,
    limit: u32,
    capacity: Capacity,
    lease_ms: i64,
) -> Result<ClaimBatch> {
    let mut io = ClaimStatements {
        tx,
        now,
        lease_until: now + lease_ms,
    };
    claim::run(ClaimPass::new(capacity, limit), now, &mut io).await
}

/// A claim pass's statements, inside the claim's transaction.
struct ClaimStatements<'a, 't> {
    tx: &'a Tx<'t>,
    now: Millis,
    lease_until: Millis,
}

impl ClaimIo for ClaimStatements<'_, '_> {
    async fn candidates(
        &mut self,
        saturated: &HashSet<String>,
        fetch: i64,
    ) -> Result<Vec<Candidate>> {
        due_candidates(self.tx, self.now, saturated, fetch, true).await
    }

    async fn expire(&mut self, c: &Candidate) -> Result<()> {
        expire(self.tx, &c.id, DeliveryStatus::Pending, self.now).await
    }

    async fn claim(&mut self, c: &Candidate) -> Result<Option<Claimed>> {
        claim_one(self.tx, &c.id, &c.origin, self.now, self.lease_until).await
    }
}

fn read_candidate(r: &Row) -> Result<Candidate> {
    Ok(Candidate {
        id: col(r, "id")?,
        origin: col(r, "origin")?,
        expires_at: col(r, "expires_at")?,
        due: col(r, "next_attempt_at")?,
    })
}

/// Above this many unsaturated origins with pending work, the due index is read from its head
/// rather than origin by origin.
const ORIGIN_SEEKS: usize = 64;

/// One origin's due pending work, oldest due first.
macro_rules! seek_sql {
    () => {
        "SELECT id, origin, expires_at, next_attempt_at FROM deliveries \
         WHERE status = 'pending' AND origin = $1 AND next_attempt_at <= $2 \
         ORDER BY next_attempt_at, id LIMIT $3"
    };
}
/// Due pending work of every origin not excluded, oldest due first.
macro_rules! scan_sql {
    () => {
        "SELECT id, origin, expires_at, next_attempt_at FROM deliveries \
         WHERE status = 'pending' AND next_attempt_at <= $1 AND origin <> ALL($2::text[]) \
         ORDER BY next_attempt_at, id LIMIT $3"
    };
}
/// Up to `fetch` pending deliveries due by `before`, oldest due first, of origins not in
/// `saturated`. With `lock`, each row returned is locked for this transaction, and rows another
/// transaction has locked (another host claiming them) are skipped.
///
/// Reading the due index from its head and skipping saturated origins costs as many rows as
/// those origins have due: with one busy target and a large backlog, every claim (and the
/// scheduler asks at every enqueue) would read the whole backlog. So when origins are
/// saturated, the origins that still have room are found first (from the kept counts) and, if
/// they are few, each one's oldest due work is read from its own index: a few seeks, whatever
/// the backlog.
async fn due_candidates<C: GenericClient>(
    c: &C,
    before: Millis,
    saturated: &HashSet<String>,
    fetch: i64,
    lock: bool,
) -> Result<Vec<Candidate>> {
    let excluded: Vec<String> = saturated.iter().cloned().collect();
    if !saturated.is_empty() {
        let open = open_origins(c, &excluded).await?;
        if open.len() <= ORIGIN_SEEKS {
            let sql = if lock {
                concat!(seek_sql!(), " FOR UPDATE SKIP LOCKED")
            } else {
                seek_sql!()
            };
            let mut all = Vec::new();
            for origin in &open {
                for r in rows(c, sql, &[origin, &before, &fetch]).await? {
                    all.push(read_candidate(&r)?);
                }
            }
            all.sort_by(|a, b| (a.due, &a.id).cmp(&(b.due, &b.id)));
            all.truncate(usize::try_from(fetch).unwrap_or(0));
            return Ok(all);
        }
    }
    let sql = if lock {
        concat!(scan_sql!(), " FOR UPDATE SKIP LOCKED")
    } else {
        scan_sql!()
    };
    rows(c, sql, &[&before, &excluded, &fetch])
        .await?
        .iter()
        .map(read_candidate)
        .collect()
}

/// Origins with pending work that are not in `excluded`, at most [`ORIGIN_SEEKS`] + 1.
///
/// Walked along `deliveries_origin_due` one origin at a time (a loose index scan: each step is
/// one probe for the next origin after the last), so the cost grows with the number of
/// origins walked, not with the backlog nor with the count deltas not folded yet.
async fn open_origins<C: GenericClient>(c: &C, excluded: &[String]) -> Result<Vec<String>> {
    rows(
        c,
        "WITH RECURSIVE walk(origin) AS ( \
             (SELECT origin FROM deliveries WHERE status = 'pending' ORDER BY origin LIMIT 1) \
             UNION ALL \
             SELECT (SELECT d.origin FROM deliveries d \
                     WHERE d.status = 'pending' AND d.origin > walk.origin \
                     ORDER BY d.origin LIMIT 1) \
             FROM walk WHERE walk.origin IS NOT NULL) \
         SELECT origin FROM walk \
         WHERE origin IS NOT NULL AND origin <> ALL($1::text[]) LIMIT $2",
        &[&excluded, &(ORIGIN_SEEKS as i64 + 1)],
    )
    .await?
    .iter()
    .map(|r| col(r, "origin"))
    .collect()
}

/// Fail up to `limit` pending deliveries whose `expires_at` has passed, whether or not they are
/// due (work waiting behind a paused target is not claimed, so the claim cannot expire it).
/// Rows another host holds right now are left for the next pass.
pub(crate) async fn expire_overdue(tx: &Tx<'_>, now: Millis, limit: u32) -> Result<u64> {
    let ids: Vec<String> = rows(
        tx,
        "SELECT id FROM deliveries WHERE status = 'pending' AND expires_at IS NOT NULL \
         AND expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED",
        &[&now, &i64::from(limit)],
    )
    .await?
    .iter()
    .map(|r| col(r, "id"))
    .collect::<Result<_>>()?;
    for id in &ids {
        expire(tx, id, DeliveryStatus::Pending, now).await?;
    }
    Ok(ids.len() as u64)
}

/// Fail a delivery as `expired` (`spoold_expire`, `functions/expire.sql`). The caller holds the row's
/// lock and has checked its status.
async fn expire(tx: &Tx<'_>, id: &str, from: DeliveryStatus, now: Millis) -> Result<()> {
    exec(
        tx,
        "SELECT spoold_expire($1, $2, $3)",
        &[&id, &from.as_str(), &now],
    )
    .await
    .map(drop)
}

/// Where a status change stands in its delivery's life, from a row returned by `RETURNING
/// log_seq, attempts` (among other columns).
fn step_of(r: &Row) -> Result<Step> {
    Ok(Step {
        seq: col(r, "log_seq")?,
        attempt: col(r, "attempts")?,
    })
}

/// Reserve and start in one statement: the scheduler's claim, sent at once. The row is locked
/// by the candidate query; `None` if it is somehow no longer pending.
async fn claim_one(
    tx: &Tx<'_>,
    id: &str,
    origin: &str,
    now: Millis,
    lease_until: Millis,
) -> Result<Option<Claimed>> {
    let Some(r) = row(
        tx,
        "UPDATE deliveries SET status = 'in_flight', attempts = attempts + 1, \
         claim_seq = claim_seq + 1, lease_until = $2, updated_at = $3, \
         log_seq = log_seq + 1 WHERE id = $1 AND status = 'pending' \
         RETURNING claim_seq, attempts, cycle, target_url, method, headers, body_kind, body, \
         mode, remote_id_pointer, sign_secret, log_seq",
        &[&id, &lease_until, &now],
    )
    .await?
    else {
        return Ok(None);
    };
    let step = step_of(&r)?;
    let started = started_row(&r)?;
    crate::changes::log(
        tx,
        id,
        Some(DeliveryStatus::Pending),
        DeliveryStatus::InFlight,
        step,
        now,
        "claimed",
        None,
    )
    .await?;
    started
        .into_claimed(tx, id, origin, now, lease_until)
        .await
        .map(Some)
}

/// The row a start returned (see [`StartedRow`]).
fn started_row(r: &Row) -> Result<StartedRow> {
    Ok(StartedRow {
        claim_seq: int(r, "claim_seq")?,
        attempt: int(r, "attempts")?,
        cycle: int(r, "cycle")?,
        target_url: col(r, "target_url")?,
        method: col(r, "method")?,
        headers: col(r, "headers")?,
        body_kind: col(r, "body_kind")?,
        body: col(r, "body")?,
        mode: col(r, "mode")?,
        remote_id_pointer: col(r, "remote_id_pointer")?,
        sign_secret: col(r, "sign_secret")?,
    })
}

/// One step of `spoold_steps` (see `functions/steps.sql`): what to record, what to start,
/// which origin to reserve for (from where); each part is skipped when `None`.
#[derive(Default)]
pub(crate) struct StepArgs<'a> {
    pub result: Option<&'a AttemptResult>,
    pub next: Option<&'a Reservation>,
    pub origin: Option<&'a str>,
    pub from: Option<Millis>,
    /// What the reservation part finds is taken (an at-least-once delivery started at once);
    /// only without `next`.
    pub take: bool,
}

/// `spoold_steps` over `steps`, in order, one row each (`o_n`); the lease is the host's. Read
/// a row's parts with [`applied`], [`started`] and [`reserved`].
pub(crate) fn steps(steps: &[StepArgs<'_>], lease_ms: i64) -> Call {
    fn column<T: ToSql + Sync + Send + 'static>(
        steps: &[StepArgs<'_>],
        f: impl Fn(&StepArgs<'_>) -> T,
    ) -> Box<dyn ToSql + Sync + Send> {
        Box::new(steps.iter().map(f).collect::<Vec<T>>())
    }
    let args = |s: &StepArgs<'_>| s.result.map(|r| disposition_args(r.disposition));
    Call {
        sql: "SELECT * FROM spoold_steps($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
              $13, $14, $15, $16, $17)",
        params: vec![
            column(steps, |s| s.result.map(|r| r.id.clone())),
            column(steps, |s| s.result.map(|r| i64::from(r.claim_seq))),
            column(steps, |s| args(s).map(|a| a.0)),
            column(steps, |s| args(s).map(|a| a.1)),
            column(steps, |s| args(s).map(|a| a.2)),
            column(steps, |s| {
                s.result.and_then(|r| r.http_status.map(i64::from))
            }),
            column(steps, |s| s.result.and_then(|r| r.error_code.clone())),
            column(steps, |s| {
                s.result.and_then(|r| r.error.as_deref().map(clip_error))
            }),
            column(steps, |s| s.result.map(|r| r.duration_ms)),
            column(steps, |s| s.result.and_then(|r| r.remote_id.clone())),
            Box::new(DEFAULT_OBSERVATION_WINDOW_MS),
            column(steps, |s| s.next.map(|n| n.id.clone())),
            column(steps, |s| s.next.map(|n| i64::from(n.claim_seq))),
            column(steps, |s| s.origin.map(str::to_owned)),
            Box::new(lease_ms),
            column(steps, |s| s.from),
            column(steps, |s| s.take),
        ],
    }
}

/// Record an attempt's outcome (always, on its attempt row) and apply it to the delivery while
/// the claim is current (in flight under `claim_seq`); otherwise the result is `Fenced`. Read
/// its answer with [`applied`].
pub(crate) fn complete(result: &AttemptResult) -> Call {
    let step = StepArgs {
        result: Some(result),
        ..StepArgs::default()
    };
    steps(&[step], 0)
}

/// A disposition as `spoold_complete` takes it: its name, the retry delay and the first check
/// of `unknown` (0 where they do not apply).
pub(crate) fn disposition_args(disposition: Disposition) -> (&'static str, i64, i64) {
    match disposition {
        Disposition::Succeeded => ("succeeded", 0, 0),
        Disposition::Retry { delay_ms } => ("retry", delay_ms, 0),
        Disposition::Failed => ("failed", 0, 0),
        Disposition::Interrupted => ("interrupted", 0, 0),
        Disposition::Unknown { check_in_ms } => ("unknown", 0, check_in_ms),
    }
}

/// What [`complete`] did: the new status, or `Fenced` (NULL).
pub(crate) fn applied(rows: &[Row]) -> Result<Applied> {
    let status: Option<String> = col(single(rows)?, "o_applied")?;
    match status {
        Some(text) => Ok(Applied::Now(parse_status(&text)?)),
        None => Ok(Applied::Fenced),
    }
}

/// Reserve the oldest due delivery of `origin`, if there is one (expired ones met on the way
/// are failed as `expired`): in flight under a new claim, but no attempt started. A delivery
/// another host is taking at the same moment is skipped. The search starts at the due time
/// `from` when given. Read its answer with [`reserved`].
pub(crate) fn reserve_next(origin: &str, lease_ms: i64, from: Option<Millis>) -> Call {
    let step = StepArgs {
        origin: Some(origin),
        from,
        ..StepArgs::default()
    };
    steps(&[step], lease_ms)
}

/// The reservation a step made ([`reserve_next`], or a step that records a result and goes
/// on), if any, and the due time of its delivery.
pub(crate) fn reserved(rows: &[Row], origin: &str) -> Result<Option<(Reservation, Millis)>> {
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    let Some(id) = col::<Option<String>>(r, "o_id")? else {
        return Ok(None);
    };
    let reservation = Reservation {
        id,
        claim_seq: int(r, "o_claim_seq")?,
        origin: origin.to_owned(),
    };
    Ok(Some((reservation, col(r, "o_due")?)))
}

/// Start the attempt of a reservation, if it is still current and not expired: the check and
/// the start are one step in the store (under the row's lock), so a cancel or a deadline that
/// came first wins (`spoold_start`; read its answer with [`started`]).
pub(crate) fn start(reservation: &Reservation, lease_ms: i64) -> Call {
    let step = StepArgs {
        next: Some(reservation),
        ..StepArgs::default()
    };
    steps(&[step], lease_ms)
}

/// What [`start`] found; the request to send when it started the attempt.
pub(crate) fn started(
    rows: &[Row],
    reservation: &Reservation,
    lease_ms: i64,
) -> Result<StartOutcome> {
    let r = single(rows)?;
    let outcome: String = col(r, "o_outcome")?;
    match outcome.as_str() {
        "started" => started_attempt(r, reservation.clone(), lease_ms).map(StartOutcome::Started),
        "not_current" => Ok(StartOutcome::NotCurrent),
        "expired" => Ok(StartOutcome::Expired),
        other => Err(StoreError::Database(format!(
            "spoold_start answered {other:?}"
        ))),
    }
}

/// The attempt a step started (`o_outcome` 'started'): the request to send.
fn started_attempt(r: &Row, claim: Reservation, lease_ms: i64) -> Result<Claimed> {
    let now: Millis = col(r, "o_now")?;
    let headers: String = col(r, "o_headers")?;
    let mode: String = col(r, "o_mode")?;
    Ok(Claimed {
        id: claim.id,
        claim_seq: claim.claim_seq,
        attempt: int(r, "o_attempts")?,
        target_url: col(r, "o_target_url")?,
        origin: claim.origin,
        method: col(r, "o_method")?,
        headers: decode_headers(&headers)?,
        body: decode_body(col(r, "o_body_kind")?, col(r, "o_body")?),
        started_at: now,
        lease_until: now + lease_ms,
        mode: parse_mode(&mode)?,
        remote_id_pointer: col(r, "o_remote_id_pointer")?,
        sign_secret: col(r, "o_sign_secret")?,
    })
}

/// What a step that takes (`StepArgs::take`) took, and the due time of its delivery: the
/// reservation part's delivery, started when `o_outcome` says so (at least once), otherwise
/// only reserved.
pub(crate) fn taken(rows: &[Row], origin: &str, lease_ms: i64) -> Result<Option<(Taken, Millis)>> {
    let Some((reservation, due)) = reserved(rows, origin)? else {
        return Ok(None);
    };
    let r = single(rows)?;
    let outcome: Option<String> = col(r, "o_outcome")?;
    let taken = match outcome.as_deref() {
        Some("started") => Taken::Started(started_attempt(r, reservation, lease_ms)?),
        None => Taken::Reserved(reservation),
        Some(other) => {
            return Err(StoreError::Database(format!(
                "spoold_steps answered {other:?} for a take"
            )))
        }
    };
    Ok(Some((taken, due)))
}

/// The one row a step function returns.
fn single(rows: &[Row]) -> Result<&Row> {
    match rows {
        [r] => Ok(r),
        _ => Err(StoreError::Database(format!(
            "a step returned {} rows, expected one",
            rows.len()
        ))),
    }
}

/// At start-up, when the owner of every claim is known to be dead: every in-flight delivery
/// is made pending again, due at once. A started attempt is recorded as interrupted
/// (`daemon_restart`, not charged); a reservation is simply released.
///
/// On a shared database this takes back the claims of every host, running or not; a claim
/// another transaction holds at this moment (its result being recorded) is left to it.
pub(crate) async fn recover(tx: &Tx<'_>, now: Millis, check_in_ms: i64) -> Result<Reclaimed> {
    let ids = in_flight_with_lease_until(tx, Millis::MAX).await?;
    take_back(tx, &ids, now, "daemon_restart", check_in_ms).await
}

/// Renew the leases of `live` claims (held by attempts running in this process), then take back
/// every other claim whose lease has run out (`lease_expired`), as [`recover`] does. Both in one
/// step on one clock (the database's), so a step of a wall clock cannot make a live attempt look
/// abandoned.
pub(crate) async fn renew_and_reclaim(
    tx: &Tx<'_>,
    live: &[(String, u32)],
    now: Millis,
    lease_ms: i64,
    check_in_ms: i64,
) -> Result<Reclaimed> {
    if !live.is_empty() {
        let ids: Vec<String> = live.iter().map(|(id, _)| id.clone()).collect();
        let seqs: Vec<i64> = live.iter().map(|(_, seq)| i64::from(*seq)).collect();
        // Locked in id order first: the UPDATE below then waits for nothing.
        rows(
            tx,
            "SELECT id FROM deliveries WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE",
            &[&ids],
        )
        .await?;
        exec(
            tx,
            "UPDATE deliveries AS d SET lease_until = $3 \
             FROM unnest($1::text[], $2::bigint[]) AS l (id, claim_seq) \
             WHERE d.id = l.id AND d.claim_seq = l.claim_seq AND d.status = 'in_flight'",
            &[&ids, &seqs, &(now + lease_ms)],
        )
        .await?;
    }
    let ids = in_flight_with_lease_until(tx, now).await?;
    take_back(tx, &ids, now, "lease_expired", check_in_ms).await
}

/// A claim to take back: id, claim sequence, mode.
type Lapsed = (String, u32, String);

/// Claims whose lease ends at or before `cutoff`, locked; claims another transaction holds
/// right now (a result being recorded, another host taking it back) are skipped.
async fn in_flight_with_lease_until(tx: &Tx<'_>, cutoff: Millis) -> Result<Vec<Lapsed>> {
    rows(
        tx,
        "SELECT id, claim_seq, mode FROM deliveries \
         WHERE status = 'in_flight' AND lease_until <= $1 ORDER BY id FOR UPDATE SKIP LOCKED",
        &[&cutoff],
    )
    .await?
    .iter()
    .map(|r| Ok((col(r, "id")?, int(r, "claim_seq")?, col(r, "mode")?)))
    .collect()
}

/// Take back claims whose owner is gone. A reservation is released; a started attempt is
/// interrupted: sent again (at least once), or, at most once, `unknown` — its request may have
/// reached the target, so it is never resent by a restart.
async fn take_back(
    tx: &Tx<'_>,
    claims: &[Lapsed],
    now: Millis,
    code: &str,
    check_in_ms: i64,
) -> Result<Reclaimed> {
    let mut taken = Reclaimed::default();
    for (id, claim_seq, mode) in claims {
        if delivery_changes::release(tx, id, *claim_seq, now, code).await? {
            taken.released += 1;
            continue;
        }
        let mode = parse_mode(mode)?;
        match mode {
            Mode::AtLeastOnce => taken.interrupted += 1,
            Mode::AtMostOnce => taken.unknown += 1,
        }
        let result = AttemptResult::taken_back(id.clone(), *claim_seq, mode, code, check_in_ms);
        let call = complete(&result);
        rows(tx, call.sql, &call.params()).await?;
    }
    Ok(taken)
}

/// `unknown` deliveries whose next check is due at `now`, soonest first.
pub(crate) async fn due_checks<C: GenericClient>(
    c: &C,
    now: Millis,
    limit: u32,
) -> Result<Vec<Delivery>> {
    rows(
        c,
        concat!(
            "SELECT ",
            list_columns!(),
            " FROM deliveries WHERE status = 'unknown' AND check_at <= $1 \
             ORDER BY check_at, id LIMIT $2"
        ),
        &[&now, &i64::from(limit)],
    )
    .await?
    .iter()
    .map(|r| row_to_delivery(r, false))
    .collect()
}

/// When the next check of an `unknown` delivery is due.
/// How many deliveries waiting to be sent name `secret` to sign them.
pub(crate) async fn waiting_on_secret<C: GenericClient>(c: &C, secret: &str) -> Result<u64> {
    let n: i64 = row(
        c,
        "SELECT COUNT(*) AS n FROM deliveries \
         WHERE status IN ('pending', 'in_flight') AND sign_secret = $1",
        &[&secret],
    )
    .await?
    .map(|r| col(&r, "n"))
    .transpose()?
    .unwrap_or(0);
    Ok(n.max(0) as u64)
}

pub(crate) async fn next_check<C: GenericClient>(c: &C) -> Result<Option<Millis>> {
    row(
        c,
        "SELECT check_at FROM deliveries \
         WHERE status = 'unknown' AND check_at IS NOT NULL ORDER BY check_at LIMIT 1",
        &[],
    )
    .await?
    .map(|r| col(&r, "check_at"))
    .transpose()
}

/// The reconciliation checks of one delivery, oldest first; `None` if the delivery is unknown.
pub(crate) async fn checks<C: GenericClient>(c: &C, id: &str) -> Result<Option<Vec<Check>>> {
    if !exists(c, id).await? {
        return Ok(None);
    }
    rows(
        c,
        "SELECT at, http_status, matches, error_code, error, duration_ms FROM checks \
         WHERE delivery_id = $1 ORDER BY seq",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(Check {
            at: col(r, "at")?,
            http_status: opt_int(r, "http_status")?,
            matches: opt_int(r, "matches")?,
            error_code: col(r, "error_code")?,
            error: col(r, "error")?,
            duration_ms: col(r, "duration_ms")?,
        })
    })
    .collect::<Result<_>>()
    .map(Some)
}

async fn exists<C: GenericClient>(c: &C, id: &str) -> Result<bool> {
    Ok(row(c, "SELECT 1 FROM deliveries WHERE id = $1", &[&id])
        .await?
        .is_some())
}

/// Remove up to `limit` finished deliveries last updated at or before `cutoff`, with their
/// attempts, transitions, checks and idempotency keys. Pending and in-flight work is never
/// touched; rows another transaction holds right now are left for the next pass.
pub(crate) async fn purge_finished(tx: &Tx<'_>, cutoff: Millis, limit: u32) -> Result<u64> {
    let found = rows(
        tx,
        "SELECT id, idempotency_key FROM deliveries \
         WHERE status IN ('succeeded', 'failed', 'canceled') AND updated_at <= $1 \
         ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED",
        &[&cutoff, &i64::from(limit)],
    )
    .await?;
    if found.is_empty() {
        return Ok(0);
    }
    let mut ids: Vec<String> = Vec::with_capacity(found.len());
    let mut keys: Vec<String> = Vec::new();
    let mut keyed: Vec<String> = Vec::new();
    for r in &found {
        let id: String = col(r, "id")?;
        if let Some(key) = col::<Option<String>>(r, "idempotency_key")? {
            keys.push(key);
            keyed.push(id.clone());
        }
        ids.push(id);
    }
    for sql in [
        "DELETE FROM attempts WHERE delivery_id = ANY($1::text[])",
        "DELETE FROM transitions WHERE delivery_id = ANY($1::text[])",
        "DELETE FROM checks WHERE delivery_id = ANY($1::text[])",
    ] {
        exec(tx, sql, &[&ids]).await?;
    }
    if !keys.is_empty() {
        exec(
            tx,
            "DELETE FROM idempotency_keys AS k \
             USING unnest($1::text[], $2::text[]) AS p (key, delivery_id) \
             WHERE k.key = p.key AND k.delivery_id = p.delivery_id",
            &[&keys, &keyed],
        )
        .await?;
    }
    exec(
        tx,
        "DELETE FROM deliveries WHERE id = ANY($1::text[])",
        &[&ids],
    )
    .await?;
    Ok(ids.len() as u64)
}

pub(crate) async fn get<C: GenericClient>(c: &C, id: &str) -> Result<Option<Delivery>> {
    row(
        c,
        concat!("SELECT ", full_columns!(), " FROM deliveries WHERE id = $1"),
        &[&id],
    )
    .await?
    .map(|r| row_to_delivery(&r, true))
    .transpose()
}

impl delivery_changes::DeliveryRows for Tx<'_> {
    async fn delivery_for_update(&self, id: &str) -> Result<Option<Delivery>> {
        row(
            self,
            concat!(
                "SELECT ",
                full_columns!(),
                " FROM deliveries WHERE id = $1 FOR UPDATE"
            ),
            &[&id],
        )
        .await?
        .map(|r| row_to_delivery(&r, true))
        .transpose()
    }

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>> {
        get(self, id).await
    }
}

/// Oldest first (ids are time-ordered); `after` is the id of the last row of the previous page.
pub(crate) async fn list<C: GenericClient>(
    c: &C,
    filter: &ListFilter,
    limit: u32,
    after: Option<&str>,
) -> Result<Page> {
    let status = filter.status.map(DeliveryStatus::as_str);
    let fetch = i64::from(limit) + 1;
    // Only the parameters a query uses are sent (PostgreSQL must know each one's type).
    let mut conditions: Vec<(&str, &(dyn tokio_postgres::types::ToSql + Sync))> = Vec::new();
    if let Some(status) = &status {
        conditions.push(("status =", status));
    }
    if let Some(origin) = &filter.origin {
        conditions.push(("origin =", origin));
    }
    let url = filter.url.as_deref().map(crate::model::UrlMatch::new);
    if let Some(since) = &filter.created_after {
        conditions.push(("created_at >=", since));
    }
    if let Some(until) = &filter.created_before {
        conditions.push(("created_at <", until));
    }
    if let Some(code) = &filter.last_error_code {
        conditions.push(("last_error_code =", code));
    }
    if let Some(after) = &after {
        let op = if filter.newest_first { "id <" } else { "id >" };
        conditions.push((op, after));
    }
    let mut sql = concat!("SELECT ", list_columns!(), " FROM deliveries WHERE TRUE").to_owned();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = Vec::new();
    for (condition, value) in conditions {
        params.push(value);
        sql.push_str(&format!(" AND {condition} ${}", params.len()));
    }
    if let Some(url) = &url {
        let n = params.len();
        params.extend([
            &url.url as &(dyn tokio_postgres::types::ToSql + Sync),
            &url.prefix_len,
            &url.with_query,
            &url.with_fragment,
        ]);
        sql.push_str(&format!(
            " AND (target_url = ${} OR substr(target_url, 1, ${}::bigint::int) IN (${}, ${}))",
            n + 1,
            n + 2,
            n + 3,
            n + 4
        ));
    }
    params.push(&fetch);
    sql.push_str(&format!(
        " ORDER BY id{} LIMIT ${}",
        if filter.newest_first { " DESC" } else { "" },
        params.len()
    ));
    let mut deliveries = rows(c, &sql, &params)
        .await?
        .iter()
        .map(|r| row_to_delivery(r, false))
        .collect::<Result<Vec<_>>>()?;
    let next_cursor = if deliveries.len() > limit as usize {
        deliveries.truncate(limit as usize);
        deliveries.last().map(|d| d.id.clone())
    } else {
        None
    };
    Ok(Page {
        deliveries,
        next_cursor,
    })
}

/// The attempts of one delivery, oldest first; `None` if the delivery is unknown.
pub(crate) async fn attempts<C: GenericClient>(c: &C, id: &str) -> Result<Option<Vec<Attempt>>> {
    if !exists(c, id).await? {
        return Ok(None);
    }
    rows(
        c,
        "SELECT cycle, number, started_at, finished_at, outcome, http_status, error_code, error, \
         duration_ms FROM attempts WHERE delivery_id = $1 ORDER BY seq",
        &[&id],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(Attempt {
            cycle: int(r, "cycle")?,
            number: int(r, "number")?,
            started_at: col(r, "started_at")?,
            finished_at: col(r, "finished_at")?,
            outcome: col(r, "outcome")?,
            http_status: opt_int(r, "http_status")?,
            error_code: col(r, "error_code")?,
            error: col(r, "error")?,
            duration_ms: col(r, "duration_ms")?,
        })
    })
    .collect::<Result<_>>()
    .map(Some)
}

/// Distinct URLs of parked deliveries (see [`crate::Store::parked_urls`]).
pub(crate) async fn parked_urls<C: GenericClient>(c: &C, limit: u32) -> Result<Vec<String>> {
    rows(
        c,
        "SELECT DISTINCT target_url FROM deliveries \
         WHERE status = 'pending' AND next_attempt_at >= $1 LIMIT $2",
        &[&crate::model::PARKED, &i64::from(limit)],
    )
    .await?
    .iter()
    .map(|r| col(r, "target_url"))
    .collect()
}

/// The earliest due time of pending work whose origin is not saturated.
pub(crate) async fn next_due<C: GenericClient>(
    c: &C,
    saturated: &[String],
) -> Result<Option<Millis>> {
    let saturated: HashSet<String> = saturated.iter().cloned().collect();
    Ok(due_candidates(c, Millis::MAX, &saturated, 1, false)
        .await?
        .first()
        .map(|c| c.due))
}

/// Counts by status (from the kept deltas: no deliveries are counted here), the oldest due
/// time, and the database size the caller measured.
pub(crate) async fn stats<C: GenericClient>(c: &C, now: Millis, db_bytes: u64) -> Result<Stats> {
    let by_status = rows(
        c,
        "SELECT status, SUM(n)::bigint AS n FROM delivery_count_deltas \
         GROUP BY status HAVING SUM(n) > 0",
        &[],
    )
    .await?
    .iter()
    .map(|r| Ok((col::<String>(r, "status")?, int::<u64>(r, "n")?)))
    .collect::<Result<Vec<_>>>()?;
    let oldest_due_at = row(
        c,
        "SELECT next_attempt_at FROM deliveries WHERE status = 'pending' \
         AND next_attempt_at <= $1 ORDER BY next_attempt_at LIMIT 1",
        &[&now],
    )
    .await?
    .map(|r| col(&r, "next_attempt_at"))
    .transpose()?;
    Ok(Stats {
        by_status: by_status
            .into_iter()
            .filter_map(|(s, n)| s.parse().ok().map(|st| (st, n)))
            .collect(),
        oldest_due_at,
        db_bytes,
    })
}

/// Origins with pending or in-flight work, in origin order after `after`, at most `limit`:
/// from the kept deltas.
pub(crate) async fn origins<C: GenericClient>(
    c: &C,
    limit: u32,
    after: Option<&str>,
) -> Result<Vec<OriginCounts>> {
    rows(
        c,
        "SELECT origin, \
                COALESCE(SUM(n) FILTER (WHERE status = 'pending'), 0)::bigint AS pending, \
                COALESCE(SUM(n) FILTER (WHERE status = 'in_flight'), 0)::bigint AS in_flight \
         FROM delivery_count_deltas \
         WHERE origin > $1 AND status IN ('pending', 'in_flight') \
         GROUP BY origin HAVING SUM(n) > 0 ORDER BY origin LIMIT $2",
        &[&after.unwrap_or(""), &i64::from(limit)],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(OriginCounts {
            origin: col(r, "origin")?,
            pending: int(r, "pending")?,
            in_flight: int(r, "in_flight")?,
        })
    })
    .collect()
}

fn row_to_delivery(r: &Row, full: bool) -> Result<Delivery> {
    let status: String = col(r, "status")?;
    let mode: String = col(r, "mode")?;
    let (headers, body) = if full {
        let headers: String = col(r, "headers")?;
        (
            Some(decode_headers(&headers)?),
            Some(decode_body(col(r, "body_kind")?, col(r, "body")?)),
        )
    } else {
        (None, None)
    };
    Ok(Delivery {
        id: col(r, "id")?,
        idempotency_key: col(r, "idempotency_key")?,
        target_url: col(r, "target_url")?,
        origin: col(r, "origin")?,
        method: col(r, "method")?,
        status: parse_status(&status)?,
        attempts: int(r, "attempts")?,
        uncharged: int(r, "uncharged")?,
        max_attempts: int(r, "max_attempts")?,
        cycle: int(r, "cycle")?,
        last_error: col(r, "last_error")?,
        last_error_code: col(r, "last_error_code")?,
        last_response_code: opt_int(r, "last_response_code")?,
        created_at: col(r, "created_at")?,
        updated_at: col(r, "updated_at")?,
        next_attempt_at: col(r, "next_attempt_at")?,
        not_before: col(r, "not_before")?,
        expires_at: col(r, "expires_at")?,
        lease_until: col(r, "lease_until")?,
        mode: parse_mode(&mode)?,
        fingerprint: col(r, "fingerprint")?,
        reconcile: col(r, "reconcile")?,
        remote_id_pointer: col(r, "remote_id_pointer")?,
        observation_window_ms: col(r, "window_ms")?,
        remote_id: col(r, "remote_id")?,
        unknown_since: col(r, "unknown_since")?,
        review_at: col(r, "review_at")?,
        check_at: col(r, "check_at")?,
        checks: int(r, "checks")?,
        sign_secret: col(r, "sign_secret")?,
        headers,
        body,
    })
}
