//! The delivery state machine as the store sees it: statuses, the allowed transitions, and the
//! records that cross the store boundary. Every backend implements exactly these rules; the
//! conformance suite in `tests/it` checks that they do.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

pub use crate::clock::Millis;

/// Where a delivery is in its life.
///
/// ```text
///             claim              2xx
///  pending ───────────▶ in_flight ─────▶ succeeded
///    ▲  ▲                 │  │
///    │  └── retryable ────┘  └── permanent / exhausted / expired ──▶ failed
///    │                                                              │
///    └──────────────────────── retry (new cycle) ───────────────────┘
///  pending | in_flight ── cancel ──▶ canceled
/// ```
///
/// At-most-once deliveries add two statuses. A request that may have reached the target
/// without a definite answer is never sent again by itself:
///
/// ```text
///  in_flight ── may have arrived ──▶ unknown ── one match ──▶ succeeded
///                                      │
///                                      └── several / none within the window ──▶ manual_review
///  unknown | manual_review ── operator: resolve ──▶ succeeded | failed | pending (resend)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryStatus {
    Pending,
    InFlight,
    Succeeded,
    Failed,
    Canceled,
    /// At-most-once: the request may have reached the target, and nobody knows yet whether it
    /// did. Not resent; the reconciler asks the target.
    Unknown,
    /// At-most-once: reconciliation could not settle it; a person must.
    ManualReview,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 7] = [
        DeliveryStatus::Pending,
        DeliveryStatus::InFlight,
        DeliveryStatus::Succeeded,
        DeliveryStatus::Failed,
        DeliveryStatus::Canceled,
        DeliveryStatus::Unknown,
        DeliveryStatus::ManualReview,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::InFlight => "in_flight",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Canceled => "canceled",
            DeliveryStatus::Unknown => "unknown",
            DeliveryStatus::ManualReview => "manual_review",
        }
    }
}

/// An operator's action on one delivery (see [`Delivery::refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorAction {
    Cancel,
    /// A new cycle of attempts for a `failed` delivery.
    Retry,
    /// A person's decision on an at-most-once delivery whose outcome is not known.
    Resolve,
}

/// How a delivery may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Sent until it succeeds (the target should deduplicate by `X-Spoold-Delivery-ID`).
    #[default]
    AtLeastOnce,
    /// Never sent again once it may have reached the target: such an outcome is `unknown`.
    AtMostOnce,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::AtLeastOnce => "at_least_once",
            Mode::AtMostOnce => "at_most_once",
        }
    }
}

impl FromStr for Mode {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Mode::AtLeastOnce, Mode::AtMostOnce]
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of the status (or mode) names.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown delivery status or mode {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for DeliveryStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// A request body exactly as it was submitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No body at all.
    None,
    /// The bytes of a JSON value, kept exactly as they arrived (never re-serialised).
    Json(Vec<u8>),
    /// Arbitrary bytes (submitted as base64).
    Binary(Vec<u8>),
}

impl Body {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Body::None => &[],
            Body::Json(b) | Body::Binary(b) => b,
        }
    }
}

