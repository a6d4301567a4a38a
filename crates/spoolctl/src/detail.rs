//! The whole of one delivery, as `spoolctl get` prints it: the delivery row (as spoold v0.1.0's
//! spoolctl printed it), then every other field, the headers (masked by spoold unless
//! `--reveal`), an at-most-once delivery's reconcile query, the body (JSON indented, binary as
//! its size and first bytes), and the last error. A long body is cut with a note; `--body`
//! prints it alone and whole.

use base64::Engine as _;
use spool_proto::{AttemptView, DeliveryMode, DeliveryView, Reconcile};

use crate::output::{delivery_row, Table};

/// Body bytes shown before the rest is left to `--body`.
const BODY_PREVIEW_BYTES: usize = 2048;
/// Leading bytes of a binary body shown, in hex.
const HEX_PREVIEW_BYTES: usize = 32;

/// The lines `get` prints.
#[cfg(test)]
pub fn render(d: &DeliveryView) -> String {
    render_styled(d, false)
}

/// The lines `get` prints, the status in colour if `colour` is set.
pub fn render_styled(d: &DeliveryView, colour: bool) -> String {
    let mut out = String::new();
    let mut row = Table::new();
    row.row(delivery_row(Some("get"), d));
    out.push_str(&row.render_styled(None, colour));

    let mut fields = Table::new();
    let mut field = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            fields.row([format!("{name}:"), value]);
        }
    };
    field("status", Some(d.status.to_string()));
    field(
        "attempts",
        Some(crate::output::attempts(d).replacen('/', " of ", 1)),
    );
    field(
        "mode",
        d.mode.map(|m| match m {
            DeliveryMode::AtLeastOnce => "at_least_once".to_owned(),
            DeliveryMode::AtMostOnce => "at_most_once".to_owned(),
        }),
    );
    field("fingerprint", d.fingerprint.clone());
    field("idempotency key", d.idempotency_key.clone());
    // The secret's name only: spoold never shows a key.
    field(
        "signed with",
        d.sign
            .as_ref()
            .and_then(|s| s.secret_ref.clone())
            .map(|name| format!("secret {name}")),
    );
    field("created", Some(d.created_at.clone()));
    field("updated", Some(d.updated_at.clone()));
    field("not before", d.not_before.clone());
    field("expires", d.expires_at.clone());
    field("next attempt", d.next_attempt_at.clone());
    field("lease until", d.lease_until.clone());
    field("unknown since", d.unknown_since.clone());
    field("review at", d.review_at.clone());
    field("next check", d.next_check_at.clone());
    field("checks", d.checks.map(|n| n.to_string()));
    field(
        "last response",
        d.last_response_code.map(|c| format!("HTTP {c}")),
    );
    field("remote id pointer", d.remote_id_pointer.clone());
    field("remote id", d.remote_id.clone());
    out.push_str(&indent(&fields.render(), "  "));

    match &d.headers {
        Some(headers) if !headers.is_empty() => {
            out.push_str("headers:\n");
            for (name, value) in headers {
                out.push_str(&format!("  {name}: {value}\n"));
            }
        }
        _ => out.push_str("headers: none\n"),
    }
    if let Some(reconcile) = &d.reconcile {
        out.push_str(&reconcile_section(reconcile));
    }
    out.push_str(&body_section(d));
    let label = crate::output::error_label(d);
    if let Some(err) = d.last_error.as_deref().filter(|e| !e.is_empty()) {
        out.push_str(&format!("{label}: {err}\n"));
    }
    if let Some(code) = d.last_error_code.as_deref().filter(|c| !c.is_empty()) {
        out.push_str(&format!("{label} code: {code}\n"));
    }
    out
}

