//! Running one attempt of a task. **API boundary:** the only module that spawns processes.
//!
//! Each attempt runs in its own process group (stdin `/dev/null`, a clean environment). To end
//! it — timeout, cancel, shutdown — the **group** gets SIGTERM, then, after the type's
//! `kill_grace`, SIGKILL, and the attempt is over only when nothing of it is left. A process
//! group is not a prison: a grandchild that calls `setsid` leaves it. So every attempt's
//! environment carries a tag (`SPOOLD_ATTEMPT_TAG`), inherited by all its descendants, and
//! processes carrying it are found through `/proc` and ended with the group; and the daemon is
//! a child subreaper, so such escapees are re-parented to it (not to init) and reaped here.
//! Anything the attempt left behind is ended the same way when it exits by itself, so no
//! `sleep 1000 &` survives its task.
//!
//! A descendant that both leaves the group and clears its environment escapes this; running the
//! daemon in its own cgroup (systemd does) still contains it at the service's stop.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use spool_store::tasks::AttemptProcess;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::cgroup::{AttemptCgroup, CgroupRoot};
use super::output::{OutputLog, Stream};

/// How an attempt with a cgroup starts: `sh -c SCRIPT CGROUP_PROCS PROGRAM ARGS…` writes its
/// own pid into the cgroup, then becomes the program.
const ENTER_CGROUP: [&str; 3] = ["/bin/sh", "-c", r#"echo 0 > "$0" 2>/dev/null; exec "$@""#];

/// The environment variable that marks every process of one attempt.
pub const TAG_VAR: &str = "SPOOLD_ATTEMPT_TAG";

/// How often the end of a group is checked while it is being stopped.
const POLL: Duration = Duration::from_millis(20);

/// After SIGKILL, how long to wait for the kernel to remove what was killed.
const AFTER_KILL: Duration = Duration::from_secs(5);

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
    pub timeout: Duration,
    pub kill_grace: Duration,
    /// Cancelled → the attempt is stopped and ends as [`Stopped::Canceled`].
    pub cancel: CancellationToken,
    /// Cancelled → the attempt is stopped and ends as [`Stopped::Shutdown`].
    pub shutdown: CancellationToken,
    /// A value unique to this attempt, put in [`TAG_VAR`].
    pub tag: String,
    /// Put the attempt in a cgroup of its own below this root, and end it with `cgroup.kill`.
    pub cgroup: Option<&'a CgroupRoot>,
    /// Where its stdout and stderr go (redacted and bounded there); `None`: counted, dropped.
    pub output: Option<Arc<Mutex<OutputLog>>>,
    /// Told the process as soon as it runs.
    pub started: Option<tokio::sync::oneshot::Sender<AttemptProcess>>,
}

/// Why an attempt was stopped by us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    TimedOut,
    Canceled,
    Shutdown,
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

/// End what is still running of an attempt that a previous daemon started: the processes
/// carrying its tag and, if its recorded leader still runs (same boot, pid and start time),
/// its process group. SIGTERM, up to `grace`, then SIGKILL. Returns how many processes there
/// were.
pub async fn end_leftovers(tag: &str, process: Option<&AttemptProcess>, grace: Duration) -> usize {
    let within = Within {
        pgid: process.filter(|p| still_running(p)).map(|p| p.pgid),
        tag,
        cgroup: None,
    };
    let found = leftovers(&within).count();
    if found == 0 {
        return 0;
    }
    signal_all(&within, rustix::process::Signal::TERM);
    let until = Instant::now() + grace;
    while Instant::now() < until && leftovers(&within).next().is_some() {
        reap_orphans();
        tokio::time::sleep(POLL).await;
    }
    if leftovers(&within).next().is_some() {
        signal_all(&within, rustix::process::Signal::KILL);
        let until = Instant::now() + AFTER_KILL;
        while Instant::now() < until && leftovers(&within).next().is_some() {
            tokio::time::sleep(POLL).await;
        }
    }
    reap_orphans();
    found
}

/// Make this process a child subreaper, so that orphaned descendants of attempts are
/// re-parented to it rather than to init. Once, at start-up, before any attempt runs.
pub fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(std::io::Error::from)
}

