//! The error envelope `{"error":{"code":"…","message":"…"}}` and its stable codes. Codes are a
//! public contract: clients branch on them, so they are never renamed.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every error code the API can return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The request JSON itself is wrong: syntax, trailing data, unknown field, wrong type, too
    /// large, `body` with `bodyBase64`, bad base64.
    InvalidRequest,
    /// A field breaks a delivery rule (URL, method, headers, sizes, attempts, times).
    InvalidDelivery,
    /// An idempotency key was reused for a different request.
    IdempotencyConflict,
    /// The target is an address the outbound policy refuses.
    TargetBlocked,
    /// The listing's `status` parameter is not a status.
    InvalidStatus,
    /// The listing's `limit` parameter is out of range.
    InvalidLimit,
    /// The listing's `cursor` parameter is malformed.
    InvalidCursor,
    /// No such delivery, or no such route.
    NotFound,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// The action does not apply to the delivery's current status.
    InvalidTransition,
    /// The database is over its admission limit (`--max-db-bytes`).
    JournalFull,
    /// The disk is full: nothing was written.
    StorageFull,
    /// The create could not be made durable.
    PersistenceFailed,
    /// The database server cannot be reached (PostgreSQL): nothing was written, or for a
    /// create whose COMMIT was cut off, it is unknown — retry with the same idempotency key.
    /// The daemon reconnects by itself.
    StorageUnavailable,
    /// Any other server-side failure.
    InternalError,
    /// `/readyz`: the store cannot write.
    NotReady,
    /// A bearer token is required and was missing or wrong.
    Unauthorized,
    /// The task type is not declared in the daemon's configuration.
    UnknownTaskType,
    /// A task parameter the type does not declare.
    UnknownParam,
    /// A parameter the type requires (and has no default for) is missing.
    MissingParam,
    /// A task parameter is not a string, too long, or does not match its pattern.
    InvalidParams,
    /// A step was reported by an attempt that is not the task's running attempt.
    NotCurrentAttempt,
    /// The attempt has no output kept (no such attempt, or its log is gone).
    OutputNotFound,
    /// The token is valid, but not for this route (a step token used beyond its task's steps).
    Forbidden,
    /// `sign.secretRef` names no `[secrets]` entry of the daemon's configuration.
    UnknownSecret,
    /// The request's body did not arrive in full within `--body-read-timeout` of its head:
    /// nothing was done, and the connection is closed.
    RequestTimeout,
    /// The daemon began shutting down while the request's body was still arriving: nothing
    /// was done, and the connection is closed. Send it again (to this daemon once it is back,
    /// or to another).
    ShuttingDown,
    /// The request's body is over the route's limit (the message says it): nothing was done,
    /// and the connection is closed. Every route but `POST /v1/deliveries`, which answers
    /// `invalid_request` as spoold v0.1.0 does.
    PayloadTooLarge,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidDelivery,
        ErrorCode::IdempotencyConflict,
        ErrorCode::TargetBlocked,
        ErrorCode::InvalidStatus,
        ErrorCode::InvalidLimit,
        ErrorCode::InvalidCursor,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::InvalidTransition,
        ErrorCode::JournalFull,
        ErrorCode::StorageFull,
        ErrorCode::PersistenceFailed,
        ErrorCode::StorageUnavailable,
        ErrorCode::InternalError,
        ErrorCode::NotReady,
        ErrorCode::Unauthorized,
        ErrorCode::UnknownTaskType,
        ErrorCode::UnknownParam,
        ErrorCode::MissingParam,
        ErrorCode::InvalidParams,
        ErrorCode::NotCurrentAttempt,
        ErrorCode::OutputNotFound,
        ErrorCode::Forbidden,
        ErrorCode::UnknownSecret,
        ErrorCode::RequestTimeout,
        ErrorCode::ShuttingDown,
        ErrorCode::PayloadTooLarge,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidDelivery => "invalid_delivery",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::TargetBlocked => "target_blocked",
            ErrorCode::InvalidStatus => "invalid_status",
            ErrorCode::InvalidLimit => "invalid_limit",
            ErrorCode::InvalidCursor => "invalid_cursor",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::InvalidTransition => "invalid_transition",
            ErrorCode::JournalFull => "journal_full",
            ErrorCode::StorageFull => "storage_full",
            ErrorCode::PersistenceFailed => "persistence_failed",
            ErrorCode::StorageUnavailable => "storage_unavailable",
            ErrorCode::InternalError => "internal_error",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::UnknownTaskType => "unknown_task_type",
            ErrorCode::UnknownParam => "unknown_param",
            ErrorCode::MissingParam => "missing_param",
            ErrorCode::InvalidParams => "invalid_params",
            ErrorCode::NotCurrentAttempt => "not_current_attempt",
            ErrorCode::OutputNotFound => "output_not_found",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::UnknownSecret => "unknown_secret",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::PayloadTooLarge => "payload_too_large",
        }
    }

    /// The HTTP status that carries this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidRequest
            | ErrorCode::InvalidDelivery
            | ErrorCode::TargetBlocked
            | ErrorCode::InvalidStatus
            | ErrorCode::InvalidLimit
            | ErrorCode::InvalidCursor
            | ErrorCode::UnknownTaskType
            | ErrorCode::UnknownParam
            | ErrorCode::MissingParam
            | ErrorCode::InvalidParams
            | ErrorCode::UnknownSecret => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound | ErrorCode::OutputNotFound => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::IdempotencyConflict
            | ErrorCode::InvalidTransition
            | ErrorCode::NotCurrentAttempt => 409,
            ErrorCode::PersistenceFailed | ErrorCode::InternalError => 500,
            ErrorCode::NotReady | ErrorCode::StorageUnavailable | ErrorCode::ShuttingDown => 503,
            ErrorCode::JournalFull | ErrorCode::StorageFull => 507,
        }
    }
}

/// `{"error": {...}}`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ApiError,
}

/// One error: a stable machine-readable `code` and a human message.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    #[schema(example = "invalid_delivery")]
    pub code: String,
    #[schema(example = "target URL is required")]
    pub message: String,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ApiError {
                code: code.as_str().to_owned(),
                message: message.into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let s = code.as_str();
            assert!(seen.insert(s), "duplicate code {s}");
            assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{s}");
            assert!((400..600).contains(&code.http_status()));
        }
    }

    #[test]
    fn envelope_shape() {
        let body = ErrorBody::new(ErrorCode::NotFound, "delivery not found");
        assert_eq!(
            serde_json::to_string(&body).expect("serializable"),
            r#"{"error":{"code":"not_found","message":"delivery not found"}}"#
        );
    }
}
