//! The processes of task attempts: which ones belong to an attempt, how they are signalled and
//! waited for, and how what the daemon adopted is reaped. **The only module that sends
//! signals** (the tidy test holds it to that).
//!
//! **Invariant: a signal reaches a process only while it is proven to be the attempt's at
//! that moment.** A pid names whatever process has it *now*: once the one we meant is gone
//! and reaped, the number may be handed to an unrelated process (on a busy host pids wrap
//! within minutes). So:
//! - a process group is signalled only through its leader, our child, which is never reaped
//!   before nothing of its group is left: an exited leader stays a zombie we hold, so its
//!   pid — and with it the group id — cannot be reused while we may still signal the group;
//! - every other process is signalled through a pidfd, which names the process, not the
//!   number. The pidfd is opened after the process was found to be the attempt's (it carries
//!   the attempt's tag, is in its cgroup, or — after a crash, when the leader is not our child —
//!   is in the recorded group, in the recorded session, started after the recorded leader), and
//!   that is checked again once it is open: a process that died and whose pid was reused in
//!   between fails the check and is not signalled.
//!
//! Each process gets SIGTERM once per stop: the group's members through the group, the others
//! one by one. SIGKILL follows after the grace, for whatever is left.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use spool_store::tasks::AttemptProcess;

use super::cgroup::AttemptCgroup;

/// The environment variable that marks every process of one attempt.
pub const TAG_VAR: &str = "SPOOLD_ATTEMPT_TAG";

/// How often the end of an attempt is checked while it is being stopped.
const POLL: Duration = Duration::from_millis(20);

/// After SIGKILL, how often what is still there gets it again (a process that forked meanwhile
/// may have a child the first one missed), and after how long that is worth a warning (a
/// process in uninterruptible sleep: a hung disk or NFS server).
const KILL_AGAIN: Duration = Duration::from_secs(1);
const KILL_WARN: Duration = Duration::from_secs(5);

/// How many attempt groups the reaper remembers: their members that this process adopted are
/// reaped once they exit.
const RECENT_GROUPS: usize = 4096;

/// The children this process must leave alone or may take: attempt leaders not yet reaped
/// (held until their group is empty), and the groups of recent attempts.
#[derive(Default)]
struct Children {
    leaders: HashSet<i32>,
    groups: VecDeque<i32>,
}

static CHILDREN: Mutex<Option<Children>> = Mutex::new(None);

fn children() -> MutexGuard<'static, Option<Children>> {
    CHILDREN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a process ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

/// An attempt's first process: our child and the leader of its process group. Held unreaped
/// until [`Leader::reap`], so that its group can be signalled safely until then.
pub struct Leader {
    pid: i32,
    pidfd: OwnedFd,
    exit: Option<Exit>,
    reaped: bool,
}

/// Start an attempt's leader with `spawn` (which returns its pid, and must make it the leader
/// of a new process group) and hold it.
///
/// The reaper must never take a leader for an orphan. It only looks at the children of this
/// process's main thread (where the kernel re-parents orphans), and a leader is a child of the
/// thread that spawned it: spawned on a worker thread, it is never among them, and no lock is
/// held across the spawn (a fork would stall every worker waiting on it). Spawned on the main
/// thread, the reaper is kept out until the leader is registered.
pub fn hold_leader(spawn: impl FnOnce() -> io::Result<u32>) -> io::Result<Leader> {
    let on_main_thread = rustix::thread::gettid() == rustix::process::getpid();
    let pid = if on_main_thread {
        let mut guard = children();
        let pid = spawn()? as i32;
        register(&mut guard, pid);
        pid
    } else {
        let pid = spawn()? as i32;
        register(&mut children(), pid);
        pid
    };
    let raw =
        Pid::from_raw(pid).ok_or_else(|| io::Error::other("spawned a process without a pid"))?;
    // Our unreaped child: the pid can only be that process.
    match rustix::process::pidfd_open(raw, PidfdFlags::empty()).map_err(io::Error::from) {
        Ok(pidfd) => Ok(Leader {
            pid,
            pidfd,
            exit: None,
            reaped: false,
        }),
        Err(e) => {
            // Not watchable: end its group (safe, it is still our unreaped child) and reap it.
            let _ = rustix::process::kill_process_group(raw, Signal::KILL);
            let _ = rustix::process::waitpid(Some(raw), rustix::process::WaitOptions::empty());
            forget_leader(pid);
            Err(io::Error::new(
                e.kind(),
                format!("cannot watch the started process (pidfd): {e}"),
            ))
        }
    }
}