/// For a delivery that succeeded and whose `lastError` spoold cleared with the success (an
/// at-least-once delivery's is): the error of the last attempt before the success, from its
/// attempt history, under the label `get` gives an error before a success, and which attempt
/// met it. Empty when no attempt failed.
pub fn earlier_error(attempts: &[AttemptView]) -> String {
    let Some(failed) = attempts
        .iter()
        .rev()
        .find(|a| a.outcome.as_deref() != Some("succeeded") && a.error.is_some())
    else {
        return String::new();
    };
    let label = "earlier error (before it succeeded)";
    let which = if failed.cycle > 1 {
        format!("cycle {}, attempt {}", failed.cycle, failed.number)
    } else {
        format!("attempt {}", failed.number)
    };
    let mut out = format!(
        "{label}: {} ({which})\n",
        failed.error.as_deref().unwrap_or_default()
    );
    if let Some(code) = failed.error_code.as_deref().filter(|c| !c.is_empty()) {
        out.push_str(&format!("{label} code: {code}\n"));
    }
    out
}

/// The reconcile query: its request line, then its pointers, window and headers (masked by
/// spoold unless `--reveal`). spoold shows every field with its default filled in.
fn reconcile_section(r: &Reconcile) -> String {
    let method = r.method.as_deref().unwrap_or("GET");
    let mut out = format!("reconcile: {method} {}\n", r.url.as_deref().unwrap_or("-"));
    let mut fields = Table::new();
    let mut field = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            fields.row([format!("{name}:"), value]);
        }
    };
    field(
        "matches pointer",
        r.matches_pointer.as_ref().map(|p| {
            if p.is_empty() {
                "(the whole answer)".to_owned()
            } else {
                p.clone()
            }
        }),
    );
    field("remote id pointer", r.remote_id_pointer.clone());
    field("observation window", r.observation_window.clone());
    out.push_str(&indent(&fields.render(), "  "));
    if let Some(headers) = r.headers.as_ref().filter(|h| !h.is_empty()) {
        out.push_str("  headers:\n");
        for (name, value) in headers {
            out.push_str(&format!("    {name}: {}\n", value.as_deref().unwrap_or("")));
        }
    }
    out
}

/// The body alone, byte for byte as it will be sent (`get --body`).
pub fn body_bytes(d: &DeliveryView) -> Result<Vec<u8>, base64::DecodeError> {
    match (&d.body, &d.body_base64) {
        (Some(json), _) => Ok(json.get().as_bytes().to_vec()),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD.decode(b64),
        (None, None) => Ok(Vec::new()),
    }
}

fn body_section(d: &DeliveryView) -> String {
    let id = &d.id;
    let whole = format!("(`spoolctl get {id} --body` prints it whole)");
    if let Some(json) = &d.body {
        let text = json.get();
        let mut out = format!("body: {} of JSON\n", bytes(text.len()));
        let shown = cut(text, BODY_PREVIEW_BYTES);
        out.push_str(&indent(&pretty_json(shown), "  "));
        if shown.len() < text.len() {
            out.push_str(&format!(
                "  … {} more {whole}\n",
                bytes(text.len() - shown.len())
            ));
        }
        return out;
    }
    match d
        .body_base64
        .as_deref()
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
    {
        Some(Ok(raw)) if !raw.is_empty() => {
            let hex: Vec<String> = raw
                .iter()
                .take(HEX_PREVIEW_BYTES)
                .map(|b| format!("{b:02x}"))
                .collect();
            let more = if raw.len() > HEX_PREVIEW_BYTES {
                format!(" … {whole}")
            } else {
                String::new()
            };
            format!(
                "body: {} of binary data\n  {}{more}\n",
                bytes(raw.len()),
                hex.join(" ")
            )
        }
        Some(Err(_)) => "body: (not valid base64)\n".to_owned(),
        _ => "body: none\n".to_owned(),
    }
}

/// JSON text indented by two spaces per level, keys in their original order and every string
/// exactly as written (re-serialising would sort keys and rewrite escapes). Text that is cut
/// short is indented as far as it goes.
pub fn pretty_json(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                // An empty object or array stays on its line.
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out.push('\n');
    out
}

/// At most `max` bytes of `text`, on a character boundary.
pub(crate) fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

