//! Declared task types: the `[tasks.NAME]` tables of the configuration file, checked at
//! start-up (every error names the file, the type and the key), and what a submission is judged
//! by: declared parameters only, each matching its pattern, substituted into argv elements and
//! templates, never through a shell.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex_lite::Regex;
use serde::Deserialize;
use spool_proto::units::parse_duration;

use crate::characters::Unwanted;

/// A configuration problem, already worded: `spoold.toml: [tasks.backup] timeout: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypeError(pub String);

/// How an exit code is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitClass {
    /// The parameters were wrong (EX_USAGE, EX_DATAERR): never retried.
    InvalidParams,
    /// Not allowed (EX_NOPERM): never retried; alert.
    PermissionDenied,
    /// Try again later (EX_TEMPFAIL, EX_UNAVAILABLE): retried.
    Transient,
    /// Anything else the script did: retried.
    ScriptError,
}

impl ExitClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ExitClass::InvalidParams => "invalid_params",
            ExitClass::PermissionDenied => "permission_denied",
            ExitClass::Transient => "transient",
            ExitClass::ScriptError => "script_error",
        }
    }

    pub fn retried(self) -> bool {
        matches!(self, ExitClass::Transient | ExitClass::ScriptError)
    }
}

/// What happens to a task whose attempt was interrupted by a daemon crash or restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnInterrupt {
    /// A person decides (`manual_review`): the script may have had side effects.
    #[default]
    Review,
    /// Run it again (for types known to be safe to re-run).
    Retry,
    /// It failed.
    Fail,
}

impl OnInterrupt {
    pub fn as_str(self) -> &'static str {
        match self {
            OnInterrupt::Review => "review",
            OnInterrupt::Retry => "retry",
            OnInterrupt::Fail => "fail",
        }
    }
}

/// What happens to a task that fails after some of its steps were reported done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPartialFailure {
    /// A person decides (`manual_review`, `partial_failure`): redoing a finished step may not
    /// be safe.
    #[default]
    Review,
    /// Retry by the usual rules (the script skips steps already done).
    Retry,
}

/// A secret passed to attempts in their environment: the file is read when an attempt starts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretSpec {
    file: PathBuf,
}

/// The default `output_limit`.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 1 << 20;

/// One declared parameter, as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParamSpec {
    /// The whole value must match (anchored).
    pattern: String,
    /// Longest value, in bytes (default 256).
    max_length: Option<usize>,
    /// Used when the submission leaves the parameter out; without one it is required.
    default: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct BackoffSpec {
    base: Option<String>,
    cap: Option<String>,
}

/// `[tasks.NAME]` as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeSpec {
    command: Vec<String>,
    #[serde(default)]
    params: BTreeMap<String, ParamSpec>,
    idempotency_key: Option<String>,
    scope: Option<String>,
    timeout: Option<String>,
    queue_timeout: Option<String>,
    retry_deadline: Option<String>,
    max_attempts: Option<u32>,
    backoff: Option<BackoffSpec>,
    kill_grace: Option<String>,
    retry_on_timeout: Option<bool>,
    working_dir: Option<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    exit_codes: BTreeMap<String, ExitClass>,
    on_interrupt: Option<OnInterrupt>,
    /// Whether an operator may re-run a task of this type that ended (default true).
    operator_retry: Option<bool>,
    description: Option<String>,
    concurrency: Option<u32>,
    #[serde(default)]
    locks: Vec<String>,
    hold_locks_between_attempts: Option<bool>,
    output_limit: Option<String>,
    #[serde(default)]
    secret_env: BTreeMap<String, SecretSpec>,
    #[serde(default)]
    redact: Vec<String>,
    on_partial_failure: Option<OnPartialFailure>,
    /// Run its attempts as this user: a name from `/etc/passwd`, or `UID[:GID]`.
    user: Option<String>,
}

/// The user and group a type's attempts run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// As written in the file.
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// A declared parameter, checked.
#[derive(Debug, Clone)]
pub struct Param {
    pub pattern: String,
    regex: Regex,
    pub max_length: usize,
    pub default: Option<String>,
    /// The pattern names control characters explicitly (see [`names_controls`]): only then
    /// may a value hold one.
    controls: bool,
    /// The pattern names invisible characters explicitly (see [`names_invisibles`]): only
    /// then may a value hold one.
    invisibles: bool,
}