/// Everything needed to create a delivery. The caller validates; the store only persists.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub id: String,
    pub idempotency_key: Option<String>,
    pub target_url: String,
    /// `scheme://host:port`, the key for per-target concurrency.
    pub origin: String,
    pub method: String,
    /// Canonical header names, sorted, no duplicates.
    pub headers: Vec<(String, String)>,
    pub body: Body,
    pub max_attempts: u32,
    pub not_before: Option<Millis>,
    pub expires_at: Option<Millis>,
    /// Without `expires_at`, give up this long after creation (the default retry window), by
    /// the store's clock.
    pub retry_window_ms: Option<Millis>,
    /// Opaque digest of every field that makes two requests "the same" for idempotency.
    pub request_digest: Vec<u8>,
    /// The same request's digests by spoold v0.1.0's recipe, when it is one v0.1.0 could have
    /// taken (over the body as sent, and as v0.1.0's `spoolctl` would have sent it). A
    /// delivery imported from a v0.1.0 journal keeps that journal's `requestHash` as its key's
    /// digest, so that a client retrying its create after the move finds it.
    pub v010_request_hashes: Vec<Vec<u8>>,
    pub mode: Mode,
    /// At-most-once: the business key the target can be searched by.
    pub fingerprint: Option<String>,
    /// At-most-once: how to ask the target (the daemon's own JSON; the store only keeps it).
    pub reconcile: Option<String>,
    /// JSON pointer to the remote id in a 2xx response body.
    pub remote_id_pointer: Option<String>,
    /// At-most-once: how long an `unknown` outcome is watched before a person must decide.
    pub observation_window_ms: Option<Millis>,
    /// The name of the `[secrets]` entry that signs every attempt (Standard Webhooks), in place
    /// of a `[[targets]]` rule's. The name only: keys are never stored.
    pub sign_secret: Option<String>,
}

impl NewDelivery {
    /// Whether a key stored with `digest` was given for this same request: by spoold's own
    /// digest, or by spoold v0.1.0's (a delivery imported from its journal). The two recipes
    /// hash different texts, so one cannot stand for the other.
    pub fn same_request(&self, digest: &[u8]) -> bool {
        digest == self.request_digest.as_slice()
            || self.v010_request_hashes.iter().any(|hash| hash == digest)
    }
}

/// The observation window of an at-most-once delivery that names none.
pub const DEFAULT_OBSERVATION_WINDOW_MS: Millis = 3_600_000;

/// A stored delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: String,
    pub idempotency_key: Option<String>,
    pub target_url: String,
    pub origin: String,
    pub method: String,
    /// `None` when the query did not load them (listings).
    pub headers: Option<Vec<(String, String)>>,
    /// `None` when the query did not load it (listings).
    pub body: Option<Body>,
    pub status: DeliveryStatus,
    /// Attempts started in the current cycle, including interrupted ones; the last
    /// `X-Spoold-Attempt` value sent.
    pub attempts: u32,
    /// Attempts of this cycle that were interrupted (shutdown, crash) and so are not charged
    /// against `max_attempts`.
    pub uncharged: u32,
    pub max_attempts: u32,
    pub cycle: u32,
    pub last_error: Option<String>,
    pub last_error_code: Option<String>,
    pub last_response_code: Option<u16>,
    pub created_at: Millis,
    /// The last status change or recorded result (not the start of an attempt that was
    /// reserved, nor a lease renewal: on PostgreSQL those then touch no indexed column).
    pub updated_at: Millis,
    pub next_attempt_at: Option<Millis>,
    pub not_before: Option<Millis>,
    pub expires_at: Option<Millis>,
    pub lease_until: Option<Millis>,
    pub mode: Mode,
    pub fingerprint: Option<String>,
    pub reconcile: Option<String>,
    pub remote_id_pointer: Option<String>,
    pub observation_window_ms: Option<Millis>,
    /// The target's id for what it created, from a 2xx body or reconciliation.
    pub remote_id: Option<String>,
    /// When it last became `unknown`.
    pub unknown_since: Option<Millis>,
    /// When its observation window closes (`unknown` after that needs a person).
    pub review_at: Option<Millis>,
    /// When the reconciler asks the target next, while `unknown`.
    pub check_at: Option<Millis>,
    /// Reconciliation checks made so far.
    pub checks: u32,
    /// The `[secrets]` entry named to sign it (see [`NewDelivery::sign_secret`]).
    pub sign_secret: Option<String>,
}

impl Delivery {
    /// Whether an at-most-once request of this cycle may have reached the target: it became
    /// `unknown` (whatever was decided since), or it failed on an answer of the target's that
    /// proves it arrived ([`answer_proves_arrival`]). Such a delivery is sent again only by a
    /// person (`resolve` with `resend` and a note), never by `retry` — single, bulk, or of an
    /// imported copy, which carries these fields.
    pub fn may_have_arrived(&self) -> bool {
        self.mode == Mode::AtMostOnce
            && (self.unknown_since.is_some()
                || (self.status == DeliveryStatus::Failed && self.failed_on_an_answer()))
    }

