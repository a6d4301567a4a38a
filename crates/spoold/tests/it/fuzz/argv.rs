//! Target: task parameter templating. A declared command's argv elements are templates; a
//! submission's values are substituted into them. No value escapes its element: argv has as
//! many elements as the command whatever the values, each element is exactly its template with
//! the values in place (a value holding `{other}`, quotes, `$(…)`, spaces or newlines stays
//! literal), and the program receives exactly those elements (spawned here through
//! `tasks::exec`, the daemon's only spawner: no shell reads them).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use spoold::tasks::exec::{self, Spawn};
use spoold::tasks::output::{OutputLog, RedactRules};
use spoold::tasks::{TaskType, TypeSpec};
use tokio_util::sync::CancellationToken;

use super::{check, corpus, replay};

/// The program every generated type runs: it prints each argument after the format, followed
/// by a NUL, and interprets nothing in them.
const PRINTF: &str = "/usr/bin/printf";
const FORMAT: &str = "%s\\0";
const PARAMS: [&str; 3] = ["a", "b", "c"];

/// One piece of an argv template: text, or a parameter.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Param(usize),
}

/// A generated case: the templates after the format, and a value per parameter.
#[derive(Debug, Clone, serde::Deserialize)]
struct Case {
    templates: Vec<Vec<PieceSpec>>,
    values: Vec<String>,
}

/// [`Piece`] as the corpus writes it: `{"text": "…"}` or `{"param": 0}`.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum PieceSpec {
    Text(String),
    Param(usize),
}

impl From<&PieceSpec> for Piece {
    fn from(p: &PieceSpec) -> Piece {
        match p {
            PieceSpec::Text(t) => Piece::Text(t.clone()),
            PieceSpec::Param(i) => Piece::Param(*i % PARAMS.len()),
        }
    }
}

fn template_text(pieces: &[Piece]) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.clone(),
            Piece::Param(i) => format!("{{{}}}", PARAMS[*i]),
        })
        .collect()
}

/// Template text: anything but braces (a brace is template syntax), shell syntax above all.
fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9 =/.:,'\"$;|&*?~<>()`\\\\-]{0,8}", "[^{}\u{0}]{0,6}",]
}

/// Values meant to break out: shell syntax, template syntax, separators, options, escapes.
fn value() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "$(id)", "`id`", ";", "|", "&&", "'", "\"", " ", "\t", "\n", "*", "?", "~", "{a}", "{b}",
        "{", "}", "\\", "$HOME", "-n", "--", "é", "%s", "%b", "\\0", "\\n", "=", "..", "/",
    ]);
    prop_oneof![
        prop::collection::vec(pieces, 0..6).prop_map(|p| p.concat()),
        "[^\u{0}]{0,12}",
    ]
}

fn case() -> impl Strategy<Value = (Vec<Vec<Piece>>, Vec<String>)> {
    let piece = prop_oneof![
        text().prop_map(Piece::Text),
        (0..PARAMS.len()).prop_map(Piece::Param),
    ];
    (
        prop::collection::vec(prop::collection::vec(piece, 0..4), 1..5),
        prop::collection::vec(value(), PARAMS.len()),
    )
}

/// The declared type: printf, its format, then the templates; every parameter takes anything
/// but NUL (the pattern names control characters, so they are allowed).
fn task_type(templates: &[Vec<Piece>]) -> Result<TaskType, TestCaseError> {
    let mut command = vec![PRINTF.to_owned(), FORMAT.to_owned()];
    command.extend(templates.iter().map(|t| template_text(t)));
    let params: serde_json::Map<String, serde_json::Value> = PARAMS
        .iter()
        .map(|p| {
            (
                (*p).to_owned(),
                serde_json::json!({"pattern": "(?s)[^\\x00]*", "max_length": 4096}),
            )
        })
        .collect();
    let spec: TypeSpec = serde_json::from_value(serde_json::json!({
        "command": command,
        "params": params,
    }))
    .map_err(|e| TestCaseError::fail(format!("spec: {e}")))?;
    TaskType::from_spec(Path::new("fuzz.toml"), "fuzz", spec)
        .map_err(|e| TestCaseError::fail(format!("{command:?}: {e}")))
}

