//! The journal of spoold v0.1.0 (one JSON record a line: a delivery as it then was, or its
//! removal) replayed into [`ExportRecord`]s, for `spoolctl import --spoold-journal`. Pure: the
//! caller reads the file and sends the records; the daemon checks each as it checks any
//! import. A journal cut short (its last line torn, as a crash leaves it) loses that line
//! only; any other line that is not a record refuses the whole journal.
//!
//! What is carried: every pending and in-flight delivery, and every finished one (succeeded,
//! failed, canceled) that v0.1.0's retention still kept, so that its idempotency key keeps
//! answering with it. A delivery is carried over whole or not at all: its body byte for byte
//! (`body` as the journal has it, `null` included; `bodyBase64` decoded), its headers, key and
//! counts; one whose record does not add up (a field or status v0.1.0 does not write, a
//! `requestHash` it could not have written, attempts it could not have made, times out of
//! range or order) is refused, naming the line and the field, and never sent.

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::transfer::{
    BodyKind, ExportRecord, ExportedDelivery, ExportedTransition, EXPORT_FORMAT,
};
use crate::{units, CreateDelivery, DeliveryMode, DeliveryStatus};

/// One non-blank line of an input, numbered from 1; `torn` for a last line without its newline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub number: usize,
    pub text: String,
    pub torn: bool,
}

impl Line {
    /// The line `raw` (as read, with its newline if it has one), numbered `number`; `None` if
    /// it is blank. Bytes that are not UTF-8 become U+FFFD (and the record then fails to parse
    /// where it matters).
    pub fn from_bytes(number: usize, raw: &[u8]) -> Option<Line> {
        // Only the last line can lack its newline.
        let torn = raw.last() != Some(&b'\n');
        let text = String::from_utf8_lossy(raw).trim_end().to_owned();
        (!text.is_empty()).then_some(Line { number, text, torn })
    }
}

/// The non-blank lines of a whole input, numbered as a text editor numbers them.
pub fn lines(input: &[u8]) -> Vec<Line> {
    input
        .split_inclusive(|b| *b == b'\n')
        .enumerate()
        .filter_map(|(n, raw)| Line::from_bytes(n + 1, raw))
        .collect()
}

/// A journal replayed: its live deliveries, in the order they first appeared, each carried over
/// as an export record, refused, or (finished past v0.1.0's retention) left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// Pending and in-flight deliveries, and finished ones within [`V010_RETENTION_MS`].
    pub records: Vec<Carried>,
    /// Live deliveries that cannot be carried over whole: reported, not imported (an import
    /// must never send a different request than the old daemon would, nor answer a key
    /// otherwise).
    pub refused: Vec<Refused>,
    /// Finished deliveries that finished more than [`V010_RETENTION_MS`] ago: left out, as
    /// v0.1.0's retention removes them, keys and all.
    pub finished: u64,
    /// The last line, torn and unreadable: skipped.
    pub torn: Option<TornLine>,
}

/// A delivery carried over, and the journal line its last record is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carried {
    pub line: usize,
    pub record: ExportRecord,
}

/// A live delivery that is not carried over: the line of its last record, and why (naming the
/// field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub line: usize,
    pub id: String,
    pub reason: String,
}

/// A torn last line that was skipped, and why it did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    pub number: usize,
    pub error: String,
}

/// Why a journal cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    #[error("line {line}: not a spoold journal record: {reason}")]
    NotARecord { line: usize, reason: String },
}

/// The note on an imported delivery's first transition.
pub const IMPORT_NOTE: &str = "imported from a spoold v0.1.0 journal";

/// The note on the transition that makes a delivery in flight in the journal pending again.
pub const IN_FLIGHT_NOTE: &str = "in flight when spoold v0.1.0 stopped: sent again";

/// How far past `now` a time the old daemon recorded may lie (its host's clock may have been
/// ahead of this one's); later than that, the record is refused.
pub const CLOCK_SKEW_MS: i64 = 24 * 3_600_000;

/// spoold v0.1.0's terminal retention (its `-terminal-retention`, 168 h by default): how long
/// after it finished (its `updatedAt`) a finished delivery, and with it its idempotency key,
/// was kept. A finished delivery of the journal is carried over for the rest of that window.
pub const V010_RETENTION_MS: i64 = 168 * 3_600_000;

