//! Moving in from spoold v0.1.0 as a receiver and a job see it, against a real `spoold`
//! process. First `tests/fixtures/spoold-v0.1.0-b/`: a journal the Go daemon wrote, with the
//! creates that made it (`creates.json`), what its API said (`expected.json`,
//! `after-replay.json`) and what the Go daemon itself sent when it was started again on it
//! (`received.json`). A receiver must get from spoold what it got from v0.1.0, byte for byte
//! but for [`DIFFERING_HEADERS`]; a job that re-runs its create — with curl, or the same
//! `spoolctl send` line with either `spoolctl` — must get its delivery back, a finished one
//! too. Then hand-made journals for what the fixture lacks: v0.1.0's retention window, a
//! `Keep-Alive` header and a space in a path. Network: 127.0.0.1 only (the fixture's own ports,
//! 53991 and 39229; port 9, where nothing listens; the test's receiver).
//!
//! The fixture's times are moved to just before the test ([`as_if_written_now`]): finished
//! deliveries move in only for the rest of v0.1.0's retention, measured from now.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::Value;
use spool_proto::units::{format_time, parse_time};
use spool_testkit::{Receiver, Recorded};

use crate::{row, stderr, stdout, Spoold, WAIT};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/spoold-v0.1.0-b"
);

/// The fixture journal's last `updatedAt`: the Go daemon was killed just after.
const KILLED_AT: &str = "2026-12-07T17:40:46.046947871Z";

/// The delivery that was in flight on its last attempt (`maxAttempts` 1) at the kill.
const INFLIGHT_LAST: &str = "25709b4f336da6b224e0c5698066eecc";

/// Headers that differ between Go's HTTP client and spoold's, legitimately: `User-Agent`
/// (`Go-http-client/1.1` there, `spoold/<version>` here, a documented difference),
/// `Accept-Encoding` (Go's transport asks for gzip and decodes the answer itself; spoold asks
/// for no encoding) and `Accept` (spoold's client sends `Accept: */*`, Go's none; it asks for
/// nothing a receiver could act on). Every other header — names compared case-insensitively:
/// Go writes them canonical, spoold lower-case — must be there with the same value, and no
/// other.
const DIFFERING_HEADERS: [&str; 3] = ["user-agent", "accept-encoding", "accept"];

