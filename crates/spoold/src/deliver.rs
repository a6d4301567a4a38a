//! One delivery attempt: build the request from the claimed delivery, send it through
//! [`crate::outbound`], classify the outcome with [`crate::retry`], and record it in the store.
//!
//! **Invariant:** the attempt was claimed (durably) before this runs, and its result is
//! recorded fenced by the claim, so a late result can never overwrite a cancel or a newer claim.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::header::{CONTENT_TYPE, USER_AGENT};
use http::HeaderValue;
use spool_store::model::{Applied, AttemptResult, Body, Claimed, Disposition};
use spool_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::{Metrics, OutcomeLabel, ResultLabel};
use crate::outbound::{self, Outbound, SendErrorCode};
use crate::retry::{self, Backoff, Verdict};

/// What every attempt needs, shared by all of them.
pub struct Deliverer {
    pub store: Store,
    pub outbound: Outbound,
    pub metrics: Arc<Metrics>,
    pub backoff: Backoff,
    pub request_timeout: Duration,
    /// Lease of a delivery claimed ahead, to follow the current one.
    pub lease_ms: i64,
    /// Whether to claim ahead at all: a delivery claimed ahead may wait for one request before
    /// its own is sent, so its lease must outlast two request timeouts.
    pub look_ahead: bool,
    /// Graceful shutdown has begun: finish, but take on no further work.
    pub stop: CancellationToken,
}

/// What an attempt says about its target, for the scheduler's per-target pause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetHealth {
    /// The target sent an HTTP response (any status): it is up.
    Answered,
    /// Connection refused or unreachable, or the name did not resolve.
    Unreachable,
    /// Neither (timeout, TLS error, interrupted, blocked): no conclusion.
    Unknown,
}

impl TargetHealth {
    fn of(result: &AttemptResult) -> TargetHealth {
        let unreachable =
            [SendErrorCode::ConnectFailed, SendErrorCode::DnsFailed].map(SendErrorCode::as_str);
        match result.error_code.as_deref() {
            Some(code) if unreachable.contains(&code) => TargetHealth::Unreachable,
            _ if result.http_status.is_some() => TargetHealth::Answered,
            _ => TargetHealth::Unknown,
        }
    }
}

/// The `User-Agent` sent unless the delivery sets its own.
pub const USER_AGENT_VALUE: &str = concat!("spoold/", env!("CARGO_PKG_VERSION"));

impl Deliverer {
    /// Run one attempt to the end and record it; while the target keeps answering, go on with
    /// its next due delivery. That next delivery is claimed while the current request is on the
    /// wire, and the current result is recorded while the next request is, so a busy target's
    /// slot waits neither for the scheduler nor for a commit. `interrupt` cuts an attempt short
    /// (shutdown); such an attempt is recorded as interrupted and does not use up an attempt.
    ///
    /// `released` is called once the slot is given up, before the last result is recorded (the
    /// request no longer occupies the target).
    pub async fn attempt(
        &self,
        first: Claimed,
        interrupt: CancellationToken,
        released: impl FnOnce(TargetHealth),
    ) {
        let mut current = first;
        // The previous result of this slot, recorded while the current request is sent.
        let mut unrecorded: Option<AttemptResult> = None;
        loop {
            let look_ahead = self.may_go_on(&interrupt);
            let (result, ahead, ()) = tokio::join!(
                self.send(&current, &interrupt),
                self.claim_ahead(look_ahead, &current.origin),
                self.record(unrecorded.take()),
            );
            let health = TargetHealth::of(&result);
            let next = match ahead {
                Some(next) if health == TargetHealth::Answered && self.may_go_on(&interrupt) => {
                    Some(next)
                }
                Some(unsent) => {
                    // Claimed ahead but not to be sent now: back to pending, as if never claimed.
                    if let Err(e) = self
                        .store
                        .unclaim(unsent.id.clone(), unsent.claim_seq)
                        .await
                    {
                        warn!(delivery_id = %unsent.id, error = %e,
                              "could not give back a claim; it will be sent after its lease");
                    }
                    None
                }
                None => None,
            };
            match next {
                Some(next) => {
                    unrecorded = Some(result);
                    current = next;
                }
                None => {
                    released(health);
                    self.record(Some(result)).await;
                    return;
                }
            }
        }
    }

    /// Whether this slot may take on another delivery: not while shutting down.
    fn may_go_on(&self, interrupt: &CancellationToken) -> bool {
        self.look_ahead && !self.stop.is_cancelled() && !interrupt.is_cancelled()
    }

    /// The next due delivery of `origin`, claimed now, if `wanted`.
    async fn claim_ahead(&self, wanted: bool, origin: &str) -> Option<Claimed> {
        if !wanted {
            return None;
        }
        match self
            .store
            .claim_next_for(origin.to_owned(), self.lease_ms)
            .await
        {
            Ok(next) => next,
            Err(e) => {
                warn!(target_origin = %origin, error = %e, "claiming ahead failed");
                None
            }
        }
    }

