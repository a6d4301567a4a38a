//! Target: header canonicalisation, as a create's `headers` (and a reconcile query's) are
//! checked and normalised. Never panics; canonical names are a fixed point; what is accepted
//! is accepted again unchanged and reaches the HTTP request whole (nothing silently dropped);
//! a header spoold manages or that belongs to one connection (hop-by-hop) never passes, in
//! any case spelling, with or without spaces around it.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use spool_proto::headers::{canonical_name, is_token};
use spool_proto::ErrorCode;
use spoold::deliveries::outbound::{header_map, AddressPolicy};
use spoold::deliveries::submission::{decode, validate, Rules};

use super::{check, corpus_lines, replay};

/// Names a request must never set, written out here: spoold's own and the hop-by-hop fields
/// of RFC 9110 §7.6.1 (spoold owns the connection), plus the framing ones.
const FORBIDDEN: &[&str] = &[
    "Connection",
    "Content-Length",
    "Host",
    "Keep-Alive",
    "Proxy-Connection",
    "TE",
    "Trailer",
    "Transfer-Encoding",
    "Upgrade",
    "X-Spoold-Attempt",
    "X-Spoold-Delivery-Id",
];

fn forbidden(name: &str) -> bool {
    let name = name.trim_matches(' ');
    FORBIDDEN.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// A forbidden name in some case spelling, maybe with spaces around it.
fn forbidden_name() -> impl Strategy<Value = String> {
    (
        prop::sample::select(FORBIDDEN),
        any::<u64>(),
        0usize..3,
        0usize..3,
    )
        .prop_map(|(name, cases, before, after)| {
            let spelled: String = name
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if cases >> (i % 64) & 1 == 1 {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    }
                })
                .collect();
            format!("{}{spelled}{}", " ".repeat(before), " ".repeat(after))
        })
}

/// Header names: tokens, near-tokens, forbidden ones, anything.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[A-Za-z0-9!#$%&'*+.^_`|~-]{1,20}",
        2 => forbidden_name(),
        1 => "[ -~]{0,12}",
        1 => any::<String>(),
        1 => prop::sample::select(vec!["x-api-KEY", "X-API-key", "content-TYPE", "a--b", "-", "é"])
            .prop_map(str::to_owned),
    ]
}

/// Header values: text, text with control characters, non-ASCII.
fn value() -> impl Strategy<Value = Option<String>> {
    prop::option::weighted(
        0.9,
        prop_oneof![
            3 => "[ -~]{0,30}",
            1 => "[ -~\t\r\n\u{0}\u{7f}\u{1b}]{0,10}",
            1 => any::<String>(),
        ],
    )
}

fn headers() -> impl Strategy<Value = BTreeMap<String, Option<String>>> {
    prop::collection::btree_map(name(), value(), 0..6)
}

fn open() -> Rules {
    Rules {
        policy: AddressPolicy {
            allow_all: true,
            allowed: vec![],
        },
        retry_window: None,
    }
}

/// Submits `headers` on a create; the stored headers or the rejection.
fn submit(headers: &BTreeMap<String, Option<String>>) -> Result<Vec<(String, String)>, String> {
    let body = serde_json::to_vec(&json!({"targetUrl": "https://hooks.test/", "headers": headers}))
        .expect("json");
    decode(&body)
        .and_then(|req| validate(req, &open()))
        .map(|d| d.headers)
        .map_err(|r| {
            assert_eq!(r.code, ErrorCode::InvalidDelivery, "{}", r.message);
            r.message
        })
}

