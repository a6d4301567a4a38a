//! Host set-up for tests that need privileges (root, network namespaces, mounts). Such a test
//! runs where it can; where it cannot, it says why on stderr and passes, unless the environment
//! variable that requires it is `1` (CI sets it): then the missing privilege is a failure, so
//! a test can never be skipped silently where it matters.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _};

/// The result of a privileged test's set-up, or `None` when the set-up could not be done and
/// the test should return at once (after saying why: [`crate::skip::skipped`]).
///
/// # Panics
/// When the set-up failed and the environment variable `require_var` is `1`.
pub fn available<T>(require_var: &str, setup: anyhow::Result<T>) -> Option<T> {
    let problem = match setup {
        Ok(value) => return Some(value),
        Err(problem) => problem,
    };
    assert!(
        std::env::var(require_var).map_or(true, |v| v != "1"),
        "{} cannot run and {require_var}=1 requires it: {problem:#}",
        crate::skip::test_name()
    );
    crate::skip::skipped(
        &format!("{problem:#}"),
        &format!("set {require_var}=1 to make this a failure"),
    );
    None
}

/// `Ok` when this process runs as root.
pub fn require_root() -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    // A process's /proc entry belongs to its effective user.
    let uid = std::fs::metadata("/proc/self")
        .context("cannot tell whether this process runs as root")?
        .uid();
    if uid != 0 {
        bail!("needs root, runs as uid {uid}");
    }
    Ok(())
}

/// Run `program` with `args` to completion. Fails, with its stderr, if it cannot be started or
/// exits unsuccessfully; returns its stdout.
pub fn run<I, S>(program: &str, args: I) -> anyhow::Result<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let shown = || {
        let mut line = program.to_owned();
        for arg in &args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    };
    let output = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{}` (is {program} installed?)", shown()))?;
    if !output.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            shown(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
