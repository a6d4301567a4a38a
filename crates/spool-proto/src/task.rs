//! Task JSON: submission, the task object, listings, attempts, transitions and declared types.
//! Same conventions as deliveries: camelCase, absent values omitted, RFC 3339 with milliseconds,
//! durations as strings (`10m`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `POST /v1/tasks/{id}/resolve`: a person's decision on a task in `manual_review`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveTask {
    /// `succeeded` (the work was done after all) or `failed` (it was not, and is not to be
    /// run again by itself). Required. (To run it again: retry; to drop it: cancel.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false)]
    pub outcome: Option<TaskResolveOutcome>,
    /// Why; kept in the transition log. Required, at most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        required = true,
        nullable = false,
        pattern = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]",
        max_length = 4096
    )]
    pub note: Option<String>,
}

/// What a person decided for a task in review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskResolveOutcome {
    Succeeded,
    Failed,
}

/// `POST /v1/tasks`: run a declared task type.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubmitTask {
    /// A task type declared in the daemon's configuration. Required.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schema(required = true, nullable = false, example = "backup")]
    pub task_type: Option<String>,
    /// The type's parameters, each a string matching its declared pattern. A name given twice
    /// is refused (`invalid_request`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "params_named_once"
    )]
    #[schema(value_type = Option<BTreeMap<String, String>>)]
    pub params: Option<serde_json::Map<String, serde_json::Value>>,
    /// Only for a type without an `idempotency_key` template: the business key (trimmed;
    /// ≤ 256 bytes; not blank; no control character, and no invisible one: a Unicode format
    /// character such as U+200B, U+FEFF or the bidi control U+202E, a line or paragraph
    /// separator). The same key with the same parameters returns the existing task (200); with
    /// other parameters, 409 `idempotency_conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"[^\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")]
    pub idempotency_key: Option<String>,
    /// RFC 3339: do not start before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub not_before: Option<String>,
}

/// `params` as the client wrote it, refusing a name written twice. JSON allows it, but which
/// value counts is up to the reader (serde_json's map keeps the last and drops the other
/// without a word): a client that sent both meant one of them, and the task must not run with
/// the other.
fn params_named_once<'de, D>(
    deserializer: D,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct Params;

    impl<'de> serde::de::Visitor<'de> for Params {
        type Value = Option<serde_json::Map<String, serde_json::Value>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object of parameters")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_map(Params)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut params = serde_json::Map::new();
            while let Some(name) = map.next_key::<String>()? {
                if params.contains_key(&name) {
                    return Err(serde::de::Error::custom(format!(
                        "params: parameter {name:?} is given twice"
                    )));
                }
                let value = map.next_value()?;
                params.insert(name, value);
            }
            Ok(Some(params))
        }
    }

    deserializer.deserialize_option(Params)
}

/// The status of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    Pending,
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Interrupted,
    Canceled,
    ManualReview,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 8] = [
        TaskStatus::Pending,
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::TimedOut,
        TaskStatus::Interrupted,
        TaskStatus::Canceled,
        TaskStatus::ManualReview,
    ];

    /// The wire name (`timed_out`, `manual_review`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Running => "running",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::TimedOut => "timed_out",
            TaskStatus::Interrupted => "interrupted",
            TaskStatus::Canceled => "canceled",
            TaskStatus::ManualReview => "manual_review",
        }
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub id: String,
    #[serde(rename = "type")]
    pub task_type: String,
    pub status: TaskStatus,
    /// Attempts started so far (the number of the last one).
    pub attempt: u32,
    pub max_attempts: u32,
    pub params: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub scope: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// When the next attempt may start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<String>,
    /// A task not started by then ends `timed_out` (`queue_timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_deadline: Option<String>,
    /// No attempt starts after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_deadline: Option<String>,
    /// `transient`, `script_error`, `invalid_params`, `permission_denied`, `timed_out`,
    /// `canceled`, `queue_timeout`, `retry_deadline`, `spawn_failed`, `daemon_restart`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether an automatic retry can still happen.
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// What the script wrote to `SPOOLD_RESULT_FILE` (at most 4 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_summary: Option<String>,
    /// Steps the script reported done (checkpoints), in the order they were reported.
    pub completed_steps: Vec<String>,
    /// Resource locks each attempt holds (the type's templates, rendered).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<String>,
    /// An operator asked to cancel it while it ran; its attempt is being stopped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
    /// Set while it is `running` only because its attempt's executor is gone and another
    /// executor is ending what is left of it (why: `daemon_restart`, `lease_expired`); it keeps
    /// its locks and its quota slot until every process of the attempt is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<String>,
}

