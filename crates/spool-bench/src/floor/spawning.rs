//! The spawning floor's process: `concurrency` threads, each starting `/bin/true` with
//! `std::process::Command` — which on glibc is `posix_spawn` (a `clone` with `CLONE_VM |
//! CLONE_VFORK`, then `execve`), as spoold starts an attempt's supervisor: environment
//! cleared, standard streams on `/dev/null`, a process group of its own — then opening its
//! pidfd and waiting for it with `waitid(P_PIDFD, WEXITED)`, which reaps it, so its CPU is
//! counted in this process's `cutime + cstime`.

use std::os::fd::AsFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context as _};
use rustix::process::{pidfd_open, waitid, Pid, PidfdFlags, WaitId, WaitIdOptions};

/// Run `program` `count` times at `concurrency`, once told to go.
pub fn run(program: &Path, count: u64, concurrency: usize) -> anyhow::Result<()> {
    super::ready_go_done(|| {
        let next = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..concurrency.max(1))
                .map(|_| {
                    scope.spawn(|| {
                        while next.fetch_add(1, Ordering::Relaxed) < count {
                            spawn_and_reap(program)?;
                        }
                        anyhow::Ok(())
                    })
                })
                .collect();
            for worker in workers {
                match worker.join() {
                    Ok(outcome) => outcome?,
                    Err(_) => bail!("a spawning thread panicked"),
                }
            }
            Ok(())
        })
    })
}

/// Start `program`, wait for it through its pidfd and reap it; it must exit 0.
fn spawn_and_reap(program: &Path) -> anyhow::Result<()> {
    let child = Command::new(program)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .with_context(|| format!("start {}", program.display()))?;
    let pid = Pid::from_child(&child);
    let pidfd = pidfd_open(pid, PidfdFlags::empty()).context("pidfd_open")?;
    let status = waitid(WaitId::PidFd(pidfd.as_fd()), WaitIdOptions::EXITED)
        .context("waitid")?
        .context("waitid without a status")?;
    if status.exit_status() != Some(0) {
        bail!("{} ended {status:?}", program.display());
    }
    Ok(())
}
