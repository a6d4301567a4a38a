//! Target: the output redactor (`tasks::output`). Secrets are planted in generated output,
//! which is then cut into chunks at arbitrary places (a secret split across one boundary or
//! several) and, for the log, spread over both streams. The output never contains a secret; a
//! stream's redacted output does not depend on where it was cut; the stored log stays within
//! its limit.
//!
//! Secrets and text are drawn from lower-case letters, digits and a few other bytes, never
//! from the marker's (`[REDACTED]`): a secret in the output can then only be one let through,
//! not one the marker and its neighbours happen to spell.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spoold::tasks::output::{
    redact_all, redact_summary, OutputLog, OutputSummary, RedactRules, Redactor, Stream, REDACTED,
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

/// A case: the secrets, patterns (none, or one that matches within a line), the output, the
/// cut points, and which stream each chunk goes to.
#[derive(Debug, Clone, serde::Deserialize)]
struct Case {
    secrets: Vec<String>,
    #[serde(default)]
    patterns: Vec<String>,
    output: String,
    cuts: Vec<usize>,
    #[serde(default)]
    streams: Vec<bool>,
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
                (
                    Just(secrets),
                    Just(pattern),
                    Just(text),
                    cuts(len),
                    prop_oneof![
                        Just(vec![false; 9]),
                        prop::collection::vec(any::<bool>(), 9),
                    ],
                )
            })
        })
        .prop_map(|(secrets, pattern, text, cuts, streams)| Case {
            secrets: secrets
                .into_iter()
                .map(|s| String::from_utf8_lossy(&s).into_owned())
                .collect(),
            patterns: pattern.into_iter().collect(),
            output: String::from_utf8_lossy(&text).into_owned(),
            cuts,
            streams,
        })
}

/// Literals and patterns, as a task type's rules are.
fn rules(case: &Case) -> RedactRules {
    let literals = case.secrets.iter().map(|s| s.as_bytes().to_vec()).collect();
    RedactRules::new(literals, &case.patterns).expect("valid rules")
}

/// The literals alone, or the patterns alone: what one [`Redactor`] is given.
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

/// One [`Redactor`] (literals alone, then patterns alone) and the one-shot functions: no
/// secret let through, and the same output whatever the cuts.
fn one_stream(case: &Case) -> Result<(), TestCaseError> {
    let input = case.output.as_bytes();
    let none: &[String] = &[];
    for (rules, secrets, patterns) in [
        (literals_only(case), &case.secrets[..], none),
        (patterns_only(case), none, &case.patterns[..]),
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

/// The log of `pieces` (each with its stream) under `limit`: what is stored, and the summary.
fn stored(rules: &RedactRules, pieces: &[(Stream, &[u8])], limit: u64) -> (Vec<u8>, OutputSummary) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out");
    let mut log = OutputLog::create(&path, limit, rules).expect("log");
    for (stream, piece) in pieces {
        log.write(*stream, piece).expect("write");
    }
    let summary = log.finish().expect("finish");
    (std::fs::read(&path).unwrap_or_default(), summary)
}

/// Both streams into one bounded log, chunks going to the stream `streams` says: no secret
/// stored (the omission marker aside, which is spoold's), within the limit; one stream alone
/// is stored the same whatever its cuts.
fn log(case: &Case, limit: u64) -> Result<(), TestCaseError> {
    let rules = rules(case);
    let input = case.output.as_bytes();
    let pieces: Vec<(Stream, &[u8])> = chunks(input, &case.cuts)
        .into_iter()
        .enumerate()
        .map(|(i, piece)| match case.streams.get(i) {
            Some(true) => (Stream::Stderr, piece),
            _ => (Stream::Stdout, piece),
        })
        .collect();
    let (stored_bytes, summary) = stored(&rules, &pieces, limit);
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
    // With patterns, each stream's unfinished line is held and the two are interleaved by
    // lines: bytes of the two streams may then meet in an order in which neither stream nor
    // their arrival had them, and spell a secret nobody printed. Judged where that cannot be.
    let mixed = pieces
        .iter()
        .any(|(s, p)| *s == Stream::Stderr && !p.is_empty())
        && pieces
            .iter()
            .any(|(s, p)| *s == Stream::Stdout && !p.is_empty());
    let parts = if mixed && !case.patterns.is_empty() {
        Vec::new()
    } else {
        parts
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
    // One stream alone: stored as if it had come in one piece.
    let one: Vec<(Stream, &[u8])> = chunks(input, &case.cuts)
        .into_iter()
        .map(|p| (Stream::Stdout, p))
        .collect();
    let (cut, _) = stored(&rules, &one, limit);
    let (whole, _) = stored(&rules, &[(Stream::Stdout, input)], limit);
    prop_assert_eq!(
        String::from_utf8_lossy(&cut),
        String::from_utf8_lossy(&whole),
        "one stream cut at {:?}",
        &case.cuts
    );
    Ok(())
}

#[test]
fn a_secret_split_across_any_chunks_is_redacted_and_cuts_change_nothing() {
    check(400, case(), |case| one_stream(&case));
}

#[test]
fn the_log_of_both_streams_holds_no_secret_and_stays_bounded() {
    check(
        200,
        (case(), prop::sample::select(vec![0u64, 8, 33, 1 << 20])),
        |(case, limit)| log(&case, limit),
    );
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
        one_stream(case)?;
        for limit in [0, 8, 33, 1 << 20] {
            log(case, limit)?;
        }
        Ok(())
    });
}
