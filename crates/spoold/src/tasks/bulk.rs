//! Bulk actions on tasks: an operator's retry or cancel of every task a filter matches, each
//! as `POST /v1/tasks/{id}/retry` (or `/cancel`) does it — a retry only where the task's type
//! allows operator retries, with that type's attempts; a cancel of a running task recorded and
//! its attempt here asked to stop. Tasks in a status the action does not apply to are skipped
//! and counted. A dry run judges the same way and writes nothing. On SQLite a page's actions go
//! to the writer together (one commit carries many); on PostgreSQL, each a transaction, a few
//! at a time, so that the rest of the API keeps connections to the store meanwhile.

use futures_util::{stream, StreamExt as _};
use spool_proto::bulk::{BulkAction, BulkResult, BULK_IDS_SHOWN};
use spool_store::tasks::{Task, TaskAction, TaskFilter};
use spool_store::{Store, StoreError};

use crate::tasks::runner::Running;
use crate::tasks::TaskTypes;

/// Tasks read (and acted on) at a time.
const PAGE: u32 = 500;
/// Actions written at once on PostgreSQL (each its own transaction and connection).
const AT_ONCE_SHARED: usize = 3;

/// Apply `action` to every task `filter` matches (or, with `dry_run`, count those it would
/// change). A store error ends the run: what was changed before it stays changed.
pub async fn run(
    store: &Store,
    types: &TaskTypes,
    running: &Running,
    action: BulkAction,
    filter: TaskFilter,
    dry_run: bool,
) -> Result<BulkResult, StoreError> {
    let mut result = BulkResult {
        action,
        dry_run,
        matched: 0,
        changed: 0,
        skipped: 0,
        ids: Vec::new(),
    };
    // Attempts a retry adds: the type's; `None` when its type allows no operator retry.
    let extra = |task: &Task| {
        types
            .get(&task.task_type)
            .filter(|t| t.operator_retry)
            .map(|t| t.max_attempts)
    };
    let applies = |task: &Task| match action {
        BulkAction::Retry => task.status.retryable() && extra(task).is_some(),
        BulkAction::Cancel => task.status.cancelable(),
    };
    let mut cursor = None;
    loop {
        let page = store.list_tasks(filter.clone(), PAGE, cursor).await?;
        result.matched += page.tasks.len() as u64;
        let (eligible, refused): (Vec<Task>, Vec<Task>) = page.tasks.into_iter().partition(applies);
        result.skipped += refused.len() as u64;
        let changed: Vec<String> = if dry_run {
            eligible.into_iter().map(|t| t.id).collect()
        } else {
            let at_once = if store.is_shared() {
                AT_ONCE_SHARED
            } else {
                PAGE as usize
            };
            let outcomes: Vec<_> = stream::iter(eligible.into_iter().map(|task| {
                let extra = extra(&task).unwrap_or(1);
                async move {
                    let outcome = match action {
                        BulkAction::Retry => store.retry_task(task.id.clone(), extra).await,
                        BulkAction::Cancel => store.cancel_task(task.id.clone()).await,
                    };
                    outcome.map(|o| (task.id, o))
                }
            }))
            .buffered(at_once)
            .collect()
            .await;
            let mut changed = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                match outcome? {
                    (id, TaskAction::CancelRequested(_)) => {
                        running.cancel(&id);
                        changed.push(id);
                    }
                    (id, TaskAction::Done(_)) => changed.push(id),
                    // Changed (or purged) by something else since the page was read.
                    (_, TaskAction::Invalid(_) | TaskAction::NotFound) => result.skipped += 1,
                }
            }
            changed
        };
        result.changed += changed.len() as u64;
        let room = BULK_IDS_SHOWN.saturating_sub(result.ids.len());
        result.ids.extend(changed.into_iter().take(room));
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(result);
        }
    }
}
