//! Delivery JSON: the create request, the delivery object, listings and attempt history.
//! Field names, order and omission rules follow spoold v0.1.0; fields it lacks are additions.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use utoipa::ToSchema;

/// `POST /v1/deliveries`. Every field is optional at the JSON level; the rules are applied by
/// the daemon's validation, which reports `invalid_delivery`.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateDelivery {
    /// Reusing a key with the same request returns the existing delivery (200); with a different
    /// request, 409 `idempotency_conflict`. Trimmed; at most 256 bytes; no NUL (any other
    /// character, as spoold v0.1.0 took it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[^\\x00]*$")]
    pub idempotency_key: Option<String>,
    /// `http` or `https` URL with a host; no user info, no fragment; at most 4096 bytes.
    /// Required (it is an `Option` here so that its absence gets the daemon's own message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        example = "https://hooks.example.com/events",
        required = true,
        nullable = false,
        max_length = 4096,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\\s@:]"
    )]
    pub target_url: Option<String>,
    /// HTTP method (a token), upper-cased; empty or absent means `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]*$", example = "POST")]
    pub method: Option<String>,
    /// Request headers; names are canonicalised. A `null` value means an empty value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<BTreeMap<String, Option<String>>>,
    /// A JSON body, stored and sent byte for byte as it appears in the request. `null` is a
    /// body (the four bytes `null`).
    #[serde(
        default,
        deserialize_with = "present_raw",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<serde_json::Value>)]
    pub body: Option<Box<RawValue>>,
    /// A binary body in strict standard base64 (at most 1 MiB decoded); not together with
    /// `body`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        // Strict: the bits a padded end leaves over must be zero.
        pattern = r"^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$",
        max_length = 1398104
    )]
    pub body_base64: Option<String>,
    /// Attempts per cycle, 1–100; absent or 0 means 8. A number with a zero fraction (`8.0`)
    /// is an integer too, as JSON Schema says.
    #[serde(
        default,
        deserialize_with = "integral",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(minimum = 0, maximum = 100)]
    pub max_attempts: Option<i64>,
    /// RFC 3339: no attempt before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub not_before: Option<String>,
    /// RFC 3339, in the future (unless the idempotency key finds the original): no attempt
    /// starts after this time; the delivery then fails as `expired`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    /// `at_least_once` (the default) or `at_most_once`: never sent again once the request may
    /// have reached the target; such an outcome is `unknown` until reconciliation or a person
    /// settles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DeliveryMode>,
    /// At most once: the business key the target can be searched by (default: the idempotency
    /// key). At most 256 bytes; no control character, and no invisible one (a Unicode format
    /// character such as U+200B or U+202E, a line or paragraph separator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        max_length = 256,
        // Unicode's Cc, and its Cf, Zl and Zp of the basic plane (what the daemon refuses).
        pattern = r"^[^\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]*$"
    )]
    pub fingerprint: Option<String>,
    /// At most once: how to ask the target whether an `unknown` request arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<Reconcile>,
    /// RFC 6901 JSON pointer to the target's id in a 2xx response body (e.g. `/id`); the value
    /// found is kept as `remoteId`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(/([^~\\x00]|~[01])*)?$", max_length = 256)]
    pub remote_id_pointer: Option<String>,
    /// Sign every attempt (Standard Webhooks) with this `[secrets]` entry of the daemon's
    /// configuration, in place of the `[[targets]]` rule's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign: Option<Sign>,
}

/// Which secret signs a delivery's requests (`webhook-id`, `webhook-timestamp`,
/// `webhook-signature`, per the Standard Webhooks specification).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sign {
    /// The name of a `[secrets]` entry declared in the daemon's configuration file (the key
    /// itself is never sent, stored or shown). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        required = true,
        nullable = false,
        pattern = "^[A-Za-z0-9_.-]{1,64}$",
        example = "billing"
    )]
    pub secret_ref: Option<String>,
}

/// How a delivery may be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryMode {
    /// Sent until it succeeds; the target deduplicates by `X-Spoold-Delivery-ID`.
    #[default]
    AtLeastOnce,
    /// Never sent again once it may have reached the target.
    AtMostOnce,
}

