//! `spoolctl verify --secret-file F [FILE]`: checks the Standard Webhooks signature of a request
//! a receiver got — what its developer needs while integrating. The request is read from FILE
//! or stdin as received: an optional request line (`POST /hook HTTP/1.1`), header lines, a
//! blank line, then the body byte for byte. Also the check `spoolctl receive --secret-file`
//! makes of every request.

use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use spool_proto::signing::{self, Secret, VerifyError};
use spool_proto::units::format_duration;

use crate::cli::{UsageError, VerifyArgs};
use crate::commands::Exit;
use crate::output::{now_ms, Output};

pub fn run(args: VerifyArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let secret = read_secret(&args.secret_file)?;
    let raw = match args.request.as_deref() {
        None | Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("read the request from stdin")?;
            buf
        }
        Some(file) => std::fs::read(file).with_context(|| format!("read {file}"))?,
    };
    let request = parse_request(&raw).map_err(UsageError::new)?;
    let now = match args.at.as_deref() {
        None => now_ms() / 1000,
        Some(at) => parse_at(at)?,
    };
    let tolerance = (!args.tolerance.is_zero()).then_some(args.tolerance.as_secs() as i64);
    let header = |name: &str| request.header(name);
    match check(&secret, header, request.body, now, tolerance) {
        Ok(said) => {
            out.line(&format!("valid: {said}"))?;
            Ok(Exit::Success)
        }
        Err(e) => {
            out.line(&format!(
                "{}: {e}",
                if e.is_time() {
                    "too old or new"
                } else {
                    "invalid"
                }
            ))?;
            Ok(if e.is_time() {
                Exit::SignatureTime
            } else {
                Exit::SignatureInvalid
            })
        }
    }
}

/// A secret file of `whsec_` keys (one or several).
pub fn read_secret(path: &Path) -> anyhow::Result<Secret> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--secret-file {}", path.display()))?;
    Secret::parse(&text).map_err(|e| anyhow::anyhow!("--secret-file {}: {e}", path.display()))
}

/// What a check found wrong: a header missing, or the signature itself.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("no {0} header")]
    Missing(&'static str),
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl CheckError {
    pub fn is_time(&self) -> bool {
        matches!(self, CheckError::Verify(e) if e.is_time())
    }
}

/// Verifies a request given its headers (by lower-case name) and body: on success, which key
/// matched and how old the signature is, in words.
pub fn check<'h>(
    secret: &Secret,
    header: impl Fn(&str) -> Option<&'h str>,
    body: &[u8],
    now: i64,
    tolerance: Option<i64>,
) -> Result<String, CheckError> {
    let get = |name: &'static str| header(name).ok_or(CheckError::Missing(name));
    let (id, ts, sigs) = (
        get(signing::ID_HEADER)?,
        get(signing::TIMESTAMP_HEADER)?,
        get(signing::SIGNATURE_HEADER)?,
    );
    let key = secret.verify(id, ts, sigs, body, now, tolerance)?;
    let age = ts
        .trim()
        .parse::<i64>()
        .map_or(0, |t| (now - t).max(0) as u64);
    Ok(format!(
        "signed by key {key} of {}, {} ago, webhook-id {id}",
        secret.len(),
        format_duration(Duration::from_secs(age))
    ))
}

/// `--at`: Unix seconds or an RFC 3339 time.
fn parse_at(text: &str) -> Result<i64, UsageError> {
    if let Ok(secs) = text.parse::<i64>() {
        return Ok(secs);
    }
    spool_proto::units::parse_time(text)
        .map(|ms| ms / 1000)
        .map_err(|_| {
            UsageError::new(format!(
                "--at {text:?} is not Unix seconds or an RFC 3339 time"
            ))
        })
}

/// A request as read: its headers and its body.
struct Request<'a> {
    headers: Vec<(String, &'a str)>,
    body: &'a [u8],
}

impl<'a> Request<'a> {
    fn header(&self, name: &str) -> Option<&'a str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// Splits a received request into header lines and the body (after the first blank line,
/// `\r\n` or `\n`), skipping a request line.
fn parse_request(raw: &[u8]) -> Result<Request<'_>, String> {
    let (head, body) = match find(raw, b"\r\n\r\n") {
        Some(at) => (&raw[..at], &raw[at + 4..]),
        None => match find(raw, b"\n\n") {
            Some(at) => (&raw[..at], &raw[at + 2..]),
            None => (raw, &raw[raw.len()..]),
        },
    };
    let head = std::str::from_utf8(head).map_err(|_| "the request's headers are not text")?;
    let mut headers = Vec::new();
    for (i, line) in head.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.is_empty() {
            continue;
        }
        match line.split_once(':') {
            Some((name, value)) if !name.contains(' ') => {
                headers.push((name.trim().to_ascii_lowercase(), value.trim()));
            }
            // The request line (`POST /hook HTTP/1.1`).
            _ if i == 0 => {}
            _ => return Err(format!("line {} is not a header: {line:?}", i + 1)),
        }
    }
    if headers.is_empty() {
        return Err(
            "no headers: give the request as received (headers, a blank line, the body)".into(),
        );
    }
    Ok(Request { headers, body })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn the_specifications_example_as_a_received_request() {
        let raw = b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1\r\nwebhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek\r\n\
            Webhook-Timestamp: 1614265330\r\nwebhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\r\n\
            \r\n{\"test\": 2432232314}";
        let req = parse_request(raw).expect("a request");
        assert_eq!(req.body, br#"{"test": 2432232314}"#);
        let secret = Secret::parse(KEY).expect("key");
        let said = check(
            &secret,
            |n| req.header(n),
            req.body,
            1_614_265_342,
            Some(300),
        )
        .expect("valid");
        assert_eq!(
            said,
            "signed by key 1 of 1, 12s ago, webhook-id msg_p5jXN8AQM9LWM0D4loKWxJek"
        );
        let late = check(
            &secret,
            |n| req.header(n),
            req.body,
            1_614_265_330 + 301,
            Some(300),
        )
        .expect_err("late");
        assert!(late.is_time());
        assert_eq!(late.to_string(), "too old: signed 301 s ago");
        let changed =
            check(&secret, |n| req.header(n), b"{}", 1_614_265_330, None).expect_err("changed");
        assert!(!changed.is_time());
    }

    #[test]
    fn headers_alone_with_lf_and_missing_headers() {
        let req = parse_request(b"webhook-id: x\nwebhook-timestamp: 1\n\nbody").expect("ok");
        assert_eq!(req.body, b"body");
        let secret = Secret::parse(KEY).expect("key");
        let err = check(&secret, |n| req.header(n), req.body, 1, None).expect_err("missing");
        assert_eq!(err.to_string(), "no webhook-signature header");
        assert!(parse_request(b"just a body").is_err());
        assert!(parse_request(b"a: b\nnot a header\n\n").is_err());
    }
}
