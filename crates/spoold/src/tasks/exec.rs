//! Running one attempt of a task. **API boundary:** the only module that spawns processes —
//! the daemon spawns an attempt's supervisor ([`run`]), the supervisor spawns the attempt's
//! program ([`spawn_program`]).
//!
//! Each attempt has a supervisor of its own ([`super::supervisor`], started from the program
//! [`Supervisor`] names: `spoold-attempt` beside the daemon, or `spoold` re-executed), a child
//! subreaper that spawns the program in a process group of its own (stdin `/dev/null`, a clean
//! environment, as another user if its type says so), ends it — timeout, cancel, shutdown, a
//! lease this host could not renew — with SIGTERM to each of its processes, then, after the
//! type's `kill_grace`, SIGKILL, and exits only when nothing of the attempt is left. Every
//! process of the attempt descends from the supervisor (orphans are re-parented to it), so
//! which processes are the attempt's is a fact of parenthood, never a guess from ids; and the
//! supervisor outlives a crash of the daemon, ends the attempt on its own then, and leaves a
//! record that the next daemon reads. The daemon itself signals nothing here: it asks the
//! supervisor to stop, tells it how long the lease runs, and waits for it.
//!
//! The program's stdout and stderr are one pipe, as a terminal shows `2>&1`: the order of what
//! it printed is exact, which a redactor of two pipes could only guess. The daemon reads that
//! pipe into the attempt's output log on a blocking thread of its own.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::cgroup::{AttemptCgroup, CgroupRoot};
use super::output::OutputLog;
use super::processes::{self, Child};
use super::supervision::{self, Record, Spec, StopReason};

/// How an attempt with a cgroup starts: `sh -c SCRIPT CGROUP_PROCS PROGRAM ARGS…` writes its
/// own pid into the cgroup, then becomes the program.
const ENTER_CGROUP: [&str; 3] = ["/bin/sh", "-c", r#"echo 0 > "$0" 2>/dev/null; exec "$@""#];

/// A pipe of an attempt that fills a read is enlarged to this (Linux lets any process go up to
/// `/proc/sys/fs/pipe-max-size`, 1 MiB by default) and read in pieces as large: a chatty
/// script keeps writing while the daemon redacts, and each read takes what it wrote
/// meanwhile. Where the kernel refuses, a pipe keeps its size (64 KiB): past
/// `/proc/sys/fs/pipe-user-pages-soft` (64 MiB of pipes per user by default, about 64 chatty
/// attempts at once; the kernel then also gives the user's new pipes, the scripts' own
/// included, a single page) it does. Quiet attempts never enlarge theirs.
const PIPE_SIZE: usize = 1 << 20;

/// The pump's buffer until a read fills it.
const FIRST_READ: usize = 64 * 1024;

/// Which program supervises attempts: [`supervision::PROGRAM`] installed beside the daemon
/// ([`Supervisor::beside_daemon`]), or else `spoold` itself, re-executed.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// The program and the arguments before [`supervision::ARG`]: the held
    /// [`supervision::PROGRAM`] (`/proc/self/fd/N`), `/proc/self/exe` (this very binary, even
    /// once its file was replaced by an upgrade), the `spoold` binary when the daemon runs
    /// inside another program (the tests), or an emulator and the `spoold` it runs
    /// (`Config::task_supervisor`).
    pub command: Vec<PathBuf>,
    /// The file of `command`'s program when it is a descriptor's path: open for as long as
    /// supervisors may be started from it — a private copy, or the file itself.
    pub held: Option<Arc<OwnedFd>>,
    /// When the file itself is held: its path and what it was when it was opened, to tell a
    /// change in place.
    pub watched: Option<(PathBuf, FileIdentity)>,
    /// Where supervisors keep their record files (the data directory's `task-attempts`).
    pub records: PathBuf,
}

/// How long `spoold-attempt --version` may take to answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

impl Supervisor {
    /// `command` as it is, no file held.
    pub fn command(command: Vec<PathBuf>, records: PathBuf) -> Supervisor {
        Supervisor {
            command,
            held: None,
            watched: None,
            records,
        }
    }