/// Whether a pattern is explicit about control characters (`\t`, `\n`, `\x1b`, `[[:cntrl:]]`,
/// `\pC` …). A class like `[^/]*` matches them too, but rarely on purpose: a tab or an escape
/// sequence in an argument is a mistake or an attack more often than a value.
fn names_controls(pattern: &str) -> bool {
    const EXPLICIT: [&str; 14] = [
        "\\t",
        "\\n",
        "\\r",
        "\\f",
        "\\v",
        "\\a",
        "\\e",
        "\\x",
        "\\u",
        "\\U",
        "[:cntrl:]",
        "\\pC",
        "\\p{C",
        "\\p{Control}",
    ];
    EXPLICIT.iter().any(|e| pattern.contains(e))
}

/// Whether a pattern is explicit about invisible characters (Unicode format characters such as
/// U+200B or the bidi control U+202E, line and paragraph separators; see
/// [`crate::characters`]): it holds one itself, or writes code points as escapes (`\x{200B}`,
/// `\u{202E}`, `\U{2028}`). `.*` or `[^/]+` match them too, but rarely on purpose: they make a
/// value read as another.
fn names_invisibles(pattern: &str) -> bool {
    ["\\x", "\\u", "\\U"].iter().any(|e| pattern.contains(e))
        || pattern
            .chars()
            .any(|c| matches!(Unwanted::of(c), Some(Unwanted::Invisible(_))))
}

/// A declared task type, checked and with its defaults filled in.
#[derive(Debug, Clone)]
pub struct TaskType {
    pub name: String,
    pub description: Option<String>,
    /// argv templates; element 0 is an absolute path.
    pub command: Vec<String>,
    pub params: BTreeMap<String, Param>,
    pub idempotency_key: Option<String>,
    pub scope: String,
    pub timeout: Duration,
    pub queue_timeout: Option<Duration>,
    pub retry_deadline: Option<Duration>,
    pub max_attempts: u32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub kill_grace: Duration,
    pub retry_on_timeout: bool,
    pub working_dir: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    exit_codes: HashMap<i32, ExitClass>,
    pub on_interrupt: OnInterrupt,
    pub operator_retry: bool,
    /// At most this many of its tasks run at once.
    pub concurrency: Option<u32>,
    /// Lock name templates: an attempt holds all of them.
    pub locks: Vec<String>,
    pub hold_locks_between_attempts: bool,
    /// Output kept per attempt (head and tail), in bytes.
    pub output_limit: u64,
    /// Environment variables whose values are read from files when an attempt starts (name →
    /// file); the values are redacted from its output.
    pub secret_env: BTreeMap<String, PathBuf>,
    /// Patterns redacted from its output (`regex` syntax).
    pub redact: Vec<String>,
    pub on_partial_failure: OnPartialFailure,
    /// Run its attempts as another user (`user`).
    pub run_as: Option<RunAs>,
}

/// Why a submission's parameters are refused: a stable code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    pub code: &'static str,
    pub message: String,
}

/// The longest parameter value unless the type says otherwise.
pub const DEFAULT_MAX_PARAM_BYTES: usize = 256;

/// The longest argument Linux passes to a program: `MAX_ARG_STRLEN` (32 pages of 4 KiB) less
/// its terminating NUL. A longer one fails the start with E2BIG, so no `max_length`, and no
/// argv element with its parameters at their `max_length`, may exceed it.
pub const MAX_ARGUMENT_BYTES: usize = 32 * 4096 - 1;

