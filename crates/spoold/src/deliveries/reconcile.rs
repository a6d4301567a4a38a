//! Reconciliation: ask the target whether an `unknown` at-most-once request arrived, instead of
//! sending it again.
//!
//! An at-most-once delivery becomes `unknown` when its request may have reached the target
//! without a definite answer. The reconciler checks each one on a backoff schedule inside its
//! observation window: the delivery's `reconcile` query (a URL template over `{fingerprint}` and
//! `{deliveryId}`) goes out through the same [`Outbound`] client and address policy as
//! deliveries, and the answer's array of matches decides:
//!
//! - exactly one match → `succeeded`, with the remote id found in the match;
//! - more than one → `manual_review` (`multiple_matches`);
//! - none → still `unknown` (the target may be only eventually consistent); when the window
//!   closes with still none → `manual_review` (`no_match_after_window`).
//!
//! A failed check (no answer, non-2xx, not JSON, over [`MAX_ANSWER_BYTES`], blocked) changes
//! nothing and is asked again; if the window closes on one → `manual_review`
//! (`checks_failed_after_window`). Without a `reconcile` query, `unknown` waits for its window
//! and then goes to `manual_review` (`no_reconcile_configured`). Every check is recorded.
//!
//! **Invariant:** nothing here ever sends the delivery itself; only an operator's `resend` does.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode};
use spool_proto::Reconcile;
use spool_store::model::{Check, CheckResult, CheckVerdict, Delivery, Millis};
use spool_store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::deliveries::outbound::{self, Outbound};
use crate::metrics::{Metrics, ResultLabel};

/// The largest reconcile answer read (and the largest 2xx body searched for a remote id).
pub const MAX_ANSWER_BYTES: usize = 1 << 20;

/// Checks run at once, at most.
const PARALLEL_CHECKS: usize = 8;

/// The longest the reconciler sleeps without looking at the store (a safety net: it is woken
/// when a delivery becomes `unknown`).
const IDLE_RECHECK: Duration = Duration::from_secs(300);

/// Which placeholders a URL template uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placeholders {
    pub fingerprint: bool,
    pub delivery_id: bool,
}

/// The placeholders of `template`, or the name of the first one that is not known (a brace
/// that opens or closes no placeholder counts as one).
pub fn placeholders(template: &str) -> Result<Placeholders, String> {
    let mut found = Placeholders::default();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("}".to_owned());
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(after.to_owned());
        };
        match &after[..close] {
            "fingerprint" => found.fingerprint = true,
            "deliveryId" => found.delivery_id = true,
            other => return Err(other.to_owned()),
        }
        rest = &after[close + 1..];
    }
    Ok(found)
}

/// `template` with `{fingerprint}` and `{deliveryId}` replaced by their values, percent-encoded
/// (everything but RFC 3986's unreserved characters), so a value can never change the URL's
/// structure: no new path segment, query parameter or host.
pub fn expand(template: &str, fingerprint: &str, delivery_id: &str) -> String {
    template
        .replace("{fingerprint}", &percent_encode(fingerprint))
        .replace("{deliveryId}", &percent_encode(delivery_id))
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value at `pointer` in the JSON `body`, as text: a string as it is, a number written out.
/// `None` if the body is not JSON, the pointer finds nothing, or the value is neither (or longer
/// than 256 bytes).
pub fn remote_id(body: &[u8], pointer: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    id_at(&value, pointer)
}

fn id_at(value: &serde_json::Value, pointer: &str) -> Option<String> {
    let id = match value.pointer(pointer)? {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        _ => return None,
    };
    (!id.is_empty() && id.len() <= spool_proto::MAX_KEY_BYTES).then_some(id)
}

/// What one query to the target found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The matches, and the remote id of the first one (if its pointer found one).
    Matches {
        count: u32,
        first_id: Option<String>,
    },
    /// No usable answer: why, as a code and a sentence.
    Failed { code: String, message: String },
}

/// Read a reconcile answer: the array at `matches_pointer` (empty pointer: the whole body).
pub fn read_answer(
    body: &[u8],
    truncated: bool,
    matches_pointer: &str,
    remote_id_pointer: &str,
) -> Finding {
    let failed = |message: String| Finding::Failed {
        code: "invalid_response".into(),
        message,
    };
    if truncated {
        return Finding::Failed {
            code: "response_too_large".into(),
            message: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
        };
    }
    let value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return failed(format!("the answer is not JSON: {e}")),
    };
    let Some(found) = value.pointer(matches_pointer) else {
        return failed(format!(
            "matchesPointer {matches_pointer:?} finds nothing in the answer"
        ));
    };
    let Some(matches) = found.as_array() else {
        return failed(format!(
            "matchesPointer {matches_pointer:?} is not an array in the answer"
        ));
    };
    Finding::Matches {
        count: matches.len().min(u32::MAX as usize) as u32,
        first_id: matches.first().and_then(|m| id_at(m, remote_id_pointer)),
    }
}