/// `GET /v1/tasks`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskList {
    pub count: usize,
    pub tasks: Vec<TaskView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// One attempt of a task.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskAttemptView {
    pub number: u32,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// `succeeded`, `failed`, `timed_out`, `canceled`, `interrupted`; absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<i64>,
    /// `host:pid` of the daemon that ran it.
    pub executor_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_truncated: Option<bool>,
    /// SIGKILL was needed to end it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<bool>,
    /// Secrets and patterns replaced by `[REDACTED]` in its output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redactions: Option<u64>,
}

/// `GET /v1/tasks/{id}/attempts`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskAttemptList {
    pub attempts: Vec<TaskAttemptView>,
}

/// One status change of a task.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskTransitionView {
    /// Absent on the first entry: the task was submitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<TaskStatus>,
    pub to: TaskStatus,
    /// The task's attempt count after the change.
    pub attempt: u32,
    pub at: String,
    /// `submitted`, `started`, the attempt's error code, `succeeded`, `retry`, `canceled`,
    /// `queue_timeout`, `retry_deadline`, `daemon_restart`, `on_interrupt`, `retried`, …
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `GET /v1/tasks/{id}/transitions`: oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskTransitionList {
    pub transitions: Vec<TaskTransitionView>,
}

/// A declared parameter.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskParamView {
    /// The whole value must match.
    pub pattern: String,
    pub max_length: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// A declared task type (no environment values: they may be secrets).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskTypeView {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// argv templates (no shell).
    pub command: Vec<String>,
    pub params: BTreeMap<String, TaskParamView>,
    /// The business key template; absent: submissions give their own key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    pub scope: String,
    pub timeout: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_deadline: Option<String>,
    pub max_attempts: u32,
    pub backoff_base: String,
    pub backoff_cap: String,
    pub kill_grace: String,
    pub retry_on_timeout: bool,
    /// Exit code → `invalid_params`, `permission_denied`, `transient` or `script_error`.
    pub exit_codes: BTreeMap<String, String>,
    /// `review`, `retry` or `fail`.
    pub on_interrupt: String,
    pub operator_retry: bool,
    /// Names of the variables the type sets (values not shown).
    pub env: Vec<String>,
    /// Names of the variables read from secret files when an attempt starts (never shown,
    /// redacted from output).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// How many patterns are redacted from output (the patterns are not shown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub redact_patterns: usize,
    /// At most this many of its tasks run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Lock name templates; an attempt holds all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold_locks_between_attempts: bool,
    /// Output kept per attempt (head and tail), e.g. `1MiB`.
    pub output_limit: String,
    /// `review` or `retry`: what a failure after some steps were done leads to.
    pub on_partial_failure: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// `GET /v1/task-types`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskTypeList {
    pub types: Vec<TaskTypeView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_are_the_wire_names() {
        for st in TaskStatus::ALL {
            let json = serde_json::to_string(&st).expect("serializable");
            assert_eq!(json, format!("\"{}\"", st.as_str()));
        }
    }

    #[test]
    fn a_parameter_named_twice_is_refused() {
        let decode = |text: &str| serde_json::from_str::<SubmitTask>(text).map(|t| t.params);
        let twice = decode(r#"{"type":"t","params":{"db":"a","x":"1","db":"b"}}"#)
            .expect_err("named twice");
        assert!(
            twice
                .to_string()
                .contains(r#"parameter "db" is given twice"#),
            "{twice}"
        );
        // The same name however it is escaped.
        assert!(decode(r#"{"params":{"db":"a","\u0064b":"b"}}"#).is_err());
        let once = decode(r#"{"params":{"db":"a","x":"1"}}"#).expect("each once");
        assert_eq!(once.map(|p| p.len()), Some(2));
        assert_eq!(decode(r#"{"params":null}"#).expect("null"), None);
        assert_eq!(decode(r#"{}"#).expect("absent"), None);
        assert!(decode(r#"{"params":["db"]}"#).is_err());
    }
}
