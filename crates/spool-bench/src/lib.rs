//! A benchmark of spoold as it runs in production: the real `spoold` binary as a separate
//! process on a fresh database on disk, driven by this crate's own keep-alive HTTP/1.1 load
//! generator and delivering to this crate's own fast receiver, everything on 127.0.0.1. Every
//! scenario runs several times and is reported as median and spread, as a table and as JSON.
//! `enqueue` and `e2e` can also run on PostgreSQL (`--db postgres://…`), with one or more
//! daemons sharing each run's database (`--hosts`); `handoff` runs there only, two hosts.
//!
//! # Layout
//! - [`cli`]: flags; [`plan`]: the sizes (full, smoke, overrides).
//! - [`scenario`]: one file per scenario, and the [`scenario::Bench`] they share.
//! - [`daemon`]: the `spoold` child process and what is observed of it (`/proc`, `/metrics`).
//! - [`load`]: the closed- and open-loop load generator, on [`connection`]s.
//! - [`floor`]: each operation's floor (bare axum, bare reqwest, bare spawn), a process of
//!   its own whose CPU is counted as the daemon's is.
//! - [`receiver`]: the delivery target; [`seed`]: large backlogs written straight to SQLite.
//! - [`postgres`]: a fresh PostgreSQL database per run, with `--db`.
//! - [`soak`]: the long run under a misbehaving receiver (the `spool-soak` binary), with its
//!   chart.
//! - [`summary`]: exact percentiles, median and spread; [`report`]: table and JSON;
//!   [`machine`]: what it ran on.
//!
//! **Invariant:** nothing here dials or binds anything but loopback, and every request loop
//! is bounded by a count and a time limit. The one exception is the PostgreSQL server that
//! `--db` names, which the benchmark (to create and drop databases) and the daemons connect
//! to wherever it is.

pub mod cli;
pub mod connection;
pub mod daemon;
pub mod floor;
pub mod load;
pub mod machine;
pub mod plan;
pub mod postgres;
pub mod receiver;
pub mod report;
pub mod scenario;
pub mod seed;
pub mod soak;
pub mod summary;

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};

use crate::cli::{Cli, Command};
use crate::plan::Plan;
use crate::postgres::PgServer;
use crate::report::{BackendContext, Context};
use crate::scenario::{Backend, Bench};