/// Hold `pid` as a leader, and remember its group.
fn register(guard: &mut Option<Children>, pid: i32) {
    let held = guard.get_or_insert_with(Children::default);
    held.leaders.insert(pid);
    if held.groups.len() >= RECENT_GROUPS {
        held.groups.pop_front();
    }
    held.groups.push_back(pid);
}

fn forget_leader(pid: i32) {
    if let Some(held) = children().as_mut() {
        held.leaders.remove(&pid);
    }
}

impl Leader {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A second descriptor of its pidfd, for a thread that `poll`s it: it becomes readable when
    /// the leader exits.
    pub fn pidfd(&self) -> io::Result<OwnedFd> {
        self.pidfd.try_clone()
    }

    /// Until the leader has exited (it is not reaped: see [`Leader::reap`]). Whoever polls its
    /// [`Leader::pidfd`] notifies `exited` when it becomes readable (a slow poll backs that up);
    /// without one (`None`), the exit is looked for every 20 ms.
    pub async fn exited(&mut self, exited: Option<&tokio::sync::Notify>) -> Exit {
        loop {
            if let Some(exit) = self.poll_exit() {
                return exit;
            }
            match exited {
                Some(exited) => tokio::select! {
                    () = exited.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                },
                None => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// How it ended, if it has, without reaping it.
    pub fn poll_exit(&mut self) -> Option<Exit> {
        if self.exit.is_none() {
            self.exit = peek(&self.pidfd);
        }
        self.exit
    }

    /// Signal its whole group. Safe at any time before [`Leader::reap`]: the leader, alive or a
    /// zombie, keeps the group id from being reused.
    fn signal_group(&self, signal: Signal) {
        if let Some(pgid) = Pid::from_raw(self.pid) {
            // ESRCH: nothing but the zombie leader is left.
            let _ = rustix::process::kill_process_group(pgid, signal);
        }
    }

    /// Let the leader go, once it has exited and nothing of its group is left: from here on its
    /// pid (and its group id) may be given to another process.
    pub fn reap(mut self) {
        self.release();
    }

    fn release(&mut self) {
        if self.reaped || self.poll_exit().is_none() {
            return;
        }
        let _ = rustix::process::waitid(
            WaitId::PidFd(self.pidfd.as_fd()),
            WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
        );
        self.reaped = true;
        forget_leader(self.pid);
    }
}

/// How the process of `pidfd` ended, if it has, leaving it unreaped.
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

impl Drop for Leader {
    /// Only an abandoned attempt drops its leader unreaped: if it has exited it is reaped (its
    /// group is no longer ours to signal), otherwise it stays held.
    fn drop(&mut self) {
        self.release();
    }
}

/// What belongs to one attempt.
pub struct Attempt<'a> {
    /// Its tag ([`TAG_VAR`]), inherited by all its descendants.
    pub tag: &'a str,
    /// Its process group (the leader's pid).
    pub group: Option<i32>,
    /// Its cgroup, if it has one.
    pub cgroup: Option<&'a AttemptCgroup>,
    /// After a crash, what was recorded of its leader: members of `group` are the attempt's
    /// only if they are in the recorded session and started after the leader (or the leader
    /// itself still runs), on the same boot.
    pub record: Option<&'a AttemptProcess>,
}

/// How a process of an attempt is signalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// Through the group (a member, while we hold the leader).
    Group,
    /// On its own, through a pidfd.
    Pidfd,
}

/// What is known of an attempt at one look: whether its recorded leader still runs, and who
/// is in its cgroup.
struct Look {
    leader_runs: bool,
    cgroup: HashSet<i32>,
}

impl Attempt<'_> {
    fn look(&self) -> Look {
        Look {
            leader_runs: self.record.is_some_and(still_running),
            cgroup: self
                .cgroup
                .map(|cg| cg.pids().into_iter().collect())
                .unwrap_or_default(),
        }
    }

    /// Whether `p` (alive) belongs to the attempt, and how it is to be signalled. `held`: we
    /// hold the leader, so the group's members are the attempt's and reached through it.
    fn owns(&self, p: &ProcStat, held: bool, look: &Look) -> Option<Via> {
        let in_group = self.group == Some(p.pgrp);
        if in_group && held {
            return Some(Via::Group);
        }
        let proven = in_group
            && self
                .record
                .is_some_and(|r| proven_member(r, p, look.leader_runs));
        (proven || look.cgroup.contains(&p.pid) || carries_tag(p.pid, self.tag))
            .then_some(Via::Pidfd)
    }

