//! Moving in from spoold v0.1.0 with `spoolctl import --spoold-journal`, against a real
//! `spoold` process. First against the real thing: `tests/fixtures/spoold-v0.1.0/`, a journal
//! the Go daemon wrote itself (compacted once, then killed with SIGKILL) and what its API said
//! of each delivery just before: every request received must be the one v0.1.0 would have
//! sent, byte for byte, the finished ones never sent, the one in flight sent again, and every
//! retried create with a key must find its delivery. Then hand-made journals for what the
//! real one lacks: bodies re-encoded in every way v0.1.0's journal may hold them, deliveries
//! that cannot be carried whole or whose history does not add up, and lines too long to be a
//! record. Network: 127.0.0.1 only (the fixture's own ports, 46665 and 37509). What a
//! receiver and a job see, against a second fixture, is in [`crate::moving_in`].

use std::collections::BTreeMap;
use std::process::Stdio;

use base64::Engine as _;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use spool_testkit::Receiver;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use crate::moving_in::as_if_written_now;
use crate::{stderr, stdout, Spoold, WAIT};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/spoold-v0.1.0");

/// The ports the fixture's deliveries target.
const FIXTURE_PORTS: [u16; 2] = [46665, 37509];

/// The fixture journal's last `updatedAt`: the Go daemon was killed just after.
const KILLED_AT: &str = "2026-12-06T10:55:02.695311359Z";

/// A `requestHash` as v0.1.0 writes one (64 lowercase hex digits), for deliveries whose key
/// is not tried.
const SOME_HASH: &str = "4e4a30d938d5521ef6e899f23155489520549374360f63b0523115bcb40d3f8e";

/// Headers a request may carry besides those v0.1.0 would have set itself: the connection's
/// own, and `User-Agent` (`spoold/<version>`, a documented difference).
const TRANSPORT_HEADERS: [&str; 4] = ["host", "content-length", "user-agent", "accept-encoding"];

/// The last record of each delivery in a journal: its `delivery` object as text.
fn last_records(journal: &str) -> BTreeMap<String, Box<RawValue>> {
    let mut last = BTreeMap::new();
    for line in journal.lines() {
        #[derive(serde::Deserialize)]
        struct Record {
            delivery: Option<Box<RawValue>>,
        }
        let record: Record = serde_json::from_str(line).expect("a journal line");
        if let Some(raw) = record.delivery {
            let v: Value = serde_json::from_str(raw.get()).expect("a delivery");
            last.insert(v["id"].as_str().expect("id").to_owned(), raw);
        }
    }
    last
}