/// Run one attempt to its end.
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
        .process_group(0)
        .kill_on_drop(false);
    if let Some(dir) = spawn.working_dir {
        command.current_dir(dir);
    }
    // Made first: without it the output could not be read, and the child would block.
    let spawned = OutputPump::stop_pipe().and_then(|stop| Ok((stop, command.spawn()?)));
    let (stop_pump, mut child) = match spawned {
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
    let pid = child.id();
    finished.pid = pid;
    if let (Some(pid), Some(started)) = (pid, spawn.started) {
        if let Some(process) = describe(pid as i32) {
            let _ = started.send(process);
        }
    }
    let pgid = pid.map(|p| p as i32);
    let within = Within {
        pgid,
        tag: &spawn.tag,
        cgroup: cgroup.as_ref(),
    };
    // Output is read to the end so a chatty script never blocks on a full pipe.
    let pipes = [
        (
            Stream::Stdout,
            child.stdout.take().map(|p| p.into_owned_fd()),
        ),
        (
            Stream::Stderr,
            child.stderr.take().map(|p| p.into_owned_fd()),
        ),
    ]
    .into_iter()
    .filter_map(|(stream, fd)| match fd? {
        Ok(fd) => Some((stream, fd)),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read a task attempt's output pipe");
            None
        }
    })
    .collect();
    let mut pump = OutputPump::start(pipes, spawn.output.clone(), stop_pump);
    let mut output = None;
    let deadline = tokio::time::sleep(spawn.timeout);
    tokio::pin!(deadline);
    let status = loop {
        tokio::select! {
            status = child.wait() => break Some(status),
            n = &mut pump.thread, if output.is_none() => output = Some(n.unwrap_or(0)),
            () = &mut deadline => { finished.stopped = Some(Stopped::TimedOut); break None; }
            () = spawn.cancel.cancelled() => { finished.stopped = Some(Stopped::Canceled); break None; }
            () = spawn.shutdown.cancelled() => { finished.stopped = Some(Stopped::Shutdown); break None; }
        }
    };
    let status = match status {
        Some(status) => status.ok(),
        None => {
            // Stop accepting its output, then end the whole group.
            finished.killed = stop_group(&within, spawn.kill_grace, &mut child).await;
            child.wait().await.ok()
        }
    };
    if let Some(status) = status {
        use std::os::unix::process::ExitStatusExt;
        finished.exit_code = status.code();
        finished.signal = status.signal();
    }
    // The leader is gone; anything it left behind goes with it.
    if finished.stopped.is_none() && maybe_left_behind(&within) {
        finished.killed |= stop_group(&within, spawn.kill_grace, &mut child).await;
    }
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
/// thread's end.
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
    ) -> Self {
        let thread = tokio::task::spawn_blocking(move || pump(pipes, log, &stop_rx));
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

/// The pump's thread: until every pipe is closed or `stop` is.
fn pump(
    mut pipes: Vec<(Stream, OwnedFd)>,
    log: Option<Arc<Mutex<OutputLog>>>,
    stop: &OwnedFd,
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
    while !pipes.is_empty() {
        let mut fds: Vec<PollFd<'_>> = pipes
            .iter()
            .map(|(_, fd)| PollFd::new(fd, PollFlags::IN))
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

/// The process group, start time and boot of a just-started leader, from `/proc`.
fn describe(pid: i32) -> Option<AttemptProcess> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(AttemptProcess {
        pgid: pid,
        leader_start: start_time(&stat)?,
        boot_id: boot_id()?,
    })
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks after boot.
fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after comm start with field 3 (state); starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// This boot's id: a pid and start time are only unique within one boot. Read once.
pub fn boot_id() -> Option<String> {
    static BOOT_ID: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT_ID
        .get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .ok()
                .map(|s| s.trim().to_owned())
        })
        .clone()
}

/// Whether the leader recorded in `process` is still running on this host: same boot, a
/// process with that pid and the same start time (so a reused pid is never taken for it).
pub fn still_running(process: &AttemptProcess) -> bool {
    boot_id().is_some_and(|b| b == process.boot_id)
        && std::fs::read_to_string(format!("/proc/{}/stat", process.pgid))
            .ok()
            .and_then(|stat| start_time(&stat))
            .is_some_and(|t| t == process.leader_start)
}

/// What belongs to one attempt: its process group, its tag, its cgroup (if it has one).
struct Within<'a> {
    pgid: Option<i32>,
    tag: &'a str,
    cgroup: Option<&'a AttemptCgroup>,
}

