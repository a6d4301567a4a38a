//! The scenarios, one file each, and what they share: the [`Bench`] (plan, daemon binary, data
//! directory, results) and the pieces every daemon run uses.

pub mod backlog;
pub mod ceiling;
pub mod e2e;
pub mod enqueue;
pub mod fsync;
pub mod idle;
pub mod latency;
pub mod tasks;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;

use crate::daemon::{Daemon, DaemonSpec, Metrics};
use crate::load::{BodyFn, ClosedLoopReport};
use crate::plan::Plan;
use crate::report::Results;

/// Where the SQLite file lives inside a run's directory.
pub const DB_FILE: &str = "spoold.db";

/// State shared by the scenarios of one invocation.
pub struct Bench {
    pub plan: Plan,
    pub spoold: PathBuf,
    /// This invocation's data directory; every daemon run gets a fresh one below it.
    root: PathBuf,
    keep_data: bool,
    next_dir: u32,
    pub results: Results,
}

impl Bench {
    pub fn new(plan: Plan, spoold: PathBuf, root: PathBuf, keep_data: bool) -> Bench {
        Bench {
            plan,
            spoold,
            root,
            keep_data,
            next_dir: 0,
            results: Results::default(),
        }
    }

    /// A new, empty directory for one run.
    pub fn fresh_dir(&mut self, label: &str) -> anyhow::Result<PathBuf> {
        self.next_dir += 1;
        let dir = self.root.join(format!("{:03}-{label}", self.next_dir));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(dir)
    }

    /// Remove a run's directory, unless the data is to be kept.
    pub fn discard(&self, dir: &Path) {
        if !self.keep_data {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// How to start the daemon on `dir`'s database with extra flags.
    pub fn spec(&self, dir: &Path, args: &[String]) -> DaemonSpec {
        DaemonSpec {
            program: self.spoold.clone(),
            db: dir.join(DB_FILE),
            args: args.to_vec(),
        }
    }

    /// Start the daemon and wait until `/readyz` answers 200.
    pub async fn start_daemon(&self, dir: &Path, args: &[String]) -> anyhow::Result<Daemon> {
        let mut daemon = Daemon::start(&self.spec(dir, args)).await?;
        daemon.wait_ready().await?;
        Ok(daemon)
    }

    /// `[scenario case run i/n]`, for progress lines.
    pub fn label(&self, scenario: &str, case: &str, run: usize) -> String {
        format!("[{scenario} {case} run {}/{}]", run + 1, self.plan.runs)
    }

    /// Remarks that hold for every daemon number.
    pub fn note_common(&mut self) {
        self.results.note(
            "spoold runs with its default flags plus --allow-private-targets and its default \
             log level (info): one JSON log line per API request and per delivery attempt, \
             drained from its stderr, so that cost is inside every daemon number",
        );
        self.results.note(
            "daemon, load generator and receiver share this machine's CPUs; latencies run from \
             sending a request to reading its whole response; percentiles are exact (nearest \
             rank over every request of a run); spread = (max - min) / median over the runs",
        );
    }

    /// Record what a daemon run cost per unit of work: commits, writes per commit, log volume.
    pub fn record_daemon_costs(&mut self, scenario: &str, case: &str, costs: &DaemonCosts<'_>) {
        let DaemonCosts {
            before,
            after,
            daemon,
            units,
            unit,
        } = *costs;
        let commits = after.commits() - before.commits();
        let writes = after.committed_writes() - before.committed_writes();
        let per = |v: f64| v / units.max(1) as f64;
        self.results.record(
            scenario,
            case,
            &format!("store commits per {unit}"),
            "commits",
            per(commits),
        );
        if commits > 0.0 {
            self.results.record(
                scenario,
                case,
                "writes per commit (mean batch)",
                "writes",
                writes / commits,
            );
        }
        let (_, log_bytes) = daemon.log_volume();
        self.results.record(
            scenario,
            case,
            &format!("daemon log per {unit}"),
            "bytes",
            per(log_bytes as f64),
        );
    }
}

/// What a daemon run did, for [`Bench::record_daemon_costs`]: metrics at its start and end,
/// and how many units of work (requests, deliveries) it did in between.
#[derive(Clone, Copy)]
pub struct DaemonCosts<'a> {
    pub before: &'a Metrics,
    pub after: &'a Metrics,
    pub daemon: &'a Daemon,
    pub units: u64,
    pub unit: &'a str,
}

/// The body of `POST /v1/deliveries` for delivery number `i` to `target_url`, optionally not
/// before `not_before` (RFC 3339).
pub fn create_body(
    target_url: String,
    not_before: Option<&'static str>,
    mode: Option<&'static str>,
) -> BodyFn {
    Arc::new(move |i| {
        let mut text = format!(r#"{{"targetUrl":"{target_url}","body":{{"seq":{i}}}"#);
        if let Some(nb) = not_before {
            text.push_str(&format!(r#","notBefore":"{nb}""#));
        }
        if let Some(mode) = mode {
            text.push_str(&format!(r#","mode":"{mode}""#));
        }
        text.push('}');
        Bytes::from(text)
    })
}

/// A generous time limit for `n` requests or deliveries: two minutes plus 20 ms each (50 per
/// second), so that a slow daemon is measured rather than failed, yet no run is unbounded.
pub fn time_limit(n: u64) -> Duration {
    Duration::from_secs(120)
        + Duration::from_millis(20).saturating_mul(n.min(u64::from(u32::MAX)) as u32)
}

/// Milliseconds, for recording.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes of the database file and its WAL.
pub fn database_bytes(dir: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(dir.join(format!("{DB_FILE}{suffix}"))).ok())
        .map(|m| m.len())
        .sum()
}

/// Record a closed-loop run: throughput and p50/p99/p99.9 latency; returns a progress line.
pub fn record_load(
    results: &mut Results,
    scenario: &str,
    case: &str,
    report: &ClosedLoopReport,
) -> String {
    results.record(scenario, case, "throughput", "req/s", report.throughput());
    for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
        let v = ms(report.latencies.percentile(q));
        results.record(scenario, case, &format!("{name} latency"), "ms", v);
    }
    format!(
        "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
        report.throughput(),
        ms(report.latencies.percentile(0.5)),
        ms(report.latencies.percentile(0.99)),
        ms(report.latencies.percentile(0.999)),
    )
}
