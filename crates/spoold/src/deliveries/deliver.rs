//! One delivery attempt: build the request from the claimed delivery, send it through
//! [`crate::deliveries::outbound`], classify the outcome with [`crate::deliveries::retry`], and record it in the store.
//!
//! **Invariants:** an attempt has started in the store (durably: counted, recorded with its
//! `started_at`) before its request leaves, and its result is recorded fenced by the claim, so a
//! late result can never overwrite a cancel or a newer claim. A delivery reserved ahead is only
//! a reservation: it is started, with a fenced check that it was not canceled and has not
//! expired, no more than [`AHEAD_FOR`] before it is sent. An attempt started ahead — a
//! reservation started, or a delivery taken — is sent within [`AHEAD_FOR`] of its start or
//! undone, never left counted. An at-most-once attempt is started only when its request goes
//! out next, with no other request of its slot on the wire and nothing lined up before it
//! (a reservation is started only then, whatever its mode: [`Slot::may_start`]), so a crash
//! never makes `unknown` of a request that was not written. No request outlives its lease: the send's
//! deadline is the sooner of `--request-timeout` and the lease (less a margin for recording the
//! result), and leases of attempts still running here are renewed, never taken back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::{join_all, BoxFuture};
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, StreamExt};
use http::header::{CONTENT_TYPE, USER_AGENT};
use http::HeaderValue;
use spool_store::model::{
    Applied, AttemptResult, Body, Claimed, Disposition, Mode, Reservation, StartOutcome, Taken,
};
use spool_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use spool_proto::signing;

use crate::deliveries::activity::{self, Activity};
use crate::deliveries::gone::{self, Answered410, GoneUrls};
use crate::deliveries::outbound::{self, Outbound, SendErrorCode};
use crate::deliveries::retry::{self, Backoff, Verdict};
use crate::deliveries::targets::{LiveRules, RateLimiter, TargetRules};
use crate::metrics::{KindLabel, Metrics, OutcomeLabel, ResultLabel};

const DELIVERY: KindLabel = KindLabel { kind: "delivery" };

/// Time kept free at the end of a lease for recording the attempt's result: a request is cut
/// off this long before its lease runs out.
pub const RECORD_MARGIN: Duration = Duration::from_secs(1);

/// The longest wait between two writes of a result the database was out of reach for: how late,
/// at most, a result is recorded after the database is back.
const MAX_RECORD_PAUSE: Duration = Duration::from_millis(500);

/// What every attempt needs, shared by all of them.
pub struct Deliverer {
    pub store: Store,
    pub outbound: Outbound,
    /// `[[targets]]` rules: which requests are signed, and with which secret.
    pub rules: Arc<LiveRules>,
    /// Their rates: a request is sent only with a token of its origin.
    pub limiter: Arc<RateLimiter>,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub request_timeout: Duration,
    /// Lease of every claim, reservation and start.
    pub lease: Duration,
    /// Claims held by attempts running here: their leases are renewed, not taken back.
    pub live: LiveClaims,
    /// Recent attempts and results, for the operator's overview.
    pub activity: Arc<Activity>,
    /// Graceful shutdown has begun: finish, but take on no further work.
    pub stop: CancellationToken,
    /// The first reconciliation check of an `unknown` delivery comes this long after it.
    pub reconcile_base: Duration,
    /// Told when an attempt left a delivery `unknown`: the reconciler has work.
    pub unknown_entered: Arc<tokio::sync::Notify>,
    /// Where results the database was out of reach for are kept until recorded.
    pub journal: crate::unrecorded::Journal,
    /// URLs that answered 410 Gone: nothing is sent to them until an operator resumes them.
    pub gone: Arc<GoneUrls>,
}

/// The claims (delivery id → claim sequence) that attempts of this process hold right now,
/// started or reserved. The periodic sweep renews their leases instead of taking them back.
#[derive(Debug, Default)]
pub struct LiveClaims(Mutex<HashMap<String, u32>>);

impl LiveClaims {
    pub fn hold(&self, id: &str, claim_seq: u32) {
        self.lock().insert(id.to_owned(), claim_seq);
    }

    /// Forget a claim once its result is recorded or it was given back (or could not be: then
    /// its lease runs out and the sweep takes it back).
    pub fn forget(&self, id: &str, claim_seq: u32) {
        let mut held = self.lock();
        if held.get(id) == Some(&claim_seq) {
            held.remove(id);
        }
    }

    pub fn holds(&self, id: &str, claim_seq: u32) -> bool {
        self.lock().get(id) == Some(&claim_seq)
    }

    pub fn snapshot(&self) -> Vec<(String, u32)> {
        self.lock()
            .iter()
            .map(|(id, seq)| (id.clone(), *seq))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // The map is always consistent between statements; a panic elsewhere cannot break it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every claim one slot has held, forgotten when the slot ends however it ends: a claim it
/// failed to hand back must not stay renewed forever, but run out and be taken back.
struct SlotClaims<'a> {
    live: &'a LiveClaims,
    held: Vec<(String, u32)>,
}

impl<'a> SlotClaims<'a> {
    fn new(live: &'a LiveClaims) -> Self {
        SlotClaims {
            live,
            held: Vec::new(),
        }
    }

    fn hold(&mut self, id: &str, claim_seq: u32) {
        // Those already handed back are done with: the list stays as short as the slot's claims.
        let live = self.live;
        self.held.retain(|(id, seq)| live.holds(id, *seq));
        live.hold(id, claim_seq);
        self.held.push((id.to_owned(), claim_seq));
    }

    fn hold_reserved(&mut self, reserved: &Option<Reservation>) {
        if let Some(r) = reserved {
            self.hold(&r.id, r.claim_seq);
        }
    }
}

impl Drop for SlotClaims<'_> {
    fn drop(&mut self) {
        for (id, claim_seq) in &self.held {
            self.live.forget(id, *claim_seq);
        }
    }
}

/// A started attempt and the instant its request must be done by: its lease as granted,
/// measured from before the store was asked (so never later than the store's own expiry),
/// less [`RECORD_MARGIN`]. Monotonic, so a step of the wall clock changes nothing.
pub struct Started {
    pub claimed: Claimed,
    pub send_by: Instant,
    /// A token of its target's rate was taken for it when it was claimed.
    pub token: bool,
}

impl Started {
    /// `claimed` was granted with a lease of `lease` by a store asked at `asked`.
    pub fn new(claimed: Claimed, asked: Instant, lease: Duration) -> Started {
        Started {
            claimed,
            send_by: asked + lease.saturating_sub(RECORD_MARGIN),
            token: false,
        }
    }
}

