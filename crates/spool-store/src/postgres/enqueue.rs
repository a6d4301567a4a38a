//! Group commit for creates on PostgreSQL: concurrent creates are queued and written a batch at
//! a time, each batch in one transaction with one statement per table (keys, deliveries,
//! transitions, each over arrays), so a burst pays one COMMIT — one WAL flush — for many
//! deliveries instead of one each.
//!
//! **Invariant:** a create is answered only after the transaction that wrote it committed, and
//! with exactly what the one-by-one insert (`deliveries::insert`) would have answered: a key is
//! resolved before time and space are judged, a key already taken gives the delivery it names
//! (or a conflict), and a batch that fails for any reason but an unreachable database is run
//! again one create at a time, so one bad create never sinks the others.

use std::collections::HashSet;

use super::batch::{fail_all, Batcher, Job};
use super::deliveries::known_key;
use super::{exec, rows, PgStore, Tx};
use crate::error::{Result, StoreError};
use crate::model::{InsertOutcome, Millis, NewDelivery};
use crate::stored::{encode_body, encode_headers};

/// Creates written in one transaction at most.
const MAX_BATCH: usize = 256;

/// Batches being written at once: while one commits, the next is being built. Two, not three:
/// with several hosts on one database every host has its own writers, and a third each made
/// the batches smaller and the commits more without a create returning sooner (with schema 7,
/// two hosts at the default limit went from 0.77–0.95 × one host to 0.91–1.19 ×;
/// docs/src/lab-notes.md, "Taking the next delivery").
pub(super) const WRITERS: usize = 2;

/// The queue creates wait in.
pub(super) type Enqueuer = Batcher<NewDelivery, InsertOutcome>;

/// Start the writers.
pub(super) fn spawn(store: std::sync::Weak<super::Inner>) -> Enqueuer {
    Batcher::spawn(store, WRITERS, MAX_BATCH, PgStore::write_batch)
}

impl PgStore {
    async fn write_batch(self, batch: Vec<Job<NewDelivery, InsertOutcome>>) {
        // A key twice in one batch: the later create must see the earlier one's row, so it
        // waits for the batch to commit and then goes one by one.
        let mut seen = HashSet::new();
        let (first, again): (Vec<_>, Vec<_>) = batch.into_iter().partition(|job| {
            job.item
                .idempotency_key
                .as_ref()
                .is_none_or(|key| seen.insert(key.clone()))
        });
        let limit = self.inner.max_db_bytes;
        let written = match if limit > 0 {
            self.db_bytes().await
        } else {
            Ok(0)
        } {
            Ok(used) => {
                let news: Vec<&NewDelivery> = first.iter().map(|j| &j.item).collect();
                in_tx!(&self, &self.inner.enqueue_pool, |tx, now| insert_batch(
                    &tx, &news, now, used, limit
                ))
            }
            Err(e) => Err(e),
        };
        match written {
            Ok(outcomes) => {
                let wakes = outcomes.iter().any(InsertOutcome::wakes);
                self.inner.wake.deliveries_when(wakes);
                for (job, outcome) in first.into_iter().zip(outcomes) {
                    let _ = job.answer.send(Ok(outcome));
                }
            }
            Err(e @ StoreError::Unavailable(_)) => fail_all(first, &e),
            // Something in the batch was refused (a duplicate id): each on its own, so only
            // that one gets the error.
            Err(_) => self.one_by_one(first).await,
        }
        self.one_by_one(again).await;
    }

    async fn one_by_one(&self, jobs: Vec<Job<NewDelivery, InsertOutcome>>) {
        for job in jobs {
            let answer = self.insert_one(job.item).await;
            let _ = job.answer.send(answer);
        }
    }
}

/// Write `news` (no key twice) in `tx`: the answers, in order.
async fn insert_batch(
    tx: &Tx<'_>,
    news: &[&NewDelivery],
    now: Millis,
    db_bytes: u64,
    max_db_bytes: u64,
) -> Result<Vec<InsertOutcome>> {
    // Keys first: of hosts racing on one key, exactly one inserts it; the others wait for its
    // transaction and then see what it committed.
    let keyed: Vec<&NewDelivery> = news
        .iter()
        .copied()
        .filter(|n| n.idempotency_key.is_some())
        .collect();
    let mut taken_here = HashSet::new();
    if !keyed.is_empty() {
        let keys: Vec<&str> = keyed
            .iter()
            .filter_map(|n| n.idempotency_key.as_deref())
            .collect();
        let ids: Vec<&str> = keyed.iter().map(|n| n.id.as_str()).collect();
        let digests: Vec<&[u8]> = keyed.iter().map(|n| n.request_digest.as_slice()).collect();
        for row in rows(
            tx,
            "INSERT INTO idempotency_keys (key, delivery_id, fingerprint) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[]) \
             ON CONFLICT (key) DO NOTHING RETURNING key",
            &[&keys, &ids, &digests],
        )
        .await?
        {
            taken_here.insert(super::get::<String>(&row, "key")?);
        }
    }
    let mut outcomes = Vec::with_capacity(news.len());
    let mut accepted = Vec::new();
    let mut given_back = Vec::new();
    for new in news {
        if let Some(key) = &new.idempotency_key {
            if !taken_here.contains(key) {
                outcomes.push(Some(known_key(tx, key, new).await?));
                continue;
            }
        }
        // Judged after the key, as one by one.
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
        match refused {
            Some(refused) => {
                given_back.extend(new.idempotency_key.as_deref());
                outcomes.push(Some(refused));
            }
            None => {
                accepted.push(*new);
                outcomes.push(None);
            }
        }
    }
    if !given_back.is_empty() {
        exec(
            tx,
            "DELETE FROM idempotency_keys WHERE key = ANY($1::text[])",
            &[&given_back],
        )
        .await?;
    }
    let mut written = write_rows(tx, &accepted, now).await?.into_iter();
    let mut answers = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        answers.push(match outcome {
            Some(outcome) => outcome,
            None => InsertOutcome::Created(written.next().ok_or_else(|| {
                StoreError::Database("fewer deliveries written than accepted".into())
            })?),
        });
    }
    Ok(answers)
}

