//! Running one attempt of a task. **API boundary:** the only module that spawns processes.
//!
//! Each attempt runs in its own process group (stdin `/dev/null`, a clean environment, as
//! another user if its type says so). To end it — timeout, cancel, shutdown, a lease this host
//! could not renew — its processes get SIGTERM, then, after the type's `kill_grace`, SIGKILL,
//! and the attempt is over only when nothing of it is left ([`processes::end`]). A process group
//! is not a prison: a grandchild that calls `setsid` leaves it. So every attempt's environment
//! carries a tag (`SPOOLD_ATTEMPT_TAG`), inherited by all its descendants, and processes
//! carrying it are found through `/proc` and ended with the group; and the daemon is a child
//! subreaper, so such escapees are re-parented to it (not to init) and reaped here. Anything
//! the attempt left behind is ended the same way when it exits by itself, so no `sleep 1000 &`
//! survives its task. Signals are sent only as [`processes`] allows: to a group through its
//! leader held unreaped, to anything else through a pidfd.
//!
//! A descendant that both leaves the group and clears its environment escapes this; running the
//! daemon in its own cgroup (systemd does) still contains it at the service's stop.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use spool_store::tasks::AttemptProcess;
use tokio_util::sync::CancellationToken;

use super::cgroup::{AttemptCgroup, CgroupRoot};
use super::output::{OutputLog, Stream};
use super::processes::{self, Attempt};

pub use super::processes::TAG_VAR;

/// How an attempt with a cgroup starts: `sh -c SCRIPT CGROUP_PROCS PROGRAM ARGS…` writes its
/// own pid into the cgroup, then becomes the program.
const ENTER_CGROUP: [&str; 3] = ["/bin/sh", "-c", r#"echo 0 > "$0" 2>/dev/null; exec "$@""#];

/// A pipe of an attempt that fills a read is enlarged to this (Linux lets any process go up to
/// `/proc/sys/fs/pipe-max-size`, 1 MiB by default) and read in pieces as large: a chatty
/// script keeps writing while the daemon redacts, and each read takes what it wrote
/// meanwhile. Where the kernel refuses, a pipe keeps its size (64 KiB): past
/// `/proc/sys/fs/pipe-user-pages-soft` (64 MiB of pipes per user by default, about 32 chatty
/// attempts at once; the kernel then also gives the user's new pipes, the scripts' own
/// included, a single page) it does. Quiet attempts never enlarge theirs.
const PIPE_SIZE: usize = 1 << 20;

/// The pump's buffer until a read fills it.
const FIRST_READ: usize = 64 * 1024;

/// One attempt to run.
pub struct Spawn<'a> {
    /// argv: element 0 is the program (an absolute path).
    pub argv: &'a [String],
    /// The whole environment of the child (nothing is inherited from the daemon).
    pub env: Vec<(String, String)>,
    pub working_dir: Option<&'a Path>,
    /// Run as this user and group (the daemon needs the privilege to).
    pub run_as: Option<(u32, u32)>,
    pub timeout: Duration,
    pub kill_grace: Duration,
    /// Cancelled → the attempt is stopped and ends as [`Stopped::Canceled`].
    pub cancel: CancellationToken,
    /// Cancelled → the attempt is stopped and ends as [`Stopped::Shutdown`].
    pub shutdown: CancellationToken,
    /// Cancelled → the attempt is stopped and ends as [`Stopped::LeaseLost`].
    pub lease_lost: CancellationToken,
    /// A value unique to this attempt, put in [`TAG_VAR`].
    pub tag: String,
    /// Put the attempt in a cgroup of its own below this root, and end it with `cgroup.kill`.
    pub cgroup: Option<&'a CgroupRoot>,
    /// Where its stdout and stderr go (redacted and bounded there); `None`: counted, dropped.
    pub output: Option<Arc<Mutex<OutputLog>>>,
    /// Told the process as soon as it runs.
    pub started: Option<tokio::sync::oneshot::Sender<AttemptProcess>>,
    /// Told as soon as a stop begins (the attempt's end is then decided).
    pub stopping: Option<tokio::sync::oneshot::Sender<Stopped>>,
}