    /// Its last attempt failed on the target's answer (the error code of an HTTP status, and
    /// the status), and that answer proves the request arrived.
    fn failed_on_an_answer(&self) -> bool {
        matches!(
            self.last_error_code.as_deref(),
            Some(ANSWERED | REDIRECT_NOT_FOLLOWED)
        ) && self.last_response_code.is_some_and(answer_proves_arrival)
    }

    /// Why `action` may not change this delivery now (`None`: it may). Both backends judge
    /// an operator's action here, on the row as it is locked.
    ///
    /// - cancel: from `pending` or `in_flight` — but an at-most-once delivery in flight may
    ///   already be at the target, so canceling it would claim what nobody knows;
    /// - retry: from `failed` — unless its request may have arrived ([`Self::may_have_arrived`]:
    ///   the target answered it, or an operator who resolved it `failed` declared it must not
    ///   be sent);
    /// - resolve: from `unknown` or `manual_review`, and from a `failed` that may have arrived
    ///   (to resend it deliberately, or to correct the record).
    pub fn refusal(&self, action: OperatorAction) -> Option<TransitionOutcome> {
        use DeliveryStatus::{Failed, InFlight, ManualReview, Pending, Unknown};
        let at_most_once = self.mode == Mode::AtMostOnce;
        let (from_status, in_mode) = match action {
            OperatorAction::Cancel => (
                matches!(self.status, Pending | InFlight),
                !(at_most_once && self.status == InFlight),
            ),
            OperatorAction::Retry => (self.status == Failed, !self.may_have_arrived()),
            OperatorAction::Resolve => (
                matches!(self.status, Unknown | ManualReview)
                    || (self.status == Failed && self.may_have_arrived()),
                true,
            ),
        };
        if !from_status {
            Some(TransitionOutcome::Invalid(self.status))
        } else if !in_mode {
            Some(TransitionOutcome::InvalidForMode(self.status))
        } else {
            None
        }
    }

    /// The row an insert of `new` at `now` writes, due at `due`: what a backend answers a
    /// create with, without reading the row back.
    pub fn created(
        new: &NewDelivery,
        now: Millis,
        due: Millis,
        expires_at: Option<Millis>,
    ) -> Delivery {
        Delivery {
            id: new.id.clone(),
            idempotency_key: new.idempotency_key.clone(),
            target_url: new.target_url.clone(),
            origin: new.origin.clone(),
            method: new.method.clone(),
            headers: Some(new.headers.clone()),
            body: Some(new.body.clone()),
            status: DeliveryStatus::Pending,
            attempts: 0,
            uncharged: 0,
            max_attempts: new.max_attempts,
            cycle: 1,
            last_error: None,
            last_error_code: None,
            last_response_code: None,
            created_at: now,
            updated_at: now,
            next_attempt_at: Some(due),
            not_before: new.not_before,
            expires_at,
            lease_until: None,
            mode: new.mode,
            fingerprint: new.fingerprint.clone(),
            reconcile: new.reconcile.clone(),
            remote_id_pointer: new.remote_id_pointer.clone(),
            observation_window_ms: new.observation_window_ms,
            remote_id: None,
            unknown_since: None,
            review_at: None,
            check_at: None,
            checks: 0,
            sign_secret: new.sign_secret.clone(),
        }
    }
}

/// The error code of an attempt the target answered with a status that failed it.
const ANSWERED: &str = "http_status";
/// The same for a 3xx that was not followed (before such an answer made an at-most-once
/// delivery `unknown`, it failed it).
const REDIRECT_NOT_FOLLOWED: &str = "redirect_not_followed";

