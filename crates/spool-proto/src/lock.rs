//! Lock JSON: the resource locks held by tasks, and who waits for them (`GET /v1/locks`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::TaskStatus;

/// One held lock.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockView {
    /// The rendered lock name.
    pub name: String,
    /// The task holding it.
    pub task_id: String,
    pub task_type: String,
    /// `running`, or `pending` while the task keeps its locks through a retry's backoff.
    pub task_status: TaskStatus,
    /// RFC 3339 with milliseconds: held since.
    pub since: String,
    /// Pending tasks that want it, in the order they will get it.
    pub waiting: Vec<String>,
}

/// `GET /v1/locks`
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LockList {
    pub locks: Vec<LockView>,
}
