//! Step JSON: the checkpoints a task's script reports done (`POST /v1/tasks/{id}/steps`, from
//! inside the script, with the attempt it runs as) and the list of them
//! (`GET /v1/tasks/{id}/steps`). A step is done once per task: reporting it again returns the
//! first record.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Longest step name, in bytes (the name is ASCII: `[A-Za-z0-9._:-]`).
pub const MAX_STEP_NAME_BYTES: usize = 128;

/// A step name: 1–128 characters of `[A-Za-z0-9._:-]`. Built only by [`StepName::parse`], so
/// spoold and spoolctl apply the same rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StepName(String);

/// Why a step name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepNameError {
    #[error("step name must not be empty")]
    Empty,
    #[error("step name is longer than {MAX_STEP_NAME_BYTES} characters")]
    TooLong,
    #[error("step name may contain only letters, digits, '.', '_', ':' and '-'")]
    Character,
}

impl StepName {
    pub fn parse(name: &str) -> Result<StepName, StepNameError> {
        if name.is_empty() {
            return Err(StepNameError::Empty);
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        {
            return Err(StepNameError::Character);
        }
        // ASCII only by now: bytes are characters.
        if name.len() > MAX_STEP_NAME_BYTES {
            return Err(StepNameError::TooLong);
        }
        Ok(StepName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for StepName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `POST /v1/tasks/{id}/steps`: the running attempt reports a step done.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportStep {
    /// 1–128 characters of `[A-Za-z0-9._:-]`. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        required = true,
        nullable = false,
        pattern = "^[A-Za-z0-9._:-]{1,128}$",
        example = "dump"
    )]
    pub name: Option<String>,
    /// The attempt reporting it (`SPOOLD_ATTEMPT`); it must be the task's running attempt, or
    /// the answer is 409 `not_current_attempt`. Required.
    /// A number with a zero fraction (`2.0`) is an integer too, as JSON Schema says.
    #[serde(
        default,
        deserialize_with = "crate::delivery::integral",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(
        required = true,
        nullable = false,
        minimum = 1,
        maximum = 4294967295_i64
    )]
    pub attempt: Option<i64>,
}

/// One step done: 201 when recorded now, 200 when it was done before (`attempt` is then the
/// attempt that did it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStepView {
    pub name: String,
    pub attempt: u32,
    /// RFC 3339 with milliseconds.
    pub at: String,
}

/// `GET /v1/tasks/{id}/steps`: in the order they were reported.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskStepList {
    pub steps: Vec<TaskStepView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        let check = |name: &str, expected: Result<(), StepNameError>| {
            assert_eq!(StepName::parse(name).map(|_| ()), expected, "{name:?}");
        };
        check("dump", Ok(()));
        check("db1.dump:part-2_of_3", Ok(()));
        check(&"a".repeat(MAX_STEP_NAME_BYTES), Ok(()));
        check("", Err(StepNameError::Empty));
        check(
            &"a".repeat(MAX_STEP_NAME_BYTES + 1),
            Err(StepNameError::TooLong),
        );
        for bad in ["a b", "a/b", "é", "a\n", "x;y", "a\0"] {
            check(bad, Err(StepNameError::Character));
        }
        assert_eq!(StepName::parse("x").expect("valid").as_str(), "x");
    }

    #[test]
    fn report_shape() {
        let req = ReportStep {
            name: Some("dump".into()),
            attempt: Some(2),
        };
        assert_eq!(
            serde_json::to_string(&req).expect("serializable"),
            r#"{"name":"dump","attempt":2}"#
        );
        assert!(serde_json::from_str::<ReportStep>(r#"{"name":"x","extra":1}"#).is_err());
    }
}
