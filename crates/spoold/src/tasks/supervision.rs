//! What a task attempt's supervisor ([`super::supervisor`]) and its daemon ([`super::exec`])
//! tell each other: the spec the daemon sends (what to run), the record the supervisor leaves
//! (how it ended), and the clock their deadlines are on. Below both, so that neither imports
//! the other.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The argument that starts `spoold` (or [`PROGRAM`]) as an attempt's supervisor.
pub const ARG: &str = "--supervise-attempt";

/// The supervisor as a program of its own, installed beside `spoold`: the same code as
/// `spoold --supervise-attempt`, in an executable that carries nothing else, so that starting
/// one per attempt costs a fraction of re-executing the daemon's binary.
pub const PROGRAM: &str = "spoold-attempt";

/// What the daemon and its supervisors say to each other: the [`Spec`] line, the control lines
/// (`stop`, `lease MS`, `ping`), the `pid`, `term`, `pong` and `record` lines and [`Record`]. Raise it with any change
/// to one of them: a daemon uses a [`PROGRAM`] only if it speaks the same version (see
/// [`version_line`]).
pub const PROTOCOL: u32 = 2;

/// What `spoold-attempt --version` prints: the package version and the protocol. A daemon
/// starts supervisors from a [`PROGRAM`] whose line is exactly its own.
pub fn version_line() -> String {
    format!(
        "{PROGRAM} {} (supervisor protocol {PROTOCOL})",
        env!("CARGO_PKG_VERSION")
    )
}

/// How long before a lease ends the supervisor stops its attempt (SIGTERM); SIGKILL follows
/// the kill grace later, so the attempt is gone by the lease's end plus the kill grace less
/// this, which is when another host may free its locks (less a margin of its own).
pub const LEASE_SAFETY: Duration = Duration::from_secs(1);

/// What to run: sent by the daemon as the first line on the control socket.
#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    /// argv: element 0 is the program (an absolute path).
    pub argv: Vec<String>,
    /// The whole environment of the program (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub working_dir: Option<PathBuf>,
    /// Run as this user and group.
    pub run_as: Option<(u32, u32)>,
    pub timeout_ms: u64,
    pub kill_grace_ms: u64,
    /// The attempt's cgroup directory: the program moves itself in before it runs, and the
    /// cgroup is killed whole with the SIGKILLs.
    pub cgroup: Option<PathBuf>,
    /// The record file: locked for the supervisor's life, written just before it exits; every
    /// process of the attempt inherits it open (the lock is free only when all are gone).
    pub record: PathBuf,
}

/// How an attempt ended, as its supervisor saw it (`over`: it finished). Told to its daemon on
/// the control socket just before the supervisor exits — or, when the daemon is gone by then,
/// written into the record file, so that a daemon started after a crash knows as much as the
/// one that started the attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The supervisor finished: the attempt is over and this is how it ended.
    pub over: bool,
    /// The program's pid (the leader of its process group).
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why the supervisor stopped the attempt, if it did (before the program exited by itself).
    pub stopped: Option<StopReason>,
    /// SIGKILL was needed.
    pub killed: bool,
    /// Processes of the attempt the supervisor found running when it stopped it (its leader
    /// included) or that the leader left behind.
    pub processes: u64,
    /// The program could not be started.
    pub spawn_error: Option<String>,
    pub duration_ms: u64,
    /// Output written after the daemon was gone (read and dropped: no one could store it).
    pub output_dropped: u64,
}

/// Why a supervisor stopped its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It ran past its timeout.
    Timeout,
    /// The daemon asked (`stop`).
    Requested,
    /// Its lease would have run out: the daemon did not renew it in time.
    Lease,
    /// The daemon is gone.
    DaemonGone,
}

/// What a record file says, once its lock is free: `Ok(None)` if there is no file (its
/// supervisor never started the program, or told a live daemon instead); a record that is not
/// `over` if the file says nothing whole (its supervisor died before it finished); `Err` while
/// the file is held — by its supervisor, or by any process of the attempt, each of which
/// inherits it.
pub fn read_record(path: &Path) -> std::io::Result<Option<Record>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared)?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(Some(serde_json::from_str(&text).unwrap_or_default()))
}

/// `CLOCK_BOOTTIME`: the clock of every deadline here (it keeps counting while the machine
/// is suspended, so a deadline that passed meanwhile is seen as passed).
pub fn boottime() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}
