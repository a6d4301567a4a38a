//! The supervisor of one task attempt, one per attempt — as conmon and containerd-shim are for
//! containers: the program `spoold-attempt` installed beside the daemon
//! (`spoold-attempt --supervise-attempt`, `src/bin/spoold-attempt.rs`), or `spoold` itself
//! re-executed in a mode of its own (`spoold --supervise-attempt`); the same code either way.
//! It owns the attempt's processes by parenthood, so that no one ever has to guess which
//! processes an attempt left behind.
//!
//! **What it guarantees.**
//! - It is a child subreaper and spawns the attempt's program: every process of the attempt
//!   descends from it, and whatever is orphaned below it (`setsid`, a double fork, `nohup`) is
//!   re-parented to it. Its descendants are exactly the attempt's processes.
//! - It ends the attempt by signalling only its descendants, each proven to be one
//!   ([`processes`]), and it exits only when it has none left (and its leader has exited).
//! - It holds an exclusive `flock` on its record file from before it starts the program to its
//!   own exit, and every process of the attempt inherits that open file (not close-on-exec),
//!   so the lock is free only when it and every process of the attempt are gone — also when the
//!   supervisor was killed; just before it exits, it tells its daemon how the attempt ended
//!   ([`Record`]) or, when the daemon is gone, writes it into that file for the next one.
//! - It learns that its daemon died from the end of its control socket (the daemon holds the
//!   only other end) and then ends the attempt on its own, at once. It never starts the program
//!   once the daemon is gone. A restarted daemon signals nothing: it waits for the lock, reads
//!   the record, and settles the attempt.
//! - It keeps its own deadlines: the attempt's timeout and, on a store other hosts share, the
//!   lease the daemon last renewed (counted on `CLOCK_BOOTTIME` from before the renewal was
//!   sent). A daemon that is paused cannot keep an attempt alive past its lease: the supervisor
//!   sends SIGTERM a second before the lease ends and SIGKILL a kill grace later, and kills at
//!   once if it finds the lease already over.
//!
//! **Protocol.** The daemon spawns it with its control socket (a unix stream socket) as stdin,
//! and sends one line of JSON ([`Spec`]) together with two descriptors (`SCM_RIGHTS`): the write
//! end of the attempt's output pipe — given to the program as both stdout and stderr, one
//! ordered stream — and the read end, which the supervisor only reads (and drops) once the
//! daemon is gone, so that a clean-up that prints is not killed by SIGPIPE. Then, as lines:
//! `stop` (end the attempt: an operator's cancel, the daemon's shutdown, a lost lease),
//! `lease MS` (the lease now runs until `CLOCK_BOOTTIME` MS) and `ping` (answered `pong` at
//! once: a supervisor that does not answer is silent — stopped, hung — and the daemon ends the
//! attempt itself when it is to end). Back on the socket go `pid N` once the program runs (the
//! attempt's process group, should the supervisor be killed), `term` once it has sent SIGTERM
//! to the attempt (so that whoever ends what a killed supervisor left sends none again), and
//! `record JSON` as it exits. No file is written while the daemon lives.
//!
//! The supervisor runs no async runtime and no logging: one thread, `poll(2)`, a few files.

use std::io::{IoSliceMut, Seek as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};

use super::processes::{self, Child, Scope, Stop};
use super::supervision::{boottime, Record, Spec, StopReason, LEASE_SAFETY};

/// The longest spec accepted (the environment is most of it).
const MAX_SPEC: usize = 16 << 20;

/// How often a stop looks at what is left.
const STOP_POLL: Duration = Duration::from_millis(20);

/// While the attempt runs with orphans adopted, how often their exits are reaped.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// The supervisor's `main`: `spoold-attempt --supervise-attempt` or `spoold
/// --supervise-attempt`, with the control socket as stdin.
/// Exit 0 once the record is told or written; 2 if the daemon sent no usable spec; 3 if the
/// record file cannot be had.
pub fn main() -> ExitCode {
    let _ = rustix::thread::set_name(c"spoold-attempt");
    let control = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => return fail(2, &format!("no control socket: {e}")),
    };
    let (spec, output, rest) = match receive(&control) {
        Ok(received) => received,
        Err(e) => return fail(2, &e),
    };
    let file = match take_record(&spec.record) {
        Ok(file) => file,
        Err(e) => return fail(3, &format!("{}: {e}", spec.record.display())),
    };
    let mut control = Control {
        fd: control,
        buf: rest,
        gone: false,
    };
    if let Err(e) = rustix::fs::fcntl_setfl(&control.fd, rustix::fs::OFlags::NONBLOCK) {
        return fail(2, &format!("control socket: {e}"));
    }
    let early = control.read();
    if control.gone {
        // The daemon died before the program started: it never will. Whoever settles the
        // attempt finds no record.
        let _ = std::fs::remove_file(&spec.record);
        return ExitCode::SUCCESS;
    }
    let record = Record {
        over: true,
        ..supervise(&spec, output, &mut control, early)
    };
    // The record goes into the file, and a live daemon is also told on the socket (it reads
    // what is there once this process is gone). The file stays until that daemon has recorded
    // the attempt's end: should it die first, the next one finds how the attempt ended there —
    // and a missing file always means that the program never started.
    let written = write_record(&file, &record);
    if !control.gone && control.tell(&record_line(&record)) {
        return ExitCode::SUCCESS;
    }
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(3, &format!("cannot write {}: {e}", spec.record.display())),
    }
}