/// Most attempts a slot keeps started ahead of the one on the wire while its target keeps
/// answering quickly; how many it keeps depends on how quickly ([`Slot::lead`]). The step that
/// starts the next attempt (and records the last result) is then written while requests are on
/// the wire, not between two of them: a slot's turn takes the longer of a request and its share
/// of a commit instead of both, and with the slots' steps overlapping, the store writes more of
/// them per commit. At the default per-target limit, two attempts ahead took end-to-end
/// deliveries from 1,473–2,003 to 2,012–2,351 a second on PostgreSQL and from 2,147–2,452 to
/// 3,028–4,062 on SQLite (docs/src/lab-notes.md, "Starting attempts ahead"). The attempts ahead
/// are taken ([`Store::take_next`]), each claimed and started in one change of its row, rather
/// than reserved in one step and started in the next. With only two ahead, a slot still waited
/// for its takes rather than for its target; up to eight took PostgreSQL from ~2,850 to ~3,350
/// a second at the default limit ("Taking the next delivery").
///
/// The price: a crash can leave up to this many attempts per slot started but never sent, and
/// recovery treats them as any started attempt (interrupted and not charged); a cancel that
/// comes after the start is too late for that request, as for one on the wire. An
/// at-most-once attempt is never started ahead — recovery would have to call it `unknown` —
/// but only when its request goes out next: a take only reserves an at-most-once delivery (and
/// the slot turns careful), and a reservation is started only once nothing is lined up or on
/// the wire before it ([`Slot::may_start`]); nothing is taken ahead of a waiting reservation.
/// While the daemon lives, an attempt
/// started ahead and not sent (the target stopped answering, shutdown, or its start is older
/// than [`AHEAD_FOR`]) is undone: it never happened.
const LEAD: usize = 8;

/// An attempt started ahead is sent within this long of its start, or undone: a cancel or a
/// deadline can be late by no more than this. The lead is as long as the target answers in a
/// third of it (see [`Slot::lead`]), so that it seldom comes to that.
const AHEAD_FOR: Duration = Duration::from_secs(1);

/// What one slot has lined up: attempts started and not yet sent, reservations not yet being
/// started, and its store writes under way, oldest first.
#[derive(Default)]
struct Slot {
    /// Started attempts and when their start was answered.
    ready: VecDeque<(Started, Instant)>,
    reserved: VecDeque<Reservation>,
    writes: FuturesOrdered<BoxFuture<'static, Written>>,
    /// Writes under way that start a reservation.
    starting: usize,
    /// Writes under way that take the next delivery ([`Store::take_next`]).
    taking: usize,
    /// The last take found nothing due: take one at a time until one finds something.
    dry: bool,
    /// The last attempt started was at most once: start none ahead (see [`LEAD`]).
    careful: bool,
    /// How long the target took to answer the last request; `None` before its first answer.
    answered_in: Option<Duration>,
}

/// What a slot's write does besides recording a result.
enum Then {
    /// Start this reservation, and reserve one more if asked ([`Store::advance`]).
    Start {
        next: Reservation,
        reserve: bool,
    },
    /// Take the next due delivery, started at once if at least once ([`Store::take_next`]).
    Take,
    Nothing,
}

/// An attempt's result on its way to the store, with what its log line needs: the line is
/// written, and the attempt counted, once the store has decided what the result made of the
/// delivery (a retry with no attempts left is a failure).
struct Finished {
    result: AttemptResult,
    attempt: u32,
    origin: String,
    mode: Mode,
}

/// A write's answer, with what it was asked to do.
struct Written {
    result: Option<Finished>,
    next: Option<Reservation>,
    took: bool,
    /// When it was asked: the lease of an attempt it started runs from here.
    asked: Instant,
    applied: Option<Result<Applied, StoreError>>,
    started: Option<Result<StartOutcome, StoreError>>,
    reserved: Result<Option<Reservation>, StoreError>,
    taken: Option<Result<Option<Taken>, StoreError>>,
}

impl Slot {
    /// Whether the oldest reservation may be started now: nothing is lined up to be sent before
    /// it, and nothing is being started or taken that would be. A reservation may be at most
    /// once, and an at-most-once attempt is started only when its request goes out next — on a
    /// free connection, not while another of this slot's requests is on the wire — so that a
    /// crash never finds it started and unsent (recovery would have to call it `unknown`). The
    /// slot calls this only between two requests.
    fn may_start(&self) -> bool {
        !self.reserved.is_empty() && self.ready.is_empty() && self.taking == 0 && self.starting == 0
    }

    /// How many attempts to keep started ahead now: as many as the target answers, one after
    /// another, in a third of [`AHEAD_FOR`] (at its last answer's pace), up to [`LEAD`] — so the
    /// last of them seldom waits long for its turn, and a target slower than that gets none.
    /// None for at-most-once deliveries, nor before the slot's first answer says how fast the
    /// target is.
    fn lead(&self) -> usize {
        match self.answered_in {
            Some(took) if !self.careful => {
                let fit = (AHEAD_FOR / 3).as_millis() / took.as_millis().max(1);
                usize::try_from(fit).unwrap_or(LEAD).min(LEAD)
            }
            _ => 0,
        }
    }

    /// Write `result` (if any) and do `then`, on a task of its own so that it goes on while
    /// this slot's request is on the wire.
    fn write(&mut self, deliverer: &Deliverer, origin: &str, result: Option<Finished>, then: Then) {
        let asked = Instant::now();
        let store = deliverer.store.clone();
        let lease_ms = deliverer.lease_ms();
        let to_record = result.as_ref().map(|f| f.result.clone());
        let (next, took) = match &then {
            Then::Start { next, .. } => (Some(next.clone()), false),
            Then::Take => (None, true),
            Then::Nothing => (None, false),
        };
        let origin = origin.to_owned();
        let task = tokio::spawn(async move {
            match (to_record, then) {
                (result, Then::Start { next, reserve }) => {
                    let a = store.advance(result, next, reserve, lease_ms).await;
                    (a.applied, Some(a.started), a.reserved, None)
                }
                (result, Then::Take) => {
                    let t = store.take_next(result, origin, lease_ms).await;
                    (t.applied, None, Ok(None), Some(t.taken))
                }
                (Some(result), Then::Nothing) => {
                    (Some(store.complete(result).await), None, Ok(None), None)
                }
                (None, Then::Nothing) => (None, None, Ok(None), None),
            }
        });
        self.starting += usize::from(next.is_some());
        self.taking += usize::from(took);
        let answer = async move {
            let (applied, started, reserved, taken) = task.await.unwrap_or_else(|e| {
                let failed = || StoreError::Database(format!("store write task failed: {e}"));
                (
                    Some(Err(failed())),
                    Some(Err(failed())),
                    Err(failed()),
                    Some(Err(failed())),
                )
            });
            Written {
                result,
                next,
                took,
                asked,
                applied,
                started,
                reserved,
                taken,
            }
        };
        self.writes.push_back(Box::pin(answer));
    }
}

/// How a slot ended: what its last request said of the target, and whether the target had
/// answered one of the slot's requests before it (a slot goes on only while the target
/// answers, so the scheduler sees one report a slot, not one a request: without this, a busy
/// target that fails one request in five would look as if it failed every time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotEnd {
    pub health: TargetHealth,
    pub answered_before: bool,
}

/// What an attempt says about its target, for the scheduler's per-target pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetHealth {
    /// The target sent an HTTP response (any status): it is up.
    Answered,
    /// It answered 429 or 503 with `Retry-After`: it is up, and asks for nothing more until then.
    Throttled(Duration),
    /// Connection refused or unreachable, or the name did not resolve.
    Unreachable,
    /// It answered 5xx, or did not answer in time: struggling (the breaker counts these).
    Failing,
    /// It answered 410 Gone: the endpoint is no more.
    Gone,
    /// None of these (TLS error, interrupted, blocked): no conclusion.
    Unknown,
}

