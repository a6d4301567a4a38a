//! The SQL of deliveries on SQLite (what is the same in both dialects is in
//! `delivery_changes.rs`). Write functions run on the writer thread inside a savepoint; read
//! functions run on a reader connection. All state changes follow the rules in `model`: claims
//! are fenced by `claim_seq`, terminal rows are never reopened except by retry.

use std::collections::HashSet;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::map_err;
use crate::changes;
use crate::claim::{self, Candidate, ClaimIo};
use crate::delivery_changes::{self, StartedRow, Step};
use crate::error::{Result, StoreError};
use crate::model::{
    clip_error, Applied, Attempt, AttemptOutcome, AttemptResult, Capacity, Check, ClaimBatch,
    ClaimPass, Claimed, Delivery, DeliveryStatus, InsertOutcome, ListFilter, Millis, Mode,
    NewDelivery, OriginCounts, Page, Reclaimed, Reservation, StartOutcome, Stats, Taken,
    DEFAULT_OBSERVATION_WINDOW_MS,
};
use crate::sql::ready;
use crate::stored::{
    decode_body, decode_headers, encode_body, encode_headers, full_columns, list_columns,
    parse_mode,
};
use crate::transitions::{Completion, InFlight};

// Queries over pending, in-flight or finished work name their partial index (`INDEXED BY`):
// without statistics SQLite prefers the equality on `status` in `deliveries_status` and then
// sorts every pending row, which turns a claim into a full scan of the backlog. Naming the
// index keeps claims O(log n) however large the backlog, and fails loudly if it stops applying.

const LIST_COLUMNS: &str = list_columns!();
/// The number of [`LIST_COLUMNS`]: a full row's headers and body follow them.
const LIST_WIDTH: usize = 30;
/// Columns of a full delivery row.
const FULL_COLUMNS: &str = full_columns!();