/// What each element must be: its template with the values in place, and nothing else.
fn expected(templates: &[Vec<Piece>], values: &[String]) -> Vec<String> {
    let mut argv = vec![PRINTF.to_owned(), FORMAT.to_owned()];
    argv.extend(templates.iter().map(|t| {
        t.iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Param(i) => values[*i].as_str(),
            })
            .collect::<String>()
    }));
    argv
}

/// The argv a submission with `values` runs, checked against [`expected`].
fn rendered(templates: &[Vec<Piece>], values: &[String]) -> Result<Vec<String>, TestCaseError> {
    let t = task_type(templates)?;
    let given: serde_json::Map<String, serde_json::Value> = PARAMS
        .iter()
        .zip(values)
        .map(|(p, v)| ((*p).to_owned(), serde_json::Value::String(v.clone())))
        .collect();
    let params: BTreeMap<String, String> = t
        .check_params(&given)
        .map_err(|e| TestCaseError::fail(format!("{values:?}: {}", e.message)))?;
    let argv = t.argv(&params);
    prop_assert_eq!(argv.len(), templates.len() + 2, "argv length");
    prop_assert_eq!(&argv, &expected(templates, values));
    Ok(argv)
}

#[test]
fn no_substitution_escapes_its_argv_element() {
    check(1000, case(), |(templates, values)| {
        rendered(&templates, &values).map(drop)
    });
}

/// Runs `argv` as an attempt would be run and returns the arguments the program received.
fn received(argv: &[String]) -> Result<Vec<Vec<u8>>, TestCaseError> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("out");
    let rules = RedactRules::new(Vec::new(), &[]).expect("no rules");
    let log = Arc::new(Mutex::new(
        OutputLog::create(&path, 1 << 20, &rules).expect("output log"),
    ));
    let finished = runtime.block_on(exec::run(Spawn {
        argv,
        env: Vec::new(),
        working_dir: None,
        run_as: None,
        timeout: Duration::from_secs(20),
        kill_grace: Duration::from_secs(1),
        cancel: CancellationToken::new(),
        shutdown: CancellationToken::new(),
        lease_lost: CancellationToken::new(),
        lease: None,
        tag: exec::attempt_tag("fuzz", 1),
        cgroup: None,
        output: Some(Arc::clone(&log)),
        supervisor: &exec::Supervisor::command(
            vec![env!("CARGO_BIN_EXE_spoold").into()],
            dir.path().to_path_buf(),
        ),
    }));
    prop_assert_eq!(finished.exit_code, Some(0), "{:?}", finished);
    let log = Arc::try_unwrap(log)
        .map_err(|_| TestCaseError::fail("the output log is still shared"))?
        .into_inner()
        .expect("log lock");
    log.finish().expect("finish the log");
    let out = std::fs::read(&path).unwrap_or_default();
    Ok(out
        .split(|b| *b == 0)
        .map(<[u8]>::to_vec)
        .collect::<Vec<_>>()
        .split_last()
        .map(|(_, args)| args.to_vec())
        .unwrap_or_default())
}

/// The program gets the elements as they are: spawned for real (a few cases: each is a
/// process).
#[test]
fn the_program_receives_exactly_the_elements() {
    check(48, case(), |(templates, values)| {
        let argv = rendered(&templates, &values)?;
        let got = received(&argv)?;
        let want: Vec<Vec<u8>> = argv[2..].iter().map(|a| a.as_bytes().to_vec()).collect();
        prop_assert_eq!(got, want);
        Ok(())
    });
}

#[test]
fn corpus_cases() {
    let cases: Vec<(String, Case)> = corpus("argv")
        .into_iter()
        .map(|(name, bytes)| {
            let case = serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("corpus argv/{name}: {e}"));
            (name, case)
        })
        .collect();
    replay(cases, |(_, case)| {
        let templates: Vec<Vec<Piece>> = case
            .templates
            .iter()
            .map(|t| t.iter().map(Piece::from).collect())
            .collect();
        let mut values = case.values.clone();
        values.resize(PARAMS.len(), String::new());
        let argv = rendered(&templates, &values)?;
        let want: Vec<Vec<u8>> = argv[2..].iter().map(|a| a.as_bytes().to_vec()).collect();
        prop_assert_eq!(received(&argv)?, want);
        Ok(())
    });
}