fn bytes(n: usize) -> String {
    if n == 1 {
        "1 byte".to_owned()
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_indented_in_its_own_order() {
        assert_eq!(
            pretty_json(r#"{"z":1,"a":[1, 2,{}],"s":"x, {y}: \"q\"","e":[]}"#),
            "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    2,\n    {}\n  ],\n  \"s\": \"x, {y}: \\\"q\\\"\",\n  \"e\": []\n}\n"
        );
        assert_eq!(pretty_json("\"just a string\""), "\"just a string\"\n");
        assert_eq!(pretty_json("42"), "42\n");
        // Cut short: indented as far as it goes.
        assert_eq!(pretty_json(r#"{"a":[1,"#), "{\n  \"a\": [\n    1,\n    \n");
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }

    fn view(extra: serde_json::Value) -> DeliveryView {
        let mut v = serde_json::json!({
            "id": "0190f3c2a1b27c4e9d0a5b6c7d8e9f01",
            "targetUrl": "http://127.0.0.1:9090/events",
            "method": "POST", "status": "failed", "attempts": 1, "maxAttempts": 8,
            "createdAt": "2026-07-18T12:00:00.000Z", "updatedAt": "2026-07-18T12:00:01.000Z",
        });
        for (k, val) in extra.as_object().expect("object") {
            v[k] = val.clone();
        }
        serde_json::from_value(v).expect("a delivery")
    }

    #[test]
    fn the_whole_delivery() {
        let d = view(serde_json::json!({
            "idempotencyKey": "nightly",
            "headers": {"Authorization": "[redacted]", "X-Event": "build"},
            "body": {"result": "passed"},
            "lastResponseCode": 400,
            "lastError": "HTTP 400: bad input",
            "lastErrorCode": "http_status",
        }));
        assert_eq!(
            render(&d),
            "get  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  failed  1/8  POST  http://127.0.0.1:9090/events\n\
             \x20 status:           failed\n\
             \x20 attempts:         1 of 8\n\
             \x20 idempotency key:  nightly\n\
             \x20 created:          2026-07-18T12:00:00.000Z\n\
             \x20 updated:          2026-07-18T12:00:01.000Z\n\
             \x20 last response:    HTTP 400\n\
             headers:\n\
             \x20 Authorization: [redacted]\n\
             \x20 X-Event: build\n\
             body: 19 bytes of JSON\n\
             \x20 {\n\
             \x20   \"result\": \"passed\"\n\
             \x20 }\n\
             last error: HTTP 400: bad input\n\
             last error code: http_status\n"
        );
    }

    #[test]
    fn the_secret_that_signs_it_is_named() {
        let d = view(serde_json::json!({"sign": {"secretRef": "billing"}}));
        assert!(
            render(&d).contains("\n  signed with:  secret billing\n"),
            "{}",
            render(&d)
        );
        assert!(!render(&view(serde_json::json!({}))).contains("signed with"));
    }

    #[test]
    fn an_error_before_a_success_is_labelled_so() {
        let d = view(serde_json::json!({
            "status": "succeeded",
            "mode": "at_most_once",
            "lastError": "no response within 10s",
            "lastErrorCode": "timeout",
        }));
        let shown = render(&d);
        assert!(
            shown.ends_with(
                "earlier error (before it succeeded): no response within 10s\n\
                 earlier error (before it succeeded) code: timeout\n"
            ),
            "{shown}"
        );
        assert!(!shown.contains("last error"), "{shown}");
    }

    #[test]
    fn the_error_before_a_success_comes_from_the_attempts() {
        let attempt = |cycle: u32, number: u32, outcome: &str, error: Option<&str>| {
            serde_json::from_value::<AttemptView>(serde_json::json!({
                "cycle": cycle, "number": number, "startedAt": "2026-07-18T12:00:00.000Z",
                "outcome": outcome, "error": error,
                "errorCode": error.map(|_| "http_status"),
            }))
            .expect("an attempt")
        };
        let check = |attempts: &[AttemptView], expected: &str| {
            assert_eq!(earlier_error(attempts), expected, "{attempts:?}");
        };
        check(&[attempt(1, 1, "succeeded", None)], "");
        check(
            &[
                attempt(1, 1, "retry", Some("HTTP 503: first")),
                attempt(1, 2, "retry", Some("HTTP 503: busy")),
                attempt(1, 3, "succeeded", None),
            ],
            "earlier error (before it succeeded): HTTP 503: busy (attempt 2)\n\
             earlier error (before it succeeded) code: http_status\n",
        );
        // An operator's retry began a second cycle.
        check(
            &[
                attempt(1, 1, "failed", Some("HTTP 400: no")),
                attempt(2, 1, "retry", Some("HTTP 503: busy")),
                attempt(2, 2, "succeeded", None),
            ],
            "earlier error (before it succeeded): HTTP 503: busy (cycle 2, attempt 1)\n\
             earlier error (before it succeeded) code: http_status\n",
        );
    }

    #[test]
    fn an_at_most_once_delivery() {
        let d = view(serde_json::json!({
            "status": "unknown",
            "mode": "at_most_once",
            "fingerprint": "order-7",
            "remoteIdPointer": "/id",
            "unknownSince": "2026-07-18T12:00:02.000Z",
            "reviewAt": "2026-07-18T13:00:02.000Z",
            "nextCheckAt": "2026-07-18T12:00:04.000Z",
            "checks": 2,
            "reconcile": {
                "url": "http://127.0.0.1:9090/orders?ref={fingerprint}",
                "method": "GET",
                "headers": {"X-Api-Key": "[redacted]"},
                "matchesPointer": "",
                "remoteIdPointer": "/id",
                "observationWindow": "1h",
            },
        }));
        assert_eq!(
            render(&d),
            "get  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  unknown  1/8  POST  http://127.0.0.1:9090/events\n\
             \x20 status:             unknown\n\
             \x20 attempts:           1 of 8\n\
             \x20 mode:               at_most_once\n\
             \x20 fingerprint:        order-7\n\
             \x20 created:            2026-07-18T12:00:00.000Z\n\
             \x20 updated:            2026-07-18T12:00:01.000Z\n\
             \x20 unknown since:      2026-07-18T12:00:02.000Z\n\
             \x20 review at:          2026-07-18T13:00:02.000Z\n\
             \x20 next check:         2026-07-18T12:00:04.000Z\n\
             \x20 checks:             2\n\
             \x20 remote id pointer:  /id\n\
             headers: none\n\
             reconcile: GET http://127.0.0.1:9090/orders?ref={fingerprint}\n\
             \x20 matches pointer:     (the whole answer)\n\
             \x20 remote id pointer:   /id\n\
             \x20 observation window:  1h\n\
             \x20 headers:\n\
             \x20   X-Api-Key: [redacted]\n\
             body: none\n"
        );
        let settled = view(serde_json::json!({
            "status": "succeeded", "mode": "at_most_once", "remoteId": "rec-1",
        }));
        let text = render(&settled);
        assert!(text.contains("\n  remote id:  rec-1\n"), "{text}");
        assert!(!text.contains("reconcile"), "{text}");
    }

    #[test]
    fn long_and_binary_bodies() {
        let long = format!("\"{}\"", "x".repeat(5000));
        let d = view(
            serde_json::json!({ "body": serde_json::from_str::<serde_json::Value>(&long).expect("json") }),
        );
        let text = render(&d);
        assert!(text.contains("body: 5002 bytes of JSON\n"), "{text}");
        assert!(
            text.contains(
                "  … 2954 bytes more (`spoolctl get 0190f3c2a1b27c4e9d0a5b6c7d8e9f01 --body` \
                 prints it whole)\n"
            ),
            "{text}"
        );
        let d = view(serde_json::json!({ "bodyBase64": "iVBORw0KGgo=" }));
        assert!(
            render(&d).contains("body: 8 bytes of binary data\n  89 50 4e 47 0d 0a 1a 0a\n"),
            "{}",
            render(&d)
        );
        assert_eq!(body_bytes(&d).expect("base64"), b"\x89PNG\r\n\x1a\n");
        assert!(render(&view(serde_json::json!({}))).contains("headers: none\nbody: none\n"));
    }
}