/// The statuses spoold v0.1.0 writes.
const V010_STATUSES: &str = "pending, in_flight, succeeded, failed, canceled";

/// Replays `lines` (each record replaces the last of its delivery; a removal removes it) and
/// gives its live deliveries as export records: pending ones due as the journal says,
/// in-flight ones pending again and due at `now_ms` (the old daemon and its leases are gone),
/// finished ones finished for the rest of [`V010_RETENTION_MS`] as of `now_ms`; or refused,
/// naming the line and the field, when their record does not add up or cannot be carried
/// whole.
pub fn replay(lines: &[Line], now_ms: i64) -> Result<Replayed, JournalError> {
    let mut live: BTreeMap<String, Live> = BTreeMap::new();
    let mut torn = None;
    for (order, line) in lines.iter().enumerate() {
        // Read whole before it changes anything: a torn last line that fails anywhere (its JSON,
        // its version, its delivery) is skipped as the crash left it, never half applied.
        let (deleted, delivery, request_hash) = match read_record(&line.text) {
            Ok(read) => read,
            Err(reason) if line.torn => {
                torn = Some(TornLine {
                    number: line.number,
                    error: reason,
                });
                continue;
            }
            Err(reason) => {
                return Err(JournalError::NotARecord {
                    line: line.number,
                    reason,
                })
            }
        };
        if let Some(id) = deleted {
            live.remove(&id);
        }
        if let Some((head, raw)) = delivery {
            let first = live.get(&head.id).map_or(order, |l| l.first);
            live.insert(
                head.id,
                Live {
                    first,
                    line: line.number,
                    status: head.status,
                    raw,
                    request_hash,
                },
            );
        }
    }
    let mut in_order: Vec<(String, Live)> = live.into_iter().collect();
    in_order.sort_by_key(|(_, l)| l.first);
    let mut records = Vec::new();
    let mut refused = Vec::new();
    let mut finished = 0;
    for (id, l) in in_order {
        let Some(status) = Status::parse(&l.status) else {
            refused.push(Refused {
                line: l.line,
                id,
                reason: format!(
                    "status {:?}: not one spoold v0.1.0 writes ({V010_STATUSES})",
                    l.status
                ),
            });
            continue;
        };
        if status.finished() && past_retention(&l, now_ms) {
            finished += 1;
            continue;
        }
        match carry(&l, status, now_ms) {
            Ok(record) => records.push(Carried {
                line: l.line,
                record,
            }),
            Err(reason) => refused.push(Refused {
                line: l.line,
                id,
                reason,
            }),
        }
    }
    Ok(Replayed {
        records,
        refused,
        finished,
        torn,
    })
}

/// A journal line read through: the delivery it removes, the delivery it records (its head and
/// its whole raw record) and its `requestHash`; or why it is not a record.
#[allow(clippy::type_complexity)]
fn read_record(
    text: &str,
) -> Result<
    (
        Option<String>,
        Option<(Head, Box<RawValue>)>,
        Option<String>,
    ),
    String,
> {
    let record: JournalRecord = serde_json::from_str(text).map_err(|e| e.to_string())?;
    // spoold v0.1.0 refuses to start on any other version; so does this import.
    if !matches!(record.version, Some(1 | 2)) {
        return Err(match record.version {
            Some(v) => format!("version {v}: spoold v0.1.0 writes 1 or 2"),
            None => "no version: spoold v0.1.0 writes 1 or 2".to_owned(),
        });
    }
    let delivery = match record.delivery {
        Some(raw) => {
            let head: Head =
                serde_json::from_str(raw.get()).map_err(|e| format!("delivery: {e}"))?;
            Some((head, raw))
        }
        None => None,
    };
    Ok((record.deleted_id, delivery, record.request_hash))
}

