//! `spoolctl`: the command-line client of spoold. Parses the command line, runs one command,
//! and maps the outcome to the documented exit codes (0 ok, 1 runtime, 2 usage, 3–7 `wait`
//! and `task wait`, 8 and 9 `step`; for `step check`, 1 is "not done").
//!
//! # Layout
//! - [`cli`]: clap definitions and help texts; [`cli::UsageError`] for checks clap cannot do.
//! - [`client`]: spoold's API over loopback TCP or a unix socket (hyper, no TLS).
//! - [`output`]: tabwriter-style tables, delivery rows and detail lines, compact JSON.
//! - [`detail`]: the whole of one delivery, as `get` shows it.
//! - [`commands`]: one file per subcommand.

// The doc comments in cli.rs are clap's --help text, written for a terminal: `[secrets]` is
// a TOML table and `http://…` an example, not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::bare_urls)]

mod cli;
mod client;
mod commands;
mod detail;
mod output;

use std::io;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, UsageError};

/// Exit status of a runtime failure: spoold's error, network, local files.
const EXIT_FAILURE: u8 = 1;
/// Exit status of a usage error, the same as clap's own.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match commands::run(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        // `spoolctl list | head` is not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("spoolctl: {err:#}");
            if err.chain().any(|e| e.is::<UsageError>()) {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
