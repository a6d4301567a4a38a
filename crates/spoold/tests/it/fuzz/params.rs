//! Target: a submission's parameters — the characters a value may hold, and the names given.
//! A value holding a NUL is always refused; one holding a control character or an invisible
//! one (a Unicode format character, a bidi control, a line or paragraph separator) is refused,
//! naming the parameter and the character, unless the pattern names such characters itself;
//! any other value is accepted exactly when the pattern matches it, and kept as given. The
//! characters' kinds are this file's own table, not the daemon's: the property holds the
//! daemon's classification to it. And a name given twice in `params` is refused, naming it,
//! however the rest is written.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spoold::tasks::submission;
use spoold::tasks::{TaskType, TypeSpec};

use super::{check, corpus_lines, replay};

/// What a piece of a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Nul,
    Control,
    Invisible,
}

/// Pieces values are made of, each with its kind.
const PIECES: &[(&str, Kind)] = &[
    ("a", Kind::Plain),
    ("Z9", Kind::Plain),
    ("é", Kind::Plain),
    ("日本", Kind::Plain),
    ("🙂", Kind::Plain),
    (" ", Kind::Plain),
    ("/", Kind::Plain),
    ("\u{a0}", Kind::Plain),
    ("\u{3000}", Kind::Plain),
    ("\u{0}", Kind::Nul),
    ("\t", Kind::Control),
    ("\n", Kind::Control),
    ("\r", Kind::Control),
    ("\u{1b}", Kind::Control),
    ("\u{7f}", Kind::Control),
    ("\u{85}", Kind::Control),
    ("\u{9b}", Kind::Control),
    ("\u{ad}", Kind::Invisible),
    ("\u{61c}", Kind::Invisible),
    ("\u{200b}", Kind::Invisible),
    ("\u{200e}", Kind::Invisible),
    ("\u{202a}", Kind::Invisible),
    ("\u{202e}", Kind::Invisible),
    ("\u{2028}", Kind::Invisible),
    ("\u{2029}", Kind::Invisible),
    ("\u{2060}", Kind::Invisible),
    ("\u{2066}", Kind::Invisible),
    ("\u{2069}", Kind::Invisible),
    ("\u{feff}", Kind::Invisible),
    ("\u{e0001}", Kind::Invisible),
];

/// Patterns, each with whether it names control characters and invisible ones.
const PATTERNS: &[(&str, bool, bool)] = &[
    (".*", false, false),
    ("(?s).*", false, false),
    ("[^/]*", false, false),
    ("[^/]+", false, false),
    ("\\S*", false, false),
    ("(?s)[^\\x00]*", true, true),
    ("[^\\u{0}/]*", true, true),
    ("(?s)[a-zé日本 /\\t\\n]*", true, false),
    ("[a-z\u{200b}\u{2028}\u{feff}]*", false, true),
];

/// The declared type: one parameter `v` with `pattern`.
fn task_type(pattern: &str) -> Result<TaskType, TestCaseError> {
    let spec: TypeSpec = serde_json::from_value(serde_json::json!({
        "command": ["/bin/echo", "{v}"],
        "params": {"v": {"pattern": pattern, "max_length": 4096}},
    }))
    .map_err(|e| TestCaseError::fail(format!("spec: {e}")))?;
    TaskType::from_spec(Path::new("fuzz.toml"), "fuzz", spec)
        .map_err(|e| TestCaseError::fail(format!("{pattern:?}: {e}")))
}

/// The verdict on `value` under `pattern`: `Ok` if accepted, or the start of the refusal.
fn judge(pattern: &str, value: &str) -> Result<Result<(), String>, TestCaseError> {
    let given = serde_json::Map::from_iter([("v".to_owned(), value.into())]);
    Ok(match task_type(pattern)?.check_params(&given) {
        Ok(params) => {
            prop_assert_eq!(
                params.get("v").map(String::as_str),
                Some(value),
                "kept as given"
            );
            Ok(())
        }
        Err(e) => {
            prop_assert_eq!(e.code, "invalid_params", "{}", e.message);
            Err(e.message)
        }
    })
}

