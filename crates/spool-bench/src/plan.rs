//! How big each scenario is: the full sizes from the issue, the smoke sizes CI runs, and the
//! per-size overrides from the command line. Every request loop in the benchmark is bounded by
//! one of these counts and by a time limit.

use std::time::Duration;

use serde::Serialize;

use crate::cli::Options;

/// spoold's default `--per-target-concurrency`: the end-to-end case that runs without the flag.
pub const DAEMON_PER_TARGET: u32 = 8;

/// Sizes and repetitions of every scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub smoke: bool,
    /// Repetitions of every measurement.
    pub runs: usize,
    /// fsync baseline: 256-byte appends, each followed by fdatasync.
    pub fsync_writes: u64,
    /// HTTP ceiling and enqueue: requests per run (fixed count, closed loop).
    pub requests: u64,
    /// HTTP ceiling and enqueue: client concurrencies (one keep-alive connection each).
    pub concurrencies: Vec<usize>,
    /// End-to-end: deliveries per run.
    pub e2e_deliveries: u64,
    /// End-to-end: client concurrency while enqueueing the batch.
    pub e2e_enqueue_concurrency: usize,
    /// End-to-end: `--per-target-concurrency` values; `None` is the daemon's default
    /// ([`DAEMON_PER_TARGET`]).
    pub e2e_per_target: Vec<Option<u32>>,
    /// End-to-end and backlog: deliveries are at-most-once.
    pub at_most_once: bool,
    /// End-to-end: every delivery is signed (Standard Webhooks, one key).
    pub sign: bool,
    /// End-to-end: the JSON body is padded to about this many bytes (0: `{"seq":N}`).
    pub body_bytes: usize,
    /// Tasks: submissions per run.
    pub tasks: u64,
    /// Tasks: `--task-concurrency` values.
    pub task_concurrency: Vec<u32>,
    /// Tasks: bytes one task prints through redaction (the output case).
    pub task_output_bytes: u64,
    /// Backlog: pending deliveries in the database at start.
    pub backlog_pending: u64,
    /// Backlog: the fresh batch delivered on top.
    pub backlog_batch: u64,
    /// Bulk: failed deliveries retried by one bulk request.
    pub bulk_failed: u64,
    /// Rate: pending deliveries to a target limited to 100/s.
    pub rate_pending: u64,
    /// Rate: the measurement window.
    pub rate_window: Duration,
    /// Idle: pending deliveries to a target that refuses connections.
    pub idle_pending: u64,
    /// Idle: the CPU measurement window.
    #[serde(with = "seconds")]
    pub idle_window: Duration,
    /// Latency: enqueues per second (open loop).
    pub latency_rate: u32,
    /// Latency: how long the rate is held.
    #[serde(with = "seconds")]
    pub latency_duration: Duration,
    /// Hand-off: deliveries enqueued through one host per run (and per notify mode).
    pub handoff_deliveries: u64,
    /// Hand-off: enqueues per second (open loop).
    pub handoff_rate: u32,
    /// `enqueue`, `e2e` and `tasks`: measure each run's floors after it (see [`crate::floor`]).
    pub floors: bool,
}

impl Plan {
    /// The sizes the issue asks for.
    pub fn full() -> Plan {
        Plan {
            smoke: false,
            runs: 3,
            fsync_writes: 10_000,
            requests: 50_000,
            concurrencies: vec![1, 16, 64],
            e2e_deliveries: 100_000,
            tasks: 10_000,
            task_concurrency: vec![2, 16],
            task_output_bytes: 1 << 30,
            e2e_enqueue_concurrency: 64,
            e2e_per_target: vec![None, Some(1), Some(64)],
            at_most_once: false,
            sign: false,
            body_bytes: 0,
            backlog_pending: 1_000_000,
            backlog_batch: 100_000,
            rate_pending: 10_000,
            rate_window: Duration::from_secs(30),
            bulk_failed: 100_000,
            idle_pending: 100_000,
            idle_window: Duration::from_secs(30),
            latency_rate: 1_000,
            latency_duration: Duration::from_secs(20),
            handoff_deliveries: 200,
            handoff_rate: 10,
            floors: true,
        }
    }

