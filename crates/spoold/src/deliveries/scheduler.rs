//! The scheduler: claims due deliveries and starts their attempts, within the global and
//! per-target concurrency limits.
//!
//! It never polls: it sleeps until the earliest due time, an enqueue (`wake`), a finished
//! attempt, or the end of a target's pause. While a busy target is saturated, enqueues wake it
//! at most once per [`FRUITLESS_SPACING`], not once each. A target that is slow or hung only ever occupies its
//! own per-target slots. A target that refuses connections is *paused* after a few failures in a
//! row: its deliveries wait (uncharged) while one probe at a time, spaced by the retry backoff,
//! finds out whether it is back. So a dead target costs a handful of attempts, not one attempt
//! per queued delivery per backoff period. The same breaker opens for a target that answers a
//! run of 5xx or times out (`--breaker-failures` in a row, within `--breaker-window`), and the
//! first success closes it. The first pause is `--retry-base` long, and each failed probe doubles
//! it (to `--breaker-probe-cap`, or `--retry-cap` if that is shorter): the errors of the burst that opened the breaker (requests already on
//! the wire) do not lengthen it. A probe is one slot — one request — claimed only when nothing
//! else is in flight to the target, and the slots the scheduler spawned as probes are the only
//! ones whose failure counts as a failed probe. A target an operator paused
//! ([`TargetControl`]) is sent nothing until an operator resumes it. A URL that answered 410
//! Gone is held by itself, not its origin ([`crate::deliveries::gone`]): to the scheduler, a
//! 410 is an answer like any other.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use spool_store::{Capacity, Store};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

use crate::deliveries::activity::PauseReason;
use crate::deliveries::deliver::{Deliverer, SlotEnd, Started, TargetHealth};
use crate::deliveries::retry::Backoff;

/// How often, at most, leases are renewed or taken back and overdue deliveries are expired;
/// more often when the lease is short (a quarter of it).
/// At most [`spool_store::model::WAKE_WITHIN_MS`]: a create due later than that wakes no
/// scheduler, and is found by the look for the next due time that follows each sweep.
const SWEEP_EVERY: Duration = Duration::from_secs(5);
const _: () = assert!(SWEEP_EVERY.as_millis() <= spool_store::model::WAKE_WITHIN_MS as u128);
/// Pause after a store error before trying again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Unreachable attempts in a row after which a target is paused.
pub const PAUSE_AFTER_FAILURES: u32 = 3;
/// Overdue deliveries expired per sweep job.
const EXPIRE_BATCH: u32 = 500;
/// After a claim that found nothing it could take while some target was saturated, how long
/// an enqueue's wake-up waits before the next claim: under a burst of creates for a busy
/// target every create would otherwise cost a claim (a database transaction, on PostgreSQL
/// also on every other host) that again finds that target full. Work for a target with room
/// starts at most this much later, and not later at all once a slot has ended since (a slot
/// that frees up claims at once in its own commit; one that ended, finding nothing then,
/// left room, and the spacing is cut short).
/// 50 ms rather than 10: at the default limit end to end, PostgreSQL's commits a delivery went
/// from 0.161 to 0.137 with two hosts and from 0.092 to 0.083 with one, and the rate up 2–22 %
/// (docs/src/lab-notes.md, "Creates for later wake nobody").
const FRUITLESS_SPACING: Duration = Duration::from_millis(50);

pub struct Scheduler {
    pub store: Store,
    pub deliverer: Arc<Deliverer>,
    pub wake: Arc<Notify>,
    pub concurrency: u32,
    pub per_target: u32,
    pub lease: Duration,
    /// Spacing of probes to a paused target.
    pub pause_backoff: Backoff,
    /// When a run of 5xx answers and timeouts opens a target's breaker.
    pub breaker: Breaker,
    /// Operators' pauses and resumes.
    pub control: Arc<TargetControl>,
}

