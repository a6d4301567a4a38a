//! `spool-soak`: the long run under a misbehaving receiver (see `spool_bench::soak`). Writes
//! `soak.json` and `soak.svg` into `--out` and prints a summary table for the book's benchmarks
//! (docs/src/benchmarks.md).
//!
//! Exit codes: 0 when nothing was stuck and the daemon logged no error, 1 otherwise (or when the
//! run could not be made), 2 for invalid flags.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use spool_bench::soak::{self, SoakOptions};

/// Run spoold for a long time under a steady load against a receiver that fails 20 % of
/// requests, hangs 1 % and resets 1 %, with tasks that time out and print floods; sample
/// memory, file descriptors, database and WAL size and enqueue latency; chart them.
///
/// Build first: `cargo build --release -p spoold -p spool-bench`.
#[derive(Debug, Parser)]
#[command(name = "spool-soak", version, about, long_about = None)]
struct Args {
    /// The spoold binary (default: target/release/spoold).
    #[arg(long, default_value = "target/release/spoold")]
    spoold: PathBuf,
    /// How long the load runs, in minutes.
    #[arg(long, default_value_t = 30)]
    minutes: u64,
    /// Deliveries created per second.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Tasks submitted per second.
    #[arg(long, default_value_t = 2)]
    task_rate: u32,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    every: u64,
    /// Where the run's database lives while it runs (a directory of its own inside).
    #[arg(long, default_value = "target/soak")]
    work_dir: PathBuf,
    /// Where soak.json and soak.svg are written.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let opts = SoakOptions {
        spoold: args.spoold,
        duration: Duration::from_secs(args.minutes * 60),
        rate: args.rate,
        task_rate: args.task_rate,
        every: Duration::from_secs(args.every),
        work_dir: args.work_dir,
        out: args.out,
    };
    if let Err(e) = soak::check(&opts) {
        eprintln!("spool-soak: {e}");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spool-soak: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(soak::run(&opts)) {
        Ok(report) => {
            println!("{}", soak::summary(&report));
            let problems = soak::problems(&report);
            for p in &problems {
                eprintln!("spool-soak: {p}");
            }
            if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("spool-soak: {e:#}");
            ExitCode::from(1)
        }
    }
}