pub(crate) fn insert(
    conn: &Connection,
    new: &NewDelivery,
    now: Millis,
    max_db_bytes: u64,
) -> Result<InsertOutcome> {
    if let Some(key) = &new.idempotency_key {
        let known: Option<(String, Vec<u8>)> = conn
            .prepare_cached("SELECT delivery_id, fingerprint FROM idempotency_keys WHERE key = ?1")
            .and_then(|mut st| {
                st.query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(map_err)?;
        if let Some((id, fingerprint)) = known {
            if !new.same_request(&fingerprint) {
                return Ok(InsertOutcome::Conflict { existing_id: id });
            }
            return match get(conn, &id)? {
                Some(existing) => Ok(InsertOutcome::Existing(existing)),
                None => Err(StoreError::Database(format!(
                    "idempotency key refers to missing delivery {id}"
                ))),
            };
        }
    }
    // Judged after the key: a retry of a create whose deadline has passed since finds the
    // original above.
    if new.expires_at.is_some_and(|exp| exp <= now) {
        return Ok(InsertOutcome::AlreadyExpired);
    }
    if max_db_bytes > 0 {
        let used = db_bytes(conn)?;
        if used >= max_db_bytes {
            return Ok(InsertOutcome::Full {
                db_bytes: used,
                limit: max_db_bytes,
            });
        }
    }
    let (body_kind, body) = encode_body(&new.body);
    let headers = encode_headers(&new.headers)?;
    let due = new.not_before.map_or(now, |nb| nb.max(now));
    let expires_at = new
        .expires_at
        .or_else(|| new.retry_window_ms.map(|w| due + w));
    conn.prepare_cached(
        "INSERT INTO deliveries (id, idempotency_key, target_url, origin, method, headers, \
         body_kind, body, status, max_attempts, created_at, updated_at, next_attempt_at, \
         not_before, expires_at, log_seq, mode, fingerprint, reconcile, remote_id_pointer, \
         window_ms, sign_secret) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'pending', ?9, ?10, ?10, ?11, ?12, ?13, 1, ?14, \
         ?15, ?16, ?17, ?18, ?19)",
    )
    .and_then(|mut st| {
        st.execute(params![
            new.id,
            new.idempotency_key,
            new.target_url,
            new.origin,
            new.method,
            headers,
            body_kind,
            body,
            new.max_attempts,
            now,
            due,
            new.not_before,
            expires_at,
            new.mode.as_str(),
            new.fingerprint,
            new.reconcile,
            new.remote_id_pointer,
            new.observation_window_ms,
            new.sign_secret,
        ])
    })
    .map_err(map_err)?;
    if let Some(key) = &new.idempotency_key {
        conn.prepare_cached(
            "INSERT INTO idempotency_keys (key, delivery_id, fingerprint) VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut st| st.execute(params![key, new.id, new.request_digest]))
        .map_err(map_err)?;
    }
    let first = Step { seq: 1, attempt: 0 };
    ready(changes::log(
        conn,
        &new.id,
        None,
        DeliveryStatus::Pending,
        first,
        now,
        "created",
        None,
    ))?;
    // The row is exactly what was inserted: build it instead of reading it back.
    Ok(InsertOutcome::Created(Delivery::created(
        new, now, due, expires_at,
    )))
}

pub(crate) fn claim(
    conn: &Connection,
    now: Millis,
    limit: u32,
    capacity: Capacity,
    lease_ms: i64,
) -> Result<ClaimBatch> {
    let mut io = ClaimStatements {
        conn,
        now,
        lease_until: now + lease_ms,
    };
    ready(claim::run(ClaimPass::new(capacity, limit), now, &mut io))
}

/// A claim pass's statements, inside the writer's transaction.
struct ClaimStatements<'c> {
    conn: &'c Connection,
    now: Millis,
    lease_until: Millis,
}

impl ClaimIo for ClaimStatements<'_> {
    async fn candidates(
        &mut self,
        saturated: &HashSet<String>,
        fetch: i64,
    ) -> Result<Vec<Candidate>> {
        due_candidates(self.conn, self.now, saturated, fetch)
    }

    async fn expire(&mut self, c: &Candidate) -> Result<()> {
        expire(self.conn, &c.id, DeliveryStatus::Pending, self.now)
    }

    async fn claim(&mut self, c: &Candidate) -> Result<Option<Claimed>> {
        claim_one(self.conn, &c.id, &c.origin, self.now, self.lease_until).map(Some)
    }
}

fn read_candidate(r: &Row<'_>) -> rusqlite::Result<Candidate> {
    Ok(Candidate {
        id: r.get(0)?,
        origin: r.get(1)?,
        expires_at: r.get(2)?,
        due: r.get(3)?,
    })
}

/// Above this many unsaturated origins with pending work, the due index is read from its head
/// rather than origin by origin.
const ORIGIN_SEEKS: usize = 64;

/// Up to `fetch` pending deliveries due by `before`, oldest due first, of origins not in
/// `saturated`.
///
/// Reading the due index from its head and skipping saturated origins costs as many rows as
/// those origins have due: with one busy target and a large backlog, every claim (and the
/// scheduler asks at every enqueue) would read the whole backlog. So when origins are
/// saturated, the origins that still have room are found first (from the kept counts) and, if
/// they are few, each one's oldest due work is read from its own index: a few seeks, whatever
/// the backlog.
fn due_candidates(
    conn: &Connection,
    before: Millis,
    saturated: &HashSet<String>,
    fetch: i64,
) -> Result<Vec<Candidate>> {
    let excluded = serde_json::to_string(&saturated.iter().collect::<Vec<_>>())
        .map_err(|e| StoreError::Database(e.to_string()))?;
    if !saturated.is_empty() {
        let open = open_origins(conn, &excluded)?;
        if open.len() <= ORIGIN_SEEKS {
            let mut all = Vec::new();
            for origin in &open {
                let mut rows: Vec<Candidate> = conn
                    .prepare_cached(
                        "SELECT id, origin, expires_at, next_attempt_at \
                         FROM deliveries INDEXED BY deliveries_origin_due \
                         WHERE status = 'pending' AND origin = ?1 AND next_attempt_at <= ?2 \
                         ORDER BY next_attempt_at LIMIT ?3",
                    )
                    .and_then(|mut st| {
                        st.query_map(params![origin, before, fetch], read_candidate)?
                            .collect()
                    })
                    .map_err(map_err)?;
                all.append(&mut rows);
            }
            all.sort_by_key(|c| c.due);
            all.truncate(fetch.max(0) as usize);
            return Ok(all);
        }
    }
    conn.prepare_cached(
        "SELECT id, origin, expires_at, next_attempt_at FROM deliveries INDEXED BY deliveries_due \
         WHERE status = 'pending' AND next_attempt_at <= ?1 \
           AND origin NOT IN (SELECT value FROM json_each(?2)) \
         ORDER BY next_attempt_at LIMIT ?3",
    )
    .and_then(|mut st| {
        st.query_map(params![before, excluded, fetch], read_candidate)?
            .collect()
    })
    .map_err(map_err)
}

/// Origins with pending work that are not in `excluded` (a JSON array), at most
/// [`ORIGIN_SEEKS`] + 1: from the kept counts, not from the deliveries.
fn open_origins(conn: &Connection, excluded: &str) -> Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT origin FROM origin_counts WHERE status = 'pending' AND n > 0 \
         AND origin NOT IN (SELECT value FROM json_each(?1)) LIMIT ?2",
    )
    .and_then(|mut st| {
        st.query_map(params![excluded, ORIGIN_SEEKS as i64 + 1], |r| r.get(0))?
            .collect()
    })
    .map_err(map_err)
}

