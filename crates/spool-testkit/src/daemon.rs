//! Runs the real `spoold` binary as a child process, for the tests where a process is the
//! point: kill -9, restart on the same database, signals, a second daemon refused. Readiness
//! comes from the daemon's own `listening` log line, never from a sleep; its pipes are drained
//! for its whole life so it never blocks on a full pipe.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::bin_path::cargo_bin;

/// How long [`DaemonProcess::start`] waits for the `listening` line by default.
pub const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long [`DaemonProcess::terminate`] waits for the exit after SIGTERM.
pub const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the daemon listens unless a unix socket is asked for: loopback, a port of the OS's
/// choosing (read back from the `listening` line).
const LOOPBACK_ANY_PORT: &str = "127.0.0.1:0";
/// How long to wait, once the daemon has exited, for the last of its output. A grandchild
/// holding a pipe open must not hang the test.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long [`DaemonProcess::kill9`] waits for the kernel to report the death.
const KILL_REAP_TIMEOUT: Duration = Duration::from_secs(10);

/// How to start `spoold`. The command line is
/// `[wrapper…] spoold --db <db> --listen 127.0.0.1:0 --allow-private-targets --log-format json
/// <args…>`, with `--unix-socket <path>` in place of `--listen …` when [`Self::unix_socket`] is
/// set, and without `--allow-private-targets` after [`Self::default_address_policy`].
///
/// The child does not inherit `RUST_LOG` or any `SPOOLD_*` variable from the test's
/// environment (so a developer's shell cannot change what a test runs); set them with
/// [`Self::env`].
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The database file.
    pub db: PathBuf,
    /// Extra arguments, after the fixed ones.
    pub args: Vec<String>,
    /// Environment variables for the child.
    pub env: Vec<(String, String)>,
    /// Listen on this unix socket instead of TCP.
    pub unix_socket: Option<PathBuf>,
    /// The executable to run; `None` means [`cargo_bin`]`("spoold")`.
    pub program: Option<PathBuf>,
    /// A command that runs the daemon, e.g. `ip netns exec NS`; empty for none. It must exec
    /// the program (as `ip netns exec` does), so that the child's pid is the daemon's and
    /// [`DaemonProcess::kill9`] and [`DaemonProcess::signal`] reach it.
    pub wrapper: Vec<OsString>,
    /// Pass `--allow-private-targets` (the default: the test receiver is on loopback).
    pub allow_private_targets: bool,
    /// How long to wait for readiness (or, in [`DaemonProcess::run_to_exit`], for the exit).
    pub ready_timeout: Duration,
}

/// A running `spoold` child process. Dropping it kills the process (SIGKILL).
#[derive(Debug)]
pub struct DaemonProcess {
    child: Child,
    pid: u32,
    /// The `addr` of the `listening` line: `127.0.0.1:PORT`, or the socket path.
    listen: String,
    unix: bool,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    drains: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// The listening address in a daemon log line, if the line is the daemon's `listening`
/// event: a tracing-subscriber JSON object with `message` and `addr` under `fields` (or at
/// the top level, for flattened events). Anything else, including non-JSON, is `None`.
pub fn parse_listening_line(line: &str) -> Option<String> {
    let event: Value = serde_json::from_str(line.trim()).ok()?;
    let field = |name: &str| {
        event
            .get("fields")
            .and_then(|fields| fields.get(name))
            .or_else(|| event.get(name))
            .and_then(Value::as_str)
    };
    if field("message")? != "listening" {
        return None;
    }
    let addr = field("addr")?;
    // A field recorded with `?addr` (Debug) of a path carries its own quotes.
    let addr = addr
        .strip_prefix('"')
        .and_then(|a| a.strip_suffix('"'))
        .unwrap_or(addr);
    Some(addr.to_owned())
}

impl DaemonOptions {
    /// Options for a daemon on `db`, listening on 127.0.0.1 with an OS-chosen port.
    pub fn new(db: impl Into<PathBuf>) -> Self {
        Self {
            db: db.into(),
            args: Vec::new(),
            env: Vec::new(),
            unix_socket: None,
            program: None,
            wrapper: Vec::new(),
            allow_private_targets: true,
            ready_timeout: READY_TIMEOUT,
        }
    }

    /// Append one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Append arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set an environment variable for the child.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Listen on this unix socket instead of TCP.
    pub fn unix_socket(mut self, path: impl Into<PathBuf>) -> Self {
        self.unix_socket = Some(path.into());
        self
    }