    /// [`supervision::PROGRAM`] installed beside this process's executable, if it is there and
    /// speaks this daemon's protocol (`--version` answers [`supervision::version_line`]). Its
    /// file is held open from here on and every supervisor is started from that descriptor: an
    /// upgrade that replaces the file meanwhile changes nothing for this daemon, as
    /// `/proc/self/exe` is always the daemon's own binary. `Ok(None)`: there is none; `Err`:
    /// there is one this daemon cannot use, and why.
    pub fn beside_daemon(records: PathBuf) -> Result<Option<Supervisor>, String> {
        let Some(path) = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.join(supervision::PROGRAM)))
        else {
            return Ok(None);
        };
        Supervisor::held_program(&path, records)
    }

    /// [`Supervisor::beside_daemon`] for the program at `path`. Supervisors are started from
    /// a private copy of it, sealed in memory (a memfd), so that nothing done to the file
    /// afterwards — replaced, overwritten in place, truncated, made not executable — changes
    /// what this daemon runs. Where the kernel refuses to run a memfd
    /// (`vm.memfd_noexec`), the file itself is held and checked before each start: a change in
    /// place is then said plainly, rather than as a broken pipe.
    pub fn held_program(path: &Path, records: PathBuf) -> Result<Option<Supervisor>, String> {
        use rustix::fs::{Mode, OFlags};
        let file = match rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()) {
            Ok(file) => file,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(format!("cannot open {}: {e}", path.display())),
        };
        let wanted = supervision::version_line();
        let checked = |fd: &OwnedFd| -> Result<(), String> {
            let says = version_of(&descriptor_path(fd))?;
            if says == wanted {
                Ok(())
            } else {
                Err(format!(
                    "--version says {says:?}, this daemon needs {wanted:?} (a {} from another \
                     build; install the one that came with this spoold)",
                    supervision::PROGRAM
                ))
            }
        };
        let copy = private_copy(&file).and_then(|copy| checked(&copy).map(|()| copy));
        let (held, watched) = match copy {
            Ok(copy) => (copy, None),
            Err(why) => {
                checked(&file).map_err(|e| format!("{}: {e}", path.display()))?;
                tracing::warn!(program = %path.display(), %why,
                               "cannot run a private copy of the supervisor program: the file \
                                itself is used, and a change made to it in place while this \
                                daemon runs stops task attempts from starting");
                let identity =
                    FileIdentity::of(&file).map_err(|e| format!("{}: {e}", path.display()))?;
                (file, Some((path.to_path_buf(), identity)))
            }
        };
        Ok(Some(Supervisor {
            command: vec![descriptor_path(&held)],
            held: Some(Arc::new(held)),
            watched,
            records,
        }))
    }

    /// Why supervisors cannot be started from the held file any more: it was changed in place
    /// (only when it is the file itself that is held, not a private copy).
    fn changed(&self) -> Option<String> {
        let (path, before) = self.watched.as_ref()?;
        let held = self.held.as_ref()?;
        let now = FileIdentity::of(held).ok();
        (now.as_ref() != Some(before)).then(|| {
            format!(
                "{} was changed in place after this daemon started (overwritten, truncated or \
                 its mode changed: {before:?} is now {now:?}); restart the daemon to use the new \
                 one",
                path.display()
            )
        })
    }
}

/// `/proc/self/fd/N` of `fd`: what runs the program a descriptor holds.
fn descriptor_path(fd: &OwnedFd) -> PathBuf {
    use std::os::fd::AsRawFd as _;
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// What tells a file changed in place: its size, mode and modification and change times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileIdentity {
    size: u64,
    mode: u32,
    modified: (i64, i64),
    changed: (i64, i64),
}

impl FileIdentity {
    fn of(fd: &OwnedFd) -> io::Result<FileIdentity> {
        let st = rustix::fs::fstat(fd)?;
        Ok(FileIdentity {
            size: st.st_size as u64,
            mode: st.st_mode as u32,
            modified: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            changed: (st.st_ctime as i64, st.st_ctime_nsec as i64),
        })
    }
}

/// A sealed in-memory copy of `file` (nothing can write, grow or shrink it), executable.
fn private_copy(file: &OwnedFd) -> Result<OwnedFd, String> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let flags = MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING;
    // Kernels since 6.3 want executable memfds said so; older ones know no such flag.
    let memfd = match rustix::fs::memfd_create(supervision::PROGRAM, flags | MemfdFlags::EXEC) {
        Err(rustix::io::Errno::INVAL) => rustix::fs::memfd_create(supervision::PROGRAM, flags),
        other => other,
    }
    .map_err(|e| format!("memfd_create: {e}"))?;
    let mut from = std::fs::File::from(file.try_clone().map_err(|e| e.to_string())?);
    let mut to = std::fs::File::from(memfd);
    std::io::Seek::rewind(&mut from).map_err(|e| format!("cannot read it: {e}"))?;
    std::io::copy(&mut from, &mut to).map_err(|e| format!("cannot copy it: {e}"))?;
    let memfd = OwnedFd::from(to);
    rustix::fs::fcntl_add_seals(
        &memfd,
        SealFlags::SHRINK | SealFlags::GROW | SealFlags::WRITE | SealFlags::SEAL,
    )
    .map_err(|e| format!("cannot seal the copy: {e}"))?;
    Ok(memfd)
}

