//! Retry policy as pure functions: which outcomes are worth another attempt, and when.
//!
//! At least once: 2xx succeeds. Transport errors, 408, 425, 429 and 5xx are retried. Everything
//! else fails at once: a 401 or a 422 will not get better by asking again. Blocked targets fail
//! at once too.
//!
//! At most once, what may be retried is decided by whether the request can have reached the
//! target's application: only when it certainly did not (nothing was written, or the target said
//! it did not process it: 408, 425, 429, a 503 with `Retry-After`, and the statuses its
//! `[[targets]]` rule trusts, `at_most_once_resend_on`) is it sent again. An answer that leaves
//! it open (500, 502, 504, a 503 without `Retry-After` — a proxy may send either after the
//! origin took the request — other server errors, and a 3xx: the target got the request and
//! did not say what it did with it) and anything after the first byte left (a timeout, a reset)
//! make the outcome `unknown`. Any other answer is final: `failed`, and since the target
//! answered, the request arrived — an operator's `retry` does not send it again
//! (`spool_store::model::answer_proves_arrival` is the store's side of that rule).
//!
//! Redirects (`--max-redirects`): once a hop has answered with a redirect that was followed, the
//! request has reached the target — a 303 after a POST usually means it was processed. At most
//! once, whatever fails after that (a later hop's status, a refused connection, a blocked
//! address, a bad `Location`) makes the outcome `unknown`, never a resend; only a later hop's
//! 2xx is a success. At least once, the last hop decides as it would alone (a retry sends the
//! request again from the first hop, counted as `spoold_delivery_resent_after_redirect_total`).

use std::time::{Duration, SystemTime};

use http::HeaderMap;

pub use crate::backoff::Backoff;

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Succeeded,
    Retry,
    Failed,
    /// At most once: it may have been processed; never resent by itself.
    Unknown,
}

/// The verdict on an HTTP status.
pub fn classify_status(status: u16) -> Verdict {
    match status {
        200..=299 => Verdict::Succeeded,
        408 | 425 | 429 | 500..=599 => Verdict::Retry,
        _ => Verdict::Failed,
    }
}

/// What a target says about a 5xx it answers at most once (its rule's
/// `at_most_once_resend_on`), and whether the answer asked to wait (`Retry-After`).
#[derive(Debug, Clone, Copy, Default)]
pub struct AnswerContext<'a> {
    /// The statuses the target's rule says its receiver answers before any work.
    pub trusted: &'a [u16],
    /// The answer carried a `Retry-After` spoold can read.
    pub retry_after: bool,
}

/// The verdict on an HTTP status for an at-most-once delivery.
pub fn classify_status_at_most_once(status: u16, context: AnswerContext<'_>) -> Verdict {
    match status {
        200..=299 => Verdict::Succeeded,
        // The target's rule says its receiver answers these before doing anything.
        s if context.trusted.contains(&s) => Verdict::Retry,
        // The server says it did not process the request.
        408 | 425 | 429 => Verdict::Retry,
        // Overloaded or in maintenance, and saying when to come back: the receiver's own
        // answer. Without `Retry-After` a 503 may be a proxy's whose upstream reset
        // mid-request.
        503 if context.retry_after => Verdict::Retry,
        // The target got the request and pointed elsewhere (not followed): whether it did the
        // work first (a 303 after a POST usually means it did) is not known.
        300..=399 => Verdict::Unknown,
        // Not implemented, HTTP version not supported: a definite refusal.
        501 | 505 => Verdict::Failed,
        // A server error may come after the work was done (a crash while answering, a proxy
        // — 502, 504 — that lost the upstream's answer).
        500..=599 => Verdict::Unknown,
        // Other 4xx, and anything stranger: a definite answer.
        _ => Verdict::Failed,
    }
}

/// Whether `status` may be named in a rule's `at_most_once_resend_on`: a 5xx that a receiver
/// can answer before any work (not 501 or 505, which are final refusals). 408, 425 and 429
/// need no rule; other 4xx are final.
pub fn may_be_trusted(status: u16) -> bool {
    (500..=599).contains(&status) && !matches!(status, 501 | 505)
}

/// At most once, the verdict on an attempt a redirect answered (the request reached the
/// target): `last` is what its last hop alone would have been.
pub fn after_redirect_at_most_once(last: Verdict) -> Verdict {
    match last {
        Verdict::Succeeded => Verdict::Succeeded,
        _ => Verdict::Unknown,
    }
}

/// The verdict on a transport failure for an at-most-once delivery.
pub fn classify_error_at_most_once(may_have_arrived: bool, retryable: bool) -> Verdict {
    match (may_have_arrived, retryable) {
        (true, _) => Verdict::Unknown,
        (false, true) => Verdict::Retry,
        (false, false) => Verdict::Failed,
    }
}