    /// The live processes of the attempt, each with how it is signalled.
    fn scan(&self, held: bool) -> Vec<(ProcStat, Via)> {
        let look = self.look();
        let me = std::process::id() as i32;
        processes()
            .filter(|p| !p.zombie && p.pid != me)
            .filter_map(|p| self.owns(&p, held, &look).map(|via| (p, via)))
            .collect()
    }

    /// Open a pidfd for `p` and check that it still is the process found and still the
    /// attempt's: only then may it be signalled through the pidfd.
    fn open(&self, p: &ProcStat, held: bool) -> Option<OwnedFd> {
        let pid = Pid::from_raw(p.pid)?;
        let fd = rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok()?;
        let now = read_stat(p.pid)?;
        (now.start == p.start && !now.zombie && self.owns(&now, held, &self.look()).is_some())
            .then_some(fd)
    }
}

/// Whether `p`, a member of the recorded group, is the attempt's: the group id cannot be
/// reused while the recorded leader still runs; otherwise a member must be in the session the
/// attempt's group was made in and have started after its leader, on the same boot.
fn proven_member(record: &AttemptProcess, p: &ProcStat, leader_runs: bool) -> bool {
    if leader_runs {
        return true;
    }
    boot_id().is_some_and(|b| b == record.boot_id)
        && record.sid == Some(p.session)
        && p.start >= record.leader_start
}

/// How an attempt's processes came to an end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ended {
    /// SIGKILL was needed.
    pub killed: bool,
    /// Processes of the attempt that were found (the leader excluded).
    pub found: usize,
}

/// End what is left of an attempt: SIGTERM once to each of its processes there at the start,
/// then, after `grace`, SIGKILL to whatever is left, again every second, until nothing of it is
/// left (a process
/// that survives SIGKILL — uninterruptible sleep — keeps this waiting: the attempt is not
/// over while it runs). With `leader`, its group is signalled through it; the leader is not
/// reaped here.
pub async fn end(attempt: &Attempt<'_>, mut leader: Option<&mut Leader>, grace: Duration) -> Ended {
    let held_leader = leader.is_some();
    let mut stop = Stop {
        attempt,
        held_leader,
        pidfds: HashMap::new(),
        seen: HashSet::new(),
    };
    // SIGTERM once, to what is there now: the group through its leader, the others one by one.
    // What is started after (a TERM handler's clean-up, say) is left to finish within the grace,
    // as a group signal would leave it.
    if let Some(l) = leader.as_deref() {
        l.signal_group(Signal::TERM);
    }
    let Some(left) = stop.look(leader.as_deref_mut()) else {
        return stop.ended(false);
    };
    stop.signal_new(left, Signal::TERM);
    let until = Instant::now() + grace;
    while Instant::now() < until {
        tokio::time::sleep(POLL).await;
        if stop.look(leader.as_deref_mut()).is_none() {
            return stop.ended(false);
        }
    }
    let killing = Instant::now();
    let mut warned = false;
    loop {
        if let Some(cg) = attempt.cgroup {
            cg.kill();
        }
        if let Some(l) = leader.as_deref() {
            l.signal_group(Signal::KILL);
        }
        stop.signal_held(Signal::KILL);
        let next = Instant::now() + KILL_AGAIN;
        while Instant::now() < next {
            tokio::time::sleep(POLL).await;
            match stop.look(leader.as_deref_mut()) {
                None => return stop.ended(true),
                Some(left) => stop.signal_new(left, Signal::KILL),
            }
        }
        if !warned && killing.elapsed() >= KILL_WARN {
            warned = true;
            tracing::warn!(
                tag = attempt.tag,
                "processes of a task attempt survive SIGKILL (uninterruptible sleep?); the \
                 attempt holds its locks until they are gone"
            );
        }
    }
}

/// One stop of an attempt in progress.
struct Stop<'a, 'b> {
    attempt: &'a Attempt<'b>,
    held_leader: bool,
    /// Processes signalled on their own, by (pid, start time): each gets SIGTERM once.
    pidfds: HashMap<(i32, u64), OwnedFd>,
    /// Every process of the attempt seen during the stop.
    seen: HashSet<(i32, u64)>,
}

impl Stop<'_, '_> {
    /// Reap what exited; `None` once nothing of the attempt is left (its leader, if held,
    /// exited), else the processes still there.
    fn look(&mut self, leader: Option<&mut Leader>) -> Option<Vec<(ProcStat, Via)>> {
        reap_orphans();
        self.reap_held();
        let leader_gone = leader.is_none_or(|l| l.poll_exit().is_some());
        let left = self.attempt.scan(self.held_leader);
        let cgroup_empty = self.attempt.cgroup.is_none_or(|cg| {
            cg.pids()
                .iter()
                .all(|p| read_stat(*p).is_none_or(|s| s.zombie))
        });
        self.seen.extend(left.iter().map(|(p, _)| (p.pid, p.start)));
        (!(leader_gone && left.is_empty() && cgroup_empty)).then_some(left)
    }

