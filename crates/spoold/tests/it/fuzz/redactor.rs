//! Target: the output redactor (`tasks::output`). Secrets are planted in generated output,
//! which is then cut into chunks at arbitrary places (a secret split across one boundary or
//! several). The output never contains a secret; the redacted output does not depend on where
//! it was cut; the stored log stays within its limit, and what the log holds back stays within
//! its bound after every write — also for a chain of overlapping copies of a secret (`aba` in
//! `ababab…`) printed far past a line's worth without a line end, in many pieces, where no
//! piece of a secret straddling a cut gets out.
//!
//! Secrets and text are drawn from lower-case letters, digits and a few other bytes, never
//! from the marker's (`[REDACTED]`): a secret in the output can then only be one let through,
//! not one the marker and its neighbours happen to spell.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spoold::tasks::output::{
    redact_all, redact_summary, OutputLog, OutputSummary, RedactRules, Redactor, LINE_CAP, REDACTED,
};

use super::{check, corpus, replay};

/// The bytes secrets and text are made of: few, so that text often starts a secret.
const ALPHABET: &[u8] = b"abcdeks0123 -_=\n\xff";

fn bytes_from(
    alphabet: &'static [u8],
    len: std::ops::Range<usize>,
) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(alphabet), len)
}

/// Literal secrets: short and long, sharing starts and ends with each other and the text.
fn secrets() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            4 => bytes_from(b"abcdeks0123", 1..12),
            1 => bytes_from(ALPHABET, 1..8),
        ],
        1..4,
    )
}

/// Output: text with secrets planted in it.
fn output(secrets: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = secrets.len();
    prop::collection::vec(
        prop_oneof![
            2 => bytes_from(ALPHABET, 0..16),
            1 => (0..n).prop_map(move |i| secrets[i].clone()),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

/// Where to cut `len` bytes into chunks: sorted cut points.
fn cuts(len: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..=len, 0..8).prop_map(|mut c| {
        c.sort_unstable();
        c
    })
}

/// A case: the secrets, patterns (none, or one that matches within a line), the output (printed
/// `repeat` times over), and the cut points.
#[derive(Debug, Clone, serde::Deserialize)]
struct Case {
    secrets: Vec<String>,
    #[serde(default)]
    patterns: Vec<String>,
    output: String,
    /// For a long output in a short file (0 is once).
    #[serde(default)]
    repeat: usize,
    cuts: Vec<usize>,
}

impl Case {
    /// The output, repeated.
    fn input(&self) -> Vec<u8> {
        self.output.repeat(self.repeat.max(1)).into_bytes()
    }

    /// The longest secret, in bytes.
    fn longest(&self) -> usize {
        self.secrets.iter().map(String::len).max().unwrap_or(0)
    }

    /// The most an output log may hold back after a write (see `OutputLog::held_back`): with
    /// literal secrets only, a secret's start; with patterns, an unfinished line (or a secret's
    /// start, if longer).
    fn held_bound(&self) -> usize {
        let start = self.longest().saturating_sub(1);
        if self.patterns.is_empty() {
            start
        } else {
            start.max(LINE_CAP)
        }
    }
}

fn case() -> impl Strategy<Value = Case> {
    (
        secrets(),
        prop::option::weighted(0.3, Just("k[0-9]+s".to_owned())),
    )
        .prop_flat_map(|(secrets, pattern)| {
            let text = output(secrets.clone());
            (Just(secrets), Just(pattern), text).prop_flat_map(|(secrets, pattern, text)| {
                let len = text.len();
                (Just(secrets), Just(pattern), Just(text), cuts(len))
            })
        })
        .prop_map(|(secrets, pattern, text, cuts)| Case {
            secrets: secrets
                .into_iter()
                .map(|s| String::from_utf8_lossy(&s).into_owned())
                .collect(),
            patterns: pattern.into_iter().collect(),
            output: String::from_utf8_lossy(&text).into_owned(),
            repeat: 1,
            cuts,
        })
}

/// Literals and patterns, as a task type's rules are.
fn rules(case: &Case) -> RedactRules {
    let literals = case.secrets.iter().map(|s| s.as_bytes().to_vec()).collect();
    RedactRules::new(literals, &case.patterns).expect("valid rules")
}

/// The literals alone, or the patterns alone.
fn literals_only(case: &Case) -> RedactRules {
    let literals = case.secrets.iter().map(|s| s.as_bytes().to_vec()).collect();
    RedactRules::new(literals, &[]).expect("valid rules")
}

fn patterns_only(case: &Case) -> RedactRules {
    RedactRules::new(Vec::new(), &case.patterns).expect("valid rules")
}

/// The output cut at `cuts`.
fn chunks<'a>(output: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts {
        let cut = cut.clamp(from, output.len());
        out.push(&output[from..cut]);
        from = cut;
    }
    out.push(&output[from..]);
    out
}