/// SIGTERM to the group, to every process carrying the tag and to the cgroup; after `grace`,
/// SIGKILL to what is left; then wait (bounded) until nothing is left. Whether SIGKILL was
/// needed.
async fn stop_group(
    within: &Within<'_>,
    grace: Duration,
    child: &mut tokio::process::Child,
) -> bool {
    signal_all(within, rustix::process::Signal::TERM);
    let until = Instant::now() + grace;
    let mut leader_gone = false;
    while Instant::now() < until {
        if !leader_gone {
            leader_gone = matches!(child.try_wait(), Ok(Some(_)));
        }
        reap_orphans();
        if leader_gone && leftovers(within).next().is_none() {
            tokio::time::sleep(POLL).await;
            reap_orphans();
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    if let Some(cg) = within.cgroup {
        cg.kill();
    }
    signal_all(within, rustix::process::Signal::KILL);
    let until = Instant::now() + AFTER_KILL;
    while Instant::now() < until {
        let _ = child.try_wait();
        reap_orphans();
        if leftovers(within).next().is_none() {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    // What died since the last look is waited for too: no zombie stays behind.
    tokio::time::sleep(POLL).await;
    reap_orphans();
    true
}

fn signal_all(within: &Within<'_>, signal: rustix::process::Signal) {
    if let Some(pgid) = within.pgid.and_then(rustix::process::Pid::from_raw) {
        // ESRCH: the group is already empty.
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
    let in_cgroup = within.cgroup.map(AttemptCgroup::pids).unwrap_or_default();
    for pid in tagged(within.tag).chain(in_cgroup) {
        if let Some(pid) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Whether an attempt whose leader exited may have left something running, cheaply (this runs
/// after every attempt): a process in its cgroup, a member of its group, or one of this
/// process's children (escapees are re-parented to us, the subreaper) carrying its tag.
/// Without `/proc/*/task/*/children`, every process is looked at.
fn maybe_left_behind(within: &Within<'_>) -> bool {
    if within.cgroup.is_some_and(|cg| !cg.pids().is_empty()) {
        return true;
    }
    let (pgid, tag) = (within.pgid, within.tag);
    let group_alive = pgid
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok());
    if group_alive {
        return true;
    }
    let Some(children) = own_children() else {
        return leftovers(within).next().is_some();
    };
    let needle = format!("{TAG_VAR}={tag}");
    children.into_iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
            .unwrap_or(false)
    })
}

/// Where orphans re-parented to this process are: the kernel hands them to the subreaper's
/// first live thread, its main thread; attempts' leaders, children of the runtime's worker
/// threads, are not listed there. `None` if the kernel does not list children.
fn own_children() -> Option<Vec<i32>> {
    let pid = std::process::id();
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    Some(
        text.split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .collect(),
    )
}

/// Live processes of the attempt: members of its group and cgroup, and any process carrying
/// its tag. Zombies are not counted (they are gone, waiting to be reaped).
fn leftovers(within: &Within<'_>) -> impl Iterator<Item = i32> {
    let mut found: HashSet<i32> = tagged(within.tag).collect();
    if let Some(cg) = within.cgroup {
        let zombies: HashSet<i32> = processes().filter(|p| p.zombie).map(|p| p.pid).collect();
        found.extend(cg.pids().into_iter().filter(|p| !zombies.contains(p)));
    }
    if let Some(pgid) = within.pgid {
        found.extend(
            processes()
                .filter(|p| p.pgrp == pgid && !p.zombie)
                .map(|p| p.pid),
        );
    }
    found.into_iter()
}

/// Processes (not zombies) whose environment carries `TAG_VAR=tag`.
fn tagged(tag: &str) -> impl Iterator<Item = i32> {
    let needle = format!("{TAG_VAR}={tag}");
    processes()
        .filter(|p| !p.zombie)
        .map(|p| p.pid)
        .filter(move |pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                .unwrap_or(false)
        })
        .collect::<Vec<_>>()
        .into_iter()
}

/// Reap zombies that were re-parented to this process (escapees of an attempt that have
/// exited). Only processes that are our children and zombies are waited for, by pid, so the
/// runtime's own children are never taken from it.
fn reap_orphans() {
    let me = std::process::id() as i32;
    for p in processes().filter(|p| p.zombie && p.ppid == me) {
        if let Some(pid) = rustix::process::Pid::from_raw(p.pid) {
            if !is_spawned_child(p.pid) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
            }
        }
    }
}

/// Whether `pid` is the leader of an attempt (the runtime waits for those itself): a leader is
/// its own process group leader.
fn is_spawned_child(pid: i32) -> bool {
    processes().any(|p| p.pid == pid && p.pgrp == pid)
}

/// One line of `/proc/PID/stat`, the fields we need.
#[derive(Debug, Clone, Copy)]
struct ProcStat {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    zombie: bool,
}

fn processes() -> impl Iterator<Item = ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
}

/// `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses, so fields are read
/// after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(ProcStat {
        pid,
        ppid,
        pgrp,
        zombie: state == "Z" || state == "X",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_recognised_by_its_start_time() {
        let me = describe(std::process::id() as i32).expect("this process");
        assert!(still_running(&me));
        let reused = AttemptProcess {
            leader_start: me.leader_start + 1,
            ..me.clone()
        };
        assert!(!still_running(&reused), "same pid, another start: not ours");
        let other_boot = AttemptProcess {
            boot_id: "another boot".into(),
            ..me
        };
        assert!(!still_running(&other_boot));
    }

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let p = parse_stat(42, "42 (a (weird) name) S 7 42 42 0 -1").expect("parsed");
        assert_eq!((p.ppid, p.pgrp, p.zombie), (7, 42, false));
        let z = parse_stat(9, "9 (sh) Z 1 9 9").expect("parsed");
        assert!(z.zombie);
        assert!(parse_stat(1, "garbage").is_none());
    }
}
