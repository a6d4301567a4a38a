//! Target: the spoold v0.1.0 journal importer, the whole path: journal bytes → lines →
//! `spool_proto::journal::replay` → export records → the daemon's import check
//! (`api::transfer::from_export`, the rules of a create). Arbitrary, truncated and corrupted
//! journals never panic; a journal is either refused with the number of the line that is not
//! a record, or replayed to exactly its live deliveries (each carried, refused, or finished
//! past v0.1.0's retention and left out); a journal cut short at any byte loses at most its
//! torn last line; every imported delivery is in its journal status (one in flight pending
//! again), a pending one with an attempt left, its request as a create would store it and its
//! body byte for byte.

use std::collections::BTreeMap;

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Value};
use spool_proto::journal::{self, JournalError, Replayed, IMPORT_NOTE};
use spool_proto::transfer::{BodyKind, ExportRecord, EXPORT_FORMAT};
use spool_proto::DeliveryStatus;
use spool_store::model::{self, Body};
use spoold::api::transfer::{from_export, to_export};
use spoold::deliveries::submission::Rules;

use super::{check, corpus, edits, mutate, mutated, replay};

const NOW: i64 = 1_800_000_000_000;

/// Journal times: RFC 3339 in the forms Go writes, its zero time, and some that are not; a
/// good share in the last weeks before `NOW`, around the end of v0.1.0's retention.
fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => (0i64..4_102_444_800_000).prop_map(spool_proto::units::format_time),
        2 => (NOW - 2 * journal::V010_RETENTION_MS..NOW).prop_map(spool_proto::units::format_time),
        1 => prop::sample::select(vec![
            "0001-01-01T00:00:00Z",
            "2026-11-30T10:00:00.123456789Z",
            "2026-11-30T10:00:00+14:00",
            "1969-12-31T23:59:59.9995Z",
            "9999-12-31T23:59:59.999999999-23:59",
            "2026-02-30T00:00:00Z",
            "yesterday",
            "",
        ])
        .prop_map(str::to_owned),
    ]
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(vec!["a", "b", "c", "d"]).prop_map(|c| c.repeat(32)),
        1 => "[0-9a-fA-F-]{0,36}",
    ]
}

fn target() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "https://hooks\\.test/[a-z0-9/?=]{0,12}",
        1 => super::address::host().prop_map(|h| format!("http://{}/x", h.host)),
        1 => prop::sample::select(vec!["ftp://x/", "", "hooks.test/x", "http://u:p@hooks.test/", "http://hooks.test/#f"])
            .prop_map(str::to_owned),
    ]
}

/// JSON values for bodies: scalars and small nests.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[ -~é\u{0}\n]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// One journal record: a delivery as it then was, or a removal.
fn record() -> impl Strategy<Value = Value> {
    let delivery = (
        (
            id(),
            target(),
            prop::sample::select(vec!["POST", "put", "GET", "GE T", ""]),
            prop::collection::btree_map(
                prop::sample::select(vec!["X-Trace", "content-type", "Host", "x-api-key", "a b"]),
                "[ -~]{0,8}",
                0..3,
            ),
            prop::option::of(json_value()),
            prop::sample::select(vec![
                "pending",
                "in_flight",
                "succeeded",
                "failed",
                "canceled",
                "dead",
                "",
            ]),
        ),
        (
            prop_oneof![0u32..12, Just(u32::MAX)],
            prop_oneof![0u32..12, Just(100u32), Just(101u32), Just(u32::MAX)],
            prop::option::of(time()),
            time(),
            time(),
            prop::option::of("[ -~]{0,6}"),
            prop::option::of(0u16..600),
            prop::option::of("[ -~]{0,300}"),
            prop_oneof![
                8 => "[0-9a-f]{64}".prop_map(Some),
                1 => prop::sample::select(vec!["abc", "00", ""]).prop_map(|h| Some(h.to_owned())),
                1 => Just(None),
            ],
        ),
    )
        .prop_map(
            |(
                (id, target, method, headers, body, status),
                (attempts, max_attempts, next, created, updated, key, code, error, hash),
            )| {
                let mut d = json!({
                    "id": id, "targetUrl": target, "method": method, "headers": headers,
                    "status": status, "attempts": attempts, "maxAttempts": max_attempts,
                    "createdAt": created, "updatedAt": updated,
                });
                let o = d.as_object_mut().expect("object");
                if let Some(body) = body {
                    o.insert("body".into(), body);
                }
                if let Some(next) = next {
                    o.insert("nextAttemptAt".into(), next.into());
                }
                if let Some(key) = key {
                    o.insert("idempotencyKey".into(), key.into());
                }
                if let Some(code) = code {
                    o.insert("lastResponseCode".into(), code.into());
                }
                if let Some(error) = error {
                    o.insert("lastError".into(), error.into());
                }
                match hash {
                    Some(hash) => json!({"version": 2, "delivery": d, "requestHash": hash}),
                    None => json!({"version": 2, "delivery": d}),
                }
            },
        );
    prop_oneof![
        5 => delivery,
        1 => id().prop_map(|id| json!({"version": 2, "deletedId": id})),
    ]
}

