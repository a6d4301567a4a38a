//! The `spoold` binary: flags, logging, signals. Everything else is in the library.
//!
//! Exit codes: 0 after a clean shutdown, 1 if the daemon cannot start (database locked,
//! corrupt or too new, address in use) or stopped by itself (a shared database migrated past
//! it), 2 for invalid flags.

use std::process::ExitCode;

use spoold::config::{normalize_go_flags, parse_args, ArgsError};

fn main() -> ExitCode {
    let args = match parse_args(normalize_go_flags(std::env::args())) {
        Ok(args) => args,
        Err(ArgsError::Usage(e)) => e.exit(),
        Err(ArgsError::Config(e)) => {
            eprintln!("spoold: {e}");
            return ExitCode::from(2);
        }
    };
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
    let config = args.into_config().map_err(|e| (2, e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("spoold")
        .build()
        .map_err(|e| (1, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let running = spoold::start(config)
            .await
            .map_err(|e| (1, e.to_string()))?;
        tokio::select! {
            () = wait_for_signal() => {}
            () = running.stopping() => {}
        }
        running.shutdown();
        running.wait().await.map_err(|why| (1, why))
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("signal received");
}