    /// Run this executable instead of the workspace's `spoold`.
    pub fn program(mut self, path: impl Into<PathBuf>) -> Self {
        self.program = Some(path.into());
        self
    }

    /// Run the daemon through this command (`["ip", "netns", "exec", ns]`); see the field of
    /// the same name.
    pub fn wrapper<I, S>(mut self, command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.wrapper = command.into_iter().map(Into::into).collect();
        self
    }

    /// Leave out `--allow-private-targets`: the daemon applies its default address policy
    /// (plus any `--allow-target` in [`Self::args`]).
    pub fn default_address_policy(mut self) -> Self {
        self.allow_private_targets = false;
        self
    }

    /// Wait this long for readiness instead of [`READY_TIMEOUT`].
    pub fn ready_timeout(mut self, timeout: Duration) -> Self {
        self.ready_timeout = timeout;
        self
    }

    /// The daemon's arguments, fixed ones first.
    pub fn command_args(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["--db".into(), self.db.clone().into()];
        match &self.unix_socket {
            Some(path) => argv.extend(["--unix-socket".into(), path.clone().into()]),
            None => argv.extend(["--listen", LOOPBACK_ANY_PORT].map(OsString::from)),
        }
        if self.allow_private_targets {
            argv.push("--allow-private-targets".into());
        }
        argv.extend(["--log-format", "json"].map(OsString::from));
        argv.extend(self.args.iter().map(OsString::from));
        argv
    }
}

impl DaemonProcess {
    /// Spawn the daemon and wait until it logs `listening`. Fails, with the daemon's stderr in
    /// the message, if it exits first or is not ready within [`DaemonOptions::ready_timeout`].
    pub async fn start(opts: DaemonOptions) -> anyhow::Result<Self> {
        let (mut process, ready) = Self::launch(&opts)?;
        process.unix = opts.unix_socket.is_some();
        // stderr closing without a `listening` line decides nothing by itself: the exit or
        // the deadline does.
        let ready = async {
            match ready.await {
                Ok(addr) => addr,
                Err(_no_line) => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            biased;
            addr = ready => Readiness::Ready(addr),
            status = process.child.wait() => Readiness::Exited(status),
            () = tokio::time::sleep(opts.ready_timeout) => Readiness::TimedOut,
        };
        match outcome {
            Readiness::Ready(addr) => {
                process.listen = addr;
                Ok(process)
            }
            Readiness::Exited(status) => {
                let status = status.context("wait for spoold")?;
                process.status = Some(status);
                process.finish_drains().await;
                bail!(
                    "spoold exited with {status} before it was ready\n--- stderr ---\n{}",
                    process.stderr()
                )
            }
            Readiness::TimedOut => bail!(
                "spoold was not ready within {:?}\n--- stderr ---\n{}",
                opts.ready_timeout,
                process.stderr()
            ),
        }
    }

    /// Run a daemon that is expected to refuse to start (a second daemon on the same
    /// database, a bad flag) and return its exit status and stderr. Fails if it is still
    /// running after [`DaemonOptions::ready_timeout`].
    pub async fn run_to_exit(opts: DaemonOptions) -> anyhow::Result<(ExitStatus, String)> {
        let (mut process, _ready) = Self::launch(&opts)?;
        let status = process.wait_exit(opts.ready_timeout).await?;
        Ok((status, process.stderr()))
    }

    /// `http://127.0.0.1:PORT`, or `unix://<path>` for a unix socket.
    pub fn base_url(&self) -> String {
        if self.unix {
            format!("unix://{}", self.listen)
        } else {
            format!("http://{}", self.listen)
        }
    }

    /// The bound TCP address; `None` on a unix socket.
    pub fn addr(&self) -> Option<SocketAddr> {
        if self.unix {
            None
        } else {
            self.listen.parse().ok()
        }
    }

    /// The `addr` of the `listening` line, as logged.
    pub fn listen_addr(&self) -> &str {
        &self.listen
    }

    /// The unix socket path, when listening on one.
    pub fn unix_socket(&self) -> Option<&Path> {
        self.unix.then(|| Path::new(&self.listen))
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Everything the daemon has written to stderr so far.
    pub fn stderr(&self) -> String {
        lock(&self.stderr).clone()
    }

    /// Everything the daemon has written to stdout so far.
    pub fn stdout(&self) -> String {
        lock(&self.stdout).clone()
    }

    /// Kill the daemon with SIGKILL, as a crash would, and reap it. Returns at once if it has
    /// already exited.
    ///
    /// # Panics
    /// If the kernel does not report the death within 10 s: the test cannot go on.
    pub fn kill9(&mut self) -> ExitStatus {
        if let Some(status) = self.status {
            return status;
        }
        // The whole group, while the leader is not yet reaped (so the group id cannot have been
        // reused). An error means it has exited already; `try_wait` below collects its status.
        self.kill_group();
        let _ = self.child.start_kill();
        let deadline = Instant::now() + KILL_REAP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.status = Some(status);
                    return status;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => panic!("spoold (pid {}) still alive 10 s after SIGKILL", self.pid),
                Err(e) => panic!("cannot reap spoold (pid {}): {e}", self.pid),
            }
        }
    }

