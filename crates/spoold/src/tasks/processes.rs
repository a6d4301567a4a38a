//! The processes of task attempts, known by parenthood: which ones descend from this process,
//! how they are signalled, and how they are reaped. **The only module that sends signals**
//! (the tidy test holds it to that).
//!
//! **Invariant: a signal reaches a process only while it is proven to descend from this one.**
//! A pid names whatever process has it *now*; a process group or session id, a start time or an
//! environment variable can all be taken by an unrelated process once the one we meant is gone.
//! What cannot be taken is parenthood:
//! - a child of this process keeps its pid until this process reaps it (alive or a zombie), so
//!   the child is signalled by its pid, and a group whose leader is such a child through the
//!   group id (the leader's pid) until the leader is reaped;
//! - any deeper descendant is signalled through a pidfd, which names the process, not the
//!   number. The pidfd is opened first; then the process must show the expected parent in
//!   `/proc/PID/stat`, and that parent must still be alive afterwards (its own pidfd not
//!   readable, or it is our unreaped child): a parent alive throughout keeps its pid, so the
//!   process that named it as parent is its child. A pid reused in between fails the check (the
//!   new process has another parent) or leaves a pidfd of a dead process (a signal to it goes
//!   nowhere).
//!
//! The supervisor of an attempt ([`super::supervisor`]) is a child subreaper: every descendant
//! orphaned below it is re-parented to it, never to init, so its descendants are exactly the
//! attempt's processes, and it ends the attempt by ending its descendants until it has none.
//!
//! Each process gets SIGTERM once per stop: the group's members through the group, the others
//! one by one. SIGKILL follows after the grace, for whatever is left, again every second.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};

/// After SIGKILL, how often what is still there gets it again (a process that forked meanwhile
/// may have a child the first one missed), and after how long that is worth a warning (a
/// process in uninterruptible sleep: a hung disk or NFS server).
pub const KILL_AGAIN: Duration = Duration::from_secs(1);
pub const KILL_WARN: Duration = Duration::from_secs(5);

/// How a process ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// A child of this process, held unreaped until [`Child::reap`]: its pid (and, for a group
/// leader, its group id) cannot be given to another process meanwhile.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    pidfd: OwnedFd,
    exit: Option<Exit>,
    reaped: bool,
}