/// Why an attempt was stopped by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    TimedOut,
    Canceled,
    Shutdown,
    /// Its lease could not be renewed in time (another host may take the task over).
    LeaseLost,
}

/// How an attempt ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    /// The exit code, if the leader exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, if one did.
    pub signal: Option<i32>,
    /// We stopped it (and why), whatever it exited with then.
    pub stopped: Option<Stopped>,
    /// SIGKILL was needed: the group (or an escapee) outlived SIGTERM and the grace.
    pub killed: bool,
    pub duration: Duration,
    /// Bytes it wrote to stdout and stderr.
    pub output_bytes: u64,
    /// The process could not be started (no such program, not executable, bad directory).
    pub spawn_error: Option<String>,
    /// The leader's pid (also its process group id).
    pub pid: Option<u32>,
}

/// The tag of attempt `attempt` of task `id` (what [`TAG_VAR`] holds in its processes).
pub fn attempt_tag(id: &str, attempt: u32) -> String {
    format!("{id}-{attempt}")
}

/// Run one attempt to its end: until its leader has exited and nothing of it is left.
pub async fn run(spawn: Spawn<'_>) -> Finished {
    let started = Instant::now();
    let mut finished = Finished::default();
    let Some((program, args)) = spawn.argv.split_first() else {
        finished.spawn_error = Some("empty command".into());
        return finished;
    };
    // With a cgroup, the child moves itself into it before it runs the program (a shell
    // builtin, then exec: same pid, same group), so nothing it starts can be outside it. The
    // program and its arguments are positional parameters: never read as shell code.
    let cgroup = match spawn.cgroup {
        Some(root) => match AttemptCgroup::create(root, &spawn.tag) {
            Ok(cg) => Some(cg),
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a cgroup for a task attempt");
                None
            }
        },
        None => None,
    };
    let mut command = match &cgroup {
        Some(cg) => {
            let mut c = Command::new(ENTER_CGROUP[0]);
            c.args(&ENTER_CGROUP[1..])
                .arg(cg.procs_file())
                .arg(program)
                .args(args);
            c
        }
        None => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    command
        .env_clear()
        .envs(spawn.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(TAG_VAR, &spawn.tag)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(dir) = spawn.working_dir {
        command.current_dir(dir);
    }
    if let Some((uid, gid)) = spawn.run_as {
        // The standard library drops the daemon's supplementary groups first.
        command.uid(uid).gid(gid);
    }
    // Made first: without it the output could not be read, and the child would block.
    let mut pipes = None;
    let spawned = OutputPump::stop_pipe().and_then(|stop| {
        let leader = processes::hold_leader(|| {
            let mut child = command.spawn()?;
            pipes = Some((child.stdout.take(), child.stderr.take()));
            Ok(child.id())
        })?;
        Ok((stop, leader))
    });
    let (stop_pump, mut leader) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => {
            finished.spawn_error = Some(format!("cannot start {program}: {e}"));
            finished.duration = started.elapsed();
            if let Some(cg) = cgroup {
                cg.remove().await;
            }
            return finished;
        }
    };
    let pid = leader.pid();
    finished.pid = Some(pid as u32);
    if let Some(started) = spawn.started {
        if let Some(process) = processes::describe(pid) {
            let _ = started.send(process);
        }
    }
    let attempt = Attempt {
        tag: &spawn.tag,
        group: Some(pid),
        cgroup: cgroup.as_ref(),
        record: None,
    };
    // Output is read to the end so a chatty script never blocks on a full pipe.
    let (stdout, stderr) = pipes.unwrap_or((None, None));
    let pipes = [
        (Stream::Stdout, stdout.map(OwnedFd::from)),
        (Stream::Stderr, stderr.map(OwnedFd::from)),
    ]
    .into_iter()
    .filter_map(|(stream, fd)| Some((stream, fd?)))
    .collect();
    let exited = Arc::new(tokio::sync::Notify::new());
    let watch = leader.pidfd().ok().map(|fd| (fd, Arc::clone(&exited)));
    let watched = watch.is_some().then_some(&*exited);
    let mut pump = OutputPump::start(pipes, spawn.output.clone(), stop_pump, watch);
    let mut output = None;
    let deadline = tokio::time::sleep(spawn.timeout);
    tokio::pin!(deadline);
    let exit = loop {
        tokio::select! {
            exit = leader.exited(watched) => break Some(exit),
            n = &mut pump.thread, if output.is_none() => output = Some(n.unwrap_or(0)),
            () = &mut deadline => { finished.stopped = Some(Stopped::TimedOut); break None; }
            () = spawn.cancel.cancelled() => { finished.stopped = Some(Stopped::Canceled); break None; }
            () = spawn.shutdown.cancelled() => { finished.stopped = Some(Stopped::Shutdown); break None; }
            () = spawn.lease_lost.cancelled() => { finished.stopped = Some(Stopped::LeaseLost); break None; }
        }
    };
    let exit = match exit {
        Some(exit) => {
            // The leader is gone; anything it left behind goes with it.
            if processes::maybe_left_behind(&attempt) {
                finished.killed = processes::end(&attempt, Some(&mut leader), spawn.kill_grace)
                    .await
                    .killed;
            }
            exit
        }
        None => {
            if let (Some(tell), Some(why)) = (spawn.stopping, finished.stopped) {
                let _ = tell.send(why);
            }
            finished.killed = processes::end(&attempt, Some(&mut leader), spawn.kill_grace)
                .await
                .killed;
            leader.poll_exit().unwrap_or_default()
        }
    };
    finished.exit_code = exit.code;
    finished.signal = exit.signal;
    // Nothing of its group is left: its id may go.
    leader.reap();
    if let Some(cg) = cgroup {
        cg.remove().await;
    }
    finished.output_bytes = match output {
        Some(n) => n,
        // The pipes close once every writer is gone, which it now is; if a process we could
        // not end still holds one, reading stops after a second.
        None => match tokio::time::timeout(Duration::from_secs(1), &mut pump.thread).await {
            Ok(n) => n.unwrap_or(0),
            Err(_) => pump.stop().await,
        },
    };
    finished.duration = started.elapsed();
    finished
}