impl TargetHealth {
    fn of(result: &AttemptResult) -> TargetHealth {
        let unreachable =
            [SendErrorCode::ConnectFailed, SendErrorCode::DnsFailed].map(SendErrorCode::as_str);
        match (result.error_code.as_deref(), result.http_status) {
            (Some(code), _) if unreachable.contains(&code) => TargetHealth::Unreachable,
            (_, Some(410)) => TargetHealth::Gone,
            (_, Some(500..=599)) => TargetHealth::Failing,
            (_, Some(_)) => TargetHealth::Answered,
            (Some(code), None) if code == SendErrorCode::Timeout.as_str() => TargetHealth::Failing,
            _ => TargetHealth::Unknown,
        }
    }
}

impl Deliverer {
    /// Run one attempt to the end and record it; while the target keeps answering, go on with
    /// its next due deliveries, one commit per delivery. Once the target has answered quickly
    /// (within a third of [`AHEAD_FOR`]), the slot keeps up to [`LEAD`] attempts started ahead of
    /// the one on the wire ([`Slot::lead`]), so that when the target answers the next request
    /// leaves at once: the step that records a result also takes the next delivery
    /// ([`Store::take_next`]: an at-least-once one claimed with its attempt started, an
    /// at-most-once one only reserved).
    /// Otherwise — a slow target, at-most-once work, before the first answer — a delivery is
    /// reserved while a request is on the wire, and the step that records a result starts it
    /// (fenced: not if it was canceled or has expired meanwhile) and reserves the one after. A
    /// busy target's slot waits neither for the scheduler nor for a claim. `interrupt` cuts an
    /// attempt short (shutdown); such an attempt is recorded as interrupted and does not use up
    /// an attempt.
    ///
    /// `released` is called once the slot is given up, before the last result is recorded (the
    /// request no longer occupies the target), with what the slot's requests said of the
    /// target ([`SlotEnd`]). Attempts started ahead and not sent are then
    /// undone ([`Store::unstart`]) and reservations released.
    pub async fn attempt(
        &self,
        first: Started,
        interrupt: CancellationToken,
        released: impl FnOnce(SlotEnd),
    ) {
        let origin = first.claimed.origin.clone();
        let mut mine = SlotClaims::new(&self.live);
        mine.hold(&first.claimed.id, first.claimed.claim_seq);
        let mut slot = Slot {
            careful: first.claimed.mode == Mode::AtMostOnce,
            ready: VecDeque::from([(first, Instant::now())]),
            ..Slot::default()
        };
        // Results not yet written: each waits for a reservation to start in the same step,
        // while a write under way is bringing one.
        let mut unrecorded: VecDeque<Finished> = VecDeque::new();
        let mut health = TargetHealth::Answered;
        let mut sent: u32 = 0;
        let mut going = true;
        loop {
            // Take in the writes that are done; wait for the oldest when there is nothing to
            // send.
            loop {
                let done = if going && slot.ready.is_empty() {
                    slot.writes.next().await
                } else {
                    slot.writes.next().now_or_never().flatten()
                };
                let Some(done) = done else { break };
                self.absorb(done, &origin, &mut slot, &mut mine).await;
            }
            // Write the results. Keeping a lead, each with the next delivery to take (or a
            // reservation left from before to start); otherwise each with a reservation to
            // start (reserving one more), or on its own when none is coming.
            while let Some(result) = unrecorded.pop_front() {
                let leading = slot.lead() > 0;
                let then = if !going {
                    Then::Nothing
                } else if slot.may_start() {
                    let next = slot
                        .reserved
                        .pop_front()
                        .expect("may_start: one is reserved");
                    Then::Start {
                        next,
                        reserve: !leading,
                    }
                } else if leading && slot.reserved.is_empty() {
                    Then::Take
                } else if slot.starting > 0 {
                    unrecorded.push_front(result);
                    break;
                } else {
                    Then::Nothing
                };
                slot.write(self, &origin, Some(result), then);
            }
            if !going {
                break;
            }
            let Some((current, ready_at)) = slot.ready.pop_front() else {
                if slot.writes.is_empty() {
                    // Nothing started and nothing under way: start a reservation, or stop.
                    match slot.reserved.pop_front() {
                        Some(next) => {
                            let reserve = slot.lead() == 0;
                            slot.write(self, &origin, None, Then::Start { next, reserve });
                        }
                        None => break,
                    }
                }
                continue;
            };
            if ready_at.elapsed() > AHEAD_FOR {
                // Started too long ago to be sent on that check: undone, due again.
                self.unsent(current).await;
                continue;
            }
            if self.gone.holds(&current.claimed.target_url) {
                // Its URL answered 410 to another request since it was claimed (or it is the
                // delivery that got the 410, claimed again before it was parked): given back
                // unsent, parked with the URL's others.
                self.park(current).await;
                continue;
            }
            // A rate-limited target: sent only with a token (taken when the scheduler claimed
            // it, or now); without one it is undone (no attempt spent) and the slot ends, the
            // scheduler holding the target until its next token. Nothing is started or
            // reserved ahead for it: each delivery is claimed when its token is there.
            let limited = self.limiter.limited(&current.claimed.target_url);
            if limited
                && !current.token
                && !self
                    .limiter
                    .take(&origin, &current.claimed.target_url, Instant::now())
            {
                self.metrics.rate_limited.inc();
                self.unsent(current).await;
                going = false;
                continue;
            }
            // Keep the lead: attempts started or starting behind this one. A reservation left
            // from before is started; otherwise the next delivery is taken — one take at a
            // time once one found nothing, so that running out of work costs one write, not
            // the lead's worth.
            // A reservation waiting is never started ahead (it may be at most once), and
            // nothing is taken ahead of it: the lead resumes once it has been sent.
            while !limited
                && slot.ready.len() + slot.starting + slot.taking < slot.lead()
                && slot.reserved.is_empty()
                && (slot.taking == 0 || !slot.dry)
                && self.may_go_on(&interrupt)
            {
                slot.write(self, &origin, None, Then::Take);
            }
            // Without a lead, reserve while the request is on the wire, unless the writes under
            // way bring one: each starts one attempt and reserves one more.
            let lined_up = slot.ready.len() + 2 * slot.starting + slot.reserved.len();
            let reserve =
                !limited && slot.lead() == 0 && lined_up < 1 && self.may_go_on(&interrupt);
            let ((result, answered), reserved) = tokio::join!(
                self.send(&current, &interrupt),
                self.reserve_ahead(reserve, &origin),
            );
            mine.hold_reserved(&reserved);
            slot.reserved.extend(reserved);
            health = answered;
            sent = sent.saturating_add(1);
            slot.answered_in = Some(Duration::from_millis(result.duration_ms.max(0) as u64));
            // A target that answered, and did not ask us to slow down, gets its next delivery.
            let welcome =
                health == TargetHealth::Answered && !matches!(result.http_status, Some(429 | 503));
            // A rate-limited target's slot ends with its one request: the next is claimed when
            // its token is there, never taken ahead by the result's write.
            going = welcome && !limited && self.may_go_on(&interrupt);
            unrecorded.push_back(Finished {
                result,
                attempt: current.claimed.attempt,
                origin: current.claimed.origin.clone(),
                mode: current.claimed.mode,
            });
        }
        released(SlotEnd {
            health,
            // A slot goes on only while the target answers: every request before its last did.
            answered_before: sent > 1,
        });
        // Every write answered; what was started ahead or reserved and will not be sent now is
        // given back.
        while let Some(done) = slot.writes.next().await {
            self.absorb(done, &origin, &mut slot, &mut mine).await;
        }
        let unsent = slot.ready.drain(..).map(|(s, _)| self.unsent(s));
        let unstarted = slot
            .reserved
            .drain(..)
            .map(|r| self.release(r.id, r.claim_seq));
        tokio::join!(join_all(unsent), join_all(unstarted));
    }

