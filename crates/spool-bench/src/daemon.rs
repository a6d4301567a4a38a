//! The daemon under test: the real `spoold` binary as a child process, on 127.0.0.1 with a port
//! of the OS's choosing, read back from its `listening` log line. Its stderr is drained by a
//! thread for its whole life (it logs one JSON line per API request and per attempt, and a full
//! pipe would stall it); the thread keeps counts and the last lines, not the log.
//!
//! Also what the benchmark observes from outside: readiness, `/proc` memory and CPU time, the
//! Prometheus metrics.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use http::{Method, StatusCode};
use tokio::sync::oneshot;

use crate::connection::Connection;

/// How long the daemon may take to log `listening`, and then to answer `/readyz` with 200.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the daemon may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How often `/readyz` is asked while waiting for readiness.
const READY_POLL: Duration = Duration::from_millis(2);
/// Log lines kept for error messages.
const KEPT_LINES: usize = 30;

/// How to start the daemon: `spoold --listen 127.0.0.1:0 --db <db> [--data-dir <dir>]
/// --allow-private-targets --log-format json <args…>`, logging at its default level (`info`).
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    pub program: PathBuf,
    /// A SQLite file, or a `postgres://` URL.
    pub db: PathBuf,
    /// `--data-dir` (task files); spoold's default (the SQLite file's directory) when `None`.
    pub data_dir: Option<PathBuf>,
    pub args: Vec<String>,
}

/// A running daemon. Dropping it kills the process.
pub struct Daemon {
    child: Child,
    pid: u32,
    addr: SocketAddr,
    spawned: Instant,
    log: Arc<LogTally>,
    drain: Option<std::thread::JoinHandle<()>>,
}

/// What the stderr drain has seen.
#[derive(Default)]
struct LogTally {
    lines: AtomicU64,
    bytes: AtomicU64,
    recent: Mutex<VecDeque<String>>,
    /// The first WARN and ERROR lines.
    problems: Mutex<Vec<String>>,
}

/// Resident memory of the daemon, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_bytes: u64,
    /// `VmHWM`: the peak so far.
    pub peak_bytes: u64,
    /// `RssAnon`: the resident part that is the process's own memory (heap, stacks), not
    /// pages of files it maps (its executable's code, which the kernel shares and can drop).
    pub anon_bytes: u64,
}

/// The daemon's `/metrics`, as `name{labels}` → value.
#[derive(Debug, Clone, Default)]
pub struct Metrics(HashMap<String, f64>);