/// A query that asks the target whether an at-most-once request arrived. In a delivery view
/// every field is shown (defaults filled in; secret header values masked).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reconcile {
    /// `http` or `https` URL template; `{fingerprint}` and `{deliveryId}` are replaced,
    /// percent-encoded, in its path or query (not in its host or port). Required. The same
    /// address policy applies as to deliveries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        required = true,
        nullable = false,
        max_length = 4096,
        pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\\\s@:{}]",
        example = "https://api.example.com/orders?ref={fingerprint}"
    )]
    pub url: Option<String>,
    /// Default `GET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]*$", example = "GET")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub headers: Option<BTreeMap<String, Option<String>>>,
    /// RFC 6901 pointer to the array of matches in the answer; default: the answer is the array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(/([^~\\x00]|~[01])*)?$", max_length = 256)]
    pub matches_pointer: Option<String>,
    /// Pointer to the target's id inside one match; default `/id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^(/([^~\\x00]|~[01])*)?$", max_length = 256)]
    pub remote_id_pointer: Option<String>,
    /// How long an `unknown` outcome is checked before it goes to `manual_review`, counted from
    /// entering `unknown`: `1h` (the default), `30m`, … between 1s and 30 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "1h")]
    pub observation_window: Option<String>,
}

/// An integer, also when written with a zero fraction (`8.0`); `null` is absent.
pub(crate) fn integral<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    use serde::de::Error as _;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => n
            .as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            })
            .map(Some)
            .ok_or_else(|| {
                D::Error::custom(format!("invalid type: number {n}, expected an integer"))
            }),
    }
}

/// A present `body` field is kept as raw bytes even when it is `null`.
pub(crate) fn present_raw<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The status of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    Pending,
    InFlight,
    Succeeded,
    Failed,
    Canceled,
    /// At most once: the request may have reached the target; not resent.
    Unknown,
    /// At most once: reconciliation could not settle it; a person must.
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

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeliveryStatus {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        DeliveryStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or(())
    }
}

/// A delivery as the API shows it. Listings omit `headers`, `body` and `bodyBase64`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryView {
    /// 32 lowercase hex characters; sent as `X-Spoold-Delivery-ID` on every attempt.
    #[schema(example = "0190f3c2a1b27c4e9d0a5b6c7d8e9f01")]
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub target_url: String,
    pub method: String,
    /// Values of sensitive headers are masked unless `?reveal=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<BTreeMap<String, String>>,
    pub status: DeliveryStatus,
    /// Attempts started in the current cycle (the last `X-Spoold-Attempt` sent), interrupted
    /// ones included.
    pub attempts: u32,
    /// Of those, attempts cut short by a shutdown or a crash: not charged against
    /// `maxAttempts`. Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_attempts: Option<u32>,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Stable code of the last failure: `http_status`, `connect_failed`, `dns_failed`,
    /// `tls_failed`, `timeout`, `target_blocked`, `redirect_not_followed`, `expired`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_response_code: Option<u16>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// A JSON body (any JSON value), exactly as submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub body: Option<Box<RawValue>>,
    /// A binary body, standard base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// `at_most_once`; absent for `at_least_once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DeliveryMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile: Option<Reconcile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id_pointer: Option<String>,
    /// The secret that signs its attempts, when the create named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sign: Option<Sign>,
    /// The target's id for what it created (from a 2xx body, reconciliation or an operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    /// When it last became `unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_since: Option<String>,
    /// When its observation window closes: still `unknown` then → `manual_review`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review_at: Option<String>,
    /// While `unknown`: when the target is asked next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_check_at: Option<String>,
    /// Reconciliation checks made (`GET /v1/deliveries/{id}/checks`); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<u32>,
}

/// `GET /v1/deliveries`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryList {
    /// Number of deliveries on this page.
    pub count: usize,
    pub deliveries: Vec<DeliveryView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttemptView {
    /// The retry cycle (1 for the first; each operator retry starts a new one).
    pub cycle: u32,
    /// The `X-Spoold-Attempt` value sent.
    pub number: u32,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// `succeeded`, `retry`, `failed`, `interrupted`; absent while in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
}