impl Child {
    /// Hold the child `pid`, just spawned by this process (so the pid can only be it). A child
    /// that cannot be watched (no pidfd) is killed and reaped.
    pub fn hold(pid: u32) -> io::Result<Child> {
        let raw = Pid::from_raw(pid as i32)
            .ok_or_else(|| io::Error::other("spawned a process without a pid"))?;
        match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
            Ok(pidfd) => Ok(Child {
                pid: pid as i32,
                pidfd,
                exit: None,
                reaped: false,
            }),
            Err(e) => {
                let _ = rustix::process::kill_process(raw, Signal::KILL);
                let _ = rustix::process::waitpid(Some(raw), rustix::process::WaitOptions::empty());
                Err(io::Error::new(
                    io::Error::from(e).kind(),
                    format!("cannot watch the started process (pidfd): {e}"),
                ))
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Its pidfd: readable once it has exited.
    pub fn pidfd(&self) -> &OwnedFd {
        &self.pidfd
    }

    /// How it ended, if it has, without reaping it.
    pub fn poll_exit(&mut self) -> Option<Exit> {
        if self.exit.is_none() {
            self.exit = peek(&self.pidfd);
        }
        self.exit
    }

    /// Signal it, or — `group` — its whole process group (it must be the group's leader). Safe
    /// until [`Child::reap`]: alive or a zombie, it keeps its pid and group id from reuse.
    pub fn signal(&self, signal: Signal, group: bool) {
        if self.reaped {
            return;
        }
        if let Some(pid) = Pid::from_raw(self.pid) {
            // ESRCH: nothing of it is left but the zombie.
            let _ = if group {
                rustix::process::kill_process_group(pid, signal)
            } else {
                rustix::process::kill_process(pid, signal)
            };
        }
    }

    /// Let it go, once it has exited: from here on its pid may be given to another process.
    /// How it ended (`None` if it has not).
    pub fn reap(&mut self) -> Option<Exit> {
        let exit = self.poll_exit()?;
        if !self.reaped {
            let _ = rustix::process::waitid(
                WaitId::PidFd(self.pidfd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
            self.reaped = true;
            held().remove(&self.pid);
        }
        Some(exit)
    }
}

impl Drop for Child {
    /// A child dropped before it was reaped (an abandoned attempt at shutdown) keeps running;
    /// it is reaped here if it has exited.
    fn drop(&mut self) {
        let _ = self.reap();
        held().remove(&self.pid);
    }
}

/// The children this process holds (the daemon's supervisors): never taken for adopted
/// orphans.
static HELD: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

fn held() -> HeldGuard {
    HeldGuard(HELD.lock().unwrap_or_else(PoisonError::into_inner))
}

struct HeldGuard(MutexGuard<'static, Option<HashSet<i32>>>);

impl HeldGuard {
    fn contains(&self, pid: &i32) -> bool {
        self.0.as_ref().is_some_and(|h| h.contains(pid))
    }

    fn insert(&mut self, pid: i32) {
        self.0.get_or_insert_with(HashSet::new).insert(pid);
    }

    fn remove(&mut self, pid: &i32) {
        if let Some(h) = self.0.as_mut() {
            h.remove(pid);
        }
    }
}

/// Spawn a child with `spawn` (which returns its pid) and hold it: it is never taken for an
/// adopted orphan ([`Scope::Adopted`]). Orphans are re-parented to this process's main
/// thread; a child spawned there is registered before anyone can look (the registry is held
/// across the spawn), one spawned on another thread is never among them.
pub fn spawn_held(spawn: impl FnOnce() -> io::Result<u32>) -> io::Result<Child> {
    let on_main_thread = rustix::thread::gettid() == rustix::process::getpid();
    let pid = if on_main_thread {
        let mut guard = held();
        let pid = spawn()?;
        guard.insert(pid as i32);
        pid
    } else {
        let pid = spawn()?;
        held().insert(pid as i32);
        pid
    };
    Child::hold(pid).inspect_err(|_| held().remove(&(pid as i32)))
}

/// End what this process adopted from a supervisor that died (its attempt's process group
/// `group`, if known, and whatever left the daemon's session): SIGTERM, `grace`, SIGKILL until
/// none is left. If the supervisor had already begun its stop with SIGTERM (`termed` ago), no
/// process gets a second one: SIGKILL comes when the supervisor's grace would have ended.
/// Blocking: run it on a thread of its own.
pub fn end_adopted(group: Option<i32>, grace: Duration, termed: Option<Duration>) -> Ended {
    let scope = Scope::Adopted { group };
    let base = std::time::Instant::now();
    let mut stop = match termed {
        None => Stop::begin(None, scope, Duration::ZERO, grace, None),
        Some(ago) => Stop::begin_termed(scope, grace.saturating_sub(ago)),
    };
    while !stop.step(None, base.elapsed()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.ended()
}

/// How the process of `pidfd` (a child of ours) ended, if it has, leaving it unreaped.
fn peek(pidfd: &OwnedFd) -> Option<Exit> {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    match rustix::process::waitid(WaitId::PidFd(pidfd.as_fd()), options) {
        Ok(Some(status)) => Some(Exit {
            code: status.exit_status(),
            signal: status.terminating_signal(),
        }),
        _ => None,
    }
}

/// Whether the process of `pidfd` has exited (its pidfd is readable).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    matches!(poll(&mut fds, Some(&rustix::time::Timespec::default())), Ok(n) if n > 0)
}

/// A live descendant of this process, with the proof that it is one.
#[derive(Debug)]
pub struct Descendant {
    pub pid: i32,
    /// Clock ticks after boot: with the pid, it names the process within a boot.
    pub start: u64,
    pub pgrp: i32,
    /// Its pidfd, opened before its parent was shown to be ours; `None` for a child we hold
    /// (signalled through [`Child`]).
    pidfd: Option<OwnedFd>,
}

/// Which children of this process, with everything below them, are walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// All of them: a supervisor, whose children are its attempt's.
    All,
    /// The daemon's children re-parented to it from a supervisor that died: those in the
    /// attempt's process group (its leader's pid, if known) or in another session than the
    /// daemon's (they left the group with `setsid`). Supervisors are never among them.
    Adopted { group: Option<i32> },
}

impl Scope {
    fn admits(&self, child: &ProcStat, me: &ProcStat) -> bool {
        match self {
            Scope::All => true,
            Scope::Adopted { group } => {
                !held().contains(&child.pid)
                    && (Some(child.pgrp) == *group || child.session != me.session)
            }
        }
    }
}

/// The live descendants of this process in `scope`, found from its children down, each proven
/// (see the module's invariant). `held` is a child this process holds unreaped (an attempt's
/// leader): listed without a pidfd. Zombie children of ours in scope other than `held` are
/// reaped on the way: their pids are ours to let go.
pub fn descendants(held: Option<&Child>, scope: Scope) -> Vec<Descendant> {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let Some(me_stat) = read_stat(me) else {
        return Vec::new();
    };
    let index = ChildIndex::new(me);
    let mut found: Vec<Descendant> = Vec::new();
    // (parent pid, index in `found` of its proof; None for this process itself)
    let mut queue: VecDeque<(i32, Option<usize>)> = VecDeque::from([(me, None)]);
    while let Some((parent, proof)) = queue.pop_front() {
        for child in index.children(parent) {
            if held.is_some_and(|h| h.pid == child && !h.reaped) {
                let Some(stat) = read_stat(child) else {
                    continue;
                };
                if stat.ppid == me && !stat.zombie {
                    found.push(Descendant {
                        pid: child,
                        start: stat.start,
                        pgrp: stat.pgrp,
                        pidfd: None,
                    });
                    queue.push_back((child, Some(found.len() - 1)));
                }
                continue;
            }
            let Some(pid) = Pid::from_raw(child) else {
                continue;
            };
            let Ok(fd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) else {
                continue;
            };
            let Some(stat) = read_stat(child) else {
                continue;
            };
            if stat.ppid != parent || (parent == me && !scope.admits(&stat, &me_stat)) {
                continue;
            }
            // The parent, alive after the child named it, was that process all along.
            if let Some(i) = proof {
                if found[i].pidfd.as_ref().is_some_and(exited) {
                    continue;
                }
            }
            if stat.zombie {
                if parent == me {
                    // Ours to reap: an orphan re-parented to us that has exited.
                    let _ = rustix::process::waitid(
                        WaitId::PidFd(fd.as_fd()),
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                    );
                }
                continue;
            }
            found.push(Descendant {
                pid: child,
                start: stat.start,
                pgrp: stat.pgrp,
                pidfd: Some(fd),
            });
            queue.push_back((child, Some(found.len() - 1)));
        }
    }
    found
}

/// Reap the zombie children of a supervisor but its leader (`held`); whether any other child
/// is left alive (orphans it adopted).
pub fn reap_children(held: &Child) -> bool {
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let mut left = false;
    for child in ChildIndex::new(me).children(me) {
        if held.pid == child {
            continue;
        }
        match read_stat(child) {
            Some(s) if s.zombie && s.ppid == me => {
                if let Some(pid) = Pid::from_raw(child) {
                    let _ =
                        rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
                }
            }
            Some(s) if s.ppid == me => left = true,
            _ => {}
        }
    }
    left
}

/// How the children of a process are listed: from `/proc/PID/task/TID/children` where the
/// kernel has it, else from one scan of every process's parent.
enum ChildIndex {
    Files,
    Scan(HashMap<i32, Vec<i32>>),
}

impl ChildIndex {
    fn new(me: i32) -> ChildIndex {
        if Path::new(&format!("/proc/{me}/task/{me}/children")).exists() {
            return ChildIndex::Files;
        }
        let mut map: HashMap<i32, Vec<i32>> = HashMap::new();
        for p in all_processes() {
            map.entry(p.ppid).or_default().push(p.pid);
        }
        ChildIndex::Scan(map)
    }

    /// The children of `pid`. For this process, only its main thread's: orphans are
    /// re-parented there, while the daemon's worker threads are the parents of the
    /// supervisors they spawned.
    fn children(&self, pid: i32) -> Vec<i32> {
        match self {
            ChildIndex::Scan(map) => map.get(&pid).cloned().unwrap_or_default(),
            ChildIndex::Files if pid == rustix::process::getpid().as_raw_nonzero().get() => {
                std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .collect()
            }
            ChildIndex::Files => {
                let mut out = Vec::new();
                for task in std::fs::read_dir(format!("/proc/{pid}/task"))
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                        out.extend(
                            text.split_whitespace()
                                .filter_map(|p| p.parse::<i32>().ok()),
                        );
                    }
                }
                out
            }
        }
    }
}

/// One stop of the descendants of this process: SIGTERM once to each (the leader's group
/// through the leader), SIGKILL to whatever is left after the grace, again every second, until
/// none is left. Driven by its owner ([`Stop::step`] every few tens of milliseconds), so that a
/// single-threaded supervisor keeps watching its daemon meanwhile.
pub struct Stop {
    /// When SIGKILL is due (on the caller's clock).
    kill_at: Duration,
    /// When SIGKILL was last sent to everything seen.
    killed_at: Option<Duration>,
    /// Processes signalled on their own, by (pid, start time), with their pidfds.
    held: HashMap<(i32, u64), OwnedFd>,
    /// Every process seen during the stop (the leader aside).
    seen: HashSet<(i32, u64)>,
    cgroup: Option<std::path::PathBuf>,
    scope: Scope,
    /// The leader still ran when the stop began.
    leader_ran: bool,
    /// SIGTERM is this stop's to send (not when another sent it: [`Stop::begin_termed`]).
    term: bool,
    /// It sent SIGTERM as it began.
    term_sent: bool,
}

/// How a stop went, so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// SIGKILL was needed.
    pub killed: bool,
    /// Processes of the attempt that the stop found running, the leader included.
    pub found: usize,
}

impl Stop {
    /// Begin a stop at `now` (the caller's clock): SIGTERM to the leader's group, then to every
    /// other descendant; SIGKILL is due at `kill_at` (`now` itself: at once, no grace).
    /// `cgroup`: the attempt's cgroup directory, killed whole with the SIGKILLs.
    pub fn begin(
        leader: Option<&Child>,
        scope: Scope,
        now: Duration,
        kill_at: Duration,
        cgroup: Option<std::path::PathBuf>,
    ) -> Stop {
        let mut stop = Stop {
            kill_at,
            killed_at: None,
            held: HashMap::new(),
            seen: HashSet::new(),
            cgroup,
            scope,
            leader_ran: leader.is_some_and(|l| !exited(&l.pidfd)),
            term: true,
            term_sent: false,
        };
        if now < kill_at {
            // Looked at first, so that what the signal ends at once is counted too.
            let found = descendants(leader, scope);
            if let Some(l) = leader {
                l.signal(Signal::TERM, true);
            }
            stop.signal_new(leader, found, Some(Signal::TERM));
            stop.term_sent = true;
        }
        stop
    }

