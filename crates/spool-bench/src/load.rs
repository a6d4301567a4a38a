//! The load generator. Closed loop ([`closed_loop`]): a fixed number of requests shared by
//! `concurrency` workers, each with its own keep-alive connection (one to each address, when
//! several daemons share the load: request `i` goes to address `i mod n`), every latency kept
//! so the percentiles are exact. Open loop ([`paced`]): requests started on a fixed schedule
//! whatever the responses do, each one's send and ack time kept.
//!
//! Both are bounded: by their request count, and by a time limit after which they fail.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::connection::Connection;
use crate::summary::Latencies;

/// Builds the body of request number `i`.
pub type BodyFn = Arc<dyn Fn(u64) -> Bytes + Send + Sync>;

/// A fixed-count, closed-loop load.
#[derive(Clone)]
pub struct ClosedLoop {
    /// Where the requests go, round-robin by request number (one address: all of them).
    pub addrs: Vec<SocketAddr>,
    pub path: String,
    pub concurrency: usize,
    pub requests: u64,
    /// Every response must have this status; anything else fails the run.
    pub expect: StatusCode,
    /// The run fails if it has not finished by then.
    pub time_limit: Duration,
    pub body: BodyFn,
}

/// What a closed-loop run measured.
pub struct ClosedLoopReport {
    /// Just before the first request was sent (connections were already open).
    pub started: Instant,
    pub elapsed: Duration,
    pub latencies: Latencies,
}

impl ClosedLoopReport {
    pub fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64()
    }
}

/// Run the load to the end; the first unexpected response or transport error fails it.
pub async fn closed_loop(load: &ClosedLoop) -> anyhow::Result<ClosedLoopReport> {
    if load.addrs.is_empty() {
        bail!("a load needs at least one address");
    }
    let mut connections = Vec::with_capacity(load.concurrency);
    for _ in 0..load.concurrency.max(1) {
        let mut per_addr = Vec::with_capacity(load.addrs.len());
        for &addr in &load.addrs {
            per_addr.push(Connection::open(addr).await?);
        }
        connections.push(per_addr);
    }
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + load.time_limit;
    let mut workers = JoinSet::new();
    for mut conns in connections {
        let next = Arc::clone(&next);
        let load = load.clone();
        workers.spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= load.requests {
                    return anyhow::Ok(latencies);
                }
                let body = (load.body)(i);
                let n = conns.len() as u64;
                let conn = conns
                    .get_mut((i % n) as usize)
                    .context("a connection per address")?;
                let sent = Instant::now();
                if sent > deadline {
                    bail!(
                        "time limit of {:?} reached after {i} of {} requests",
                        load.time_limit,
                        load.requests
                    );
                }
                let (status, response) = conn.send(Method::POST, &load.path, Some(body)).await?;
                latencies.push(sent.elapsed().as_nanos() as u64);
                if status != load.expect {
                    bail!(
                        "request {i}: expected {}, got {status}: {}",
                        load.expect,
                        String::from_utf8_lossy(&response).trim()
                    );
                }
            }
        });
    }
    let mut all = Vec::with_capacity(load.requests as usize);
    while let Some(joined) = workers.join_next().await {
        // Returning early drops the JoinSet, which aborts the other workers.
        all.extend(joined.context("load worker panicked")??);
    }
    let elapsed = started.elapsed();
    Ok(ClosedLoopReport {
        started,
        elapsed,
        latencies: Latencies::from_nanos(all),
    })
}

/// An open-loop load: `rate` requests per second for `duration`.
#[derive(Clone)]
pub struct Paced {
    pub addr: SocketAddr,
    pub path: String,
    pub rate: u32,
    pub duration: Duration,
    pub expect: StatusCode,
    /// At most this many requests in flight; beyond it the schedule slips (reported as lag).
    pub max_in_flight: usize,
    pub body: BodyFn,
}

/// One request of a paced run.
pub struct PacedSend {
    pub sent: Instant,
    pub acked: Instant,
    pub response: Bytes,
}

/// What a paced run measured.
pub struct PacedReport {
    pub sends: Vec<PacedSend>,
    pub elapsed: Duration,
    /// The furthest a send started behind its schedule.
    pub max_lag: Duration,
}

/// Run the paced load to the end; the first unexpected response fails it.
pub async fn paced(load: &Paced) -> anyhow::Result<PacedReport> {
    let total = (u128::from(load.rate) * load.duration.as_millis() / 1000) as u64;
    let period = Duration::from_secs_f64(1.0 / f64::from(load.rate.max(1)));
    let pool: Arc<Mutex<Vec<Connection>>> = Arc::new(Mutex::new(Vec::new()));
    for _ in 0..8 {
        let conn = Connection::open(load.addr).await?;
        pool.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(conn);
    }
    let permits = Arc::new(Semaphore::new(load.max_in_flight.max(1)));
    let started = Instant::now();
    let mut max_lag = Duration::ZERO;
    let mut tasks = JoinSet::new();
    let mut sends = Vec::with_capacity(total as usize);
    for i in 0..total {
        let scheduled = started + period.mul_f64(i as f64);
        tokio::time::sleep_until(scheduled.into()).await;
        let permit = Arc::clone(&permits)
            .acquire_owned()
            .await
            .context("permits closed")?;
        max_lag = max_lag.max(Instant::now().saturating_duration_since(scheduled));
        // Collect finished sends as we go, so an error stops the run early.
        while let Some(done) = tasks.try_join_next() {
            sends.push(done.context("paced sender panicked")??);
        }
        let pool = Arc::clone(&pool);
        let load = load.clone();
        tasks.spawn(async move {
            let _permit = permit;
            // At a low rate most pooled connections sit idle, and the daemon closes those
            // idle past its header-read timeout: they are dropped here, not sent on.
            let idle = {
                let mut idle = pool.lock().unwrap_or_else(PoisonError::into_inner);
                std::iter::from_fn(|| idle.pop()).find(|c| !c.is_closed())
            };
            let mut conn = match idle {
                Some(c) => c,
                None => Connection::open(load.addr).await?,
            };
            let body = (load.body)(i);
            let sent = Instant::now();
            let (status, response) = conn.send(Method::POST, &load.path, Some(body)).await?;
            let acked = Instant::now();
            if status != load.expect {
                bail!(
                    "request {i}: expected {}, got {status}: {}",
                    load.expect,
                    String::from_utf8_lossy(&response).trim()
                );
            }
            pool.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
            anyhow::Ok(PacedSend {
                sent,
                acked,
                response,
            })
        });
    }
    let drain = async {
        while let Some(done) = tasks.join_next().await {
            sends.push(done.context("paced sender panicked")??);
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(crate::connection::REQUEST_TIMEOUT, drain)
        .await
        .context("paced requests still open long after the schedule ended")??;
    Ok(PacedReport {
        sends,
        elapsed: started.elapsed(),
        max_lag,
    })
}
