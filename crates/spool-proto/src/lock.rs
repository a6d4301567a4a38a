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
    /// The attempt holding it (the task's latest).
    #[serde(default)]
    pub attempt: u32,
    /// Set while that attempt is being ended by another executor than the one that started it
    /// (why that one is gone: `daemon_restart`, `lease_expired`): the lock is released once
    /// every process of the attempt is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<String>,
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