/// One stream through one redactor, in the given chunks.
fn redacted(rules: &RedactRules, chunks: &[&[u8]]) -> Vec<u8> {
    let mut r = Redactor::new(rules);
    let mut out = Vec::new();
    for chunk in chunks {
        r.push(chunk, &mut out);
    }
    r.finish(&mut out);
    out
}

/// The first of `secrets` (or match of `patterns`) found in `out`.
fn leak(secrets: &[String], patterns: &[String], out: &[u8]) -> Option<String> {
    let secret = secrets
        .iter()
        .find(|s| out.windows(s.len()).any(|w| w == s.as_bytes()));
    if let Some(s) = secret {
        return Some(format!("secret {s:?}"));
    }
    patterns.iter().find_map(|p| {
        let re = regex::bytes::Regex::new(p).expect("pattern");
        re.find(out)
            .map(|m| format!("pattern {p:?}: {:?}", String::from_utf8_lossy(m.as_bytes())))
    })
}

/// One [`Redactor`] (literals alone, then patterns alone, then both, as a task type's output
/// is redacted) and the one-shot functions: no secret let through, and the same output whatever
/// the cuts.
fn redactor_and_one_shot(case: &Case) -> Result<(), TestCaseError> {
    let input = &case.input()[..];
    let none: &[String] = &[];
    for (rules, secrets, patterns) in [
        (literals_only(case), &case.secrets[..], none),
        (patterns_only(case), none, &case.patterns[..]),
        (rules(case), &case.secrets[..], &case.patterns[..]),
    ] {
        let whole = redacted(&rules, &[input]);
        let cut = redacted(&rules, &chunks(input, &case.cuts));
        if let Some(leak) = leak(secrets, patterns, &cut) {
            return Err(TestCaseError::fail(format!(
                "{leak} in {:?}",
                String::from_utf8_lossy(&cut)
            )));
        }
        prop_assert_eq!(
            String::from_utf8_lossy(&cut),
            String::from_utf8_lossy(&whole),
            "cut at {:?}",
            &case.cuts
        );
        let one_byte: Vec<&[u8]> = input.chunks(1).collect();
        let by_bytes = redacted(&rules, &one_byte);
        prop_assert_eq!(
            String::from_utf8_lossy(&by_bytes),
            String::from_utf8_lossy(&whole),
            "one byte at a time"
        );
        if case.patterns.is_empty() {
            break;
        }
    }
    let rules = rules(case);
    if let Ok(text) = std::str::from_utf8(input) {
        let all = redact_all(&rules, text);
        prop_assert!(
            leak(&case.secrets, &case.patterns, all.as_bytes()).is_none(),
            "redact_all: {all:?}"
        );
        for max in [0, 5, REDACTED.len(), 17, text.len() / 2] {
            let summary = redact_summary(&rules, text, max);
            prop_assert!(
                summary.len() <= max.max(REDACTED.len()),
                "summary of {max}: {summary:?}"
            );
            prop_assert!(
                leak(&case.secrets, &case.patterns, summary.as_bytes()).is_none(),
                "{summary:?}"
            );
        }
    }
    Ok(())
}

