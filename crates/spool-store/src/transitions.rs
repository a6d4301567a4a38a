//! What an attempt's result makes of its delivery, decided once for both backends: a pure
//! function of the row as the completion reads it, the result and the store's time; and where
//! an operator's resolution takes it. (Which operator actions a delivery refuses is
//! `Delivery::refusal`, in `model.rs`.)
//!
//! SQLite reads the row, calls [`Completion::decide`] and writes what it says. PostgreSQL
//! applies the same rules inside `spoold_steps` (`postgres/functions/steps.sql`), in the one
//! round trip that also starts a slot's next delivery; the conformance suite holds both to this
//! function, case by case (`completion_follows_the_decision_table`).

use crate::clock::Millis;
use crate::model::{AttemptOutcome, AttemptResult, DeliveryStatus, Disposition, Mode, Resolution};

/// What a completion reads of a delivery in flight under the result's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Attempts started in this cycle, this one included.
    pub attempts: u32,
    /// Of those, the ones not charged (interrupted by us).
    pub uncharged: u32,
    pub max_attempts: u32,
    pub expires_at: Option<Millis>,
}

impl InFlight {
    /// Every allowed attempt is used: a retry would be one too many.
    pub fn exhausted(&self) -> bool {
        self.attempts.saturating_sub(self.uncharged) >= self.max_attempts
    }
}

/// What an attempt's result makes of its delivery (borrowing the result's error code).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<'a> {
    /// The attempt record's outcome.
    pub outcome: AttemptOutcome,
    /// The delivery's new status (it leaves `in_flight`).
    pub status: DeliveryStatus,
    /// When it is due again: a retry (never after `expires_at`: the claim then fails it as
    /// expired) or an interrupted attempt (at once).
    pub next_attempt_at: Option<Millis>,
    pub uncharged: u32,
    /// Entering `unknown` starts its clock: since when, and when the first check is due. (The
    /// end of its observation window follows from the first and the delivery's window.)
    pub unknown: Option<(Millis, Millis)>,
    /// The result's error and code become the delivery's last error (all but a success, which
    /// clears them).
    pub keeps_error: bool,
    /// The transition's reason: `delivered`, the error code, or `failed`, `unknown`, `retry`.
    pub reason: &'a str,
    pub note: Option<&'static str>,
}

impl AttemptOutcome {
    /// The attempt record's outcome for `disposition`; a retry on an `exhausted` budget ended
    /// the delivery, so it is recorded as failed.
    pub fn of(disposition: Disposition, exhausted: bool) -> AttemptOutcome {
        match disposition {
            Disposition::Succeeded => AttemptOutcome::Succeeded,
            Disposition::Retry { .. } if exhausted => AttemptOutcome::Failed,
            Disposition::Retry { .. } => AttemptOutcome::Retry,
            Disposition::Failed => AttemptOutcome::Failed,
            Disposition::Interrupted => AttemptOutcome::Interrupted,
            Disposition::Unknown { .. } => AttemptOutcome::Unknown,
        }
    }
}

