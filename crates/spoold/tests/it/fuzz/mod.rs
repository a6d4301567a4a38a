//! Fuzzing of every parser, on stable Rust with proptest: generated inputs (arbitrary bytes,
//! near-valid structures, mutations of seed inputs) and a committed corpus per target under
//! `tests/corpus/<target>/`, replayed on every run. Each target asserts properties, not just
//! the absence of a panic. Pure functions only: no lookup of a name, no connection, nothing
//! dialled (the argv target spawns a local program, as the daemon would).
//!
//! `SPOOLD_FUZZ_CASES=N` runs N generated cases per property instead of the small default
//! that keeps the suite quick (e.g. `SPOOLD_FUZZ_CASES=20000 cargo nextest run -p spoold
//! fuzz::`). A failure prints the smallest input proptest found: put it in the target's corpus.

mod address;
mod argv;
mod create;
mod headers;
mod journal;
mod params;
mod redactor;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// The environment variable that sets the generated cases per property.
pub const CASES_VAR: &str = "SPOOLD_FUZZ_CASES";
/// The environment variable that repeats a run: the seed it printed.
pub const SEED_VAR: &str = "SPOOLD_FUZZ_SEED";

/// A runner for `default` cases (or `SPOOLD_FUZZ_CASES`). Seeded from the clock (or
/// `SPOOLD_FUZZ_SEED`), so every run tries new inputs and a failing one can be repeated;
/// nothing is written next to the sources (failures go into the corpus by hand, where they are
/// named and reviewed).
pub fn runner(default: u32) -> TestRunner {
    let cases = std::env::var(CASES_VAR)
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(default);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..Config::default()
    };
    let seed: u64 = std::env::var(SEED_VAR)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    eprintln!("fuzz: {cases} cases, {SEED_VAR}={seed}");
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Runs `property` on `cases` inputs from `strategy`; a failure panics with the smallest input
/// found and the property's message.
pub fn check<S: Strategy>(
    default_cases: u32,
    strategy: S,
    property: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    if let Err(e) = runner(default_cases).run(&strategy, property) {
        panic!("{e}");
    }
}

/// The directory of a target's corpus.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(target)
}

/// Every file of a target's corpus, by name, sorted. A target with no corpus is a mistake.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).expect("read corpus file");
            (name, bytes)
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    files
}

/// The non-empty lines of every corpus file of a target that are not `#` comments.
pub fn corpus_lines(target: &str) -> Vec<String> {
    corpus(target)
        .into_iter()
        .flat_map(|(name, bytes)| {
            String::from_utf8(bytes)
                .unwrap_or_else(|e| panic!("corpus {target}/{name}: not UTF-8: {e}"))
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Replays every corpus entry through `property`, naming the entry that fails.
pub fn replay<T: std::fmt::Debug>(
    entries: Vec<T>,
    property: impl Fn(&T) -> Result<(), TestCaseError>,
) {
    assert!(!entries.is_empty(), "no corpus entries");
    for entry in &entries {
        if let Err(e) = property(entry) {
            panic!("corpus entry {entry:?}: {e}");
        }
    }
}

/// A few random edits (the mutations of a coverage-guided fuzzer, without the coverage).
pub type Edits = Vec<(u8, prop::sample::Index, u8)>;

pub fn edits() -> impl Strategy<Value = Edits> {
    prop::collection::vec((0u8..6, any::<prop::sample::Index>(), any::<u8>()), 0..5)
}

/// Bytes from a seed, changed by a few random edits.
pub fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (prop::sample::select(seeds), edits()).prop_map(|(bytes, edits)| mutate(bytes, &edits))
}

/// `bytes` after `edits`: flip, insert, delete, duplicate, cut short, splice in a token that
/// parsers trip on.
pub fn mutate(mut bytes: Vec<u8>, edits: &Edits) -> Vec<u8> {
    const TOKENS: &[&[u8]] = &[
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"null",
        b"-1",
        b"1e999",
        b"18446744073709551616",
        b"\\u0000",
        b"\\ud800",
        b"\n",
        b"\r\n",
        b"\xff",
        b"\xc3",
        b"%00",
        b"..",
        b"0x",
        b"::",
    ];
    for &(kind, at, byte) in edits {
        let len = bytes.len();
        let i = if len == 0 { 0 } else { at.index(len) };
        match kind {
            0 if len > 0 => bytes[i] ^= byte.max(1),
            1 => bytes.insert(i, byte),
            2 if len > 0 => {
                let end = (i + 1 + usize::from(byte % 8)).min(len);
                bytes.drain(i..end);
            }
            3 if len > 0 => {
                let end = (i + 1 + usize::from(byte % 16)).min(len);
                let piece = bytes[i..end].to_vec();
                bytes.splice(i..i, piece);
            }
            4 => bytes.truncate(i),
            _ => {
                let token = TOKENS[usize::from(byte) % TOKENS.len()];
                bytes.splice(i..i, token.iter().copied());
            }
        }
    }
    bytes
}
