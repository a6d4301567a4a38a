//! Group commit for the slots' steps on PostgreSQL: the [`crate::Store::advance`] and
//! [`crate::Store::take_next`] calls of concurrent slots (record a result, start the reserved
//! next delivery, reserve the one after — or record a result and take the next) are queued and
//! written a batch at a time, each batch one statement (`spoold_steps` over arrays) in one
//! transaction — one COMMIT, one WAL flush and one round trip for several
//! deliveries, as SQLite's writer folds them into one commit.
//!
//! **Invariant:** a step is answered only after the transaction that wrote it committed, and
//! with what it alone would have answered. A batch that fails for any reason but
//! an unreachable database is run again one step at a time, so one bad step never sinks the
//! others.

use tokio_postgres::Row;

use super::batch::{fail_all, Batcher, Job};
use super::deliveries;
use super::PgStore;
use crate::error::StoreError;
use crate::model::{AttemptResult, Millis, Reservation};

/// Steps written in one transaction at most.
const MAX_BATCH: usize = 64;

/// Batches being written at once: one. While it commits, the next gathers; more writers only
/// make the batches smaller — a call and its commit cost the server much the same for one step
/// as for several — without a step returning sooner. At the default per-target limit, 8
/// writers wrote 1.2 steps a commit and 2 wrote 1.9 (docs/src/lab-notes.md, "fewer step
/// writers"); since slots start their attempts ahead (spoold's `deliver.rs`), the steps of
/// the slots overlap enough that one writer takes ~7 a commit (two took ~4): 15 % less server
/// CPU than two, at the same rate or better ("Starting attempts ahead").
const WRITERS: usize = 1;

/// One slot's step: record `result` (if any), start `next` (if any), reserve for `origin` (if
/// any) — or take for it (`take`, without `next`).
pub(super) struct Step {
    pub result: Option<AttemptResult>,
    pub next: Option<Reservation>,
    pub origin: Option<String>,
    pub take: bool,
    pub lease_ms: i64,
    /// Where the reservation starts looking (see `PgStore::reserve_from`).
    pub from: Option<Millis>,
}

impl Step {
    fn args(&self) -> deliveries::StepArgs<'_> {
        deliveries::StepArgs {
            result: self.result.as_ref(),
            next: self.next.as_ref(),
            origin: self.origin.as_deref(),
            from: self.from,
            take: self.take,
        }
    }
}

/// The queue steps wait in; each is answered with its row of `spoold_steps`.
pub(super) type Advancer = Batcher<Step, Row>;

/// Start the writers.
pub(super) fn spawn(store: std::sync::Weak<super::Inner>) -> Advancer {
    Batcher::spawn(store, WRITERS, MAX_BATCH, PgStore::write_steps)
}

impl PgStore {
    async fn write_steps(self, batch: Vec<Job<Step, Row>>) {
        let lease_ms = batch.first().map(|j| j.item.lease_ms);
        if batch.len() == 1 || batch.iter().any(|j| Some(j.item.lease_ms) != lease_ms) {
            return self.steps_one_by_one(batch).await;
        }
        let steps: Vec<_> = batch.iter().map(|j| j.item.args()).collect();
        let lease_ms = lease_ms.unwrap_or_default();
        match self.step(&deliveries::steps(&steps, lease_ms)).await {
            // Committed, so never run again: a row missing would be a bug in the function.
            Ok(rows) if rows.len() != batch.len() => {
                let message = format!(
                    "spoold_steps answered {} rows for {}",
                    rows.len(),
                    batch.len()
                );
                fail_all(batch, &StoreError::Database(message));
            }
            Ok(rows) => {
                let mut rows: Vec<(i32, Row)> = rows
                    .into_iter()
                    .map(|r| (r.try_get::<_, i32>("o_n").unwrap_or(i32::MAX), r))
                    .collect();
                rows.sort_by_key(|(n, _)| *n);
                for (job, (_, row)) in batch.into_iter().zip(rows) {
                    let _ = job.answer.send(Ok(row));
                }
            }
            Err(e @ StoreError::Unavailable(_)) => fail_all(batch, &e),
            // Something in the batch was refused, and the whole batch rolled back: each on its
            // own, so only that one fails.
            Err(_) => self.steps_one_by_one(batch).await,
        }
    }

    async fn steps_one_by_one(&self, jobs: Vec<Job<Step, Row>>) {
        for job in jobs {
            let answer = self
                .step(&deliveries::steps(&[job.item.args()], job.item.lease_ms))
                .await
                .and_then(|rows| {
                    rows.into_iter()
                        .next()
                        .ok_or_else(|| StoreError::Database("spoold_steps returned no row".into()))
                });
            let _ = job.answer.send(answer);
        }
    }
}