    /// One look, at `now`: reap what exited, signal what is new (SIGTERM during the grace,
    /// SIGKILL after it), SIGKILL everything again every [`KILL_AGAIN`]. `true` once no
    /// descendant is left and the leader (if any) has exited.
    pub fn step(&mut self, mut leader: Option<&mut Child>, now: Duration) -> bool {
        let leader_gone = leader
            .as_deref_mut()
            .is_none_or(|l| l.poll_exit().is_some());
        let found = descendants(leader.as_deref(), self.scope);
        let live: Vec<Descendant> = found
            .into_iter()
            .filter(|d| leader.as_deref().is_none_or(|l| l.pid != d.pid))
            .collect();
        if leader_gone && live.is_empty() {
            return true;
        }
        if now < self.kill_at {
            if self.term {
                self.signal_new(leader.as_deref(), live, Some(Signal::TERM));
            } else {
                self.signal_new(leader.as_deref(), live, None);
            }
            return false;
        }
        if self.killed_at.is_none_or(|at| now >= at + KILL_AGAIN) {
            self.killed_at = Some(now);
            if let Some(dir) = &self.cgroup {
                let _ = std::fs::write(dir.join("cgroup.kill"), "1");
            }
            if let Some(l) = leader.as_deref() {
                l.signal(Signal::KILL, true);
            }
            for fd in self.held.values() {
                let _ = rustix::process::pidfd_send_signal(fd, Signal::KILL);
            }
        }
        self.signal_new(leader.as_deref(), live, Some(Signal::KILL));
        false
    }

