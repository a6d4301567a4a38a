//! Durable state for spoold.
//!
//! The [`Store`] is the only way the daemon touches persistent state. It knows nothing of HTTP
//! or processes: it keeps deliveries, their attempt history and idempotency keys, and applies
//! the state machine in [`model`].
//!
//! **Invariant:** every write method returns only after the change is durable (SQLite: committed
//! with a full fsync; PostgreSQL: COMMIT answered on a session with `synchronous_commit = on`).
//! A caller that acknowledges a client after `Ok` can never lose that write to a crash.
//!
//! # Layout
//! - [`model`]: statuses, transitions and the records crossing the boundary (backend-neutral;
//!   timestamps are integer milliseconds).
//! - [`transitions`] and [`tasks`]: the decisions both backends apply, as pure functions (what
//!   an attempt's result makes of a delivery or a task, cancels, resolutions, take-backs);
//!   `stored`: how bodies, headers, statuses and modes are stored, for both.
//! - [`sqlite`]: the embedded backend — group-commit writer thread, read pool, migrations.
//! - [`postgres`]: the shared backend — several hosts on one database, claims with
//!   `FOR UPDATE SKIP LOCKED`, the database's clock, LISTEN/NOTIFY wake-ups.
//! - [`claim`]: the claim pass both backends run, deciding through `model::ClaimPass` and
//!   doing through each backend's `claim::ClaimIo`.
//! - [`clock`]: the one clock due times and leases are decided on.
//! - [`outside`]: text from outside (errors, result summaries, remote ids, notes) made
//!   storable at the [`Store`]'s door, the same for both backends (a NUL becomes U+FFFD).
//! - [`error`]: [`StoreError`], in terms the daemon acts on.
//! - [`durable_file`]: a small file beside the database, replaced whole or not at all.

// Docs are written for the people who change this crate: they link to private items too
// (`cargo doc --document-private-items` renders those links).
#![allow(rustdoc::private_intra_doc_links)]

mod changes;
mod claim;
pub mod clock;
mod delivery_changes;
pub mod durable_file;
pub mod error;
pub mod model;
pub mod outside;
pub mod postgres;
mod sql;
pub mod sqlite;
pub mod status_log;
mod stored;
mod task_changes;
pub mod tasks;
pub mod transitions;

pub use clock::Clock;
pub use error::{Result, StoreError};
pub use model::Capacity;
pub use outside::storable;
pub use sqlite::CommitObserver;

use outside::Outside;

use model::{
    Applied, Attempt, AttemptResult, ClaimBatch, Delivery, DeliveryStatus, InsertOutcome, Millis,
    NewDelivery, Page, Stats, TransitionOutcome,
};

