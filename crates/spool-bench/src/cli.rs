//! Command-line flags: which scenario to run, how big, where the daemon, the data and the
//! results live, and which store the daemons use. Sizes come from [`crate::plan::Plan`]; the
//! flags here only override them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Benchmark spoold: starts the real `spoold` binary on a fresh on-disk database and drives it
/// with its own keep-alive HTTP/1.1 load generator and receiver, all on 127.0.0.1.
///
/// Build both binaries first: `cargo build --release -p spoold -p spool-bench`.
#[derive(Debug, Clone, Parser)]
#[command(name = "spool-bench", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub options: Options,
}

/// Which scenarios to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Every scenario below, in this order.
    All,
    /// Baseline: 256-byte append + fdatasync on the data directory.
    Fsync,
    /// Baseline: the load generator against the receiver directly (no daemon).
    HttpCeiling,
    /// Durable enqueue via POST /v1/deliveries at concurrency 1, 16 and 64.
    Enqueue,
    /// End-to-end: enqueue a batch and wait until every delivery has succeeded, at the default
    /// per-target concurrency and at 1 and 64.
    E2e,
    /// Submissions of a task type running /bin/true, at task concurrency 2 and 16.
    Tasks,
    /// Restart with a large pending backlog: time to ready, memory, size, a fresh batch.
    Backlog,
    /// CPU used over a window with a backlog for a target that refuses connections.
    Idle,
    /// Enqueue-ack to receiver-sees-request latency at a steady enqueue rate.
    Latency,
    /// PostgreSQL (--db), two hosts: enqueue through one host, delivered by the other; the
    /// latency of that hand-off with --db-notify on and off.
    Handoff,
    /// A target limited to 100/s with a large backlog: the rate it gets, and the CPU it costs.
    Rate,
    /// One bulk retry of many failed deliveries: how long it takes, and the API meanwhile.
    Bulk,
}

/// The most daemons `--hosts` starts on one database.
pub const MAX_HOSTS: i64 = 2;

impl Cli {
    /// What clap cannot check alone: the `--db` URL's form, `--hosts` only with `--db`, `--db`
    /// only with scenarios that can run on PostgreSQL, and those that need it only with it. The
    /// message says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let Some(db) = &self.options.db else {
            if self.command.postgres_only() {
                return Err(format!(
                    "{} needs --db postgres://…: it measures hosts sharing a PostgreSQL \
                     database",
                    self.command.name()
                ));
            }
            if self.options.hosts > 1 {
                return Err(format!(
                    "--hosts {} needs --db postgres://…: several hosts share one PostgreSQL \
                     database",
                    self.options.hosts
                ));
            }
            return Ok(());
        };
        crate::postgres::PgServer::parse(db).map_err(|e| format!("{e:#}"))?;
        if self.command != Command::All && self.command.sqlite_only() {
            return Err(format!(
                "--db applies to enqueue, e2e, bulk and handoff; {} runs on SQLite only",
                self.command.name()
            ));
        }
        Ok(())
    }
}

/// Flags shared by every scenario.
#[derive(Debug, Clone, Args)]
pub struct Options {
    /// Tiny sizes and one run each, for CI: the whole suite takes seconds.
    #[arg(long, global = true)]
    pub smoke: bool,

    /// Runs per measurement (median and spread are reported); default 3, 1 with --smoke.
    #[arg(long, global = true, value_name = "N")]
    pub runs: Option<usize>,

    /// The spoold executable; default: `spoold` next to this program.
    #[arg(long, global = true, value_name = "PATH")]
    pub spoold: Option<PathBuf>,