/// `--breaker-failures` (0: never) 5xx answers or timeouts in a row, each within
/// `--breaker-window` of the first, pause a target; probes of a paused target come at most
/// `--breaker-probe-cap` apart.
#[derive(Debug, Clone, Copy)]
pub struct Breaker {
    pub failures: u32,
    pub window: Duration,
    pub probe_cap: Duration,
}

/// Targets an operator paused (`POST /v1/targets/{origin}/pause`), and the pauses and resumes
/// the scheduler has yet to take in. Per host: not stored.
#[derive(Debug, Default)]
pub struct TargetControl {
    inner: Mutex<ControlInner>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct ControlInner {
    paused: BTreeSet<String>,
    /// Origins paused or resumed since the scheduler last looked, with the resume flag.
    news: Vec<(String, bool)>,
}

impl TargetControl {
    fn lock(&self) -> std::sync::MutexGuard<'_, ControlInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Send nothing to `origin` until it is resumed.
    pub fn pause(&self, origin: &str) {
        let mut inner = self.lock();
        inner.paused.insert(origin.to_owned());
        inner.news.push((origin.to_owned(), false));
        drop(inner);
        self.changed.notify_one();
    }

    /// Lift an operator's pause, and whatever else holds `origin` back (410 Gone, an open
    /// breaker, a connection pause): the operator says it is back.
    pub fn resume(&self, origin: &str) {
        let mut inner = self.lock();
        inner.paused.remove(origin);
        inner.news.push((origin.to_owned(), true));
        drop(inner);
        self.changed.notify_one();
    }

    pub fn is_paused(&self, origin: &str) -> bool {
        self.lock().paused.contains(origin)
    }

    fn paused(&self) -> Vec<String> {
        self.lock().paused.iter().cloned().collect()
    }

    fn take_news(&self) -> Vec<(String, bool)> {
        std::mem::take(&mut self.lock().news)
    }
}

/// A finished attempt, reported back to the scheduler.
struct Done {
    origin: String,
    end: SlotEnd,
    /// The slot was claimed as its paused target's probe.
    probe: bool,
}

/// Consecutive unreachable attempts of one target, and its 5xx answers and timeouts in a row
/// (since when), and until when it is paused and how many probes failed since it was; until
/// when it asked (with `Retry-After`) to be sent nothing.
#[derive(Debug, Default)]
struct TargetState {
    failures: u32,
    errors: u32,
    errors_since: Option<Instant>,
    paused_until: Option<Instant>,
    /// Probes that failed since the pause began: the next pause is spaced as the retry after
    /// that many.
    failed_probes: u32,
    held_until: Option<Instant>,
}

impl TargetState {
    fn held(&self, now: Instant) -> bool {
        self.held_until.is_some_and(|until| until > now)
    }

    /// Whether it is kept because something about it is not ordinary.
    fn notable(&self, now: Instant) -> bool {
        self.failures > 0 || self.errors > 0 || self.held(now)
    }