    /// Seconds, not minutes, even against a debug build: every code path, tiny counts.
    pub fn smoke() -> Plan {
        Plan {
            smoke: true,
            runs: 1,
            fsync_writes: 200,
            requests: 2_000,
            concurrencies: vec![1, 16, 64],
            e2e_deliveries: 2_000,
            tasks: 200,
            task_concurrency: vec![2, 16],
            task_output_bytes: 8 << 20,
            e2e_enqueue_concurrency: 16,
            e2e_per_target: vec![None, Some(1), Some(64)],
            at_most_once: false,
            sign: false,
            body_bytes: 0,
            backlog_pending: 20_000,
            backlog_batch: 1_000,
            rate_pending: 1_000,
            rate_window: Duration::from_secs(2),
            bulk_failed: 2_000,
            idle_pending: 2_000,
            idle_window: Duration::from_secs(3),
            latency_rate: 200,
            latency_duration: Duration::from_secs(2),
            handoff_deliveries: 10,
            handoff_rate: 10,
            floors: true,
        }
    }

    /// The plan the flags ask for: full or smoke, then single overrides.
    pub fn from_options(options: &Options) -> Plan {
        let mut plan = if options.smoke {
            Plan::smoke()
        } else {
            Plan::full()
        };
        let o = &options.sizes;
        if let Some(runs) = options.runs {
            plan.runs = runs.max(1);
        }
        set(&mut plan.fsync_writes, o.fsync_writes);
        set(&mut plan.requests, o.requests);
        set(&mut plan.e2e_deliveries, o.e2e_deliveries);
        set(&mut plan.tasks, o.tasks);
        if !o.concurrency.is_empty() {
            plan.concurrencies = o.concurrency.iter().map(|&n| n as usize).collect();
        }
        plan.floors = !options.no_floors;
        if !o.task_concurrency.is_empty() {
            plan.task_concurrency.clone_from(&o.task_concurrency);
        }
        if !o.per_target.is_empty() {
            plan.e2e_per_target = o
                .per_target
                .iter()
                .map(|&n| (n != DAEMON_PER_TARGET).then_some(n))
                .collect();
        }
        plan.at_most_once = options.at_most_once;
        plan.sign = options.sign;
        plan.body_bytes = options.body_bytes;
        set(&mut plan.backlog_pending, o.backlog_pending);
        set(&mut plan.backlog_batch, o.backlog_batch);
        set(&mut plan.rate_pending, o.rate_pending);
        set(&mut plan.bulk_failed, o.bulk_failed);
        if let Some(s) = o.rate_seconds {
            plan.rate_window = Duration::from_secs(s.max(1));
        }
        set(&mut plan.idle_pending, o.idle_pending);
        if let Some(s) = o.idle_seconds {
            plan.idle_window = Duration::from_secs(s.max(1));
        }
        if let Some(s) = o.latency_seconds {
            plan.latency_duration = Duration::from_secs(s.max(1));
        }
        if let Some(r) = o.latency_rate {
            plan.latency_rate = r.max(1);
        }
        set(&mut plan.handoff_deliveries, o.handoff_deliveries);
        plan
    }
}

/// Counts of zero would measure nothing; they are raised to one.
fn set(field: &mut u64, value: Option<u64>) {
    if let Some(v) = value {
        *field = v.max(1);
    }
}

mod seconds {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn plan(args: &[&str]) -> Plan {
        let cli = Cli::try_parse_from(args).expect("the arguments parse");
        Plan::from_options(&cli.options)
    }

    #[test]
    fn concurrency_selects_the_client_concurrencies_and_floors_are_on_unless_refused() {
        let default = plan(&["spool-bench", "enqueue"]);
        assert_eq!(default.concurrencies, [1, 16, 64]);
        assert!(default.floors);
        let chosen = plan(&[
            "spool-bench",
            "enqueue",
            "--concurrency",
            "32",
            "--no-floors",
        ]);
        assert_eq!(chosen.concurrencies, [32]);
        assert!(!chosen.floors);
        assert!(Cli::try_parse_from(["spool-bench", "enqueue", "--concurrency", "0"]).is_err());
    }

    #[test]
    fn per_target_selects_the_end_to_end_cases_and_eight_is_the_default() {
        assert_eq!(
            plan(&["spool-bench", "e2e"]).e2e_per_target,
            [None, Some(1), Some(64)]
        );
        assert_eq!(
            plan(&["spool-bench", "e2e", "--per-target", "8,64"]).e2e_per_target,
            [None, Some(64)]
        );
        assert!(Cli::try_parse_from(["spool-bench", "e2e", "--per-target", "0"]).is_err());
    }
}
