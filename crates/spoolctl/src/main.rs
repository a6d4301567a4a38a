//! `spoolctl`: the command-line client of spoold. Parses the command line, runs one command,
//! and maps the outcome to the documented exit codes (0 ok, 1 runtime, 2 usage, 3–7 and 10
//! `wait` and `task wait`, 8 and 9 `step`, 11 and 12 `verify`, 13 a `send` or `task submit`
//! spoold refused; for `step check`, 1 is "not done").
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
mod maildrop;
mod output;

use std::io;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::cli::{Cli, UsageError};
use crate::commands::{Refused, EXIT_REFUSED};

/// Exit status of a runtime failure: spoold's error, network, local files.
const EXIT_FAILURE: u8 = 1;
/// Exit status of a usage error, the same as clap's own.
const EXIT_USAGE: u8 = 2;

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    cli.global.server_from_env = matches.value_source("server") == Some(ValueSource::EnvVariable);
    match commands::run(cli) {
        Ok(exit) => ExitCode::from(exit.code()),
        // `spoolctl list | head` is not a failure.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("spoolctl: {err:#}");
            if err.chain().any(|e| e.is::<UsageError>()) {
                ExitCode::from(EXIT_USAGE)
            } else if err.chain().any(|e| e.is::<Refused>()) {
                ExitCode::from(EXIT_REFUSED)
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