/// `record JSON\n`: how the attempt ended, told to a live daemon on the control socket.
fn record_line(record: &Record) -> Vec<u8> {
    let mut line = b"record ".to_vec();
    line.extend(serde_json::to_vec(record).unwrap_or_default());
    line.push(b'\n');
    line
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("spoold supervisor: {message}");
    ExitCode::from(code)
}

/// The attempt's output pipe, as the daemon passed it.
struct Output {
    write: OwnedFd,
    read: OwnedFd,
}

/// Receive the spec line and the two descriptors; what followed the line on the socket.
fn receive(control: &OwnedFd) -> Result<(Spec, Output, Vec<u8>), String> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut received = Vec::new();
    let mut fds: Vec<OwnedFd> = Vec::new();
    loop {
        let n = {
            let mut iov = [IoSliceMut::new(&mut chunk)];
            match rustix::net::recvmsg(control, &mut iov, &mut ancillary, RecvFlags::CMSG_CLOEXEC) {
                Ok(msg) => msg.bytes,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(format!("reading the spec: {e}")),
            }
        };
        for message in ancillary.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if n == 0 {
            return Err("the daemon closed the control socket before sending a spec".into());
        }
        received.extend_from_slice(&chunk[..n]);
        if let Some(end) = received.iter().position(|b| *b == b'\n') {
            let rest = received.split_off(end + 1);
            let spec: Spec = serde_json::from_slice(&received[..end])
                .map_err(|e| format!("the spec is not valid: {e}"))?;
            let mut fds = fds.into_iter();
            let (Some(write), Some(read)) = (fds.next(), fds.next()) else {
                return Err("the daemon sent no output pipe".into());
            };
            return Ok((spec, Output { write, read }, rest));
        }
        if received.len() > MAX_SPEC {
            return Err(format!("the spec is longer than {MAX_SPEC} bytes"));
        }
    }
}

/// Create (or open) the record file, private, and lock it for this process's life.
fn take_record(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
    file.set_len(0)?;
    // Inherited by the program and everything it starts, across `exec`: the lock (on this
    // open file, shared by every copy of the descriptor) is free only once the supervisor and
    // every process of the attempt are gone, whoever killed the supervisor; and a process that
    // holds the file is the attempt's (`processes::holders`).
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty())?;
    Ok(file)
}

/// Write `record` over what the file held (the lock is released as the process exits).
fn write_record(mut file: &std::fs::File, record: &Record) -> std::io::Result<()> {
    let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    file.rewind()?;
    file.write_all(&text)?;
    file.set_len(text.len() as u64)?;
    Ok(())
}

/// A message from the daemon.
#[derive(Debug, PartialEq, Eq)]
enum Message {
    Stop,
    /// The daemon asks whether this supervisor is there: answered `pong` at once.
    Ping,
    /// The lease runs until this `CLOCK_BOOTTIME` time.
    Lease(Duration),
}

/// The control socket, read without blocking.
struct Control {
    fd: OwnedFd,
    buf: Vec<u8>,
    /// The daemon closed its end (it died, or let the attempt go).
    gone: bool,
}