    /// Record a result and count it, or log why it could not be recorded: the claim then stays
    /// in the store with its lease, and when the lease runs out the delivery is reclaimed and
    /// sent again (at least once), so nothing is lost.
    async fn record(&self, result: Option<AttemptResult>) {
        let Some(result) = result else { return };
        let (id, claim_seq, disposition) =
            (result.id.clone(), result.claim_seq, result.disposition);
        match self.store.complete(result).await {
            Ok(Applied::Now(status)) => {
                let label = match (disposition, status) {
                    (Disposition::Succeeded, _) => "succeeded",
                    (Disposition::Interrupted, _) => "interrupted",
                    (_, spool_store::model::DeliveryStatus::Pending) => "retryable_failure",
                    _ => "terminal_failure",
                };
                self.metrics
                    .results
                    .get_or_create(&ResultLabel { result: label })
                    .inc();
            }
            Ok(Applied::Fenced) => {
                info!(delivery_id = %id, claim_seq,
                      "attempt result arrived after its claim ended; delivery left unchanged");
            }
            Err(e) => warn!(delivery_id = %id, claim_seq, error = %e,
                            "could not record attempt result; it will be retried after the lease"),
        }
    }

    /// Send one attempt and classify its outcome (nothing is recorded yet).
    async fn send(&self, claimed: &Claimed, interrupt: &CancellationToken) -> AttemptResult {
        let started = Instant::now();
        self.metrics.attempts.inc();
        let request = outbound::Request {
            method: &claimed.method,
            url: &claimed.target_url,
            headers: request_headers(claimed),
            body: bytes::Bytes::copy_from_slice(claimed.body.bytes()),
            timeout: self.request_timeout,
        };
        let sent = tokio::select! {
            sent = self.outbound.send(request) => Some(sent),
            () = interrupt.cancelled() => None,
        };
        let elapsed = started.elapsed();
        let result = self.judge(claimed, sent, elapsed);
        let outcome = outcome_name(result.disposition);
        self.metrics
            .attempt_duration
            .get_or_create(&OutcomeLabel { outcome })
            .observe(elapsed.as_secs_f64());
        if result.error_code.as_deref() == Some(SendErrorCode::TargetBlocked.as_str()) {
            self.metrics.blocked.inc();
        }
        info!(
            delivery_id = %claimed.id,
            attempt = claimed.attempt,
            target_origin = %claimed.origin,
            outcome,
            http_status = result.http_status,
            error_code = result.error_code.as_deref(),
            duration_ms = result.duration_ms,
            "delivery attempt finished"
        );
        result
    }

    fn judge(
        &self,
        claimed: &Claimed,
        sent: Option<Result<outbound::Response, outbound::SendError>>,
        elapsed: Duration,
    ) -> AttemptResult {
        let mut result = AttemptResult {
            id: claimed.id.clone(),
            claim_seq: claimed.claim_seq,
            disposition: Disposition::Interrupted,
            http_status: None,
            error_code: None,
            error: None,
            duration_ms: elapsed.as_millis() as i64,
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
            None => {
                result.error_code = Some("shutdown".into());
                result.error =
                    Some("attempt interrupted by shutdown; it will be sent again".into());
            }
            Some(Ok(resp)) => {
                result.http_status = Some(resp.status);
                match retry::classify_status(resp.status) {
                    Verdict::Succeeded => result.disposition = Disposition::Succeeded,
                    verdict => {
                        result.error = Some(status_error(&resp));
                        if (300..400).contains(&resp.status) {
                            result.error_code = Some("redirect_not_followed".into());
                        } else {
                            result.error_code = Some("http_status".into());
                        }
                        result.disposition = if verdict == Verdict::Retry {
                            retry_in(Some(resp.status), Some(&resp.headers))
                        } else {
                            Disposition::Failed
                        };
                    }
                }
            }
            Some(Err(e)) => {
                result.error_code = Some(e.code.as_str().to_owned());
                result.error = Some(e.message);
                // Asking again cannot help when the policy or the request itself forbids it.
                result.disposition = if e.code.is_retryable() {
                    retry_in(None, None)
                } else {
                    Disposition::Failed
                };
            }
        }
        result
    }
}

fn outcome_name(d: Disposition) -> &'static str {
    match d {
        Disposition::Succeeded => "succeeded",
        Disposition::Retry { .. } => "retry",
        Disposition::Failed => "failed",
        Disposition::Interrupted => "interrupted",
    }
}

/// The stored headers plus the ones spoold manages.
fn request_headers(claimed: &Claimed) -> http::HeaderMap {
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
        headers.insert(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE));
    }
    if let Ok(v) = HeaderValue::from_str(&claimed.id) {
        headers.insert(spool_proto::DELIVERY_ID_HEADER, v);
    }
    headers.insert(
        spool_proto::ATTEMPT_HEADER,
        HeaderValue::from(claimed.attempt),
    );
    headers
}

/// `HTTP 503: <start of the body>`, as spoold words it; 3xx names where it pointed.
fn status_error(resp: &outbound::Response) -> String {
    let excerpt = String::from_utf8_lossy(&resp.excerpt);
    let excerpt = excerpt.trim();
    let mut text = format!("HTTP {}", resp.status);
    if resp.redirects > 0 {
        text.push_str(&format!(" after {} redirects", resp.redirects));
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
        text.push_str(excerpt);
    }
    text
}