/// A journal of well-formed records, each line ended.
fn journal_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(record(), 0..8).prop_map(|records| {
        records
            .iter()
            .flat_map(|r| {
                let mut line = serde_json::to_vec(r).expect("json");
                line.push(b'\n');
                line
            })
            .collect()
    })
}

fn rules() -> Rules {
    Rules::default()
}

/// The live deliveries of a journal, by id, with their last status: the journal replayed here
/// independently, over plain JSON values.
fn oracle(input: &[u8]) -> Vec<(String, String)> {
    let mut live: Vec<(String, String)> = Vec::new();
    for line in input.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if let Some(id) = v["deletedId"].as_str() {
            live.retain(|(i, _)| i != id);
        }
        if let (Some(id), Some(status)) = (
            v["delivery"]["id"].as_str(),
            v["delivery"]["status"].as_str(),
        ) {
            match live.iter_mut().find(|(i, _)| i == id) {
                Some(entry) => entry.1 = status.to_owned(),
                None => live.push((id.to_owned(), status.to_owned())),
            }
        }
    }
    live
}

fn finished(status: &str) -> bool {
    matches!(status, "succeeded" | "failed" | "canceled")
}

/// What every replayed record must be, and what the daemon's import makes of it.
fn check_records(replayed: &Replayed, input: &[u8]) -> Result<(), TestCaseError> {
    let mut ids: Vec<&str> = replayed
        .records
        .iter()
        .map(|c| c.record.delivery.id.as_str())
        .chain(replayed.refused.iter().map(|r| r.id.as_str()))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    prop_assert_eq!(
        ids.len(),
        replayed.records.len() + replayed.refused.len(),
        "one record or refusal per delivery"
    );
    for refused in &replayed.refused {
        prop_assert!(!refused.reason.is_empty());
    }
    for carried in &replayed.records {
        let record = &carried.record;
        let d = &record.delivery;
        prop_assert_eq!(record.format, EXPORT_FORMAT);
        prop_assert_eq!(record.transitions[0].note.as_deref(), Some(IMPORT_NOTE));
        prop_assert!(d.request_digest.is_some(), "a key's digest: {d:?}");
        match d.status {
            DeliveryStatus::Pending => {
                // One in flight too: pending again, with its lease's history.
                prop_assert!(
                    d.attempts - d.uncharged < d.max_attempts.max(1),
                    "an attempt left: {d:?}"
                );
                prop_assert!(d.next_attempt_at_ms.is_some());
                prop_assert!(matches!(record.transitions.len(), 1 | 3));
            }
            DeliveryStatus::Succeeded | DeliveryStatus::Failed | DeliveryStatus::Canceled => {
                prop_assert!(d.next_attempt_at_ms.is_none(), "never due: {d:?}");
                prop_assert_eq!(record.transitions.len(), 2);
                prop_assert!(record.attempts.is_empty());
                prop_assert!(
                    d.updated_at_ms >= NOW - journal::V010_RETENTION_MS,
                    "within v0.1.0's retention: {d:?}"
                );
            }
            other => prop_assert!(false, "status {other:?} carried"),
        }
        prop_assert!(d.attempts - d.uncharged <= d.max_attempts, "{d:?}");
        // Through JSON, as spoolctl sends it.
        let wire = serde_json::to_string(record).expect("serialize");
        let back: ExportRecord =
            serde_json::from_str(&wire).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, record);
        let body = base64::engine::general_purpose::STANDARD
            .decode(&d.body_base64)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if d.body_kind == BodyKind::Json {
            let text =
                std::str::from_utf8(&body).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(serde_json::from_str::<Value>(text).is_ok(), "body {text:?}");
            // Byte for byte as the journal has it (a journal that is not UTF-8 has U+FFFD in
            // place of what is not).
            if std::str::from_utf8(input).is_ok() {
                prop_assert!(
                    input.windows(body.len()).any(|w| w == body),
                    "the body is the journal's bytes"
                );
            }
        }
        match from_export(record.clone(), &rules(), NOW) {
            Err(message) => prop_assert!(!message.is_empty()),
            Ok(imported) => {
                let i = &imported.delivery;
                let want = match d.status {
                    DeliveryStatus::Pending => model::DeliveryStatus::Pending,
                    DeliveryStatus::Succeeded => model::DeliveryStatus::Succeeded,
                    DeliveryStatus::Failed => model::DeliveryStatus::Failed,
                    _ => model::DeliveryStatus::Canceled,
                };
                prop_assert_eq!(i.status, want);
                prop_assert!(
                    (1..=spool_proto::MAX_MAX_ATTEMPTS).contains(&i.max_attempts),
                    "max attempts {} imported",
                    i.max_attempts
                );
                if i.status == model::DeliveryStatus::Pending {
                    prop_assert!(
                        i.attempts - i.uncharged < i.max_attempts,
                        "no attempt left: {i:?}"
                    );
                    prop_assert!(i.next_attempt_at.is_some());
                }
                let stored_body = i.body.as_ref().map(Body::bytes).unwrap_or_default();
                prop_assert_eq!(stored_body, &body[..], "body byte for byte");
                // The import is a fixed point: exported again and imported, nothing changes.
                let again = from_export(to_export(imported.clone()), &rules(), NOW)
                    .map_err(|e| TestCaseError::fail(format!("re-import: {e}")))?;
                prop_assert_eq!(format!("{again:?}"), format!("{imported:?}"));
            }
        }
    }
    Ok(())
}