impl TaskType {
    /// Check one `[tasks.NAME]` table. `file` names the configuration file in messages.
    pub fn from_spec(file: &Path, name: &str, spec: TypeSpec) -> Result<TaskType, TypeError> {
        let err = |key: &str, what: String| {
            TypeError(format!("{}: [tasks.{name}] {key}: {what}", file.display()))
        };
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(TypeError(format!(
                "{}: [tasks.{name}]: a type name is letters, digits, '-' and '_'",
                file.display()
            )));
        }
        let duration = |key: &str, value: &Option<String>, default: Option<Duration>| match value {
            None => Ok(default),
            Some(text) => parse_duration(text)
                .ok()
                .filter(|d| !d.is_zero())
                .map(Some)
                .ok_or_else(|| err(key, format!("{text:?} is not a duration above 0, e.g. 10m"))),
        };
        let mut params = BTreeMap::new();
        for (pname, p) in spec.params {
            if !is_param_name(&pname) {
                return Err(err(
                    &format!("params.{pname}"),
                    "a parameter name is letters, digits and '_'".into(),
                ));
            }
            let regex = Regex::new(&format!("^(?:{})$", p.pattern))
                .map_err(|e| err(&format!("params.{pname}.pattern"), e.to_string()))?;
            let max_length = p.max_length.unwrap_or(DEFAULT_MAX_PARAM_BYTES);
            if !(1..=MAX_ARGUMENT_BYTES).contains(&max_length) {
                return Err(err(
                    &format!("params.{pname}.max_length"),
                    format!(
                        "must be 1–{MAX_ARGUMENT_BYTES} bytes (the longest argument Linux passes \
                         to a program)"
                    ),
                ));
            }
            if let Some(d) = &p.default {
                if !regex.is_match(d) || d.len() > max_length {
                    return Err(err(
                        &format!("params.{pname}.default"),
                        format!("{d:?} does not match the parameter's own pattern"),
                    ));
                }
            }
            params.insert(
                pname,
                Param {
                    controls: names_controls(&p.pattern),
                    invisibles: names_invisibles(&p.pattern),
                    pattern: p.pattern,
                    regex,
                    max_length,
                    default: p.default,
                },
            );
        }
        let known = |template: &str, key: &str| -> Result<(), TypeError> {
            for used in template_names(template).map_err(|m| err(key, m))? {
                if !params.contains_key(used) {
                    return Err(err(key, format!("{{{used}}} is not a declared parameter")));
                }
            }
            Ok(())
        };
        let Some(program) = spec.command.first() else {
            return Err(err(
                "command",
                "must name a program: [\"/path/to/script\", …]".into(),
            ));
        };
        if !Path::new(program).is_absolute() || program.contains('{') {
            return Err(err(
                "command",
                format!("the program {program:?} must be an absolute path (no shell, no PATH lookup, no parameters)"),
            ));
        }
        for (i, arg) in spec.command.iter().enumerate() {
            known(arg, &format!("command[{i}]"))?;
            let longest = longest_rendered(arg, &params);
            if longest > MAX_ARGUMENT_BYTES {
                return Err(err(
                    &format!("command[{i}]"),
                    format!(
                        "with its parameters at their max_length this argument takes up to \
                         {longest} bytes, more than the {MAX_ARGUMENT_BYTES} Linux passes to a \
                         program: lower their max_length"
                    ),
                ));
            }
        }
        if let Some(t) = &spec.idempotency_key {
            known(t, "idempotency_key")?;
        }
        // Keys are per type unless types share a scope on purpose.
        let scope = spec.scope.unwrap_or_else(|| name.to_owned());
        known(&scope, "scope")?;
        let mut exit_codes = default_exit_codes();
        for (code, class) in spec.exit_codes {
            let n: i32 = code
                .parse()
                .ok()
                .filter(|n| (1..=255).contains(n))
                .ok_or_else(|| {
                    err(
                        &format!("exit_codes.{code}"),
                        "an exit code is 1–255".into(),
                    )
                })?;
            exit_codes.insert(n, class);
        }
        for key in spec.env.keys() {
            if key.is_empty() || key.contains('=') || key.starts_with("SPOOLD_") {
                return Err(err(
                    &format!("env.{key}"),
                    "not a name the daemon passes (no '=', not SPOOLD_*)".into(),
                ));
            }
        }
        let mut secret_env = BTreeMap::new();
        for (key, secret) in spec.secret_env {
            if key.is_empty() || key.contains('=') || key.starts_with("SPOOLD_") {
                return Err(err(
                    &format!("secret_env.{key}"),
                    "not a name the daemon passes (no '=', not SPOOLD_*)".into(),
                ));
            }
            if spec.env.contains_key(&key) {
                return Err(err(
                    &format!("secret_env.{key}"),
                    "also set in env; a variable is either plain or secret".into(),
                ));
            }
            if !secret.file.is_absolute() {
                return Err(err(
                    &format!("secret_env.{key}.file"),
                    "must be an absolute path".into(),
                ));
            }
            secret_env.insert(key, secret.file);
        }
        for (i, pattern) in spec.redact.iter().enumerate() {
            if let Err(e) = regex::bytes::Regex::new(pattern) {
                return Err(err(&format!("redact[{i}]"), e.to_string()));
            }
        }
        for (i, lock) in spec.locks.iter().enumerate() {
            if lock.is_empty() {
                return Err(err(
                    &format!("locks[{i}]"),
                    "a lock name is not empty".into(),
                ));
            }
            known(lock, &format!("locks[{i}]"))?;
        }
        if let Some(n) = spec.concurrency {
            if !(1..=10_000).contains(&n) {
                return Err(err("concurrency", "must be 1–10000".into()));
            }
        }
        let output_limit = match &spec.output_limit {
            None => DEFAULT_OUTPUT_LIMIT,
            Some(text) => spool_proto::units::parse_size(text)
                .ok()
                .filter(|n| (1024..=1 << 40).contains(n))
                .ok_or_else(|| {
                    err(
                        "output_limit",
                        format!("{text:?} is not a size from 1KiB to 1TiB, e.g. 1MiB"),
                    )
                })?,
        };
        if let Some(dir) = &spec.working_dir {
            if !dir.is_absolute() {
                return Err(err("working_dir", "must be an absolute path".into()));
            }
        }
        let run_as = match &spec.user {
            None => None,
            Some(user) => Some(RunAs::resolve(user).map_err(|why| err("user", why))?),
        };
        let max_attempts = spec.max_attempts.unwrap_or(1);
        if !(1..=100).contains(&max_attempts) {
            return Err(err("max_attempts", "must be 1–100".into()));
        }
        let backoff = spec.backoff.unwrap_or(BackoffSpec {
            base: None,
            cap: None,
        });
        let backoff_base = duration("backoff.base", &backoff.base, Some(Duration::from_secs(2)))?
            .unwrap_or_default();
        let backoff_cap = duration("backoff.cap", &backoff.cap, Some(Duration::from_secs(300)))?
            .unwrap_or_default();
        if backoff_cap < backoff_base {
            return Err(err("backoff", "cap must be at least base".into()));
        }
        Ok(TaskType {
            name: name.to_owned(),
            description: spec.description,
            command: spec.command,
            params,
            idempotency_key: spec.idempotency_key,
            scope,
            timeout: duration("timeout", &spec.timeout, Some(Duration::from_secs(3600)))?
                .unwrap_or_default(),
            queue_timeout: duration("queue_timeout", &spec.queue_timeout, None)?,
            retry_deadline: duration("retry_deadline", &spec.retry_deadline, None)?,
            max_attempts,
            backoff_base,
            backoff_cap,
            kill_grace: duration(
                "kill_grace",
                &spec.kill_grace,
                Some(Duration::from_secs(10)),
            )?
            .unwrap_or_default(),
            retry_on_timeout: spec.retry_on_timeout.unwrap_or(false),
            working_dir: spec.working_dir,
            env: spec.env,
            exit_codes,
            on_interrupt: spec.on_interrupt.unwrap_or_default(),
            operator_retry: spec.operator_retry.unwrap_or(true),
            concurrency: spec.concurrency,
            locks: spec.locks,
            hold_locks_between_attempts: spec.hold_locks_between_attempts.unwrap_or(false),
            output_limit,
            secret_env,
            redact: spec.redact,
            on_partial_failure: spec.on_partial_failure.unwrap_or_default(),
            run_as,
        })
    }

    /// The classification of a non-zero exit code.
    pub fn classify_exit(&self, code: i32) -> ExitClass {
        self.exit_codes
            .get(&code)
            .copied()
            .unwrap_or(ExitClass::ScriptError)
    }

    /// The exit-code table, for `GET /v1/task-types`.
    pub fn exit_codes(&self) -> BTreeMap<i32, ExitClass> {
        self.exit_codes.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// Check a submission's parameters: declared names only, every value a string matching its
    /// pattern and within its length; defaults filled in.
    pub fn check_params(
        &self,
        given: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<BTreeMap<String, String>, ParamError> {
        let invalid = |message: String| ParamError {
            code: "invalid_params",
            message,
        };
        if let Some(unknown) = given.keys().find(|k| !self.params.contains_key(*k)) {
            return Err(ParamError {
                code: "unknown_param",
                message: format!("task type {} has no parameter {unknown:?}", self.name),
            });
        }
        let mut out = BTreeMap::new();
        for (name, param) in &self.params {
            let value = match given.get(name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => {
                    return Err(invalid(format!(
                        "parameter {name} must be a string, not {other}"
                    )))
                }
                None => match &param.default {
                    Some(d) => d.clone(),
                    None => {
                        return Err(ParamError {
                            code: "missing_param",
                            message: format!("parameter {name} is required"),
                        })
                    }
                },
            };
            if value.len() > param.max_length {
                return Err(invalid(format!(
                    "parameter {name} must not exceed {} bytes",
                    param.max_length
                )));
            }
            // A NUL cannot be passed in argv at all; other control characters and invisible
            // ones only where the pattern asks for them.
            let unwanted = if value.contains('\0') {
                Some(Unwanted::Nul)
            } else {
                value.chars().filter_map(Unwanted::of).find(|u| match u {
                    Unwanted::Nul => true,
                    Unwanted::Control(_) => !param.controls,
                    Unwanted::Invisible(_) => !param.invisibles,
                })
            };
            match unwanted {
                None => {}
                Some(Unwanted::Nul) => {
                    return Err(invalid(format!(
                        "parameter {name} must not contain a NUL byte (it cannot be passed as \
                         an argument)"
                    )))
                }
                Some(u @ Unwanted::Control(_)) => {
                    return Err(invalid(format!(
                        "parameter {name} must not contain {u} (a pattern that allows one names \
                         it: \\t, \\n, \\x1b, [[:cntrl:]])"
                    )))
                }
                Some(u @ Unwanted::Invisible(_)) => {
                    return Err(invalid(format!(
                        "parameter {name} must not contain {u}: a format character, bidi \
                         control or line separator makes a value read as another (a pattern \
                         that allows one names it: \\u{{202E}}, \\x{{200B}})"
                    )))
                }
            }
            if !param.regex.is_match(&value) {
                return Err(invalid(format!(
                    "parameter {name} does not match {}",
                    param.pattern
                )));
            }
            out.insert(name.clone(), value);
        }
        Ok(out)
    }

    /// The locks of a task with these parameters: each template filled in, without repeats.
    pub fn locks(&self, params: &BTreeMap<String, String>) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(self.locks.len());
        for lock in self.locks.iter().map(|l| render(l, params)) {
            if !out.contains(&lock) {
                out.push(lock);
            }
        }
        out
    }

    /// The argv of an attempt: each element with its parameters filled in.
    pub fn argv(&self, params: &BTreeMap<String, String>) -> Vec<String> {
        self.command.iter().map(|a| render(a, params)).collect()
    }
}