/// Reads an attempt's pipes into its output log on a blocking thread of its own: it waits
/// (`poll`) for a pipe to have something, reads up to [`PIPE_SIZE`] from it, and redacts and
/// stores that before it looks again. While it redacts, the script's output gathers in the
/// pipe (or the script blocks on it), so a chatty script is read in large pieces with one
/// wake-up each; the runtime's event loop is not involved, and the async side only awaits the
/// thread's end. The same `poll` watches the leader's pidfd, which becomes readable when the
/// leader exits, and tells the async side: one wake-up for its attempt alone.
struct OutputPump {
    /// Dropping it (the write end of a pipe the thread also polls) stops the thread.
    stop: Option<OwnedFd>,
    /// Ends with the bytes read, once every pipe is closed (or the pump is stopped); once the
    /// thread is gone, the log is complete and the runner's handle to it the last one.
    thread: tokio::task::JoinHandle<u64>,
}

impl OutputPump {
    /// The pipe that stops a pump: (read end, write end).
    fn stop_pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(std::io::Error::from)
    }

    /// Starts reading `pipes` into `log` (or counting them only, without a log). A log that
    /// cannot be written to is given up on (logged once); the pipes are still read. The thread
    /// is one of the runtime's blocking threads (512 at most), held for the attempt's life: far
    /// more than any sensible `--task-concurrency`, but not bounded by it.
    fn start(
        pipes: Vec<(Stream, OwnedFd)>,
        log: Option<Arc<Mutex<OutputLog>>>,
        (stop_rx, stop_tx): (OwnedFd, OwnedFd),
        exit: Option<(OwnedFd, Arc<tokio::sync::Notify>)>,
    ) -> Self {
        let thread = tokio::task::spawn_blocking(move || pump(pipes, log, &stop_rx, exit));
        OutputPump {
            stop: Some(stop_tx),
            thread,
        }
    }

    /// Stops reading and waits for the thread to let go of the log; the bytes read.
    async fn stop(&mut self) -> u64 {
        self.stop = None;
        (&mut self.thread).await.unwrap_or(0)
    }
}