/// Fail up to `limit` pending deliveries whose `expires_at` has passed, whether or not they are
/// due (work waiting behind a paused target is not claimed, so the claim cannot expire it).
pub(crate) fn expire_overdue(conn: &Connection, now: Millis, limit: u32) -> Result<u64> {
    let ids: Vec<String> = conn
        .prepare_cached(
            "SELECT id FROM deliveries INDEXED BY deliveries_expiry WHERE status = 'pending' AND expires_at IS NOT NULL \
             AND expires_at <= ?1 ORDER BY expires_at LIMIT ?2",
        )
        .and_then(|mut st| st.query_map(params![now, limit], |r| r.get(0))?.collect())
        .map_err(map_err)?;
    for id in &ids {
        expire(conn, id, DeliveryStatus::Pending, now)?;
    }
    Ok(ids.len() as u64)
}

fn expire(conn: &Connection, id: &str, from: DeliveryStatus, now: Millis) -> Result<()> {
    let step = conn
        .prepare_cached(
            "UPDATE deliveries SET status = 'failed', last_error_code = 'expired', \
             last_error = 'expired before the next attempt could start', next_attempt_at = NULL, \
             lease_until = NULL, updated_at = ?2, log_seq = log_seq + 1 WHERE id = ?1 \
             RETURNING log_seq, attempts",
        )
        .and_then(|mut st| st.query_row(params![id, now], |r| step_at(r, 0)))
        .map_err(map_err)?;
    ready(changes::log(
        conn,
        id,
        Some(from),
        DeliveryStatus::Failed,
        step,
        now,
        "expired",
        None,
    ))
}

/// Where a status change stands in its delivery's life, from the columns `first` and `first +
/// 1` of a row returned by `RETURNING log_seq, attempts`.
fn step_at(r: &Row<'_>, first: usize) -> rusqlite::Result<Step> {
    Ok(Step {
        seq: r.get(first)?,
        attempt: r.get(first + 1)?,
    })
}

/// Whether the attempt of claim `claim_seq` has started (its attempt row exists).
fn started(conn: &Connection, id: &str, claim_seq: u32) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM attempts WHERE delivery_id = ?1 AND seq = ?2")
        .and_then(|mut st| st.exists(params![id, claim_seq]))
        .map_err(map_err)
}

/// Reserve and start in one statement: the scheduler's claim, sent at once.
fn claim_one(
    conn: &Connection,
    id: &str,
    origin: &str,
    now: Millis,
    lease_until: Millis,
) -> Result<Claimed> {
    let row = conn
        .prepare_cached(
            "UPDATE deliveries SET status = 'in_flight', attempts = attempts + 1, \
             claim_seq = claim_seq + 1, lease_until = ?2, updated_at = ?3, \
             log_seq = log_seq + 1 WHERE id = ?1 \
             RETURNING claim_seq, attempts, cycle, target_url, method, headers, body_kind, body, \
             mode, remote_id_pointer, sign_secret, log_seq",
        )
        .and_then(|mut st| {
            st.query_row(params![id, lease_until, now], |r| {
                Ok((started_row(r)?, r.get::<_, u32>(11)?))
            })
        })
        .map_err(map_err)?;
    let (row, seq) = row;
    let step = Step {
        seq: i64::from(seq),
        attempt: i64::from(row.attempt),
    };
    ready(changes::log(
        conn,
        id,
        Some(DeliveryStatus::Pending),
        DeliveryStatus::InFlight,
        step,
        now,
        "claimed",
        None,
    ))?;
    ready(row.into_claimed(conn, id, origin, now, lease_until))
}

/// The row a start returned, from its first column (see [`StartedRow`]).
fn started_row(r: &Row<'_>) -> rusqlite::Result<StartedRow> {
    Ok(StartedRow {
        claim_seq: r.get(0)?,
        attempt: r.get(1)?,
        cycle: r.get(2)?,
        target_url: r.get(3)?,
        method: r.get(4)?,
        headers: r.get(5)?,
        body_kind: r.get(6)?,
        body: r.get(7)?,
        mode: r.get(8)?,
        remote_id_pointer: r.get(9)?,
        sign_secret: r.get(10)?,
    })
}