    /// Paused after failures (refused connections, or the breaker), probed once the pause is
    /// over.
    fn tripped(&self, breaker: &Breaker) -> bool {
        self.failures >= PAUSE_AFTER_FAILURES
            || (breaker.failures > 0 && self.errors >= breaker.failures)
    }
}

impl Scheduler {
    /// Run until `stop` is cancelled. Attempts are spawned on `attempts`; `interrupt` is handed
    /// to them so shutdown can cut them short.
    pub async fn run(
        self,
        stop: CancellationToken,
        interrupt: CancellationToken,
        attempts: TaskTracker,
    ) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
        let mut in_flight: HashMap<String, u32> = HashMap::new();
        let mut targets: HashMap<String, TargetState> = HashMap::new();
        let mut total: u32 = 0;
        let sweep_every = SWEEP_EVERY.min(self.lease / 4);
        let mut next_sweep = Instant::now() + sweep_every;
        let lease_ms = self.lease.as_millis() as i64;
        // When the last claim found nothing to take while a target was saturated.
        let mut fruitless_at: Option<Instant> = None;
        loop {
            while let Ok(done) = done_rx.try_recv() {
                self.finished(&mut in_flight, &mut total, &mut targets, done);
            }
            if stop.is_cancelled() {
                break;
            }
            let now = Instant::now();
            for (origin, resumed) in self.control.take_news() {
                if resumed && targets.remove(&origin).is_some() {
                    info!(target_origin = %origin, "target resumed by an operator");
                }
                self.publish(&origin, targets.get(&origin), now);
            }
            // A target that only held us back, and whose wait is over, is forgotten.
            targets.retain(|_, t| t.notable(now));
            let mut limits = limits(&targets, now, &self.breaker);
            for origin in self.control.paused() {
                limits.insert(origin, 0);
            }
            let mut capacity = Capacity {
                per_origin: self.per_target,
                in_flight: in_flight.clone(),
                limits,
            };
            self.deliverer
                .metrics
                .paused_targets
                .set(capacity.limits.values().filter(|l| **l == 0).count() as i64);
            // After the count: a target waiting for its rate's next token is not paused.
            let next_token = self.rate_limits(&mut capacity, now);

            let mut wait_until: Option<Instant> = [earliest_resume(&targets, now), next_token]
                .into_iter()
                .flatten()
                .min();
            let free = self.concurrency.saturating_sub(total);
            if free > 0 {
                let asked = std::time::Instant::now();
                match self.store.claim_due(free, capacity.clone(), lease_ms).await {
                    Ok(batch) => {
                        if batch.expired > 0 {
                            self.deliverer
                                .metrics
                                .expired
                                .inc_by(u64::from(batch.expired));
                        }
                        let claimed = batch.claimed.len() as u32;
                        fruitless_at =
                            (claimed == 0 && !capacity.saturated().is_empty()).then(Instant::now);
                        for c in batch.claimed {
                            let state = targets.get(&c.origin);
                            let probe = state.is_some_and(|t| t.tripped(&self.breaker));
                            // Its rate's token is taken now, before the next claim looks at
                            // the bucket: claimed is spoken for.
                            let token = self.deliverer.limiter.take(
                                &c.origin,
                                &c.target_url,
                                std::time::Instant::now(),
                            );
                            *in_flight.entry(c.origin.clone()).or_insert(0) += 1;
                            total += 1;
                            let deliverer = Arc::clone(&self.deliverer);
                            let done = done_tx.clone();
                            let interrupt = interrupt.clone();
                            let lease = self.lease;
                            attempts.spawn(async move {
                                let origin = c.origin.clone();
                                let released = move |end| {
                                    let _ = done.send(Done { origin, end, probe });
                                };
                                let mut first = Started::new(c, asked, lease);
                                first.token = token;
                                deliverer.attempt(first, interrupt, released).await;
                            });
                        }
                        if claimed == free {
                            // Possibly more due: look again once a slot frees up.
                        } else if claimed > 0 && batch.expired == 0 {
                            // Room left and more may be claimable: look again at once.
                            wait_until = Some(Instant::now());
                        } else if let Some(at) = self
                            .next_due(&Capacity {
                                in_flight: in_flight.clone(),
                                ..capacity
                            })
                            .await
                        {
                            wait_until = Some(wait_until.map_or(at, |w| w.min(at)));
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "claiming due deliveries failed");
                        wait_until = Some(Instant::now() + ERROR_PAUSE);
                    }
                }
            }
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + sweep_every;
                self.sweep().await;
            }
            let deadline = wait_until.map_or(next_sweep, |w| w.min(next_sweep));
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.control.changed.notified() => {}
                () = self.wake.notified() => {
                    // Spaced while the last claim found a target's slots all taken — unless
                    // a slot ends meanwhile (or already has): its target has room then, and
                    // the work just created must not wait out the spacing for it.
                    if let Some(at) = fruitless_at {
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep_until(at + FRUITLESS_SPACING) => {}
                            Some(done) = done_rx.recv() => {
                                self.finished(&mut in_flight, &mut total, &mut targets, done);
                            }
                        }
                    }
                }
                Some(done) = done_rx.recv() => {
                    self.finished(&mut in_flight, &mut total, &mut targets, done);
                }
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Rate-limited origins may have as many in flight as they have now plus tokens (never more
    /// than their other limits allow); an origin without a token gets none. Returns when the
    /// earliest empty bucket gets its next token.
    fn rate_limits(&self, capacity: &mut Capacity, now: Instant) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        let std_now = now.into_std();
        for room in self.deliverer.limiter.room(std_now) {
            let flying = capacity.in_flight.get(&room.origin).copied().unwrap_or(0);
            let limit = capacity.limit(&room.origin).min(flying + room.tokens);
            capacity.limits.insert(room.origin, limit);
            if let Some(next) = room.next {
                let at = now + next.saturating_duration_since(std_now);
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        earliest
    }

    /// When to look again: the earliest due time of work whose target has room.
    async fn next_due(&self, capacity: &Capacity) -> Option<Instant> {
        match self.store.next_due(capacity.saturated()).await {
            Ok(Some(at)) => {
                let delay = (at - self.store.now_ms()).max(0) as u64;
                // Something is due already but was not claimable (a race with an enqueue):
                // look again shortly rather than spin.
                Some(Instant::now() + Duration::from_millis(delay.max(5)))
            }
            Ok(None) => None,
            Err(e) => {
                error!(error = %e, "store query for the next due time failed");
                Some(Instant::now() + ERROR_PAUSE)
            }
        }
    }

    /// Book a finished attempt: free its slot, and pause or resume its target.
    fn finished(
        &self,
        in_flight: &mut HashMap<String, u32>,
        total: &mut u32,
        targets: &mut HashMap<String, TargetState>,
        done: Done,
    ) {
        *total = total.saturating_sub(1);
        if let Some(n) = in_flight.get_mut(&done.origin) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                in_flight.remove(&done.origin);
            }
        }
        let now = Instant::now();
        // An error after an answer is not in a row with the errors before that answer (and a
        // probe that was answered has done its work: its later requests are no probes).
        let mut probe = done.probe;
        if done.end.answered_before && done.end.health != TargetHealth::Answered {
            self.note(targets, &done.origin, TargetHealth::Answered, probe, now);
            probe = false;
        }
        self.note(targets, &done.origin, done.end.health, probe, now);
        self.publish(&done.origin, targets.get(&done.origin), now);
    }