/// The `body` of a delivery object as its bytes in the journal (v0.1.0 sends those after a
/// restart: it re-encoded the client's body when it wrote it).
fn journal_body(raw: &RawValue) -> Option<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Body {
        body: Option<Box<RawValue>>,
    }
    let b: Body = serde_json::from_str(raw.get()).expect("a delivery");
    b.body.map(|r| r.get().as_bytes().to_vec())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_spoold_v010_wrote_moves_in_exactly() {
    let mut receivers = Vec::new();
    for port in FIXTURE_PORTS {
        match Receiver::start_on(port).await {
            Ok(r) => receivers.push(r),
            Err(e) => panic!(
                "cannot bind 127.0.0.1:{port}: {e:#}. The fixture's deliveries target \
                 127.0.0.1:46665 and 127.0.0.1:37509 (written by spoold v0.1.0 itself, they \
                 cannot be moved): free the port and run the test again"
            ),
        }
    }
    let journal_text =
        std::fs::read_to_string(format!("{FIXTURE}/spoold.journal")).expect("the journal");
    let expected: BTreeMap<String, Value> = serde_json::from_str(
        &std::fs::read_to_string(format!("{FIXTURE}/expected.json")).expect("expected.json"),
    )
    .expect("expected.json parses");
    let last = last_records(&journal_text);
    assert_eq!(expected.len(), 15, "the fixture as it was written");

    let s = Spoold::start().await;
    // As if it had just stopped: its finished deliveries are within v0.1.0's retention, and
    // move in (never to be sent) for their keys.
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, as_if_written_now(&journal_text, KILLED_AT)).expect("write");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 15, already there 0, conflicts 0, invalid 0\n"
    );

    let api = s.api();
    let open: Vec<(&String, &Value)> = expected
        .iter()
        .filter(|(_, d)| matches!(d["status"].as_str(), Some("pending" | "in_flight")))
        .collect();
    assert_eq!(open.len(), 11);
    for (id, _) in &open {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .unwrap_or_else(|e| panic!("{id} delivered: {e:#}"));
    }

    let requests: Vec<_> = receivers
        .iter()
        .flat_map(|rc| rc.requests().into_iter().map(|r| (rc.port(), r)))
        .collect();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (port, r) in &requests {
        let id = r
            .header("x-spoold-delivery-id")
            .expect("X-Spoold-Delivery-ID on every request")
            .to_owned();
        let d = expected
            .get(&id)
            .unwrap_or_else(|| panic!("a request for {id}, which the fixture does not have"));
        assert!(
            matches!(d["status"].as_str(), Some("pending" | "in_flight")),
            "{id} had finished ({}) and was sent again",
            d["status"]
        );
        *seen.entry(id.clone()).or_default() += 1;

        // The request line: method, path and query as v0.1.0 stored them, on its port.
        let target = d["targetUrl"].as_str().expect("targetUrl");
        let rest = target
            .strip_prefix(&format!("http://127.0.0.1:{port}"))
            .unwrap_or_else(|| panic!("{id} for {target} arrived on port {port}"));
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (rest, None),
        };
        assert_eq!(r.method, d["method"].as_str().expect("method"), "{id}");
        assert_eq!(r.path, path, "{id}");
        assert_eq!(r.query.as_deref(), query, "{id}");

        // The body, byte for byte; and the Content-Type v0.1.0 would have sent.
        let stored: BTreeMap<String, String> = d["headers"]
            .as_object()
            .map(|h| {
                h.iter()
                    .map(|(n, v)| (n.to_ascii_lowercase(), v.as_str().unwrap_or("").to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let (body, default_type): (Vec<u8>, Option<&str>) =
            match (d.get("body"), d.get("bodyBase64")) {
                (Some(value), None) => {
                    let bytes = journal_body(&last[&id]).expect("the journal has the body");
                    let sent: Value = serde_json::from_slice(&r.body).expect("JSON sent");
                    assert_eq!(&sent, value, "{id}: the body's value is what v0.1.0 showed");
                    (bytes, Some("application/json"))
                }
                // A body v0.1.0 kept as bytes (not JSON) it sent as such.
                (None, Some(b64)) => (
                    base64::engine::general_purpose::STANDARD
                        .decode(b64.as_str().expect("base64"))
                        .expect("base64"),
                    Some("application/octet-stream"),
                ),
                (None, None) => (Vec::new(), None),
                (Some(_), Some(_)) => panic!("{id}: both bodies"),
            };
        assert!(
            r.body.as_ref() == body.as_slice(),
            "{id}: {} bytes sent, {} expected, or other bytes",
            r.body.len(),
            body.len()
        );
        let content_type = stored
            .get("content-type")
            .map(String::as_str)
            .or(default_type.filter(|_| !body.is_empty()));
        assert_eq!(r.header("content-type"), content_type, "{id}");

        // Every header v0.1.0 would have set, and no other but the connection's own.
        let mut want = stored.clone();
        want.insert("x-spoold-delivery-id".into(), id.clone());
        // v0.1.0 counts the attempt it claims: the next after those made (the one in flight,
        // whose lease it would have found expired, too).
        let next = d["attempts"].as_u64().expect("attempts") + 1;
        want.insert("x-spoold-attempt".into(), next.to_string());
        if let Some(t) = content_type {
            want.insert("content-type".into(), t.to_owned());
        }
        for (name, value) in &want {
            assert_eq!(r.header(name), Some(value.as_str()), "{id}: {name}");
        }
        for name in r.headers.keys() {
            // spoold's HTTP client adds `Accept: */*` where none is stored (Go's sends none);
            // it asks for nothing a receiver could act on. Any other header is a difference.
            let default_accept = name == "accept" && r.header("accept") == Some("*/*");
            assert!(
                want.contains_key(name.as_str())
                    || TRANSPORT_HEADERS.contains(&name.as_str())
                    || default_accept,
                "{id}: header {name} is not one spoold v0.1.0 would have sent"
            );
        }
    }
    let delivered: Vec<&String> = seen.keys().collect();
    let open_ids: Vec<&String> = open.iter().map(|(id, _)| *id).collect();
    assert_eq!(delivered, open_ids, "every open delivery, and only those");
    assert!(
        seen["931e49d6f241c7ccf71af704280af448"] >= 1,
        "the one in flight is sent again"
    );

    // The clients retry their creates with their own bytes (v0.1.0 hashed those before it
    // re-encoded the body for its journal): each finds its delivery, by the journal's
    // requestHash for JSON and no body, by the bytes for a binary one.
    let all_bytes = expected["f3adfec4db0a70e125249a0dab66d8f5"]["bodyBase64"]
        .as_str()
        .expect("base64")
        .to_owned();
    let retries = [
        (
            "743526bb10cb81d9777a49b5c1ff9540",
            r#"{"idempotencyKey": "json-compact", "targetUrl": "http://127.0.0.1:46665/json-compact", "method": "PUT", "maxAttempts": 100, "body": {"n":1,"s":"zoë 東京"}}"#.to_owned(),
        ),
        (
            "931e49d6f241c7ccf71af704280af448",
            r#"{"idempotencyKey": "in-flight", "targetUrl": "http://127.0.0.1:37509/hang/1", "maxAttempts": 100, "body": {"hang": 1}}"#.to_owned(),
        ),
        (
            "9ebad78391af08e0de04a7677f893a9d",
            r#"{"idempotencyKey": "json-reencoded", "targetUrl": "http://127.0.0.1:46665/json-spaces", "maxAttempts": 100, "body": {"b": [1, 2.50, 1e3, -0.0], "a": "<&>\u00e9"}}"#.to_owned(),
        ),
        (
            "a7e9f9934dffbd139b8e1af76234ff45",
            r#"{"idempotencyKey": "nightly-2026-12-06", "targetUrl": "http://127.0.0.1:46665/later", "maxAttempts": 5, "body": {"later": true}}"#.to_owned(),
        ),
        (
            "ca5ce49a8019964808e1008834f6bac9",
            r#"{"idempotencyKey": "empty-b64", "targetUrl": "http://127.0.0.1:46665/empty", "maxAttempts": 100, "bodyBase64": ""}"#.to_owned(),
        ),
        (
            "f3adfec4db0a70e125249a0dab66d8f5",
            format!(
                r#"{{"idempotencyKey": "bin-all-bytes", "targetUrl": "http://127.0.0.1:46665/bin", "maxAttempts": 100, "bodyBase64": "{all_bytes}"}}"#
            ),
        ),
    ];
    for (id, create) in &retries {
        let (status, answer) = api.create_raw(create.as_bytes()).await.expect("create");
        assert_eq!(
            (status, answer["id"].as_str()),
            (200, Some(*id)),
            "{create}: {answer}"
        );
    }
    // As in v0.1.0, the key is bound to the client's request: the journal's re-encoding of
    // the body is another request.
    let (status, answer) = api
        .create_raw(
            r#"{"idempotencyKey": "json-reencoded", "targetUrl": "http://127.0.0.1:46665/json-spaces", "maxAttempts": 100, "body": {"b":[1,2.50,1e3,-0.0],"a":"\u003c\u0026\u003e\u00e9"}}"#,
        )
        .await
        .expect("create");
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "idempotency_conflict");
}

/// A pending v0.1.0 delivery as a journal line (`extra` appended to the delivery object).
fn journal_line(id: &str, url: &str, extra: &str, hash: &str) -> String {
    format!(
        "{{\"version\":2,\"delivery\":{{\"id\":\"{id}\",\"targetUrl\":\"{url}\",\
         \"method\":\"POST\",\"status\":\"pending\",\"attempts\":1,\"maxAttempts\":100,\
         \"createdAt\":\"2026-11-30T10:00:00.123456789Z\",\
         \"updatedAt\":\"2026-11-30T10:00:01Z\"{extra}}},\"requestHash\":\"{hash}\"}}\n"
    )
}

/// v0.1.0's journal holds its own encoding of a JSON body (compacted, numbers and escapes as
/// its encoder writes them), while the client retries with its own bytes: the journal's
/// requestHash, computed over the client's bytes, finds the delivery for each re-encoding.
/// The hashes were computed with v0.1.0's recipe (SHA-256 of method, URL, maxAttempts, the
/// headers as `Name:value` lines, then the body as sent) outside this code.
#[tokio::test(flavor = "multi_thread")]
async fn retried_creates_find_deliveries_whose_body_v010_re_encoded() {
    let s = Spoold::start().await;
    // Port 9 (discard): nothing is delivered here, only the keys are tried.
    let url = |n: u32| format!("http://127.0.0.1:9/reencoded/{n}");
    let cases = [
        // (key, method, client's create fields, journal's body, requestHash)
        (
            "k1",
            "POST",
            r#""maxAttempts": 100, "body": {"amount": 2.50}"#,
            r#"{"amount":2.5}"#,
            "f7df61430d9778bf2be6f548834bb967f1f045ca93171a6921bbb011012008fd",
            "",
        ),
        (
            "k2",
            "POST",
            r#""maxAttempts": 100, "body": {"q": "<&>"}"#,
            r#"{"q":"\u003c\u0026\u003e"}"#,
            "c74d5c745170bc13fcb55b1dfb220f39f816b3f68e277ff95f675cb0f0e5b524",
            "",
        ),
        (
            "k3",
            "PUT",
            "\"maxAttempts\": 100, \"headers\": {\"x-trace\": \"t-3\"}, \"body\": { \"a\" : [ 1 , 2 ] ,\n \"b\" : { } }",
            r#"{"a":[1,2],"b":{}}"#,
            "1ea2651ac7d128f01f73969ec101c5d7af24e5e37695acdd0e2c35b76f35d4df",
            r#","headers":{"X-Trace":"t-3"}"#,
        ),
        (
            "k4",
            "POST",
            r#""maxAttempts": 100, "body": {"n": 1e3}"#,
            r#"{"n":1000}"#,
            "b4b2c877f6a54fc09e644e582610e4dbd54b6a3fbba580a748165fa76481f801",
            "",
        ),
        // No maxAttempts: v0.1.0 read it as 8, and hashed 8.
        (
            "k5",
            "POST",
            r#""body": {"z": -0.0}"#,
            r#"{"z":0}"#,
            "f8d70c29fded84d266553c8a59701dd4c513192112e007fae7704a6cf575ccd9",
            "",
        ),
    ];
    let mut journal = String::new();
    for (n, (key, method, _, body, hash, headers)) in cases.iter().enumerate() {
        let id = format!("{:032x}", n + 1);
        let max = if *key == "k5" { 8 } else { 100 };
        journal.push_str(
            &journal_line(
                &id,
                &url(n as u32 + 1),
                &format!(",\"idempotencyKey\":\"{key}\",\"body\":{body}{headers}"),
                hash,
            )
            .replace("\"method\":\"POST\"", &format!("\"method\":\"{method}\""))
            .replace("\"maxAttempts\":100", &format!("\"maxAttempts\":{max}")),
        );
    }
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, &journal).expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("imported 5, "), "{}", stdout(&o));

    let api = s.api();
    for (n, (key, method, fields, _, _, _)) in cases.iter().enumerate() {
        let create = format!(
            "{{\"idempotencyKey\": \"{key}\", \"targetUrl\": \"{}\", \"method\": \"{method}\", {fields}}}",
            url(n as u32 + 1)
        );
        let (status, answer) = api.create_raw(create.clone()).await.expect("create");
        assert_eq!(status, 200, "{create}: {answer}");
        assert_eq!(answer["id"], format!("{:032x}", n + 1), "{create}");
    }
    // The same key with another request is still a conflict: another value, or the same
    // value in other bytes (as v0.1.0 answered).
    for body in [r#"{"amount": 2.51}"#, r#"{"amount": 2.5}"#] {
        let (status, answer) = api
            .create(
                json!({"idempotencyKey": "k1", "targetUrl": url(1), "maxAttempts": 100,
                "body": serde_json::from_str::<Value>(body).expect("json")}),
            )
            .await
            .expect("create");
        assert_eq!(status, 409, "{body}: {answer}");
    }
}