pub(crate) fn complete(conn: &Connection, result: &AttemptResult, now: Millis) -> Result<Applied> {
    let error = result.error.as_deref().map(clip_error);
    let current: Option<(String, u32, u32, u32, u32, Option<Millis>)> = conn
        .prepare_cached(
            "SELECT status, claim_seq, attempts, uncharged, max_attempts, expires_at \
             FROM deliveries WHERE id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([&result.id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                ))
            })
            .optional()
        })
        .map_err(map_err)?;
    // The claim is current only while the delivery is still in flight under this claim.
    let current = current
        .filter(|(status, claim_seq, ..)| {
            status == DeliveryStatus::InFlight.as_str() && *claim_seq == result.claim_seq
        })
        .map(
            |(_, _, attempts, uncharged, max_attempts, expires_at)| InFlight {
                attempts,
                uncharged,
                max_attempts,
                expires_at,
            },
        );
    let to = current
        .as_ref()
        .map(|row| Completion::decide(row, result, now));
    // A fenced result is still recorded on its attempt: no budget of its claim is left to use up.
    let outcome = to.as_ref().map_or_else(
        || AttemptOutcome::of(result.disposition, false),
        |to| to.outcome,
    );
    conn.prepare_cached(
        "UPDATE attempts SET finished_at = ?3, outcome = ?4, http_status = ?5, error_code = ?6, \
         error = ?7, duration_ms = ?8 \
         WHERE delivery_id = ?1 AND seq = ?2 AND outcome IS NULL",
    )
    .and_then(|mut st| {
        st.execute(params![
            result.id,
            result.claim_seq,
            now,
            outcome.as_str(),
            result.http_status,
            result.error_code,
            error,
            result.duration_ms,
        ])
    })
    .map_err(map_err)?;
    let Some(to) = to else {
        return Ok(Applied::Fenced);
    };
    let (last_error, last_error_code) = if to.keeps_error {
        (error, result.error_code.clone())
    } else {
        (None, None)
    };
    // Entering `unknown` starts its clock: the first check, and the end of the window.
    let step = conn
        .prepare_cached(
            "UPDATE deliveries SET status = ?2, next_attempt_at = ?3, uncharged = ?4, \
             last_error = ?5, last_error_code = ?6, \
             last_response_code = COALESCE(?7, last_response_code), lease_until = NULL, \
             updated_at = ?8, log_seq = log_seq + 1, remote_id = COALESCE(?9, remote_id), \
             unknown_since = COALESCE(?10, unknown_since), check_at = ?11, \
             review_at = CASE WHEN ?10 IS NULL THEN review_at \
                         ELSE ?10 + COALESCE(window_ms, ?12) END \
             WHERE id = ?1 RETURNING log_seq, attempts",
        )
        .and_then(|mut st| {
            st.query_row(
                params![
                    result.id,
                    to.status.as_str(),
                    to.next_attempt_at,
                    to.uncharged,
                    last_error,
                    last_error_code,
                    result.http_status,
                    now,
                    result.remote_id,
                    to.unknown.map(|(since, _)| since),
                    to.unknown.map(|(_, check)| check),
                    DEFAULT_OBSERVATION_WINDOW_MS,
                ],
                |r| step_at(r, 0),
            )
        })
        .map_err(map_err)?;
    ready(changes::log(
        conn,
        &result.id,
        Some(DeliveryStatus::InFlight),
        to.status,
        step,
        now,
        to.reason,
        to.note,
    ))?;
    Ok(Applied::Now(to.status))
}

/// Reserve the oldest due delivery of `origin`, if there is one (expired ones met on the way
/// are failed as `expired`): in flight under a new claim, but no attempt started.
pub(crate) fn reserve_next(
    conn: &Connection,
    origin: &str,
    now: Millis,
    lease_ms: i64,
) -> Result<Option<Reservation>> {
    match next_due_of(conn, origin, now)? {
        None => Ok(None),
        Some((id, _)) => reserve(conn, id, origin, now, lease_ms).map(Some),
    }
}

/// Take the oldest due delivery of `origin` for a slot (see [`crate::Store::take_next`]): an
/// at-least-once one claimed with its attempt started, an at-most-once one only reserved.
pub(crate) fn take_next(
    conn: &Connection,
    origin: &str,
    now: Millis,
    lease_ms: i64,
) -> Result<Option<Taken>> {
    match next_due_of(conn, origin, now)? {
        None => Ok(None),
        Some((id, Mode::AtLeastOnce)) => {
            claim_one(conn, &id, origin, now, now + lease_ms).map(|c| Some(Taken::Started(c)))
        }
        Some((id, Mode::AtMostOnce)) => {
            reserve(conn, id, origin, now, lease_ms).map(|r| Some(Taken::Reserved(r)))
        }
    }
}