/// The pump's thread: until every pipe is closed and the leader's exit was told (`exit`: its
/// pidfd, and whom to tell), or `stop` is.
fn pump(
    mut pipes: Vec<(Stream, OwnedFd)>,
    log: Option<Arc<Mutex<OutputLog>>>,
    stop: &OwnedFd,
    mut exit: Option<(OwnedFd, Arc<tokio::sync::Notify>)>,
) -> u64 {
    use rustix::event::{poll, PollFd, PollFlags};
    // Pipes keep the kernel's size until a read fills the buffer (a chatty script): only then
    // is that pipe enlarged (enlarged pipes count against the user's pipe allowance, which
    // the scripts' own pipes share), and the buffer grows to what one read can then take.
    let mut enlarged = vec![false; pipes.len()];
    let mut size = FIRST_READ;
    let mut buf = Vec::new();
    let mut log = log;
    let mut total = 0u64;
    while !pipes.is_empty() || exit.is_some() {
        let mut fds: Vec<PollFd<'_>> = pipes
            .iter()
            .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
            .chain(
                exit.as_ref()
                    .map(|(pidfd, _)| PollFd::new(pidfd, PollFlags::IN)),
            )
            .chain(std::iter::once(PollFd::new(stop, PollFlags::IN)))
            .collect();
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot wait for a task attempt's output");
                break;
            }
        }
        let (stopped, ready) = fds.split_last().expect("the stop pipe is polled");
        if !stopped.revents().is_empty() {
            break;
        }
        let ready: Vec<bool> = ready.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        if ready.get(pipes.len()).copied().unwrap_or(false) {
            if let Some((_, exited)) = exit.take() {
                exited.notify_one();
            }
        }
        if buf.is_empty() {
            buf = vec![0u8; size.min(FIRST_READ)];
        }
        let mut open = vec![true; pipes.len()];
        for (i, (stream, fd)) in pipes.iter().enumerate().filter(|&(i, _)| ready[i]) {
            match rustix::io::read(fd, &mut buf) {
                Ok(0) => open[i] = false,
                Ok(n) => {
                    total += n as u64;
                    if n == buf.len() && !enlarged[i] {
                        enlarged[i] = true;
                        size = size.max(enlarge_pipe(fd));
                    }
                    if let Some(l) = &log {
                        let written = l
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .write(*stream, &buf[..n]);
                        if let Err(e) = written {
                            tracing::warn!(error = %e, "cannot write a task attempt's output log");
                            log = None;
                        }
                    }
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(_) => open[i] = false,
            }
        }
        let mut keep = open.iter().copied();
        pipes.retain(|_| keep.next().unwrap_or(false));
        let mut keep = open.into_iter();
        enlarged.retain(|_| keep.next().unwrap_or(false));
        if buf.len() < size {
            buf.resize(size, 0);
        }
    }
    total
}

/// Enlarges a pipe to [`PIPE_SIZE`] if the kernel lets us; returns its size (what one read
/// can take).
fn enlarge_pipe(pipe: &OwnedFd) -> usize {
    rustix::pipe::fcntl_setpipe_size(pipe, PIPE_SIZE)
        .or_else(|_| rustix::pipe::fcntl_getpipe_size(pipe))
        .unwrap_or(64 * 1024)
}