    /// Take in a write's answer: its result counted, its attempt ready to send, its reservation
    /// held.
    async fn absorb(
        &self,
        done: Written,
        origin: &str,
        slot: &mut Slot,
        mine: &mut SlotClaims<'_>,
    ) {
        let Written {
            result,
            next,
            took,
            asked,
            applied,
            started,
            reserved,
            taken,
        } = done;
        slot.starting -= usize::from(next.is_some());
        slot.taking -= usize::from(took);
        let reserved = self.reserved(reserved, origin);
        mine.hold_reserved(&reserved);
        slot.reserved.extend(reserved);
        let taken = match taken {
            Some(taken) if took => self.taken(taken, origin),
            _ => None,
        };
        if took {
            slot.dry = taken.is_none();
        }
        let taken = match taken {
            Some(Taken::Started(claimed)) => {
                mine.hold(&claimed.id, claimed.claim_seq);
                Some(claimed)
            }
            Some(Taken::Reserved(reservation)) => {
                // At most once: started only when its turn comes, and none ahead after it.
                mine.hold(&reservation.id, reservation.claim_seq);
                slot.reserved.push_back(reservation);
                slot.careful = true;
                None
            }
            None => None,
        };
        let start = async {
            match (next, started) {
                (Some(next), Some(outcome)) => self.started(next, outcome).await,
                _ => None,
            }
        };
        let record = async {
            if let Some(finished) = result {
                self.recorded(finished, applied).await;
            }
        };
        let (started, ()) = tokio::join!(start, record);
        for claimed in started.into_iter().chain(taken) {
            slot.careful = claimed.mode == Mode::AtMostOnce;
            let started = Started::new(claimed, asked, self.lease);
            if slot.careful && !slot.ready.is_empty() {
                // At most once, and not next to leave: a crash before its turn would leave it
                // `unknown`. Undone; it is reserved and started again when its turn comes.
                self.unsent(started).await;
            } else {
                slot.ready.push_back((started, Instant::now()));
            }
        }
    }

    /// Give back an attempt started ahead of its turn that will not be sent now (its target
    /// stopped answering, or shutdown): it never happened — pending again, its attempt count and
    /// history as if it had only been reserved.
    async fn unsent(&self, unsent: Started) {
        let Claimed { id, claim_seq, .. } = unsent.claimed;
        match self
            .patiently(&id, || self.store.unstart(id.clone(), claim_seq))
            .await
        {
            Ok(true) => {
                self.metrics.undone.inc();
            }
            // Canceled or taken back meanwhile: nothing left to undo.
            Ok(false) => {}
            Err(e) => warn!(delivery_id = %id, claim_seq, error = %e,
                            "could not give back an attempt started ahead; it is taken back after its lease"),
        }
        self.live.forget(&id, claim_seq);
    }

    /// Give back, unsent and parked, an attempt whose URL is gone (see [`GoneUrls`]).
    async fn park(&self, unsent: Started) {
        let Claimed { id, claim_seq, .. } = unsent.claimed;
        match self
            .patiently(&id, || self.store.park(id.clone(), claim_seq, true))
            .await
        {
            Ok(parked) => {
                if parked {
                    self.metrics.undone.inc();
                }
            }
            Err(e) => warn!(delivery_id = %id, claim_seq, error = %e,
                            "could not park a delivery to a gone URL; it is taken back after its lease and parked then"),
        }
        self.live.forget(&id, claim_seq);
    }

    /// A 410 from `claimed`'s URL: the URL is gone from now on (see [`GoneUrls`]). Whether
    /// it was the first 410 since an operator resumed the URL — then it fails its delivery.
    async fn answered_gone(&self, claimed: &Claimed) -> bool {
        let url = gone::url_key(&claimed.target_url).to_owned();
        let now = self.store.now_ms();
        match self
            .gone
            .answered_410(&claimed.target_url, &claimed.origin, now)
        {
            Answered410::AlreadyGone => false,
            Answered410::StillGone => {
                warn!(delivery_id = %claimed.id, target_origin = %claimed.origin,
                      "a URL resumed by an operator answered 410 Gone again: this delivery fails, \
                       the URL's others wait again until it is resumed");
                self.park_url(claimed, url).await;
                true
            }
            Answered410::NewlyGone => {
                // The URL itself is not logged (a webhook's path is often its secret):
                // `spoolctl targets` lists it.
                warn!(delivery_id = %claimed.id, target_origin = %claimed.origin,
                      "this delivery's URL answered 410 Gone: nothing more is sent to it until an \
                       operator resumes it (spoolctl targets lists it; spoolctl targets resume \
                       URL); the rest of its origin goes on");
                self.park_url(claimed, url).await;
                false
            }
        }
    }

    /// Park the pending deliveries of a gone URL in the store, so that no claim takes them.
    /// Not waited for by anything but this slot; should it fail, each is parked when claimed.
    async fn park_url(&self, claimed: &Claimed, url: String) {
        self.metrics.observe_gone(self.gone.by_origin());
        match self
            .store
            .park_url(claimed.origin.clone(), url.clone())
            .await
        {
            Ok(n) => info!(delivery_id = %claimed.id, parked = n,
                           "parked the other deliveries to that gone URL"),
            Err(e) => warn!(delivery_id = %claimed.id, error = %e,
                            "could not park the deliveries of a gone URL; each is parked when claimed"),
        }
    }

    /// Whether this slot may take on another delivery: not while shutting down.
    fn may_go_on(&self, interrupt: &CancellationToken) -> bool {
        !self.stop.is_cancelled() && !interrupt.is_cancelled()
    }

    /// The next due delivery of `origin`, reserved now, if `wanted`.
    async fn reserve_ahead(&self, wanted: bool, origin: &str) -> Option<Reservation> {
        if !wanted {
            return None;
        }
        let reserved = self
            .store
            .reserve_next(origin.to_owned(), self.lease_ms())
            .await;
        self.reserved(reserved, origin)
    }

    /// What a take found, if anything; a failure to take is only logged (the slot goes on with
    /// what it has lined up, or ends). Had the take committed after all, its claim runs out
    /// and is taken back.
    fn taken(&self, taken: Result<Option<Taken>, StoreError>, origin: &str) -> Option<Taken> {
        taken.unwrap_or_else(|e| {
            warn!(target_origin = %origin, error = %e, "taking the next delivery failed");
            None
        })
    }