/// `journal` with every time in it moved by the same amount, so that `last_written` (when the
/// old daemon last wrote) is a second ago: the journal as if the old daemon had just stopped.
/// Nothing else changes (times are in no `requestHash`).
pub(crate) fn as_if_written_now(journal: &str, last_written: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let by = now - 1000 - parse_time(last_written).expect("a time");
    let mut out = String::with_capacity(journal.len());
    let mut rest = journal;
    // Every JSON string that is a whole RFC 3339 time (the journal's only strings that start
    // with a digit and a `T` at 10 are its times).
    while let Some(open) = rest.find('"') {
        out.push_str(&rest[..=open]);
        rest = &rest[open + 1..];
        let close = rest.find('"').expect("a closing quote");
        let text = &rest[..close];
        match parse_time(text) {
            Ok(ms) if text.as_bytes().get(10) == Some(&b'T') => {
                out.push_str(&format_time(ms + by));
            }
            _ => out.push_str(text),
        }
        out.push('"');
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

fn fixture_text(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURE}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn fixture_json<T: serde::de::DeserializeOwned>(name: &str) -> T {
    serde_json::from_str(&fixture_text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Receivers on the fixture's ports, or a panic saying why there are none.
async fn bind_fixture_ports(ports: &[u16]) -> Vec<Receiver> {
    let mut receivers = Vec::new();
    for port in ports {
        match Receiver::start_on(*port).await {
            Ok(r) => receivers.push(r),
            Err(e) => panic!(
                "cannot bind 127.0.0.1:{port}: {e:#}. The fixture's deliveries target \
                 127.0.0.1:53991 and 127.0.0.1:39229 (written by spoold v0.1.0 itself, and in \
                 its requestHash, they cannot be moved): free the port and run the test again"
            ),
        }
    }
    receivers
}

/// A daemon with the fixture journal imported (11 deliveries: 7 pending, 1 in flight, 3
/// finished); with `paused`, its targets paused first, so that nothing is sent.
async fn fixture_imported(paused: bool) -> Spoold {
    let s = Spoold::start().await;
    if paused {
        for origin in ["http://127.0.0.1:53991", "http://127.0.0.1:39229"] {
            let o = s.ctl(&["targets", "pause", origin]).await;
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        }
    }
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(
        &file,
        as_if_written_now(&fixture_text("spoold.journal"), KILLED_AT),
    )
    .expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 11, already there 0, conflicts 0, invalid 0\n",
        "the pending, the one in flight and the finished ones (for their keys)"
    );
    s
}

/// Header name (lower case) → value, without [`DIFFERING_HEADERS`].
fn compared_headers<'a>(
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, String> {
    headers
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .filter(|(n, _)| !DIFFERING_HEADERS.contains(&n.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_gets_from_spoold_what_it_got_from_v010() {
    let receivers = bind_fixture_ports(&[53991, 39229]).await;
    let received: Vec<Value> = fixture_json("received.json");
    let expected: BTreeMap<String, Value> = fixture_json("expected.json");
    let after: BTreeMap<String, Value> = fixture_json("after-replay.json");
    let s = fixture_imported(false).await;
    let api = s.api();
    let open: Vec<&String> = expected
        .iter()
        .filter(|(_, d)| matches!(d["status"].as_str(), Some("pending" | "in_flight")))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(open.len(), 8);
    for id in &open {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .unwrap_or_else(|e| panic!("{id} delivered: {e:#}"));
    }

    let mut by_id: BTreeMap<String, Vec<(u16, Recorded)>> = BTreeMap::new();
    for rc in &receivers {
        for r in rc.requests() {
            let id = r
                .header("x-spoold-delivery-id")
                .expect("X-Spoold-Delivery-ID on every request")
                .to_owned();
            by_id.entry(id).or_default().push((rc.port(), r));
        }
    }
    // What v0.1.0 sent, spoold sends: method, path, body bytes, headers.
    for want in &received {
        let headers: Vec<(String, String)> =
            serde_json::from_value(want["headers"].clone()).expect("headers");
        let want_headers = compared_headers(headers.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        let id = &want_headers["x-spoold-delivery-id"];
        let got = by_id.get(id).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(got.len(), 1, "{id}: sent once, as v0.1.0 did");
        let (port, r) = &got[0];
        assert_eq!(*port, 53991, "{id}");
        assert_eq!(r.method, want["method"].as_str().expect("method"), "{id}");
        assert_eq!(r.path, want["path"].as_str().expect("path"), "{id}");
        assert_eq!(r.query, None, "{id}");
        let body = base64::engine::general_purpose::STANDARD
            .decode(want["bodyBase64"].as_str().expect("bodyBase64"))
            .expect("base64");
        assert!(
            r.body.as_ref() == body.as_slice(),
            "{id}: sent {:?}, v0.1.0 sent {:?}",
            r.body_text(),
            String::from_utf8_lossy(&body)
        );
        let got_headers = compared_headers(
            r.headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.to_str().expect("visible ASCII"))),
        );
        assert_eq!(got_headers, want_headers, "{id} {}", r.path);
    }

    // The one in flight on its last attempt: v0.1.0 kept it in flight while its lease ran (it
    // sent nothing in the 20 s after the restart) and, as its design says, claims an expired
    // lease again, numbering the attempt on: spoold sends it once, as attempt 2, never as a
    // second attempt 1.
    let last = &by_id[INFLIGHT_LAST];
    assert_eq!(last.len(), 1, "sent again once");
    let (port, r) = &last[0];
    assert_eq!(
        (*port, r.method.as_str(), r.path.as_str()),
        (39229, "POST", "/hang/last")
    );
    assert_eq!(r.header("x-spoold-attempt"), Some("2"));
    assert_eq!(r.body.as_ref(), br#"{"last":1}"#);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("content-length"), Some("10"));
    assert_eq!(
        by_id.len(),
        received.len() + 1,
        "nothing else sent: no finished delivery"
    );
    let (_, view) = api.get(INFLIGHT_LAST).await.expect("get");
    assert_eq!(
        (
            view["attempts"].as_u64(),
            view["interruptedAttempts"].as_u64()
        ),
        (Some(2), Some(1))
    );

    // The API says what v0.1.0's said 20 s into its run, for those it had sent by then and the
    // finished ones.
    for (id, want) in &after {
        if id == INFLIGHT_LAST {
            continue;
        }
        let (status, got) = api.get(id).await.expect("get");
        assert_eq!(status, 200, "{id}");
        for field in [
            "status",
            "attempts",
            "lastResponseCode",
            "idempotencyKey",
            "maxAttempts",
        ] {
            assert_eq!(got[field], want[field], "{id}: {field}");
        }
        if want["status"] != "succeeded" {
            assert_eq!(got["lastError"], want["lastError"], "{id}: lastError");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_re_running_its_create_after_the_move_gets_its_delivery_back() {
    let s = fixture_imported(true).await;
    let api = s.api();
    #[derive(serde::Deserialize)]
    struct Create {
        id: String,
        request: String,
        status: u16,
    }
    // v0.1.0 journaled (and sent, and its spoolctl sent) a JSON body as Go's encoder writes it:
    // what the digests of a create count on.
    let journal = fixture_text("spoold.journal");
    let creates = fixture_json::<Vec<Create>>("creates.json");
    for c in &creates {
        #[derive(serde::Deserialize)]
        struct Body {
            body: Option<Box<serde_json::value::RawValue>>,
        }
        if let Some(body) = serde_json::from_str::<Body>(&c.request)
            .expect("a create")
            .body
        {
            let compacted = spool_proto::journal::go_compact(body.get());
            assert!(
                journal.contains(&format!("\"body\":{compacted}}}")),
                "{compacted} in the journal"
            );
        }
    }
    // Byte for byte as the job sent it to v0.1.0: every one, finished or not.
    for c in creates {
        assert_eq!(c.status, 201, "the fixture as it was written");
        let (status, answer) = api.create_raw(c.request.clone()).await.expect("create");
        assert_eq!(
            (status, answer["id"].as_str()),
            (200, Some(c.id.as_str())),
            "{}: {answer}",
            c.request
        );
    }
    // Or with spoolctl, the line that sends the same request: (its flags, the row it prints).
    let on = |path: &str| format!("http://127.0.0.1:53991{path}");
    let lines = [
        (
            vec![
                "-d",
                r#"{"b" : [1, 2.50],  "a": "<&>"}"#,
                "--idempotency-key",
                "spaces",
            ],
            (
                "b6640f72c5328362870f0686f3245da1",
                "pending",
                "1/100",
                "POST",
                on("/spaces"),
            ),
        ),
        (
            vec!["-d", "null", "--idempotency-key", "null-body"],
            (
                "55fbcc5ffc4ae8351d2a1d597cf204c6",
                "pending",
                "2/100",
                "POST",
                on("/null"),
            ),
        ),
        (
            vec!["-X", "PUT", "--idempotency-key", "no-body-put"],
            (
                "660d99fa338e0bda98e9885d4938e1a8",
                "pending",
                "2/100",
                "PUT",
                on("/put"),
            ),
        ),
        (
            vec!["-d", r#"{"c": 1}"#, "--idempotency-key", "done-cancel"],
            (
                "7502546f6c7c2361491676d5a554e12d",
                "canceled",
                "0/100",
                "POST",
                on("/cancel"),
            ),
        ),
    ];
    for (flags, (id, status, attempts, method, url)) in lines {
        let o = s
            .ctl(
                &[
                    &["send", "--max-attempts", "100"][..],
                    &flags,
                    &[url.as_str()],
                ]
                .concat(),
            )
            .await;
        assert_eq!(o.status.code(), Some(0), "{flags:?}: {}", stderr(&o));
        // The row (a `last error:` line may follow it).
        let want = row("existing", id, status, attempts, method, &url);
        assert_eq!(stdout(&o).split_inclusive('\n').next(), Some(want.as_str()));
    }
    let o = s
        .ctl(&[
            "send",
            "--idempotency-key",
            "done-ok",
            "--max-attempts",
            "3",
            "-d",
            r#"{"done": 1}"#,
            "http://127.0.0.1:33057/ok/done",
        ])
        .await;
    assert_eq!(
        stdout(&o),
        row(
            "existing",
            "9116c5a6f847f4e8c3e4e9e8d0387201",
            "succeeded",
            "1/3",
            "POST",
            "http://127.0.0.1:33057/ok/done"
        ),
        "{}",
        stderr(&o)
    );
    // Another request under a taken key is still refused.
    let (status, answer) = api
        .create_raw(r#"{"targetUrl": "http://127.0.0.1:33057/bad/done", "body": {"bad": 2}, "idempotencyKey": "done-bad", "maxAttempts": 1}"#)
        .await
        .expect("create");
    assert_eq!(status, 409, "{answer}");
}

/// A v0.1.0 delivery as a journal line: its `status`, the rest of the delivery object (`extra`:
/// key, headers, counts, body…), `updated` as its `updatedAt` and `hash` as its `requestHash`.
fn journal_line(
    id: &str,
    url: &str,
    status: &str,
    extra: &str,
    updated: &str,
    hash: &str,
) -> String {
    format!(
        "{{\"version\":2,\"delivery\":{{\"id\":\"{id}\",\"targetUrl\":\"{url}\",\
         \"method\":\"POST\",\"status\":\"{status}\"{extra},\
         \"createdAt\":\"2026-11-30T10:00:00.123456789Z\",\"updatedAt\":\"{updated}\"}},\
         \"requestHash\":\"{hash}\"}}\n"
    )
}

/// A time `hours` before now.
fn hours_ago(hours: i64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    format_time(now - hours * 3_600_000)
}

/// v0.1.0's `spoolctl send` did not send a `--data` body as typed: Go's encoder compacted it
/// and escaped `<>&` and U+2028, and v0.1.0 hashed that. The same line run with this spoolctl
/// (which sends the body as typed) finds the delivery; so does v0.1.0's form, sent again by its
/// own spoolctl; another body is still a conflict. The hashes were computed with v0.1.0's
/// recipe (SHA-256 of method, URL, maxAttempts, the headers as `Name:value` lines, then the
/// body as v0.1.0's spoolctl sent it) outside this code.
#[tokio::test(flavor = "multi_thread")]
async fn the_same_spoolctl_send_line_finds_its_delivery_after_the_switch() {
    let s = Spoold::start().await;
    let journal = [
        journal_line(
            &"1".repeat(32),
            "http://127.0.0.1:9/line/1",
            "pending",
            r#","idempotencyKey":"line-1","headers":{"X-Trace":"t-1"},"attempts":1,"maxAttempts":100,"body":{"b":[1,2.50],"a":"\u003c\u0026\u003e"}"#,
            &hours_ago(1),
            "5e31882c61af9d78ec18b53909548050cb41b94e1f9cc218edb3772c55e36806",
        ),
        journal_line(
            &"2".repeat(32),
            "http://127.0.0.1:9/line/2",
            "succeeded",
            r#","idempotencyKey":"line-2","attempts":1,"maxAttempts":8,"lastResponseCode":200,"body":{"note":"a\u0026b\u2028"}"#,
            &hours_ago(2),
            "60867512dfc1a77cbf3bd22f32fca8fc6517963d3532adc49146948c08413f39",
        ),
    ]
    .concat();
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, journal).expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 2, already there 0, conflicts 0, invalid 0\n"
    );

    let o = s
        .ctl(&[
            "send",
            "--idempotency-key",
            "line-1",
            "--max-attempts",
            "100",
            "-H",
            "X-Trace:  t-1 ",
            "--data",
            r#"{"b" : [1, 2.50],  "a": "<&>"}"#,
            "http://127.0.0.1:9/line/1",
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with(&format!("existing  {}  ", "1".repeat(32))),
        "{}",
        stdout(&o)
    );
    let o = s
        .ctl(&[
            "send",
            "--idempotency-key",
            "line-2",
            "--data",
            "{\"note\": \"a&b\u{2028}\"}",
            "http://127.0.0.1:9/line/2",
        ])
        .await;
    assert_eq!(
        (o.status.code(), stdout(&o)),
        (
            Some(0),
            format!(
                "existing  {}  succeeded  1/8  POST  http://127.0.0.1:9/line/2\n",
                "2".repeat(32)
            )
        ),
        "{}",
        stderr(&o)
    );
    // v0.1.0's spoolctl, still in use, sends what it always sent.
    let api = s.api();
    let (status, answer) = api
        .create_raw(
            r#"{"idempotencyKey":"line-1","targetUrl":"http://127.0.0.1:9/line/1","method":"POST","headers":{"X-Trace":"t-1"},"body":{"b":[1,2.50],"a":"\u003c\u0026\u003e"},"maxAttempts":100}"#,
        )
        .await
        .expect("create");
    assert_eq!(
        (status, answer["id"].as_str()),
        (200, Some("1".repeat(32).as_str())),
        "{answer}"
    );
    for other in [
        r#"{"b": [1, 2.5], "a": "<&>"}"#,
        r#"{"b": [1, 2.50], "a": "<&> "}"#,
    ] {
        let o = s
            .ctl(&[
                "send",
                "--idempotency-key",
                "line-1",
                "--max-attempts",
                "100",
                "-H",
                "X-Trace: t-1",
                "--data",
                other,
                "http://127.0.0.1:9/line/1",
            ])
            .await;
        assert_eq!(o.status.code(), Some(13), "{other}: {}", stdout(&o));
        assert!(
            stderr(&o).contains("idempotency_conflict"),
            "{}",
            stderr(&o)
        );
    }
}

/// A finished delivery moves in, never to be sent, for the rest of v0.1.0's retention (168 h
/// after it finished): its key answers with it. One that finished before that is left out, as
/// v0.1.0's retention removed it and its key: the same create makes a new delivery.
#[tokio::test(flavor = "multi_thread")]
async fn finished_keys_move_in_for_the_rest_of_v010s_retention() {
    let s = Spoold::start().await;
    let journal = [
        journal_line(
            &"a".repeat(32),
            "http://127.0.0.1:9/kept",
            "succeeded",
            r#","idempotencyKey":"fresh","attempts":1,"maxAttempts":3,"lastResponseCode":200,"body":{"run":1}"#,
            &hours_ago(167),
            "31dec601360502b068c8c0f68c76aa4425752e3029c53d15b061fa732debea75",
        ),
        journal_line(
            &"b".repeat(32),
            "http://127.0.0.1:9/gone",
            "failed",
            r#","idempotencyKey":"stale","attempts":3,"maxAttempts":3,"lastResponseCode":503,"lastError":"HTTP 503","body":{"run":1}"#,
            &hours_ago(169),
            "6d034c5802809b72a7362ca692e701b803c4342fdc5e9259e7478015c00addbd",
        ),
    ]
    .concat();
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, journal).expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 1, already there 0, conflicts 0, invalid 0, finished more than 168h ago and \
         left out 1\n"
    );
    let o = s
        .ctl(&[
            "send",
            "--idempotency-key",
            "fresh",
            "--max-attempts",
            "3",
            "-d",
            r#"{"run":1}"#,
            "http://127.0.0.1:9/kept",
        ])
        .await;
    assert_eq!(
        (o.status.code(), stdout(&o)),
        (
            Some(0),
            format!(
                "existing  {}  succeeded  1/3  POST  http://127.0.0.1:9/kept\n",
                "a".repeat(32)
            )
        ),
        "{}",
        stderr(&o)
    );
    let api = s.api();
    let (status, _) = api.get(&"b".repeat(32)).await.expect("get");
    assert_eq!(status, 404, "left out");
    let o = s
        .ctl(&[
            "send",
            "--idempotency-key",
            "stale",
            "--max-attempts",
            "3",
            "-d",
            r#"{"run":1}"#,
            "http://127.0.0.1:9/gone",
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("queued  "),
        "a new delivery: {}",
        stdout(&o)
    );
    let (_, kept) = api.get(&"a".repeat(32)).await.expect("get");
    assert_eq!(kept["status"], "succeeded");
    assert_eq!(kept["attempts"], 1);
}

/// v0.1.0 took a `Keep-Alive` header and a space in a target URL's path, and sent them: the
/// header as given, the space as `%20` (Go's client encodes the path it sends). Both move in
/// and go out so, where a create here refuses them.
#[tokio::test(flavor = "multi_thread")]
async fn keep_alive_headers_and_spaces_in_paths_move_in_as_v010_sent_them() {
    let s = Spoold::start().await;
    let url = s.receiver.url("/from go/a b?q=1");
    let journal = journal_line(
        &"c".repeat(32),
        &url,
        "pending",
        r#","headers":{"Keep-Alive":"timeout=5","X-Trace":"t"},"attempts":2,"maxAttempts":5,"body":{"k":1}"#,
        &hours_ago(1),
        &"0".repeat(64),
    );
    let file = s.dir.path().join("spoold.journal");
    std::fs::write(&file, journal).expect("write the journal");
    let o = s
        .ctl(&["import", "--spoold-journal", &file.display().to_string()])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "imported 1, already there 0, conflicts 0, invalid 0\n"
    );
    s.api()
        .wait_status(&"c".repeat(32), &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let seen = s.receiver.requests();
    assert_eq!(seen.len(), 1);
    let r = &seen[0];
    assert_eq!(
        (r.path.as_str(), r.query.as_deref()),
        ("/from%20go/a%20b", Some("q=1"))
    );
    assert_eq!(r.header("keep-alive"), Some("timeout=5"));
    assert_eq!(r.header("x-trace"), Some("t"));
    assert_eq!(r.header("x-spoold-attempt"), Some("3"));
    assert_eq!(r.body.as_ref(), br#"{"k":1}"#);
}