/// Whether an at-most-once delivery that failed on this HTTP status had its request arrive
/// at the target. Every answer proves that the request reached the target, except those that
/// say it was not processed — the ones spoold sends again by itself at most once, and which
/// fail a delivery only when its attempts ran out: 408, 425, 429, and a 5xx (a 503 with
/// `Retry-After`, or one the target's rule trusts). 501 and 505 are final refusals the
/// target answered, like a 4xx: arrived. (The daemon's classification,
/// `deliveries::retry::classify_status_at_most_once`, is held to this by a test.)
pub fn answer_proves_arrival(status: u16) -> bool {
    !(matches!(status, 408 | 425 | 429)
        || ((500..=599).contains(&status) && !matches!(status, 501 | 505)))
}

/// How soon a created delivery must be due for its create to wake the schedulers (on
/// PostgreSQL: every host's, by a notification). Later work is not announced: a scheduler that
/// has room looks for the earliest due time at least this often (spoold's sweep), so it finds
/// such a delivery before it is due. A burst of deliveries created for later (`notBefore`)
/// then costs no claims: without this rule, each create batch woke every host's scheduler into
/// a claim that found nothing (docs/src/lab-notes.md, "Creates for later wake nobody").
pub const WAKE_WITHIN_MS: Millis = 5_000;

/// The due time of a *parked* pending delivery: one whose URL answered 410 Gone. It is never
/// due (9999-12-31T23:59:59Z) until an operator resumes the URL or its origin
/// ([`crate::Store::unpark`]); it still expires at its deadline.
pub const PARKED: Millis = 253_402_300_799_000;

/// The result of an idempotent insert.
#[derive(Debug, Clone)]
pub enum InsertOutcome {
    /// A new delivery was written and committed.
    Created(Delivery),
    /// The idempotency key was known with the same fingerprint: the existing delivery.
    Existing(Delivery),
    /// The idempotency key was known with a different fingerprint.
    Conflict { existing_id: String },
    /// The database is over its admission limit; nothing was written.
    Full { db_bytes: u64, limit: u64 },
    /// The key was new and `expires_at` has already passed (by the store's clock); nothing was
    /// written.
    AlreadyExpired,
}

impl InsertOutcome {
    /// Whether this create made work due soon enough to wake the schedulers: a new delivery
    /// due within [`WAKE_WITHIN_MS`] of its creation.
    pub fn wakes(&self) -> bool {
        matches!(self, InsertOutcome::Created(d)
            if d.next_attempt_at.is_some_and(|due| due <= d.created_at.saturating_add(WAKE_WITHIN_MS)))
    }
}

/// A delivery claimed for one attempt: everything the sender needs, and the fence token.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub id: String,
    /// Fence token: results are applied only while the delivery still carries it.
    pub claim_seq: u32,
    /// The attempt number of this cycle (the `X-Spoold-Attempt` value).
    pub attempt: u32,
    pub target_url: String,
    pub origin: String,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Body,
    pub started_at: Millis,
    pub lease_until: Millis,
    pub mode: Mode,
    pub remote_id_pointer: Option<String>,
    /// The `[secrets]` entry named to sign it, if the create named one.
    pub sign_secret: Option<String>,
}

/// A delivery reserved for a slot's next attempt (see `Store::reserve_next`): in flight under
/// this claim, but no attempt has started and nothing may be sent until `Store::start` says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub id: String,
    /// Fence token, as in [`Claimed`].
    pub claim_seq: u32,
    pub origin: String,
}

/// What starting a reserved attempt found.
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per attempt and consumed at once, like ClaimBatch's claims"
)]
pub enum StartOutcome {
    /// The attempt has started (its record and `started_at` are written): send it now.
    Started(Claimed),
    /// The reservation is no longer this slot's (canceled, or taken back): send nothing.
    NotCurrent,
    /// `expires_at` had passed: the delivery is now failed as `expired`; send nothing.
    Expired,
}

/// What [`crate::Store::advance`] did, step by step: the result recorded (`None` when it was
/// given none), the reserved delivery started, the one after it reserved.
#[derive(Debug)]
pub struct Advanced {
    pub applied: Option<crate::error::Result<Applied>>,
    pub started: crate::error::Result<StartOutcome>,
    pub reserved: crate::error::Result<Option<Reservation>>,
}