    /// The reservation made, if any; a failure to make one is only logged (the slot ends).
    fn reserved(
        &self,
        reserved: Result<Option<Reservation>, StoreError>,
        origin: &str,
    ) -> Option<Reservation> {
        reserved.unwrap_or_else(|e| {
            warn!(target_origin = %origin, error = %e, "reserving the next delivery failed");
            None
        })
    }

    /// What starting the reserved attempt `next` found: its request may be sent only if this
    /// returns it. A start that could not reach the database gives the reservation back.
    async fn started(
        &self,
        next: Reservation,
        outcome: Result<StartOutcome, StoreError>,
    ) -> Option<Claimed> {
        let (id, claim_seq) = (next.id, next.claim_seq);
        match outcome {
            Ok(StartOutcome::Started(claimed)) => return Some(claimed),
            Ok(StartOutcome::NotCurrent) => {
                info!(delivery_id = %id, claim_seq,
                      "reserved delivery was canceled or taken back before it was sent; not sent");
            }
            Ok(StartOutcome::Expired) => {
                self.metrics.expired.inc();
                info!(delivery_id = %id, claim_seq,
                      "reserved delivery expired before it was sent; not sent");
            }
            Err(StoreError::Unavailable(e)) => {
                // The start may have committed before its answer was lost (a failover): it is
                // undone, or else the reservation released — its request was never sent.
                warn!(delivery_id = %id, claim_seq, error = %e,
                      "could not start a reserved delivery; giving it back");
                match self
                    .patiently(&id, || self.store.unstart(id.clone(), claim_seq))
                    .await
                {
                    Ok(true) => {
                        self.metrics.undone.inc();
                        self.live.forget(&id, claim_seq);
                    }
                    _ => self.release(id, claim_seq).await,
                }
                return None;
            }
            Err(e) => warn!(delivery_id = %id, claim_seq, error = %e,
                            "could not start a reserved delivery; it is taken back after its lease"),
        }
        self.live.forget(&id, claim_seq);
        None
    }

    /// Give back a reservation that will not be sent now: pending again, as if never reserved.
    async fn release(&self, id: String, claim_seq: u32) {
        if let Err(e) = self
            .patiently(&id, || self.store.release(id.clone(), claim_seq))
            .await
        {
            warn!(delivery_id = %id, error = %e,
                  "could not give back a reservation; it is taken back after its lease");
        }
        self.live.forget(&id, claim_seq);
    }

    fn lease_ms(&self) -> i64 {
        self.lease.as_millis() as i64
    }

    /// Count a result whose write answered `first` (or write it, if `None`), or log why it
    /// could not be recorded: the claim then stays in the store with its lease, and when the
    /// lease runs out the delivery is reclaimed and sent again (at least once), so nothing is
    /// lost. A write the database was out of reach for is made again, patiently.
    async fn recorded(&self, finished: Finished, first: Option<Result<Applied, StoreError>>) {
        let Finished {
            result,
            attempt,
            origin,
            mode,
        } = finished;
        let origin = origin.as_str();
        let (id, claim_seq, disposition) =
            (result.id.clone(), result.claim_seq, result.disposition);
        let (error_code, http_status, duration_ms) = (
            result.error_code.clone(),
            result.http_status,
            result.duration_ms,
        );
        // Only an at-most-once success can settle what a take-back left `unknown`: an
        // at-least-once one whose claim ended asks the store nothing more.
        let late = (disposition == Disposition::Succeeded && mode == Mode::AtMostOnce)
            .then(|| result.clone());
        let recorded = match first {
            None => match self.store.complete(result.clone()).await {
                Err(StoreError::Unavailable(e)) => self.record_patiently(&result, mode, e).await,
                done => done,
            },
            Some(Err(StoreError::Unavailable(e))) => self.record_patiently(&result, mode, e).await,
            Some(done) => done,
        };
        self.live.forget(&id, claim_seq);
        let outcome = match recorded {
            Ok(Applied::Now(status)) => {
                let (label, counted) = match (disposition, status) {
                    (Disposition::Succeeded, _) => ("succeeded", activity::Result::Succeeded),
                    (Disposition::Interrupted, _) => ("interrupted", activity::Result::Interrupted),
                    (Disposition::Unknown { .. }, _) => {
                        self.unknown_entered.notify_one();
                        ("unknown", activity::Result::Unknown)
                    }
                    (_, spool_store::model::DeliveryStatus::Pending) => {
                        ("retryable_failure", activity::Result::RetryableFailure)
                    }
                    _ => ("terminal_failure", activity::Result::TerminalFailure),
                };
                self.metrics
                    .results
                    .get_or_create(&ResultLabel { result: label })
                    .inc();
                self.activity
                    .result(origin, counted, error_code.as_deref(), self.store.now_ms());
                attempt_outcome(disposition, status)
            }
            // At most once, a success that comes after the claim was taken back still proves
            // the request arrived: it settles the `unknown` the take-back left.
            Ok(Applied::Fenced) => match late.map(|late| self.store.late_answer(late)) {
                Some(settling) => match settling.await {
                    Ok(true) => {
                        info!(delivery_id = %id, claim_seq,
                              "a 2xx arrived after the attempt's claim was taken back; the \
                               delivery it left unknown is settled as succeeded");
                        "succeeded"
                    }
                    Ok(false) => "superseded",
                    Err(e) => {
                        warn!(delivery_id = %id, claim_seq, error = %e,
                              "a 2xx arrived after the attempt's claim was taken back and could \
                               not be recorded; the delivery stays as it was");
                        "superseded"
                    }
                },
                None => "superseded",
            },
            Err(StoreError::Unavailable(e)) => {
                warn!(delivery_id = %id, claim_seq, error = %e,
                      "stopping before the database came back: the attempt's result is kept in \
                       the data directory and recorded at the next start");
                "unrecorded"
            }
            Err(e) => {
                warn!(delivery_id = %id, claim_seq, error = %e,
                      "could not record attempt result; it will be retried after the lease");
                "unrecorded"
            }
        };
        self.metrics
            .attempt_duration
            .get_or_create(&OutcomeLabel { outcome })
            .observe(duration_ms.max(0) as f64 / 1000.0);
        info!(
            delivery_id = %id,
            attempt,
            target_origin = %origin,
            outcome,
            http_status,
            error_code = error_code.as_deref(),
            duration_ms,
            "delivery attempt finished"
        );
    }