    /// Whether it began with SIGTERM.
    pub fn term_sent(&self) -> bool {
        self.term_sent
    }

    /// Whether SIGKILL has been sent.
    pub fn killing(&self) -> bool {
        self.killed_at.is_some()
    }

    /// Since when SIGKILL is due.
    pub fn kill_at(&self) -> Duration {
        self.kill_at
    }

    /// Bring SIGKILL forward to `at`.
    pub fn kill_by(&mut self, at: Duration) {
        self.kill_at = self.kill_at.min(at);
    }

    pub fn ended(&self) -> Ended {
        Ended {
            killed: self.killed_at.is_some(),
            found: self.seen.len() + usize::from(self.leader_ran),
        }
    }

    /// A stop whose SIGTERMs someone else sent (a supervisor taken over during its grace):
    /// none is sent again; SIGKILL at `kill_at`.
    pub fn begin_termed(scope: Scope, kill_at: Duration) -> Stop {
        Stop {
            kill_at,
            killed_at: None,
            held: HashMap::new(),
            seen: HashSet::new(),
            cgroup: None,
            scope,
            leader_ran: false,
            term: false,
            term_sent: false,
        }
    }

    /// Signal each process not signalled on its own yet, unless the leader's group reaches it
    /// (signalled through the leader), and keep its pidfd (`None`: only keep it, for SIGKILL).
    fn signal_new(
        &mut self,
        leader: Option<&Child>,
        found: Vec<Descendant>,
        signal: Option<Signal>,
    ) {
        let group = leader.filter(|l| !l.reaped).map(|l| l.pid);
        for d in found {
            let key = (d.pid, d.start);
            self.seen.insert(key);
            if Some(d.pgrp) == group || self.held.contains_key(&key) {
                continue;
            }
            match d.pidfd {
                Some(fd) => {
                    if let Some(signal) = signal {
                        let _ = rustix::process::pidfd_send_signal(&fd, signal);
                    }
                    self.held.insert(key, fd);
                }
                // A held child outside its own group: signalled by its pid.
                None => {
                    if let (Some(l), Some(signal)) = (leader.filter(|l| l.pid == d.pid), signal) {
                        l.signal(signal, false);
                    }
                }
            }
        }
    }
}

/// A process that holds an attempt's record file open: one of the attempt's (the file is
/// inherited by every process the attempt starts, kept open across `exec`), signalled through
/// its pidfd.
#[derive(Debug)]
pub struct Holder {
    pub pid: i32,
    pidfd: OwnedFd,
    /// It is a supervisor (`--supervise-attempt`): it ends the attempt on its own.
    pub supervisor: bool,
}

/// The processes that hold the file `path` open now — **the second invariant**: a process
/// that holds an attempt's record file is the attempt's, whoever its parent is, because only
/// the attempt's supervisor and what it started were ever given that descriptor. The pidfd is
/// opened first and the descriptor looked for afterwards, so a pid reused in between is either
/// a holder itself or leaves a pidfd of a dead process. A process that closed every
/// descriptor it did not know (some daemons do) is not found.
pub fn holders(path: &Path) -> Vec<Holder> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    let wanted = (meta.dev(), meta.ino());
    let me = rustix::process::getpid().as_raw_nonzero().get();
    let holds = |pid: i32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| (m.dev(), m.ino()) == wanted))
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me || !holds(pid) {
            continue;
        }
        let Some(raw) = Pid::from_raw(pid) else {
            continue;
        };
        let Ok(pidfd) = rustix::process::pidfd_open(raw, PidfdFlags::empty()) else {
            continue;
        };
        if !holds(pid) {
            continue;
        }
        let supervisor = std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|argv| {
            argv.split(|b| *b == 0)
                .any(|a| a == super::supervision::ARG.as_bytes())
        });
        found.push(Holder {
            pid,
            pidfd,
            supervisor,
        });
    }
    found
}