    /// Signal, through a pidfd, each process of its own not signalled yet (and hold it by its
    /// pidfd from then on).
    fn signal_new(&mut self, left: Vec<(ProcStat, Via)>, signal: Signal) {
        for (p, via) in left {
            if via != Via::Pidfd || self.pidfds.contains_key(&(p.pid, p.start)) {
                continue;
            }
            if let Some(fd) = self.attempt.open(&p, self.held_leader) {
                let _ = rustix::process::pidfd_send_signal(&fd, signal);
                self.pidfds.insert((p.pid, p.start), fd);
            }
        }
    }

    /// Signal every process held by a pidfd (a dead one is not hit: the pidfd names it).
    fn signal_held(&self, signal: Signal) {
        for fd in self.pidfds.values() {
            let _ = rustix::process::pidfd_send_signal(fd, signal);
        }
    }

    /// Reap the held processes that were re-parented to us (escapees) and have exited.
    fn reap_held(&self) {
        for fd in self.pidfds.values() {
            // ECHILD for those that are not our children: someone else reaps them.
            let _ = rustix::process::waitid(
                WaitId::PidFd(fd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
        }
    }

    fn ended(self, killed: bool) -> Ended {
        Ended {
            killed,
            found: self.seen.len(),
        }
    }
}

/// Whether an attempt whose leader exited may have left something running, cheaply (this runs
/// after every attempt): a process in its cgroup, or one of this process's children (what the
/// leader left was re-parented to us, the subreaper, and anything further down descends from
/// one of those) in its group or carrying its tag. Without `/proc/*/task/*/children`, every
/// process is looked at.
pub fn maybe_left_behind(attempt: &Attempt<'_>) -> bool {
    if attempt.cgroup.is_some_and(|cg| {
        cg.pids()
            .iter()
            .any(|p| read_stat(*p).is_some_and(|s| !s.zombie))
    }) {
        return true;
    }
    // Not a subreaper: what the leader left went to init, not to us.
    let children = own_children().filter(|_| SUBREAPER.load(Ordering::Relaxed));
    let Some(children) = children else {
        return !attempt.scan(true).is_empty();
    };
    children.into_iter().any(|pid| {
        read_stat(pid).is_some_and(|p| {
            !p.zombie && (attempt.group == Some(p.pgrp) || carries_tag(pid, attempt.tag))
        })
    })
}

/// Reap zombies this process adopted (it is a child subreaper): members of recent attempts'
/// groups and processes of other sessions (escapees that called `setsid`), among the children
/// of its main thread, where the kernel re-parents orphans. Attempt leaders are left alone
/// (held until their group is empty), and so is any other child in our own session and not in
/// an attempt's group — some other part of the process may wait for it. Where the kernel does
/// not list a thread's children, only members of attempts' groups are reaped.
pub fn reap_orphans() {
    let me = std::process::id() as i32;
    // From /proc, not getsid(2): in a pid namespace whose sessions began outside it, the
    // session id reads 0 there.
    let session = read_stat(me).map_or(0, |p| p.session);
    let guard = children();
    let Some(held) = guard.as_ref() else {
        return;
    };
    let (candidates, listed) = match own_children() {
        Some(children) => (children, true),
        None => (
            processes()
                .filter(|p| p.ppid == me)
                .map(|p| p.pid)
                .collect(),
            false,
        ),
    };
    for pid in candidates {
        if held.leaders.contains(&pid) {
            continue;
        }
        let Some(p) = read_stat(pid) else { continue };
        let ours = held.groups.contains(&p.pgrp) || (listed && p.session != session);
        if p.zombie && p.ppid == me && ours {
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::NOHANG);
            }
        }
    }
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

/// End what is still running of an attempt that a previous daemon started: the processes
/// carrying its tag, in its cgroup (if it had one and it is still there), and the members of
/// its recorded group shown to be its (see [`Attempt::record`]). Each through a pidfd:
/// SIGTERM, up to `grace`, then SIGKILL. Returns how many processes there were.
pub async fn end_leftovers(
    tag: &str,
    record: Option<&AttemptProcess>,
    cgroup: Option<&AttemptCgroup>,
    grace: Duration,
) -> usize {
    let attempt = Attempt {
        tag,
        group: record.map(|r| r.pgid),
        cgroup,
        record,
    };
    if attempt.scan(false).is_empty() {
        return 0;
    }
    end(&attempt, None, grace).await.found
}

/// Make this process a child subreaper, so that orphaned descendants of attempts are
/// re-parented to it rather than to init. Once, at start-up, before any attempt runs.
pub fn become_subreaper() -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(io::Error::from)?;
    SUBREAPER.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether this process is a child subreaper ([`become_subreaper`]).
static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Whether this kernel has pidfds (Linux 5.3), which attempts need: checked at start-up.
pub fn pidfds_supported() -> io::Result<()> {
    rustix::process::pidfd_open(rustix::process::getpid(), PidfdFlags::empty())
        .map(drop)
        .map_err(io::Error::from)
}

/// The process group, start time, session and boot of a just-started leader, from `/proc`.
pub fn describe(pid: i32) -> Option<AttemptProcess> {
    let stat = read_stat(pid)?;
    Some(AttemptProcess {
        pgid: stat.pgrp,
        leader_start: stat.start,
        boot_id: boot_id()?,
        sid: Some(stat.session),
    })
}

/// Where this process's children can be seen from: `MACHINE/BOOT/PIDNS` (the machine's id,
/// this boot's id, this pid namespace). Another daemon with the same identity sees the same
/// processes in `/proc`; any other does not. Parts that cannot be read are left empty.
pub fn host_identity() -> String {
    let machine = ["/etc/machine-id", "/var/lib/dbus/machine-id"]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.display().to_string())
        .unwrap_or_default();
    format!("{machine}/{}/{pid_ns}", boot_id().unwrap_or_default())
}