    /// Record an attempt's result the database was out of reach for (`first`: why), however
    /// long that takes while this daemon runs: the result is what the target answered, and
    /// nothing else knows it. It is kept in the data directory from now on
    /// ([`crate::unrecorded`]) and its claim stays live ([`LiveClaims`]), so the sweep renews
    /// the claim's lease as soon as the database is back and no host takes it back meanwhile
    /// unless the outage outlasted the lease; then the write finds the claim gone (`Fenced`),
    /// and an at-most-once 2xx settles the `unknown` the take-back left. A daemon that stops
    /// first leaves the result in its journal for its next start (`Err(Unavailable)`).
    async fn record_patiently(
        &self,
        result: &AttemptResult,
        mode: Mode,
        first: String,
    ) -> Result<Applied, StoreError> {
        let kept = self.journal.keep_delivery(result, mode).await;
        self.metrics.unrecorded.get_or_create(&DELIVERY).inc();
        warn!(delivery_id = %result.id, claim_seq = result.claim_seq, error = %first,
              "database out of reach: the attempt's result is kept and recorded once it is back");
        let mut pause = Duration::from_millis(50);
        let recorded = loop {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.stop.cancelled() => {}
            }
            match self.store.complete(result.clone()).await {
                Err(StoreError::Unavailable(e)) if self.stop.is_cancelled() => {
                    break Err(StoreError::Unavailable(e))
                }
                Err(StoreError::Unavailable(_)) => pause = (pause * 2).min(MAX_RECORD_PAUSE),
                done => break done,
            }
        };
        self.metrics.unrecorded.get_or_create(&DELIVERY).dec();
        if !matches!(recorded, Err(StoreError::Unavailable(_))) {
            self.journal.done(kept);
        }
        recorded
    }

    /// Run a store write again while the database is out of reach (a PostgreSQL server
    /// restarting, a connection cut), for up to half a lease: the claim it is about stays live
    /// meanwhile, so the sweep renews its lease once the database is back and nobody takes it
    /// back. Past that, or while stopping, the lease decides. A write whose first COMMIT did land
    /// before its answer was lost finds the claim changed when it runs again, and leaves it so.
    async fn patiently<T, F, Fut>(&self, id: &str, mut write: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        let deadline = Instant::now() + self.lease / 2;
        let mut pause = Duration::from_millis(50);
        loop {
            match write().await {
                Err(StoreError::Unavailable(e))
                    if Instant::now() + pause < deadline && !self.stop.is_cancelled() =>
                {
                    info!(delivery_id = %id, error = %e,
                          "database out of reach; writing again shortly");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                done => return done,
            }
        }
    }

    /// Send one attempt and classify its outcome (nothing is recorded yet).
    async fn send(
        &self,
        attempt: &Started,
        interrupt: &CancellationToken,
    ) -> (AttemptResult, TargetHealth) {
        let claimed = &attempt.claimed;
        let started = Instant::now();
        self.metrics.attempts.inc();
        self.activity.attempt();
        let timeout = send_timeout(self.request_timeout, attempt.send_by, started);
        // The remote id may be anywhere in the answer: keep as much as a reconcile answer.
        let keep_body = match claimed.remote_id_pointer {
            Some(_) => crate::deliveries::reconcile::MAX_ANSWER_BYTES,
            None => outbound::MAX_RESPONSE_EXCERPT,
        };
        let rules = self.rules.now();
        let sent = match (timeout.is_zero(), request_headers(claimed, &rules)) {
            (true, _) => Sent::LeaseSpent,
            (false, Err(name)) => Sent::SecretMissing(name),
            (false, Ok(headers)) => {
                let request = outbound::Request {
                    method: &claimed.method,
                    url: &claimed.target_url,
                    headers,
                    tls: rules.tls(&claimed.target_url),
                    body: bytes::Bytes::copy_from_slice(claimed.body.bytes()),
                    timeout,
                    timeout_reason: if timeout < self.request_timeout {
                        "the rest of its lease"
                    } else {
                        "request timeout"
                    },
                    keep_body,
                    write_by: write_by(attempt.send_by, self.request_timeout),
                    max_redirects: None,
                    // At most once, never on a kept-alive connection the server may be
                    // closing: a request it dropped unread would look as if it may have arrived.
                    fresh_connection: claimed.mode == Mode::AtMostOnce,
                };
                tokio::select! {
                    sent = self.outbound.send(request) => Sent::Done(sent),
                    () = interrupt.cancelled() => Sent::Interrupted,
                }
            }
        };
        let elapsed = started.elapsed();
        let throttle = match &sent {
            Sent::Done(Ok(resp)) if matches!(resp.status, 429 | 503) => {
                retry::retry_after(&resp.headers, SystemTime::now())
            }
            _ => None,
        };
        let still_gone = match &sent {
            Sent::Done(Ok(resp)) if resp.status == 410 => self.answered_gone(claimed).await,
            Sent::Done(Ok(_)) => {
                self.gone.answered(&claimed.target_url);
                false
            }
            _ => false,
        };
        let result = self.judge(attempt, &rules, sent, elapsed, still_gone);
        let health = throttle.map_or_else(|| TargetHealth::of(&result), TargetHealth::Throttled);
        if result.error_code.as_deref() == Some(SendErrorCode::TargetBlocked.as_str()) {
            self.metrics.blocked.inc();
        }
        (result, health)
    }

    /// What an attempt's outcome makes of its delivery (see [`retry`]). A 410 Gone at least
    /// once does not fail the delivery that met it: its URL is gone, and every delivery for
    /// it waits alike (interrupted: not charged, `gone`, then parked) until an operator resumes
    /// the URL — unless this was the first 410 after such a resume (`still_gone`): then 410 is
    /// final for it. At most once a 410 is a final answer like any 4xx.
    fn judge(
        &self,
        attempt: &Started,
        rules: &TargetRules,
        sent: Sent,
        elapsed: Duration,
        still_gone: bool,
    ) -> AttemptResult {
        let claimed = &attempt.claimed;
        let mut result = AttemptResult {
            id: claimed.id.clone(),
            claim_seq: claimed.claim_seq,
            disposition: Disposition::Interrupted,
            http_status: None,
            error_code: None,
            error: None,
            duration_ms: elapsed.as_millis() as i64,
            remote_id: None,
        };
        let at_most_once = claimed.mode == Mode::AtMostOnce;
        let unknown = Disposition::Unknown {
            check_in_ms: self.reconcile_base.as_millis() as i64,
        };
        let retry_in = |status: Option<u16>, headers: Option<&http::HeaderMap>| {
            let d = retry::next_delay(
                &self.backoff,
                &claimed.id,
                claimed.attempt,
                status,
                headers,
                SystemTime::now(),
            );
            Disposition::Retry {
                delay_ms: d.as_millis() as i64,
            }
        };
        match sent {
            Sent::Interrupted if at_most_once => {
                result.disposition = unknown;
                result.error_code = Some("shutdown".into());
                result.error = Some(
                    "attempt interrupted by shutdown while its request may have been on the \
                     wire; at most once, so it is not sent again"
                        .into(),
                );
            }
            Sent::Interrupted => {
                result.error_code = Some("shutdown".into());
                result.error =
                    Some("attempt interrupted by shutdown; it will be sent again".into());
            }
            Sent::SecretMissing(name) => {
                result.error_code = Some("secret_missing".into());
                result.error = Some(format!(
                    "not sent: sign.secretRef {name:?} is not declared in [secrets] (removed at \
                     a reload?); it will be tried again"
                ));
                result.disposition = retry_in(None, None);
            }
            Sent::LeaseSpent => {
                result.error_code = Some("lease_expired".into());
                result.error = Some(
                    "the lease ran out before the request could be sent; it will be sent again"
                        .into(),
                );
            }
            Sent::Done(Ok(resp)) if resp.status == 410 && !at_most_once && !still_gone => {
                result.http_status = Some(resp.status);
                result.error_code = Some("gone".into());
                result.error = Some(format!(
                    "{}; the URL is gone: this delivery waits with its others, not charged, \
                     until an operator resumes the URL (spoolctl targets resume URL)",
                    status_error(&resp)
                ));
                result.disposition = Disposition::Interrupted;
            }
            Sent::Done(Ok(resp)) => {
                result.http_status = Some(resp.status);
                let context = retry::AnswerContext {
                    trusted: rules.resend_on(&claimed.target_url),
                    retry_after: retry::retry_after(&resp.headers, SystemTime::now()).is_some(),
                };
                let verdict = match (at_most_once, resp.first_status) {
                    (true, None) => retry::classify_status_at_most_once(resp.status, context),
                    (true, Some(_)) => retry::after_redirect_at_most_once(
                        retry::classify_status_at_most_once(resp.status, context),
                    ),
                    (false, _) => retry::classify_status(resp.status),
                };
                match verdict {
                    Verdict::Succeeded => {
                        result.disposition = Disposition::Succeeded;
                        result.remote_id = claimed.remote_id_pointer.as_deref().and_then(|p| {
                            crate::deliveries::reconcile::remote_id(&resp.excerpt, p)
                        });
                    }
                    verdict => {
                        result.error = Some(status_error(&resp));
                        if (300..400).contains(&resp.status) {
                            result.error_code = Some("redirect_not_followed".into());
                        } else {
                            result.error_code = Some("http_status".into());
                        }
                        result.disposition = match verdict {
                            Verdict::Retry => {
                                if resp.first_status.is_some() {
                                    self.metrics.resent_after_redirect.inc();
                                }
                                retry_in(Some(resp.status), Some(&resp.headers))
                            }
                            Verdict::Unknown => unknown,
                            _ => Disposition::Failed,
                        };
                    }
                }
            }
            Sent::Done(Err(e)) if e.code == SendErrorCode::LeaseSpent && e.answered.is_none() => {
                // Nothing was written: as a lease spent before the request began.
                result.error_code = Some(e.code.as_str().to_owned());
                result.error = Some(format!("{}; it will be sent again", e.message));
            }
            Sent::Done(Err(e)) => {
                result.error_code = Some(e.code.as_str().to_owned());
                result.error = Some(e.message);
                // Asking again cannot help when the policy or the request itself forbids it.
                let verdict = match (at_most_once, e.code.is_retryable()) {
                    (true, _) if e.answered.is_some() => {
                        retry::after_redirect_at_most_once(Verdict::Failed)
                    }
                    (true, retryable) => {
                        retry::classify_error_at_most_once(e.may_have_arrived, retryable)
                    }
                    (false, true) => Verdict::Retry,
                    (false, false) => Verdict::Failed,
                };
                result.disposition = match verdict {
                    Verdict::Retry => {
                        if e.answered.is_some() {
                            self.metrics.resent_after_redirect.inc();
                        }
                        retry_in(None, None)
                    }
                    Verdict::Unknown => unknown,
                    _ => Disposition::Failed,
                };
            }
        }
        result
    }
}