/// The first line `PROGRAM --version` prints, within [`PROBE_TIMEOUT`].
fn version_of(program: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut command = Command::new(program);
    command
        .arg0(supervision::PROGRAM)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut stdout = None;
    let mut child = processes::spawn_held(|| {
        command.spawn().map(|mut c| {
            stdout = c.stdout.take();
            c.id()
        })
    })
    .map_err(|e| format!("cannot run it: {e}"))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    while child.poll_exit().is_none() {
        if Instant::now() >= deadline {
            child.signal(rustix::process::Signal::KILL, false);
            while child.poll_exit().is_none() {
                std::thread::sleep(Duration::from_millis(5));
            }
            child.reap();
            return Err(format!(
                "--version did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    match child.reap().unwrap_or_default() {
        processes::Exit { code: Some(0), .. } => {}
        processes::Exit {
            signal: Some(signal),
            ..
        } => return Err(format!("--version was ended by signal {signal}")),
        processes::Exit { code, .. } => {
            return Err(format!(
                "--version exited with code {}",
                code.map_or("?".to_owned(), |c| c.to_string())
            ))
        }
    }
    let mut text = String::new();
    if let Some(out) = stdout {
        out.take(4096)
            .read_to_string(&mut text)
            .map_err(|e| format!("cannot read what --version printed: {e}"))?;
    }
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

/// One attempt to run.
pub struct Spawn<'a> {
    /// argv: element 0 is the program (an absolute path).
    pub argv: &'a [String],
    /// The whole environment of the program (nothing is inherited from the daemon).
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
    /// On a store other hosts share: when the attempt's lease runs out (on this process's
    /// clock), updated at each renewal. The supervisor stops the attempt by then on its own,
    /// however long this process is paused.
    pub lease: Option<tokio::sync::watch::Receiver<tokio::time::Instant>>,
    /// The attempt's id among attempts (`TASK-ATTEMPT`): names its cgroup and record.
    pub tag: String,
    /// Put the attempt in a cgroup of its own below this root, and end it with `cgroup.kill`.
    pub cgroup: Option<&'a CgroupRoot>,
    /// Where its output goes (redacted and bounded there); `None`: counted, dropped.
    pub output: Option<Arc<Mutex<OutputLog>>>,
    pub supervisor: &'a Supervisor,
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
    /// We stopped it (and why), before it exited by itself.
    pub stopped: Option<Stopped>,
    /// SIGKILL was needed: the group (or an escapee) outlived SIGTERM and the grace.
    pub killed: bool,
    pub duration: Duration,
    /// Bytes it wrote to stdout and stderr.
    pub output_bytes: u64,
    /// The process could not be started (no such program, not executable, bad directory).
    pub spawn_error: Option<String>,
    /// Nothing was started: the task's lease (shared stores) had already run out, or all but
    /// [`super::supervision::LEASE_SAFETY`] of it, when the attempt was to begin — the host
    /// was paused or starved between the claim and the start.
    pub lease_over_before_start: bool,
    /// Its supervisor died before the attempt was over (someone killed it): how the attempt
    /// ended is not known.
    pub supervisor_lost: Option<String>,
    /// The leader's pid (also its process group id).
    pub pid: Option<u32>,
    /// Its supervisor stopped answering and the daemon ended the attempt itself (at its
    /// deadline, or when it was to stop): why, for the task's record.
    pub taken_over: Option<String>,
}

/// How often the daemon asks a running attempt's supervisor whether it is there (`ping`; it
/// answers `pong` at once, whatever it is doing).
const PING_EVERY: Duration = Duration::from_millis(500);

/// A supervisor that has answered nothing for this long is *silent*: stopped (SIGSTOP), hung,
/// or not a supervisor at all. A silent supervisor is taken over once its attempt is to end.
const SILENT_AFTER: Duration = Duration::from_secs(2);

/// The tag of attempt `attempt` of task `id`.
pub fn attempt_tag(id: &str, attempt: u32) -> String {
    format!("{id}-{attempt}")
}

/// Run one attempt to its end: until its supervisor has exited, which it does once nothing of
/// the attempt is left.
pub async fn run(spawn: Spawn<'_>) -> Finished {
    let started = Instant::now();
    let mut finished = Finished::default();
    if spawn.argv.is_empty() {
        finished.spawn_error = Some("empty command".into());
        return finished;
    }
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
    let record = spawn.supervisor.records.join(&spawn.tag);
    let spec = Spec {
        argv: spawn.argv.to_vec(),
        env: spawn.env,
        working_dir: spawn.working_dir.map(Path::to_path_buf),
        run_as: spawn.run_as,
        timeout_ms: spawn.timeout.as_millis() as u64,
        kill_grace_ms: spawn.kill_grace.as_millis() as u64,
        cgroup: cgroup.as_ref().map(|cg| cg.path().to_path_buf()),
        record: record.clone(),
    };
    let started_supervisor = start_supervisor(spawn.supervisor, &spec);
    drop(spec);
    let (mut sup, control, read) = match started_supervisor {
        Ok(started) => started,
        Err(e) => {
            finished.spawn_error = Some(e);
            finished.duration = started.elapsed();
            if let Some(cg) = cgroup {
                cg.remove().await;
            }
            return finished;
        }
    };
    let exited = Arc::new(tokio::sync::Notify::new());
    let watch = sup
        .pidfd()
        .try_clone()
        .ok()
        .map(|fd| (fd, Arc::clone(&exited)));
    let watched = watch.is_some().then_some(&*exited);
    let mut pump = OutputPump::start(read, spawn.output.clone(), watch);
    let mut output = None;
    let mut requested: Option<Stopped> = None;
    let mut lease = spawn.lease;
    let (control, unwatched) = Listening::new(control);
    if let Some(e) = unwatched {
        tracing::warn!(tag = %spawn.tag, error = %e, "cannot watch an attempt's supervisor");
    }
    if let Some(rx) = lease.as_mut() {
        tell_lease(control.fd(), *rx.borrow_and_update());
    }
    let mut told = Told::default();
    let deadline = started + spawn.timeout;
    let mut heard_at = Instant::now();
    let mut silent_since: Option<Instant> = None;
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut taken_over: Option<String> = None;
    loop {
        tokio::select! {
            () = exit_of(&mut sup, watched) => break,
            n = &mut pump.thread, if output.is_none() => output = Some(n.unwrap_or(0)),
            () = spawn.cancel.cancelled(), if requested.is_none() => {
                requested = Some(Stopped::Canceled);
                tell(control.fd(), b"stop\n");
            }
            () = spawn.shutdown.cancelled(), if requested.is_none() => {
                requested = Some(Stopped::Shutdown);
                tell(control.fd(), b"stop\n");
            }
            () = spawn.lease_lost.cancelled(), if requested.is_none() => {
                requested = Some(Stopped::LeaseLost);
                tell(control.fd(), b"stop\n");
            }
            changed = renewal(lease.as_mut()) => match changed {
                Some(until) => tell_lease(control.fd(), until),
                None => lease = None,
            },
            heard = control.heard(&mut told), if control.watched() => {
                if heard {
                    heard_at = Instant::now();
                    if let Some(since) = silent_since.take() {
                        tracing::info!(tag = %spawn.tag, supervisor = sup.pid(),
                                       silent_ms = since.elapsed().as_millis() as u64,
                                       "an attempt's supervisor answers again");
                    }
                }
            }
            _ = ping.tick(), if control.watched() => {
                tell(control.fd(), b"ping\n");
                let quiet = heard_at.elapsed();
                if quiet < SILENT_AFTER {
                    continue;
                }
                if silent_since.is_none() {
                    silent_since = Some(heard_at);
                    tracing::warn!(tag = %spawn.tag, supervisor = sup.pid(),
                                   silent_ms = quiet.as_millis() as u64,
                                   "an attempt's supervisor does not answer (stopped or hung); \
                                    the daemon ends the attempt itself if it is still silent \
                                    when the attempt is to end");
                }
                let due = if Instant::now() >= deadline {
                    Some(Stopped::TimedOut)
                } else {
                    requested
                };
                if let Some(why) = due {
                    taken_over = Some(format!(
                        "its supervisor (pid {}) answered nothing for {} s, so the daemon ended \
                         the attempt itself",
                        sup.pid(),
                        quiet.as_secs()
                    ));
                    tracing::error!(tag = %spawn.tag, supervisor = sup.pid(), stopping = ?why,
                                    silent_ms = quiet.as_millis() as u64,
                                    "taking over an attempt from its silent supervisor: killing \
                                     the supervisor, then ending the attempt's processes");
                    finished.stopped = Some(why);
                    sup.signal(rustix::process::Signal::KILL, false);
                    // A killed process exits at once, stopped or not (bounded all the same).
                    let _ = tokio::time::timeout(Duration::from_secs(5), exit_of(&mut sup, watched)).await;
                    break;
                }
            }
        }
    }
    let status = sup.reap().unwrap_or_default();
    if let Ok(control) = control.into_fd() {
        told.read_rest(&control);
    }
    if let Some(why) = taken_over {
        // Its processes were re-parented to this process: ended as those of a supervisor that
        // died — but without a second SIGTERM for those it had already sent one.
        finished.killed = end_what_is_left(&told, spawn.kill_grace, &record).await;
        finished.pid = told.pid.map(|g| g as u32);
        finished.taken_over = Some(why);
    } else {
        settle(
            &mut finished,
            &mut told,
            status,
            requested,
            (&spawn.tag, spawn.kill_grace),
            &record,
        )
        .await;
    }
    if let Some(cg) = cgroup {
        if finished.taken_over.is_some() {
            cg.kill();
        }
        cg.remove().await;
    }
    finished.output_bytes = match output {
        Some(n) => n,
        // The pipe closes once every writer is gone, which it now is; if a process we could
        // not end still holds it, reading stops after a second.
        None => match tokio::time::timeout(Duration::from_secs(1), &mut pump.thread).await {
            Ok(n) => n.unwrap_or(0),
            Err(_) => pump.stop().await,
        },
    };
    finished.duration = started.elapsed();
    finished
}

/// End what a supervisor that is gone left of its attempt (re-parented to this process): by
/// parenthood — SIGKILL after what is left of its grace, no second SIGTERM if it had sent one —
/// then whatever parenthood missed that still holds the attempt's record file. Whether SIGKILL
/// was needed.
async fn end_what_is_left(told: &Told, grace: Duration, record: &Path) -> bool {
    let group = told.pid;
    let termed = told.term_at.map(|at| at.elapsed());
    let held = record.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let ended = processes::end_adopted(group, grace, termed);
        ended.killed || processes::end_holders(&held, grace) > 0
    })
    .await
    .unwrap_or(false)
}

/// How the attempt ended, from what its supervisor told or left in its record; a supervisor
/// that died before it finished leaves it `supervisor_lost`, its processes ended here.
async fn settle(
    finished: &mut Finished,
    told: &mut Told,
    status: processes::Exit,
    requested: Option<Stopped>,
    (tag, grace): (&str, Duration),
    record: &Path,
) {
    // A live daemon is told; the file is the supervisor's only if it took this one for gone.
    let read = match told.record.take() {
        Some(r) => Ok(Some(r)),
        None => supervision::read_record(record),
    };
    match read {
        Ok(Some(r)) if r.over => apply(finished, &r, requested),
        failed => {
            // The supervisor died before it finished (killed by someone, out of memory): what
            // it had adopted was re-parented to this process, which ends it.
            let why = match failed {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    "processes of the attempt still held its record".to_owned()
                }
                Err(e) => format!("its record could not be read: {e}"),
                Ok(_) => "it told nothing of how the attempt ended".to_owned(),
            };
            tracing::error!(tag = %tag, exit_code = status.code, signal = status.signal,
                            why, "an attempt's supervisor ended abnormally");
            finished.supervisor_lost = Some(format!(
                "the attempt's supervisor ended abnormally ({}); {why}",
                describe_exit(status)
            ));
            finished.killed = end_what_is_left(told, grace, record).await;
        }
    }
}

