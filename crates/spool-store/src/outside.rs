//! Text that comes from outside spoold, as both backends keep it: what a script, a target or a
//! person wrote — attempt errors (with the start of a target's answer), result summaries, a
//! target's id for what it created, operators' notes, the history an import brings.
//!
//! **Invariant:** recording an attempt never fails on what its text holds. PostgreSQL's `text`
//! cannot hold a NUL (SQLite's can), and a write refused for its content would leave the attempt
//! unrecorded — its task `running` with its locks and quota slot, its delivery `in_flight` —
//! until a restart. So every such string passes [`Outside::storable`] at the [`Store`]'s door,
//! before either backend sees it: a NUL becomes U+FFFD (`�`), the character that already stands
//! for a script's bytes that are not UTF-8. The same for both backends, so both give back the
//! same text. (A NUL is the only character PostgreSQL's `text` refuses: every Rust `String` is
//! UTF-8.)
//!
//! What identifies something — an idempotency key, a fingerprint, a scope, a lock, a parameter,
//! a step's name — is never changed here: another character would make it another key. The
//! daemon refuses a NUL in those before they reach the store.
//!
//! [`Store`]: crate::Store

use crate::model::{AttemptResult, Check, CheckResult, CheckVerdict, DeliveryRecord, Resolution};
use crate::tasks::TaskAttemptEnd;

/// What a NUL is stored as.
pub const NUL_STORED_AS: char = char::REPLACEMENT_CHARACTER;

/// `text` as the store keeps it: every NUL replaced by [`NUL_STORED_AS`], the rest unchanged.
pub fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', NUL_STORED_AS.encode_utf8(&mut [0; 4]))
    } else {
        text
    }
}

/// A record that carries text from outside into the store.
pub(crate) trait Outside {
    /// The record with each such text [`storable`].
    fn storable(self) -> Self;
}

impl Outside for String {
    fn storable(self) -> Self {
        storable(self)
    }
}

impl<T: Outside> Outside for Option<T> {
    fn storable(self) -> Self {
        self.map(Outside::storable)
    }
}

impl<T: Outside> Outside for Vec<T> {
    fn storable(self) -> Self {
        self.into_iter().map(Outside::storable).collect()
    }
}

impl Outside for AttemptResult {
    fn storable(self) -> Self {
        AttemptResult {
            error_code: self.error_code.storable(),
            error: self.error.storable(),
            remote_id: self.remote_id.storable(),
            ..self
        }
    }
}

impl Outside for Check {
    fn storable(self) -> Self {
        Check {
            error_code: self.error_code.storable(),
            error: self.error.storable(),
            ..self
        }
    }
}

impl Outside for CheckResult {
    fn storable(self) -> Self {
        CheckResult {
            check: self.check.storable(),
            verdict: match self.verdict {
                CheckVerdict::Succeeded { remote_id } => CheckVerdict::Succeeded {
                    remote_id: remote_id.storable(),
                },
                CheckVerdict::ManualReview { reason, note } => CheckVerdict::ManualReview {
                    reason,
                    note: note.storable(),
                },
                at @ CheckVerdict::AskAgain { .. } => at,
            },
            ..self
        }
    }
}

impl Outside for Resolution {
    fn storable(self) -> Self {
        match self {
            Resolution::Succeeded { remote_id } => Resolution::Succeeded {
                remote_id: remote_id.storable(),
            },
            other => other,
        }
    }
}

impl Outside for crate::model::Attempt {
    fn storable(self) -> Self {
        crate::model::Attempt {
            error_code: self.error_code.storable(),
            error: self.error.storable(),
            ..self
        }
    }
}

impl<S> Outside for crate::status_log::Transition<S> {
    fn storable(self) -> Self {
        crate::status_log::Transition {
            note: self.note.storable(),
            ..self
        }
    }
}

impl Outside for DeliveryRecord {
    fn storable(self) -> Self {
        let d = self.delivery;
        DeliveryRecord {
            delivery: crate::model::Delivery {
                last_error: d.last_error.storable(),
                last_error_code: d.last_error_code.storable(),
                remote_id: d.remote_id.storable(),
                ..d
            },
            attempts: self.attempts.storable(),
            transitions: self.transitions.storable(),
            checks: self.checks.storable(),
            ..self
        }
    }
}

impl Outside for TaskAttemptEnd {
    fn storable(self) -> Self {
        TaskAttemptEnd {
            error_code: self.error_code.storable(),
            error: self.error.storable(),
            result_summary: self.result_summary.storable(),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_is_stored_as_the_replacement_character_and_nothing_else_changes() {
        let check = |text: &str, want: &str| assert_eq!(storable(text.to_owned()), want);
        check("a\0b", "a\u{FFFD}b");
        check("\0\0", "\u{FFFD}\u{FFFD}");
        check("", "");
        check(
            "tab\tnewline\n\u{1b}[31m é \u{202E}",
            "tab\tnewline\n\u{1b}[31m é \u{202E}",
        );
        check("\u{FFFD}", "\u{FFFD}");
    }
}
