//! The journal of spoold v0.1.0 (one JSON record a line: a delivery as it then was, or its
//! removal) replayed into [`ExportRecord`]s of its pending deliveries, for `spoolctl import
//! --spoold-journal`. Pure: the caller reads the file and sends the records; the daemon checks
//! each as it checks any import. A journal cut short (its last line torn, as a crash leaves
//! it) loses that line only; any other line that is not a record refuses the whole journal.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use crate::transfer::{
    BodyKind, ExportRecord, ExportedDelivery, ExportedTransition, EXPORT_FORMAT,
};
use crate::{units, DeliveryMode, DeliveryStatus};

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

/// The non-blank lines of a whole input.
pub fn lines(input: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    for raw in input.split_inclusive(|b| *b == b'\n') {
        if let Some(line) = Line::from_bytes(out.len() + 1, raw) {
            out.push(line);
        }
    }
    out
}

/// A journal replayed: its live pending and in-flight deliveries as export records, in the
/// order they first appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    pub records: Vec<ExportRecord>,
    /// Live deliveries that had finished (delivered, failed, …): not carried over.
    pub finished: u64,
    /// The last line, torn and unreadable: skipped.
    pub torn: Option<TornLine>,
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

/// Replays `lines` (each record replaces the last of its delivery; a removal removes it) and
/// gives its pending and in-flight deliveries as export records, due as the journal says
/// (in-flight ones at `now_ms`: the old daemon is gone).
pub fn replay(lines: &[Line], now_ms: i64) -> Result<Replayed, JournalError> {
    let mut live: BTreeMap<String, (usize, JournalDelivery)> = BTreeMap::new();
    let mut torn = None;
    for (order, line) in lines.iter().enumerate() {
        let record: JournalRecord = match serde_json::from_str(&line.text) {
            Ok(record) => record,
            Err(e) if line.torn => {
                torn = Some(TornLine {
                    number: line.number,
                    error: e.to_string(),
                });
                continue;
            }
            Err(e) => {
                return Err(JournalError::NotARecord {
                    line: line.number,
                    reason: e.to_string(),
                })
            }
        };
        if let Some(id) = record.deleted_id {
            live.remove(&id);
        }
        if let Some(d) = record.delivery {
            let first = live.get(&d.id).map_or(order, |(first, _)| *first);
            live.insert(d.id.clone(), (first, d));
        }
    }
    let mut in_order: Vec<(usize, JournalDelivery)> = live.into_values().collect();
    in_order.sort_by_key(|(first, _)| *first);
    let mut records = Vec::new();
    let mut finished = 0;
    for (_, d) in in_order {
        let due = match d.status.as_str() {
            "pending" => time_ms(d.next_attempt_at.as_deref()).unwrap_or(now_ms),
            "in_flight" => now_ms,
            _ => {
                finished += 1;
                continue;
            }
        };
        records.push(d.into_record(due, now_ms));
    }
    Ok(Replayed {
        records,
        finished,
        torn,
    })
}

/// A record of a spoold v0.1.0 journal: the delivery as it then was, or its removal.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalRecord {
    #[serde(default)]
    delivery: Option<JournalDelivery>,
    #[serde(default)]
    deleted_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalDelivery {
    id: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    target_url: String,
    method: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<Box<serde_json::value::RawValue>>,
    status: String,
    #[serde(default)]
    attempts: u32,
    max_attempts: u32,
    #[serde(default)]
    next_attempt_at: Option<String>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    last_response_code: Option<u16>,
    created_at: String,
    updated_at: String,
}

impl JournalDelivery {
    /// The delivery as an export record, pending and due at `due`.
    fn into_record(self, due: i64, now_ms: i64) -> ExportRecord {
        let d = self;
        let created = time_ms(Some(&d.created_at)).unwrap_or(now_ms);
        let body = d.body.map(|raw| raw.get().as_bytes().to_vec());
        ExportRecord {
            format: EXPORT_FORMAT,
            delivery: ExportedDelivery {
                id: d.id,
                idempotency_key: d.idempotency_key.filter(|k| !k.is_empty()),
                request_digest: None,
                target_url: d.target_url,
                method: d.method,
                headers: d.headers,
                body_kind: if body.is_some() {
                    BodyKind::Json
                } else {
                    BodyKind::None
                },
                body_base64: base64::engine::general_purpose::STANDARD
                    .encode(body.unwrap_or_default()),
                status: DeliveryStatus::Pending,
                // One attempt left at least: an in-flight one that was the last is sent again.
                attempts: i64::from(d.attempts.min(d.max_attempts.saturating_sub(1))),
                uncharged: 0,
                max_attempts: i64::from(d.max_attempts),
                cycle: 1,
                last_error: d.last_error.filter(|e| !e.is_empty()),
                last_error_code: None,
                last_response_code: d.last_response_code.filter(|c| *c != 0).map(i64::from),
                created_at_ms: created,
                updated_at_ms: time_ms(Some(&d.updated_at)).unwrap_or(created),
                next_attempt_at_ms: Some(due),
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
            transitions: vec![ExportedTransition {
                from: None,
                to: DeliveryStatus::Pending,
                attempt: 0,
                at_ms: created,
                reason: "created".to_owned(),
                note: Some(IMPORT_NOTE.to_owned()),
            }],
            checks: Vec::new(),
        }
    }
}

/// A journal time (RFC 3339, Go's zero time for none) in milliseconds.
fn time_ms(text: Option<&str>) -> Option<i64> {
    units::parse_time(text?).ok().filter(|ms| *ms > 0)
}