/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The delay a `Retry-After` header asks for (delta-seconds or an HTTP date), at most
/// [`MAX_RETRY_AFTER`]. `None` if absent or unreadable.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// The delay before the next attempt: the backoff, or longer if the server asked for it on a
/// 429 or 503 (`Retry-After` only ever delays).
pub fn next_delay(
    backoff: &Backoff,
    id: &str,
    attempt: u32,
    status: Option<u16>,
    headers: Option<&HeaderMap>,
    now: SystemTime,
) -> Duration {
    let base = backoff.delay(id, attempt);
    let asked = match (status, headers) {
        (Some(429 | 503), Some(h)) => retry_after(h, now),
        _ => None,
    };
    asked.map_or(base, |a| a.max(base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table() {
        let cases = [
            (200, Verdict::Succeeded),
            (201, Verdict::Succeeded),
            (204, Verdict::Succeeded),
            (299, Verdict::Succeeded),
            (100, Verdict::Failed),
            (301, Verdict::Failed),
            (304, Verdict::Failed),
            (400, Verdict::Failed),
            (401, Verdict::Failed),
            (403, Verdict::Failed),
            (404, Verdict::Failed),
            (408, Verdict::Retry),
            (409, Verdict::Failed),
            (422, Verdict::Failed),
            (425, Verdict::Retry),
            (429, Verdict::Retry),
            (500, Verdict::Retry),
            (502, Verdict::Retry),
            (503, Verdict::Retry),
            (599, Verdict::Retry),
        ];
        for (status, want) in cases {
            assert_eq!(classify_status(status), want, "{status}");
        }
    }

    #[test]
    fn after_a_followed_redirect_only_a_success_is_not_unknown() {
        for last in [Verdict::Retry, Verdict::Failed, Verdict::Unknown] {
            assert_eq!(
                after_redirect_at_most_once(last),
                Verdict::Unknown,
                "{last:?}"
            );
        }
        assert_eq!(
            after_redirect_at_most_once(Verdict::Succeeded),
            Verdict::Succeeded
        );
    }

    #[test]
    fn at_most_once_status_table() {
        let plain = AnswerContext::default();
        let waiting = AnswerContext {
            retry_after: true,
            ..plain
        };
        let trusting = AnswerContext {
            trusted: &[502, 503],
            ..plain
        };
        // (status, plain, with Retry-After, trusting 502 and 503)
        use Verdict::{Failed, Retry, Succeeded, Unknown};
        let cases = [
            (200, Succeeded, Succeeded, Succeeded),
            (201, Succeeded, Succeeded, Succeeded),
            (299, Succeeded, Succeeded, Succeeded),
            (301, Unknown, Unknown, Unknown),
            (303, Unknown, Unknown, Unknown),
            (307, Unknown, Unknown, Unknown),
            (308, Unknown, Unknown, Unknown),
            (400, Failed, Failed, Failed),
            (404, Failed, Failed, Failed),
            (409, Failed, Failed, Failed),
            (410, Failed, Failed, Failed),
            (408, Retry, Retry, Retry),
            (425, Retry, Retry, Retry),
            (429, Retry, Retry, Retry),
            (503, Unknown, Retry, Retry),
            (500, Unknown, Unknown, Unknown),
            (502, Unknown, Unknown, Retry),
            (504, Unknown, Unknown, Unknown),
            (507, Unknown, Unknown, Unknown),
            (501, Failed, Failed, Failed),
            (505, Failed, Failed, Failed),
        ];
        for (status, alone, after_wait, trusted) in cases {
            assert_eq!(
                [plain, waiting, trusting].map(|c| classify_status_at_most_once(status, c)),
                [alone, after_wait, trusted],
                "{status}"
            );
        }
        assert_eq!(classify_error_at_most_once(true, true), Verdict::Unknown);
        assert_eq!(classify_error_at_most_once(true, false), Verdict::Unknown);
        assert_eq!(classify_error_at_most_once(false, true), Verdict::Retry);
        assert_eq!(classify_error_at_most_once(false, false), Verdict::Failed);
    }

    /// The store judges an operator's `retry` of a failed at-most-once delivery by the status
    /// it failed on (`answer_proves_arrival`): it must call arrived exactly those a `Failed`
    /// verdict came from, never one that was being resent (a `Retry` that ran out of attempts).
    #[test]
    fn the_store_tells_a_final_answer_from_a_resend_that_ran_out() {
        let trusted: Vec<u16> = (100..=599).filter(|s| may_be_trusted(*s)).collect();
        for status in 100..=599 {
            for context in [
                AnswerContext::default(),
                AnswerContext {
                    retry_after: true,
                    trusted: &trusted,
                },
            ] {
                let arrived = spool_store::model::answer_proves_arrival(status);
                match classify_status_at_most_once(status, context) {
                    Verdict::Failed => assert!(arrived, "{status} failed but not arrived"),
                    Verdict::Retry => assert!(!arrived, "{status} resent but arrived"),
                    Verdict::Succeeded | Verdict::Unknown => {}
                }
            }
        }
    }

    #[test]
    fn retry_after_forms() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(http::header::RETRY_AFTER, v.parse().expect("header value"));
            m
        };
        assert_eq!(retry_after(&h("120"), now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(&h("999999"), now), Some(MAX_RETRY_AFTER));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after(&h(&date), now), Some(Duration::from_secs(30)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(&h(&past), now), Some(Duration::ZERO));
        assert_eq!(retry_after(&h("soon"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn retry_after_only_delays_and_only_on_429_503() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        };
        let now = SystemTime::UNIX_EPOCH;
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "60".parse().expect("value"));
        let plain = b.delay("x", 1);
        assert_eq!(
            next_delay(&b, "x", 1, Some(429), Some(&h), now),
            Duration::from_secs(60)
        );
        assert_eq!(
            next_delay(&b, "x", 1, Some(503), Some(&h), now),
            Duration::from_secs(60)
        );
        assert_eq!(next_delay(&b, "x", 1, Some(500), Some(&h), now), plain);
        h.insert(http::header::RETRY_AFTER, "0".parse().expect("value"));
        assert_eq!(next_delay(&b, "x", 1, Some(429), Some(&h), now), plain);
    }
}
