//! Bulk retry: `failed` deliveries written into the database directly, then one
//! `POST /v1/deliveries/bulk` that retries them all, timed — and, while it runs, the API's
//! answers to another client (`GET /v1/stats` every 20 ms on a connection of its own), to show
//! the daemon keeps serving. The retried deliveries go out to the receiver meanwhile, as they
//! would in production.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Method, StatusCode};

use super::{Bench, DB_FILE};
use crate::receiver::Receiver;
use crate::seed::{seed, Backlog, Due};
use crate::summary::Latencies;

const SCENARIO: &str = "bulk";
/// How often the other client asks while the bulk retry runs.
const PROBE_EVERY: Duration = Duration::from_millis(20);

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let failed = bench.plan.bulk_failed;
    let case = format!("retry {failed} failed");
    bench.results.note(format!(
        "bulk: {failed} failed deliveries written into the database, retried by one POST \
         /v1/deliveries/bulk (status failed, the target's origin); GET /v1/stats every {} ms \
         on another connection meanwhile",
        PROBE_EVERY.as_millis()
    ));
    for run in 0..bench.plan.runs {
        let receiver = Receiver::start().await?;
        let dir = bench.fresh_dir(SCENARIO)?;
        bench.start_daemon(&dir, &[]).await?.stop().await?;
        let backlog = Backlog {
            count: failed,
            origin: receiver.origin(),
            path: "/bulk".into(),
            due: Due::Failed,
        };
        let db = dir.join(DB_FILE);
        tokio::task::spawn_blocking(move || seed(&db, &backlog))
            .await
            .context("seed task panicked")??;
        let daemon = bench.start_daemon(&dir, &[]).await?;

        let stop = Arc::new(AtomicBool::new(false));
        let mut probe_conn = daemon.connect().await?;
        let probing = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut nanos = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    probe_conn.get_json("/v1/stats").await?;
                    nanos.push(asked.elapsed().as_nanos() as u64);
                    tokio::time::sleep(PROBE_EVERY).await;
                }
                anyhow::Ok(Latencies::from_nanos(nanos))
            })
        };
        let request = serde_json::json!({
            "action": "retry",
            "filter": {"status": "failed", "targetOrigin": receiver.origin()},
        });
        let started = Instant::now();
        let (status, body) = daemon
            .connect()
            .await?
            .send(
                Method::POST,
                "/v1/deliveries/bulk",
                Some(Bytes::from(serde_json::to_vec(&request)?)),
            )
            .await?;
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let probes = probing.await.context("probe task panicked")??;
        if status != StatusCode::OK {
            bail!("bulk retry: {status}: {}", String::from_utf8_lossy(&body));
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)?;
        let changed = answer["changed"].as_u64().unwrap_or(0);
        if changed != failed {
            bail!("bulk retry changed {changed} of {failed}: {answer}");
        }
        daemon.stop().await?;
        receiver.stop().await;
        bench.discard(&dir);

        let rate = changed as f64 / took.as_secs_f64();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (p50, p99, max) = (
            probes.percentile(0.5),
            probes.percentile(0.99),
            probes.percentile(1.0),
        );
        eprintln!(
            "{} {changed} retried in {:.2} s ({rate:.0}/s); meanwhile GET /v1/stats p50 {:.1} ms, \
             p99 {:.1} ms, max {:.1} ms over {} requests",
            bench.label(SCENARIO, &case, run),
            took.as_secs_f64(),
            ms(p50),
            ms(p99),
            ms(max),
            probes.len()
        );
        let r = &mut bench.results;
        r.record(SCENARIO, &case, "bulk retry time", "s", took.as_secs_f64());
        r.record(SCENARIO, &case, "retried", "deliveries/s", rate);
        r.record(SCENARIO, &case, "other client p99 meanwhile", "ms", ms(p99));
        r.record(SCENARIO, &case, "other client max meanwhile", "ms", ms(max));
    }
    Ok(())
}