impl Daemon {
    /// Spawn the daemon and wait for its `listening` line (not for readiness: see
    /// [`Daemon::wait_ready`]).
    pub async fn start(spec: &DaemonSpec) -> anyhow::Result<Daemon> {
        let mut command = Command::new(&spec.program);
        command
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--db")
            .arg(&spec.db);
        if let Some(dir) = &spec.data_dir {
            command.arg("--data-dir").arg(dir);
        }
        command
            .args(["--allow-private-targets", "--log-format", "json"])
            .args(&spec.args)
            // The default level, whatever the shell running the benchmark has set.
            .env_remove("SPOOLD_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = command
            .spawn()
            .with_context(|| format!("start {}", spec.program.display()))?;
        let pid = child.id();
        let stderr = child.stderr.take().context("spoold stderr is piped")?;
        let log = Arc::new(LogTally::default());
        let (listening_tx, listening_rx) = oneshot::channel();
        let drain_log = Arc::clone(&log);
        let drain = std::thread::Builder::new()
            .name("spoold-stderr".into())
            .spawn(move || drain_stderr(stderr, &drain_log, listening_tx))
            .context("start the stderr drain thread")?;
        let mut daemon = Daemon {
            child,
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            spawned,
            log,
            drain: Some(drain),
        };
        let addr = match tokio::time::timeout(START_TIMEOUT, listening_rx).await {
            Ok(Ok(addr)) => addr,
            Ok(Err(_closed)) => {
                let status = daemon.child.wait().ok();
                bail!(
                    "spoold exited ({}) before listening\n{}",
                    status.map_or_else(|| "unknown status".into(), |s| s.to_string()),
                    daemon.recent_log()
                )
            }
            Err(_) => bail!(
                "spoold did not log `listening` within {START_TIMEOUT:?}\n{}",
                daemon.recent_log()
            ),
        };
        daemon.addr = addr;
        Ok(daemon)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Poll `GET /readyz` until it answers 200; returns the time since the process was spawned.
    pub async fn wait_ready(&mut self) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut conn: Option<Connection> = None;
        loop {
            if let Some(status) = self.child.try_wait().context("check on spoold")? {
                bail!(
                    "spoold exited ({status}) before ready\n{}",
                    self.recent_log()
                );
            }
            if conn.is_none() {
                conn = Connection::open(self.addr).await.ok();
            }
            if let Some(c) = conn.as_mut() {
                match c.send(Method::GET, "/readyz", None).await {
                    Ok((StatusCode::OK, _)) => return Ok(self.spawned.elapsed()),
                    Ok(_) => {}
                    Err(_) => conn = None,
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "spoold not ready within {START_TIMEOUT:?}\n{}",
                    self.recent_log()
                );
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }

    /// A new connection to the control API.
    pub async fn connect(&self) -> anyhow::Result<Connection> {
        Connection::open(self.addr).await
    }

    /// `GET /metrics`, parsed.
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        let (status, body) = self
            .connect()
            .await?
            .send(Method::GET, "/metrics", None)
            .await?;
        if status != StatusCode::OK {
            bail!("GET /metrics: {status}");
        }
        Ok(Metrics::parse(&String::from_utf8_lossy(&body)))
    }

    /// Resident memory now and at its peak.
    pub fn memory(&self) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .context("read /proc/<pid>/status")?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .map(|n| n * 1024)
                .with_context(|| format!("no {key} in /proc/<pid>/status"))
        };
        Ok(Memory {
            rss_bytes: kib("VmRSS:")?,
            peak_bytes: kib("VmHWM:")?,
            anon_bytes: kib("RssAnon:")?,
        })
    }

    /// User plus system CPU time used so far, from `/proc/<pid>/stat`.
    pub fn cpu_time(&self) -> anyhow::Result<Duration> {
        cpu_time(self.pid)
    }

    /// User plus system CPU time of the children it has reaped so far (a task attempt's
    /// supervisor and, through it, the attempt's processes), from `/proc/<pid>/stat`.
    pub fn children_cpu_time(&self) -> anyhow::Result<Duration> {
        children_cpu_time(self.pid)
    }

    /// Log lines and bytes written so far.
    pub fn log_volume(&self) -> (u64, u64) {
        (
            self.log.lines.load(Ordering::Relaxed),
            self.log.bytes.load(Ordering::Relaxed),
        )
    }