/// A handle to the configured backend. Cheap to clone.
#[derive(Debug, Clone)]
pub enum Store {
    Sqlite(sqlite::SqliteStore),
    Postgres(postgres::PgStore),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Sqlite($s) => $call,
            Store::Postgres($s) => $call,
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
        let result = result.storable();
        dispatch!(self, s => s.complete(result).await)
    }

    /// Reserve the oldest due delivery of `origin`, if any (expired ones met on the way are
    /// failed as `expired`), so that a slot whose target is answering can line up its next
    /// delivery while its current request is on the wire. A reservation is only that: the
    /// delivery shows `in_flight` under a new claim, but no attempt has started, and nothing may
    /// be sent before [`Store::start`] says so.
    pub async fn reserve_next(
        &self,
        origin: String,
        lease_ms: i64,
    ) -> Result<Option<model::Reservation>> {
        dispatch!(self, s => s.reserve_next(origin, lease_ms).await)
    }

    /// Start a reserved attempt, immediately before its request leaves: fenced, it checks that
    /// the reservation is still current (not canceled, not taken back) and that `expires_at` has
    /// not passed, and only then counts the attempt, writes its record with `started_at` and
    /// renews the lease. Durable before it returns `Started`.
    pub async fn start(
        &self,
        reservation: model::Reservation,
        lease_ms: i64,
    ) -> Result<model::StartOutcome> {
        dispatch!(self, s => s.start(reservation, lease_ms).await)
    }

    /// The three steps of a slot whose target has answered, as one: record `result` (if any),
    /// start the reserved `next` (as [`Store::start`]) and, if `reserve_after`, reserve the
    /// delivery after it for the same origin (as [`Store::reserve_next`]). Each step is durable
    /// before its part of the answer is `Ok`. On PostgreSQL they are one transaction in one
    /// round trip, and fail together; on SQLite they are written together by the group commit.
    /// Without a result it only starts (and reserves): a slot starting an attempt ahead of its
    /// turn.
    pub async fn advance(
        &self,
        result: Option<AttemptResult>,
        next: model::Reservation,
        reserve_after: bool,
        lease_ms: i64,
    ) -> model::Advanced {
        let result = result.storable();
        match self {
            Store::Sqlite(s) => {
                let origin = next.origin.clone();
                let complete = async {
                    match result {
                        Some(result) => Some(s.complete(result).await),
                        None => None,
                    }
                };
                let reserve = async {
                    match reserve_after {
                        true => s.reserve_next(origin, lease_ms).await,
                        false => Ok(None),
                    }
                };
                let (applied, started, reserved) =
                    tokio::join!(complete, s.start(next, lease_ms), reserve);
                model::Advanced {
                    applied,
                    started,
                    reserved,
                }
            }
            Store::Postgres(s) => s.advance(result, next, reserve_after, lease_ms).await,
        }
    }

    /// The step of a slot that keeps attempts started ahead of the one on the wire: record
    /// `result` (if any) and take the oldest due delivery of `origin` for the slot. An
    /// at-least-once delivery is claimed with its attempt started, as [`Store::claim_due`]
    /// claims — one change of its row where [`Store::reserve_next`] and [`Store::start`] take
    /// two; an at-most-once one is only reserved, its attempt started when its turn comes, so
    /// that a crash never finds it started and unsent. Each part is durable before its part of
    /// the answer is `Ok`; the steps of concurrent slots are written together, as
    /// [`Store::advance`] writes them.
    pub async fn take_next(
        &self,
        result: Option<AttemptResult>,
        origin: String,
        lease_ms: i64,
    ) -> model::Took {
        let result = result.storable();
        match self {
            Store::Sqlite(s) => {
                let complete = async {
                    match result {
                        Some(result) => Some(s.complete(result).await),
                        None => None,
                    }
                };
                let (applied, taken) = tokio::join!(complete, s.take_next(origin, lease_ms));
                model::Took { applied, taken }
            }
            Store::Postgres(s) => s.take_next(result, origin, lease_ms).await,
        }
    }

    /// Give back a reservation whose attempt never started: the delivery is pending again, its
    /// attempt count and history as before. `false` if the claim was no longer current or its
    /// attempt had started.
    pub async fn release(&self, id: String, claim_seq: u32) -> Result<bool> {
        dispatch!(self, s => s.release(id, claim_seq).await)
    }

    /// Give back an attempt that started but whose request was never sent (a slot that
    /// started it ahead of its turn stopped first): its record is removed and its count undone,
    /// and the delivery is pending again as if it had only been reserved and released — the
    /// attempt never happened. Only for a request known not to have left: one that may have is
    /// recorded with [`Store::complete`]. `false` if the claim was no longer current or its
    /// attempt has a result.
    pub async fn unstart(&self, id: String, claim_seq: u32) -> Result<bool> {
        dispatch!(self, s => s.unstart(id, claim_seq).await)
    }

    /// Give back a claimed delivery, unsent, whose URL answered 410 Gone to another request:
    /// its attempt undone if `started` (as [`Store::unstart`]), pending and *parked* (due at
    /// [`model::PARKED`]: never, until [`Store::unpark`]). `false` if the claim was no longer
    /// current.
    pub async fn park(&self, id: String, claim_seq: u32, started: bool) -> Result<bool> {
        dispatch!(self, s => s.park(id, claim_seq, started).await)
    }

    /// Park every pending delivery of `origin` to `url` (a URL without its query: deliveries
    /// to it with any query): none is due until [`Store::unpark`]. The number parked.
    pub async fn park_url(&self, origin: String, url: String) -> Result<u64> {
        dispatch!(self, s => s.park_url(origin, url).await)
    }

    /// Make the parked deliveries of `origin` due now: all of them, or only those to `url`
    /// (without its query). The number made due.
    pub async fn unpark(&self, origin: String, url: Option<String>) -> Result<u64> {
        dispatch!(self, s => s.unpark(origin, url).await)
    }

    /// The URLs (as stored, queries included) that parked deliveries wait for, at most
    /// `limit` of them.
    pub async fn parked_urls(&self, limit: u32) -> Result<Vec<String>> {
        dispatch!(self, s => s.parked_urls(limit).await)
    }

    /// At start-up, when the previous owner of every claim is known to be dead (SQLite, whose
    /// file lock proves it; never on a database other hosts share): make every in-flight
    /// delivery pending again, due at once. Started attempts are recorded as
    /// interrupted (`daemon_restart`, not charged); reservations are released.
    ///
    /// At-most-once attempts that had started become `unknown` instead (their request may have
    /// reached the target; a restart never resends them), their first reconciliation check due
    /// `check_in_ms` later.
    pub async fn recover(&self, check_in_ms: i64) -> Result<model::Reclaimed> {
        dispatch!(self, s => s.recover(check_in_ms).await)
    }

    /// Renew the leases of the claims in `live` (id and claim sequence of attempts this process
    /// is running) to `lease_ms` from now, then take back every other claim whose lease has run
    /// out, as [`Store::recover`] does (code `lease_expired`). One step on the store's clock, so
    /// a live attempt's lease is never taken, whatever the wall clock does.
    pub async fn renew_and_reclaim(
        &self,
        live: Vec<(String, u32)>,
        lease_ms: i64,
        check_in_ms: i64,
    ) -> Result<model::Reclaimed> {
        dispatch!(self, s => s.renew_and_reclaim(live, lease_ms, check_in_ms).await)
    }

    /// Operator decision on an at-most-once delivery in `unknown` or `manual_review`:
    /// `succeeded` (with the target's id if known), `failed`, or `resend` (pending again, a new
    /// cycle). `note` says why and is kept in the transition log. Refused (`Invalid`) from any
    /// other status.
    pub async fn resolve(
        &self,
        id: String,
        resolution: model::Resolution,
        note: String,
    ) -> Result<TransitionOutcome> {
        let (resolution, note) = (resolution.storable(), note.storable());
        dispatch!(self, s => s.resolve(id, resolution, note).await)
    }

    /// A 2xx that answered an at-most-once attempt after its claim was taken back ([`Self::complete`]
    /// answered `Fenced`): when the delivery is still `unknown` or in `manual_review` from that
    /// attempt, the answer is recorded on the attempt and the delivery settles `succeeded`
    /// (`late_answer` in the transition log). Whether it did; anything else is left unchanged.
    pub async fn late_answer(&self, result: AttemptResult) -> Result<bool> {
        let result = result.storable();
        dispatch!(self, s => s.late_answer(result).await)
    }

    /// Record one reconciliation step: the check itself (always kept) and its verdict, applied
    /// only while the delivery is still `unknown` (`Fenced` otherwise: an operator came first).
    pub async fn record_check(&self, result: model::CheckResult) -> Result<Applied> {
        let result = result.storable();
        dispatch!(self, s => s.record_check(result).await)
    }

    /// `unknown` deliveries whose next check is due, soonest first, at most `limit` (without
    /// headers and bodies).
    pub async fn due_checks(&self, limit: u32) -> Result<Vec<Delivery>> {
        dispatch!(self, s => s.due_checks(limit).await)
    }

    /// When the next reconciliation check of any `unknown` delivery is due.
    pub async fn next_check(&self) -> Result<Option<Millis>> {
        dispatch!(self, s => s.next_check().await)
    }

    /// The reconciliation checks of a delivery, oldest first; `None` if the delivery is unknown.
    pub async fn checks(&self, id: String) -> Result<Option<Vec<model::Check>>> {
        dispatch!(self, s => s.checks(id).await)
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

    /// [`Store::retry`] of each of `ids`, for a bulk action: one transaction on PostgreSQL (so
    /// a page of a bulk retry costs one commit, not one each), one job of the writer on SQLite.
    /// An error leaves all of them as they were. The outcomes in the order of `ids`. Meant for
    /// a bounded number of ids (a bulk action's chunk).
    pub async fn retry_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        dispatch!(self, s => s.retry_each(ids).await)
    }

    /// [`Store::cancel`] of each of `ids`, as [`Store::retry_each`].
    pub async fn cancel_each(&self, ids: Vec<String>) -> Result<Vec<TransitionOutcome>> {
        dispatch!(self, s => s.cancel_each(ids).await)
    }

    /// A small durable write, to prove the store can write right now.
    pub async fn ping(&self) -> Result<()> {
        dispatch!(self, s => s.ping().await)
    }

    pub async fn get(&self, id: String) -> Result<Option<Delivery>> {
        dispatch!(self, s => s.get(id).await)
    }

    /// The delivery `id` with everything kept of it — headers and body as stored, the digest
    /// its idempotency key is compared by, its attempts, transitions and checks — for an
    /// export; `None` if there is none.
    pub async fn export(&self, id: String) -> Result<Option<model::DeliveryRecord>> {
        dispatch!(self, s => s.export(id).await)
    }

    /// Write an exported delivery with its history, in one transaction, durable when `Ok`.
    /// Never overwrites: the same id with the same request is `Existing`; the same id with
    /// another request, or an idempotency key another delivery holds, is a `Conflict`. The
    /// row is written as given: the caller decides what an in-flight delivery becomes.
    pub async fn import(&self, record: model::DeliveryRecord) -> Result<model::ImportOutcome> {
        let record = record.storable();
        dispatch!(self, s => s.import(record).await)
    }

    /// Oldest first, without headers and bodies; `after` is a cursor from a previous page.
    pub async fn list(
        &self,
        status: Option<DeliveryStatus>,
        limit: u32,
        after: Option<String>,
    ) -> Result<Page> {
        let filter = model::ListFilter {
            status,
            ..model::ListFilter::default()
        };
        self.list_filtered(filter, limit, after).await
    }

    /// The deliveries `filter` picks, in its order, without headers and bodies; `after` is a
    /// cursor from a previous page of the same listing.
    pub async fn list_filtered(
        &self,
        filter: model::ListFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<Page> {
        dispatch!(self, s => s.list(filter, limit, after).await)
    }

    /// The attempt history across all cycles, oldest first; `None` if the delivery is unknown.
    pub async fn attempts(&self, id: String) -> Result<Option<Vec<Attempt>>> {
        dispatch!(self, s => s.attempts(id).await)
    }

    /// Every status change of the delivery, oldest first (the transition log); `None` if the
    /// delivery is unknown. Every write that changes a status appends to it in the same
    /// transaction.
    pub async fn transitions(&self, id: String) -> Result<Option<Vec<model::Transition>>> {
        dispatch!(self, s => s.transitions(id).await)
    }

    /// The earliest due time of pending work whose origin is not in `saturated`.
    pub async fn next_due(&self, saturated: Vec<String>) -> Result<Option<Millis>> {
        dispatch!(self, s => s.next_due(saturated).await)
    }

    /// Origins that have pending or in-flight work, with how much, in origin order after
    /// `after` (a cursor: the last origin of the previous page). From counts the store keeps,
    /// so the cost does not grow with the backlog.
    pub async fn origins(
        &self,
        limit: u32,
        after: Option<String>,
    ) -> Result<Vec<model::OriginCounts>> {
        dispatch!(self, s => s.origins(limit, after).await)
    }

    /// How many deliveries waiting to be sent (`pending` or `in_flight`) name `secret` to sign
    /// them (`sign.secretRef`). Counted over the backlog (the status index), not the whole
    /// table: for a reload's warning, not a hot path.
    pub async fn waiting_on_secret(&self, secret: String) -> Result<u64> {
        dispatch!(self, s => s.waiting_on_secret(secret).await)
    }

    /// Counts by status (kept by the store, not counted), the oldest due time, database size.
    pub async fn stats(&self) -> Result<Stats> {
        dispatch!(self, s => s.stats().await)
    }

    /// Notified whenever a committed write made work due (a create, an operator's retry, a
    /// claim given back or taken back), whether or not its caller is still waiting for the answer.
    pub fn work_available(&self) -> std::sync::Arc<tokio::sync::Notify> {
        dispatch!(self, s => s.work_available())
    }

    /// How many write transactions have failed since the store was opened: a readiness answer
    /// given before the latest failure is out of date.
    pub fn write_failures(&self) -> u64 {
        dispatch!(self, s => s.writer_stats().failures.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Install an observer of commits (metrics). Only the first call has an effect.
    pub fn observe_commits(&self, observer: std::sync::Arc<dyn CommitObserver>) {
        dispatch!(self, s => { let _ = s.writer_stats().observer.set(observer); })
    }

    /// Persist a new task, or resolve its (scope, key) against an existing one: the same digest
    /// gives the existing task in its current state, another digest a conflict. `Created` only
    /// after the row is durable; (scope, key) is unique, so racing submissions create one task.
    pub async fn insert_task(&self, new: tasks::NewTask) -> Result<tasks::TaskInsert> {
        dispatch!(self, s => s.insert_task(new).await)
    }

    /// Claim up to `limit` due pending tasks of `types` for one attempt each: `running`, the
    /// attempt counted and recorded (durable before this returns), leased for `lease_ms` to
    /// `executor`. Tasks past their queue or retry deadline are ended first.
    pub async fn claim_tasks(
        &self,
        limit: u32,
        types: Vec<tasks::ClaimType>,
        lease_ms: i64,
        executor: tasks::Executor,
    ) -> Result<tasks::Claimed> {
        dispatch!(self, s => s.claim_tasks(limit, types, lease_ms, executor).await)
    }

    /// Record how an attempt ended and where the task goes (`retry_at`: pending again).
    /// Fenced by the claim: `None` if the task is no longer running under it. A cancel an
    /// operator requested before this wins over every outcome but success: the task ends
    /// `canceled` and runs no further attempt.
    pub async fn finish_task(
        &self,
        end: tasks::TaskAttemptEnd,
    ) -> Result<Option<tasks::TaskStatus>> {
        let end = end.storable();
        dispatch!(self, s => s.finish_task(end).await)
    }

    /// [`Store::finish_task`], and in the same commit claim the next due task of `types` for
    /// the slot the attempt frees (none if `types` is empty): a busy runner pays one commit per
    /// task.
    pub async fn finish_and_claim(
        &self,
        end: tasks::TaskAttemptEnd,
        types: Vec<tasks::ClaimType>,
        lease_ms: i64,
        executor: tasks::Executor,
    ) -> Result<(Option<tasks::TaskStatus>, Option<tasks::ClaimedTask>)> {
        let end = end.storable();
        dispatch!(self, s => s.finish_and_claim(end, types, lease_ms, executor).await)
    }

    /// End pending tasks whose queue timeout or retry deadline passed. Returns how many.
    pub async fn expire_tasks(&self, limit: u32) -> Result<u64> {
        dispatch!(self, s => s.expire_tasks(limit).await)
    }

    /// Operator cancel: pending or `manual_review` → canceled; running → marked for its runner.
    pub async fn cancel_task(&self, id: String) -> Result<tasks::TaskAction> {
        dispatch!(self, s => s.cancel_task(id).await)
    }

    /// Operator retry from `failed`, `timed_out`, `interrupted` or `manual_review`: pending at
    /// once with `extra_attempts` more attempts.
    pub async fn retry_task(&self, id: String, extra_attempts: u32) -> Result<tasks::TaskAction> {
        dispatch!(self, s => s.retry_task(id, extra_attempts).await)
    }

    /// Move a task to `to` (an interrupted task's policy, an operator's decision) if the state
    /// machine allows it from where it is; `Invalid` otherwise.
    pub async fn decide_task(
        &self,
        id: String,
        to: tasks::TaskStatus,
        reason: String,
        note: Option<String>,
    ) -> Result<tasks::TaskAction> {
        let note = note.storable();
        dispatch!(self, s => s.decide_task(id, to, reason, note).await)
    }

    /// At start-up, when the previous owner of every claim is known to be dead (as for
    /// [`Store::recover`]): every running task is taken over by `executor` (`daemon_restart`)
    /// for it to end what is left of the attempt. The tasks stay `running`, with their locks and
    /// quota slots, leased to `executor`, until [`Store::settle_orphan`].
    pub async fn recover_tasks(
        &self,
        executor: tasks::Executor,
        lease_ms: i64,
    ) -> Result<Vec<tasks::Orphaned>> {
        dispatch!(self, s => s.recover_tasks(executor, lease_ms).await)
    }

    /// Running tasks whose lease ran out under another executor (it stopped renewing: it died
    /// or lost the store) are taken over by `executor` (`lease_expired`), as
    /// [`Store::recover_tasks`] does. The old executor's claim is fenced off.
    pub async fn expire_task_leases(
        &self,
        executor: tasks::Executor,
        lease_ms: i64,
    ) -> Result<Vec<tasks::Orphaned>> {
        dispatch!(self, s => s.expire_task_leases(executor, lease_ms).await)
    }

    /// The executors other than `me` that hold running tasks on `host` (the host of the
    /// lease holder): on a restart, earlier runs of this daemon on this host, which the daemon
    /// can tell dead or alive.
    pub async fn task_executors_on(&self, host: String, me: String) -> Result<Vec<String>> {
        dispatch!(self, s => s.task_executors_on(host, me).await)
    }

    /// Take over at once (`daemon_restart`), lease or not, the running tasks held by `dead`:
    /// executors known to be gone. Otherwise as [`Store::expire_task_leases`].
    pub async fn take_over_tasks_from(
        &self,
        dead: Vec<String>,
        executor: tasks::Executor,
        lease_ms: i64,
    ) -> Result<Vec<tasks::Orphaned>> {
        dispatch!(self, s => s.take_over_tasks_from(dead, executor, lease_ms).await)
    }

    /// Settle a task taken over as orphaned, once its attempt's processes are gone (see
    /// [`tasks::OrphanEnd`]). Fenced by the claim: `None` if it is no longer held under it.
    /// Returns where the task went.
    pub async fn settle_orphan(&self, end: tasks::OrphanEnd) -> Result<Option<tasks::TaskStatus>> {
        dispatch!(self, s => s.settle_orphan(end).await)
    }

    /// Pending tasks of a type not in `declared` go to `manual_review` (`type_undeclared`),
    /// giving up the locks they kept through a backoff. Only for a store no other host shares:
    /// on a shared one a type may be declared elsewhere. Returns their ids.
    pub async fn review_undeclared_tasks(&self, declared: Vec<String>) -> Result<Vec<String>> {
        dispatch!(self, s => s.review_undeclared_tasks(declared).await)
    }

    /// Extend by `lease_ms` the leases of the attempts running here, given as (task id, claim).
    /// Returns those still current (an attempt missing from it was taken over: its executor
    /// must stop it), each with whether a cancel was requested.
    pub async fn renew_task_leases(
        &self,
        running: Vec<(String, u32)>,
        lease_ms: i64,
    ) -> Result<Vec<tasks::Renewed>> {
        dispatch!(self, s => s.renew_task_leases(running, lease_ms).await)
    }

    /// Record that attempt `attempt` of task `id` finished step `name`: durable when this
    /// returns `Recorded`. Only while that attempt runs; a step done before stays as it was.
    pub async fn record_task_step(
        &self,
        id: String,
        attempt: u32,
        name: String,
    ) -> Result<tasks::StepRecord> {
        dispatch!(self, s => s.record_task_step(id, attempt, name).await)
    }

    /// The steps of a task, in the order they were done; `None`: no such task.
    pub async fn task_steps(&self, id: String) -> Result<Option<Vec<tasks::TaskStep>>> {
        dispatch!(self, s => s.task_steps(id).await)
    }

    /// Held resource locks and, for each, the pending tasks that want it (of at most
    /// `max_waiting` pending tasks with locks).
    pub async fn held_task_locks(&self, max_waiting: u32) -> Result<Vec<tasks::HeldLock>> {
        dispatch!(self, s => s.held_task_locks(max_waiting).await)
    }

    pub async fn get_task(&self, id: String) -> Result<Option<tasks::Task>> {
        dispatch!(self, s => s.get_task(id).await)
    }

    /// Oldest first; filters are optional; `after` is a cursor from a previous page.
    /// Tasks in id (creation) order, those `filter` matches; `after` is the previous page's
    /// cursor.
    pub async fn list_tasks(
        &self,
        filter: tasks::TaskFilter,
        limit: u32,
        after: Option<String>,
    ) -> Result<tasks::TaskPage> {
        dispatch!(self, s => s.list_tasks(filter, limit, after).await)
    }

    pub async fn task_attempts(&self, id: String) -> Result<Option<Vec<tasks::TaskAttempt>>> {
        dispatch!(self, s => s.task_attempts(id).await)
    }

    pub async fn task_transitions(&self, id: String) -> Result<Option<Vec<tasks::TaskTransition>>> {
        dispatch!(self, s => s.task_transitions(id).await)
    }

    /// When the runner of `types` has work next: a due task, or a deadline to enforce.
    pub async fn next_task_due(&self, types: Vec<String>) -> Result<Option<Millis>> {
        dispatch!(self, s => s.next_task_due(types).await)
    }

    /// Tasks by status, every status present.
    pub async fn task_counts(&self) -> Result<Vec<(tasks::TaskStatus, u64)>> {
        dispatch!(self, s => s.task_counts().await)
    }

    /// Notified after a commit that made a task due or asked to cancel a running one.
    pub fn tasks_available(&self) -> std::sync::Arc<tokio::sync::Notify> {
        dispatch!(self, s => s.tasks_available())
    }

    /// The store's clock, in milliseconds since the epoch.
    pub fn now_ms(&self) -> Millis {
        dispatch!(self, s => s.now_ms())
    }

    /// How this binary fits a shared database's schema now: another host of a newer spoold may
    /// have migrated it past what this one can run with (see `postgres::SchemaFit`). `None`
    /// for SQLite, which one process owns.
    pub async fn schema_fit(&self) -> Result<Option<postgres::SchemaFit>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(s) => s.schema_fit().await.map(Some),
        }
    }

    /// What the PostgreSQL server's replication promises an acknowledged commit (read at most
    /// every few seconds); `None` for SQLite, whose promise is its own disk.
    pub async fn replication(&self) -> Result<Option<postgres::Replication>> {
        match self {
            Store::Sqlite(_) => Ok(None),
            Store::Postgres(s) => s.replication().await.map(Some),
        }
    }

    /// The last [`Store::replication`] read, without asking the server.
    pub fn last_replication(&self) -> Option<postgres::Replication> {
        match self {
            Store::Sqlite(_) => None,
            Store::Postgres(s) => s.last_replication(),
        }
    }

    /// Whether other hosts may share this store (PostgreSQL): their claims are alive and can
    /// only be taken back when their leases lapse.
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }
}