/// What a finding means for a delivery `checks_done` checks in (this one included), at `now`,
/// whose window closes at `review_at`.
pub fn verdict(
    finding: &Finding,
    now: Millis,
    review_at: Millis,
    checks_done: u32,
    base: Duration,
) -> CheckVerdict {
    let window_closed = now >= review_at;
    match finding {
        Finding::Matches { count: 1, first_id } => CheckVerdict::Succeeded {
            remote_id: first_id.clone(),
        },
        Finding::Matches { count, .. } if *count > 1 => CheckVerdict::ManualReview {
            reason: "multiple_matches".into(),
            note: Some(format!(
                "the target shows {count} matches; nothing was resent"
            )),
        },
        Finding::Matches { .. } if window_closed => CheckVerdict::ManualReview {
            reason: "no_match_after_window".into(),
            note: Some("no match by the end of the observation window".into()),
        },
        Finding::Failed { message, .. } if window_closed => CheckVerdict::ManualReview {
            reason: "checks_failed_after_window".into(),
            note: Some(format!("the last check failed: {message}")),
        },
        _ => CheckVerdict::AskAgain {
            at: next_check(now, review_at, checks_done, base),
        },
    }
}

/// `base · 2^checks_done` after `now`, at most [`spool_proto::MAX_CHECK_INTERVAL`], and never
/// after the window closes (the last check is made then).
pub fn next_check(now: Millis, review_at: Millis, checks_done: u32, base: Duration) -> Millis {
    let factor = 2f64.powi(checks_done.min(30) as i32);
    let wait = (base.as_secs_f64() * factor).min(spool_proto::MAX_CHECK_INTERVAL.as_secs_f64());
    (now + (wait * 1000.0) as Millis).min(review_at.max(now))
}

/// Checks `unknown` deliveries until stopped.
pub struct Reconciler {
    pub store: Store,
    pub outbound: Outbound,
    pub metrics: Arc<Metrics>,
    /// The first check comes this long after entering `unknown`; each next one twice as long.
    pub base: Duration,
    pub request_timeout: Duration,
    /// Told when a delivery becomes `unknown`.
    pub wake: Arc<Notify>,
    /// `[[targets]]` rules: the TLS settings of a query's URL.
    pub rules: Arc<crate::deliveries::targets::LiveRules>,
}