    /// Take in what an attempt said of its target: its failures and errors in a row, its
    /// pauses. A `probe` that failed lengthens the pause; the failures of other slots while the
    /// target is paused (requests that were on the wire when it was) change nothing.
    fn note(
        &self,
        targets: &mut HashMap<String, TargetState>,
        origin: &str,
        health: TargetHealth,
        probe: bool,
        now: Instant,
    ) {
        let failed = matches!(
            health,
            TargetHealth::Unreachable | TargetHealth::Failing | TargetHealth::Unknown
        );
        if let Some(state) = targets
            .get_mut(origin)
            .filter(|t| failed && t.tripped(&self.breaker))
        {
            if probe {
                if health == TargetHealth::Failing && state.failures >= PAUSE_AFTER_FAILURES {
                    // Paused for refusing connections, it answers again — with errors: from
                    // now on its breaker holds it (if it has one; else it is sent to again).
                    state.failures = 0;
                    state.errors = self.breaker.failures;
                    state.errors_since = Some(now);
                    if !state.tripped(&self.breaker) {
                        state.paused_until = None;
                        return;
                    }
                }
                state.failed_probes += 1;
                let pause = self.probe_pause(origin, state.failed_probes + 1);
                state.paused_until = Some(now + pause);
                info!(
                    target_origin = %origin,
                    failed_probes = state.failed_probes,
                    pause_ms = pause.as_millis() as u64,
                    "probe of a paused target failed; the pause is longer"
                );
            }
            return;
        }
        match health {
            // A 410 holds its URL, not the target (see `crate::deliveries::gone`).
            TargetHealth::Answered | TargetHealth::Gone => {
                if let Some(t) = targets.get_mut(origin) {
                    if t.paused_until.take().is_some() {
                        info!(target_origin = %origin, "target answered again; resumed");
                    }
                    t.failures = 0;
                    t.errors = 0;
                    t.errors_since = None;
                    // A wait it asked for in another answer still holds.
                    if !t.held(now) {
                        targets.remove(origin);
                    }
                }
            }
            TargetHealth::Throttled(wait) => {
                let state = targets.entry(origin.to_owned()).or_default();
                state.failures = 0;
                state.paused_until = None;
                let until = now + wait;
                if state.held_until.is_none_or(|held| held < until) {
                    state.held_until = Some(until);
                }
                info!(
                    target_origin = %origin,
                    wait_ms = wait.as_millis() as u64,
                    "target asked to wait (Retry-After); nothing is sent to it until then"
                );
            }
            TargetHealth::Unreachable => {
                let state = targets.entry(origin.to_owned()).or_default();
                state.failures += 1;
                if state.tripped(&self.breaker) {
                    let pause = self.open(state, origin, now);
                    info!(
                        target_origin = %origin,
                        failures = state.failures,
                        pause_ms = pause.as_millis() as u64,
                        "target unreachable; paused, probing with one delivery at a time"
                    );
                }
            }
            TargetHealth::Failing => {
                let state = targets.entry(origin.to_owned()).or_default();
                // A run of errors spread thinner than the window starts again.
                if state
                    .errors_since
                    .is_none_or(|since| now.duration_since(since) > self.breaker.window)
                {
                    state.errors = 0;
                    state.errors_since = Some(now);
                }
                state.errors += 1;
                if state.tripped(&self.breaker) {
                    let pause = self.open(state, origin, now);
                    info!(
                        target_origin = %origin,
                        errors = state.errors,
                        pause_ms = pause.as_millis() as u64,
                        "target failing (5xx or timeouts in a row): breaker open, its deliveries \
                         wait uncharged, probing with one delivery at a time"
                    );
                }
            }
            TargetHealth::Unknown => {}
        }
    }

