//! Target: the create-request decoder and validator (`POST /v1/deliveries`, also what an
//! import is checked by). Arbitrary bytes, mutated seeds and near-valid requests never panic
//! and are refused with the right code; whatever is accepted is in its normal form (URL as
//! dialed, canonical headers, bounds kept) and is a fixed point: encoded again as a create
//! request it is accepted as the same delivery, with the same idempotency digest.

use base64::Engine as _;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::{json, Map, Value};
use spool_proto::{headers, units, ErrorCode};
use spool_store::model::{Body, Mode, NewDelivery};
use spoold::deliveries::outbound::AddressPolicy;
use spoold::deliveries::submission::{decode, origin_filter, validate, Rejection, Rules};
use url::Url;

use super::{check, corpus, edits, mutate, mutated, replay};

/// Rules under which every address is allowed: the judgement of addresses is the address
/// target's; this one is about everything else.
fn open() -> Rules {
    Rules {
        policy: AddressPolicy {
            allow_all: true,
            allowed: vec![],
        },
        retry_window: None,
    }
}

fn target_url() -> impl Strategy<Value = String> {
    let path = prop_oneof![
        "[a-zA-Z0-9/._~%?=&-]{0,20}",
        "[ -~]{0,10}",
        // Characters the parser percent-encodes: the stored URL is longer than the given one.
        (1usize..1400).prop_map(|n| format!("/{}", "é".repeat(n))),
        (4000usize..4100).prop_map(|n| format!("/{}", "a".repeat(n))),
    ];
    prop_oneof![
        4 => (super::address::host(), path.clone()).prop_map(|(h, p)| format!("https://{}{p}", h.host)),
        2 => ("[a-zA-Z]{0,6}", "(://|:/|:|//)?", "[a-z0-9.:@\\[\\]-]{0,20}", path)
            .prop_map(|(s, sep, h, p)| format!("{s}{sep}{h}{p}")),
        1 => any::<String>(),
    ]
}

fn time() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => (-62_135_596_800_000i64..253_402_300_799_999).prop_map(units::format_time),
        1 => prop::sample::select(vec![
            "2030-01-01T00:00:00Z", "2030-01-01t00:00:00z", "2030-01-01T00:00:00.123456789+14:00",
            "2030-01-01T00:00:60Z", "1969-12-31T23:59:59.9995Z", "0000-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999999-23:59", "2030-02-30T00:00:00Z", "tomorrow", "",
            " 2030-01-01T00:00:00Z ",
        ])
        .prop_map(str::to_owned),
    ]
}

fn small_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,3}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-2i64..103).prop_map(Value::from),
        Just(json!(i64::MAX)),
        Just(json!(8.0)),
        Just(json!(8.5)),
        Just(json!(1e300)),
        Just(json!("8")),
    ]
}

fn reconcile() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec![
            "https://hooks.test/search?f={fingerprint}",
            "https://hooks.test/d/{deliveryId}",
            "https://hooks.test/{nope}",
            "https://hooks.test/{",
            " ",
            "ftp://x/{fingerprint}",
        ]),
        prop::option::of(prop::sample::select(vec!["get", "POST", "GE T", ""])),
        prop::option::of(prop::sample::select(vec![
            "", "/data", "data", "/a~2", "/a~1b",
        ])),
        prop::option::of(prop::sample::select(vec![
            "1h", "1s", "0s", "720h", "721h", "90m30s", "1.5s", "soon",
        ])),
        prop::option::of(prop::collection::btree_map(
            "[a-zA-Z-]{1,8}",
            "[ -~]{0,8}",
            0..3,
        )),
    )
        .prop_map(|(url, method, pointer, window, headers)| {
            let mut o = Map::new();
            o.insert("url".into(), url.into());
            if let Some(m) = method {
                o.insert("method".into(), m.into());
            }
            if let Some(p) = pointer {
                o.insert("matchesPointer".into(), p.into());
            }
            if let Some(w) = window {
                o.insert("observationWindow".into(), w.into());
            }
            if let Some(h) = headers {
                o.insert("headers".into(), json!(h));
            }
            Value::Object(o)
        })
}