    /// Where databases are created (a real disk, not tmpfs); each invocation gets a fresh
    /// subdirectory, removed at the end unless --keep-data.
    #[arg(
        long,
        global = true,
        default_value = "target/bench-data",
        value_name = "DIR"
    )]
    pub data_dir: PathBuf,

    /// Where the JSON results are written.
    #[arg(
        long,
        global = true,
        default_value = "target/bench-results.json",
        value_name = "FILE"
    )]
    pub json_out: PathBuf,

    /// End-to-end and backlog: create the deliveries with `mode: at_most_once`.
    #[arg(long, global = true)]
    pub at_most_once: bool,

    /// End-to-end: sign every delivery (a `[[targets]]` rule matching every URL, one
    /// Standard Webhooks key), to measure what signing costs.
    #[arg(long, global = true)]
    pub sign: bool,

    /// End-to-end: pad each delivery's JSON body to about this many bytes.
    #[arg(long, global = true, default_value_t = 0, value_name = "N")]
    pub body_bytes: usize,

    /// Skip the floors: enqueue, e2e and tasks then measure the daemon only, without the bare
    /// axum, reqwest and spawn loops each run is otherwise compared with (`× floor`).
    #[arg(long, global = true)]
    pub no_floors: bool,

    /// Keep the databases and daemon logs' summaries after the run.
    #[arg(long, global = true)]
    pub keep_data: bool,

    /// Run enqueue, e2e and bulk on PostgreSQL: each run on a fresh database created on the
    /// server this URL names (postgres://user@host:port/db; the benchmark connects to that
    /// database to create and drop them). Default: a fresh SQLite file per run. With `all`, the
    /// scenarios that run on SQLite only (backlog, idle, latency, rate, tasks) are skipped;
    /// without it, handoff (PostgreSQL only) is.
    #[arg(long, global = true, value_name = "URL")]
    pub db: Option<String>,

    /// Daemons sharing each run's database (with --db postgres://…): the load is spread over
    /// all of them and all of them deliver.
    #[arg(
        long,
        global = true,
        default_value_t = 1,
        value_parser = clap::value_parser!(u8).range(1..=MAX_HOSTS),
        value_name = "N"
    )]
    pub hosts: u8,

    #[command(flatten)]
    pub sizes: SizeOverrides,
}

/// Override single sizes of the plan (full or smoke), e.g. for a shorter hand run.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Size overrides")]
pub struct SizeOverrides {
    /// fsync baseline: writes per run.
    #[arg(long, global = true, value_name = "N")]
    pub fsync_writes: Option<u64>,
    /// HTTP ceiling and enqueue: requests per run.
    #[arg(long, global = true, value_name = "N")]
    pub requests: Option<u64>,
    /// HTTP ceiling and enqueue: the client concurrencies measured (comma-separated; default
    /// 1,16,64).
    #[arg(long, global = true, value_name = "N,…", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Vec<u32>,
    /// End-to-end: deliveries per run.
    #[arg(long, global = true, value_name = "N")]
    pub e2e_deliveries: Option<u64>,
    /// Tasks: submissions per run.
    #[arg(long, global = true, value_name = "N")]
    pub tasks: Option<u64>,
    /// Tasks: the task concurrencies measured (comma-separated; default 2,16). The locked case
    /// runs at the highest.
    #[arg(long, global = true, value_name = "N,…", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub task_concurrency: Vec<u32>,
    /// End-to-end: the per-target concurrencies measured (comma-separated; default 8,1,64,
    /// where 8 is the daemon's default and runs without the flag).
    #[arg(long, global = true, value_name = "N,…", value_delimiter = ',',
          value_parser = clap::value_parser!(u32).range(1..))]
    pub per_target: Vec<u32>,
    /// Backlog: pending deliveries seeded into the database.
    #[arg(long, global = true, value_name = "N")]
    pub backlog_pending: Option<u64>,
    /// Backlog: size of the fresh batch delivered on top of the backlog.
    #[arg(long, global = true, value_name = "N")]
    pub backlog_batch: Option<u64>,
    /// Idle: pending deliveries to the refusing target.
    #[arg(long, global = true, value_name = "N")]
    pub idle_pending: Option<u64>,
    /// Rate: pending deliveries to the limited target.
    #[arg(long, global = true, value_name = "N")]
    pub rate_pending: Option<u64>,
    /// Bulk: failed deliveries seeded and retried by one bulk request.
    #[arg(long, global = true, value_name = "N")]
    pub bulk_failed: Option<u64>,
    /// Rate: length of the measurement window, in seconds.
    #[arg(long, global = true, value_name = "S")]
    pub rate_seconds: Option<u64>,
    /// Idle: length of the CPU measurement window, in seconds.
    #[arg(long, global = true, value_name = "SECONDS")]
    pub idle_seconds: Option<u64>,
    /// Latency: how long the steady enqueue rate is held, in seconds.
    #[arg(long, global = true, value_name = "SECONDS")]
    pub latency_seconds: Option<u64>,
    /// Latency: enqueues per second.
    #[arg(long, global = true, value_name = "N")]
    pub latency_rate: Option<u32>,
    /// Hand-off: deliveries enqueued per run (at 10 per second).
    #[arg(long, global = true, value_name = "N")]
    pub handoff_deliveries: Option<u64>,
}