/// The digests spoold v0.1.0 could have kept of a create (its journal's `requestHash`, in
/// bytes), when `create` is a request v0.1.0 could have taken; none when it uses a field
/// v0.1.0 did not have (then it cannot be a retry of a v0.1.0 create).
///
/// The recipe, as v0.1.0 computes it: SHA-256 over the method (trimmed, upper-cased, `POST`
/// when empty), the target URL as given (trimmed), `maxAttempts` (8 when 0 or absent), each a
/// line; then `Name:value` lines of the headers, names canonical, sorted; then the JSON body's
/// bytes as they appeared in the request. v0.1.0 hashed what its client sent, before it
/// re-encoded the body for its journal, so a client that repeats its create byte for byte
/// produces the same digest: the first one given. v0.1.0's own `spoolctl send` did not send a
/// `--data` body as typed: Go's encoder compacted it and escaped `<`, `>`, `&` (see
/// [`go_compact`]), and v0.1.0 hashed that; so the digest of the body in that form is given
/// too, when it differs, and the same `spoolctl send` line finds its delivery whichever
/// `spoolctl` sends it. A binary body is hashed here by its bytes; v0.1.0's own recipe for
/// binary bodies is not known, so [`replay`] never carries such a delivery's `requestHash`
/// over: it computes this recipe over the journal's request instead, which a retried create
/// reproduces (both normalise the same way).
pub fn request_hashes(create: &CreateDelivery) -> Vec<Vec<u8>> {
    let v010_only = create.not_before.is_none()
        && create.expires_at.is_none()
        && create.mode.is_none()
        && create.fingerprint.is_none()
        && create.reconcile.is_none()
        && create.remote_id_pointer.is_none()
        && create.sign.is_none();
    if !v010_only {
        return Vec::new();
    }
    let method = create
        .method
        .as_deref()
        .unwrap_or_default()
        .trim()
        .to_uppercase();
    let method = if method.is_empty() { "POST" } else { &method };
    let max_attempts = match create.max_attempts.unwrap_or(0) {
        0 => 8,
        n => n,
    };
    let bodies = match (&create.body, &create.body_base64) {
        (Some(raw), _) => {
            let compacted = go_compact(raw.get());
            let mut bodies = vec![raw.get().as_bytes().to_vec()];
            if compacted != raw.get() {
                bodies.push(compacted.into_bytes());
            }
            bodies
        }
        (None, Some(b64)) => {
            let compact: String = b64.chars().filter(|c| *c != '\r' && *c != '\n').collect();
            match STANDARD.decode(compact) {
                Ok(bytes) => vec![bytes],
                Err(_) => return Vec::new(),
            }
        }
        (None, None) => vec![Vec::new()],
    };
    bodies
        .iter()
        .map(|body| {
            let headers = create
                .headers
                .iter()
                .flatten()
                .map(|(n, v)| (n.as_str(), v.as_deref().unwrap_or_default()));
            recipe(
                method,
                create.target_url.as_deref().unwrap_or_default(),
                max_attempts,
                headers,
                body,
            )
        })
        .collect()
}

/// The JSON text `json` as Go's encoder writes a raw JSON value (a `json.RawMessage`), which
/// is how spoold v0.1.0's `spoolctl` sent a body and how its daemon journaled and sent one:
/// white space outside strings dropped, and `<`, `>`, `&`, U+2028 and U+2029 written as
/// `\u003c`, `\u003e`, `\u0026`, `\u2028` and `\u2029`; everything else (numbers, other
/// escapes) as it was. `json` is valid JSON.
pub fn go_compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            ' ' | '\t' | '\n' | '\r' if !in_string => {}
            _ => out.push(c),
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
        }
    }
    out
}

/// [`request_hashes`]'s recipe over a request's parts: the method as given (normalised by the
/// caller), the URL trimmed, `maxAttempts`, the headers by canonical name, the body's bytes.
fn recipe<'a>(
    method: &str,
    target_url: &str,
    max_attempts: impl std::fmt::Display,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
    body: &[u8],
) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(format!("{method}\n{}\n{max_attempts}\n", target_url.trim()).as_bytes());
    let headers: BTreeMap<String, &str> = headers
        .map(|(n, v)| (crate::headers::canonical_name(n.trim()), v))
        .collect();
    for (name, value) in headers {
        h.update(format!("{name}:{value}\n").as_bytes());
    }
    h.update(body);
    h.finalize().to_vec()
}