impl Control {
    /// Tell the daemon `line`, whole; `false` if it could not be (the daemon is gone).
    fn tell(&mut self, line: &[u8]) -> bool {
        let mut sent = 0;
        while sent < line.len() {
            match rustix::net::send(&self.fd, &line[sent..], rustix::net::SendFlags::NOSIGNAL) {
                Ok(n) => sent += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    let mut fds = [PollFd::new(&self.fd, PollFlags::OUT)];
                    let second = rustix::time::Timespec {
                        tv_sec: 1,
                        tv_nsec: 0,
                    };
                    let _ = poll(&mut fds, Some(&second));
                }
                Err(_) => {
                    self.gone = true;
                    return false;
                }
            }
        }
        true
    }

    /// Every whole message that has arrived.
    fn read(&mut self) -> Vec<Message> {
        let mut chunk = [0u8; 4096];
        while !self.gone {
            match rustix::io::read(&self.fd, &mut chunk) {
                Ok(0) => self.gone = true,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => self.gone = true,
            }
        }
        let mut messages = Vec::new();
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line[..end]);
            match line.split_once(' ') {
                None if line == "stop" => messages.push(Message::Stop),
                None if line == "ping" => messages.push(Message::Ping),
                Some(("lease", ms)) => {
                    if let Ok(ms) = ms.parse::<u64>() {
                        messages.push(Message::Lease(Duration::from_millis(ms)));
                    }
                }
                _ => {}
            }
        }
        if self.buf.len() > MAX_SPEC {
            self.buf.clear();
        }
        messages
    }
}

/// Run the attempt to its end.
fn supervise(spec: &Spec, output: Output, control: &mut Control, early: Vec<Message>) -> Record {
    let started = boottime();
    let mut record = Record::default();
    if let Err(e) = processes::become_subreaper() {
        record.spawn_error = Some(format!("cannot become a child subreaper: {e}"));
        return record;
    }
    let Output { write, read } = output;
    let mut leader = match super::exec::spawn_program(spec, write) {
        Ok(leader) => leader,
        Err(why) => {
            record.spawn_error = Some(why);
            record.duration_ms = (boottime() - started).as_millis() as u64;
            return record;
        }
    };
    record.pid = Some(leader.pid() as u32);
    // The attempt's process group, for a daemon that finds this process killed before it
    // could tell how the attempt ended (it reads the socket then).
    control.tell(format!("pid {}\n", leader.pid()).as_bytes());
    let grace = Duration::from_millis(spec.kill_grace_ms);
    let deadline = started + Duration::from_millis(spec.timeout_ms);
    let mut run = Run {
        lease: None,
        stop: None,
        stopped: None,
        grace,
        cgroup: spec.cgroup.clone(),
    };
    if let Err(e) = rustix::fs::fcntl_setfl(&read, rustix::fs::OFlags::NONBLOCK) {
        // Not drained after the daemon is gone: a script that prints then gets SIGPIPE.
        eprintln!("spoold supervisor: output pipe: {e}");
    }
    let mut messages = early;
    let mut output_open = true;
    let mut told_term = false;
    loop {
        let now = boottime();
        let mut pinged = false;
        for message in messages.drain(..) {
            match message {
                Message::Stop => run.stop_for(StopReason::Requested, &leader, now),
                Message::Ping => pinged = true,
                Message::Lease(until) => run.lease = Some(until),
            }
        }
        if pinged && !control.gone {
            control.tell(b"pong\n");
        }
        if control.gone {
            run.stop_for(StopReason::DaemonGone, &leader, now);
        }
        if let (Some(stop), Some(until)) = (run.stop.as_mut(), run.lease) {
            // Killed by the grace counted from a second before the lease's end (SIGTERM went
            // then, or earlier), whenever the stop began: a lease that runs out during the
            // grace does not cut it short — the attempt is gone by that time, and another host
            // frees its locks only after it (`RELEASE_MARGIN_MS` later). A stop that began
            // with the lease already over kills at once (`Run::stop_for`).
            stop.kill_by(until.saturating_sub(LEASE_SAFETY) + grace);
        }
        match run.stop.as_mut() {
            Some(stop) => {
                if !told_term && stop.term_sent() && !control.gone {
                    // Should this process be killed during the grace, the daemon that ends
                    // what it leaves sends no second SIGTERM.
                    told_term = true;
                    control.tell(b"term\n");
                }
                if stop.step(Some(&mut leader), now) {
                    break;
                }
            }
            None => {
                if leader.poll_exit().is_some() {
                    // It exited by itself: anything it left behind is ended the same way.
                    if processes::descendants(Some(&leader), Scope::All)
                        .iter()
                        .all(|d| d.pid == leader.pid())
                    {
                        break;
                    }
                    run.stop = Some(Stop::begin(
                        Some(&leader),
                        Scope::All,
                        now,
                        now + grace,
                        run.cgroup.clone(),
                    ));
                    continue;
                }
                if now >= deadline {
                    run.stop_for(StopReason::Timeout, &leader, now);
                    continue;
                }
                if run.lease.is_some_and(|until| now + LEASE_SAFETY >= until) {
                    run.stop_for(StopReason::Lease, &leader, now);
                    continue;
                }
            }
        }
        // Wait for the next thing to happen: a message, the program's exit, a deadline, output
        // to drop once the daemon is gone, or the next look of a stop.
        let wait = match &run.stop {
            Some(_) => STOP_POLL,
            None => {
                let mut until = deadline;
                if let Some(lease) = run.lease {
                    until = until.min(lease.saturating_sub(LEASE_SAFETY));
                }
                let mut wait = until.saturating_sub(now);
                if processes::reap_children(&leader) {
                    // Adopted orphans are reaped as they exit, at this pace.
                    wait = wait.min(REAP_EVERY);
                }
                wait.max(Duration::from_millis(1))
            }
        };
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        if !control.gone {
            fds.push(PollFd::new(&control.fd, PollFlags::IN));
        }
        if run.stop.is_none() {
            fds.push(PollFd::new(leader.pidfd(), PollFlags::IN));
        }
        if control.gone && output_open {
            fds.push(PollFd::new(&read, PollFlags::IN));
        }
        let timeout = rustix::time::Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: wait.subsec_nanos() as _,
        };
        let _ = poll(&mut fds, Some(&timeout));
        drop(fds);
        if control.gone {
            if output_open {
                let (dropped, open) = drain(&read);
                record.output_dropped += dropped;
                output_open = open;
            }
        } else {
            messages = control.read();
        }
    }
    let exit = leader.reap().unwrap_or_default();
    record.exit_code = exit.code;
    record.signal = exit.signal;
    record.stopped = run.stopped;
    if let Some(stop) = &run.stop {
        let ended = stop.ended();
        record.killed = ended.killed;
        record.processes = ended.found as u64;
    }
    if control.gone && output_open {
        record.output_dropped += drain(&read).0;
    }
    record.duration_ms = (boottime() - started).as_millis() as u64;
    record
}

