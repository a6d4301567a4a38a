//! Tests that cannot run here (no PostgreSQL server named, not root, a tool missing) return
//! early and pass: nextest counts them as passed and hides what they print. So each one that
//! skips itself, in whole or in part, says why on stderr and also appends a line to the file
//! named by [`RECORD_VAR`] (`scripts/test` sets it), from which `scripts/not-covered` tells at
//! the end of the run what it did not cover, and why.
//!
//! A line is `BINARY<TAB>TEST<TAB>REASON<TAB>REMEDY`, written with one `write` on a file opened
//! for appending, so that the lines of tests running at once do not mix.

use std::io::Write as _;

/// The file skipped tests are recorded in (none when unset).
pub const RECORD_VAR: &str = "SPOOLD_TEST_SKIPS";

/// This test did not run, or not all of it: `reason` is what is missing (the same words for
/// the same cause, so that a report can group them), `remedy` what would make it run.
pub fn skipped(reason: &str, remedy: &str) {
    let test = test_name();
    eprintln!("{test} was not run: {reason} ({remedy})");
    if let Some(file) = std::env::var_os(RECORD_VAR) {
        let binary = std::env::var("NEXTEST_BINARY_ID").unwrap_or_else(|_| "-".to_owned());
        if let Err(e) = record(file.as_ref(), [&binary, &test, reason, remedy]) {
            eprintln!(
                "could not record the skip in {} ({RECORD_VAR}): {e}",
                std::path::Path::new(&file).display()
            );
        }
    }
}

/// Append one line of `fields` (tabs and line breaks in them made spaces) to `file`.
fn record(file: &std::path::Path, fields: [&str; 4]) -> std::io::Result<()> {
    let mut line = fields
        .map(|f| f.replace(['\t', '\n', '\r'], " "))
        .join("\t");
    line.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?
        .write_all(line.as_bytes())
}

/// The running test's name: nextest runs each test as `BINARY --exact NAME …`; under
/// `cargo test`, libtest names the test's thread after it.
pub fn test_name() -> String {
    let mut args = std::env::args();
    if args.any(|a| a == "--exact") {
        if let Some(name) = args.next() {
            return name;
        }
    }
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("this test")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines recorded from several threads at once arrive whole, one a line.
    #[test]
    fn records_are_whole_lines() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("skips.tsv");
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let file = file.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        record(&file, ["b", "t", &format!("reason\t{n}"), "remedy\nhere"])
                            .expect("recorded");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let text = std::fs::read_to_string(&file).expect("the record");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 400);
        for line in lines {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 4, "{line:?}");
            assert!(fields[2].starts_with("reason "), "{line:?}");
            assert_eq!(fields[3], "remedy here", "{line:?}");
        }
    }
}