/// The log of `pieces` under `limit`: what is stored, and the summary. Fails if more than
/// `held_bound` bytes are held back after a write.
fn stored(
    rules: &RedactRules,
    pieces: &[&[u8]],
    limit: u64,
    held_bound: usize,
) -> Result<(Vec<u8>, OutputSummary), TestCaseError> {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out");
    let mut log = OutputLog::create(&path, limit, rules).expect("log");
    for (n, piece) in pieces.iter().enumerate() {
        log.write(piece).expect("write");
        prop_assert!(
            log.held_back() <= held_bound,
            "{} bytes held back after write {n} of {}, bound {held_bound}",
            log.held_back(),
            pieces.len()
        );
    }
    let summary = log.finish().expect("finish");
    Ok((std::fs::read(&path).unwrap_or_default(), summary))
}

/// The bytes of `output`, in order, less those in a copy of a secret.
fn uncovered(secrets: &[String], output: &[u8]) -> Vec<u8> {
    let mut covered = vec![false; output.len()];
    for secret in secrets.iter().map(String::as_bytes) {
        for at in 0..output.len() {
            if output[at..].starts_with(secret) {
                covered[at..at + secret.len()].fill(true);
            }
        }
    }
    output
        .iter()
        .zip(&covered)
        .filter(|(_, &c)| !c)
        .map(|(b, _)| *b)
        .collect()
}

/// The output, cut into chunks, into one bounded log: no secret stored (the omission marker
/// aside, which is spoold's), within the limit, held back within the bound, and stored the
/// same whatever the cuts.
fn log(case: &Case, limit: u64) -> Result<(), TestCaseError> {
    let rules = rules(case);
    let input = &case.input()[..];
    let pieces = chunks(input, &case.cuts);
    let (stored_bytes, summary) = stored(&rules, &pieces, limit, case.held_bound())?;
    let marker = format!(
        "\n[spoold: {} bytes of output omitted]\n",
        summary.truncated_bytes
    );
    let parts: Vec<&[u8]> = match stored_bytes
        .windows(marker.len())
        .position(|w| summary.truncated_bytes > 0 && w == marker.as_bytes())
    {
        Some(at) => vec![&stored_bytes[..at], &stored_bytes[at + marker.len()..]],
        None => vec![&stored_bytes[..]],
    };
    for part in parts {
        if let Some(leak) = leak(&case.secrets, &case.patterns, part) {
            return Err(TestCaseError::fail(format!(
                "{leak} stored: {:?}",
                String::from_utf8_lossy(&stored_bytes)
            )));
        }
    }
    let bound = limit
        + if summary.truncated_bytes > 0 {
            marker.len() as u64
        } else {
            0
        };
    prop_assert!(
        stored_bytes.len() as u64 <= bound,
        "{} bytes stored, limit {}",
        stored_bytes.len(),
        limit
    );
    prop_assert_eq!(
        summary.bytes.min(limit),
        (stored_bytes.len() as u64).min(limit)
    );
    // With literal secrets only and nothing dropped, what is stored, without its markers, is
    // the output without the bytes of any secret: no piece of one gets out, wherever the cuts
    // fell.
    if case.patterns.is_empty() && summary.truncated_bytes == 0 {
        let kept = uncovered(&case.secrets, input);
        prop_assert_eq!(
            String::from_utf8_lossy(stored_bytes.as_slice()).replace(REDACTED, ""),
            String::from_utf8_lossy(&kept).into_owned(),
            "cut at {:?}",
            &case.cuts
        );
    }
    // Stored as if it had come in one piece.
    let (whole, whole_summary) = stored(&rules, &[input], limit, case.held_bound())?;
    prop_assert_eq!(
        String::from_utf8_lossy(&stored_bytes),
        String::from_utf8_lossy(&whole),
        "cut at {:?}",
        &case.cuts
    );
    prop_assert_eq!(summary, whole_summary);
    Ok(())
}

#[test]
fn a_secret_split_across_any_chunks_is_redacted_and_cuts_change_nothing() {
    check(400, case(), |case| redactor_and_one_shot(&case));
}

#[test]
fn the_log_holds_no_secret_and_stays_bounded() {
    check(
        200,
        (case(), prop::sample::select(vec![0u64, 8, 33, 1 << 20])),
        |(case, limit)| log(&case, limit),
    );
}