/// A delivery that cannot be carried over whole, or whose history does not add up, is
/// refused by line and field, never sent; the others are imported and delivered as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_journal_delivery_that_cannot_move_whole_is_refused_by_line_and_field() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/from-go");
    let id = |n: u32| format!("{n:032x}");
    let journal = [
        journal_line(&id(1), &url, r#","bodyBase64":"AAEC/w==""#, SOME_HASH),
        journal_line(
            &id(2),
            &url,
            r#","body":{"a":1},"bodyBase64":"AQI=""#,
            SOME_HASH,
        ),
        journal_line(&id(3), &url, r#","bodyBase64":"not base64!""#, SOME_HASH),
        journal_line(
            &id(4),
            &url,
            r#","bodyEncoding":"gzip","body":{"a":1}"#,
            SOME_HASH,
        ),
        journal_line(&id(5), &url, "", SOME_HASH).replace("\"attempts\":1", "\"attempts\":100"),
        journal_line(&id(6), &url, "", SOME_HASH)
            .replace("2026-11-30T10:00:00.123456789Z", "1969-07-20T20:17:40Z"),
        journal_line(&id(7), &url, "", SOME_HASH)
            .replace("2026-11-30T10:00:01Z", "5138-01-01T00:00:00Z"),
        journal_line(&id(8), &url, "", SOME_HASH)
            .replace("\"maxAttempts\":100", "\"maxAttempts\":0"),
        journal_line(&id(9), &url, r#","bodyBase64":"""#, SOME_HASH),
        // A status v0.1.0 does not have: neither sent nor counted as finished.
        journal_line(&id(10), &url, "", SOME_HASH)
            .replace("\"status\":\"pending\"", "\"status\":\"dead\""),
        // Not a digest v0.1.0 writes: it could never match a retried create.
        journal_line(&id(11), &url, "", "00"),
        journal_line(&id(12), &url, "", &SOME_HASH.to_uppercase()),
    ]
    .concat();
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, journal).expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 2, already there 0, conflicts 0, invalid 10\n"
    );
    let err = stderr(&o);
    for said in [
        format!(
            "line 2: {}: not imported: body and bodyBase64: both set",
            id(2)
        ),
        format!(
            "line 3: {}: not imported: bodyBase64: not standard base64",
            id(3)
        ),
        format!(
            "line 4: {}: not imported: unknown field `bodyEncoding`",
            id(4)
        ),
        format!(
            "line 5: {}: not imported: attempts 100 of maxAttempts 100: a pending delivery has \
             an attempt left",
            id(5)
        ),
        format!(
            "line 6: {}: not imported: createdAt 1969-07-20T20:17:40Z: out of range",
            id(6)
        ),
        format!(
            "line 7: {}: not imported: updatedAt 5138-01-01T00:00:00Z: out of range",
            id(7)
        ),
        format!("line 8: {}: not imported: maxAttempts 0:", id(8)),
        format!(
            "line 10: {}: not imported: status \"dead\": not one spoold v0.1.0 writes (pending, \
             in_flight, succeeded, failed, canceled)",
            id(10)
        ),
        format!(
            "line 11: {}: not imported: requestHash \"00\": spoold v0.1.0 writes 64 lowercase \
             hex digits (SHA-256)",
            id(11)
        ),
        format!("line 12: {}: not imported: requestHash \"4E4A", id(12)),
    ] {
        assert!(err.contains(&said), "{said:?} in:\n{err}");
    }
    let api = s.api();
    for n in [1, 9] {
        api.wait_status(&id(n), &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
    let seen = s.receiver.requests();
    assert_eq!(seen.len(), 2, "only what could be carried whole is sent");
    let binary = seen
        .iter()
        .find(|r| r.header("x-spoold-delivery-id") == Some(id(1).as_str()))
        .expect("the binary one");
    assert_eq!(binary.body.as_ref(), [0u8, 1, 2, 255]);
    assert_eq!(
        binary.header("content-type"),
        Some("application/octet-stream"),
        "what v0.1.0 sent with bytes and no Content-Type"
    );
    let empty = seen
        .iter()
        .find(|r| r.header("x-spoold-delivery-id") == Some(id(9).as_str()))
        .expect("the empty one");
    assert!(empty.body.is_empty());
    assert_eq!(
        (empty.header("content-type"), empty.header("content-length")),
        (None, Some("0")),
        "no body, no Content-Type; a POST says its length"
    );
    for n in (2..=8).chain(10..=12) {
        let (status, _) = api.get(&id(n)).await.expect("get");
        assert_eq!(status, 404, "{} was refused, not kept", id(n));
    }
}

/// The peak resident memory of process `pid`, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// A 100 MB line is refused by its number, read past without being held: spoolctl's peak
/// memory stays far below the line's size; the lines around it are imported.
#[tokio::test(flavor = "multi_thread")]
async fn a_line_of_100_mb_is_refused_by_number_without_being_held() {
    let s = Spoold::start().await;
    let api = s.api();
    let mut lines = Vec::new();
    for n in 0..2 {
        let (status, created) = api
            .create(json!({"targetUrl": s.receiver.url(&format!("/l/{n}")), "maxAttempts": 3}))
            .await
            .expect("create");
        assert_eq!(status, 201);
        let id = created["id"].as_str().expect("id").to_owned();
        api.wait_status(&id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
        lines.push(id);
    }
    let o = s.ctl(&["export"]).await;
    let export = stdout(&o);
    let records: Vec<&str> = export.lines().collect();
    assert_eq!(records.len(), 2);

    // Into a second daemon, through a pipe: spoolctl is held at the long line's end until its
    // peak memory is read.
    let target = Spoold::start().await;
    let mut child = tokio::process::Command::from(target.command(&["import", "-"]))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spoolctl runs");
    let pid = child.id().expect("running");
    let mut input = child.stdin.take().expect("stdin");
    let mut errors = BufReader::new(child.stderr.take().expect("stderr")).lines();
    input
        .write_all(format!("{}\n", records[0]).as_bytes())
        .await
        .expect("line 1");
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..100 {
        input.write_all(&chunk).await.expect("line 2");
    }
    input.write_all(b"\n").await.expect("line 2 ends");
    let said = tokio::time::timeout(WAIT, errors.next_line())
        .await
        .expect("in time")
        .expect("stderr")
        .expect("a line");
    assert_eq!(
        said,
        "spoolctl: line 2: longer than 16 MiB, not read (no export record is that long)"
    );
    let peak = peak_kib(pid);
    assert!(
        peak < 48 * 1024,
        "spoolctl held {peak} KiB reading a 100 MB line"
    );
    input
        .write_all(format!("{}\n", records[1]).as_bytes())
        .await
        .expect("line 3");
    drop(input);
    let o = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("in time")
        .expect("spoolctl finishes");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stdout(&o),
        "imported 2, already there 0, conflicts 0, invalid 1\n"
    );
    for id in &lines {
        let (status, _) = target.api().get(id).await.expect("get");
        assert_eq!(status, 200, "{id} imported");
    }

    // A journal with such a line cannot be told apart into records: refused whole.
    let file = s.dir.path().join("spoold.journal");
    let mut journal = journal_line(&"a".repeat(32), &s.receiver.url("/j"), "", "x").into_bytes();
    journal.extend(std::iter::repeat_n(b'x', 100 << 20));
    journal.push(b'\n');
    std::fs::write(&file, journal).expect("write");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "spoolctl: line 2: longer than 16 MiB, not a spoold journal record; nothing imported\n"
    );
}

/// An export record whose history does not add up is refused by the daemon naming the field,
/// and by spoolctl naming the line.
#[tokio::test(flavor = "multi_thread")]
async fn an_export_record_whose_history_does_not_add_up_is_refused_by_line() {
    let s = Spoold::start().await;
    let api = s.api();
    let (_, created) = api
        .create(json!({"targetUrl": s.receiver.url("/h"), "maxAttempts": 3}))
        .await
        .expect("create");
    let id = created["id"].as_str().expect("id").to_owned();
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let o = s.ctl(&["export"]).await;
    let record: Value = serde_json::from_str(stdout(&o).trim()).expect("a record");

    let mut twice = record.clone();
    twice["delivery"]["id"] = json!("1".repeat(32));
    let attempt = twice["attempts"][0].clone();
    twice["attempts"] = json!([attempt.clone(), attempt.clone(), attempt]);
    let mut fresh = record.clone();
    fresh["delivery"]["id"] = json!("2".repeat(32));
    let target = Spoold::start().await;
    let file = s.dir.path().join("spool.ndjson");
    std::fs::write(&file, format!("{fresh}\n\n{twice}\n")).expect("write");
    let o = target.ctl(&["import", &file.display().to_string()]).await;
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 1, already there 0, conflicts 0, invalid 1\n"
    );
    assert!(
        stderr(&o).starts_with(&format!(
            "spoolctl: line 3: {}: not imported: attempts[1]: attempt 1 of cycle 1 after \
             attempt 1 of cycle 1",
            "1".repeat(32)
        )),
        "{}",
        stderr(&o)
    );
}
