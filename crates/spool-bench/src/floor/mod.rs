//! The floors: what the machine charges for an operation's unavoidable part, measured with the
//! same load and counted as the daemon's CPU is (`utime + stime` of `/proc/<pid>/stat`, every
//! thread, read from outside over the same window), so that each of the daemon's CPU figures can
//! be read as a multiple of its floor.
//!
//! - [`http_floor`]: the create load (same bodies, concurrency and client) against a bare axum
//!   handler that reads the body and answers 201 ([`http`]), for the daemon's CPU a create;
//! - [`sending_floor`]: a bare reqwest loop sending the daemon's requests to the receiver at
//!   the per-target concurrency ([`sending`]), for the daemon's CPU a delivery;
//! - [`spawning_floor`]: `std::process::Command` (glibc `posix_spawn`), `pidfd_open` and
//!   `waitid` of `/bin/true` at the task concurrency ([`spawning`]), for a task's.
//!
//! Each floor is a process of its own: this same binary, started as `spool-bench
//! floor-process KIND …` (a hidden entry point; see [`process_main`]), with the same
//! dependency versions and features as spoold and its runtime built as spoold builds its own.
//! It sets itself up, prints `ready [ADDR]` and waits: the benchmark reads its CPU, drives the
//! load (or writes `go` and waits for `done`), reads its CPU again and closes its stdin, upon
//! which it exits.

pub mod http;
pub mod sending;
pub mod spawning;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Parser, Subcommand};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::daemon;
use crate::load::{closed_loop, ClosedLoop, ClosedLoopReport};

/// The first argument that makes `spool-bench` a floor process instead of the benchmark.
pub const SUBCOMMAND: &str = "floor-process";
/// How long a floor process may take to get ready, and to exit once told to.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What a floor process used over its measured window, and how many operations it did there.
#[derive(Debug, Clone, Copy)]
pub struct FloorCpu {
    /// Its own `utime + stime`, all threads.
    pub own: Duration,
    /// `cutime + cstime`: the children it reaped meanwhile (the spawning floor's).
    pub children: Duration,
    pub ops: u64,
}

impl FloorCpu {
    /// Its own CPU an operation, in µs.
    pub fn own_us(&self) -> f64 {
        per_op_us(self.own, self.ops)
    }

    /// Its reaped children's CPU an operation, in µs.
    pub fn children_us(&self) -> f64 {
        per_op_us(self.children, self.ops)
    }
}

/// CPU time an operation, in µs.
pub fn per_op_us(cpu: Duration, ops: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / ops.max(1) as f64
}

/// The HTTP floor: `load` (its bodies, concurrency, count and expected status) sent to
/// `servers` bare axum processes instead of the daemons (request `i` to server `i mod n`, as
/// to the daemons); their CPU summed over the load.
pub async fn http_floor(
    load: &ClosedLoop,
    servers: usize,
) -> anyhow::Result<(FloorCpu, ClosedLoopReport)> {
    let mut processes = Vec::with_capacity(servers.max(1));
    let mut addrs = Vec::with_capacity(servers.max(1));
    for _ in 0..servers.max(1) {
        let (process, ready) = FloorProcess::start(&["http".to_owned()]).await?;
        let addr: SocketAddr = ready
            .parse()
            .with_context(|| format!("the HTTP floor's address {ready:?}"))?;
        processes.push(process);
        addrs.push(addr);
    }
    let before = cpu_of(&processes)?;
    let report = closed_loop(&ClosedLoop {
        addrs,
        ..load.clone()
    })
    .await
    .context("the load against the HTTP floor")?;
    let after = cpu_of(&processes)?;
    for process in processes {
        process.finish().await?;
    }
    Ok((
        FloorCpu {
            own: after.0.saturating_sub(before.0),
            children: after.1.saturating_sub(before.1),
            ops: load.requests,
        },
        report,
    ))
}

/// How the sending floor sends: to `url`, `requests` POSTs at `concurrency`, each with the body
/// and headers spoold sends for delivery number `i` of the benchmark's batches.
#[derive(Debug, Clone)]
pub struct Sending {
    pub url: String,
    pub requests: u64,
    pub concurrency: usize,
    /// The JSON body padded to about this many bytes, as `--body-bytes` pads the deliveries'.
    pub body_bytes: usize,
    pub time_limit: Duration,
}

/// The sending floor: a bare reqwest loop in a process of its own sending `spec`'s requests.
pub async fn sending_floor(spec: &Sending) -> anyhow::Result<FloorCpu> {
    let args = [
        "send".to_owned(),
        "--url".to_owned(),
        spec.url.clone(),
        "--requests".to_owned(),
        spec.requests.to_string(),
        "--concurrency".to_owned(),
        spec.concurrency.to_string(),
        "--body-bytes".to_owned(),
        spec.body_bytes.to_string(),
    ];
    measure_loop(&args, spec.requests, spec.time_limit).await
}

/// The spawning floor: `count` runs of `program` at `concurrency`, in a process of its own.
pub async fn spawning_floor(
    program: &str,
    count: u64,
    concurrency: usize,
    time_limit: Duration,
) -> anyhow::Result<FloorCpu> {
    let args = [
        "spawn".to_owned(),
        "--program".to_owned(),
        program.to_owned(),
        "--count".to_owned(),
        count.to_string(),
        "--concurrency".to_owned(),
        concurrency.to_string(),
    ];
    measure_loop(&args, count, time_limit).await
}