    /// SIGKILL to the daemon's process group (it leads its own group).
    fn kill_group(&self) {
        if let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    /// Send a signal by name (`TERM`, `INT`, `HUP`, …) with `kill(1)`.
    pub async fn signal(&mut self, name: &str) -> anyhow::Result<()> {
        // A reaped child's pid may belong to another process by now: never signal it.
        ensure!(
            self.try_status()?.is_none(),
            "spoold (pid {}) has already exited",
            self.pid
        );
        let output = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid.to_string())
            .stdin(Stdio::null())
            .output()
            .await
            .context("run kill(1)")?;
        ensure!(
            output.status.success(),
            "kill -{name} {} failed: {}",
            self.pid,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// Send SIGTERM and wait up to [`TERMINATE_TIMEOUT`] for the exit. Returns the status at
    /// once if the daemon has already exited.
    pub async fn terminate(&mut self) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.try_status()? {
            return Ok(status);
        }
        self.signal("TERM").await?;
        self.wait_exit(TERMINATE_TIMEOUT).await
    }

    /// Wait up to `timeout` for the daemon to exit, then for the rest of its output.
    pub async fn wait_exit(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => status.context("wait for spoold")?,
            Err(_elapsed) => bail!(
                "spoold (pid {}) still running after {timeout:?}\n--- stderr ---\n{}",
                self.pid,
                self.stderr()
            ),
        };
        self.status = Some(status);
        self.finish_drains().await;
        Ok(status)
    }

    fn launch(opts: &DaemonOptions) -> anyhow::Result<(Self, oneshot::Receiver<String>)> {
        let program = match &opts.program {
            Some(path) => path.clone(),
            None => cargo_bin("spoold"),
        };
        let mut command = match opts.wrapper.split_first() {
            Some((wrapper, wrapper_args)) => {
                let mut command = Command::new(wrapper);
                command.args(wrapper_args).arg(&program);
                command
            }
            None => Command::new(&program),
        };
        command
            .args(opts.command_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own: kill -9 and drop end whatever it started too (a wrapper's or a
            // script's children), never leaving an orphan behind.
            .process_group(0)
            .kill_on_drop(true);
        for (name, _) in std::env::vars_os() {
            if name
                .to_str()
                .is_some_and(|n| n == "RUST_LOG" || n.starts_with("SPOOLD_"))
            {
                command.env_remove(name);
            }
        }
        // On PostgreSQL a test daemon opens the fewest connections it can (a flag in `args`, or
        // the variable in `env`, still says otherwise).
        if opts.db.to_string_lossy().starts_with("postgres") {
            command.env(
                "SPOOLD_DB_CONNECTIONS",
                crate::pg::TEST_DB_CONNECTIONS.to_string(),
            );
        }
        // Where the daemon says where its maildrop is (`spoolctl` reads it): one directory of
        // small files for every test daemon, never the home directory of whoever runs the
        // tests, nor the daemon's data directory (which tests copy and count).
        let state = std::env::temp_dir().join("spoold-test-state");
        command.env("XDG_STATE_HOME", state);
        command.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let mut child = command
            .spawn()
            .with_context(|| match opts.wrapper.first() {
                Some(wrapper) => format!(
                    "spawn {} (running {})",
                    Path::new(wrapper).display(),
                    program.display()
                ),
                None => format!("spawn {}", program.display()),
            })?;
        let pid = child.id().context("a just-spawned child has a pid")?;
        let stderr_pipe = child.stderr.take().context("stderr is piped")?;
        let stdout_pipe = child.stdout.take().context("stdout is piped")?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = oneshot::channel();
        let drains = vec![
            tokio::spawn(drain(stderr_pipe, Arc::clone(&stderr), Some(ready_tx))),
            tokio::spawn(drain(stdout_pipe, Arc::clone(&stdout), None)),
        ];
        let process = Self {
            child,
            pid,
            listen: String::new(),
            unix: false,
            stderr,
            stdout,
            drains,
            status: None,
        };
        Ok((process, ready_rx))
    }

    /// The exit status if the daemon has exited, reaping it.
    fn try_status(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait().context("poll spoold")?;
        }
        Ok(self.status)
    }

    async fn finish_drains(&mut self) {
        for mut handle in self.drains.drain(..) {
            if tokio::time::timeout(DRAIN_GRACE, &mut handle)
                .await
                .is_err()
            {
                handle.abort();
            }
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            // Errors mean it has exited already; tokio reaps dropped children.
            self.kill_group();
            let _ = self.child.start_kill();
        }
        for handle in &self.drains {
            handle.abort();
        }
    }
}

enum Readiness {
    Ready(String),
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
}

/// Copy a pipe into `buf` line by line until EOF; send the first `listening` address to
/// `ready`. Dropping `ready` unsent tells the waiter that no such line will come.
async fn drain(
    pipe: impl AsyncRead + Unpin,
    buf: Arc<Mutex<String>>,
    mut ready: Option<oneshot::Sender<String>>,
) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        lock(&buf).push_str(&text);
        if ready.is_some() {
            if let Some(addr) = parse_listening_line(&text) {
                if let Some(tx) = ready.take() {
                    // The waiter may have given up (timeout); nothing to do then.
                    let _ = tx.send(addr);
                }
            }
        }
    }
}

