//! What the numbers were measured on: CPU, memory, kernel, the filesystem under the data
//! directory (tmpfs would make every fsync free), and the source revision.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

/// The machine, as far as `/proc` tells.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_bytes: u64,
    pub kernel: String,
}

/// The filesystem holding a directory.
#[derive(Debug, Clone, Serialize)]
pub struct Filesystem {
    /// `statfs` f_type, as a name where known.
    pub kind: String,
    /// True for filesystems that live in memory (tmpfs, ramfs): fsync costs nothing there.
    pub in_memory: bool,
}

pub fn describe() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    Machine {
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        cpu_model: cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|rest| rest.split_once(':'))
            .map_or_else(|| "unknown".to_owned(), |(_, m)| m.trim().to_owned()),
        memory_bytes: meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map_or_else(|_| "unknown".to_owned(), |k| k.trim().to_owned()),
    }
}

/// The filesystem of `dir` (which must exist).
pub fn filesystem(dir: &Path) -> anyhow::Result<Filesystem> {
    let st = rustix::fs::statfs(dir)?;
    // The magic numbers of statfs(2).
    let (kind, in_memory) = match st.f_type as u64 {
        0x0102_1994 => ("tmpfs", true),
        0x8584_58f6 => ("ramfs", true),
        0xef53 => ("ext2/3/4", false),
        0x5846_5342 => ("xfs", false),
        0x9123_683e => ("btrfs", false),
        0x2fc1_2fc1 => ("zfs", false),
        0x794c_7630 => ("overlayfs", false),
        0x6573_5546 => ("fuse", false),
        0x0000_6969 => ("nfs", false),
        0xf2f5_2010 => ("f2fs", false),
        other => return Ok(unknown(other)),
    };
    Ok(Filesystem {
        kind: kind.to_owned(),
        in_memory,
    })
}

fn unknown(magic: u64) -> Filesystem {
    Filesystem {
        kind: format!("unknown (0x{magic:x})"),
        in_memory: false,
    }
}

/// `git rev-parse HEAD` of the working directory, if it is a git checkout. Read-only: nothing
/// that could refresh the index is run.
pub fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}