    /// The first WARN/ERROR lines logged.
    pub fn problems(&self) -> Vec<String> {
        self.log
            .problems
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// SIGTERM, then wait for a clean exit (SIGKILL after 30 s, which is an error).
    pub async fn stop(mut self) -> anyhow::Result<ExitStatus> {
        let pid = rustix::process::Pid::from_child(&self.child);
        // An error means it has already exited; the wait below collects the status.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().context("wait for spoold")? {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                bail!(
                    "spoold did not exit within {STOP_TIMEOUT:?} of SIGTERM\n{}",
                    self.recent_log()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if let Some(drain) = self.drain.take() {
            // stderr is closed once the process is gone (spoold starts no children).
            let _ = tokio::task::spawn_blocking(move || drain.join()).await;
        }
        if !status.success() {
            bail!("spoold exited with {status}\n{}", self.recent_log());
        }
        Ok(status)
    }

    fn recent_log(&self) -> String {
        let recent = self
            .log
            .recent
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut text = String::from("--- last spoold log lines ---\n");
        for line in recent.iter() {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Metrics {
    /// Parse Prometheus/OpenMetrics text: every sample line `name{labels} value`.
    pub fn parse(text: &str) -> Metrics {
        let mut samples = HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            // Label values here never contain spaces.
            if let Some((name, value)) = line.rsplit_once(' ') {
                if let Ok(v) = value.parse::<f64>() {
                    samples.insert(name.to_owned(), v);
                }
            }
        }
        Metrics(samples)
    }

    /// The samples of several daemons added up (for counters: what they did together).
    pub fn sum<'a>(parts: impl IntoIterator<Item = &'a Metrics>) -> Metrics {
        let mut total: HashMap<String, f64> = HashMap::new();
        for part in parts {
            for (sample, value) in &part.0 {
                *total.entry(sample.clone()).or_insert(0.0) += value;
            }
        }
        Metrics(total)
    }

    /// One sample by its exact `name{labels}`; 0 when absent.
    pub fn get(&self, sample: &str) -> f64 {
        self.0.get(sample).copied().unwrap_or(0.0)
    }

    /// Deliveries whose success has been recorded since the daemon started.
    pub fn succeeded(&self) -> f64 {
        self.get(r#"spoold_delivery_results_total{result="succeeded"}"#)
    }

    /// Attempts started since the daemon started.
    pub fn attempts(&self) -> f64 {
        self.get("spoold_delivery_attempts_total")
    }

    /// Store commits (group-commit transactions) since the daemon started.
    pub fn commits(&self) -> f64 {
        self.get("spoold_store_commit_batch_size_count")
    }

    /// Writes carried by all commits since the daemon started.
    pub fn committed_writes(&self) -> f64 {
        self.get("spoold_store_commit_batch_size_sum")
    }
}

/// `GET /metrics` of every daemon, one after another: each one's, and their sum.
pub async fn metrics_of(daemons: &[Daemon]) -> anyhow::Result<(Vec<Metrics>, Metrics)> {
    let mut each = Vec::with_capacity(daemons.len());
    for daemon in daemons {
        each.push(daemon.metrics().await?);
    }
    let total = Metrics::sum(&each);
    Ok((each, total))
}

/// Read stderr line by line until it closes: count, keep the last lines and the problems, and
/// report the `listening` address once.
fn drain_stderr(stderr: ChildStderr, log: &LogTally, listening: oneshot::Sender<SocketAddr>) {
    let mut listening = Some(listening);
    let mut reader = BufReader::with_capacity(64 * 1024, stderr);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                log.lines.fetch_add(1, Ordering::Relaxed);
                log.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        let text = line.trim_end();
        if listening.is_some() {
            if let Some(addr) = listening_addr(text) {
                if let Some(tx) = listening.take() {
                    let _ = tx.send(addr);
                }
            }
        }
        let problem = text.contains(r#""level":"WARN""#) || text.contains(r#""level":"ERROR""#);
        // The benchmark sets --allow-private-targets on purpose; its warning is expected.
        if problem && !text.contains("--allow-private-targets is set") {
            let mut problems = log.problems.lock().unwrap_or_else(PoisonError::into_inner);
            if problems.len() < KEPT_LINES {
                problems.push(text.to_owned());
            }
        }
        let mut recent = log.recent.lock().unwrap_or_else(PoisonError::into_inner);
        if recent.len() == KEPT_LINES {
            recent.pop_front();
        }
        recent.push_back(text.to_owned());
    }
}

/// The address of spoold's `listening` line (a flattened JSON event), if this is that line.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening") {
        return None;
    }
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    let field = |name: &str| {
        event
            .get(name)
            .or_else(|| event.get("fields").and_then(|f| f.get(name)))
            .and_then(serde_json::Value::as_str)
    };
    if field("message")? != "listening" {
        return None;
    }
    field("addr")?.parse().ok()
}

/// User plus system CPU time process `pid` has used so far, all its threads
/// (`utime + stime` of `/proc/<pid>/stat`): how the daemon's CPU is counted, and its floors'.
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).context("read /proc/<pid>/stat")?;
    cpu_time_of(&stat, rustix::param::clock_ticks_per_second())
}

