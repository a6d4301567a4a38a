//! Conventions the code base keeps, checked mechanically (after rust-analyzer's tidy test):
//! every source file says what it is for, and the boundaries named in ARCHITECTURE.md hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules (by path from the crate root) and the modules each imports.
type Imports = BTreeMap<Vec<String>, BTreeSet<Vec<String>>>;

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

/// Every flag of `spoold --help` appears in the book's configuration table
/// (`docs/src/configuration.md`), so the two cannot drift apart silently.
#[test]
fn every_flag_is_in_the_books_configuration_table() {
    use clap::CommandFactory as _;
    let page = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/configuration.md"),
    )
    .expect("docs/src/configuration.md");
    let table: String = page
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
        "flags missing from the table of docs/src/configuration.md: {missing:?}"
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

/// No two modules of a crate import each other, directly or through others (a module and its
/// own submodules aside): each file has a place in one order, and can be read knowing only what
/// is below it. The same holds for the crate's rooms (its top-level modules and folders).
/// References are read from `crate::`, `super::` and `self::` paths (and `use` groups) in code
/// outside comments and `#[cfg(test)]` modules.
#[test]
fn modules_import_each_other_in_no_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates").flatten() {
        let src = entry.path().join("src");
        if src.is_dir() {
            circles.extend(circles_in(&src));
        }
    }
    assert!(circles.is_empty(), "modules in a circle: {circles:#?}");
}

/// The circles among the modules under `src`, each as `a -> b -> … -> a`.
fn circles_in(src: &Path) -> Vec<String> {
    let path_re =
        regex::Regex::new(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)(::\{[^}]*\})?")
            .expect("regex");
    let mut files: BTreeMap<Vec<String>, PathBuf> = BTreeMap::new();
    for file in sources().into_iter().filter(|p| p.starts_with(src)) {
        let rel = file
            .strip_prefix(src)
            .expect("under src")
            .with_extension("");
        let mut module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        if module == ["lib"] || module == ["main"] {
            continue;
        }
        files.insert(module, file);
    }
    let resolve = |path: &[String]| -> Option<Vec<String>> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| files.contains_key(prefix))
    };
    let related = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut edges = Imports::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("read");
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let deps = edges.entry(module.clone()).or_default();
        for m in path_re.captures_iter(&code) {
            let mut segments: Vec<String> = m[2]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            let mut base: Vec<String> = match &m[1] {
                "crate" => Vec::new(),
                "self" => module.clone(),
                // `super` of `a/b.rs` and of `a/b/mod.rs` alike is `a`.
                _ => module[..module.len().saturating_sub(1)].to_vec(),
            };
            while segments.first().is_some_and(|s| s == "super") {
                segments.remove(0);
                base.pop();
            }
            base.extend(segments);
            let mut targets = vec![base.clone()];
            if let Some(group) = m.get(3) {
                for item in group
                    .as_str()
                    .trim_start_matches("::{")
                    .trim_end_matches('}')
                    .split(',')
                {
                    let first = item.trim().split("::").next().unwrap_or_default();
                    let first = first.split_whitespace().next().unwrap_or_default();
                    if !first.is_empty() && first != "self" {
                        let mut path = base.clone();
                        path.push(first.to_owned());
                        targets.push(path);
                    }
                }
            }
            for target in targets {
                if let Some(found) = resolve(&target) {
                    if !related(&found, module) {
                        deps.insert(found);
                    }
                }
            }
        }
    }
    // The same at the level of rooms (a crate's top-level modules: `config`, `api/`,
    // `deliveries/`, …): what one room's files import from another's, no room imports back.
    let mut rooms = Imports::new();
    for (a, deps) in &edges {
        let room = a[..1].to_vec();
        let entry = rooms.entry(room.clone()).or_default();
        entry.extend(deps.iter().map(|b| b[..1].to_vec()).filter(|b| *b != room));
    }
    let mut circles = circles_of(src, &edges);
    circles.extend(
        circles_of(src, &rooms)
            .into_iter()
            .map(|c| format!("rooms, {c}")),
    );
    circles
}

/// The circles of a graph of modules: each edge `a -> b` with a path back from `b` to `a`.
fn circles_of(src: &Path, edges: &Imports) -> Vec<String> {
    let mut circles = Vec::new();
    for (a, deps) in edges {
        for b in deps {
            let mut seen = BTreeSet::new();
            let mut stack = vec![vec![b.clone()]];
            while let Some(path) = stack.pop() {
                let last = path.last().expect("a path").clone();
                if &last == a {
                    let mut names: Vec<String> = vec![a.join("/")];
                    names.extend(path.iter().map(|m| m.join("/")));
                    circles.push(format!("{}: {}", src.display(), names.join(" -> ")));
                    stack.clear();
                    break;
                }
                if !seen.insert(last.clone()) {
                    continue;
                }
                for next in edges.get(&last).into_iter().flatten() {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    circles
}