/// A near-valid create request: each field present or not, valid or near it. Boxed: its value
/// trees are large, and unboxed inside another strategy they overflow a test thread's stack.
fn request() -> BoxedStrategy<Value> {
    let fields = (
        (
            prop::option::weighted(0.95, target_url()),
            prop::option::of(prop::sample::select(vec![
                "post", " put ", "PURGE", "", "GE T", "é", "a/b",
            ])),
            prop::option::of(prop::collection::btree_map(
                "[A-Za-z0-9 -]{0,10}",
                prop::option::weighted(0.9, "[ -~\t\r\n]{0,10}"),
                0..4,
            )),
            prop::option::of(small_json()),
            prop::option::of(prop_oneof![
                prop::collection::vec(any::<u8>(), 0..40)
                    .prop_map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
                "[A-Za-z0-9+/=\r\n ]{0,12}",
            ]),
            prop::option::of(number()),
        ),
        (
            prop::option::of(time()),
            prop::option::of(time()),
            prop::option::of(prop_oneof![" [ -~]{0,8} ", "é{85,87}", "k{255,258}"]),
            prop::option::of(prop::sample::select(vec![
                "at_least_once",
                "at_most_once",
                "sometimes",
            ])),
            prop::option::of(prop_oneof!["[ -~]{0,8}", "f{255,258}"]),
            prop::option::of(reconcile()),
            prop::option::of(prop::sample::select(vec!["", "/id", "id", "/a~", "/a~0"])),
            prop::option::of(prop::option::of(prop::sample::select(vec![
                "billing", "", "a b", "x.y-z_1",
            ]))),
            prop::option::weighted(0.05, Just(())),
        ),
    );
    fields
        .prop_map(
            |(
                (url, method, hdrs, body, b64, attempts),
                (not_before, expires, key, mode, fingerprint, reconcile, pointer, sign, unknown),
            )| {
                let mut o = Map::new();
                let mut put = |k: &str, v: Option<Value>| {
                    if let Some(v) = v {
                        o.insert(k.to_owned(), v);
                    }
                };
                put("targetUrl", url.map(Value::from));
                put("method", method.map(Value::from));
                put("headers", hdrs.map(|h| json!(h)));
                put("body", body);
                put("bodyBase64", b64.map(Value::from));
                put("maxAttempts", attempts);
                put("notBefore", not_before.map(Value::from));
                put("expiresAt", expires.map(Value::from));
                put("idempotencyKey", key.map(Value::from));
                put("mode", mode.map(Value::from));
                put("fingerprint", fingerprint.map(Value::from));
                put("reconcile", reconcile);
                put("remoteIdPointer", pointer.map(Value::from));
                put("sign", sign.map(|s| json!({ "secretRef": s })));
                put("surprise", unknown.map(|()| Value::from(1)));
                Value::Object(o)
            },
        )
        .boxed()
}

/// The property for any bytes, under an open policy and the default one.
fn property(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Err(r) = decode(bytes) {
        prop_assert_eq!(r.code, ErrorCode::InvalidRequest, "{}", r.message);
        prop_assert!(!r.message.is_empty());
        return Ok(());
    }
    for rules in [open(), Rules::default()] {
        // Decoded again for each: a request is consumed by its validation.
        let req = decode(bytes).map_err(|r| TestCaseError::fail(r.message))?;
        match validate(req, &rules) {
            Ok(new) => accepted(&new, &rules)?,
            Err(Rejection { code, message }) => {
                prop_assert!(
                    matches!(
                        code,
                        ErrorCode::InvalidRequest
                            | ErrorCode::InvalidDelivery
                            | ErrorCode::TargetBlocked
                    ),
                    "{code:?}: {message}"
                );
                prop_assert!(!message.is_empty());
            }
        }
    }
    Ok(())
}