/// The oldest due pending delivery of `origin` and its mode; expired ones met on the way are
/// failed as `expired` (at most 64, then none for now).
fn next_due_of(conn: &Connection, origin: &str, now: Millis) -> Result<Option<(String, Mode)>> {
    for _ in 0..64 {
        let next: Option<(String, Option<Millis>, String)> = conn
            .prepare_cached(
                "SELECT id, expires_at, mode FROM deliveries INDEXED BY deliveries_origin_due \
                 WHERE status = 'pending' AND origin = ?1 AND next_attempt_at <= ?2 \
                 ORDER BY next_attempt_at LIMIT 1",
            )
            .and_then(|mut st| {
                st.query_row(params![origin, now], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .map_err(map_err)?;
        match next {
            None => return Ok(None),
            Some((id, Some(exp), _)) if exp <= now => {
                expire(conn, &id, DeliveryStatus::Pending, now)?;
            }
            Some((id, _, mode)) => return Ok(Some((id, parse_mode(&mode)?))),
        }
    }
    Ok(None)
}

/// Reserve a pending delivery: in flight under a new claim, no attempt started.
fn reserve(
    conn: &Connection,
    id: String,
    origin: &str,
    now: Millis,
    lease_ms: i64,
) -> Result<Reservation> {
    let (claim_seq, step): (u32, Step) = conn
        .prepare_cached(
            "UPDATE deliveries SET status = 'in_flight', claim_seq = claim_seq + 1, \
             lease_until = ?2, updated_at = ?3, log_seq = log_seq + 1 \
             WHERE id = ?1 RETURNING claim_seq, log_seq, attempts",
        )
        .and_then(|mut st| {
            st.query_row(params![id, now + lease_ms, now], |r| {
                Ok((r.get(0)?, step_at(r, 1)?))
            })
        })
        .map_err(map_err)?;
    ready(changes::log(
        conn,
        &id,
        Some(DeliveryStatus::Pending),
        DeliveryStatus::InFlight,
        step,
        now,
        "reserved",
        None,
    ))?;
    Ok(Reservation {
        id,
        claim_seq,
        origin: origin.to_owned(),
    })
}

/// Start the attempt of a reservation, if it is still current and not expired: the check and
/// the start are one step in the store, so a cancel or a deadline that came first wins.
pub(crate) fn start(
    conn: &Connection,
    reservation: &Reservation,
    now: Millis,
    lease_ms: i64,
) -> Result<StartOutcome> {
    let current: Option<(String, u32, Option<Millis>)> = conn
        .prepare_cached("SELECT status, claim_seq, expires_at FROM deliveries WHERE id = ?1")
        .and_then(|mut st| {
            st.query_row([&reservation.id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .optional()
        })
        .map_err(map_err)?;
    let held = current.as_ref().is_some_and(|(status, seq, _)| {
        status == DeliveryStatus::InFlight.as_str() && *seq == reservation.claim_seq
    });
    if !held || started(conn, &reservation.id, reservation.claim_seq)? {
        return Ok(StartOutcome::NotCurrent);
    }
    if current
        .and_then(|(_, _, exp)| exp)
        .is_some_and(|exp| exp <= now)
    {
        expire(conn, &reservation.id, DeliveryStatus::InFlight, now)?;
        return Ok(StartOutcome::Expired);
    }
    let lease_until = now + lease_ms;
    let row = conn
        .prepare_cached(
            "UPDATE deliveries SET attempts = attempts + 1, lease_until = ?2 WHERE id = ?1 \
             RETURNING claim_seq, attempts, cycle, target_url, method, headers, body_kind, body, \
             mode, remote_id_pointer, sign_secret",
        )
        .and_then(|mut st| st.query_row(params![reservation.id, lease_until], started_row))
        .map_err(map_err)?;
    ready(row.into_claimed(conn, &reservation.id, &reservation.origin, now, lease_until))
        .map(StartOutcome::Started)
}

/// At start-up, when we hold the database's lock and so know the owner of every claim is dead:
/// every in-flight delivery is made pending again, due at once. A started attempt is recorded
/// as interrupted (`daemon_restart`, not charged); a reservation is simply released.
pub(crate) fn recover(conn: &Connection, now: Millis, check_in_ms: i64) -> Result<Reclaimed> {
    let ids = in_flight_with_lease_until(conn, Millis::MAX)?;
    take_back(conn, &ids, now, "daemon_restart", check_in_ms)
}

/// Renew the leases of `live` claims (held by attempts running in this process), then take back
/// every other claim whose lease has run out (`lease_expired`), as [`recover`] does. Both in one
/// step on one clock, so a step of the wall clock cannot make a live attempt look abandoned.
pub(crate) fn renew_and_reclaim(
    conn: &Connection,
    live: &[(String, u32)],
    now: Millis,
    lease_ms: i64,
    check_in_ms: i64,
) -> Result<Reclaimed> {
    for (id, claim_seq) in live {
        conn.prepare_cached(
            "UPDATE deliveries SET lease_until = ?3 \
             WHERE id = ?1 AND claim_seq = ?2 AND status = 'in_flight'",
        )
        .and_then(|mut st| st.execute(params![id, claim_seq, now + lease_ms]))
        .map_err(map_err)?;
    }
    let ids = in_flight_with_lease_until(conn, now)?;
    take_back(conn, &ids, now, "lease_expired", check_in_ms)
}

/// Claims whose lease ends at or before `cutoff`: id, claim sequence, mode.
fn in_flight_with_lease_until(
    conn: &Connection,
    cutoff: Millis,
) -> Result<Vec<(String, u32, String)>> {
    conn.prepare_cached(
        "SELECT id, claim_seq, mode FROM deliveries INDEXED BY deliveries_lease \
         WHERE status = 'in_flight' AND lease_until <= ?1",
    )
    .and_then(|mut st| {
        st.query_map([cutoff], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect()
    })
    .map_err(map_err)
}

/// Take back claims whose owner is gone. A reservation is released; a started attempt is
/// interrupted: sent again (at least once), or, at most once, `unknown` — its request may have
/// reached the target, so it is never resent by a restart.
fn take_back(
    conn: &Connection,
    claims: &[(String, u32, String)],
    now: Millis,
    code: &str,
    check_in_ms: i64,
) -> Result<Reclaimed> {
    let mut taken = Reclaimed::default();
    for (id, claim_seq, mode) in claims {
        if ready(delivery_changes::release(conn, id, *claim_seq, now, code))? {
            taken.released += 1;
            continue;
        }
        let mode = parse_mode(mode)?;
        match mode {
            Mode::AtLeastOnce => taken.interrupted += 1,
            Mode::AtMostOnce => taken.unknown += 1,
        }
        let result = AttemptResult::taken_back(id.clone(), *claim_seq, mode, code, check_in_ms);
        complete(conn, &result, now)?;
    }
    Ok(taken)
}

/// `unknown` deliveries whose next check is due at `now`, soonest first.
pub(crate) fn due_checks(conn: &Connection, now: Millis, limit: u32) -> Result<Vec<Delivery>> {
    conn.prepare_cached(&format!(
        "SELECT {LIST_COLUMNS} FROM deliveries INDEXED BY deliveries_checks \
         WHERE status = 'unknown' AND check_at <= ?1 ORDER BY check_at LIMIT ?2"
    ))
    .and_then(|mut st| {
        st.query_map(params![now, limit], |r| row_to_delivery(r, false))?
            .collect()
    })
    .map_err(map_err)
}

/// When the next check of an `unknown` delivery is due.
/// How many deliveries waiting to be sent name `secret` to sign them.
pub(crate) fn waiting_on_secret(conn: &Connection, secret: &str) -> Result<u64> {
    conn.prepare_cached(
        "SELECT COUNT(*) FROM deliveries INDEXED BY deliveries_status \
         WHERE status IN ('pending', 'in_flight') AND sign_secret = ?1",
    )
    .and_then(|mut st| st.query_row([secret], |r| r.get::<_, i64>(0)))
    .map(|n| n.max(0) as u64)
    .map_err(map_err)
}

pub(crate) fn next_check(conn: &Connection) -> Result<Option<Millis>> {
    conn.prepare_cached(
        "SELECT check_at FROM deliveries INDEXED BY deliveries_checks \
         WHERE status = 'unknown' AND check_at IS NOT NULL ORDER BY check_at LIMIT 1",
    )
    .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
    .map_err(map_err)
}

/// The reconciliation checks of one delivery, oldest first; `None` if the delivery is unknown.
pub(crate) fn checks(conn: &Connection, id: &str) -> Result<Option<Vec<Check>>> {
    if !exists(conn, id)? {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT at, http_status, matches, error_code, error, duration_ms FROM checks \
         WHERE delivery_id = ?1 ORDER BY seq",
    )
    .and_then(|mut st| {
        st.query_map([id], |r| {
            Ok(Check {
                at: r.get(0)?,
                http_status: r.get(1)?,
                matches: r.get(2)?,
                error_code: r.get(3)?,
                error: r.get(4)?,
                duration_ms: r.get(5)?,
            })
        })?
        .collect()
    })
    .map(Some)
    .map_err(map_err)
}

fn exists(conn: &Connection, id: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM deliveries WHERE id = ?1")
        .and_then(|mut st| st.exists([id]))
        .map_err(map_err)
}

impl delivery_changes::DeliveryRows for Connection {
    /// The delivery; SQLite's one writer already keeps its row from changing.
    async fn delivery_for_update(&self, id: &str) -> Result<Option<Delivery>> {
        get(self, id)
    }

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>> {
        get(self, id)
    }
}

/// Remove up to `limit` finished deliveries last updated at or before `cutoff`, with their
/// attempts and idempotency keys. Pending and in-flight work is never touched.
pub(crate) fn purge_finished(conn: &Connection, cutoff: Millis, limit: u32) -> Result<u64> {
    let rows: Vec<(String, Option<String>)> = conn
        .prepare_cached(
            "SELECT id, idempotency_key FROM deliveries INDEXED BY deliveries_finished \
             WHERE status IN ('succeeded', 'failed', 'canceled') AND updated_at <= ?1 \
             ORDER BY updated_at LIMIT ?2",
        )
        .and_then(|mut st| {
            st.query_map(params![cutoff, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect()
        })
        .map_err(map_err)?;
    for (id, key) in &rows {
        conn.prepare_cached("DELETE FROM attempts WHERE delivery_id = ?1")
            .and_then(|mut st| st.execute([id]))
            .map_err(map_err)?;
        for table in ["transitions", "checks"] {
            conn.prepare_cached(&format!("DELETE FROM {table} WHERE delivery_id = ?1"))
                .and_then(|mut st| st.execute([id]))
                .map_err(map_err)?;
        }
        if let Some(key) = key {
            conn.prepare_cached("DELETE FROM idempotency_keys WHERE key = ?1 AND delivery_id = ?2")
                .and_then(|mut st| st.execute([key, id]))
                .map_err(map_err)?;
        }
        conn.prepare_cached("DELETE FROM deliveries WHERE id = ?1")
            .and_then(|mut st| st.execute([id]))
            .map_err(map_err)?;
    }
    Ok(rows.len() as u64)
}

/// Hand up to `pages` free pages back to the filesystem.
pub(crate) fn reclaim_space(conn: &Connection, pages: u32) -> Result<()> {
    conn.execute_batch(&format!("PRAGMA incremental_vacuum({pages})"))
        .map_err(map_err)
}

pub(crate) fn get(conn: &Connection, id: &str) -> Result<Option<Delivery>> {
    conn.prepare_cached(&format!(
        "SELECT {FULL_COLUMNS} FROM deliveries WHERE id = ?1"
    ))
    .and_then(|mut st| st.query_row([id], |r| row_to_delivery(r, true)).optional())
    .map_err(map_err)
}

/// Oldest first (ids are time-ordered); `after` is the id of the last row of the previous page.
pub(crate) fn list(
    conn: &Connection,
    filter: &ListFilter,
    limit: u32,
    after: Option<&str>,
) -> Result<Page> {
    let mut sql = format!("SELECT {LIST_COLUMNS} FROM deliveries WHERE 1 = 1");
    let status = filter.status.map(DeliveryStatus::as_str);
    let fetch = i64::from(limit) + 1;
    let mut bound: Vec<(&str, &dyn rusqlite::ToSql)> = vec![(":fetch", &fetch)];
    if let Some(status) = &status {
        sql.push_str(" AND status = :status");
        bound.push((":status", status));
    }
    if let Some(origin) = &filter.origin {
        sql.push_str(" AND origin = :origin");
        bound.push((":origin", origin));
    }
    let url = filter.url.as_deref().map(crate::model::UrlMatch::new);
    if let Some(url) = &url {
        sql.push_str(
            " AND (target_url = :url OR substr(target_url, 1, :url_len) IN (:url_q, :url_h))",
        );
        bound.push((":url", &url.url));
        bound.push((":url_len", &url.prefix_len));
        bound.push((":url_q", &url.with_query));
        bound.push((":url_h", &url.with_fragment));
    }
    if let Some(since) = &filter.created_after {
        sql.push_str(" AND created_at >= :since");
        bound.push((":since", since));
    }
    if let Some(until) = &filter.created_before {
        sql.push_str(" AND created_at < :until");
        bound.push((":until", until));
    }
    if let Some(code) = &filter.last_error_code {
        sql.push_str(" AND last_error_code = :code");
        bound.push((":code", code));
    }
    if let Some(after) = &after {
        sql.push_str(if filter.newest_first {
            " AND id < :after"
        } else {
            " AND id > :after"
        });
        bound.push((":after", after));
    }
    sql.push_str(if filter.newest_first {
        " ORDER BY id DESC LIMIT :fetch"
    } else {
        " ORDER BY id LIMIT :fetch"
    });
    let mut rows: Vec<Delivery> = conn
        .prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_map(bound.as_slice(), |r| row_to_delivery(r, false))?
                .collect()
        })
        .map_err(map_err)?;
    let next_cursor = super::next_page(&mut rows, limit, |d| &d.id);
    Ok(Page {
        deliveries: rows,
        next_cursor,
    })
}

pub(crate) fn attempts(conn: &Connection, id: &str) -> Result<Option<Vec<Attempt>>> {
    if !exists(conn, id)? {
        return Ok(None);
    }
    conn.prepare_cached(
        "SELECT cycle, number, started_at, finished_at, outcome, http_status, error_code, error, \
         duration_ms FROM attempts WHERE delivery_id = ?1 ORDER BY seq",
    )
    .and_then(|mut st| {
        st.query_map([id], |r| {
            Ok(Attempt {
                cycle: r.get(0)?,
                number: r.get(1)?,
                started_at: r.get(2)?,
                finished_at: r.get(3)?,
                outcome: r.get(4)?,
                http_status: r.get(5)?,
                error_code: r.get(6)?,
                error: r.get(7)?,
                duration_ms: r.get(8)?,
            })
        })?
        .collect()
    })
    .map(Some)
    .map_err(map_err)
}

/// Distinct URLs of parked deliveries (see [`crate::Store::parked_urls`]).
pub(crate) fn parked_urls(conn: &Connection, limit: u32) -> Result<Vec<String>> {
    conn.prepare_cached(
        "SELECT DISTINCT target_url FROM deliveries INDEXED BY deliveries_due \
         WHERE status = 'pending' AND next_attempt_at >= ?1 LIMIT ?2",
    )
    .and_then(|mut st| {
        st.query_map(params![crate::model::PARKED, limit], |r| r.get(0))?
            .collect()
    })
    .map_err(map_err)
}

/// The earliest due time of pending work whose origin is not saturated.
pub(crate) fn next_due(conn: &Connection, saturated: &[String]) -> Result<Option<Millis>> {
    let saturated: HashSet<String> = saturated.iter().cloned().collect();
    Ok(due_candidates(conn, Millis::MAX, &saturated, 1)?
        .first()
        .map(|c| c.due))
}

pub(crate) fn stats(conn: &Connection, now: Millis) -> Result<Stats> {
    // Kept by triggers in the transactions that change statuses: no rows are counted here.
    let by_status: Vec<(String, u64)> = conn
        .prepare_cached("SELECT status, n FROM status_counts WHERE n > 0")
        .and_then(|mut st| st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(map_err)?;
    let oldest_due_at: Option<Millis> = conn
        .prepare_cached(
            "SELECT next_attempt_at FROM deliveries INDEXED BY deliveries_due WHERE status = 'pending' \
             AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT 1",
        )
        .and_then(|mut st| st.query_row([now], |r| r.get(0)).optional())
        .map_err(map_err)?;
    Ok(Stats {
        by_status: by_status
            .into_iter()
            .filter_map(|(s, n)| s.parse().ok().map(|st| (st, n)))
            .collect(),
        oldest_due_at,
        db_bytes: db_bytes(conn)?,
    })
}

/// Origins with pending or in-flight work, in origin order after `after`, at most `limit`.
pub(crate) fn origins(
    conn: &Connection,
    limit: u32,
    after: Option<&str>,
) -> Result<Vec<OriginCounts>> {
    conn.prepare_cached(
        "SELECT origin, \
                SUM(CASE WHEN status = 'pending' THEN n ELSE 0 END), \
                SUM(CASE WHEN status = 'in_flight' THEN n ELSE 0 END) \
         FROM origin_counts WHERE origin > ?1 AND n > 0 \
         GROUP BY origin ORDER BY origin LIMIT ?2",
    )
    .and_then(|mut st| {
        st.query_map(params![after.unwrap_or(""), limit], |r| {
            Ok(OriginCounts {
                origin: r.get(0)?,
                pending: r.get(1)?,
                in_flight: r.get(2)?,
            })
        })?
        .collect()
    })
    .map_err(map_err)
}

/// Bytes in use: pages minus free pages. The WAL is not counted; it is bounded by checkpoints.
///
/// Checked before every create, so each number is a PRAGMA statement of its own, prepared once:
/// their table-valued forms (`pragma_page_count`, …) prepare a statement on every call.
pub(crate) fn db_bytes(conn: &Connection) -> Result<u64> {
    let read = |pragma: &str| {
        conn.prepare_cached(pragma)
            .and_then(|mut st| st.query_row([], |r| r.get::<_, u64>(0)))
            .map_err(map_err)
    };
    let pages = read("PRAGMA page_count")?;
    let free = read("PRAGMA freelist_count")?;
    Ok(pages.saturating_sub(free) * read("PRAGMA page_size")?)
}

fn row_to_delivery(r: &Row<'_>, full: bool) -> rusqlite::Result<Delivery> {
    let status: String = r.get(5)?;
    let status = status.parse::<DeliveryStatus>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(5, rusqlite::types::Type::Text, Box::new(e))
    })?;
    let (headers, body) = if full {
        let headers: String = r.get(LIST_WIDTH)?;
        let headers = decode_headers(&headers).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(
                LIST_WIDTH,
                rusqlite::types::Type::Text,
                e.into(),
            )
        })?;
        (
            Some(headers),
            Some(decode_body(r.get(LIST_WIDTH + 1)?, r.get(LIST_WIDTH + 2)?)),
        )
    } else {
        (None, None)
    };
    Ok(Delivery {
        id: r.get(0)?,
        idempotency_key: r.get(1)?,
        target_url: r.get(2)?,
        origin: r.get(3)?,
        method: r.get(4)?,
        status,
        attempts: r.get(6)?,
        uncharged: r.get(7)?,
        max_attempts: r.get(8)?,
        cycle: r.get(9)?,
        last_error: r.get(10)?,
        last_error_code: r.get(11)?,
        last_response_code: r.get(12)?,
        created_at: r.get(13)?,
        updated_at: r.get(14)?,
        next_attempt_at: r.get(15)?,
        not_before: r.get(16)?,
        expires_at: r.get(17)?,
        lease_until: r.get(18)?,
        mode: {
            let mode: String = r.get(19)?;
            mode.parse().map_err(|e: crate::model::UnknownStatus| {
                rusqlite::Error::FromSqlConversionFailure(
                    19,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?
        },
        fingerprint: r.get(20)?,
        reconcile: r.get(21)?,
        remote_id_pointer: r.get(22)?,
        observation_window_ms: r.get(23)?,
        remote_id: r.get(24)?,
        unknown_since: r.get(25)?,
        review_at: r.get(26)?,
        check_at: r.get(27)?,
        checks: r.get(28)?,
        sign_secret: r.get(29)?,
        headers,
        body,
    })
}
