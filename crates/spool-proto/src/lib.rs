//! Wire types shared by `spoold` and `spoolctl`: the JSON shapes of the HTTP API (compatible
//! with spoold v0.1.0), stable error codes, and the duration, size and time formats used in
//! flags and JSON. No I/O lives here.
//!
//! # Layout
//! - [`delivery`]: create request, delivery object, listings, attempt history.
//! - [`error`]: the error envelope and its stable codes.
//! - [`headers`]: header-name canonicalisation and token rules.
//! - [`journal`]: spoold v0.1.0's journal replayed into export records (`import
//!   --spoold-journal`).
//! - [`lock`]: resource locks held by tasks.
//! - [`maildrop`]: the file a `spoolctl send` drops when the daemon cannot be reached.
//! - [`overview`]: the operator's overview (stats, targets).
//! - [`step`]: the steps (checkpoints) a task's script reports done.
//! - [`units`]: `1h30m`-style durations, `64KiB`-style sizes, RFC 3339 times.

pub mod bulk;
pub mod delivery;
pub mod error;
pub mod headers;
pub mod journal;
pub mod lock;
pub mod maildrop;
pub mod overview;
pub mod signing;
pub mod step;
pub mod task;
pub mod transfer;
pub mod units;

pub use bulk::{BulkAction, BulkRequest, BulkResult, DeliveryFilter, TaskBulkRequest, TaskFilter};
pub use delivery::{
    AttemptList, AttemptView, CheckList, CheckView, CreateDelivery, DeliveryList, DeliveryMode,
    DeliveryStatus, DeliveryView, ListOrder, Reconcile, ResolveOutcome, ResolveRequest, Sign,
    TransitionList, TransitionView,
};
pub use error::{ApiError, ErrorBody, ErrorCode};
pub use lock::{LockList, LockView};
pub use overview::{ActivityView, GoneUrlView, StatsView, TargetList, TargetPause, TargetView};
pub use step::{
    ReportStep, StepName, StepNameError, TaskStepList, TaskStepView, MAX_STEP_NAME_BYTES,
};
pub use task::{
    ResolveTask, SubmitTask, TaskAttemptList, TaskAttemptView, TaskList, TaskParamView,
    TaskResolveOutcome, TaskStatus, TaskTransitionList, TaskTransitionView, TaskTypeList,
    TaskTypeView, TaskView,
};

/// Managed headers: set by spoold itself, or describing one connection (hop-by-hop, RFC 9110
/// §7.6.1), which spoold owns; refused in a create request in any case spelling.
pub const MANAGED_HEADERS: &[&str] = &[
    "Connection",
    "Content-Length",
    "Host",
    "Keep-Alive",
    "Proxy-Connection",
    "Te",
    "Trailer",
    "Transfer-Encoding",
    "Upgrade",
    "X-Spoold-Attempt",
    "X-Spoold-Delivery-Id",
];

/// Header carrying the stable delivery id on every attempt.
pub const DELIVERY_ID_HEADER: &str = "X-Spoold-Delivery-ID";
/// Header carrying the attempt number (1-based within the current cycle).
pub const ATTEMPT_HEADER: &str = "X-Spoold-Attempt";

/// At most once: the longest wait between two reconciliation checks of one delivery (and so
/// the largest `--reconcile-base`).
pub const MAX_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(300);

/// Largest create request accepted, in bytes.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// Largest body (after base64 decoding), in bytes.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Largest `targetUrl`, in bytes.
pub const MAX_URL_BYTES: usize = 4096;
/// Largest `idempotencyKey`, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// `maxAttempts` when absent or 0.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// Largest `maxAttempts`.
pub const MAX_MAX_ATTEMPTS: u32 = 100;
/// Listing page size bounds.
pub const DEFAULT_LIST_LIMIT: u32 = 100;
pub const MAX_LIST_LIMIT: u32 = 500;