/// A chain of overlapping copies of one secret: the secret is `unit` `reps` times and then the
/// first `extra` bytes of it again, so that it overlaps itself and `unit` printed over and over
/// (here `units` times, between `<` and `>\n`, far past a line's worth) holds a copy at every
/// unit, each overlapping the next.
#[derive(Debug, Clone)]
struct Chain {
    unit: Vec<u8>,
    reps: usize,
    extra: usize,
    units: usize,
    /// The sizes of the writes, taken in turn.
    sizes: Vec<usize>,
    /// With a pattern too (lines are then held whole, up to a line's worth).
    pattern: bool,
}

fn chain() -> impl Strategy<Value = Chain> {
    (
        bytes_from(b"abcdeks0123", 1..5),
        1usize..3,
        0usize..5,
        LINE_CAP..2 * LINE_CAP,
        prop::collection::vec(prop_oneof![1 => 1usize..16, 3 => 16usize..10_000], 1..5),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(unit, reps, extra, len, sizes, pattern)| {
            let extra = extra.min(unit.len());
            // At least one byte of overlap between one copy and the next.
            let (reps, extra) = if extra == 0 {
                (reps.max(2), 0)
            } else {
                (reps, extra)
            };
            Chain {
                units: len / unit.len() + reps + 1,
                unit,
                reps,
                extra,
                sizes,
                pattern,
            }
        })
}

impl Chain {
    fn secret(&self) -> String {
        let mut secret = self.unit.repeat(self.reps);
        secret.extend_from_slice(&self.unit[..self.extra]);
        String::from_utf8(secret).expect("ascii")
    }

    fn case(&self) -> Case {
        Case {
            secrets: vec![self.secret()],
            patterns: if self.pattern {
                vec!["k[0-9]+s".to_owned()]
            } else {
                Vec::new()
            },
            output: String::new(),
            repeat: 1,
            cuts: Vec::new(),
        }
    }

    fn input(&self) -> Vec<u8> {
        let mut input = b"<".to_vec();
        input.extend_from_slice(&self.unit.repeat(self.units));
        input.extend_from_slice(b">\n");
        input
    }

    /// The input in writes of `sizes`, taken in turn.
    fn writes<'a>(&self, input: &'a [u8]) -> Vec<&'a [u8]> {
        let mut writes = Vec::new();
        let mut rest = input;
        for &size in self.sizes.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, after) = rest.split_at(size.min(rest.len()));
            writes.push(piece);
            rest = after;
        }
        writes
    }
}

/// A chain of overlapping secrets in many writes: held back, after every write, no more than
/// the log's bound (a secret's start; with a pattern, a line); no secret stored, nor once the
/// markers are taken out (a piece straddling a cut would show there); and stored the same as
/// in one write.
fn overlapping(chain: &Chain) -> Result<(), TestCaseError> {
    let case = chain.case();
    let rules = rules(&case);
    let secret = chain.secret();
    let input = chain.input();
    let limit = 4 * input.len() as u64;
    let (whole, whole_summary) = stored(&rules, &[&input], limit, case.held_bound())?;
    let (cut, summary) = stored(&rules, &chain.writes(&input), limit, case.held_bound())?;
    prop_assert_eq!(summary.truncated_bytes, 0);
    prop_assert!(summary.redactions >= 1);
    let left = String::from_utf8_lossy(&cut).replace(REDACTED, "");
    for (what, text) in [
        ("stored", String::from_utf8_lossy(&cut)),
        ("stripped", left.as_str().into()),
    ] {
        prop_assert!(
            !text.contains(secret.as_str()),
            "{what}: secret {secret:?} in {:?}",
            &text[..text.len().min(300)]
        );
    }
    prop_assert!(cut == whole, "{:?}", &left[..left.len().min(300)]);
    prop_assert_eq!(summary, whole_summary);
    Ok(())
}

#[test]
fn a_chain_of_overlapping_secrets_is_held_bounded_and_never_stored() {
    check(12, chain(), |chain| overlapping(&chain));
}

#[test]
fn corpus_cases() {
    let cases: Vec<(String, Case)> = corpus("redactor")
        .into_iter()
        .map(|(name, bytes)| {
            let case = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("corpus redactor/{name}: {e}"));
            (name, case)
        })
        .collect();
    replay(cases, |(_, case)| {
        redactor_and_one_shot(case)?;
        for limit in [0, 8, 33, 1 << 20] {
            log(case, limit)?;
        }
        Ok(())
    });
}
