//! Terminal retention: finished deliveries, their attempts and idempotency keys are removed
//! `--terminal-retention` after they finished, in small batches so deliveries never wait long
//! behind a purge. Pending and in-flight work is never removed.

use std::sync::Arc;
use std::time::Duration;

use spool_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::metrics::Metrics;

/// Rows removed per store job.
const BATCH: u32 = 500;

/// Purge periodically until `stop`. Does nothing when `retention` is zero (keep forever).
pub async fn run(
    store: Store,
    retention: Duration,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    if retention.is_zero() {
        return;
    }
    let every = (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let older_than_ms = retention.as_millis() as i64;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let mut total = 0;
        loop {
            match store.purge_finished(older_than_ms, BATCH).await {
                Ok(n) => {
                    total += n;
                    metrics.pruned.inc_by(n);
                    if n < u64::from(BATCH) || stop.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    error!(error = %e, "retention purge failed");
                    break;
                }
            }
        }
        if total > 0 {
            info!(
                removed = total,
                "removed finished deliveries past retention"
            );
        }
    }
}
