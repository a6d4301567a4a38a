//! Recent activity, for the operator's overview (`/v1/stats`, `/v1/targets`): attempts and
//! results in the last five minutes and the last hour, and per target its recent failures,
//! last error, last success and whether it is paused. Kept in memory in per-minute buckets, so
//! reading it costs the same however busy the daemon is; it starts empty when the daemon does.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use spool_store::model::Millis;

/// Minutes kept: the longest window shown.
const MINUTES: u64 = 60;

/// What the results of attempts are counted as (the `result` label of the metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    Succeeded,
    RetryableFailure,
    TerminalFailure,
    Interrupted,
    /// At most once: the outcome is not known.
    Unknown,
}

/// Counts over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub attempts: u64,
    pub succeeded: u64,
    pub retryable_failures: u64,
    pub terminal_failures: u64,
    pub interrupted: u64,
    pub unknown: u64,
}

/// One target as the overview shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetActivity {
    pub failed_last_hour: u64,
    /// Attempts that failed (retryable, terminal or unknown) in the last hour.
    pub failed_attempts_last_hour: u64,
    pub last_failure_at: Option<Millis>,
    /// Attempts in a row that could not connect.
    pub connect_failures: u32,
    /// Paused (refusing connections, failing) or holding us back (`Retry-After`) until then.
    pub paused_until: Option<Millis>,
    /// Why nothing is sent to it now.
    pub pause_reason: Option<PauseReason>,
    pub last_error_code: Option<String>,
    pub last_success_at: Option<Millis>,
}

/// The daemon's recent activity. Cheap to update from every attempt.
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    attempts: Minutes,
    succeeded: Minutes,
    retryable: Minutes,
    terminal: Minutes,
    interrupted: Minutes,
    unknown: Minutes,
    targets: HashMap<String, Target>,
}

/// Why nothing is sent to a target now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseReason {
    /// It refused connections; probed once its pause is over.
    Unreachable,
    /// A run of 5xx answers or timeouts opened its breaker; probed once its pause is over.
    Failing,
    /// It asked to wait (`Retry-After`).
    RetryAfter,
    /// An operator paused it: until resumed.
    Operator,
}

impl PauseReason {
    /// The word in `GET /v1/targets` (`pauseReason`) and `spoolctl targets`.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::Unreachable => "unreachable",
            PauseReason::Failing => "failing",
            PauseReason::RetryAfter => "retry_after",
            PauseReason::Operator => "operator",
        }
    }

    /// Only an operator ends it, not time.
    pub fn until_resumed(self) -> bool {
        matches!(self, PauseReason::Operator)
    }
}

#[derive(Debug, Default)]
struct Target {
    failed: Minutes,
    failed_attempts: Minutes,
    last_failure_at: Option<Millis>,
    connect_failures: u32,
    paused_until: Option<Millis>,
    pause_reason: Option<PauseReason>,
    last_error_code: Option<String>,
    last_success_at: Option<Millis>,
    last_minute: u64,
}

impl Target {
    /// Why it is paused now, if it is: until an operator resumes it, or until a time.
    fn paused_for(&self, now: Millis) -> Option<PauseReason> {
        match self.pause_reason {
            Some(reason) if reason.until_resumed() => Some(reason),
            reason if self.paused_until.is_some_and(|p| p > now) => reason,
            _ => None,
        }
    }
}

/// A count per minute for the last [`MINUTES`] minutes: slot `m % 60` holds minute `m`.
#[derive(Debug, Clone, Copy)]
struct Minutes([(u64, u64); MINUTES as usize]);

impl Default for Minutes {
    fn default() -> Self {
        Minutes([(u64::MAX, 0); MINUTES as usize])
    }
}

impl Minutes {
    fn add(&mut self, minute: u64) {
        let slot = &mut self.0[(minute % MINUTES) as usize];
        if slot.0 != minute {
            *slot = (minute, 0);
        }
        slot.1 += 1;
    }

    /// The current minute and the `span - 1` before it.
    fn sum(&self, minute: u64, span: u64) -> u64 {
        self.0
            .iter()
            .filter(|(m, _)| *m <= minute && minute - *m < span)
            .map(|(_, n)| n)
            .sum()
    }
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            started: Instant::now(),
            inner: Mutex::default(),
        }
    }
}

impl Activity {
    /// An attempt was started.
    pub fn attempt(&self) {
        let minute = self.minute();
        self.lock().attempts.add(minute);
    }

    /// An attempt to `origin` ended so; `error_code` is its failure's, `now` the store's time.
    pub fn result(&self, origin: &str, result: Result, error_code: Option<&str>, now: Millis) {
        let minute = self.minute();
        let mut inner = self.lock();
        match result {
            Result::Succeeded => inner.succeeded.add(minute),
            Result::RetryableFailure => inner.retryable.add(minute),
            Result::TerminalFailure => inner.terminal.add(minute),
            Result::Interrupted => inner.interrupted.add(minute),
            Result::Unknown => inner.unknown.add(minute),
        }
        let target = inner.targets.entry(origin.to_owned()).or_default();
        target.last_minute = minute;
        match result {
            Result::Succeeded => target.last_success_at = Some(now),
            Result::TerminalFailure => target.failed.add(minute),
            _ => {}
        }
        if matches!(
            result,
            Result::RetryableFailure | Result::TerminalFailure | Result::Unknown
        ) {
            target.failed_attempts.add(minute);
            target.last_failure_at = Some(now);
        }
        if let Some(code) = error_code {
            target.last_error_code = Some(code.to_owned());
        }
    }