impl Command {
    /// The scenarios this command stands for, in run order.
    pub fn scenarios(self) -> &'static [Command] {
        use Command::*;
        match self {
            All => &[
                Fsync,
                HttpCeiling,
                Enqueue,
                E2e,
                Backlog,
                Idle,
                Latency,
                Rate,
                Bulk,
                Tasks,
                Handoff,
            ],
            Fsync => &[Fsync],
            HttpCeiling => &[HttpCeiling],
            Enqueue => &[Enqueue],
            E2e => &[E2e],
            Tasks => &[Tasks],
            Backlog => &[Backlog],
            Idle => &[Idle],
            Latency => &[Latency],
            Rate => &[Rate],
            Bulk => &[Bulk],
            Handoff => &[Handoff],
        }
    }

    /// Scenarios that start daemons on SQLite whatever `--db` says (they seed or read the
    /// database file, or have not been extended to PostgreSQL); skipped under `all --db`.
    pub fn sqlite_only(self) -> bool {
        matches!(
            self,
            Command::Backlog | Command::Idle | Command::Latency | Command::Tasks | Command::Rate
        )
    }

    /// Scenarios about several hosts on one PostgreSQL database; skipped under `all` without
    /// `--db`.
    pub fn postgres_only(self) -> bool {
        matches!(self, Command::Handoff)
    }

    /// The scenario's name in the table and the JSON document.
    pub fn name(self) -> &'static str {
        match self {
            Command::All => "all",
            Command::Fsync => "fsync",
            Command::HttpCeiling => "http-ceiling",
            Command::Enqueue => "enqueue",
            Command::E2e => "e2e",
            Command::Tasks => "tasks",
            Command::Backlog => "backlog",
            Command::Idle => "idle",
            Command::Latency => "latency",
            Command::Rate => "rate",
            Command::Bulk => "bulk",
            Command::Handoff => "handoff",
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn check(args: &[&str]) -> Result<(), String> {
        let cli = Cli::try_parse_from(std::iter::once("spool-bench").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.check()
    }

    #[test]
    fn hosts_need_a_postgres_database() {
        let pg = "postgres://postgres@127.0.0.1:5432/test";
        assert!(check(&["e2e"]).is_ok());
        assert!(check(&["e2e", "--hosts", "1"]).is_ok());
        assert!(check(&["e2e", "--hosts", "2"]).is_err());
        assert!(check(&["e2e", "--db", pg, "--hosts", "2"]).is_ok());
        assert!(check(&["enqueue", "--db", pg, "--hosts", "3"]).is_err());
        assert!(check(&["enqueue", "--db", pg, "--hosts", "0"]).is_err());
        assert!(check(&["enqueue", "--db", "data/spoold.db"]).is_err());
    }

    #[test]
    fn sqlite_only_scenarios_refuse_a_database() {
        let pg = "postgres://postgres@127.0.0.1:5432/test";
        for scenario in ["backlog", "idle", "latency", "tasks"] {
            assert!(check(&[scenario, "--db", pg]).is_err(), "{scenario}");
            assert!(check(&[scenario]).is_ok(), "{scenario}");
        }
        for scenario in [
            "all",
            "fsync",
            "http-ceiling",
            "enqueue",
            "e2e",
            "bulk",
            "handoff",
        ] {
            assert!(check(&[scenario, "--db", pg]).is_ok(), "{scenario}");
        }
    }

    #[test]
    fn handoff_needs_a_postgres_database() {
        let err = check(&["handoff"]).expect_err("refused without --db");
        assert!(err.contains("handoff needs --db"), "{err}");
        assert!(check(&["all"]).is_ok(), "all skips it instead");
    }
}
