//! Baseline: how many durable appends per second the data directory's disk takes: 256 bytes
//! appended, then `fdatasync`, one after the other. spoold's commits cannot be faster than
//! this; its group commit is what lets requests outnumber them.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::Bench;
use crate::summary::Latencies;

const SCENARIO: &str = "fsync";
const CASE: &str = "256 B append + fdatasync";
const BLOCK: [u8; 256] = [b'x'; 256];
/// The run fails rather than run longer than this.
const TIME_LIMIT: Duration = Duration::from_secs(300);

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    for run in 0..bench.plan.runs {
        let dir = bench.fresh_dir(SCENARIO)?;
        let writes = bench.plan.fsync_writes;
        let file = dir.join("fsync.dat");
        let (elapsed, latencies) = tokio::task::spawn_blocking(move || measure(&file, writes))
            .await
            .context("fsync task panicked")??;
        bench.discard(&dir);
        let rate = latencies.len() as f64 / elapsed.as_secs_f64();
        eprintln!(
            "{} {rate:.0} fdatasync/s, p50 {:.0} µs, p99 {:.0} µs",
            bench.label(SCENARIO, CASE, run),
            latencies.percentile(0.5).as_secs_f64() * 1e6,
            latencies.percentile(0.99).as_secs_f64() * 1e6,
        );
        let r = &mut bench.results;
        r.record(SCENARIO, CASE, "rate", "ops/s", rate);
        for (name, q) in [("p50", 0.5), ("p99", 0.99)] {
            let us = latencies.percentile(q).as_secs_f64() * 1e6;
            r.record(SCENARIO, CASE, &format!("{name} latency"), "µs", us);
        }
    }
    Ok(())
}

fn measure(path: &Path, writes: u64) -> anyhow::Result<(Duration, Latencies)> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    // Measure appends to a file that exists on disk, not its creation.
    file.write_all(&BLOCK)
        .and_then(|()| file.sync_all())
        .context("first write")?;
    let mut nanos = Vec::with_capacity(writes as usize);
    let started = Instant::now();
    for i in 0..writes {
        let t = Instant::now();
        file.write_all(&BLOCK).context("append")?;
        file.sync_data().context("fdatasync")?;
        nanos.push(t.elapsed().as_nanos() as u64);
        if started.elapsed() > TIME_LIMIT {
            bail!("time limit of {TIME_LIMIT:?} reached after {i} of {writes} writes");
        }
    }
    Ok((started.elapsed(), Latencies::from_nanos(nanos)))
}
