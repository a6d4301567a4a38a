//! Locates the workspace's built binaries (`spoold`, `spoolctl`) from inside a test process.
//! A binary that is missing is built once, so `cargo nextest run -p spoolctl` works on a fresh
//! checkout; a binary that exists is used as it is (CI builds the workspace first).

use std::collections::HashSet;
use std::env::consts::EXE_SUFFIX;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// Path of the workspace binary `name` (also its package name: `spoold`, `spoolctl`).
///
/// `CARGO_BIN_EXE_<name>` wins when set (nextest sets it for a package's own binaries). Else
/// the binary is looked for beside the running test executable's profile directory
/// (`target/debug/deps/it-… → target/debug/<name>`), and built with
/// `cargo build -p <name> --bin <name>` (same profile) if it is not there.
///
/// # Panics
/// When the binary is missing and cannot be built: a test cannot go on without it.
pub fn cargo_bin(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        let path = PathBuf::from(path);
        if path.exists() {
            return path;
        }
    }
    let exe = std::env::current_exe().expect("a running test knows its own executable path");
    let dir = profile_dir(&exe)
        .unwrap_or_else(|| panic!("cannot find the target directory from {}", exe.display()));
    let path = dir.join(format!("{name}{EXE_SUFFIX}"));
    if !path.exists() {
        build_once(name, &dir);
    }
    assert!(
        path.exists(),
        "{} does not exist; run `cargo build --workspace`",
        path.display()
    );
    path
}

/// The profile directory (`target/debug`) holding an executable: test executables live one
/// level deeper, in `deps/`.
fn profile_dir(exe: &Path) -> Option<PathBuf> {
    let parent = exe.parent()?;
    if parent.file_name().is_some_and(|n| n == "deps") {
        parent.parent().map(Path::to_path_buf)
    } else {
        Some(parent.to_path_buf())
    }
}

/// Cargo's arguments selecting the profile whose output lands in `dir` (`debug` is `dev`'s
/// and `test`'s directory; every other profile's directory carries its own name).
fn profile_args(dir: &Path) -> Vec<String> {
    match dir.file_name().and_then(|n| n.to_str()) {
        None | Some("debug") => Vec::new(),
        Some(profile) => vec!["--profile".to_owned(), profile.to_owned()],
    }
}

/// Run `cargo build` for `name` at most once per test process. The lock is held during the
/// build so that parallel tests in one process wait for it instead of starting their own;
/// builds from other processes are serialised by cargo's own lock.
fn build_once(name: &str, dir: &Path) {
    static BUILT: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if !built
        .get_or_insert_with(HashSet::new)
        .insert(name.to_owned())
    {
        return;
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args(["build", "-p", name, "--bin", name])
        .args(profile_args(dir))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", Path::new(&cargo).display()));
    assert!(
        output.status.success(),
        "`cargo build -p {name} --bin {name}` failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_dir_of_test_and_plain_executables() {
        let check = |exe: &str, expected: &str| {
            assert_eq!(
                profile_dir(Path::new(exe)),
                Some(PathBuf::from(expected)),
                "{exe}"
            );
        };
        check("/w/target/debug/deps/it-0123abcd", "/w/target/debug");
        check(
            "/w/target/release/deps/spool_testkit-99",
            "/w/target/release",
        );
        check("/w/target/debug/spoolctl", "/w/target/debug");
    }

    #[test]
    fn profile_args_follow_the_directory_name() {
        assert!(profile_args(Path::new("/w/target/debug")).is_empty());
        assert_eq!(
            profile_args(Path::new("/w/target/release")),
            ["--profile", "release"]
        );
        assert_eq!(profile_args(Path::new("/w/target/ci")), ["--profile", "ci"]);
    }

    #[test]
    fn env_override_is_honoured() {
        let exe = std::env::current_exe().expect("current exe");
        // A unique name so no other test in this process sees the variable.
        let name = "testkit-env-override-probe";
        std::env::set_var(format!("CARGO_BIN_EXE_{name}"), &exe);
        assert_eq!(cargo_bin(name), exe);
    }
}