/// `template` with every `{name}` replaced by its parameter's value (names are checked when the
/// configuration is loaded).
impl RunAs {
    /// `user` as the file gives it: `UID` or `UID:GID` (numbers), or a name looked up in
    /// `/etc/passwd` (its primary group). Supplementary groups are not set: an attempt runs with
    /// the user's primary group only.
    pub fn resolve(user: &str) -> Result<RunAs, String> {
        let numeric = |s: &str| s.parse::<u32>().ok();
        if let Some((uid, gid)) = user.split_once(':') {
            return match (numeric(uid), numeric(gid)) {
                (Some(uid), Some(gid)) => Ok(RunAs {
                    name: user.to_owned(),
                    uid,
                    gid,
                }),
                _ => Err(format!("{user:?} is not UID:GID (two numbers)")),
            };
        }
        let passwd = std::fs::read_to_string("/etc/passwd")
            .map_err(|e| format!("cannot read /etc/passwd to look up {user:?}: {e}"))?;
        let found = passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let [name, _, uid, gid, ..] = fields[..] else {
                return None;
            };
            (name == user || (numeric(user).is_some() && uid == user))
                .then(|| Some((numeric(uid)?, numeric(gid)?)))
                .flatten()
        });
        match (found, numeric(user)) {
            (Some((uid, gid)), _) => Ok(RunAs {
                name: user.to_owned(),
                uid,
                gid,
            }),
            // A uid without an account: its group is the same number.
            (None, Some(uid)) => Ok(RunAs {
                name: user.to_owned(),
                uid,
                gid: uid,
            }),
            (None, None) => Err(format!("no user {user:?} in /etc/passwd")),
        }
    }
}