/// A record of a spoold v0.1.0 journal: the delivery as it then was, or its removal.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalRecord {
    #[serde(default)]
    version: Option<i64>,
    #[serde(default)]
    delivery: Option<Box<RawValue>>,
    #[serde(default)]
    request_hash: Option<String>,
    #[serde(default)]
    deleted_id: Option<String>,
}

/// What replaying needs of a delivery: which it is and its status. The rest is read only for
/// the ones carried ([`carry`]), so that a delivery's record refuses that delivery, never the
/// journal.
#[derive(Debug, Deserialize)]
struct Head {
    id: String,
    status: String,
}

/// The last record of a delivery.
#[derive(Debug)]
struct Live {
    /// Where it first appeared (the order of the import).
    first: usize,
    /// The line of the last record.
    line: usize,
    status: String,
    raw: Box<RawValue>,
    request_hash: Option<String>,
}

/// A delivery as spoold v0.1.0 writes it: every field it has, and no other. A field this
/// import does not know could change the request (as `bodyBase64` did, before it was read
/// here), so a delivery that has one is refused rather than carried over without it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JournalDelivery {
    id: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    target_url: String,
    method: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// `null` is a body (v0.1.0 sent the four bytes), absence none.
    #[serde(default, deserialize_with = "crate::delivery::present_raw")]
    body: Option<Box<RawValue>>,
    #[serde(default)]
    body_base64: Option<String>,
    #[allow(dead_code)] // Read only so that it is known: `Head` has it already.
    status: String,
    #[serde(default)]
    attempts: u32,
    max_attempts: u32,
    #[serde(default)]
    next_attempt_at: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // Read only so that it is known: the old daemon's lease is void here.
    lease_until: Option<String>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    last_response_code: Option<u16>,
    created_at: String,
    updated_at: String,
}

/// A v0.1.0 status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    InFlight,
    Succeeded,
    Failed,
    Canceled,
}

impl Status {
    fn parse(text: &str) -> Option<Status> {
        Some(match text {
            "pending" => Status::Pending,
            "in_flight" => Status::InFlight,
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "canceled" => Status::Canceled,
            _ => return None,
        })
    }

    fn finished(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Canceled)
    }

    /// The status it is imported in: one in flight is pending again (the old daemon is gone).
    fn wire(self) -> DeliveryStatus {
        match self {
            Status::Pending | Status::InFlight => DeliveryStatus::Pending,
            Status::Succeeded => DeliveryStatus::Succeeded,
            Status::Failed => DeliveryStatus::Failed,
            Status::Canceled => DeliveryStatus::Canceled,
        }
    }
}

/// Whether a finished delivery finished longer than [`V010_RETENTION_MS`] before `now_ms`, by
/// its readable `updatedAt` (one that is not readable is carried, and refused there).
fn past_retention(live: &Live, now_ms: i64) -> bool {
    #[derive(Deserialize)]
    struct Updated {
        #[serde(rename = "updatedAt")]
        updated_at: Option<String>,
    }
    serde_json::from_str::<Updated>(live.raw.get())
        .ok()
        .and_then(|u| time_ms(u.updated_at.as_deref()?))
        .is_some_and(|updated| updated < now_ms.saturating_sub(V010_RETENTION_MS))
}