/// What a supervisor told its daemon on the control socket: the attempt's process group once
/// the program runs, when it sent SIGTERM to the attempt, and how the attempt ended just before
/// it exits (and `pong` to each `ping`).
#[derive(Debug, Default)]
struct Told {
    pid: Option<i32>,
    record: Option<Record>,
    /// When it said `term`: it began to stop the attempt with SIGTERM.
    term_at: Option<Instant>,
    /// A line not yet whole.
    partial: Vec<u8>,
}

impl Told {
    /// Take in what arrived on the socket; whole lines only, the rest kept for the next time.
    fn take(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            match line.split_once(' ') {
                Some(("pid", pid)) => self.pid = pid.parse().ok(),
                Some(("record", json)) => self.record = serde_json::from_str(json).ok(),
                None if line == "term" => {
                    self.term_at.get_or_insert_with(Instant::now);
                }
                _ => {}
            }
        }
        if self.partial.len() > 64 << 20 {
            // Not a supervisor's: nothing this long is ever said.
            self.partial.clear();
        }
    }

    /// Read what the supervisor (gone by now) left on the socket.
    fn read_rest(&mut self, control: &OwnedFd) {
        let _ = rustix::fs::fcntl_setfl(control, rustix::fs::OFlags::NONBLOCK);
        let mut chunk = [0u8; 4096];
        loop {
            match rustix::io::read(control, &mut chunk) {
                Ok(0) => break,
                Ok(n) => self.take(&chunk[..n]),
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
    }
}

/// The daemon's end of a supervisor's control socket, read as lines arrive.
enum Listening {
    Watched(tokio::net::UnixStream),
    /// Could not be registered: read only once the supervisor is gone.
    Unwatched(OwnedFd),
}

impl Listening {
    /// Watch `fd`; should that fail (not expected: a socket we made), it is read only once the
    /// supervisor is gone, and the attempt runs unwatched.
    fn new(fd: OwnedFd) -> (Listening, Option<io::Error>) {
        if let Err(e) = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK) {
            return (Listening::Unwatched(fd), Some(e.into()));
        }
        let std = std::os::unix::net::UnixStream::from(fd);
        match std.try_clone() {
            Ok(kept) => match tokio::net::UnixStream::from_std(std) {
                Ok(stream) => (Listening::Watched(stream), None),
                Err(e) => (Listening::Unwatched(kept.into()), Some(e)),
            },
            Err(e) => (Listening::Unwatched(std.into()), Some(e)),
        }
    }

    fn watched(&self) -> bool {
        matches!(self, Listening::Watched(_))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Listening::Watched(stream) => stream.as_fd(),
            Listening::Unwatched(fd) => fd.as_fd(),
        }
    }

    fn into_fd(self) -> io::Result<OwnedFd> {
        match self {
            Listening::Watched(stream) => Ok(stream.into_std()?.into()),
            Listening::Unwatched(fd) => Ok(fd),
        }
    }

    /// Wait for something from the supervisor and take it in: whether anything came (an end of
    /// the socket says nothing: the supervisor's exit is seen by its pidfd).
    async fn heard(&self, told: &mut Told) -> bool {
        let Listening::Watched(stream) = self else {
            return std::future::pending().await;
        };
        if stream.readable().await.is_err() {
            return std::future::pending().await;
        }
        let mut chunk = [0u8; 4096];
        match stream.try_read(&mut chunk) {
            // Closed: nothing more comes; the pidfd tells of the exit.
            Ok(0) => std::future::pending().await,
            Ok(n) => {
                told.take(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            // A broken socket says nothing more; the pidfd tells of the exit.
            Err(_) => std::future::pending().await,
        }
    }
}

/// What a supervisor's record says of the attempt, with the stop this process asked for.
fn apply(finished: &mut Finished, record: &Record, requested: Option<Stopped>) {
    finished.pid = record.pid;
    finished.exit_code = record.exit_code;
    finished.signal = record.signal;
    finished.killed = record.killed;
    finished.spawn_error = record.spawn_error.clone();
    finished.stopped = match record.stopped {
        None => None,
        Some(StopReason::Timeout) => Some(Stopped::TimedOut),
        Some(StopReason::Lease) => Some(Stopped::LeaseLost),
        Some(StopReason::Requested) => requested.or(Some(Stopped::Canceled)),
        // Only a daemon that is gone makes this: not this one.
        Some(StopReason::DaemonGone) => Some(Stopped::Shutdown),
    };
}

fn describe_exit(exit: processes::Exit) -> String {
    match (exit.code, exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        _ => "status unknown".to_owned(),
    }
}

/// Start a supervisor for `spec` and hand it the spec and the output pipe: the supervisor, the
/// daemon's end of its control socket, and the read end of the output pipe.
fn start_supervisor(
    supervisor: &Supervisor,
    spec: &Spec,
) -> Result<(Child, OwnedFd, OwnedFd), String> {
    let Some((program, leading)) = supervisor.command.split_first() else {
        return Err("cannot start the attempt's supervisor: no command".to_owned());
    };
    if let Some(why) = supervisor.changed() {
        tracing::error!(%why, "cannot start an attempt's supervisor");
        return Err(format!("cannot start the attempt's supervisor: {why}"));
    }
    let cannot = |what: &str, e: &dyn std::fmt::Display| format!("cannot {what}: {e}");
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| cannot("create the attempt's output pipe", &e))?;
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| cannot("create the control socket of the attempt's supervisor", &e))?;
    let mut command = Command::new(program);
    if supervisor.held.is_some() {
        // Shown by its name rather than the descriptor's path.
        command.arg0(supervision::PROGRAM);
    }
    command
        .args(leading)
        .arg(supervision::ARG)
        .env_clear()
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        // Out of the daemon's group: a terminal's ^C or a signal to the daemon's group does
        // not reach it; it ends its attempt when the daemon is gone, as it should.
        .process_group(0);
    let spawned = processes::spawn_held(|| command.spawn().map(|c| c.id()));
    // Its end of the socket is its own from here on.
    drop(command);
    let sup = spawned.map_err(|e| {
        // The held program by its name, not by its descriptor's path.
        let shown = match supervisor.held {
            Some(_) => supervision::PROGRAM.to_owned(),
            None => program.display().to_string(),
        };
        cannot(&format!("start the attempt's supervisor {shown}"), &e)
    })?;
    let mut line = serde_json::to_vec(spec).map_err(|e| cannot("encode the attempt", &e))?;
    line.push(b'\n');
    if let Err(e) = send_spec(&ours, &line, &write, &read) {
        // Its end of the socket closes with ours: it exits without starting anything.
        drop(ours);
        let mut sup = sup;
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(sup.pidfd().as_fd()),
            rustix::process::WaitIdOptions::EXITED,
        );
        let _ = sup.reap();
        return Err(cannot("hand the attempt to its supervisor", &e));
    }
    Ok((sup, ours, read))
}

