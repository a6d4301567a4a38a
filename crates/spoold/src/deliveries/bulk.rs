//! Bulk actions: an operator's retry or cancel applied to every delivery a filter matches.
//!
//! The matching deliveries are read a page at a time, oldest first, and each goes through the
//! very action a single `retry` or `cancel` takes — the store judges it on the row as it is
//! locked ([`model::Delivery::refusal`]), so a delivery that is not (or no longer) in a status
//! the action applies to is skipped and counted, never forced. A page's actions are written in
//! chunks, each one store call for many deliveries ([`Store::retry_each`]: one transaction on
//! PostgreSQL, one job of the writer on SQLite): on PostgreSQL a few chunks at a time, so a page
//! costs a few commits and the rest of the API keeps connections to the store meanwhile; on
//! SQLite all of a page's at once, which the writer commits together. A dry run reads
//! the same pages and judges each row the same way, and writes nothing.

use futures_util::{stream, StreamExt as _, TryStreamExt as _};
use spool_proto::bulk::{BulkAction, BulkResult, BULK_IDS_SHOWN};
use spool_store::model::{self, ListFilter, OperatorAction, TransitionOutcome};
use spool_store::{Store, StoreError};

/// Deliveries read (and acted on) at a time.
const PAGE: u32 = 500;
/// Deliveries changed by one store call (on PostgreSQL, one transaction).
const CHUNK: usize = 100;
/// Chunks written at once on PostgreSQL: the store's other users (the API, the deliverers)
/// keep the rest of its connections. On SQLite a page's chunks go to the writer together, which
/// commits them as one batch.
const CHUNKS_AT_ONCE: usize = 3;

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
            let ids: Vec<String> = eligible.into_iter().map(|d| d.id).collect();
            let chunks: Vec<Vec<String>> = ids.chunks(CHUNK).map(<[String]>::to_vec).collect();
            let outcomes: Vec<(Vec<String>, Vec<TransitionOutcome>)> = stream::iter(chunks)
                .map(|chunk| async move {
                    let outcomes = match action {
                        BulkAction::Retry => store.retry_each(chunk.clone()).await,
                        BulkAction::Cancel => store.cancel_each(chunk.clone()).await,
                    }?;
                    Ok::<_, StoreError>((chunk, outcomes))
                })
                .buffered(if store.is_shared() {
                    CHUNKS_AT_ONCE
                } else {
                    PAGE as usize
                })
                .try_collect()
                .await?;
            let mut changed = Vec::with_capacity(ids.len());
            for (id, outcome) in outcomes
                .into_iter()
                .flat_map(|(chunk, outcomes)| chunk.into_iter().zip(outcomes))
            {
                if outcome.is_done() {
                    changed.push(id);
                } else {
                    // Changed (or purged) by something else since the page was read.
                    result.skipped += 1;
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