/// The delivery a slot took for its next attempt (see [`crate::Store::take_next`]).
#[derive(Debug, Clone)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per attempt and consumed at once, like StartOutcome"
)]
pub enum Taken {
    /// At least once: claimed with its attempt started (recorded, `started_at` written):
    /// send it.
    Started(Claimed),
    /// At most once: only reserved; its attempt is started when its turn comes
    /// ([`crate::Store::start`]).
    Reserved(Reservation),
}

/// What [`crate::Store::take_next`] did: the result recorded (`None` when it was given none),
/// the next delivery taken (`None` when none was due).
#[derive(Debug)]
pub struct Took {
    pub applied: Option<crate::error::Result<Applied>>,
    pub taken: crate::error::Result<Option<Taken>>,
}

/// Claims taken back from owners that are gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reclaimed {
    /// Started attempts, recorded as interrupted (not charged) and due again at once.
    pub interrupted: u64,
    /// Reservations whose attempt never started, pending again as if never reserved.
    pub released: u64,
    /// Started at-most-once attempts, now `unknown` (never resent).
    pub unknown: u64,
}

impl Reclaimed {
    pub fn total(self) -> u64 {
        self.interrupted + self.released + self.unknown
    }
}

/// Per-target capacity a claim must respect.
#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// At most this many in flight per origin, unless `limits` says otherwise.
    pub per_origin: u32,
    /// What is in flight now, by origin (origins not named have none).
    pub in_flight: HashMap<String, u32>,
    /// Origins with their own limit: 0 pauses an origin, 1 lets a single probe through.
    pub limits: HashMap<String, u32>,
}

/// What a claim pass does with one due candidate (see [`ClaimPass::judge`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Take {
    /// The batch is full: stop.
    Enough,
    /// Its origin is at its limit: leave it for later.
    Skip,
    /// Its deadline has passed: fail it as `expired` instead of sending it.
    Expire,
    /// Claim it.
    Claim,
}

/// One claim pass's decisions, the same on every backend: due candidates are taken oldest due
/// first while the batch has room, an origin at its in-flight limit is skipped (and left out of
/// the next fetch), a candidate past its deadline is expired instead. `claim::run` (claim.rs)
/// reads the candidates through the backend, asks [`ClaimPass::judge`], has the backend do what
/// it says, and tells [`ClaimPass::claimed`] what it took.
#[derive(Debug)]
pub(crate) struct ClaimPass {
    capacity: Capacity,
    saturated: HashSet<String>,
    limit: u32,
    taken: u32,
}

impl ClaimPass {
    pub(crate) fn new(capacity: Capacity, limit: u32) -> ClaimPass {
        ClaimPass {
            saturated: capacity.saturated().into_iter().collect(),
            capacity,
            limit,
            taken: 0,
        }
    }

    /// Whether the batch has room for another claim.
    pub(crate) fn has_room(&self) -> bool {
        self.taken < self.limit
    }

    /// How many candidates to read at a time: enough that skipped and expired ones rarely
    /// force a second read.
    pub(crate) fn fetch(&self) -> i64 {
        i64::from(self.limit) * 2 + 16
    }

    /// Origins that can take nothing more now: a read of candidates leaves them out.
    pub(crate) fn saturated(&self) -> &HashSet<String> {
        &self.saturated
    }

    pub(crate) fn judge(&self, origin: &str, expires_at: Option<Millis>, now: Millis) -> Take {
        if !self.has_room() {
            Take::Enough
        } else if self.saturated.contains(origin) {
            Take::Skip
        } else if expires_at.is_some_and(|at| at <= now) {
            Take::Expire
        } else {
            Take::Claim
        }
    }