    /// The scheduler's view of a target: connect failures in a row, and until when it is
    /// paused (wall-clock milliseconds), if it is.
    pub fn health(
        &self,
        origin: &str,
        connect_failures: u32,
        paused_until: Option<Millis>,
        pause_reason: Option<PauseReason>,
    ) {
        let minute = self.minute();
        let mut inner = self.lock();
        let target = inner.targets.entry(origin.to_owned()).or_default();
        target.connect_failures = connect_failures;
        target.paused_until = paused_until;
        target.pause_reason = pause_reason;
        target.last_minute = minute;
    }

    /// Counts over the last five minutes and the last hour.
    pub fn windows(&self) -> (Window, Window) {
        let minute = self.minute();
        let inner = self.lock();
        let window = |span| Window {
            attempts: inner.attempts.sum(minute, span),
            succeeded: inner.succeeded.sum(minute, span),
            retryable_failures: inner.retryable.sum(minute, span),
            terminal_failures: inner.terminal.sum(minute, span),
            interrupted: inner.interrupted.sum(minute, span),
            unknown: inner.unknown.sum(minute, span),
        };
        (window(5), window(MINUTES))
    }

    /// The last hour minute by minute, oldest first: [`MINUTES`] windows of one minute each,
    /// the last the current minute.
    pub fn by_minute(&self) -> Vec<Window> {
        let now = self.minute();
        let inner = self.lock();
        (0..MINUTES)
            .rev()
            .map(|back| {
                let minute = now.saturating_sub(back);
                let one = |m: &Minutes| if back > now { 0 } else { m.sum(minute, 1) };
                Window {
                    attempts: one(&inner.attempts),
                    succeeded: one(&inner.succeeded),
                    retryable_failures: one(&inner.retryable),
                    terminal_failures: one(&inner.terminal),
                    interrupted: one(&inner.interrupted),
                    unknown: one(&inner.unknown),
                }
            })
            .collect()
    }

    /// Targets seen in the last hour or paused now, in origin order.
    pub fn targets(&self, now: Millis) -> Vec<(String, TargetActivity)> {
        let minute = self.minute();
        let mut inner = self.lock();
        // Forget targets with nothing to show: bounds the map by the last hour's targets.
        inner.targets.retain(|_, t| {
            minute - t.last_minute.min(minute) < MINUTES || t.paused_for(now).is_some()
        });
        let mut out: Vec<_> = inner
            .targets
            .iter()
            .map(|(origin, t)| {
                (
                    origin.clone(),
                    TargetActivity {
                        failed_last_hour: t.failed.sum(minute, MINUTES),
                        failed_attempts_last_hour: t.failed_attempts.sum(minute, MINUTES),
                        last_failure_at: t.last_failure_at,
                        connect_failures: t.connect_failures,
                        paused_until: t.paused_until.filter(|p| *p > now),
                        pause_reason: t.paused_for(now),
                        last_error_code: t.last_error_code.clone(),
                        last_success_at: t.last_success_at,
                    },
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn minute(&self) -> u64 {
        self.started.elapsed().as_secs() / Duration::from_secs(60).as_secs()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Counters only: a panic elsewhere cannot leave them inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_roll_over() {
        let mut m = Minutes::default();
        m.add(0);
        m.add(3);
        m.add(3);
        m.add(59);
        assert_eq!(m.sum(59, 60), 4);
        assert_eq!(m.sum(59, 5), 1);
        // Minute 60 takes minute 0's slot.
        m.add(60);
        assert_eq!(m.sum(60, 60), 4);
        assert_eq!(m.sum(60, 1), 1);
        assert_eq!(m.sum(120, 60), 0);
    }

    #[test]
    fn targets_keep_their_last_state() {
        let a = Activity::default();
        a.attempt();
        a.result(
            "http://127.0.0.1:80",
            Result::TerminalFailure,
            Some("http_status"),
            1_000,
        );
        // An outage answered 503: retried, not failed for good, but counted as failed attempts.
        a.result(
            "http://127.0.0.1:80",
            Result::RetryableFailure,
            Some("http_status"),
            1_500,
        );
        a.result("http://127.0.0.1:80", Result::Succeeded, None, 2_000);
        a.health(
            "http://127.0.0.2:80",
            3,
            Some(10_000),
            Some(PauseReason::Unreachable),
        );
        let (five, hour) = a.windows();
        assert_eq!(
            (five.attempts, five.succeeded, five.terminal_failures),
            (1, 1, 1)
        );
        assert_eq!(five, hour);
        let targets = a.targets(5_000);
        assert_eq!(targets.len(), 2);
        assert_eq!(
            targets[0],
            (
                "http://127.0.0.1:80".to_owned(),
                TargetActivity {
                    failed_last_hour: 1,
                    failed_attempts_last_hour: 2,
                    last_failure_at: Some(1_500),
                    connect_failures: 0,
                    paused_until: None,
                    pause_reason: None,
                    last_error_code: Some("http_status".into()),
                    last_success_at: Some(2_000),
                }
            )
        );
        assert_eq!(targets[1].1.paused_until, Some(10_000));
        // The pause is over: no longer shown as paused.
        assert_eq!(a.targets(20_000)[1].1.paused_until, None);
    }
}
