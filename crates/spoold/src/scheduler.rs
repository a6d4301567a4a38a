//! The scheduler: claims due deliveries and starts their attempts, within the global and
//! per-target concurrency limits.
//!
//! It never polls: it sleeps until the earliest due time, an enqueue (`wake`), or a finished
//! attempt frees a slot. A target that is slow, hung or refusing only ever occupies its own
//! per-target slots, and due work for other targets is claimed past it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use spool_store::{Capacity, Store};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

use crate::deliver::Deliverer;

/// How often leases are checked for expiry (a crashed attempt that could not record itself).
const LEASE_SWEEP: Duration = Duration::from_secs(5);
/// Pause after a store error before trying again.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

pub struct Scheduler {
    pub store: Store,
    pub deliverer: Arc<Deliverer>,
    pub wake: Arc<Notify>,
    pub concurrency: u32,
    pub per_target: u32,
    pub lease: Duration,
}

impl Scheduler {
    /// Run until `stop` is cancelled. Attempts are spawned on `attempts`; `interrupt` is handed
    /// to them so shutdown can cut them short.
    pub async fn run(
        self,
        stop: CancellationToken,
        interrupt: CancellationToken,
        attempts: TaskTracker,
    ) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<String>();
        let mut in_flight: HashMap<String, u32> = HashMap::new();
        let mut total: u32 = 0;
        let mut next_sweep = Instant::now() + LEASE_SWEEP;
        let lease_ms = self.lease.as_millis() as i64;
        loop {
            while let Ok(origin) = done_rx.try_recv() {
                release(&mut in_flight, &mut total, &origin);
            }
            if stop.is_cancelled() {
                break;
            }
            let mut wait_until: Option<Instant> = None;
            let free = self.concurrency.saturating_sub(total);
            if free > 0 {
                let capacity = Capacity {
                    per_origin: self.per_target,
                    in_flight: in_flight.clone(),
                };
                match self.store.claim_due(free, capacity, lease_ms).await {
                    Ok(batch) => {
                        if batch.expired > 0 {
                            self.deliverer
                                .metrics
                                .expired
                                .inc_by(u64::from(batch.expired));
                        }
                        let claimed = batch.claimed.len() as u32;
                        for c in batch.claimed {
                            *in_flight.entry(c.origin.clone()).or_insert(0) += 1;
                            total += 1;
                            let deliverer = Arc::clone(&self.deliverer);
                            let done = done_tx.clone();
                            let interrupt = interrupt.clone();
                            attempts.spawn(async move {
                                let origin = c.origin.clone();
                                deliverer.attempt(c, interrupt).await;
                                let _ = done.send(origin);
                            });
                        }
                        if claimed == free {
                            // Possibly more due: go round again once a slot frees up.
                            continue;
                        }
                        if claimed == 0 || batch.expired > 0 {
                            let saturated = saturated(&in_flight, self.per_target);
                            match self.store.next_due(saturated).await {
                                Ok(Some(at)) => {
                                    let delay = (at - self.store.now_ms()).max(0) as u64;
                                    // Something is due already but was not claimable (a race
                                    // with an enqueue): retry shortly rather than spin.
                                    let delay = Duration::from_millis(delay.max(5));
                                    wait_until = Some(Instant::now() + delay);
                                }
                                Ok(None) => {}
                                Err(e) => {
                                    error!(error = %e, "store query for the next due time failed");
                                    wait_until = Some(Instant::now() + ERROR_PAUSE);
                                }
                            }
                        } else {
                            wait_until = Some(Instant::now());
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "claiming due deliveries failed");
                        wait_until = Some(Instant::now() + ERROR_PAUSE);
                    }
                }
            }
            if Instant::now() >= next_sweep {
                next_sweep = Instant::now() + LEASE_SWEEP;
                match self.store.reclaim(true).await {
                    Ok(0) => {}
                    Ok(n) => info!(count = n, "reclaimed deliveries whose lease expired"),
                    Err(e) => error!(error = %e, "reclaiming expired leases failed"),
                }
            }
            let deadline = wait_until.map_or(next_sweep, |w| w.min(next_sweep));
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.wake.notified() => {}
                Some(origin) = done_rx.recv() => release(&mut in_flight, &mut total, &origin),
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }
}

fn release(in_flight: &mut HashMap<String, u32>, total: &mut u32, origin: &str) {
    *total = total.saturating_sub(1);
    if let Some(n) = in_flight.get_mut(origin) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            in_flight.remove(origin);
        }
    }
}

fn saturated(in_flight: &HashMap<String, u32>, per_target: u32) -> Vec<String> {
    in_flight
        .iter()
        .filter(|(_, n)| **n >= per_target)
        .map(|(o, _)| o.clone())
        .collect()
}