    /// A claim of `origin`'s was made: count it against its limit and the batch's.
    pub(crate) fn claimed(&mut self, origin: &str) {
        self.taken += 1;
        let limit = self.capacity.limit(origin);
        let n = self
            .capacity
            .in_flight
            .entry(origin.to_owned())
            .or_insert(0);
        *n += 1;
        if *n >= limit {
            self.saturated.insert(origin.to_owned());
        }
    }
}

impl Capacity {
    /// The in-flight limit of `origin`.
    pub fn limit(&self, origin: &str) -> u32 {
        self.limits.get(origin).copied().unwrap_or(self.per_origin)
    }

    /// Origins that cannot take another attempt now.
    pub fn saturated(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .in_flight
            .iter()
            .filter(|(o, n)| **n >= self.limit(o))
            .map(|(o, _)| o.clone())
            .collect();
        out.extend(
            self.limits
                .iter()
                .filter(|(o, l)| **l == 0 && !self.in_flight.contains_key(*o))
                .map(|(o, _)| o.clone()),
        );
        out
    }
}

/// What a claim pass did.
#[derive(Debug, Clone, Default)]
pub struct ClaimBatch {
    pub claimed: Vec<Claimed>,
    /// Deliveries that were due but past `expires_at`: failed with code `expired` instead.
    pub expired: u32,
}

/// How an attempt ended, as the delivery engine classified it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    Succeeded,
    /// Try again after this many milliseconds, unless the budget or `expires_at` forbids it.
    Retry {
        delay_ms: i64,
    },
    /// A permanent failure: no further attempts.
    Failed,
    /// The attempt was cut short by us (shutdown) and is not charged; due again at once.
    Interrupted,
    /// At-most-once: the request may have reached the target without a definite answer. The
    /// delivery becomes `unknown` and is never resent by itself; the reconciler's first check
    /// is due this many milliseconds later.
    Unknown {
        check_in_ms: i64,
    },
}

/// The outcome of one attempt, to be recorded.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub id: String,
    pub claim_seq: u32,
    pub disposition: Disposition,
    pub http_status: Option<u16>,
    pub error_code: Option<String>,
    /// At most 4 KiB; the store truncates longer text.
    pub error: Option<String>,
    pub duration_ms: i64,
    /// The target's id for what it created (from a 2xx body).
    pub remote_id: Option<String>,
}

/// What recording an attempt result did to the delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The delivery now has this status.
    Now(DeliveryStatus),
    /// The claim was no longer current (canceled, or reclaimed): only the attempt record changed.
    Fenced,
}

/// Stable outcome names of attempt records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    Succeeded,
    Retry,
    Failed,
    Interrupted,
    Unknown,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Retry => "retry",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Interrupted => "interrupted",
            AttemptOutcome::Unknown => "unknown",
        }
    }
}

/// One row of a delivery's attempt history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub cycle: u32,
    pub number: u32,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    /// `None` while the attempt is in progress.
    pub outcome: Option<String>,
    pub http_status: Option<u16>,
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub duration_ms: Option<i64>,
}

/// One status change of a delivery, as the transition log keeps it. Its reason codes:
/// `created`, `claimed`, `reserved`, `released`, `delivered`, an error code (`http_status`,
/// `connect_failed`, `timeout`, …, `daemon_restart`, `lease_expired`, `shutdown`), `expired`,
/// `canceled`, `retried`; for at-most-once also `reconciled`, `multiple_matches`,
/// `no_match_after_window`, `no_reconcile_configured`, `checks_failed_after_window`,
/// `resolved`, `resend`.
pub type Transition = crate::status_log::Transition<DeliveryStatus>;