/// User plus system CPU time of the children process `pid` has reaped so far
/// (`cutime + cstime` of `/proc/<pid>/stat`).
pub fn children_cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat =
        std::fs::read_to_string(format!("/proc/{pid}/stat")).context("read /proc/<pid>/stat")?;
    fields_time_of(&stat, rustix::param::clock_ticks_per_second(), (16, 17))
}

/// `utime + stime` of a `/proc/<pid>/stat` line.
fn cpu_time_of(stat: &str, ticks_per_second: u64) -> anyhow::Result<Duration> {
    fields_time_of(stat, ticks_per_second, (14, 15))
}

/// The sum of two clock-tick fields of a `/proc/<pid>/stat` line (14 and 15: `utime` and
/// `stime`; 16 and 17: `cutime` and `cstime`). The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn fields_time_of(
    stat: &str,
    ticks_per_second: u64,
    (first, second): (usize, usize),
) -> anyhow::Result<Duration> {
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .context("malformed /proc/<pid>/stat")?;
    // After the name: state is field 3.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> anyhow::Result<u64> {
        fields
            .get(n - 3)
            .and_then(|f| f.parse().ok())
            .with_context(|| format!("field {n} of /proc/<pid>/stat"))
    };
    let ticks = field(first)? + field(second)?;
    Ok(Duration::from_secs_f64(
        ticks as f64 / ticks_per_second.max(1) as f64,
    ))
}

/// `spoold --version`, for the results document.
pub fn version(program: &Path) -> anyhow::Result<String> {
    let out = Command::new(program)
        .arg("--version")
        .output()
        .with_context(|| format!("run {} --version", program.display()))?;
    if !out.status.success() {
        bail!("{} --version failed: {}", program.display(), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_line() {
        let line = r#"{"timestamp":"t","level":"INFO","message":"listening","addr":"127.0.0.1:4321","db":"x","target":"spoold"}"#;
        assert_eq!(listening_addr(line), "127.0.0.1:4321".parse().ok());
        let nested = r#"{"fields":{"message":"listening","addr":"127.0.0.1:9"}}"#;
        assert_eq!(listening_addr(nested), "127.0.0.1:9".parse().ok());
        assert_eq!(listening_addr(r#"{"message":"api request"}"#), None);
        assert_eq!(listening_addr("listening, not json"), None);
    }

    #[test]
    fn cpu_time_counts_from_the_last_parenthesis() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime …
        let stat = "42 (spo ld) x) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(
            cpu_time_of(stat, 100).expect("parses"),
            Duration::from_secs(3)
        );
        assert!(cpu_time_of("garbage", 100).is_err());
    }

    #[test]
    fn metrics_samples() {
        let m = Metrics::parse(
            "# HELP x y\nspoold_delivery_results_total{result=\"succeeded\"} 12\n\
             spoold_delivery_attempts_total 13\nspoold_store_commit_batch_size_sum 7.5\n# EOF\n",
        );
        assert_eq!(m.succeeded(), 12.0);
        assert_eq!(m.attempts(), 13.0);
        assert_eq!(m.committed_writes(), 7.5);
        assert_eq!(m.commits(), 0.0);
        let other = Metrics::parse(
            "spoold_delivery_attempts_total 2\nspoold_store_commit_batch_size_count 4\n",
        );
        let both = Metrics::sum([&m, &other]);
        assert_eq!(both.attempts(), 15.0);
        assert_eq!(both.commits(), 4.0);
        assert_eq!(both.succeeded(), 12.0);
    }
}
