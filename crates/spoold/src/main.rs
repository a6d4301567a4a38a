//! The `spoold` binary: flags, logging, signals. Everything else is in the library.
//!
//! Exit codes: 0 after a clean shutdown, 1 if the daemon cannot start (database locked,
//! corrupt or too new, address in use), 2 for invalid flags.

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
    spoold::logging::init(args.log_format);
    let config = match args.into_config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spoold: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("spoold")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spoold: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        let running = match spoold::start(config).await {
            Ok(r) => r,
            Err(e) => {
                // One line, for whoever started it; not a second copy in the log format.
                eprintln!("spoold: {e}");
                return ExitCode::from(1);
            }
        };
        wait_for_signal().await;
        running.shutdown();
        running.wait().await;
        ExitCode::SUCCESS
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