/// Insert the delivery rows of `accepted` and their first transition; the rows written, in
/// order. A duplicate id fails the whole batch (the caller then goes one by one).
async fn write_rows(
    tx: &Tx<'_>,
    accepted: &[&NewDelivery],
    now: Millis,
) -> Result<Vec<crate::model::Delivery>> {
    if accepted.is_empty() {
        return Ok(Vec::new());
    }
    let n = accepted.len();
    let mut ids = Vec::with_capacity(n);
    let mut keys = Vec::with_capacity(n);
    let mut urls = Vec::with_capacity(n);
    let mut origins = Vec::with_capacity(n);
    let mut methods = Vec::with_capacity(n);
    let mut headers = Vec::with_capacity(n);
    let mut body_kinds = Vec::with_capacity(n);
    let mut bodies = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut dues = Vec::with_capacity(n);
    let mut not_befores = Vec::with_capacity(n);
    let mut expiries = Vec::with_capacity(n);
    let mut modes = Vec::with_capacity(n);
    let mut fingerprints = Vec::with_capacity(n);
    let mut reconciles = Vec::with_capacity(n);
    let mut pointers = Vec::with_capacity(n);
    let mut windows = Vec::with_capacity(n);
    let mut secrets = Vec::with_capacity(n);
    let mut written = Vec::with_capacity(n);
    for new in accepted {
        let (kind, body) = encode_body(&new.body);
        let due = new.not_before.map_or(now, |nb| nb.max(now));
        let expires_at = new
            .expires_at
            .or_else(|| new.retry_window_ms.map(|w| due + w));
        ids.push(new.id.as_str());
        keys.push(new.idempotency_key.as_deref());
        urls.push(new.target_url.as_str());
        origins.push(new.origin.as_str());
        methods.push(new.method.as_str());
        headers.push(encode_headers(&new.headers)?);
        body_kinds.push(kind);
        bodies.push(body);
        max_attempts.push(i64::from(new.max_attempts));
        dues.push(due);
        not_befores.push(new.not_before);
        expiries.push(expires_at);
        modes.push(new.mode.as_str());
        fingerprints.push(new.fingerprint.as_deref());
        reconciles.push(new.reconcile.as_deref());
        pointers.push(new.remote_id_pointer.as_deref());
        windows.push(new.observation_window_ms);
        secrets.push(new.sign_secret.as_deref());
        written.push(crate::model::Delivery::created(new, now, due, expires_at));
    }
    let inserted = exec(
        tx,
        "INSERT INTO deliveries (id, idempotency_key, target_url, origin, method, headers, \
         body_kind, body, max_attempts, next_attempt_at, not_before, expires_at, mode, \
         fingerprint, reconcile, remote_id_pointer, window_ms, sign_secret, status, created_at, \
         updated_at, log_seq) \
         SELECT *, 'pending', $18::bigint, $18::bigint, 1 FROM UNNEST($1::text[], $2::text[], \
         $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bytea[], \
         $9::bigint[], $10::bigint[], $11::bigint[], $12::bigint[], $13::text[], $14::text[], \
         $15::text[], $16::text[], $17::bigint[], $19::text[]) \
         ON CONFLICT (id) DO NOTHING",
        &[
            &ids,
            &keys,
            &urls,
            &origins,
            &methods,
            &headers,
            &body_kinds,
            &bodies,
            &max_attempts,
            &dues,
            &not_befores,
            &expiries,
            &modes,
            &fingerprints,
            &reconciles,
            &pointers,
            &windows,
            &now,
            &secrets,
        ],
    )
    .await?;
    if inserted as usize != n {
        return Err(StoreError::Database(
            "a delivery id in the batch exists already".into(),
        ));
    }
    exec(
        tx,
        "INSERT INTO transitions (delivery_id, seq, from_status, to_status, attempt, at, reason) \
         SELECT id, 1, NULL, 'pending', 0, $2, 'created' FROM UNNEST($1::text[]) AS id",
        &[&ids, &now],
    )
    .await?;
    Ok(written)
}