fn lock(buf: &Mutex<String>) -> MutexGuard<'_, String> {
    // A panic while appending leaves a valid (if partial) string: keep using it.
    buf.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_lines() {
        let check = |line: &str, expected: Option<&str>| {
            assert_eq!(parse_listening_line(line).as_deref(), expected, "{line}");
        };
        check(
            r#"{"fields":{"message":"listening","addr":"127.0.0.1:5"}}"#,
            Some("127.0.0.1:5"),
        );
        check(
            r#"{"timestamp":"2026-01-01T00:00:00Z","level":"INFO","fields":{"message":"listening","addr":"127.0.0.1:40123","transport":"tcp"},"target":"spoold"}"#,
            Some("127.0.0.1:40123"),
        );
        check(
            r#"{"message":"listening","addr":"127.0.0.1:7","level":"INFO"}"#,
            Some("127.0.0.1:7"),
        );
        check(
            r#"{"fields":{"message":"listening","addr":"/tmp/x/spoold.sock"}}"#,
            Some("/tmp/x/spoold.sock"),
        );
        check(
            r#"{"fields":{"message":"listening","addr":"\"/tmp/y.sock\""}}"#,
            Some("/tmp/y.sock"),
        );
        check(
            "  {\"message\":\"listening\",\"addr\":\"127.0.0.1:9\"}\n",
            Some("127.0.0.1:9"),
        );
        check(r#"{"fields":{"message":"listening"}}"#, None);
        check(
            r#"{"fields":{"message":"store opened","addr":"127.0.0.1:5"}}"#,
            None,
        );
        check(r#"{"fields":{"message":"listening","addr":5}}"#, None);
        check("listening on 127.0.0.1:5", None);
        check("", None);
    }

    #[test]
    fn command_line() {
        let tcp = DaemonOptions::new("/d/spool.db").arg("--workers").arg("2");
        assert_eq!(
            tcp.command_args(),
            [
                "--db",
                "/d/spool.db",
                "--listen",
                "127.0.0.1:0",
                "--allow-private-targets",
                "--log-format",
                "json",
                "--workers",
                "2",
            ]
        );
        let unix = DaemonOptions::new("/d/spool.db")
            .unix_socket("/d/s.sock")
            .args(["--x"]);
        assert_eq!(
            unix.command_args(),
            [
                "--db",
                "/d/spool.db",
                "--unix-socket",
                "/d/s.sock",
                "--allow-private-targets",
                "--log-format",
                "json",
                "--x",
            ]
        );
        let policy = DaemonOptions::new("/d/spool.db")
            .default_address_policy()
            .wrapper(["ip", "netns", "exec", "ns1"]);
        assert_eq!(
            policy.command_args(),
            [
                "--db",
                "/d/spool.db",
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json"
            ]
        );
        assert_eq!(policy.wrapper, ["ip", "netns", "exec", "ns1"]);
    }
}
