//! Durable state for spoold.
//!
//! The [`Store`] is the only way the daemon touches persistent state. It knows nothing of HTTP
//! or processes: it keeps deliveries, their attempt history and idempotency keys, and applies
//! the state machine in [`model`].
//!
//! **Invariant:** every write method returns only after the change is durable (committed with
//! a full fsync). A caller that acknowledges a client after `Ok` can never lose that write to a
//! crash.
//!
//! # Layout
//! - [`model`]: statuses, transitions and the records crossing the boundary (backend-neutral;
//!   timestamps are integer milliseconds).
//! - [`sqlite`]: the embedded backend — group-commit writer thread, read pool, migrations.
//! - [`error`]: [`StoreError`], in terms the daemon acts on.

pub mod error;
pub mod model;
pub mod sqlite;

pub use error::{Result, StoreError};
pub use model::Capacity;
pub use sqlite::CommitObserver;

use model::{
    Applied, Attempt, AttemptResult, ClaimBatch, Delivery, DeliveryStatus, InsertOutcome, Millis,
    NewDelivery, Page, Stats, TransitionOutcome,
};

/// A handle to the configured backend. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(sqlite::SqliteStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Sqlite($s) => $call,
        }
    };
}

impl Store {
    /// Persist a new delivery, or resolve its idempotency key against an existing one.
    /// `Created` is returned only after the row is durable. The key is resolved before time is
    /// judged: a new delivery whose `expires_at` has passed is refused (`AlreadyExpired`), a
    /// duplicate of one is not.
    pub async fn insert(&self, new: NewDelivery) -> Result<InsertOutcome> {
        dispatch!(self, s => s.insert(new).await)
    }

    /// Claim up to `limit` due deliveries for one attempt each, respecting per-origin capacity.
    /// The claim (status `in_flight`, attempt count, lease) is durable before this returns, so
    /// no request is sent for an unrecorded attempt. Due deliveries past `expires_at` are failed
    /// as `expired` instead of claimed.
    pub async fn claim_due(
        &self,
        limit: u32,
        capacity: Capacity,
        lease_ms: i64,
    ) -> Result<ClaimBatch> {
        dispatch!(self, s => s.claim_due(limit, capacity, lease_ms).await)
    }

    /// Record an attempt's outcome. Fenced: if the delivery no longer carries the claim
    /// (canceled, reclaimed), only the attempt record changes.
    pub async fn complete(&self, result: AttemptResult) -> Result<Applied> {
        dispatch!(self, s => s.complete(result).await)
    }

    /// Claim the oldest due delivery of `origin`, if any (expired ones met on the way are failed
    /// as `expired`). Lets an attempt whose target is answering line up that target's next
    /// delivery while its own request is still on the wire.
    pub async fn claim_next_for(
        &self,
        origin: String,
        lease_ms: i64,
    ) -> Result<Option<model::Claimed>> {
        dispatch!(self, s => s.claim_next_for(origin, lease_ms).await)
    }

    /// Give back a claim whose request was never sent (see [`Store::claim_next_for`]): the
    /// delivery is pending again, its attempt count and history as before. `false` if the claim
    /// was no longer current.
    pub async fn unclaim(&self, id: String, claim_seq: u32) -> Result<bool> {
        dispatch!(self, s => s.unclaim(id, claim_seq).await)
    }

    /// Return in-flight deliveries to `pending`, due now, without charging the attempt:
    /// all of them (`only_expired == false`, at start-up, when the previous owner is known to
    /// be dead) or only those whose lease has expired.
    pub async fn reclaim(&self, only_expired: bool) -> Result<u64> {
        dispatch!(self, s => s.reclaim(only_expired).await)
    }

    /// Remove up to `limit` finished deliveries (with attempts and idempotency keys) that
    /// finished more than `older_than_ms` ago, then return free space to the filesystem.
    /// Pending and in-flight deliveries are never removed.
    pub async fn purge_finished(&self, older_than_ms: Millis, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.purge_finished(older_than_ms, limit).await)
    }

    /// Fail up to `limit` pending deliveries whose `expires_at` has passed (code `expired`),
    /// due or not. Returns how many.
    pub async fn expire_overdue(&self, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.expire_overdue(limit).await)
    }

    /// Operator cancel: `pending` or `in_flight` → `canceled`.
    pub async fn cancel(&self, id: String) -> Result<TransitionOutcome> {
        dispatch!(self, s => s.cancel(id).await)
    }

    /// Operator retry: `failed` → `pending`, a new cycle with the attempt count and last error
    /// reset; the attempt history is kept. An `expires_at` already in the past is cleared (the
    /// operator's retry overrides a deadline that has passed).
    pub async fn retry(&self, id: String) -> Result<TransitionOutcome> {
        dispatch!(self, s => s.retry(id).await)
    }

    /// A small durable write, to prove the store can write right now.
    pub async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }

    pub async fn get(&self, id: String) -> Result<Option<Delivery>> {
        dispatch!(self, s => s.get(id).await)
    }

    /// Oldest first, without headers and bodies; `after` is a cursor from a previous page.
    pub async fn list(
        &self,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<String>,
    ) -> Result<Page> {
        dispatch!(self, s => s.list(status, limit, after).await)
    }

    /// The attempt history across all cycles, oldest first; `None` if the delivery is unknown.
    pub async fn attempts(&self, id: String) -> Result<Option<Vec<Attempt>>> {
        dispatch!(self, s => s.attempts(id).await)
    }

    /// The earliest due time of pending work whose origin is not in `saturated`.
    pub async fn next_due(&self, saturated: Vec<String>) -> Result<Option<Millis>> {
        dispatch!(self, s => s.next_due(saturated).await)
    }

    pub async fn stats(&self) -> Result<Stats> {
        dispatch!(self, s => s.stats().await)
    }

    /// Notified whenever a committed write made work due (a create, an operator's retry, a
    /// claim given back), whether or not its caller is still waiting for the answer.
    pub fn work_available(&self) -> std::sync::Arc<tokio::sync::Notify> {
        dispatch!(self, s => s.work_available())
    }

    /// Whether the last write transaction failed (cleared by the next success).
    pub fn write_failing(&self) -> bool {
        dispatch!(self, s => s.writer_stats().failing.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Install an observer of commits (metrics). Only the first call has an effect.
    pub fn observe_commits(&self, observer: std::sync::Arc<dyn CommitObserver>) {
        dispatch!(self, s => { let _ = s.writer_stats().observer.set(observer); })
    }

    /// The store's clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> Millis {
        dispatch!(self, _s => sqlite::now_ms())
    }
}