impl Reconciler {
    pub async fn run(self, stop: CancellationToken) {
        loop {
            if stop.is_cancelled() {
                return;
            }
            let due = match self.store.due_checks(64).await {
                Ok(due) => due,
                Err(e) => {
                    warn!(error = %e, "reconciler: cannot read due checks; trying again in 5s");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(5)) => {}
                        () = stop.cancelled() => return,
                    }
                    continue;
                }
            };
            if !due.is_empty() {
                for chunk in due.chunks(PARALLEL_CHECKS) {
                    futures_util::future::join_all(chunk.iter().map(|d| self.settle(d))).await;
                }
                continue;
            }
            let wait = match self.store.next_check().await {
                Ok(Some(at)) => Duration::from_millis((at - self.store.now_ms()).max(0) as u64),
                _ => IDLE_RECHECK,
            };
            tokio::select! {
                () = tokio::time::sleep(wait.min(IDLE_RECHECK)) => {}
                () = self.wake.notified() => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// One step for one delivery: a check (if it has a query), its verdict, recorded.
    async fn settle(&self, d: &Delivery) {
        let now = self.store.now_ms();
        let review_at = d.review_at.unwrap_or(now);
        let result = match d.reconcile.as_deref() {
            None if now >= review_at => CheckResult {
                id: d.id.clone(),
                check: None,
                verdict: CheckVerdict::ManualReview {
                    reason: "no_reconcile_configured".into(),
                    note: Some(
                        "the observation window closed and no reconcile query was configured"
                            .into(),
                    ),
                },
            },
            None => CheckResult {
                id: d.id.clone(),
                check: None,
                verdict: CheckVerdict::AskAgain { at: review_at },
            },
            Some(spec) => {
                let (check, finding) = self.ask(d, spec).await;
                let label = match &finding {
                    Finding::Matches { count: 0, .. } => "none",
                    Finding::Matches { count: 1, .. } => "match",
                    Finding::Matches { .. } => "multiple",
                    Finding::Failed { .. } => "failed",
                };
                self.metrics
                    .reconcile_checks
                    .get_or_create(&ResultLabel { result: label })
                    .inc();
                // Judged at the check's end: a slow answer may have run past the window.
                let now = self.store.now_ms();
                CheckResult {
                    id: d.id.clone(),
                    verdict: verdict(&finding, now, review_at, d.checks + 1, self.base),
                    check: Some(check),
                }
            }
        };
        let settled = !matches!(result.verdict, CheckVerdict::AskAgain { .. });
        let verdict = result.verdict.clone();
        match self.store.record_check(result).await {
            Ok(spool_store::model::Applied::Now(status)) if settled => {
                if let Some(since) = d.unknown_since {
                    let spent = (self.store.now_ms() - since).max(0) as f64 / 1000.0;
                    self.metrics.unknown_duration.observe(spent);
                }
                info!(delivery_id = %d.id, status = %status, ?verdict,
                      "unknown delivery settled by reconciliation");
            }
            Ok(_) => {}
            Err(e) => warn!(delivery_id = %d.id, error = %e,
                            "could not record a reconciliation check; it will be asked again"),
        }
    }

    /// Query the target about `d`.
    async fn ask(&self, d: &Delivery, spec: &str) -> (Check, Finding) {
        let at = self.store.now_ms();
        let started = std::time::Instant::now();
        let (http_status, finding) = match serde_json::from_str::<Reconcile>(spec) {
            Ok(spec) => self.query(d, &spec).await,
            Err(e) => (
                None,
                Finding::Failed {
                    code: "invalid_reconcile".into(),
                    message: format!("stored reconcile query is unreadable: {e}"),
                },
            ),
        };
        let (matches, error_code, error) = match &finding {
            Finding::Matches { count, .. } => (Some(*count), None, None),
            Finding::Failed { code, message } => (None, Some(code.clone()), Some(message.clone())),
        };
        let check = Check {
            at,
            http_status,
            matches,
            error_code,
            error,
            duration_ms: started.elapsed().as_millis() as i64,
        };
        (check, finding)
    }

    async fn query(&self, d: &Delivery, spec: &Reconcile) -> (Option<u16>, Finding) {
        let url = expand(
            spec.url.as_deref().unwrap_or_default(),
            d.fingerprint.as_deref().unwrap_or_default(),
            &d.id,
        );
        let mut headers = outbound::header_map(
            &spec
                .headers
                .iter()
                .flatten()
                .map(|(n, v)| (n.clone(), v.clone().unwrap_or_default()))
                .collect::<Vec<_>>(),
        );
        if !headers.contains_key(http::header::USER_AGENT) {
            headers.insert(
                http::header::USER_AGENT,
                HeaderValue::from_static(outbound::USER_AGENT),
            );
        }
        // Never the delivery's own `X-Spoold-Delivery-ID` or attempt headers: the query is not
        // the delivery, and a target that keys on them must not take it for one.
        let request = outbound::Request {
            method: spec.method.as_deref().unwrap_or("GET"),
            url: &url,
            headers,
            body: bytes::Bytes::new(),
            timeout: self.request_timeout,
            timeout_reason: "request timeout",
            keep_body: MAX_ANSWER_BYTES,
            // A query holds no claim: nothing but its own timeout bounds it.
            write_by: std::time::Instant::now() + self.request_timeout,
            // A redirect is a definite answer, never followed: a query must not land on the
            // delivery's own target (a redirect to the create endpoint would ask it again).
            max_redirects: Some(0),
            // The query's URL's own rule: a private CA or client certificate it needs.
            tls: self.rules.now().tls(&url),
            // A read: asked again if it is cut off.
            fresh_connection: false,
        };
        match self.outbound.send(request).await {
            Err(e) => (
                None,
                Finding::Failed {
                    code: e.code.as_str().to_owned(),
                    message: e.message,
                },
            ),
            Ok(resp) if !(200..300).contains(&resp.status) => {
                let reason = StatusCode::from_u16(resp.status)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("");
                (
                    Some(resp.status),
                    Finding::Failed {
                        code: "http_status".into(),
                        message: format!("the query was answered HTTP {} {reason}", resp.status)
                            .trim_end()
                            .to_owned(),
                    },
                )
            }
            Ok(resp) => (
                Some(resp.status),
                read_answer(
                    &resp.excerpt,
                    resp.truncated,
                    spec.matches_pointer.as_deref().unwrap_or(""),
                    spec.remote_id_pointer.as_deref().unwrap_or("/id"),
                ),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_know_two_placeholders() {
        assert_eq!(
            placeholders("https://127.0.0.1/x?f={fingerprint}&d={deliveryId}"),
            Ok(Placeholders {
                fingerprint: true,
                delivery_id: true
            })
        );
        assert_eq!(
            placeholders("https://127.0.0.1/x"),
            Ok(Placeholders::default())
        );
        assert_eq!(placeholders("https://127.0.0.1/{id}"), Err("id".to_owned()));
        assert_eq!(
            placeholders("https://127.0.0.1/{fingerprint"),
            Err("fingerprint".to_owned())
        );
        assert_eq!(placeholders("https://127.0.0.1/a}b"), Err("}".to_owned()));
    }

    #[test]
    fn values_cannot_change_the_url_structure() {
        assert_eq!(
            expand(
                "https://127.0.0.1/s?ref={fingerprint}&d={deliveryId}",
                "a b&c=/d?#",
                "00ff"
            ),
            "https://127.0.0.1/s?ref=a%20b%26c%3D%2Fd%3F%23&d=00ff"
        );
        assert_eq!(
            expand("https://127.0.0.1/{fingerprint}", "é", "x"),
            "https://127.0.0.1/%C3%A9"
        );
    }

    #[test]
    fn answers_are_read_by_pointer() {
        let body = br#"{"data":[{"id":"r1"},{"id":7}]}"#;
        assert_eq!(
            read_answer(body, false, "/data", "/id"),
            Finding::Matches {
                count: 2,
                first_id: Some("r1".into())
            }
        );
        assert_eq!(
            read_answer(br#"[{"ref":{"n":42}}]"#, false, "", "/ref/n"),
            Finding::Matches {
                count: 1,
                first_id: Some("42".into())
            }
        );
        assert_eq!(
            read_answer(b"[]", false, "", "/id"),
            Finding::Matches {
                count: 0,
                first_id: None
            }
        );
        let code = |f: Finding| match f {
            Finding::Failed { code, .. } => code,
            other => panic!("expected a failure, got {other:?}"),
        };
        assert_eq!(
            code(read_answer(b"<html>", false, "", "/id")),
            "invalid_response"
        );
        assert_eq!(
            code(read_answer(br#"{"a":1}"#, false, "/data", "/id")),
            "invalid_response"
        );
        assert_eq!(
            code(read_answer(br#"{"data":{}}"#, false, "/data", "/id")),
            "invalid_response"
        );
        assert_eq!(
            code(read_answer(b"[]", true, "", "/id")),
            "response_too_large"
        );
        assert_eq!(remote_id(br#"{"id":"x"}"#, "/id").as_deref(), Some("x"));
        assert_eq!(remote_id(br#"{"id":{"a":1}}"#, "/id"), None);
        assert_eq!(remote_id(b"nope", "/id"), None);
    }

    #[test]
    fn verdicts_follow_the_matches_and_the_window() {
        let base = Duration::from_secs(5);
        let one = Finding::Matches {
            count: 1,
            first_id: Some("r".into()),
        };
        let none = Finding::Matches {
            count: 0,
            first_id: None,
        };
        let two = Finding::Matches {
            count: 2,
            first_id: None,
        };
        let failed = Finding::Failed {
            code: "timeout".into(),
            message: "no answer".into(),
        };
        let review_at = 1_000_000;
        assert_eq!(
            verdict(&one, 0, review_at, 1, base),
            CheckVerdict::Succeeded {
                remote_id: Some("r".into())
            }
        );
        let reason = |v: CheckVerdict| match v {
            CheckVerdict::ManualReview { reason, .. } => reason,
            other => panic!("expected manual review, got {other:?}"),
        };
        assert_eq!(
            reason(verdict(&two, 0, review_at, 1, base)),
            "multiple_matches"
        );
        assert_eq!(
            verdict(&none, 0, review_at, 1, base),
            CheckVerdict::AskAgain { at: 10_000 }
        );
        assert_eq!(
            verdict(&failed, 0, review_at, 2, base),
            CheckVerdict::AskAgain { at: 20_000 }
        );
        assert_eq!(
            reason(verdict(&none, review_at, review_at, 9, base)),
            "no_match_after_window"
        );
        assert_eq!(
            reason(verdict(&failed, review_at + 1, review_at, 9, base)),
            "checks_failed_after_window"
        );
        // One match settles it even after the window.
        assert!(matches!(
            verdict(&one, review_at + 1, review_at, 9, base),
            CheckVerdict::Succeeded { .. }
        ));
    }

    #[test]
    fn checks_back_off_to_five_minutes_and_end_with_the_window() {
        let base = Duration::from_secs(5);
        assert_eq!(next_check(0, i64::MAX, 0, base), 5_000);
        assert_eq!(next_check(0, i64::MAX, 3, base), 40_000);
        assert_eq!(next_check(0, i64::MAX, 20, base), 300_000);
        assert_eq!(next_check(0, 7_000, 3, base), 7_000);
    }
}