/// Whether the executor `id` (`host:pid:run`), an earlier run on this host, is certainly gone:
/// no live process has its pid any more, or this process has it. A live process with that pid
/// may be it or another: not gone, as far as anyone can tell.
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
    let here = host_identity();
    let mut theirs = host.splitn(3, '/');
    let mut ours = here.splitn(3, '/');
    let (Some(machine), Some(boot)) = (theirs.next(), theirs.next()) else {
        return false;
    };
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

/// Whether the leader recorded in `process` is still running on this host: same boot, a
/// process with that pid and the same start time (so a reused pid is never taken for it).
pub fn still_running(process: &AttemptProcess) -> bool {
    boot_id().is_some_and(|b| b == process.boot_id)
        && read_stat(process.pgid).is_some_and(|s| !s.zombie && s.start == process.leader_start)
}

/// Whether process `pid` carries `TAG_VAR=tag` in its environment.
fn carries_tag(pid: i32, tag: &str) -> bool {
    let needle = format!("{TAG_VAR}={tag}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
        .unwrap_or(false)
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

fn processes() -> impl Iterator<Item = ProcStat> {
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
    fn a_process_is_recognised_by_its_start_time() {
        let me = describe(std::process::id() as i32).expect("this process");
        let mine = AttemptProcess {
            pgid: std::process::id() as i32,
            ..me
        };
        assert!(still_running(&mine));
        let reused = AttemptProcess {
            leader_start: mine.leader_start + 1,
            ..mine.clone()
        };
        assert!(!still_running(&reused), "same pid, another start: not ours");
        let other_boot = AttemptProcess {
            boot_id: "another boot".into(),
            ..mine
        };
        assert!(!still_running(&other_boot));
    }

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
    fn a_group_member_after_a_crash_needs_the_session_and_a_later_start() {
        let record = AttemptProcess {
            pgid: 500,
            leader_start: 1000,
            boot_id: boot_id().expect("boot id"),
            sid: Some(77),
        };
        let member = ProcStat {
            pid: 501,
            ppid: 1,
            pgrp: 500,
            session: 77,
            start: 1001,
            zombie: false,
        };
        assert!(proven_member(&record, &member, false));
        // A reused group id: made by setsid (its own session), or older than the leader.
        assert!(!proven_member(
            &record,
            &ProcStat {
                session: 500,
                ..member
            },
            false
        ));
        assert!(!proven_member(
            &record,
            &ProcStat {
                start: 999,
                ..member
            },
            false
        ));
        // Without a recorded session only a still running leader proves the group.
        let old = AttemptProcess {
            sid: None,
            ..record.clone()
        };
        assert!(!proven_member(&old, &member, false));
        assert!(proven_member(&old, &member, true));
        let elsewhere = AttemptProcess {
            boot_id: "another boot".into(),
            ..record
        };
        assert!(!proven_member(&elsewhere, &member, false));
    }
}