/// Send the spec line with both ends of the output pipe: the descriptors ride with its first
/// bytes; the rest is written as the supervisor reads (a spec is a few KiB; a larger one waits
/// for the socket's buffer, which the supervisor empties as soon as it runs).
fn send_spec(socket: &OwnedFd, line: &[u8], write: &OwnedFd, read: &OwnedFd) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [write.as_fd(), read.as_fd()];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    if !ancillary.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::other("no room for the descriptors"));
    }
    let mut sent = loop {
        match rustix::net::sendmsg(
            socket,
            &[io::IoSlice::new(line)],
            &mut ancillary,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    while sent < line.len() {
        match rustix::net::send(socket, &line[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Tell the supervisor something (a line); a supervisor that is gone is not told.
fn tell(control: impl AsFd, line: &[u8]) {
    let _ = rustix::net::send(control, line, rustix::net::SendFlags::NOSIGNAL);
}

/// Tell the supervisor when the lease runs out, on its clock (`CLOCK_BOOTTIME`).
fn tell_lease(control: impl AsFd, until: tokio::time::Instant) {
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    let at = supervision::boottime() + left;
    tell(control, format!("lease {}\n", at.as_millis()).as_bytes());
}

/// The next lease end, once it changes; `None` when no one renews it any more.
async fn renewal(
    lease: Option<&mut tokio::sync::watch::Receiver<tokio::time::Instant>>,
) -> Option<tokio::time::Instant> {
    match lease {
        Some(rx) => match rx.changed().await {
            Ok(()) => Some(*rx.borrow_and_update()),
            Err(_) => None,
        },
        None => std::future::pending().await,
    }
}

/// Until the supervisor has exited (it is not reaped). Whoever polls its pidfd notifies
/// `exited` (a slow poll backs that up); without one, the exit is looked for every 20 ms.
async fn exit_of(sup: &mut Child, exited: Option<&tokio::sync::Notify>) {
    loop {
        if sup.poll_exit().is_some() {
            return;
        }
        match exited {
            Some(exited) => tokio::select! {
                () = exited.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            },
            None => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Spawn an attempt's program as its supervisor asks, with `output` as its stdout and stderr,
/// in a process group of its own, and hold it. Only the supervisor calls this.
pub fn spawn_program(spec: &Spec, output: OwnedFd) -> Result<Child, String> {
    let Some((program, args)) = spec.argv.split_first() else {
        return Err("empty command".into());
    };
    // With a cgroup, the child moves itself into it before it runs the program (a shell
    // builtin, then exec: same pid, same group), so nothing it starts can be outside it. The
    // program and its arguments are positional parameters: never read as shell code.
    let mut command = match &spec.cgroup {
        Some(dir) => {
            let mut c = Command::new(ENTER_CGROUP[0]);
            c.args(&ENTER_CGROUP[1..])
                .arg(dir.join("cgroup.procs"))
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
    let stderr = output
        .try_clone()
        .map_err(|e| format!("cannot start {program}: {e}"))?;
    command
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::from(output))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    if let Some(dir) = &spec.working_dir {
        command.current_dir(dir);
    }
    if let Some((uid, gid)) = spec.run_as {
        // The standard library drops the supervisor's supplementary groups first.
        command.uid(uid).gid(gid);
    }
    // The command (holding the only other copies of the pipe's write end) is dropped here.
    let spawned = command.spawn().map(|child| child.id());
    drop(command);
    let pid = spawned.map_err(|e| format!("cannot start {program}: {e}"))?;
    Child::hold(pid).map_err(|e| format!("cannot start {program}: {e}"))
}

/// Reads an attempt's output pipe into its output log on a blocking thread of its own: it
/// waits (`poll`) for the pipe to have something, reads up to [`PIPE_SIZE`] from it, and
/// redacts and stores that before it looks again. While it redacts, the script's output
/// gathers in the pipe (or the script blocks on it), so a chatty script is read in large
/// pieces with one wake-up each; the runtime's event loop is not involved, and the async side
/// only awaits the thread's end. The same `poll` watches the supervisor's pidfd, which
/// becomes readable when it exits, and tells the async side: one wake-up for its attempt alone.
struct OutputPump {
    /// Dropping it (the write end of a pipe the thread also polls) stops the thread.
    stop: Option<OwnedFd>,
    /// Ends with the bytes read, once the pipe is closed (or the pump is stopped); once the
    /// thread is gone, the log is complete and the runner's handle to it the last one.
    thread: tokio::task::JoinHandle<u64>,
}

impl OutputPump {
    /// Starts reading `pipe` into `log` (or counting it only, without a log). A log that cannot
    /// be written to is given up on (logged once); the pipe is still read. The thread is one of
    /// the runtime's blocking threads (512 at most), held for the attempt's life: far more
    /// than any sensible `--task-concurrency`, but not bounded by it.
    fn start(
        pipe: OwnedFd,
        log: Option<Arc<Mutex<OutputLog>>>,
        exit: Option<(OwnedFd, Arc<tokio::sync::Notify>)>,
    ) -> Self {
        let (stop_rx, stop_tx) = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
            Ok((rx, tx)) => (Some(rx), Some(tx)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a pipe to stop an output reader");
                (None, None)
            }
        };
        let thread = tokio::task::spawn_blocking(move || pump(pipe, log, stop_rx.as_ref(), exit));
        OutputPump {
            stop: stop_tx,
            thread,
        }
    }

    /// Stops reading and waits for the thread to let go of the log; the bytes read.
    async fn stop(&mut self) -> u64 {
        self.stop = None;
        (&mut self.thread).await.unwrap_or(0)
    }
}

/// The pump's thread: until the pipe is closed and the supervisor's exit was told (`exit`: its
/// pidfd, and whom to tell), or `stop` is.
fn pump(
    pipe: OwnedFd,
    log: Option<Arc<Mutex<OutputLog>>>,
    stop: Option<&OwnedFd>,
    mut exit: Option<(OwnedFd, Arc<tokio::sync::Notify>)>,
) -> u64 {
    use rustix::event::{poll, PollFd, PollFlags};
    // The pipe keeps the kernel's size until a read fills the buffer (a chatty script): only
    // then is it enlarged (enlarged pipes count against the user's pipe allowance, which the
    // scripts' own pipes share), and the buffer grows to what one read can then take.
    let mut enlarged = false;
    let mut size = FIRST_READ;
    let mut buf = Vec::new();
    let mut log = log;
    let mut total = 0u64;
    let mut open = true;
    while open || exit.is_some() {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        if open {
            fds.push(PollFd::new(&pipe, PollFlags::IN));
        }
        if let Some((pidfd, _)) = &exit {
            fds.push(PollFd::new(pidfd, PollFlags::IN));
        }
        if let Some(stop) = stop {
            fds.push(PollFd::new(stop, PollFlags::IN));
        }
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "cannot wait for a task attempt's output");
                break;
            }
        }
        let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
        drop(fds);
        let (pipe_ready, exit_ready, stopped) = {
            let mut it = ready.into_iter();
            let p = if open {
                it.next().unwrap_or(false)
            } else {
                false
            };
            let e = if exit.is_some() {
                it.next().unwrap_or(false)
            } else {
                false
            };
            (p, e, stop.is_some() && it.next().unwrap_or(false))
        };
        if stopped {
            break;
        }
        if exit_ready {
            if let Some((_, exited)) = exit.take() {
                exited.notify_one();
            }
        }
        if !pipe_ready {
            continue;
        }
        if buf.is_empty() {
            buf = vec![0u8; size.min(FIRST_READ)];
        }
        match rustix::io::read(&pipe, &mut buf) {
            Ok(0) => open = false,
            Ok(n) => {
                total += n as u64;
                if n == buf.len() && !enlarged {
                    enlarged = true;
                    size = size.max(enlarge_pipe(&pipe));
                }
                if let Some(l) = &log {
                    let written = l
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .write(&buf[..n]);
                    if let Err(e) = written {
                        tracing::warn!(error = %e, "cannot write a task attempt's output log");
                        log = None;
                    }
                }
            }
            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
            Err(_) => open = false,
        }
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
