//! The `spoold` binary: flags, logging, signals (SIGTERM/SIGINT stop it gracefully, SIGHUP
//! reloads the configuration), and telling systemd (`Type=notify`) when it is ready, reloading
//! or stopping, and that it is alive. Everything else is in the library.
//!
//! Exit codes: 0 after a clean shutdown, 1 if the daemon cannot start (database locked,
//! corrupt or too new, address in use) or stopped by itself (a shared database migrated past
//! it), 2 for invalid flags. `--check-config` and `--print-config` exit 0 or 2 without
//! starting.

use std::process::ExitCode;

use spoold::config::{normalize_go_flags, parse_args, ArgsError};

/// The static (musl) builds allocate with mimalloc, which (feature `override`) also replaces
/// musl's `malloc` for SQLite: musl's own allocator halved enqueue and end-to-end throughput
/// (docs/src/lab-notes.md, "Static binaries"). glibc builds keep the system allocator. Built
/// without transparent huge pages (`no_thp`): with them an idle daemon held 14 MiB more.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A task attempt's supervisor: the daemon re-executed, before anything else is set up.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == spoold::tasks::supervision::ARG)
    {
        return spoold::tasks::supervisor::main();
    }
    let args = match parse_args(normalize_go_flags(std::env::args())) {
        Ok(args) => args,
        Err(ArgsError::Usage(e)) => e.exit(),
        Err(ArgsError::Config(e)) => {
            eprintln!("spoold: {e}");
            return ExitCode::from(2);
        }
    };
    if args.man {
        use std::io::Write as _;
        return match std::io::stdout().write_all(spoold::config::MAN_PAGE.as_bytes()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(1),
        };
    }
    let log = spoold::logging::init(args.log_format);
    let result = run(args);
    // Every log line is out before the one-line error, and before the process ends.
    drop(log);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("spoold: {message}");
            ExitCode::from(code)
        }
    }
}

/// The daemon from start to a clean shutdown; on failure the exit code and the one line for
/// whoever started it (not a second copy in the log format).
fn run(args: spoold::config::Args) -> Result<(), (u8, String)> {
    let check_only = args.check_config;
    let print_only = args.print_config;
    let config = args.into_config().map_err(|e| (2, e.to_string()))?;
    if print_only {
        print!("{}", config.print());
        return Ok(());
    }
    if check_only {
        let summary = spoold::check_config(&config).map_err(|e| (2, e.to_string()))?;
        println!("{summary}");
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("spoold")
        .build()
        .map_err(|e| (1, format!("cannot start the async runtime: {e}")))?;
    let notifier = std::sync::Arc::new(spoold::systemd::Notifier::from_env());
    runtime.block_on(async {
        let maildrop = config.maildrop.clone();
        let mut running = spoold::start(config)
            .await
            .map_err(|e| (1, e.to_string()))?;
        let mut signals = Signals::new().map_err(|e| (1, format!("cannot handle signals: {e}")))?;
        // After the handlers: a signal sent as soon as `listening` is logged finds them.
        if let Some(dir) = &maildrop {
            spoold::maildrop::point_to(dir, &running.bound);
        }
        // The store is open and the API listens: ready, for systemd too.
        let ready = format!("READY=1\nSTATUS=listening on {}", running.bound);
        notifier.send(&ready);
        if let Some(every) = notifier.watchdog_every() {
            let notifier = std::sync::Arc::clone(&notifier);
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(every);
                loop {
                    ticks.tick().await;
                    notifier.send("WATCHDOG=1");
                }
            });
        }
        loop {
            tokio::select! {
                signal = signals.next() => match signal {
                    Signal::Stop => break,
                    Signal::Reload => {
                        notifier.reloading();
                        reload(&mut running).await;
                        notifier.send(&ready);
                    }
                },
                () = running.stopping() => break,
            }
        }
        notifier.send("STOPPING=1\nSTATUS=stopping");
        running.shutdown();
        running.wait().await.map_err(|why| (1, why))
    })
}

/// The signals the daemon acts on.
enum Signal {
    /// SIGTERM or SIGINT: a graceful shutdown.
    Stop,
    /// SIGHUP: read the configuration again (it no longer ends the daemon).
    Reload,
}

struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn next(&mut self) -> Signal {
        let (name, signal) = tokio::select! {
            _ = self.term.recv() => ("SIGTERM", Signal::Stop),
            _ = self.int.recv() => ("SIGINT", Signal::Stop),
            _ = self.hup.recv() => ("SIGHUP", Signal::Reload),
        };
        tracing::info!(signal = name, "signal received");
        signal
    }
}

/// Read the flags and the configuration file again, as at start, and apply what may change
/// while running (the task types, the target rules and their secrets); a configuration that does not load is refused whole and
/// the running one kept.
async fn reload(running: &mut spoold::Running) {
    let loaded = match parse_args(normalize_go_flags(std::env::args())) {
        Ok(args) => args.into_config().map_err(|e| e.to_string()),
        Err(ArgsError::Usage(e)) => Err(e.to_string().trim_end().to_owned()),
        Err(ArgsError::Config(e)) => Err(e.to_string()),
    };
    let applied = match loaded {
        Ok(config) => running.reload(config).await.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match applied {
        Ok(r) => {
            // Before the line that says the reload is done, which is what waiters look for.
            if !r.removed_secrets.is_empty() {
                let secrets: Vec<String> = r
                    .removed_secrets
                    .iter()
                    .map(|s| match s.waiting {
                        Some(n) => format!("{} ({n} waiting to be sent name it)", s.name),
                        None => format!("{} (not counted)", s.name),
                    })
                    .collect();
                tracing::warn!(
                    secrets = %secrets.join(", "),
                    waiting = r.removed_secrets.iter().filter_map(|s| s.waiting).sum::<u64>(),
                    "these [secrets] entries were removed: deliveries that name one are not \
                     sent (secret_missing, retried with backoff) until it is declared again"
                );
            }
            if !r.reviewed.is_empty() {
                tracing::warn!(
                    tasks = r.reviewed.len(),
                    task_ids = %r.reviewed.join(", "),
                    "pending tasks of removed types went to manual_review (type_undeclared), \
                     giving up the locks they kept"
                );
            }
            if !r.held_by_removed.is_empty() {
                tracing::warn!(
                    locks = %r.held_by_removed.join(", "),
                    "pending tasks of removed types keep these locks through their backoff: \
                     another host sharing the database may still declare the type and run them; \
                     cancel them (spoolctl task cancel) to free the locks"
                );
            }
            tracing::info!(
                added = ?r.added,
                removed = ?r.removed,
                changed = ?r.changed,
                target_rules = r.target_rules,
                "configuration reloaded: task types and target rules applied"
            );
            if !r.kept.is_empty() {
                tracing::warn!(
                    settings = ?r.kept,
                    "these settings changed but cannot while the daemon runs: kept as they \
                     were until the next start"
                );
            }
        }
        Err(e) => tracing::error!(
            error = %e,
            "configuration not reloaded: the running one is kept"
        ),
    }
}