/// What must become of a value made of `pieces` under the pattern `PATTERNS[p]`.
fn expected(p: usize, pieces: &[usize]) -> Result<(), String> {
    let (pattern, controls, invisibles) = PATTERNS[p];
    if pieces.iter().any(|i| PIECES[*i].1 == Kind::Nul) {
        return Err("parameter v must not contain a NUL byte".into());
    }
    for (text, kind) in pieces.iter().map(|i| PIECES[*i]) {
        let c = text.chars().next().unwrap_or(' ');
        match kind {
            Kind::Control if !controls => {
                return Err(format!(
                    "parameter v must not contain the control character {c:?}"
                ))
            }
            Kind::Invisible if !invisibles => {
                return Err(format!(
                    "parameter v must not contain the invisible character U+{:04X}",
                    u32::from(c)
                ))
            }
            _ => {}
        }
    }
    let value: String = pieces.iter().map(|i| PIECES[*i].0).collect();
    let anchored =
        regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?;
    if anchored.is_match(&value) {
        Ok(())
    } else {
        Err(format!("parameter v does not match {pattern}"))
    }
}

fn agree(got: Result<(), String>, want: Result<(), String>) -> Result<(), TestCaseError> {
    match (&got, &want) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(message), Err(start)) if message.starts_with(start.as_str()) => Ok(()),
        _ => Err(TestCaseError::fail(format!("got {got:?}, want {want:?}"))),
    }
}

#[test]
fn a_value_is_refused_for_what_its_pattern_does_not_name() {
    let case = (
        0..PATTERNS.len(),
        prop::collection::vec(0..PIECES.len(), 0..8),
    );
    check(2000, case, |(p, pieces)| {
        let value: String = pieces.iter().map(|i| PIECES[*i].0).collect();
        agree(judge(PATTERNS[p].0, &value)?, expected(p, &pieces))
    });
}

/// `params` written with names from a small set, so that some are given twice.
fn params_text() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof!["[ab]", "[ab]{2}", Just("d\\u0062".to_owned())];
    prop::collection::vec((name, ".{0,6}"), 0..6)
}

#[test]
fn a_name_given_twice_is_refused_naming_it() {
    check(1000, params_text(), |pairs| {
        let members: Vec<String> = pairs
            .iter()
            .map(|(name, value)| format!("\"{name}\":{}", serde_json::Value::from(value.as_str())))
            .collect();
        let body = format!("{{\"type\":\"t\",\"params\":{{{}}}}}", members.join(","));
        // The names as JSON reads them (`d\u0062` is `db`).
        let names: Vec<String> = pairs
            .iter()
            .map(|(name, _)| name.replace("\\u0062", "b"))
            .collect();
        let twice = names
            .iter()
            .enumerate()
            .find(|(i, n)| names[..*i].contains(n))
            .map(|(_, n)| n.clone());
        match (submission::decode(body.as_bytes()), twice) {
            (Ok(req), None) => {
                let params = req.params.unwrap_or_default();
                prop_assert_eq!(params.len(), names.len(), "{}", body);
                for ((_, value), name) in pairs.iter().zip(&names) {
                    prop_assert_eq!(
                        params.get(name).and_then(|v| v.as_str()),
                        Some(value.as_str())
                    );
                }
            }
            (Err(r), Some(name)) => {
                let want = format!("params: parameter {name:?} is given twice");
                prop_assert!(r.message.contains(&want), "{}: {}", body, r.message);
            }
            (got, twice) => {
                return Err(TestCaseError::fail(format!(
                    "{body}: {:?}, named twice: {twice:?}",
                    got.map(|_| ()).map_err(|r| r.message)
                )))
            }
        }
        Ok(())
    });
}

/// Corpus lines: `[pattern, value, verdict]`, the verdict `"accepted"` or the start of the
/// refusal's message.
#[test]
fn corpus_cases() {
    let cases: Vec<(String, String, String)> = corpus_lines("params")
        .iter()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("corpus params: {line}: {e}"))
        })
        .collect();
    replay(cases, |(pattern, value, verdict)| {
        let want = match verdict.as_str() {
            "accepted" => Ok(()),
            refusal => Err(refusal.to_owned()),
        };
        agree(judge(pattern, value)?, want)
    });
}