impl<'a> Completion<'a> {
    pub fn decide(row: &InFlight, result: &'a AttemptResult, now: Millis) -> Completion<'a> {
        let exhausted = row.exhausted();
        let (status, next_attempt_at, uncharged, unknown) = match result.disposition {
            Disposition::Succeeded => (DeliveryStatus::Succeeded, None, row.uncharged, None),
            Disposition::Failed => (DeliveryStatus::Failed, None, row.uncharged, None),
            Disposition::Interrupted => {
                (DeliveryStatus::Pending, Some(now), row.uncharged + 1, None)
            }
            Disposition::Unknown { check_in_ms } => (
                DeliveryStatus::Unknown,
                None,
                row.uncharged,
                Some((now, now + check_in_ms.max(0))),
            ),
            Disposition::Retry { .. } if exhausted => {
                (DeliveryStatus::Failed, None, row.uncharged, None)
            }
            Disposition::Retry { delay_ms } => {
                let at = now + delay_ms.max(0);
                let at = row.expires_at.map_or(at, |deadline| at.min(deadline));
                (DeliveryStatus::Pending, Some(at), row.uncharged, None)
            }
        };
        let reason = match (result.disposition, result.error_code.as_deref()) {
            (Disposition::Succeeded, _) => "delivered",
            (_, Some(code)) => code,
            (Disposition::Failed, None) => "failed",
            (Disposition::Unknown { .. }, None) => "unknown",
            (_, None) => "retry",
        };
        let note = match (status, result.disposition) {
            (DeliveryStatus::Failed, Disposition::Retry { .. }) => Some("no attempts left"),
            (DeliveryStatus::Unknown, _) => {
                Some("the request may have reached the target; not resent")
            }
            _ => None,
        };
        Completion {
            outcome: AttemptOutcome::of(result.disposition, exhausted),
            status,
            next_attempt_at,
            uncharged,
            unknown,
            keeps_error: result.disposition != Disposition::Succeeded,
            reason,
            note,
        }
    }
}

impl AttemptResult {
    /// The result recorded for an attempt whose claim was taken back (its owner gone: a
    /// restart, a lapsed lease) after it started: interrupted and sent again at least once, or,
    /// at most once, `unknown` — its request may have reached the target, so it is never resent
    /// by a restart.
    pub fn taken_back(
        id: String,
        claim_seq: u32,
        mode: Mode,
        code: &str,
        check_in_ms: i64,
    ) -> AttemptResult {
        let (disposition, error) = match mode {
            Mode::AtLeastOnce => (
                Disposition::Interrupted,
                "attempt interrupted; the outcome is unknown, so it will be sent again",
            ),
            Mode::AtMostOnce => (
                Disposition::Unknown { check_in_ms },
                "attempt interrupted while its request may have been on the wire; \
                 at most once, so it is not sent again",
            ),
        };
        AttemptResult {
            id,
            claim_seq,
            disposition,
            http_status: None,
            error_code: Some(code.to_owned()),
            error: Some(error.to_owned()),
            duration_ms: 0,
            remote_id: None,
        }
    }
}

impl Resolution {
    /// Where an operator's decision takes an `unknown` or `manual_review` delivery, the
    /// transition's reason, and the remote id it records: a resend starts a new cycle
    /// (`pending`, a fresh attempt budget, due at once); the others settle it.
    pub fn decide(&self) -> (DeliveryStatus, &'static str, Option<&str>) {
        match self {
            Resolution::Succeeded { remote_id } => {
                (DeliveryStatus::Succeeded, "resolved", remote_id.as_deref())
            }
            Resolution::Failed => (DeliveryStatus::Failed, "resolved", None),
            Resolution::Resend => (DeliveryStatus::Pending, "resend", None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(disposition: Disposition, error_code: Option<&str>) -> AttemptResult {
        AttemptResult {
            id: "d".into(),
            claim_seq: 1,
            disposition,
            http_status: None,
            error_code: error_code.map(str::to_owned),
            error: None,
            duration_ms: 1,
            remote_id: None,
        }
    }

    /// The whole table: the budget, the deadline and the disposition → the delivery's status,
    /// when it is due, its uncharged count, the attempt's outcome, reason and note.
    #[test]
    fn a_result_decides_its_delivery() {
        use DeliveryStatus::{Failed, Pending, Succeeded, Unknown};
        const NOW: Millis = 1_000_000;
        let row = |attempts, uncharged, max_attempts, expires_at| InFlight {
            attempts,
            uncharged,
            max_attempts,
            expires_at,
        };
        let retry = Disposition::Retry { delay_ms: 5_000 };
        type Want = (
            DeliveryStatus,
            Option<Millis>,
            u32,
            AttemptOutcome,
            &'static str,
            Option<&'static str>,
        );
        #[rustfmt::skip]
        let table: [(InFlight, Disposition, Option<&str>, Want); 12] = [
            (row(1, 0, 3, None), Disposition::Succeeded, None, (Succeeded, None, 0, AttemptOutcome::Succeeded, "delivered", None)),
            (row(1, 0, 3, None), Disposition::Succeeded, Some("x"), (Succeeded, None, 0, AttemptOutcome::Succeeded, "delivered", None)),
            (row(1, 0, 3, None), retry, Some("http_status"), (Pending, Some(NOW + 5_000), 0, AttemptOutcome::Retry, "http_status", None)),
            (row(1, 0, 3, None), retry, None, (Pending, Some(NOW + 5_000), 0, AttemptOutcome::Retry, "retry", None)),
            (row(1, 0, 3, None), Disposition::Retry { delay_ms: -7 }, None, (Pending, Some(NOW), 0, AttemptOutcome::Retry, "retry", None)),
            // The deadline comes first: due then, to be failed as expired.
            (row(1, 0, 3, Some(NOW + 100)), retry, None, (Pending, Some(NOW + 100), 0, AttemptOutcome::Retry, "retry", None)),
            // The last allowed attempt ends the delivery; uncharged attempts do not count.
            (row(3, 0, 3, None), retry, Some("timeout"), (Failed, None, 0, AttemptOutcome::Failed, "timeout", Some("no attempts left"))),
            (row(3, 1, 3, None), retry, None, (Pending, Some(NOW + 5_000), 1, AttemptOutcome::Retry, "retry", None)),
            (row(1, 0, 3, None), Disposition::Failed, Some("http_status"), (Failed, None, 0, AttemptOutcome::Failed, "http_status", None)),
            (row(1, 0, 3, None), Disposition::Failed, None, (Failed, None, 0, AttemptOutcome::Failed, "failed", None)),
            // Interrupted by us: due again at once, not charged, even on the last attempt.
            (row(3, 0, 3, None), Disposition::Interrupted, Some("shutdown"), (Pending, Some(NOW), 1, AttemptOutcome::Interrupted, "shutdown", None)),
            (row(1, 0, 3, None), Disposition::Unknown { check_in_ms: 2_000 }, Some("timeout"), (Unknown, None, 0, AttemptOutcome::Unknown, "timeout", Some("the request may have reached the target; not resent"))),
        ];
        for (row, disposition, code, want) in table {
            let result = result(disposition, code);
            let c = Completion::decide(&row, &result, NOW);
            let case = format!("{row:?} {disposition:?} {code:?}");
            assert_eq!(
                (
                    c.status,
                    c.next_attempt_at,
                    c.uncharged,
                    c.outcome,
                    c.reason,
                    c.note
                ),
                want,
                "{case}"
            );
            assert_ne!(
                c.status,
                DeliveryStatus::InFlight,
                "{case}: it leaves in_flight"
            );
            assert_eq!(c.keeps_error, c.status != Succeeded, "{case}");
            assert_eq!(
                c.unknown,
                (c.status == Unknown).then_some((NOW, NOW + 2_000)),
                "{case}"
            );
        }
    }
}