/// Start a floor process that runs a loop of its own: CPU before `go`, after `done`.
async fn measure_loop(args: &[String], ops: u64, time_limit: Duration) -> anyhow::Result<FloorCpu> {
    let (mut process, _) = FloorProcess::start(args).await?;
    let before = process.cpu()?;
    process.say("go").await?;
    let done = process.expect("done", time_limit).await?;
    let after = process.cpu()?;
    if !done.is_empty() {
        bail!("the {} floor failed: {done}", args[0]);
    }
    process.finish().await?;
    Ok(FloorCpu {
        own: after.0.saturating_sub(before.0),
        children: after.1.saturating_sub(before.1),
        ops,
    })
}

/// Own and reaped children's CPU, summed over the processes.
fn cpu_of(processes: &[FloorProcess]) -> anyhow::Result<(Duration, Duration)> {
    let mut sum = (Duration::ZERO, Duration::ZERO);
    for p in processes {
        let (own, children) = p.cpu()?;
        sum = (sum.0 + own, sum.1 + children);
    }
    Ok(sum)
}

/// A floor process, started from this executable. Dropped, it is killed.
struct FloorProcess {
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl FloorProcess {
    /// Start `spool-bench floor-process ARGS…` and wait for its `ready` line; returns the rest
    /// of that line.
    async fn start(args: &[String]) -> anyhow::Result<(FloorProcess, String)> {
        let exe = std::env::current_exe().context("locate this executable")?;
        let mut child = tokio::process::Command::new(&exe)
            .arg(SUBCOMMAND)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {} {SUBCOMMAND} {}", exe.display(), args[0]))?;
        let pid = child.id().context("the floor process has a pid")?;
        let stdin = child.stdin.take().context("its stdin is piped")?;
        let stdout = child.stdout.take().context("its stdout is piped")?;
        let mut process = FloorProcess {
            child,
            pid,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout).lines(),
        };
        let ready = process.expect("ready", START_TIMEOUT).await?;
        Ok((process, ready))
    }

    /// Own and reaped children's CPU so far.
    fn cpu(&self) -> anyhow::Result<(Duration, Duration)> {
        Ok((
            daemon::cpu_time(self.pid)?,
            daemon::children_cpu_time(self.pid)?,
        ))
    }

    async fn say(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("its stdin is closed")?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .context("write to the floor process")?;
        stdin.flush().await.context("write to the floor process")
    }

    /// The next line, which must start with `word`; returns the rest of it, trimmed.
    async fn expect(&mut self, word: &str, timeout: Duration) -> anyhow::Result<String> {
        let line = match tokio::time::timeout(timeout, self.stdout.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = self.child.wait().await.ok();
                bail!("the floor process ended ({status:?}) before saying {word:?}")
            }
            Ok(Err(e)) => bail!("read the floor process's output: {e}"),
            Err(_) => bail!("the floor process did not say {word:?} within {timeout:?}"),
        };
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_owned()),
            None => bail!("the floor process said {line:?}, not {word:?}"),
        }
    }

    /// Close its stdin and wait for it to exit successfully.
    async fn finish(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(START_TIMEOUT, self.child.wait())
            .await
            .context("the floor process did not exit once its stdin closed")?
            .context("wait for the floor process")?;
        if !status.success() {
            bail!("the floor process exited with {status}");
        }
        Ok(())
    }
}

/// A floor process's flags (`spool-bench floor-process …`; started by the benchmark only).
#[derive(Debug, Parser)]
#[command(name = "spool-bench floor-process")]
struct FloorCli {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(Debug, Subcommand)]
enum Kind {
    /// A bare axum handler on 127.0.0.1: reads the body, answers 201.
    Http,
    /// A bare reqwest loop: POST the requests spoold sends to URL.
    Send {
        #[arg(long)]
        url: String,
        #[arg(long)]
        requests: u64,
        #[arg(long)]
        concurrency: usize,
        #[arg(long, default_value_t = 0)]
        body_bytes: usize,
    },
    /// `posix_spawn` + `pidfd_open` + `waitid` of PROGRAM in a loop.
    Spawn {
        #[arg(long)]
        program: PathBuf,
        #[arg(long)]
        count: u64,
        #[arg(long)]
        concurrency: usize,
    },
}

/// The floor process: `args` are the arguments after [`SUBCOMMAND`].
pub fn process_main(args: Vec<OsString>) -> ExitCode {
    let cli = FloorCli::parse_from(std::iter::once(OsString::from(SUBCOMMAND)).chain(args));
    let outcome = match cli.kind {
        Kind::Http => http::serve(),
        Kind::Send {
            url,
            requests,
            concurrency,
            body_bytes,
        } => sending::run(&url, requests, concurrency, body_bytes),
        Kind::Spawn {
            program,
            count,
            concurrency,
        } => spawning::run(&program, count, concurrency),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("spool-bench {SUBCOMMAND}: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The loop floors' protocol on stdin and stdout: say `ready`, wait for `go`, run `work`, say
/// `done` (with the error, if it failed), then wait for stdin to close.
fn ready_go_done(work: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    use std::io::{BufRead as _, Write as _};
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "ready").context("write to stdout")?;
    stdout.flush().context("write to stdout")?;
    let mut stdin = std::io::stdin().lock();
    let mut line = String::new();
    stdin.read_line(&mut line).context("read stdin")?;
    if line.trim() != "go" {
        bail!("expected go, got {line:?}");
    }
    let outcome = work();
    let said = match &outcome {
        Ok(()) => "done".to_owned(),
        Err(e) => format!("done {e:#}"),
    };
    writeln!(stdout, "{said}").context("write to stdout")?;
    stdout.flush().context("write to stdout")?;
    // Until the benchmark has read the CPU and closes stdin.
    while stdin.read_line(&mut line).context("read stdin")? > 0 {
        line.clear();
    }
    outcome
}

/// The runtime the HTTP and sending floors run on: built as spoold's `main` builds its own.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("floor")
        .build()
        .context("start the async runtime")
}