fn property(given: BTreeMap<String, Option<String>>) -> Result<(), TestCaseError> {
    let result = submit(&given);
    if let Some(bad) = given.keys().find(|n| forbidden(n)) {
        prop_assert!(result.is_err(), "{bad:?} passed: {result:?}");
    }
    let Ok(stored) = result else {
        return Ok(());
    };
    prop_assert_eq!(stored.len(), given.len(), "one stored header per given one");
    let mut names: Vec<&str> = stored.iter().map(|(n, _)| n.as_str()).collect();
    names.dedup();
    prop_assert_eq!(names.len(), stored.len(), "names unique: {:?}", stored);
    prop_assert!(
        stored.windows(2).all(|w| w[0].0 < w[1].0),
        "sorted: {stored:?}"
    );
    for (name, value) in &stored {
        prop_assert!(is_token(name), "{name:?}");
        prop_assert_eq!(&canonical_name(name), name, "canonical");
        prop_assert!(!forbidden(name), "{name:?} stored");
        prop_assert!(
            !value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f),
            "{name}: {value:?}"
        );
    }
    // Idempotent: the stored headers, submitted again, are stored as they are.
    let again: BTreeMap<String, Option<String>> = stored
        .iter()
        .map(|(n, v)| (n.clone(), Some(v.clone())))
        .collect();
    let resubmitted = submit(&again);
    prop_assert_eq!(resubmitted.as_ref(), Ok(&stored), "resubmitted");
    // And every one of them is sent: the request's header map drops nothing it was given.
    let map = header_map(&stored);
    prop_assert_eq!(map.len(), stored.len(), "sent: {:?}", map);
    for (name, value) in &stored {
        prop_assert_eq!(
            map.get(name.as_str()).map(|v| v.as_bytes()),
            Some(value.as_bytes()),
            "{}",
            name
        );
    }
    Ok(())
}

#[test]
fn headers_are_canonical_idempotent_and_never_forbidden() {
    check(1000, headers(), property);
}

/// The reconciliation query's headers follow the same rules.
#[test]
fn reconcile_headers_follow_the_same_rules() {
    check(200, headers(), |given| {
        let body = serde_json::to_vec(&json!({
            "targetUrl": "https://hooks.test/",
            "mode": "at_most_once",
            "idempotencyKey": "k",
            "reconcile": {"url": "https://hooks.test/q?f={fingerprint}", "headers": given},
        }))
        .expect("json");
        let Ok(new) = decode(&body).and_then(|req| validate(req, &open())) else {
            prop_assert!(
                given
                    .keys()
                    .any(|n| !is_token(n.trim_matches(' ')) || forbidden(n))
                    || given
                        .values()
                        .flatten()
                        .any(|v| v.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f))
                    || given
                        .keys()
                        .map(|n| canonical_name(n.trim_matches(' ')))
                        .collect::<std::collections::BTreeSet<_>>()
                        .len()
                        < given.len(),
                "refused without a reason: {given:?}"
            );
            return Ok(());
        };
        let stored: serde_json::Value =
            serde_json::from_str(new.reconcile.as_deref().expect("reconcile stored"))
                .expect("json");
        let names: Vec<&str> = stored["headers"]
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        prop_assert_eq!(names.len(), given.len());
        for name in names {
            prop_assert!(!forbidden(name), "{name:?} stored in reconcile");
            prop_assert_eq!(canonical_name(name), name);
        }
        Ok(())
    });
}

/// `canonical_name` on any text: never panics, a fixed point, case-insensitively the name it
/// was given, and a token exactly when its input is.
#[test]
fn canonical_names_are_a_fixed_point() {
    check(2000, any::<String>(), |name| {
        let canonical = canonical_name(&name);
        prop_assert_eq!(&canonical_name(&canonical), &canonical);
        prop_assert!(canonical.eq_ignore_ascii_case(&name));
        prop_assert_eq!(is_token(&canonical), is_token(&name));
        if !is_token(&name) {
            prop_assert_eq!(canonical, name);
        }
        Ok(())
    });
}

#[test]
fn corpus() {
    replay(corpus_lines("headers"), |line| {
        // One header per line: `NAME: VALUE` (the value may be empty).
        let (name, value) = line.split_once(':').unwrap_or((line.as_str(), ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        property(BTreeMap::from([(name.to_owned(), Some(value.to_owned()))]))
    });
}
