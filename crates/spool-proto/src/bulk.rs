//! Bulk actions: one operator action (retry, cancel) on every delivery (or task) a filter
//! matches, each through the same state machine as the action on one — or only counted
//! (`dryRun`).

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::{DeliveryStatus, TaskStatus};

/// What a bulk request does to each delivery it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// `failed` → `pending`, a new cycle (as `POST /v1/deliveries/{id}/retry`).
    Retry,
    /// `pending` (or an at-least-once `in_flight`) → `canceled` (as `…/cancel`).
    Cancel,
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            BulkAction::Retry => "retry",
            BulkAction::Cancel => "cancel",
        }
    }
}

/// `POST /v1/deliveries/bulk`
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkRequest {
    /// Required.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(required = true, nullable = false)]
    pub action: Option<BulkAction>,
    /// Which deliveries: every field given must match. Required, with at least one field.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(required = true, nullable = false)]
    pub filter: Option<DeliveryFilter>,
    /// Count what the action would change, and change nothing.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub dry_run: Option<bool>,
}

/// The deliveries a bulk action applies to. Fields may be absent but not `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryFilter {
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub status: Option<DeliveryStatus>,
    /// An origin (`https://hooks.example.com`): its deliveries; or a URL with a path: the
    /// deliveries to that URL, whatever their query.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(
        nullable = false,
        pattern = "^https?://(([A-Za-z0-9-]+\\.)*[A-Za-z][A-Za-z0-9-]*|(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3})(:([0-9]{1,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?(/.*)?$",
        example = "https://hooks.example.com"
    )]
    pub target_origin: Option<String>,
    /// The `lastErrorCode` of the last attempt, e.g. `http_status` or `connect_failed`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(
        nullable = false,
        pattern = "^[a-z_]{1,64}$",
        example = "connect_failed"
    )]
    pub last_error_code: Option<String>,
    /// RFC 3339: created at or after this time.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false, format = DateTime)]
    pub created_after: Option<String>,
    /// RFC 3339: created before this time.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false, format = DateTime)]
    pub created_before: Option<String>,
}

/// `POST /v1/tasks/bulk`
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskBulkRequest {
    /// Required.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(required = true, nullable = false)]
    pub action: Option<BulkAction>,
    /// Which tasks: every field given must match. Required, with at least one field.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(required = true, nullable = false)]
    pub filter: Option<TaskFilter>,
    /// Count what the action would change, and change nothing.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub dry_run: Option<bool>,
}

/// The tasks a bulk action applies to. Fields may be absent but not `null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskFilter {
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false)]
    pub status: Option<TaskStatus>,
    /// A task type (declared or not: tasks of a type removed since are matched too).
    #[serde(
        rename = "type",
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false, example = "backup")]
    pub task_type: Option<String>,
    /// RFC 3339: created at or after this time.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false, format = DateTime)]
    pub created_after: Option<String>,
    /// RFC 3339: created before this time.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(nullable = false, format = DateTime)]
    pub created_before: Option<String>,
}

/// What a bulk action did (or, on a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulkResult {
    pub action: BulkAction,
    pub dry_run: bool,
    /// Deliveries (or tasks) the filter matched.
    pub matched: u64,
    /// Of those, changed by the action (on a dry run: that it would change).
    pub changed: u64,
    /// Of those, left as they were: in a status the action does not apply to, or changed by
    /// something else meanwhile.
    pub skipped: u64,
    /// The first ids changed (or that would be), up to 20, oldest first.
    pub ids: Vec<String>,
}

/// How many ids a [`BulkResult`] lists.
pub const BULK_IDS_SHOWN: usize = 20;

/// A field that is absent is `None`; one that is present must hold a value (`null` is refused,
/// as the document says).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_is_not_absent() {
        let parse = |text: &str| serde_json::from_str::<BulkRequest>(text);
        let ok = parse(r#"{"action":"retry","filter":{"status":"failed"},"dryRun":true}"#)
            .expect("valid");
        assert_eq!(ok.action, Some(BulkAction::Retry));
        assert_eq!(ok.dry_run, Some(true));
        assert_eq!(parse(r#"{"action":"cancel"}"#).expect("valid").filter, None);
        for bad in [
            r#"{"action":null}"#,
            r#"{"action":"retry","filter":{"status":null}}"#,
            r#"{"action":"retry","dryRun":null}"#,
            r#"{"action":"retry","filter":{"colour":"red"}}"#,
            r#"{"action":"delete"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