/// A live delivery as an export record: a pending one due as the journal says, an in-flight
/// one pending again and due now, a finished one as it finished. `Err` names the field that
/// does not add up, or that cannot be carried whole.
fn carry(live: &Live, status: Status, now_ms: i64) -> Result<ExportRecord, String> {
    let d: JournalDelivery = serde_json::from_str(live.raw.get()).map_err(|e| {
        // serde's position is within the delivery object, not the line: leave it out.
        let text = e.to_string();
        text.split(" at line ").next().unwrap_or(&text).to_owned()
    })?;
    let (kind, body) = match (&d.body, &d.body_base64) {
        (Some(_), Some(_)) => {
            return Err("body and bodyBase64: both set (spoold v0.1.0 writes one)".into())
        }
        // `null` included: v0.1.0 sent it, 4 bytes of `application/json`.
        (Some(raw), None) => (BodyKind::Json, raw.get().as_bytes().to_vec()),
        (None, Some(b64)) => (
            BodyKind::Binary,
            STANDARD
                .decode(b64)
                .map_err(|e| format!("bodyBase64: not standard base64 ({e})"))?,
        ),
        (None, None) => (BodyKind::None, Vec::new()),
    };
    // An empty bodyBase64 is no body: v0.1.0 sent nothing and no Content-Type for it, and
    // hashed it as a create without a body.
    let kind = if body.is_empty() {
        BodyKind::None
    } else {
        kind
    };
    if !(1..=crate::MAX_MAX_ATTEMPTS).contains(&d.max_attempts) {
        return Err(format!(
            "maxAttempts {}: spoold v0.1.0 keeps 1 to 100",
            d.max_attempts
        ));
    }
    // v0.1.0 fails a delivery after its last attempt: a pending one has one left.
    if status == Status::Pending && d.attempts >= d.max_attempts {
        return Err(format!(
            "attempts {} of maxAttempts {}: a pending delivery has an attempt left (v0.1.0 \
             fails it after its last)",
            d.attempts, d.max_attempts
        ));
    }
    if status == Status::InFlight && d.attempts == 0 {
        return Err("attempts 0: an in-flight delivery has started an attempt".into());
    }
    let latest = now_ms.saturating_add(CLOCK_SKEW_MS);
    let created = past_time("createdAt", &d.created_at, latest)?;
    let updated = past_time("updatedAt", &d.updated_at, latest)?;
    if updated < created {
        return Err(format!(
            "updatedAt {} is before createdAt {}",
            d.updated_at, d.created_at
        ));
    }
    let due = match (status, d.next_attempt_at.as_deref()) {
        // Its lease was the old daemon's, which is gone: due now.
        (Status::InFlight, _) | (Status::Pending, None) => Some(now_ms),
        (Status::Pending, Some(text)) => match time_ms(text) {
            Some(ms) if ms >= 0 => Some(ms),
            // Go's zero time: none.
            Some(_) if text.starts_with("0001-01-01T00:00:00") => Some(now_ms),
            _ => {
                return Err(format!(
                    "nextAttemptAt {text:?}: not an RFC 3339 time from 1970 on"
                ))
            }
        },
        // Finished: never.
        _ => None,
    };
    // v0.1.0 writes the digest of every create it took, as `hex.EncodeToString` writes a
    // SHA-256: anything else was not written by it, and could never match a retried create.
    let hash = match live.request_hash.as_deref() {
        Some(text) => hex_digest(text).ok_or_else(|| {
            format!("requestHash {text:?}: spoold v0.1.0 writes 64 lowercase hex digits (SHA-256)")
        })?,
        None => {
            return Err("requestHash: missing (spoold v0.1.0 writes one on every record)".into())
        }
    };
    let request_digest = match kind {
        BodyKind::Json | BodyKind::None => hash,
        // Over the request as the client sent it (its URL too, as given).
        BodyKind::Binary => recipe(
            &d.method,
            &d.target_url,
            d.max_attempts,
            d.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            &body,
        ),
    };
    // v0.1.0 claims a delivery whose lease ran out again whatever its count, and numbers
    // the attempt on: one in flight is sent once more at least, as attempt N + 1, and then as
    // often as v0.1.0 would have sent it. Attempts past the last it may make are the
    // interrupted ones (cut short by the stop, or by a lease that ran out), which spoold does
    // not charge.
    let uncharged = match status {
        Status::Pending => 0,
        Status::InFlight => d.attempts.saturating_sub(d.max_attempts - 1),
        _ => d.attempts.saturating_sub(d.max_attempts),
    };
    let mut transitions = vec![ExportedTransition {
        from: None,
        to: DeliveryStatus::Pending,
        attempt: 0,
        at_ms: created,
        reason: "created".to_owned(),
        note: Some(IMPORT_NOTE.to_owned()),
    }];
    if status == Status::InFlight {
        // Pending again: it may have arrived, and is sent again (at least once).
        transitions.push(ExportedTransition {
            from: Some(DeliveryStatus::Pending),
            to: DeliveryStatus::InFlight,
            attempt: i64::from(d.attempts),
            at_ms: updated,
            reason: "claimed".to_owned(),
            note: None,
        });
        transitions.push(ExportedTransition {
            from: Some(DeliveryStatus::InFlight),
            to: DeliveryStatus::Pending,
            attempt: i64::from(d.attempts),
            at_ms: updated.max(now_ms),
            reason: "imported".to_owned(),
            note: Some(IN_FLIGHT_NOTE.to_owned()),
        });
    } else if status.finished() {
        transitions.push(ExportedTransition {
            from: Some(DeliveryStatus::Pending),
            to: status.wire(),
            attempt: i64::from(d.attempts),
            at_ms: updated,
            reason: "imported".to_owned(),
            note: None,
        });
    }
    Ok(ExportRecord {
        format: EXPORT_FORMAT,
        delivery: ExportedDelivery {
            id: d.id,
            idempotency_key: d.idempotency_key.filter(|k| !k.is_empty()),
            request_digest: Some(STANDARD.encode(request_digest)),
            target_url: path_spaces_encoded(&d.target_url),
            method: d.method,
            // As stored: the daemon's default Content-Type is v0.1.0's (`application/json`
            // for a JSON body, `application/octet-stream` for bytes, none without a body).
            headers: d.headers,
            body_kind: kind,
            body_base64: STANDARD.encode(&body),
            status: status.wire(),
            attempts: i64::from(d.attempts),
            uncharged: i64::from(uncharged),
            max_attempts: i64::from(d.max_attempts),
            cycle: 1,
            last_error: d.last_error.filter(|e| !e.is_empty()),
            last_error_code: None,
            last_response_code: d.last_response_code.filter(|c| *c != 0).map(i64::from),
            created_at_ms: created,
            updated_at_ms: updated,
            next_attempt_at_ms: due,
            not_before_ms: None,
            expires_at_ms: None,
            mode: DeliveryMode::AtLeastOnce,
            fingerprint: None,
            reconcile: None,
            remote_id_pointer: None,
            observation_window_ms: None,
            remote_id: None,
            unknown_since_ms: None,
            review_at_ms: None,
            check_at_ms: None,
            sign_secret: None,
        },
        attempts: Vec::new(),
        transitions,
        checks: Vec::new(),
    })
}