pub fn render(template: &str, params: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                let name = &after[..close];
                out.push_str(params.get(name).map_or("", String::as_str));
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The longest `template` can be once rendered: its text, and each parameter it uses at its
/// `max_length` (names are checked before).
fn longest_rendered(template: &str, params: &BTreeMap<String, Param>) -> usize {
    let names = template_names(template).unwrap_or_default();
    let text = template.len() - names.iter().map(|n| n.len() + 2).sum::<usize>();
    text + names
        .iter()
        .map(|n| params.get(*n).map_or(0, |p| p.max_length))
        .sum::<usize>()
}

/// The `{name}`s a template uses, or what is wrong with it.
fn template_names(template: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("a '}' that closes no {parameter}".into());
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("a '{' that is never closed".into());
        };
        let name = &after[..close];
        if !is_param_name(name) {
            return Err(format!("{{{name}}} is not a parameter name"));
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    Ok(names)
}

fn is_param_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// sysexits.h: 64 EX_USAGE and 65 EX_DATAERR → invalid_params; 77 EX_NOPERM →
/// permission_denied; 69 EX_UNAVAILABLE and 75 EX_TEMPFAIL → transient.
fn default_exit_codes() -> HashMap<i32, ExitClass> {
    HashMap::from([
        (64, ExitClass::InvalidParams),
        (65, ExitClass::InvalidParams),
        (77, ExitClass::PermissionDenied),
        (69, ExitClass::Transient),
        (75, ExitClass::Transient),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TaskType, TypeError> {
        let spec: TypeSpec = toml::from_str(text).map_err(|e| TypeError(e.to_string()))?;
        TaskType::from_spec(Path::new("spoold.toml"), "backup", spec)
    }

    const BACKUP: &str = r#"
        command = ["/usr/local/bin/backup.sh", "--db", "{database}", "--date={date}"]
        params.database = { pattern = "[a-z0-9_]{1,64}" }
        params.date = { pattern = "[0-9]{4}-[0-9]{2}-[0-9]{2}" }
        idempotency_key = "backup:{database}:{date}"
        timeout = "10m"
        max_attempts = 3
        backoff = { base = "2s", cap = "5m" }
        [exit_codes]
        64 = "invalid_params"
        3 = "transient"
    "#;

    fn params(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::String((*v).to_owned())))
            .collect()
    }

    #[test]
    fn a_declared_type_renders_argv_and_keys_without_a_shell() {
        let t = parse(BACKUP).expect("valid");
        let p = t
            .check_params(&params(&[("database", "db1"), ("date", "2026-12-01")]))
            .expect("valid params");
        assert_eq!(
            t.argv(&p),
            [
                "/usr/local/bin/backup.sh",
                "--db",
                "db1",
                "--date=2026-12-01"
            ]
        );
        assert_eq!(
            render(t.idempotency_key.as_deref().unwrap_or_default(), &p),
            "backup:db1:2026-12-01"
        );
        assert_eq!((t.timeout, t.max_attempts), (Duration::from_secs(600), 3));
        assert_eq!(t.classify_exit(3), ExitClass::Transient);
        assert_eq!(t.classify_exit(75), ExitClass::Transient);
        assert_eq!(t.classify_exit(77), ExitClass::PermissionDenied);
        assert_eq!(t.classify_exit(1), ExitClass::ScriptError);
    }

    #[test]
    fn locks_are_rendered_once_each() {
        let t = parse(
            "command = [\"/bin/x\"]\nparams.env = { pattern = \"[a-z]+\" }\n\
             locks = [\"env:{env}\", \"global\", \"env:{env}\"]\nconcurrency = 2\n\
             output_limit = \"64KiB\"",
        )
        .expect("valid");
        let p = BTreeMap::from([("env".to_owned(), "prod".to_owned())]);
        assert_eq!(t.locks(&p), ["env:prod", "global"]);
        assert_eq!((t.concurrency, t.output_limit), (Some(2), 65536));
    }

    #[test]
    fn parameters_are_checked_whole() {
        let t = parse(BACKUP).expect("valid");
        let code = |pairs: &[(&str, &str)]| t.check_params(&params(pairs)).map_err(|e| e.code);
        assert_eq!(code(&[("database", "db1")]), Err("missing_param"));
        assert_eq!(
            code(&[("database", "db1"), ("date", "2026-12-01"), ("x", "1")]),
            Err("unknown_param")
        );
        // Anchored: a match inside the value is not enough.
        assert_eq!(
            code(&[("database", "db1; rm -rf /"), ("date", "2026-12-01")]),
            Err("invalid_params")
        );
        assert_eq!(
            code(&[("database", "db1"), ("date", "2026-12-01x")]),
            Err("invalid_params")
        );
        let mut numeric = params(&[("database", "db1")]);
        numeric.insert("date".into(), serde_json::json!(20261201));
        assert_eq!(
            t.check_params(&numeric).map_err(|e| e.code),
            Err("invalid_params")
        );
    }

    #[test]
    fn control_characters_need_a_pattern_that_names_them() {
        let t = parse(
            r#"
            command = ["/bin/echo", "{path}", "{text}"]
            params.path = { pattern = "[^/]*" }
            params.text = { pattern = '[a-z\t]*', default = "" }
        "#,
        )
        .expect("valid");
        let check = |path: &str, text: &str| {
            t.check_params(&params(&[("path", path), ("text", text)]))
                .map(drop)
                .map_err(|e| (e.code, e.message))
        };
        assert_eq!(check("plain name", "").map_err(|e| e.0), Ok(()));
        let (code, message) = check("a\0b", "").expect_err("NUL refused");
        assert_eq!(code, "invalid_params");
        assert!(message.contains("NUL"), "{message}");
        let (_, message) = check("a\u{1b}[2Jb", "").expect_err("escape refused");
        assert!(message.contains("control character '\\u{1b}'"), "{message}");
        // A pattern that names a control character decides alone which it allows.
        assert_eq!(check("a", "tab\there").map_err(|e| e.0), Ok(()));
        assert_eq!(
            check("a", "a\0").map_err(|e| e.0),
            Err("invalid_params"),
            "never NUL"
        );
    }

    #[test]
    fn invisible_characters_need_a_pattern_that_names_them() {
        let t = parse(
            "command = [\"/bin/echo\", \"{any}\", \"{path}\", \"{escaped}\", \"{literal}\"]\n\
             params.any = { pattern = '.*', default = \"\" }\n\
             params.path = { pattern = '[^/]+', default = \"x\" }\n\
             params.escaped = { pattern = '[a-z\\x{200B}]*', default = \"\" }\n\
             params.literal = { pattern = \"[a-z\u{2028}]*\", default = \"\" }\n",
        )
        .expect("valid");
        let check = |name: &str, value: &str| {
            t.check_params(&params(&[(name, value)]))
                .map(drop)
                .map_err(|e| (e.code, e.message))
        };
        for bad in [
            "a\u{2028}b",
            "evil\u{202E}txt",
            "zero\u{200B}width",
            "\u{FEFF}bom",
        ] {
            for name in ["any", "path"] {
                let (code, message) = check(name, bad).expect_err(bad);
                assert_eq!(code, "invalid_params", "{name} {bad:?}");
                let u = format!(
                    "U+{:04X}",
                    u32::from(bad.chars().find(|c| !c.is_ascii()).unwrap_or(' '))
                );
                assert!(
                    message.contains(&format!(
                        "parameter {name} must not contain the invisible character {u}"
                    )),
                    "{message}"
                );
            }
        }
        // A pattern that names one, by an escape or itself, decides alone which it allows.
        assert_eq!(
            check("escaped", "zero\u{200B}width").map_err(|e| e.0),
            Ok(())
        );
        assert_eq!(
            check("escaped", "evil\u{202E}txt").map_err(|e| e.0),
            Err("invalid_params"),
            "not in the pattern"
        );
        assert_eq!(check("literal", "a\u{2028}b").map_err(|e| e.0), Ok(()));
        // Other characters beyond ASCII are values like any other.
        assert_eq!(
            check("any", "café 日本 🙂 a\u{a0}b").map_err(|e| e.0),
            Ok(())
        );
    }

    #[test]
    fn configuration_errors_name_the_file_the_type_and_the_key() {
        let cases = [
            (
                r#"command = ["backup.sh"]"#,
                "[tasks.backup] command: the program",
            ),
            (
                r#"command = []"#,
                "[tasks.backup] command: must name a program",
            ),
            (
                r#"command = ["/bin/x", "{nope}"]"#,
                "[tasks.backup] command[1]: {nope} is not a declared parameter",
            ),
            (
                "command = [\"/bin/x\"]\ntimeout = \"soon\"",
                "[tasks.backup] timeout: \"soon\" is not a duration",
            ),
            (
                "command = [\"/bin/x\"]\nparams.a = { pattern = \"(\" }",
                "[tasks.backup] params.a.pattern:",
            ),
            (
                "command = [\"/bin/x\"]\nidempotency_key = \"k:{a\"",
                "[tasks.backup] idempotency_key: a '{' that is never closed",
            ),
            (
                "command = [\"/bin/x\"]\n[exit_codes]\n300 = \"transient\"",
                "[tasks.backup] exit_codes.300",
            ),
            (
                "command = [\"/bin/x\"]\nmax_attempts = 0",
                "[tasks.backup] max_attempts",
            ),
            (
                "command = [\"/bin/x\"]\nlocks = [\"env:{env}\"]",
                "[tasks.backup] locks[0]: {env} is not a declared parameter",
            ),
            (
                "command = [\"/bin/x\"]\nredact = [\"(\"]",
                "[tasks.backup] redact[0]:",
            ),
            (
                "command = [\"/bin/x\"]\nsecret_env.T = { file = \"rel\" }",
                "[tasks.backup] secret_env.T.file: must be an absolute path",
            ),
            (
                "command = [\"/bin/x\"]\noutput_limit = \"10\"",
                "[tasks.backup] output_limit:",
            ),
            (
                "command = [\"/bin/x\"]\nconcurrency = 0",
                "[tasks.backup] concurrency",
            ),
            (
                "command = [\"/bin/x\"]\nparams.a = { pattern = \".*\", max_length = 200000 }",
                "[tasks.backup] params.a.max_length: must be 1–131071 bytes",
            ),
            (
                "command = [\"/bin/x\"]\nparams.a = { pattern = \".*\", max_length = 0 }",
                "[tasks.backup] params.a.max_length",
            ),
            (
                "command = [\"/bin/x\", \"--ab={a}{b}\"]\n\
                 params.a = { pattern = \".*\", max_length = 100000 }\n\
                 params.b = { pattern = \".*\", max_length = 100000 }",
                "[tasks.backup] command[1]: with its parameters at their max_length this argument \
                 takes up to 200005 bytes",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text).expect_err(text);
            assert!(
                e.0.starts_with("spoold.toml: ") && e.0.contains(want),
                "{text}: {e}"
            );
        }
        let unknown = toml::from_str::<TypeSpec>("command = [\"/bin/x\"]\nshell = true");
        assert!(unknown.is_err_and(|e| e.to_string().contains("unknown field `shell`")));
    }
}