    /// Pause a target whose failures in a row just reached their threshold: for as long as
    /// the first retry waits. Each failed probe makes the next pause longer (see
    /// [`Self::note`]).
    fn open(&self, state: &mut TargetState, origin: &str, now: Instant) -> Duration {
        let pause = self.probe_pause(origin, 1);
        state.failed_probes = 0;
        state.paused_until = Some(now + pause);
        pause
    }

    /// How long a paused target waits for its next probe after `nth` pauses: the retry
    /// backoff, at most `--breaker-probe-cap` (a probe is one request; what a long outage must
    /// not do is leave a recovered target waiting up to `--retry-cap`).
    fn probe_pause(&self, origin: &str, nth: u32) -> Duration {
        self.pause_backoff
            .delay(origin, nth)
            .min(self.breaker.probe_cap)
    }

    /// Show a target's state in the operator's overview, with why it is paused.
    fn publish(&self, origin: &str, state: Option<&TargetState>, now: Instant) {
        let (failures, until) = state.map_or((0, None), |t| {
            let until = [t.paused_until, t.held_until]
                .into_iter()
                .flatten()
                .filter(|u| *u > now)
                .max();
            (t.failures, until)
        });
        let reason = if self.control.is_paused(origin) {
            Some(PauseReason::Operator)
        } else {
            state.and_then(|t| {
                if t.held(now) {
                    Some(PauseReason::RetryAfter)
                } else if t.failures >= PAUSE_AFTER_FAILURES {
                    Some(PauseReason::Unreachable)
                } else if t.tripped(&self.breaker) {
                    Some(PauseReason::Failing)
                } else {
                    None
                }
            })
        };
        let wall = until.map(|u| self.store.now_ms() + (u - now).as_millis() as i64);
        self.deliverer
            .activity
            .health(origin, failures, wall, reason);
    }