/// `url` with each space in its path as `%20`: v0.1.0 kept a target URL as given, and Go's
/// HTTP client sent a space in its path so (spoold refuses a URL with a space, as its parser
/// would change it). A space anywhere else stays, and is refused as it is.
fn path_spaces_encoded(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    let path = url[..end]
        .find("://")
        .and_then(|scheme| url[scheme + 3..end].find('/').map(|p| scheme + 3 + p));
    match path {
        Some(start) => format!(
            "{}{}{}",
            &url[..start],
            url[start..end].replace(' ', "%20"),
            &url[end..]
        ),
        None => url.to_owned(),
    }
}

/// A time the old daemon recorded as past: RFC 3339, from 1970 on, and not after `latest`.
fn past_time(field: &str, text: &str, latest: i64) -> Result<i64, String> {
    match time_ms(text) {
        Some(ms) if (0..=latest).contains(&ms) => Ok(ms),
        Some(_) => Err(format!(
            "{field} {text}: out of range (from 1970 to now, give or take a day of clock skew)"
        )),
        None => Err(format!("{field} {text:?}: not an RFC 3339 time")),
    }
}

/// A `requestHash` (64 lowercase hex digits, as Go writes a SHA-256) as bytes; `None` for
/// anything else.
fn hex_digest(text: &str) -> Option<Vec<u8>> {
    if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    (0..64)
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A journal time (RFC 3339) in milliseconds.
fn time_ms(text: &str) -> Option<i64> {
    units::parse_time(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_as_go_compacts_them() {
        for (json, want) in [
            (
                r#"{"b" : [1, 2.50],  "a": "<&>"}"#,
                r#"{"b":[1,2.50],"a":"\u003c\u0026\u003e"}"#,
            ),
            // White space in strings stays; escapes are kept as written, `\"` included.
            (r#"[ "a b", "\" <", "\\" ]"#, r#"["a b","\" \u003c","\\"]"#),
            ("{\"x\":\"\u{2028}\t\u{2029}\"}", r#"{"x":"\u2028	\u2029"}"#),
            (" \n null \r\n", "null"),
            (
                r#"{"n": 1e3, "z": -0.0, "u": "\u00e9"}"#,
                r#"{"n":1e3,"z":-0.0,"u":"\u00e9"}"#,
            ),
        ] {
            assert_eq!(go_compact(json), want, "{json}");
            assert_eq!(go_compact(want), want, "idempotent: {want}");
        }
    }

    /// The digests a create gives: over its body as sent (curl, this spoolctl), then as
    /// v0.1.0's spoolctl sent it. The values are `requestHash`es spoold v0.1.0 wrote
    /// (`tests/fixtures/spoold-v0.1.0-b` of spoolctl), or computed with its recipe outside
    /// this code.
    #[test]
    fn a_create_gives_the_digests_v010_could_have_kept() {
        let hex = |bytes: &Vec<u8>| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        for (create, want) in [
            (
                r#"{"targetUrl": "http://127.0.0.1:53991/spaces", "body": {"b" : [1, 2.50],  "a": "<&>"}, "idempotencyKey": "spaces", "maxAttempts": 100}"#,
                &[
                    "433154bcdfa5174cbcbc0d7501f50d5e4bafb0f7f48c0ca200347502ea7f81fe",
                    "4482e6da75867fa90477f0a35ef679f13abe420f7dfca7b09672143fe9ff6b02",
                ][..],
            ),
            (
                r#"{"targetUrl": "http://127.0.0.1:53991/null", "body": null, "idempotencyKey": "null-body", "maxAttempts": 100}"#,
                &["5cb3822e7e34ad1e1a5752108a52b4f16a90f56b5805c9245f1a8d60c6b027ac"][..],
            ),
            (
                r#"{"targetUrl": "http://127.0.0.1:53991/put", "method": "PUT", "idempotencyKey": "no-body-put", "maxAttempts": 100}"#,
                &["a993df83181647668c56761b57d62cfe9dec4dc1ee037c3d6b7595aaa0c651b6"][..],
            ),
            (
                r#"{"targetUrl": "http://127.0.0.1:53991/jsonish", "bodyBase64": "eyJhIjogMX0=", "idempotencyKey": "jsonish-b64", "maxAttempts": 100}"#,
                &["90fd4b6d118bac9d87b9cd8929c528df67298d390e67af3eab113f49f40c69a5"][..],
            ),
            (
                r#"{"targetUrl":"http://127.0.0.1:9/line/1","headers":{"X-Trace":"t-1"},"body":{"b" : [1, 2.50],  "a": "<&>"},"maxAttempts":100}"#,
                &[
                    "80da7ea2ed4dc897f96504e774007df9be69200a0069349cf7d27d0c41b73c56",
                    "5e31882c61af9d78ec18b53909548050cb41b94e1f9cc218edb3772c55e36806",
                ][..],
            ),
            // A field v0.1.0 did not have: not one of its creates.
            (
                r#"{"targetUrl": "http://127.0.0.1:9/x", "notBefore": "2026-12-07T00:00:00Z"}"#,
                &[][..],
            ),
        ] {
            let create: CreateDelivery = serde_json::from_str(create).expect(create);
            let got: Vec<String> = request_hashes(&create).iter().map(hex).collect();
            assert_eq!(got.len(), want.len(), "{create:?}");
            assert_eq!(got, *want, "{create:?}");
        }
    }

    #[test]
    fn spaces_in_a_path_are_carried_as_go_sent_them() {
        for (url, want) in [
            (
                "http://127.0.0.1:1/a b/c?q=a b#f x",
                "http://127.0.0.1:1/a%20b/c?q=a b#f x",
            ),
            ("http://127.0.0.1", "http://127.0.0.1"),
            ("http://127.0.0.1 a/x y", "http://127.0.0.1 a/x%20y"),
            ("https://127.0.0.1/ok", "https://127.0.0.1/ok"),
        ] {
            assert_eq!(path_spaces_encoded(url), want, "{url}");
        }
    }
}