/// `GET /v1/deliveries/{id}/attempts`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AttemptList {
    pub attempts: Vec<AttemptView>,
}

/// One status change of a delivery.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransitionView {
    /// Absent on the first entry: the delivery was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<DeliveryStatus>,
    pub to: DeliveryStatus,
    /// The delivery's attempt count in its cycle after the change.
    pub attempt: u32,
    pub at: String,
    /// Why, as a stable code: `created`, `claimed`, `reserved`, `released`, `delivered`, the
    /// failure's error code (`http_status`, `connect_failed`, `timeout`, `daemon_restart`,
    /// `lease_expired`, `shutdown`, …), `expired`, `canceled`, `retried`; at most once also
    /// `reconciled`, `multiple_matches`, `no_match_after_window`, `no_reconcile_configured`,
    /// `checks_failed_after_window`, `resolved` (an operator's decision) and `resend`.
    #[schema(example = "claimed")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The order of `GET /v1/deliveries`: `asc` (oldest first, the default) or `desc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListOrder {
    #[default]
    Asc,
    Desc,
}

/// `POST /v1/deliveries/{id}/resolve`: an operator's decision on an `unknown` or
/// `manual_review` delivery.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveRequest {
    /// `succeeded` (it did arrive), `failed` (it did not, and must not be sent) or `resend`
    /// (send it again: a new cycle). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false)]
    pub outcome: Option<ResolveOutcome>,
    /// Why; kept in the transition log. Required, at most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        required = true,
        nullable = false,
        pattern = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
        max_length = 4096
    )]
    pub note: Option<String>,
    /// With `succeeded`: the target's id for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 256)]
    pub remote_id: Option<String>,
}

/// What an operator decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResolveOutcome {
    Succeeded,
    Failed,
    Resend,
}

/// One reconciliation check of an `unknown` delivery.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckView {
    pub at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Matches in the answer; absent when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<u32>,
    /// Why the check failed: `http_status`, `timeout`, `target_blocked`, `invalid_response`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// `GET /v1/deliveries/{id}/checks`: oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CheckList {
    pub checks: Vec<CheckView>,
}

/// `GET /v1/deliveries/{id}/transitions`: oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TransitionList {
    pub transitions: Vec<TransitionView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_bytes_survive_exactly() {
        let req: CreateDelivery =
            serde_json::from_str(r#"{"targetUrl":"http://127.0.0.1/","body": { "a" :  "<&>" } }"#)
                .expect("valid request");
        assert_eq!(
            req.body.as_deref().map(RawValue::get),
            Some(r#"{ "a" :  "<&>" }"#)
        );
    }

    #[test]
    fn null_body_is_a_body() {
        let req: CreateDelivery = serde_json::from_str(r#"{"body":null}"#).expect("valid request");
        assert_eq!(req.body.as_deref().map(RawValue::get), Some("null"));
        let req: CreateDelivery = serde_json::from_str(r#"{}"#).expect("valid request");
        assert!(req.body.is_none());
    }

    #[test]
    fn integers_may_have_a_zero_fraction() {
        let attempts = |json: &str| {
            serde_json::from_str::<CreateDelivery>(json)
                .map(|r| r.max_attempts)
                .map_err(|e| e.to_string())
        };
        assert_eq!(attempts(r#"{"maxAttempts":20}"#), Ok(Some(20)));
        assert_eq!(attempts(r#"{"maxAttempts":20.0}"#), Ok(Some(20)));
        assert_eq!(attempts(r#"{"maxAttempts":null}"#), Ok(None));
        assert!(attempts(r#"{"maxAttempts":20.5}"#).is_err_and(|e| e.contains("integer")));
        assert!(attempts(r#"{"maxAttempts":"20"}"#).is_err());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err =
            serde_json::from_str::<CreateDelivery>(r#"{"target":"x"}"#).expect_err("unknown field");
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn status_names() {
        for st in DeliveryStatus::ALL {
            let json = serde_json::to_string(&st).expect("serializable");
            assert_eq!(json, format!("\"{}\"", st.as_str()));
            assert_eq!(st.as_str().parse::<DeliveryStatus>(), Ok(st));
        }
    }
}
