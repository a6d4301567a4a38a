//! Bulk actions: an operator's retry or cancel applied to every delivery a filter matches.
//!
//! The matching deliveries are read a page at a time, oldest first, and each goes through the
//! very action a single `retry` or `cancel` takes — the store judges it on the row as it is
//! locked ([`model::Delivery::refusal`]), so a delivery that is not (or no longer) in a status
//! the action applies to is skipped and counted, never forced. A page's actions are written
//! concurrently, so the store's group commit carries many in one transaction. A dry run reads
//! the same pages and judges each row the same way, and writes nothing.

use futures_util::future::join_all;
use spool_proto::bulk::{BulkAction, BulkResult, BULK_IDS_SHOWN};
use spool_store::model::{self, ListFilter, OperatorAction, TransitionOutcome};
use spool_store::{Store, StoreError};

/// Deliveries read (and acted on) at a time.
const PAGE: u32 = 500;

/// Apply `action` to every delivery `filter` matches (or, with `dry_run`, count those it would
/// change). A store error ends the run: what was changed before it stays changed.
pub async fn run(
    store: &Store,
    action: BulkAction,
    filter: ListFilter,
    dry_run: bool,
) -> Result<BulkResult, StoreError> {
    let operator_action = match action {
        BulkAction::Retry => OperatorAction::Retry,
        BulkAction::Cancel => OperatorAction::Cancel,
    };
    let mut result = BulkResult {
        action,
        dry_run,
        matched: 0,
        changed: 0,
        skipped: 0,
        ids: Vec::new(),
    };
    let mut cursor = None;
    loop {
        let page = store.list_filtered(filter.clone(), PAGE, cursor).await?;
        result.matched += page.deliveries.len() as u64;
        let (eligible, refused): (Vec<model::Delivery>, Vec<model::Delivery>) = page
            .deliveries
            .into_iter()
            .partition(|d| d.refusal(operator_action).is_none());
        result.skipped += refused.len() as u64;
        let changed: Vec<String> = if dry_run {
            eligible.into_iter().map(|d| d.id).collect()
        } else {
            let outcomes = join_all(eligible.into_iter().map(|d| {
                let store = store.clone();
                async move {
                    let outcome = match action {
                        BulkAction::Retry => store.retry(d.id.clone()).await,
                        BulkAction::Cancel => store.cancel(d.id.clone()).await,
                    };
                    outcome.map(|o| matches!(o, TransitionOutcome::Done(_)).then_some(d.id))
                }
            }))
            .await;
            let mut changed = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                match outcome? {
                    Some(id) => changed.push(id),
                    // Changed (or purged) by something else since the page was read.
                    None => result.skipped += 1,
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
