//! The `spool-bench` binary: parses flags and hands over to the library.
//!
//! Exit codes: 0 when every scenario ran and passed its checks, 1 otherwise, 2 for invalid flags.

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser};
use spool_bench::cli::Cli;

fn main() -> ExitCode {
    // The floors run as processes of this binary (`spool-bench floor-process …`): started by
    // the benchmark itself, not a command for people, so not among the subcommands.
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|a| a == spool_bench::floor::SUBCOMMAND)
    {
        return spool_bench::floor::process_main(args.collect());
    }
    let cli = Cli::parse();
    if let Err(message) = cli.check() {
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, message)
            .exit();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("spool-bench")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spool-bench: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(spool_bench::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spool-bench: {e:#}");
            ExitCode::from(1)
        }
    }
}
