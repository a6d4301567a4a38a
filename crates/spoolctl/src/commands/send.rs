//! `spoolctl send URL`: build a create request from flags and submit it. Every check that can
//! be made locally (headers, body source, JSON validity, times) runs before the first request;
//! a JSON body is embedded as raw bytes so the target receives exactly what was typed.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::value::RawValue;
use spool_proto::{units, CreateDelivery, DeliveryMode, Reconcile, MAX_BODY_BYTES};

use crate::cli::{AtMostOnceArgs, RequestArgs, SendArgs, UsageError};
use crate::client::{Client, ClientError};
use crate::commands::{wait, Exit, Refused};
use crate::output::Output;

pub async fn run(client: &Client, args: SendArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let poll = args.poll();
    if args.wait {
        wait::check_poll(&poll)?;
    }
    let relative = relative_times(&args.request);
    let request = build_request(args.request, &mut io::stdin().lock())?;
    // The delivery's id, chosen here: should no answer come, the request dropped into the
    // maildrop carries it, and the daemon that did store it finds it there.
    let id = uuid::Uuid::now_v7().simple().to_string();
    let body = serde_json::to_vec(&request).context("encode the request")?;
    let created = match client.create_as(body.clone(), Some(&id)).await {
        Ok(created) => created,
        Err(e) if e.daemon_away() => {
            let found = crate::maildrop::find(args.maildrop.as_deref(), client.maildrop_pointer());
            // No maildrop here (none named, the daemon never said, `off`): as before a
            // maildrop, the job is told whether anything was stored.
            let Ok(found) = found else {
                return Err(create_failed(e, &relative));
            };
            if let Err(why) = drop_request(&found.dir, &id, &body) {
                return Err(create_failed(e, &relative).context(format!(
                    "it could not be dropped into the maildrop {} either ({why})",
                    found.dir.display()
                )));
            }
            return report_dropped(client, out, &id, &found.dir, &e, args.wait.then_some(&poll))
                .await;
        }
        Err(e) => {
            let refused = e.is_refusal();
            let err = create_failed(e, &relative);
            return Err(if refused {
                Refused::new(&err, "queued").into()
            } else {
                err
            });
        }
    };
    let action = if created.is_new { "queued" } else { "existing" };

    if !args.wait {
        if out.is_json() {
            out.json(&created.delivery)?;
        } else {
            out.delivery(action, &created.delivery)?;
        }
        return Ok(Exit::Success);
    }
    // With --wait, JSON output is only the final state: one document, not two.
    if !out.is_json() {
        out.delivery(action, &created.delivery)?;
    }
    let waited = wait::wait(client, &created.delivery.id, &poll).await?;
    Ok(wait::report(out, &waited)?)
}

/// Drop the create `body` as `id` into the maildrop `dir`, durably.
fn drop_request(dir: &Path, id: &str, body: &[u8]) -> std::io::Result<PathBuf> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    crate::maildrop::write(dir, id, &units::format_time(now), body)
}

/// Say that the request was dropped (exit 0); with `--wait`, wait for its pickup, then for
/// its outcome, within the one `--timeout`.
async fn report_dropped(
    client: &Client,
    out: &mut Output<'_>,
    id: &str,
    dir: &Path,
    why: &ClientError,
    wait: Option<&crate::cli::PollArgs>,
) -> anyhow::Result<Exit> {
    let line = format!(
        "dropped {id} into the maildrop {} (spoold could not be reached: {}); the daemon queues \
         it when it runs",
        dir.display(),
        why
    );
    if out.is_json() && wait.is_none() {
        out.json(&serde_json::json!({"id": id, "status": "dropped", "maildrop": dir}))?;
    } else if !out.is_json() {
        out.line(&line)?;
    }
    let Some(poll) = wait else {
        return Ok(Exit::Success);
    };
    let began = std::time::Instant::now();
    loop {
        match client.get(id, false).await {
            Ok(_) => break,
            Err(e) if e.daemon_away() || e.status() == Some(404) => {}
            Err(e) => return Err(e.into()),
        }
        if began.elapsed() >= poll.timeout {
            eprintln!(
                "spoolctl: timed out after {}: {id} is still in the maildrop {} (the daemon has \
                 not picked it up); it is queued when the daemon runs",
                units::format_duration(poll.timeout),
                dir.display()
            );
            return Ok(Exit::WaitTimedOut);
        }
        tokio::time::sleep(poll.interval).await;
    }
    if !out.is_json() {
        out.line(&format!("picked up {id} from the maildrop"))?;
    }
    let left = crate::cli::PollArgs {
        timeout: poll.timeout.saturating_sub(began.elapsed()),
        interval: poll.interval,
    };
    let waited = wait::wait(client, id, &left).await?;
    Ok(wait::report(out, &waited)?)
}