/// End the processes that hold `path` (see [`holders`]): SIGTERM once to each found at first,
/// `grace`, then SIGKILL until none is left. What is started after the SIGTERMs (a clean-up
/// helper) is left to finish within the grace, as a supervisor leaves it. The number of
/// processes found. Blocking: run it on a thread of its own.
pub fn end_holders(path: &Path, grace: Duration) -> usize {
    let began = std::time::Instant::now();
    let mut seen: HashSet<i32> = HashSet::new();
    let mut killed_at: Option<std::time::Instant> = None;
    let mut first = true;
    loop {
        let found = holders(path);
        if found.is_empty() {
            return seen.len();
        }
        let killing = began.elapsed() >= grace;
        for h in &found {
            if seen.insert(h.pid) && first && !killing {
                let _ = rustix::process::pidfd_send_signal(&h.pidfd, Signal::TERM);
            }
        }
        first = false;
        if killing && killed_at.is_none_or(|at| at.elapsed() >= KILL_AGAIN) {
            killed_at = Some(std::time::Instant::now());
            for h in &found {
                let _ = rustix::process::pidfd_send_signal(&h.pidfd, Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Make this process a child subreaper: orphaned descendants are re-parented to it rather than
/// to init.
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).map_err(io::Error::from)
}

/// Whether this kernel has pidfds (Linux 5.3), which attempts need: checked at start-up.
pub fn pidfds_supported() -> io::Result<()> {
    rustix::process::pidfd_open(rustix::process::getpid(), PidfdFlags::empty())
        .map(drop)
        .map_err(io::Error::from)
}

/// Where this process's attempts can be found from: `MACHINE/BOOT/PIDNS/DATA_DIR` (the
/// machine's id, this boot's id, this pid namespace, the data directory where the supervisors
/// keep their records). Another daemon with the same identity can wait for those records;
/// any other cannot. Parts that cannot be read are left empty.
pub fn host_identity(data_dir: &Path) -> String {
    let machine = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    let dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    format!(
        "{machine}/{}/{pid_ns}/{}",
        boot_id().unwrap_or_default(),
        dir.display()
    )
}

/// Whether the executor `id` (`host:pid:run`), an earlier run on this host, is certainly gone:
/// no live process has its pid any more, or this process has it. A live process with that pid
/// may be it or another: not gone, as far as anyone can tell. (Only to take over its tasks
/// sooner; nothing is signalled on the strength of it.)
pub fn executor_gone(id: &str) -> bool {
    let mut parts = id.rsplitn(3, ':');
    let (Some(_run), Some(pid), Some(_host)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    pid == std::process::id() as i32 || read_stat(pid).is_none_or(|p| p.zombie)
}

/// Whether `host` (a [`host_identity`]) is this machine before a reboot: nothing it ran is
/// left. Unknowable without a machine id.
pub fn rebooted_since(host: &str) -> bool {
    let mut theirs = host.splitn(3, '/');
    let (Some(machine), Some(boot)) = (theirs.next(), theirs.next()) else {
        return false;
    };
    let here_machine = host_identity(Path::new("/"));
    let mut ours = here_machine.splitn(3, '/');
    !machine.is_empty()
        && Some(machine) == ours.next()
        && ours.next().is_some_and(|b| !b.is_empty() && b != boot)
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

/// The fields of `/proc/PID/stat` we need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcStat {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    session: i32,
    /// Clock ticks after boot.
    start: u64,
    zombie: bool,
}

fn all_processes() -> impl Iterator<Item = ProcStat> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
}

fn read_stat(pid: i32) -> Option<ProcStat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &stat)
}

/// `pid (comm) state ppid pgrp session … starttime …`; comm may hold spaces and parentheses,
/// so fields are read after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after comm start with field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = *fields.first()?;
    Some(ProcStat {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start: fields.get(22 - 3)?.parse().ok()?,
        zombie: state == "Z" || state == "X",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_are_read_after_the_command_name() {
        let line = "42 (a (weird) name) S 7 42 40 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 \
                    123456 0 0";
        let p = parse_stat(42, line).expect("parsed");
        assert_eq!(
            (p.ppid, p.pgrp, p.session, p.start, p.zombie),
            (7, 42, 40, 123456, false)
        );
        let z =
            parse_stat(9, "9 (sh) Z 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0").expect("parsed");
        assert!(z.zombie);
        assert!(parse_stat(1, "garbage").is_none());
        assert!(parse_stat(1, "1 (short) S 0 1").is_none(), "fields missing");
    }

    #[test]
    fn a_host_before_a_reboot_is_told_apart() {
        let here = host_identity(Path::new("/tmp"));
        assert!(!rebooted_since(&here));
        let mut parts = here.splitn(3, '/');
        let machine = parts.next().expect("machine");
        let _boot = parts.next();
        let rest = parts.next().expect("rest");
        if !machine.is_empty() {
            assert!(rebooted_since(&format!("{machine}/another-boot/{rest}")));
        }
        assert!(!rebooted_since(&format!(
            "another-machine/another-boot/{rest}"
        )));
    }
}
