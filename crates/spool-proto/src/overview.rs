//! The operator's overview: `GET /v1/stats` (how the spool is doing) and `GET /v1/targets`
//! (which targets have work waiting, are failing or are paused).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `GET /v1/stats`. Counts come from the store (kept with every change, never counted on
/// demand); the recent windows from the daemon's memory, empty after a restart.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatsView {
    /// Deliveries by status; every status is present.
    #[schema(example = json!({"pending": 12, "in_flight": 3, "succeeded": 1840, "failed": 2, "canceled": 0}))]
    pub deliveries: BTreeMap<String, u64>,
    /// Tasks by status; every status is present.
    #[serde(default)]
    #[schema(example = json!({"pending": 2, "running": 1, "succeeded": 310, "failed": 0, "timed_out": 0, "interrupted": 0, "canceled": 0, "manual_review": 1}))]
    pub tasks: BTreeMap<String, u64>,
    /// Due time of the delivery that has waited longest past its due time; absent if none is
    /// waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_due_at: Option<String>,
    /// How long that delivery has waited, e.g. `1m12s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_due_age: Option<String>,
    /// When this daemon started: the windows below are kept in its memory, so they count
    /// attempts since then when it started less than their length ago. Absent from a daemon
    /// that does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "2026-12-01T09:20:00.000Z")]
    pub started_at: Option<String>,
    /// Attempts and their results in the current minute and the four before it.
    pub last_five_minutes: ActivityView,
    /// The same over the current minute and the 59 before it.
    pub last_hour: ActivityView,
    /// The last hour minute by minute, oldest first: 60 entries, the last the current minute
    /// (for a chart).
    #[serde(default)]
    pub by_minute: Vec<ActivityView>,
    /// Targets paused for refusing connections or waiting out a `Retry-After`.
    pub paused_targets: u64,
    /// Bytes the database uses.
    pub database_bytes: u64,
    /// The admission limit (`--max-db-bytes`); absent when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_database_bytes: Option<u64>,
}

/// Attempts and results over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActivityView {
    pub attempts: u64,
    pub succeeded: u64,
    /// Failed attempts that will be tried again.
    pub retryable_failures: u64,
    /// Failed attempts that ended their delivery.
    pub terminal_failures: u64,
    /// Attempts cut short (shutdown, crash); not charged.
    pub interrupted: u64,
    /// At-most-once attempts whose outcome is not known (the delivery is `unknown`).
    #[serde(default)]
    pub unknown: u64,
}

/// One target (`scheme://host:port`) of `GET /v1/targets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetView {
    #[schema(example = "https://hooks.example.com:443")]
    pub origin: String,
    pub pending: u64,
    pub in_flight: u64,
    /// Deliveries to it that failed for good in the last hour.
    pub failed_last_hour: u64,
    /// Attempts to it that failed in the last hour, whatever came of them (retried, failed for
    /// good, unknown): what an outage shows first.
    #[serde(default)]
    pub failed_attempts_last_hour: u64,
    /// When an attempt to it last failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_at: Option<String>,
    /// Attempts in a row that could not connect (refused, unreachable, name not resolved).
    pub connect_failures: u32,
    /// Whether nothing is sent to it now: paused for refusing connections or for a run of 5xx
    /// and timeouts (the breaker), waiting out a `Retry-After`, or paused by an operator. A URL
    /// of it that answered 410 Gone holds only that URL (`goneUrls`).
    pub paused: bool,
    /// When it will be tried again, while paused for a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_until: Option<String>,
    /// Why it is paused: `unreachable`, `failing`, `retry_after` or `operator` (the last until
    /// an operator resumes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "failing")]
    pub pause_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_at: Option<String>,
    /// Its URLs that answered 410 Gone: nothing is sent to them (their deliveries wait,
    /// uncharged) until an operator resumes the URL or this origin; the rest of the origin goes
    /// on. Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone_urls: Vec<GoneUrlView>,
}

/// A URL that answered 410 Gone.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoneUrlView {
    /// Scheme, host, port and path: its deliveries with any query are held.
    #[schema(example = "https://hooks.example.com/services/T0/B0/XXXX")]
    pub url: String,
    /// When it answered 410 (on this host; for one another host or an earlier run found gone,
    /// when this daemon learnt of it).
    pub since: String,
}

/// `POST /v1/targets/{origin}/pause` and `…/resume`: the target as it now stands.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetPause {
    #[schema(example = "https://hooks.example.com:443")]
    pub origin: String,
    /// Paused by an operator now.
    pub paused: bool,
    /// A resume of a URL (a path was given): the URL, without its query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A resume: the URLs that were gone (410) and are sent to again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_urls: Vec<String>,
    /// A resume: how many deliveries that waited for a gone URL are due again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unparked: Option<u64>,
}

/// `GET /v1/targets`: in origin order.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetList {
    pub targets: Vec<TargetView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
