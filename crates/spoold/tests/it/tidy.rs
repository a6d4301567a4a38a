//! Conventions the code base keeps, checked mechanically (after rust-analyzer's tidy test):
//! every source file says what it is for, and the boundaries named in ARCHITECTURE.md hold.

use std::path::{Path, PathBuf};

fn sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "target") {
                    stack.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    assert!(out.len() > 20, "found only {} files", out.len());
    out
}

fn is_under(path: &Path, part: &str) -> bool {
    path.to_string_lossy().contains(part)
}

#[test]
fn every_file_starts_with_a_doc_comment() {
    let missing: Vec<_> = sources()
        .into_iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .collect();
    assert!(missing.is_empty(), "files without a //! line: {missing:#?}");
}

#[test]
fn only_outbound_builds_http_clients_to_targets() {
    let offenders: Vec<_> = sources()
        .into_iter()
        .filter(|p| is_under(p, "/spoold/src/") && !is_under(p, "/spoold/src/deliveries/outbound/"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            text.contains("reqwest::Client") || text.contains("ClientBuilder")
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "HTTP clients built outside deliveries/outbound/: {offenders:#?}"
    );
}

#[test]
fn only_tasks_exec_spawns_processes() {
    let offenders: Vec<PathBuf> = sources()
        .into_iter()
        .filter(|p| is_under(p, "/spoold/src/") && !p.ends_with("tasks/exec.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            text.contains("process::Command") || text.contains("Command::new(")
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "processes spawned outside tasks/exec.rs: {offenders:#?}"
    );
    // And the daemon's library code spawns nothing else: only exec builds a Command.
    let exec =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/tasks/exec.rs"))
            .expect("read exec.rs");
    assert!(
        exec.contains("Command::new("),
        "exec.rs is where attempts are spawned"
    );
}

/// Signals reach processes only through `tasks/processes.rs`, which proves each target the
/// attempt's first (a held leader, or a verified pidfd); nothing else calls `kill`.
#[test]
fn only_tasks_processes_sends_signals() {
    let offenders: Vec<PathBuf> = sources()
        .into_iter()
        .filter(|p| is_under(p, "/spoold/src/") && !p.ends_with("tasks/processes.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            [
                "kill_process",
                "kill_process_group",
                "pidfd_send_signal",
                "libc::kill",
            ]
            .iter()
            .any(|call| text.contains(call))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "signals sent outside tasks/processes.rs: {offenders:#?}"
    );
}

#[test]
fn no_unwrap_in_library_code() {
    let offenders: Vec<String> = sources()
        .into_iter()
        .filter(|p| is_under(p, "/src/"))
        .flat_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            // Unit tests live at the end of a file, after `#[cfg(test)]`.
            let code = text
                .split("#[cfg(test)]")
                .next()
                .unwrap_or_default()
                .to_owned();
            code.lines()
                .enumerate()
                .filter(|(_, l)| l.contains(".unwrap()") && !l.trim_start().starts_with("//"))
                .map(|(i, _)| format!("{}:{}", p.display(), i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "unwrap() outside tests: {offenders:#?}"
    );
}

/// Every flag of `spoold --help` appears in the README's configuration table, so the two
/// cannot drift apart silently.
#[test]
fn every_flag_is_in_the_readme() {
    use clap::CommandFactory as _;
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let table: String = readme
        .lines()
        .filter(|l| l.starts_with("| `--"))
        .collect::<Vec<_>>()
        .join("\n");
    let missing: Vec<String> = spoold::config::Args::command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .map(|long| format!("--{long}"))
        .filter(|flag| !table.contains(&format!("`{flag}")))
        .collect();
    assert!(
        missing.is_empty(),
        "flags missing from README's table: {missing:?}"
    );
}

/// Every setting (a flag that is not an action of its own) is a key of the configuration file
/// the package installs, `deploy/spoold.toml`, set or commented out with its default.
#[test]
fn every_setting_is_in_the_shipped_configuration_file() {
    use clap::CommandFactory as _;
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/spoold.toml"),
    )
    .expect("deploy/spoold.toml");
    let keys: Vec<&str> = shipped
        .lines()
        .map(|l| l.trim_start_matches("# "))
        .filter_map(|l| l.split_once(" = ").map(|(key, _)| key))
        .collect();
    let missing: Vec<String> = spoold::config::Args::command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|long| {
            ![
                "help",
                "version",
                "config",
                "check-config",
                "print-config",
                "man",
            ]
            .contains(long)
        })
        .map(|long| long.replace('-', "_"))
        .filter(|key| !keys.contains(&key.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "settings missing from deploy/spoold.toml: {missing:?}"
    );
}