/// What a create's failure says: spoold's answer, or whether anything was stored when there
/// was none, with a hint for the usual reason a job's rerun with its key is refused.
fn create_failed(e: ClientError, relative: &[&'static str]) -> anyhow::Error {
    match e {
        // A time counted from now differs at every run: the usual reason a job's rerun with
        // its key is refused.
        ClientError::Api { ref code, .. }
            if code == "idempotency_conflict" && !relative.is_empty() =>
        {
            anyhow::anyhow!(
                "{e}; {} counts from each run, so a run with the same --idempotency-key asks for \
                 another time: give a fixed one ({})",
                relative.join(" and "),
                relative
                    .iter()
                    .map(|flag| match *flag {
                        "--expires-in" => "--expires-at TIME",
                        _ => "--not-before TIME",
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        e => e.said_whether_stored(
            "send it again with the same --idempotency-key, which returns it if it was (without \
             a key, it may be queued twice)",
        ),
    }
}

/// The flags of `args` that give a time as a duration from now (`--expires-in`, a
/// `--not-before` such as `10m`).
fn relative_times(args: &RequestArgs) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if args
        .not_before
        .as_deref()
        .is_some_and(|t| units::parse_time(t).is_err())
    {
        flags.push("--not-before");
    }
    if args.expires_in.is_some() {
        flags.push("--expires-in");
    }
    flags
}

/// Where the body comes from. At most one source may be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodySource {
    /// `--data`: JSON text on the command line.
    Inline(String),
    /// `--data-file`: JSON read from a file or stdin.
    JsonFile(Input),
    /// `--data-binary`: any bytes from a file or stdin, sent as `bodyBase64`.
    Binary(Input),
}

/// A file, or stdin for `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Stdin,
    File(PathBuf),
}

impl Input {
    fn from_arg(path: PathBuf) -> Input {
        if path == Path::new("-") {
            Input::Stdin
        } else {
            Input::File(path)
        }
    }
}

/// A loaded body, ready for the request.
#[derive(Debug)]
pub enum Body {
    Json(Box<RawValue>),
    Binary(Vec<u8>),
}

/// Builds the create request: all usage checks first, then the body is read.
pub fn build_request(args: RequestArgs, stdin: &mut dyn Read) -> anyhow::Result<CreateDelivery> {
    let headers = parse_headers(&args.headers)?;
    let source = body_source(args.data, args.data_file, args.data_binary)?;
    let not_before = args.not_before.as_deref().map(not_before).transpose()?;
    let expires_at = match (args.expires_in, args.expires_at.as_deref()) {
        (Some(d), _) => Some(expires_at(d)?),
        (None, Some(t)) => Some(
            units::parse_time(t)
                .map(units::format_time)
                .map_err(|e| UsageError::new(format!("--expires-at: {e}")))?,
        ),
        (None, None) => None,
    };
    let at_most_once = AtMostOnce::from_args(args.at_most_once)?;
    let body = source.map(|s| load_body(s, stdin)).transpose()?;

    let (body, body_base64) = match body {
        None => (None, None),
        Some(Body::Json(raw)) => (Some(raw), None),
        Some(Body::Binary(bytes)) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        ),
    };
    check_target(&args.url)?;
    if let Some(host) = loopback_name(&args.url) {
        eprintln!(
            "spoolctl: warning: {host} is this machine; spoold refuses loopback targets unless \
             it was started with --allow-target 127.0.0.1/32 (or, for development, \
             --allow-private-targets)"
        );
    }
    Ok(CreateDelivery {
        idempotency_key: args.idempotency_key.filter(|k| !k.is_empty()),
        target_url: Some(args.url),
        method: Some(args.method).filter(|m| !m.is_empty()),
        headers,
        body,
        body_base64,
        max_attempts: args.max_attempts.map(i64::from),
        not_before,
        expires_at,
        mode: at_most_once.mode,
        fingerprint: at_most_once.fingerprint,
        reconcile: at_most_once.reconcile,
        remote_id_pointer: args.remote_id_pointer,
        sign: args.sign.map(|name| spool_proto::Sign {
            secret_ref: Some(name),
        }),
    })
}

/// The at-most-once fields of a create request. clap has already tied every flag to
/// `--at-most-once` (and the query's details to `--reconcile-url`); spoold checks the values.
#[derive(Debug, Default)]
struct AtMostOnce {
    mode: Option<DeliveryMode>,
    fingerprint: Option<String>,
    reconcile: Option<Reconcile>,
}

impl AtMostOnce {
    fn from_args(args: AtMostOnceArgs) -> Result<AtMostOnce, UsageError> {
        if !args.at_most_once {
            return Ok(AtMostOnce::default());
        }
        let headers = parse_headers(&args.reconcile_headers)
            .map_err(|e| UsageError::new(format!("--reconcile-header: {e}")))?;
        let observation_window = args
            .observation_window
            .map(|w| {
                if w.is_zero() {
                    Err(UsageError::new(
                        "--observation-window must be greater than zero",
                    ))
                } else {
                    Ok(units::format_duration(w))
                }
            })
            .transpose()?;
        let reconcile = args.reconcile_url.map(|url| Reconcile {
            url: Some(url),
            method: args.reconcile_method.filter(|m| !m.is_empty()),
            headers,
            matches_pointer: args.matches_pointer,
            remote_id_pointer: args.reconcile_id_pointer,
            observation_window,
        });
        Ok(AtMostOnce {
            mode: Some(DeliveryMode::AtMostOnce),
            fingerprint: args.fingerprint.filter(|f| !f.is_empty()),
            reconcile,
        })
    }
}

/// `--not-before`: an RFC 3339 time, or a duration from now (`10m`, `1d`), sent as RFC 3339.
pub(crate) fn not_before(t: &str) -> Result<String, UsageError> {
    units::parse_time_or_from_now(t, crate::output::now_ms())
        .map(units::format_time)
        .map_err(|e| UsageError::new(format!("--not-before: {e}")))
}

/// `--expires-in` as an absolute time, so a queued request means the same thing however long
/// it waits.
fn expires_at(d: Duration) -> Result<String, UsageError> {
    if d.is_zero() {
        return Err(UsageError::new("--expires-in must be greater than zero"));
    }
    i64::try_from(d.as_millis())
        .ok()
        .and_then(|ms| crate::output::now_ms().checked_add(ms))
        .map(units::format_time)
        .ok_or_else(|| UsageError::new("--expires-in is too large"))
}

/// `-H` lines to a header map with Go-canonical names. `None` when there are none, so the
/// field is left out of the request.
pub fn parse_headers(
    lines: &[String],
) -> Result<Option<BTreeMap<String, Option<String>>>, UsageError> {
    let mut headers = BTreeMap::new();
    for line in lines {
        let (name, value) = parse_header(line)?;
        if headers.contains_key(&name) {
            return Err(UsageError::new(format!(
                "header {name:?} was provided more than once"
            )));
        }
        headers.insert(name, Some(value));
    }
    Ok(if headers.is_empty() {
        None
    } else {
        Some(headers)
    })
}

/// `Name: value` → (canonical name, trimmed value). Split at the first `:`.
pub fn parse_header(line: &str) -> Result<(String, String), UsageError> {
    let form = || UsageError::new("header must use 'Name: value' form");
    let (name, value) = line.split_once(':').ok_or_else(form)?;
    let name = name.trim();
    if name.is_empty() {
        return Err(form());
    }
    let value = value.trim();
    if value.contains(['\r', '\n']) {
        return Err(UsageError::new("header value must not contain a newline"));
    }
    Ok((spool_proto::headers::canonical_name(name), value.to_owned()))
}

/// Picks the single body source; more than one is a usage error.
pub fn body_source(
    data: Option<String>,
    data_file: Option<PathBuf>,
    data_binary: Option<PathBuf>,
) -> Result<Option<BodySource>, UsageError> {
    match (data, data_file, data_binary) {
        (None, None, None) => Ok(None),
        // curl's `-d @FILE`: JSON never starts with `@`, so this cannot be a body.
        (Some(text), None, None) => match text.strip_prefix('@') {
            Some("") => Err(UsageError::new(
                "--data @ needs a file name: -d @body.json (or -d @- for stdin)",
            )),
            Some(path) => Ok(Some(BodySource::JsonFile(Input::from_arg(path.into())))),
            None => Ok(Some(BodySource::Inline(text))),
        },
        (None, Some(path), None) => Ok(Some(BodySource::JsonFile(Input::from_arg(path)))),
        (None, None, Some(path)) => Ok(Some(BodySource::Binary(Input::from_arg(path)))),
        _ => Err(UsageError::new(
            "--data, --data-file, and --data-binary cannot be used together",
        )),
    }
}

/// Reads and checks the body. Invalid JSON is a usage error; an unreadable or oversized input
/// is a runtime error.
pub fn load_body(source: BodySource, stdin: &mut dyn Read) -> anyhow::Result<Body> {
    match source {
        BodySource::Inline(text) => match json_body(text.as_bytes()) {
            Ok(json) => Ok(Body::Json(json)),
            // `-d body.json`: a file's name where its JSON was meant.
            Err(_) if Path::new(text.trim()).is_file() => Err(UsageError::new(format!(
                "-d takes the JSON itself, and {text} is a file: -d @{text} (or --data-file \
                 {text}) sends the JSON it holds"
            ))
            .into()),
            Err(e) => Err(e.into()),
        },
        BodySource::JsonFile(input) => Ok(Body::Json(json_body(&read_input(
            &input,
            stdin,
            "--data-file",
        )?)?)),
        BodySource::Binary(input) => Ok(Body::Binary(read_input(&input, stdin, "--data-binary")?)),
    }
}

/// Validates JSON and keeps its bytes, minus surrounding whitespace, exactly as given.
pub fn json_body(bytes: &[u8]) -> Result<Box<RawValue>, UsageError> {
    const HINT: &str = "for a body that is not JSON, use --data-binary FILE (or - for stdin)";
    let text = std::str::from_utf8(bytes).map_err(|_| {
        UsageError::new(format!(
            "request body must be valid JSON: it is not UTF-8; {HINT}"
        ))
    })?;
    let text = text.trim_matches([' ', '\t', '\n', '\r']);
    // serde_json says where: "… at line 1 column 5".
    RawValue::from_string(text.to_owned())
        .map_err(|e| UsageError::new(format!("request body must be valid JSON: {e}; {HINT}")))
}

/// The target URL checked as far as can be done here, so that the message is the same when
/// spoold is down: it needs a scheme.
fn check_target(url: &str) -> Result<(), UsageError> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Ok(());
    }
    // Another scheme: suggesting `http://ftp://…` would not help.
    if let Some((scheme, _)) = lower.split_once("://") {
        return Err(UsageError::new(format!(
            "target URL has the scheme {scheme}://: spoold sends HTTP requests only (http:// or \
             https://)"
        )));
    }
    Err(UsageError::new(format!(
        "target URL needs http:// or https://, as in {}",
        with_scheme(url)
    )))
}