/// How long a request starting `now` may take: `--request-timeout`, but never past its lease
/// (less the margin to record its result), or the claim could be taken back while it is on the
/// wire. Zero when the lease is already spent.
fn send_timeout(request_timeout: Duration, send_by: Instant, now: Instant) -> Duration {
    request_timeout.min(send_by.saturating_duration_since(now))
}

/// The last instant a request (or a redirect hop) of an attempt that must be done by
/// `send_by` may begin: a whole request timeout before it. A host paused past it (SIGSTOP, a
/// frozen VM) writes nothing when it wakes: by then another host may have taken the claim back
/// and called the delivery `unknown`, and asked the target about it.
fn write_by(send_by: Instant, request_timeout: Duration) -> Instant {
    send_by.checked_sub(request_timeout).unwrap_or(send_by)
}

/// What became of a request.
enum Sent {
    Done(Result<outbound::Response, outbound::SendError>),
    /// Cut short by shutdown.
    Interrupted,
    /// Not sent: its lease was already (nearly) spent, e.g. the claim's commit stalled.
    LeaseSpent,
    /// Not sent: the secret its create named to sign it is no longer declared.
    SecretMissing(String),
}

/// What an attempt came to, as the store decided it: a retryable failure with no attempts or
/// time left is `failed`, not `retry`.
fn attempt_outcome(d: Disposition, now: spool_store::model::DeliveryStatus) -> &'static str {
    match d {
        Disposition::Succeeded => "succeeded",
        Disposition::Retry { .. } if now == spool_store::model::DeliveryStatus::Pending => "retry",
        Disposition::Retry { .. } | Disposition::Failed => "failed",
        Disposition::Interrupted => "interrupted",
        Disposition::Unknown { .. } => "unknown",
    }
}

/// The stored headers plus the ones spoold manages: the delivery id and attempt number, and,
/// when the delivery names a secret (`sign.secretRef`) or a `[[targets]]` rule signs the URL,
/// the Standard Webhooks `webhook-id`, `webhook-timestamp` (this attempt's, on the wall clock)
/// and `webhook-signature` headers — in place of any the delivery carried under those names.
/// `Err` names the secret the delivery asks for when it is no longer declared: such a request
/// is not sent unsigned.
fn request_headers(claimed: &Claimed, rules: &TargetRules) -> Result<http::HeaderMap, String> {
    let mut headers = outbound::header_map(&claimed.headers);
    if !headers.contains_key(CONTENT_TYPE) {
        let default = match &claimed.body {
            Body::Json(_) => Some("application/json"),
            Body::Binary(b) if !b.is_empty() => Some("application/octet-stream"),
            _ => None,
        };
        if let Some(ct) = default {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
    }
    if !headers.contains_key(USER_AGENT) {
        headers.insert(USER_AGENT, HeaderValue::from_static(outbound::USER_AGENT));
    }
    if let Ok(v) = HeaderValue::from_str(&claimed.id) {
        headers.insert(spool_proto::DELIVERY_ID_HEADER, v);
    }
    headers.insert(
        spool_proto::ATTEMPT_HEADER,
        HeaderValue::from(claimed.attempt),
    );
    let secret = match &claimed.sign_secret {
        Some(name) => Some(rules.secret(name).ok_or_else(|| name.clone())?),
        None => rules
            .signer(&claimed.target_url)
            .map(|signer| &signer.secret),
    };
    if let Some(secret) = secret {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let signature = secret.sign(&claimed.id, now, claimed.body.bytes());
        // The id is 32 hex digits and the signature base64: both always valid header values.
        if let (Ok(id), Ok(sig)) = (
            HeaderValue::from_str(&claimed.id),
            HeaderValue::from_str(&signature),
        ) {
            headers.insert(signing::ID_HEADER, id);
            headers.insert(signing::TIMESTAMP_HEADER, HeaderValue::from(now));
            headers.insert(signing::SIGNATURE_HEADER, sig);
        }
    }
    Ok(headers)
}

/// The longest one-line summary of a body that is not JSON, in `lastError`.
const BODY_LINE: usize = 200;

/// `HTTP 503: <the body>`, as spoold words it; 3xx names where it pointed. A JSON body is kept
/// as it came (up to the 4 KiB excerpt): it is the target's explanation. Any other body is
/// shown on one line — tags dropped from HTML, whitespace folded, cut — followed by its
/// content type and size when it was not one short line already (an HTML error page is not
/// thirteen lines of `lastError`).
fn status_error(resp: &outbound::Response) -> String {
    let shown = resp.excerpt.len().min(outbound::MAX_RESPONSE_EXCERPT);
    let excerpt = String::from_utf8_lossy(&resp.excerpt[..shown]);
    let excerpt = body_line(resp, excerpt.trim());
    let mut text = format!("HTTP {}", resp.status);
    if resp.redirects > 0 {
        let first = resp
            .first_status
            .map_or_else(String::new, |s| format!(", the first answering {s}"));
        text.push_str(&format!(
            " after {} redirects{first} (the request reached the target)",
            resp.redirects
        ));
    }
    if (300..400).contains(&resp.status) {
        if let Some(loc) = resp
            .headers
            .get(http::header::LOCATION)
            .and_then(|l| l.to_str().ok())
        {
            text.push_str(&format!(" (redirect to {loc} not followed)"));
        }
    }
    if !excerpt.is_empty() {
        text.push_str(": ");
        text.push_str(&excerpt);
    }
    text
}

/// See [`status_error`].
fn body_line(resp: &outbound::Response, excerpt: &str) -> String {
    let content_type = resp
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or(v).trim().to_ascii_lowercase());
    let kind = content_type.as_deref().unwrap_or("");
    if kind == "application/json" || kind.ends_with("+json") {
        return excerpt.to_owned();
    }
    let html = kind.contains("html") || excerpt.starts_with('<');
    let text = if html {
        without_tags(excerpt)
    } else {
        excerpt.to_owned()
    };
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut line: String = folded.chars().take(BODY_LINE).collect();
    if line.len() < folded.len() {
        line.push('…');
    }
    if !html && !resp.truncated && line == excerpt {
        return line;
    }
    let size = resp
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map_or_else(
            || {
                format!(
                    "{}{}",
                    resp.excerpt.len(),
                    if resp.truncated { "+" } else { "" }
                )
            },
            str::to_owned,
        );
    format!(
        "{line} ({}, {size} bytes)",
        content_type.as_deref().unwrap_or("no content type")
    )
}