    /// Periodic housekeeping: renew the leases of attempts running here, take back claims
    /// whose lease ran out (an attempt that could not record its result), and fail deliveries
    /// that expired while waiting.
    async fn sweep(&self) {
        let live = self.deliverer.live.snapshot();
        match self
            .store
            .renew_and_reclaim(
                live,
                self.lease.as_millis() as i64,
                self.deliverer.reconcile_base.as_millis() as i64,
            )
            .await
        {
            Ok(taken) if taken.total() == 0 => {}
            Ok(taken) => {
                if taken.unknown > 0 {
                    self.deliverer.unknown_entered.notify_one();
                }
                info!(
                    interrupted = taken.interrupted,
                    released = taken.released,
                    unknown = taken.unknown,
                    "took back claims whose lease expired"
                )
            }
            Err(e) => error!(error = %e, "renewing and reclaiming leases failed"),
        }
        loop {
            match self.store.expire_overdue(EXPIRE_BATCH).await {
                Ok(n) => {
                    self.deliverer.metrics.expired.inc_by(n);
                    if n < u64::from(EXPIRE_BATCH) {
                        break;
                    }
                }
                Err(e) => {
                    error!(error = %e, "expiring overdue deliveries failed");
                    break;
                }
            }
        }
    }
}

/// Per-target limits: 0 while a target is paused or holds us back, 1 (a single probe)
/// once its pause is over until it answers again.
fn limits(
    targets: &HashMap<String, TargetState>,
    now: Instant,
    breaker: &Breaker,
) -> HashMap<String, u32> {
    targets
        .iter()
        .filter_map(|(o, t)| {
            let paused = t.paused_until.is_some_and(|until| until > now);
            let limit = if t.held(now) {
                0
            } else if t.tripped(breaker) {
                if paused {
                    0
                } else {
                    1
                }
            } else {
                return None;
            };
            Some((o.clone(), limit))
        })
        .collect()
}

/// When the next paused or held target may be sent to again.
fn earliest_resume(targets: &HashMap<String, TargetState>, now: Instant) -> Option<Instant> {
    targets
        .values()
        .flat_map(|t| [t.paused_until, t.held_until])
        .flatten()
        .filter(|until| *until > now)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paused_and_held_targets_get_no_slots_then_one_probe() {
        let now = Instant::now();
        let targets = HashMap::from([
            (
                "http://127.0.0.2:80".to_owned(),
                TargetState {
                    failures: PAUSE_AFTER_FAILURES,
                    paused_until: Some(now + Duration::from_secs(5)),
                    ..TargetState::default()
                },
            ),
            (
                "http://127.0.0.3:80".to_owned(),
                TargetState {
                    failures: PAUSE_AFTER_FAILURES + 2,
                    paused_until: Some(now - Duration::from_secs(1)),
                    ..TargetState::default()
                },
            ),
            (
                "http://127.0.0.4:80".to_owned(),
                TargetState {
                    failures: 1,
                    ..TargetState::default()
                },
            ),
            (
                "http://127.0.0.5:80".to_owned(),
                TargetState {
                    held_until: Some(now + Duration::from_secs(2)),
                    ..TargetState::default()
                },
            ),
            (
                "http://127.0.0.6:80".to_owned(),
                TargetState {
                    held_until: Some(now - Duration::from_secs(2)),
                    ..TargetState::default()
                },
            ),
        ]);
        let breaker = Breaker {
            failures: 5,
            window: Duration::from_secs(60),
            probe_cap: Duration::from_secs(10),
        };
        let l = limits(&targets, now, &breaker);
        assert_eq!(l.get("http://127.0.0.2:80"), Some(&0));
        assert_eq!(l.get("http://127.0.0.3:80"), Some(&1));
        assert_eq!(l.get("http://127.0.0.4:80"), None);
        assert_eq!(l.get("http://127.0.0.5:80"), Some(&0));
        assert_eq!(l.get("http://127.0.0.6:80"), None);
        assert_eq!(
            earliest_resume(&targets, now),
            Some(now + Duration::from_secs(2))
        );
    }
}