/// The state of a running attempt's stop.
struct Run {
    /// The lease's end, as the daemon last said (shared stores only).
    lease: Option<Duration>,
    stop: Option<Stop>,
    /// Why the supervisor began stopping it (not set when it exited by itself first).
    stopped: Option<StopReason>,
    grace: Duration,
    cgroup: Option<PathBuf>,
}

impl Run {
    /// Begin stopping the attempt for `why`, unless a stop is under way (SIGTERM once).
    fn stop_for(&mut self, why: StopReason, leader: &Child, now: Duration) {
        if self.stop.is_some() {
            return;
        }
        let mut kill_at = now + self.grace;
        if let Some(until) = self.lease {
            kill_at = if now >= until {
                now
            } else {
                kill_at.min(until.saturating_sub(LEASE_SAFETY) + self.grace)
            };
        }
        self.stopped = Some(why);
        self.stop = Some(Stop::begin(
            Some(leader),
            Scope::All,
            now,
            kill_at,
            self.cgroup.clone(),
        ));
    }
}

/// Read and drop what is in the output pipe: the bytes dropped, and whether a writer is left.
fn drain(read: &OwnedFd) -> (u64, bool) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut dropped = 0;
    loop {
        match rustix::io::read(read, &mut chunk) {
            Ok(0) => return (dropped, false),
            Ok(n) => dropped += n as u64,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return (dropped, true),
            Err(_) => return (dropped, false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::supervision::read_record;

    #[test]
    fn messages_are_read_whole_lines_at_a_time() {
        let (ours, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            None,
        )
        .expect("socketpair");
        let mut control = Control {
            fd: theirs,
            buf: b"lease 12".to_vec(),
            gone: false,
        };
        rustix::io::write(&ours, b"345\nst").expect("write");
        assert_eq!(
            control.read(),
            vec![Message::Lease(Duration::from_millis(12345))]
        );
        rustix::io::write(&ours, b"op\nnonsense\n").expect("write");
        assert_eq!(control.read(), vec![Message::Stop]);
        assert!(!control.gone);
        drop(ours);
        assert_eq!(control.read(), vec![]);
        assert!(control.gone, "the daemon's end closed");
    }

    #[test]
    fn a_record_file_is_read_once_its_lock_is_free() {
        let dir = tempfile_dir();
        let path = dir.join("t-1");
        assert_eq!(read_record(&path).expect("no file"), None);
        let file = take_record(&path).expect("lock");
        assert!(read_record(&path).is_err(), "held by its supervisor");
        let record = Record {
            over: true,
            pid: Some(7),
            exit_code: Some(0),
            stopped: Some(StopReason::DaemonGone),
            ..Record::default()
        };
        write_record(&file, &record).expect("write");
        drop(file);
        assert_eq!(read_record(&path).expect("free"), Some(record));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "spoold-supervisor-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }
}