/// The text of an HTML excerpt: tags, comments and the contents of `<script>`/`<style>`
/// dropped, each tag standing for a space.
fn without_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        out.push(' ');
        let tag = &rest[open..];
        let lower = tag.get(..7).unwrap_or(tag).to_ascii_lowercase();
        let skip_to = if lower.starts_with("<script") || lower.starts_with("<style") {
            let close = if lower.starts_with("<script") {
                "</script"
            } else {
                "</style"
            };
            tag.to_ascii_lowercase()
                .find(close)
                .map(|at| at + close.len())
        } else {
            Some(0)
        };
        let Some(from) = skip_to else { return out };
        match tag[from..].find('>') {
            Some(end) => rest = &tag[from + end + 1..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(content_type: Option<&str>, body: &str) -> outbound::Response {
        let mut headers = http::HeaderMap::new();
        if let Some(t) = content_type {
            headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_str(t).expect("t"),
            );
        }
        outbound::Response {
            status: 501,
            headers,
            excerpt: body.as_bytes().to_vec(),
            truncated: false,
            redirects: 0,
            first_status: None,
        }
    }

    #[test]
    fn an_error_body_is_one_line_unless_it_is_json() {
        // What `python3 -m http.server` answers a POST with.
        let page = "<!DOCTYPE HTML>\n<html lang=\"en\">\n    <head>\n        <meta charset=\"utf-8\">\n\
            <style type=\"text/css\">\n:root { color-scheme: light dark; }\n</style>\n\
            <title>Error response</title>\n    </head>\n    <body>\n        <h1>Error response</h1>\n\
            <p>Error code: 501</p>\n        <p>Message: Unsupported method ('POST').</p>\n\
            </body>\n</html>\n";
        let html = status_error(&answered(Some("text/html;charset=utf-8"), page));
        assert_eq!(
            html,
            format!(
                "HTTP 501: Error response Error response Error code: 501 Message: Unsupported \
                 method ('POST'). (text/html, {} bytes)",
                page.len()
            )
        );
        assert_eq!(
            status_error(&answered(Some("text/plain"), "busy")),
            "HTTP 501: busy"
        );
        assert_eq!(
            status_error(&answered(None, "two\nlines")),
            "HTTP 501: two lines (no content type, 9 bytes)"
        );
        let json = "{\n  \"error\": \"nope\"\n}";
        assert_eq!(
            status_error(&answered(Some("application/problem+json"), json)),
            format!("HTTP 501: {json}")
        );
        let long = "x".repeat(300);
        let cut = status_error(&answered(Some("text/plain"), &long));
        assert!(cut.ends_with("… (text/plain, 300 bytes)"), "{cut}");
    }

    #[test]
    fn the_lead_is_what_the_target_answers_in_a_third_of_a_second() {
        let lead = |answered_in: Option<u64>, careful: bool| {
            Slot {
                answered_in: answered_in.map(Duration::from_millis),
                careful,
                ..Slot::default()
            }
            .lead()
        };
        assert_eq!(lead(None, false), 0, "before the first answer");
        assert_eq!(lead(Some(0), false), LEAD);
        assert_eq!(lead(Some(40), false), LEAD);
        assert_eq!(lead(Some(100), false), 3);
        assert_eq!(lead(Some(300), false), 1);
        assert_eq!(lead(Some(334), false), 0, "slower than a third of a second");
        assert_eq!(lead(Some(0), true), 0, "at most once");
    }

    #[test]
    fn a_request_never_outlives_its_lease() {
        let asked = Instant::now();
        let lease = Duration::from_secs(30);
        let send_by = Started::new(claimed(), asked, lease).send_by;
        assert_eq!(send_by, asked + lease - RECORD_MARGIN);
        let timeout = Duration::from_secs(10);
        // Sent at once: the request timeout applies.
        assert_eq!(send_timeout(timeout, send_by, asked), timeout);
        // Sent late (a commit stalled): only what is left of the lease.
        let late = asked + Duration::from_secs(25);
        assert_eq!(send_timeout(timeout, send_by, late), Duration::from_secs(4));
        // The lease is spent: not sent at all.
        assert_eq!(
            send_timeout(timeout, send_by, asked + lease),
            Duration::ZERO
        );
    }

    #[test]
    fn a_slot_forgets_its_claims_however_it_ends() {
        let live = LiveClaims::default();
        {
            let mut mine = SlotClaims::new(&live);
            mine.hold("a", 1);
            mine.hold("b", 1);
            // Handed back normally: no longer tracked by the slot either.
            live.forget("a", 1);
            mine.hold("c", 2);
            assert_eq!(mine.held.len(), 2);
            // A newer claim of the same delivery is not forgotten for an older one.
            live.hold("b", 5);
        }
        assert_eq!(live.snapshot(), [("b".to_owned(), 5)]);
    }

    fn claimed() -> Claimed {
        Claimed {
            id: "0".repeat(32),
            claim_seq: 1,
            attempt: 1,
            target_url: "http://127.0.0.1:9/".into(),
            origin: "http://127.0.0.1:9".into(),
            method: "POST".into(),
            headers: Vec::new(),
            body: Body::None,
            started_at: 0,
            lease_until: 30_000,
            mode: Mode::AtLeastOnce,
            remote_id_pointer: None,
            sign_secret: None,
        }
    }
}