impl crate::status_log::Logged for DeliveryStatus {
    const OWNERS: &'static str = "deliveries";
    const LOG: &'static str = "transitions";
    const KEY: &'static str = "delivery_id";
    const APPEND: &'static str = "INSERT INTO transitions (delivery_id, seq, from_status, \
        to_status, attempt, at, reason, note) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";

    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// One reconciliation check: a query to the target about an `unknown` delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub at: Millis,
    /// `None` when no answer came.
    pub http_status: Option<u16>,
    /// Matches found; `None` when the answer could not be read.
    pub matches: Option<u32>,
    /// Why the check failed (`http_status`, `timeout`, `target_blocked`, `invalid_response`, …).
    pub error_code: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// A delivery with everything kept of it, as an export writes it and an import reads it back:
/// the row with its headers and body as stored, the digest its idempotency key is compared by,
/// and its attempts, transitions and checks, oldest first.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRecord {
    pub delivery: Delivery,
    /// The digest of the request an idempotency key is compared by (deliveries with a key).
    pub request_digest: Option<Vec<u8>>,
    pub attempts: Vec<Attempt>,
    pub transitions: Vec<Transition>,
    pub checks: Vec<Check>,
}

/// What an import of one [`DeliveryRecord`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Written, with its history.
    Imported,
    /// A delivery with this id and the same request is there already: left as it is.
    Existing,
    /// Its id, or its idempotency key, belongs to another request (`existing_id`): not
    /// written, nothing overwritten.
    Conflict { existing_id: String },
}

impl DeliveryRecord {
    /// Whether `other` (the delivery stored under this record's id) is the same request: the
    /// same target, method, headers, body and idempotency key.
    pub fn same_request(&self, other: &Delivery) -> bool {
        let d = &self.delivery;
        d.target_url == other.target_url
            && d.method == other.method
            && d.headers == other.headers
            && d.body == other.body
            && d.idempotency_key == other.idempotency_key
    }
}

/// What a check (or the passing of the window) decides for an `unknown` delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckVerdict {
    /// Exactly one match: it arrived.
    Succeeded { remote_id: Option<String> },
    /// A person must decide; `reason` is the transition's code.
    ManualReview {
        reason: String,
        note: Option<String>,
    },
    /// Nothing settled: ask again at this time.
    AskAgain { at: Millis },
}

/// The result of one reconciliation step, to be recorded.
#[derive(Debug, Clone)]
pub struct CheckResult {
    pub id: String,
    /// The check made, if one was (none when the window closed without a reconcile config).
    pub check: Option<Check>,
    pub verdict: CheckVerdict,
}

/// An operator's decision on an `unknown` or `manual_review` delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// It did arrive (optionally with the target's id for it).
    Succeeded { remote_id: Option<String> },
    /// It did not arrive and must not be sent.
    Failed,
    /// Send it again: a new cycle, as an explicit decision.
    Resend,
}

/// Which deliveries a listing shows, in which order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    pub status: Option<DeliveryStatus>,
    /// Only to this origin (`scheme://host:port`).
    pub origin: Option<String>,
    /// Only to this URL, whatever its query (the URL without its query).
    pub url: Option<String>,
    /// Only those created at or after this time.
    pub created_after: Option<Millis>,
    /// Only those created before this time.
    pub created_before: Option<Millis>,
    /// Only those whose last attempt ended with this `lastErrorCode`.
    pub last_error_code: Option<String>,
    /// Newest first (ids are in creation order); oldest first otherwise.
    pub newest_first: bool,
}

/// How a URL without its query is matched against stored target URLs: the URL itself, or it
/// followed by a query or a fragment. Stored URLs are ASCII (serialized by the `url` crate),
/// so a prefix's length in characters is its length in bytes.
#[derive(Debug, Clone)]
pub(crate) struct UrlMatch {
    pub(crate) url: String,
    pub(crate) prefix_len: i64,
    pub(crate) with_query: String,
    pub(crate) with_fragment: String,
}

impl UrlMatch {
    pub(crate) fn new(url: &str) -> UrlMatch {
        UrlMatch {
            url: url.to_owned(),
            prefix_len: i64::try_from(url.len() + 1).unwrap_or(i64::MAX),
            with_query: format!("{url}?"),
            with_fragment: format!("{url}#"),
        }
    }
}

/// A page of a listing.
#[derive(Debug, Clone)]
pub struct Page {
    pub deliveries: Vec<Delivery>,
    /// Pass back as `after` to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Work waiting for one origin (`scheme://host:port`), from the store's own counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginCounts {
    pub origin: String,
    pub pending: u64,
    pub in_flight: u64,
}