/// `url` as it was probably meant, with `http://` (or its own `https`) in front: a scheme
/// written with one slash or none (`http:/host`, `https:host`) is mended, not doubled.
fn with_scheme(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    for scheme in ["https", "http"] {
        if lower.starts_with(scheme) {
            let rest = &url[scheme.len()..];
            let host = rest.trim_start_matches([':', '/']);
            if host.len() < rest.len() {
                return format!("{scheme}://{host}");
            }
        }
    }
    format!("http://{url}")
}

/// Names that resolve to this machine, which spoold's default address policy refuses.
fn loopback_name(url: &str) -> Option<String> {
    let host = url::Url::parse(url).ok()?.host_str()?.to_ascii_lowercase();
    (host == "localhost" || host.ends_with(".localhost")).then_some(host)
}

/// The whole input, refusing more than spoold accepts as a body; `flag` is the one that named
/// it, for a message.
fn read_input(input: &Input, stdin: &mut dyn Read, flag: &str) -> anyhow::Result<Vec<u8>> {
    let limit = u64::try_from(MAX_BODY_BYTES).unwrap_or(u64::MAX);
    let mut buf = Vec::new();
    match input {
        Input::Stdin => stdin
            .take(limit + 1)
            .read_to_end(&mut buf)
            .context("read stdin")?,
        Input::File(path) => {
            let read =
                std::fs::File::open(path).and_then(|f| f.take(limit + 1).read_to_end(&mut buf));
            // curl's habit, `--data-binary @body.bin`: say what the flag takes.
            let curl = path.to_str().and_then(|p| p.strip_prefix('@'));
            match (read, curl) {
                (Err(e), Some(name)) if e.kind() == io::ErrorKind::NotFound => anyhow::bail!(
                    "open data file {}: no such file ({flag} takes the file name itself, \
                     without curl's @: {flag} {name})",
                    path.display()
                ),
                (read, _) => read.with_context(|| format!("open data file {}", path.display()))?,
            }
        }
    };
    if buf.len() > MAX_BODY_BYTES {
        anyhow::bail!("request body exceeds {MAX_BODY_BYTES} bytes");
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> RequestArgs {
        RequestArgs {
            url: url.into(),
            method: "POST".into(),
            ..RequestArgs::default()
        }
    }

    fn is_usage(err: &anyhow::Error) -> bool {
        err.chain().any(|e| e.is::<UsageError>())
    }

    #[test]
    fn send_sign_names_the_secret_in_the_request() {
        use clap::Parser as _;
        let cli = crate::cli::Cli::try_parse_from([
            "spoolctl",
            "send",
            "http://127.0.0.1/",
            "--sign",
            "ops",
        ])
        .expect("parsed");
        let crate::cli::Command::Send(s) = cli.command else {
            panic!("parsed as send")
        };
        let request = build_request(s.request, &mut std::io::empty()).expect("a request");
        assert_eq!(
            serde_json::to_value(&request).expect("JSON")["sign"],
            serde_json::json!({"secretRef": "ops"})
        );
    }

    #[test]
    fn canonical_names() {
        let cases = [
            ("content-type", "Content-Type"),
            ("X-SPOOLD-TEST", "X-Spoold-Test"),
            ("x-b3-traceid", "X-B3-Traceid"),
            ("etag", "Etag"),
            ("-a", "-A"),
            ("a--b", "A--B"),
            ("bad name", "bad name"),
            ("ünicode", "ünicode"),
            ("x_y", "X_y"),
        ];
        for (input, expected) in cases {
            assert_eq!(
                spool_proto::headers::canonical_name(input),
                expected,
                "{input}"
            );
        }
    }

    #[test]
    fn header_lines() {
        let ok = [
            (
                "Content-Type: application/json",
                ("Content-Type", "application/json"),
            ),
            ("  x-a  :  spaced value  ", ("X-A", "spaced value")),
            (
                "X-Url: http://127.0.0.1:8/c",
                ("X-Url", "http://127.0.0.1:8/c"),
            ),
            ("X-Empty:", ("X-Empty", "")),
        ];
        for (line, (name, value)) in ok {
            assert_eq!(
                parse_header(line).map_err(|e| e.to_string()),
                Ok((name.to_owned(), value.to_owned())),
                "{line}"
            );
        }
        let bad = [
            ("no colon", "header must use 'Name: value' form"),
            (": value", "header must use 'Name: value' form"),
            ("X-A: one\ntwo", "header value must not contain a newline"),
            ("X-A: one\rtwo", "header value must not contain a newline"),
        ];
        for (line, message) in bad {
            assert_eq!(
                parse_header(line).map_err(|e| e.to_string()),
                Err(message.to_owned()),
                "{line:?}"
            );
        }
    }

    #[test]
    fn duplicate_headers_after_canonicalisation() {
        let lines = ["x-a: 1".to_owned(), "X-A: 2".to_owned()];
        assert_eq!(
            parse_headers(&lines).map_err(|e| e.to_string()),
            Err(r#"header "X-A" was provided more than once"#.to_owned())
        );
        assert_eq!(parse_headers(&[]).map_err(|e| e.to_string()), Ok(None));
    }

    #[test]
    fn body_sources() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(body_source(None, None, None).map_err(|e| e.0), Ok(None));
        assert_eq!(
            body_source(Some("{}".into()), None, None).map_err(|e| e.0),
            Ok(Some(BodySource::Inline("{}".into())))
        );
        assert_eq!(
            body_source(None, p("-"), None).map_err(|e| e.0),
            Ok(Some(BodySource::JsonFile(Input::Stdin)))
        );
        assert_eq!(
            body_source(None, None, p("a.bin")).map_err(|e| e.0),
            Ok(Some(BodySource::Binary(Input::File("a.bin".into()))))
        );
        for (d, f, b) in [
            (Some("{}".to_owned()), p("x"), None),
            (Some("{}".to_owned()), None, p("x")),
            (None, p("x"), p("y")),
            (Some("{}".to_owned()), p("x"), p("y")),
        ] {
            assert_eq!(
                body_source(d, f, b).map_err(|e| e.0),
                Err("--data, --data-file, and --data-binary cannot be used together".to_owned())
            );
        }
    }

    #[test]
    fn json_bodies_keep_their_bytes() {
        let ok = [
            (r#"{ "a" :  [1, 2] }"#, r#"{ "a" :  [1, 2] }"#),
            ("\n  {\"a\":\"<&>\"}\n", r#"{"a":"<&>"}"#),
            ("null", "null"),
            ("123", "123"),
            ("\"text\"", "\"text\""),
        ];
        for (input, kept) in ok {
            let raw = json_body(input.as_bytes()).expect("valid JSON");
            assert_eq!(raw.get(), kept, "{input:?}");
        }
        for bad in ["", "   ", "{", "{} {}", "{'a':1}", "nul", "\u{a0}{}"] {
            assert_eq!(
                json_body(bad.as_bytes())
                    .map(|_| ())
                    .map_err(|e| e.0.starts_with("request body must be valid JSON: ")
                        && e.0.ends_with("use --data-binary FILE (or - for stdin)")),
                Err(true),
                "{bad:?}"
            );
        }
        assert!(json_body(&[0xff, b'1']).is_err(), "not UTF-8");
    }

    #[test]
    fn request_json_embeds_the_body_verbatim() {
        let mut a = args("http://127.0.0.1:9090/events");
        a.data = Some(" {\"b\":  1,\n \"a\": \"x\"} ".into());
        a.headers = vec!["content-type: application/json".into()];
        a.idempotency_key = Some("k1".into());
        a.max_attempts = Some(3);
        let req = build_request(a, &mut io::empty()).expect("valid");
        assert_eq!(
            serde_json::to_string(&req).expect("serializable"),
            r#"{"idempotencyKey":"k1","targetUrl":"http://127.0.0.1:9090/events","method":"POST","headers":{"Content-Type":"application/json"},"body":{"b":  1,
 "a": "x"},"maxAttempts":3}"#
        );
    }

    #[test]
    fn binary_bodies_from_stdin() {
        let mut a = args("http://127.0.0.1:9090/");
        a.data_binary = Some("-".into());
        let req = build_request(a, &mut &b"\x00\x01hi"[..]).expect("valid");
        assert_eq!(req.body_base64.as_deref(), Some("AAFoaQ=="));
        assert!(req.body.is_none());
    }

    #[test]
    fn json_from_stdin_is_validated() {
        let mut a = args("http://127.0.0.1:9090/");
        a.data_file = Some("-".into());
        let err = build_request(a, &mut &b"not json"[..]).expect_err("invalid JSON");
        assert!(is_usage(&err), "{err:#}");
    }

    #[test]
    fn oversized_input_is_a_runtime_error() {
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        let mut a = args("http://127.0.0.1:9090/");
        a.data_binary = Some("-".into());
        let err = build_request(a, &mut &big[..]).expect_err("too large");
        assert!(!is_usage(&err));
        assert_eq!(err.to_string(), "request body exceeds 1048576 bytes");

        let exact = vec![b'x'; MAX_BODY_BYTES];
        let mut a = args("http://127.0.0.1:9090/");
        a.data_binary = Some("-".into());
        assert!(build_request(a, &mut &exact[..]).is_ok());
    }

    #[test]
    fn missing_file_is_a_runtime_error() {
        let mut a = args("http://127.0.0.1:9090/");
        a.data_file = Some("/nonexistent/spoolctl-test.json".into());
        let err = build_request(a, &mut io::empty()).expect_err("missing file");
        assert!(!is_usage(&err));
        assert!(
            format!("{err:#}").starts_with("open data file /nonexistent/spoolctl-test.json: "),
            "{err:#}"
        );
    }

    #[test]
    fn times() {
        let mut a = args("http://127.0.0.1:9090/");
        a.not_before = Some("2026-07-18T14:00:00.250+02:00".into());
        let req = build_request(a, &mut io::empty()).expect("valid");
        assert_eq!(req.not_before.as_deref(), Some("2026-07-18T12:00:00.250Z"));

        let mut a = args("http://127.0.0.1:9090/");
        a.not_before = Some("tomorrow".into());
        let err = build_request(a, &mut io::empty()).expect_err("bad time");
        assert!(is_usage(&err));

        // A duration from now, as --expires-in takes it.
        let mut a = args("http://127.0.0.1:9090/");
        a.not_before = Some("1d".into());
        let now = crate::output::now_ms();
        let req = build_request(a, &mut io::empty()).expect("valid");
        let at = units::parse_time(req.not_before.as_deref().expect("set")).expect("RFC 3339");
        assert!((at - now - 86_400_000).abs() < 5_000, "{at} vs {now}");

        let mut a = args("http://127.0.0.1:9090/");
        a.expires_in = Some(Duration::from_secs(600));
        let before = crate::output::now_ms();
        let req = build_request(a, &mut io::empty()).expect("valid");
        let at = units::parse_time(req.expires_at.as_deref().expect("set")).expect("valid time");
        let delta = at - before;
        assert!((600_000..605_000).contains(&delta), "{delta}");

        let mut a = args("http://127.0.0.1:9090/");
        a.expires_in = Some(Duration::ZERO);
        assert!(is_usage(
            &build_request(a, &mut io::empty()).expect_err("zero")
        ));
    }
}
