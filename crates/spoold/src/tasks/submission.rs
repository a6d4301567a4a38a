//! Turning a submission into a [`NewTask`]: how large its body may be ([`max_body_bytes`]),
//! JSON decoding (`invalid_request`, also for a parameter named twice), the declared type
//! (`unknown_task_type`), its parameters (`unknown_param`, `missing_param`, `invalid_params`),
//! the business key (given — not empty, no control or invisible character — or rendered from
//! the type's template) and the digest that makes two submissions the same task. The same
//! shape as `deliveries::submission`: the API layer only reads the body, calls [`decode`] and
//! [`validate`], and hands the result to the store.
//!
//! Parse, don't validate: a `NewTask` exists only if every rule held.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use spool_proto::{ErrorCode, SubmitTask};
use spool_store::tasks::NewTask;

use super::types::render;
use super::TaskTypes;
use crate::characters::Unwanted;

/// What a submission may take besides its parameters' values: the type, the key, `notBefore`,
/// the parameters' names, JSON's punctuation and white space.
pub const SUBMISSION_BASE_BYTES: usize = 64 * 1024;

/// The most bytes one character of a value can take in JSON: a control character written as
/// `\u001b`.
const JSON_ESCAPE_FACTOR: usize = 6;

/// How large a submission's body may be: [`SUBMISSION_BASE_BYTES`] and room for the values of
/// the declared type that takes the most, every value at its `max_length` and written with the
/// longest escapes JSON has — so that every value a type accepts can be sent, however the
/// client's encoder escapes it. Follows the declared types through a reload. (The body is
/// read before its type is known, so the largest type sets the limit for all.)
pub fn max_body_bytes(declared: &TaskTypes) -> usize {
    let values = declared
        .iter()
        .map(|t| t.params.values().map(|p| p.max_length).sum::<usize>())
        .max()
        .unwrap_or(0);
    SUBMISSION_BASE_BYTES + values * JSON_ESCAPE_FACTOR
}

/// A refused submission: the code and message for the error envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: ErrorCode,
    pub message: String,
}

fn invalid(message: impl Into<String>) -> Rejection {
    Rejection {
        code: ErrorCode::InvalidRequest,
        message: message.into(),
    }
}

/// Decode one JSON object (its size is the API's to bound: [`max_body_bytes`]).
pub fn decode(bytes: &[u8]) -> Result<SubmitTask, Rejection> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("decode JSON: {e}")))
}

/// Check a submission against the declared types and build the task to store.
pub fn validate(req: SubmitTask, declared: &TaskTypes) -> Result<NewTask, Rejection> {
    let name = req.task_type.unwrap_or_default();
    let Some(kind) = declared.get(&name) else {
        return Err(Rejection {
            code: ErrorCode::UnknownTaskType,
            message: unknown_type(&name, declared),
        });
    };
    let params = kind
        .check_params(&req.params.unwrap_or_default())
        .map_err(|e| Rejection {
            code: match e.code {
                "unknown_param" => ErrorCode::UnknownParam,
                "missing_param" => ErrorCode::MissingParam,
                _ => ErrorCode::InvalidParams,
            },
            message: e.message,
        })?;
    let given_key = req.idempotency_key.map(given_key).transpose()?;
    let key = match (&kind.idempotency_key, given_key) {
        (Some(template), Some(_)) => {
            return Err(invalid(format!(
                "task type {name} derives its idempotency key from its parameters \
                 (idempotency_key = {template:?} in its declaration), so a submission with the \
                 same parameters is already the same task: leave out idempotencyKey \
                 (spoolctl task submit: --idempotency-key)"
            )))
        }
        (Some(template), None) => Some(render(template, &params)),
        (None, Some(k)) if k.len() > spool_proto::MAX_KEY_BYTES => {
            return Err(invalid("idempotencyKey must not exceed 256 bytes"))
        }
        (None, given) => given,
    };
    let not_before = req
        .not_before
        .as_deref()
        .map(|t| {
            spool_proto::units::parse_time(t).map_err(|_| {
                invalid("notBefore must be an RFC 3339 time, e.g. 2026-07-18T12:00:00Z")
            })
        })
        .transpose()?;
    let params_json =
        serde_json::to_string(&params).map_err(|e| invalid(format!("params: {e}")))?;
    Ok(NewTask {
        id: uuid::Uuid::now_v7().simple().to_string(),
        scope: render(&kind.scope, &params),
        idempotency_key: key,
        digest: digest(&name, &params),
        params: params_json,
        max_attempts: kind.max_attempts,
        not_before,
        queue_timeout_ms: kind.queue_timeout.map(|d| d.as_millis() as i64),
        retry_deadline_ms: kind.retry_deadline.map(|d| d.as_millis() as i64),
        locks: kind.locks(&params),
        task_type: name,
    })
}

/// Why `name` is not a type this daemon runs: the types it declares (a close one first, for a
/// typo), and where to see them.
fn unknown_type(name: &str, declared: &TaskTypes) -> String {
    let names = declared.names();
    if names.is_empty() {
        return "no task types are declared: a task type is a [tasks.NAME] table in the \
                configuration file spoold runs with (--config)"
            .to_owned();
    }
    // A long list is cut: the message is one line; the listing has them all.
    const SHOWN: usize = 20;
    let more = names.len().saturating_sub(SHOWN);
    let listed = format!(
        "declared: {}{} (spoolctl task types, GET /v1/task-types)",
        names[..names.len().min(SHOWN)].join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    if name.is_empty() {
        return format!("type is required; {listed}");
    }
    match crate::spelling::nearest(names.iter().map(|n| n.as_ref()), name) {
        Some(n) => {
            format!("task type {name:?} is not declared (did you mean {n:?}?); {listed}")
        }
        None => format!("task type {name:?} is not declared; {listed}"),
    }
}

/// A key as given, checked and trimmed: a key is a name a person reads back and compares, so
/// neither a control character (a newline, an escape) nor an invisible one (a format
/// character such as U+200B or U+202E, a line separator) may hide in it, and an empty one is
/// a mistake (to not deduplicate, leave it out).
fn given_key(key: String) -> Result<String, Rejection> {
    if let Some(u) = Unwanted::find(&key) {
        return Err(invalid(format!("idempotencyKey must not contain {u}")));
    }
    let key = key.trim();
    if key.is_empty() {
        return Err(invalid(
            "idempotencyKey must not be empty (leave it out for a task that is not deduplicated)",
        ));
    }
    Ok(key.to_owned())
}

/// What makes two submissions the same task: the type and every parameter (defaults filled in).
fn digest(task_type: &str, params: &BTreeMap<String, String>) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update(bytes.len().to_string().as_bytes());
        h.update(b":");
        h.update(bytes);
    };
    field(b"spoold-task-v1");
    field(task_type.as_bytes());
    for (name, value) in params {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    h.finalize().to_vec()
}