/// Any input: no panic; refused naming a line that is there and not the torn last one, or
/// replayed to records that hold.
fn any_input(input: &[u8]) -> Result<(), TestCaseError> {
    let lines = journal::lines(input);
    match journal::replay(&lines, NOW) {
        Err(e @ JournalError::NotARecord { line, .. }) => {
            let found = lines.iter().find(|l| l.number == line);
            prop_assert!(found.is_some_and(|l| !l.torn), "{e} names no whole line");
            let prefix = format!("line {line}: not a spoold journal record: ");
            prop_assert!(e.to_string().starts_with(&prefix), "{e}");
        }
        Ok(replayed) => {
            if let Some(torn) = &replayed.torn {
                prop_assert_eq!(
                    Some(torn.number),
                    lines.last().map(|l| l.number),
                    "only the last line is torn"
                );
            }
            check_records(&replayed, input)?;
        }
    }
    Ok(())
}

#[test]
fn a_journal_replays_to_its_live_deliveries() {
    check(200, journal_bytes(), |input| {
        let replayed = journal::replay(&journal::lines(&input), NOW)
            .map_err(|e| TestCaseError::fail(format!("a well-formed journal refused: {e}")))?;
        let live = oracle(&input);
        // Each live delivery is carried over or refused (its record does not add up), but for
        // finished ones past v0.1.0's retention, which are only counted.
        let mut got: Vec<&str> = replayed
            .records
            .iter()
            .map(|c| c.record.delivery.id.as_str())
            .chain(replayed.refused.iter().map(|r| r.id.as_str()))
            .collect();
        got.sort_unstable();
        let (done, open): (Vec<_>, Vec<_>) = live.iter().partition(|(_, s)| finished(s));
        for (id, status) in &open {
            prop_assert!(
                got.binary_search(&id.as_str()).is_ok(),
                "{id} ({status}) left out"
            );
        }
        prop_assert_eq!(got.len() as u64 + replayed.finished, live.len() as u64);
        prop_assert!(replayed.finished <= done.len() as u64);
        prop_assert!(replayed.torn.is_none());
        check_records(&replayed, &input)
    });
}

/// Cut short at any byte (a crash while it was written): the whole lines before the cut are
/// replayed; the torn one is skipped, or read if it happens to be whole.
#[test]
fn a_journal_cut_short_loses_at_most_its_torn_line() {
    let case = journal_bytes().prop_flat_map(|j| {
        let len = j.len();
        (Just(j), 0..=len)
    });
    check(200, case, |(input, cut)| {
        let short = &input[..cut];
        let replayed = journal::replay(&journal::lines(short), NOW)
            .map_err(|e| TestCaseError::fail(format!("cut at {cut}: {e}")))?;
        let whole_lines = short.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let before = journal::replay(&journal::lines(&short[..whole_lines]), NOW)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut ended = short.to_vec();
        ended.push(b'\n');
        let with_last = journal::replay(&journal::lines(&ended), NOW);
        prop_assert!(
            (replayed.records == before.records && replayed.refused == before.refused)
                || with_last.is_ok_and(|w| {
                    w.records == replayed.records && w.refused == replayed.refused
                }),
            "cut at {cut}"
        );
        any_input(short)
    });
}

#[test]
fn corrupted_and_arbitrary_journals_never_panic() {
    let seeds: Vec<Vec<u8>> = corpus("journal").into_iter().map(|(_, b)| b).collect();
    check(
        600,
        prop_oneof![
            2 => mutated(seeds),
            1 => (journal_bytes(), edits()).prop_map(|(j, e)| mutate(j, &e)),
            1 => any::<Vec<u8>>(),
        ],
        |input| any_input(&input),
    );
}

#[test]
fn corpus_cases() {
    let files: BTreeMap<String, Vec<u8>> = corpus("journal").into_iter().collect();
    replay(files.into_iter().collect(), |(_, bytes)| any_input(bytes));
}