/// Numbers for gauges.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub by_status: Vec<(DeliveryStatus, u64)>,
    /// Due time of the oldest pending delivery that is already due.
    pub oldest_due_at: Option<Millis>,
    pub db_bytes: u64,
}

/// Why an operator action was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per operator action and consumed at once; like InsertOutcome, it \
              carries the delivery by value so callers can move it into their response"
)]
pub enum TransitionOutcome {
    Done(Delivery),
    NotFound,
    /// The delivery is in a status the action does not apply to.
    Invalid(DeliveryStatus),
    /// The action does not apply to an at-most-once delivery in this status.
    InvalidForMode(DeliveryStatus),
}

impl TransitionOutcome {
    /// Whether the action was applied.
    pub fn is_done(&self) -> bool {
        matches!(self, TransitionOutcome::Done(_))
    }
}

/// The transition-log note of an `unknown` delivery settled by a 2xx that answered its attempt
/// after the attempt's claim was taken back (reason `late_answer`).
pub fn late_answer_note(http_status: Option<u16>) -> String {
    let status = http_status.map_or_else(|| "2xx".to_owned(), |s| s.to_string());
    format!("its attempt was answered HTTP {status} after its claim was taken back")
}

/// The longest error text kept per attempt and in `last_error`.
pub const MAX_ERROR_BYTES: usize = 4096;

/// Cut `text` to at most [`MAX_ERROR_BYTES`], on a character boundary.
pub fn clip_error(text: &str) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_pass_fills_the_batch_within_each_origins_limit() {
        let capacity = Capacity {
            per_origin: 2,
            in_flight: HashMap::from([("a".to_owned(), 1)]),
            limits: HashMap::from([("paused".to_owned(), 0)]),
        };
        let mut pass = ClaimPass::new(capacity, 3);
        assert!(pass.saturated().contains("paused"));
        assert_eq!(pass.judge("paused", None, 10), Take::Skip);
        assert_eq!(pass.judge("a", Some(10), 10), Take::Expire);
        assert_eq!(pass.judge("a", Some(11), 10), Take::Claim);
        pass.claimed("a");
        // a: 1 in flight + 1 claimed = its limit of 2.
        assert_eq!(pass.judge("a", None, 10), Take::Skip);
        assert!(pass.saturated().contains("a"));
        pass.claimed("b");
        assert_eq!(pass.judge("b", None, 10), Take::Claim);
        pass.claimed("b");
        assert!(!pass.has_room());
        assert_eq!(pass.judge("c", None, 10), Take::Enough);
    }

    #[test]
    fn status_round_trips() {
        for st in DeliveryStatus::ALL {
            assert_eq!(st.as_str().parse::<DeliveryStatus>().ok(), Some(st));
        }
        assert!("running".parse::<DeliveryStatus>().is_err());
    }

    #[test]
    fn capacity_limits() {
        let cap = Capacity {
            per_origin: 2,
            in_flight: HashMap::from([
                ("a".to_owned(), 2),
                ("b".to_owned(), 1),
                ("c".to_owned(), 1),
            ]),
            limits: HashMap::from([
                ("c".to_owned(), 1),
                ("d".to_owned(), 0),
                ("e".to_owned(), 1),
            ]),
        };
        let mut saturated = cap.saturated();
        saturated.sort();
        assert_eq!(saturated, ["a", "c", "d"]);
        assert_eq!((cap.limit("b"), cap.limit("e"), cap.limit("d")), (2, 1, 0));
    }

    #[test]
    fn clip_error_respects_char_boundaries() {
        let s = "é".repeat(3000); // 6000 bytes
        let clipped = clip_error(&s);
        assert!(clipped.len() <= MAX_ERROR_BYTES);
        assert!(clipped.len() >= MAX_ERROR_BYTES - 1);
        assert_eq!(clip_error("short"), "short");
    }
}