/// Run the scenarios `cli` asks for, print the table and write the JSON document. Fails if any
/// scenario failed (the others still run and are reported).
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let started = Instant::now();
    let plan = Plan::from_options(&cli.options);
    let spoold = find_spoold(cli.options.spoold.as_deref())?;
    let spoold_version = daemon::version(&spoold)?;
    let (backend, server_version) = match &cli.options.db {
        None => (Backend::Sqlite, None),
        Some(url) => {
            let server = PgServer::parse(url)?;
            let version = server.version().await?;
            let hosts = usize::from(cli.options.hosts);
            (Backend::Postgres { server, hosts }, Some(version))
        }
    };
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let root = cli
        .options
        .data_dir
        .join(format!("run-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("create {}", root.display()))?;
    let root = root.canonicalize().unwrap_or(root);
    let data_filesystem =
        machine::filesystem(&root).with_context(|| format!("statfs {}", root.display()))?;
    let context = Context {
        tool: format!("spool-bench {}", env!("CARGO_PKG_VERSION")),
        date: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        command: std::env::args().collect(),
        git_commit: machine::git_commit(),
        machine: machine::describe(),
        data_dir: root.clone(),
        data_filesystem,
        spoold_path: spoold.clone(),
        spoold_version,
        backend: BackendContext {
            kind: backend.kind(),
            hosts: backend.hosts(),
            server: match &backend {
                Backend::Sqlite => None,
                Backend::Postgres { server, .. } => Some(server.shown()),
            },
            server_version: server_version.clone(),
        },
        bench_profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        plan: plan.clone(),
    };
    eprintln!(
        "spool-bench: {} ({}), {} CPUs ({}), {} GiB, kernel {}",
        context.spoold_version,
        context.spoold_path.display(),
        context.machine.cpus,
        context.machine.cpu_model,
        context.machine.memory_bytes >> 30,
        context.machine.kernel,
    );
    eprintln!(
        "spool-bench: data in {} ({}), {} run(s) per measurement{}",
        root.display(),
        context.data_filesystem.kind,
        plan.runs,
        if plan.smoke { ", smoke sizes" } else { "" }
    );

    if let Backend::Postgres { server, hosts } = &backend {
        eprintln!(
            "spool-bench: enqueue, e2e and bulk on PostgreSQL {} at {}: a fresh database per run, \
             {hosts} spoold host(s) on it",
            server_version.as_deref().unwrap_or("?"),
            server.shown(),
        );
    }

    let mut bench = Bench::new(
        plan,
        spoold,
        root.clone(),
        cli.options.keep_data,
        backend.clone(),
    );
    if context.data_filesystem.in_memory {
        let warning = format!(
            "the data directory is on {} (in memory): fsync costs nothing there, so durable \
             numbers are not representative; pass --data-dir on a real disk",
            context.data_filesystem.kind
        );
        eprintln!("spool-bench: WARNING: {warning}");
        bench.results.note(warning);
    }
    if !context.plan.smoke && profile_of(&context.spoold_path) == Some("debug") {
        bench
            .results
            .note("spoold is a debug build: build it with --release for real numbers");
    }
    bench.note_common();
    if let Backend::Postgres { server, hosts } = &backend {
        bench.results.note(format!(
            "postgres: every run of enqueue, e2e and bulk gets a fresh database on {} \
             (PostgreSQL {}), shared by {hosts} spoold host(s) on this machine, each with \
             its own --data-dir; requests go to the hosts in turn; store commits are the \
             daemons' PostgreSQL transactions, summed over the hosts (spoold counts each as \
             one write, a batch of creates too, so writes per commit is 1 there)",
            server.shown(),
            server_version.as_deref().unwrap_or("?"),
        ));
    }

    for &scenario in cli.command.scenarios() {
        let name = scenario.name();
        if scenario.postgres_only() {
            if let Backend::Sqlite = backend {
                eprintln!("== {name} skipped: it runs on PostgreSQL only (--db)");
                bench.results.note(format!(
                    "{name}: skipped, it runs on PostgreSQL only (--db)"
                ));
                continue;
            }
        }
        if scenario.sqlite_only() {
            if let Backend::Postgres { .. } = backend {
                eprintln!("== {name} skipped: it runs on SQLite only (--db)");
                bench
                    .results
                    .note(format!("{name}: skipped, it runs on SQLite only (--db)"));
                continue;
            }
            bench.results.describe(name, "sqlite", 1);
        }
        eprintln!("== {name}");
        let outcome = match scenario {
            Command::Fsync => scenario::fsync::run(&mut bench).await,
            Command::HttpCeiling => scenario::ceiling::run(&mut bench).await,
            Command::Enqueue => scenario::enqueue::run(&mut bench).await,
            Command::E2e => scenario::e2e::run(&mut bench).await,
            Command::Tasks => scenario::tasks::run(&mut bench).await,
            Command::Backlog => scenario::backlog::run(&mut bench).await,
            Command::Idle => scenario::idle::run(&mut bench).await,
            Command::Latency => scenario::latency::run(&mut bench).await,
            Command::Rate => scenario::rate::run(&mut bench).await,
            Command::Bulk => scenario::bulk::run(&mut bench).await,
            Command::Handoff => scenario::handoff::run(&mut bench).await,
            Command::All => Ok(()),
        };
        if let Err(e) = outcome {
            eprintln!("== {name} FAILED: {e:#}");
            bench.results.error(format!("{name}: {e:#}"));
        }
    }

    let elapsed = started.elapsed().as_secs_f64();
    println!("{}", bench.results.table());
    bench
        .results
        .write_json(&cli.options.json_out, &context, elapsed)?;
    println!(
        "results: {} ({elapsed:.0} s)",
        cli.options.json_out.display()
    );
    if !cli.options.keep_data {
        let _ = std::fs::remove_dir_all(&root);
    }
    let failed = bench.results.errors().len();
    if failed > 0 {
        bail!("{failed} scenario(s) failed");
    }
    Ok(())
}

/// The spoold executable: the one given, or `spoold` beside this program (same build profile).
fn find_spoold(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_owned(),
        None => std::env::current_exe()
            .context("locate this executable")?
            .with_file_name(format!("spoold{}", std::env::consts::EXE_SUFFIX)),
    };
    if !path.is_file() {
        bail!(
            "no spoold at {}: build it with `cargo build --release -p spoold -p spool-bench` \
             or pass --spoold PATH",
            path.display()
        );
    }
    Ok(path)
}

/// `debug` or `release` when the path is inside a cargo profile directory of that name.
fn profile_of(path: &Path) -> Option<&'static str> {
    let dir = path.parent()?.file_name()?.to_str()?;
    match dir {
        "debug" => Some("debug"),
        "release" => Some("release"),
        _ => None,
    }
}
