//! A helper program run in a process group of its own (a browser driver and the browser it
//! starts, say): bounded by a timeout, and its whole group killed when it ends, whatever the
//! program left behind — so a test leaves no process after it.

use std::process::Output;
use std::time::Duration;

use anyhow::Context as _;

/// Run `command` in a new process group, capture its output, and kill the group when it
/// exits or after `timeout` (an error then).
pub async fn run_in_group(
    mut command: tokio::process::Command,
    timeout: Duration,
) -> anyhow::Result<Output> {
    command
        .process_group(0)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn().context("spawn")?;
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw);
    let outcome = tokio::time::timeout(timeout, child.wait_with_output()).await;
    // A group id stays reserved while any member lives: a member found in it now proves the
    // group is still the one this program started, and the signal reaches only it.
    if let Some(pgid) = pgid {
        if !members(pgid.as_raw_nonzero().get()).is_empty() {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
    match outcome {
        Ok(output) => output.context("wait"),
        Err(_) => anyhow::bail!("still running after {timeout:?}: killed"),
    }
}

/// The live processes in process group `pgid`, found through `/proc`.
pub fn members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                // After the command name (in parentheses, which may hold anything): state, ppid, pgrp.
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(2)?.parse::<i32>().ok())
                    == Some(pgid)
            })
        })
        .collect()
}