/// What an accepted request must be.
fn accepted(new: &NewDelivery, rules: &Rules) -> Result<(), TestCaseError> {
    let url = Url::parse(&new.target_url).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(url.as_str(), new.target_url.as_str(), "stored as dialed");
    prop_assert!(matches!(url.scheme(), "http" | "https"));
    prop_assert!(url.username().is_empty() && url.password().is_none() && url.fragment().is_none());
    prop_assert_eq!(
        Some(new.origin.clone()),
        origin_filter(&new.target_url),
        "origin"
    );
    prop_assert!(headers::is_token(&new.method) && new.method == new.method.to_ascii_uppercase());
    prop_assert!(
        new.headers.windows(2).all(|w| w[0].0 < w[1].0),
        "headers sorted, unique"
    );
    for (name, _) in &new.headers {
        prop_assert_eq!(&headers::canonical_name(name), name);
        prop_assert!(!spool_proto::MANAGED_HEADERS
            .iter()
            .any(|m| m.eq_ignore_ascii_case(name)));
    }
    prop_assert!(new.body.bytes().len() <= spool_proto::MAX_BODY_BYTES);
    prop_assert!((1..=spool_proto::MAX_MAX_ATTEMPTS).contains(&new.max_attempts));
    if let Some(key) = &new.idempotency_key {
        prop_assert!(
            !key.is_empty() && key.trim() == key && key.len() <= spool_proto::MAX_KEY_BYTES
        );
    }
    // What the store keeps as it is holds no NUL (PostgreSQL's text cannot).
    for kept in [
        &new.idempotency_key,
        &new.fingerprint,
        &new.remote_id_pointer,
    ] {
        prop_assert!(
            !kept.as_deref().unwrap_or_default().contains('\0'),
            "{kept:?}"
        );
    }
    if let (Some(nb), Some(exp)) = (new.not_before, new.expires_at) {
        prop_assert!(nb < exp);
    }
    prop_assert_eq!(new.request_digest.len(), 32);
    // A fixed point: the delivery as a create request again is the same delivery.
    let again_bytes = reencode(new);
    let again = decode(&again_bytes)
        .and_then(|req| validate(req, rules))
        .map_err(|r| {
            TestCaseError::fail(format!(
                "accepted, then refused as stored: {:?} {} (request {})",
                r.code,
                r.message,
                String::from_utf8_lossy(&again_bytes)
            ))
        })?;
    prop_assert_eq!(&again.target_url, &new.target_url);
    prop_assert_eq!(&again.origin, &new.origin);
    prop_assert_eq!(&again.method, &new.method);
    prop_assert_eq!(&again.headers, &new.headers);
    prop_assert_eq!(&again.body, &new.body);
    prop_assert_eq!(again.max_attempts, new.max_attempts);
    prop_assert_eq!(again.not_before, new.not_before);
    prop_assert_eq!(again.expires_at, new.expires_at);
    prop_assert_eq!(&again.idempotency_key, &new.idempotency_key);
    prop_assert_eq!(again.mode, new.mode);
    prop_assert_eq!(&again.fingerprint, &new.fingerprint);
    prop_assert_eq!(&again.reconcile, &new.reconcile);
    prop_assert_eq!(&again.remote_id_pointer, &new.remote_id_pointer);
    prop_assert_eq!(again.observation_window_ms, new.observation_window_ms);
    prop_assert_eq!(&again.sign_secret, &new.sign_secret);
    prop_assert_eq!(&again.request_digest, &new.request_digest, "digest");
    Ok(())
}

/// An accepted delivery as a create request, its JSON body spliced in byte for byte.
fn reencode(new: &NewDelivery) -> Vec<u8> {
    let mut o = Map::new();
    o.insert("targetUrl".into(), new.target_url.clone().into());
    o.insert("method".into(), new.method.clone().into());
    o.insert(
        "headers".into(),
        Value::Object(
            new.headers
                .iter()
                .map(|(n, v)| (n.clone(), Value::from(v.clone())))
                .collect(),
        ),
    );
    o.insert("maxAttempts".into(), new.max_attempts.into());
    if let Some(k) = &new.idempotency_key {
        o.insert("idempotencyKey".into(), k.clone().into());
    }
    if let Some(t) = new.not_before {
        o.insert("notBefore".into(), units::format_time(t).into());
    }
    if let Some(t) = new.expires_at {
        o.insert("expiresAt".into(), units::format_time(t).into());
    }
    if new.mode == Mode::AtMostOnce {
        o.insert("mode".into(), "at_most_once".into());
    }
    if let Some(f) = &new.fingerprint {
        o.insert("fingerprint".into(), f.clone().into());
    }
    if let Some(r) = &new.reconcile {
        o.insert(
            "reconcile".into(),
            serde_json::from_str(r).expect("stored reconcile is JSON"),
        );
    }
    if let Some(p) = &new.remote_id_pointer {
        o.insert("remoteIdPointer".into(), p.clone().into());
    }
    if let Some(s) = &new.sign_secret {
        o.insert("sign".into(), json!({ "secretRef": s }));
    }
    if let Body::Binary(b) = &new.body {
        o.insert(
            "bodyBase64".into(),
            base64::engine::general_purpose::STANDARD.encode(b).into(),
        );
    }
    let mut bytes = serde_json::to_vec(&Value::Object(o)).expect("json");
    if let Body::Json(raw) = &new.body {
        bytes.pop();
        bytes.extend_from_slice(b",\"body\":");
        bytes.extend_from_slice(raw);
        bytes.push(b'}');
    }
    bytes
}

#[test]
fn near_valid_requests_never_panic_and_accepted_ones_are_a_fixed_point() {
    check(1000, request(), |req| {
        property(&serde_json::to_vec(&req).expect("json"))
    });
}

#[test]
fn arbitrary_and_mutated_bytes_never_panic() {
    let seeds: Vec<Vec<u8>> = corpus("create").into_iter().map(|(_, b)| b).collect();
    check(
        1500,
        prop_oneof![
            2 => mutated(seeds),
            1 => (request(), edits())
                .prop_map(|(r, e)| mutate(serde_json::to_vec(&r).expect("json"), &e)),
            1 => any::<Vec<u8>>(),
        ],
        |bytes| property(&bytes),
    );
}

#[test]
fn corpus_cases() {
    replay(corpus("create"), |(_, bytes)| property(bytes));
}
