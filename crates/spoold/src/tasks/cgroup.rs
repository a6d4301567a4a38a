//! cgroup v2 containment of task attempts: each attempt in a cgroup of its own below a root the
//! daemon may write (a delegated subtree), so that ending it is one write to `cgroup.kill`,
//! whatever its processes did to leave their group or clear their environment.
//!
//! Optional: without a usable root, attempts are contained by their supervisor alone (see
//! `supervisor.rs`), whose descendants they are.

use std::io;
use std::path::{Path, PathBuf};

/// A cgroup v2 directory below which each attempt gets a cgroup of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupRoot(PathBuf);

/// How `--task-cgroup` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupChoice {
    /// The daemon's own cgroup, if it is delegated (writable, not the hierarchy's root).
    Auto,
    Off,
    Path(PathBuf),
}

impl std::str::FromStr for CgroupChoice {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => CgroupChoice::Auto,
            "off" => CgroupChoice::Off,
            path => CgroupChoice::Path(PathBuf::from(path)),
        })
    }
}

impl CgroupRoot {
    /// Check that `dir` is a cgroup v2 directory where children can be made and killed whole
    /// (`cgroup.kill`, Linux 5.14): a probe child is created and removed.
    pub fn open(dir: &Path) -> io::Result<CgroupRoot> {
        if !dir.join("cgroup.procs").exists() {
            return Err(io::Error::other(format!(
                "{} is not a cgroup v2 directory",
                dir.display()
            )));
        }
        let probe = dir.join(format!("spoold-probe-{}", std::process::id()));
        std::fs::create_dir(&probe).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot create cgroups in {}: {e}", dir.display()),
            )
        })?;
        let killable = probe.join("cgroup.kill").exists();
        let _ = std::fs::remove_dir(&probe);
        if !killable {
            return Err(io::Error::other(
                "the kernel has no cgroup.kill (Linux 5.14+)",
            ));
        }
        Ok(CgroupRoot(dir.to_path_buf()))
    }

    /// The daemon's own cgroup, if it is delegated to it: not the hierarchy's root, and
    /// children can be created in it.
    pub fn detect() -> Option<CgroupRoot> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = own.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
        if path == "/" || path.is_empty() {
            return None;
        }
        let mount = cgroup2_mount()?;
        CgroupRoot::open(&mount.join(path.trim_start_matches('/'))).ok()
    }

    /// Resolve `--task-cgroup`.
    pub fn choose(choice: &CgroupChoice) -> io::Result<Option<CgroupRoot>> {
        match choice {
            CgroupChoice::Off => Ok(None),
            CgroupChoice::Auto => Ok(CgroupRoot::detect()),
            CgroupChoice::Path(dir) => CgroupRoot::open(dir).map(Some),
        }
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Where the cgroup v2 hierarchy is mounted.
fn cgroup2_mount() -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let fstype = right.split_whitespace().next()?;
        if fstype != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// One attempt's cgroup.
#[derive(Debug)]
pub struct AttemptCgroup(PathBuf);

impl AttemptCgroup {
    pub fn create(root: &CgroupRoot, tag: &str) -> io::Result<AttemptCgroup> {
        let dir = root.0.join(format!("spoold-{tag}"));
        std::fs::create_dir(&dir)?;
        Ok(AttemptCgroup(dir))
    }

    /// The cgroup an attempt of a previous daemon left, if it is still there.
    pub fn existing(root: &CgroupRoot, tag: &str) -> Option<AttemptCgroup> {
        let dir = root.0.join(format!("spoold-{tag}"));
        dir.join("cgroup.procs")
            .exists()
            .then_some(AttemptCgroup(dir))
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The processes in it.
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// SIGKILL to every process in it, at once.
    pub fn kill(&self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
    }

    /// Remove it once it is empty (a few tries: the kernel empties it asynchronously).
    pub async fn remove(self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tracing::warn!(cgroup = %self.0.display(), "could not remove an attempt's cgroup");
    }
}
