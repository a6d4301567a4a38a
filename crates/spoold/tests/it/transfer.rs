//! Export and import across two real daemons: everything a delivery is — headers unmasked,
//! body byte for byte, attempts, transitions — comes out of one (SQLite) and goes into the
//! other (PostgreSQL when the test server is there, SQLite otherwise) unchanged; deliveries in
//! flight come in as crash recovery would leave them and go on; a second import changes
//! nothing, and a record whose id belongs to another request, or that a create would refuse,
//! is reported, not written.

use std::path::PathBuf;

use base64::Engine as _;
use serde_json::{json, Value};
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply, TestDatabase};
use tempfile::TempDir;

use crate::{id_of, process_opts, FAST_RETRIES, WAIT};

async fn export_all(api: &Api) -> Vec<Value> {
    let mut records = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, _, bytes) = api
            .request(
                http::Method::GET,
                &format!("/v1/export?limit=2&cursor={cursor}"),
                None,
            )
            .await
            .expect("export");
        assert_eq!(status, 200);
        let page: Value = serde_json::from_slice(&bytes).expect("JSON");
        records.extend(page["records"].as_array().expect("records").iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return records,
        }
    }
}

async fn import(api: &Api, records: &[Value]) -> Vec<Value> {
    let (status, _, bytes) = api
        .request(
            http::Method::POST,
            "/v1/import",
            Some(serde_json::to_vec(&json!({"records": records})).expect("JSON")),
        )
        .await
        .expect("import");
    let answer: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(status, 200, "{answer}");
    answer["results"].as_array().expect("results").clone()
}

/// A delivery with its secret header values shown.
async fn revealed(api: &Api, id: &str) -> Value {
    let (status, _, bytes) = api
        .request(
            http::Method::GET,
            &format!("/v1/deliveries/{id}?reveal=true"),
            None,
        )
        .await
        .expect("get");
    assert_eq!(status, 200, "{id}");
    serde_json::from_slice(&bytes).expect("JSON")
}

fn outcomes(results: &[Value]) -> Vec<&str> {
    results
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or("?"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_imported_elsewhere_is_the_same_queue() {
    let db = TestDatabase::create().await.expect("test database");
    let dir = TempDir::new().expect("temp dir");
    let source = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(source.base_url());
    let r = Receiver::start().await.expect("receiver");
    let hanging = Receiver::start().await.expect("receiver");
    hanging.respond_with(Reply::hang());

    // Delivered on its second attempt; waiting (binary body, secret header); in flight, each
    // mode.
    r.push_replies([Reply::status(503)]);
    let (_, done) = api
        .create(
            json!({"targetUrl": r.url("/done"), "body": {"n": 1, "ü": "x"},
                       "idempotencyKey": "done-1"}),
        )
        .await
        .expect("create");
    let done = id_of(&done);
    api.wait_status(&done, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let bytes = [0u8, 255, 10, 13, 0, 7];
    let (_, waiting) = api
        .create(json!({"targetUrl": r.url("/later"),
                       "bodyBase64": base64::engine::general_purpose::STANDARD.encode(bytes),
                       "headers": {"Authorization": "Bearer s3cr3t"},
                       "notBefore": "2099-01-01T00:00:00Z"}))
        .await
        .expect("create");
    let waiting = id_of(&waiting);
    let (_, at_least) = api
        .create(json!({"targetUrl": hanging.url("/alo")}))
        .await
        .expect("create");
    let at_least = id_of(&at_least);
    let (_, at_most) = api
        .create(
            json!({"targetUrl": hanging.url("/amo"), "mode": "at_most_once",
                       "idempotencyKey": "amo-1"}),
        )
        .await
        .expect("create");
    let at_most = id_of(&at_most);
    hanging
        .wait_for_requests(2, WAIT)
        .await
        .expect("both on the wire");

    let records = export_all(&api).await;
    assert_eq!(records.len(), 4);
    let before_done = revealed(&api, &done).await;
    let before_waiting = revealed(&api, &waiting).await;
    let (_, done_attempts) = api.attempts(&done).await.expect("attempts");
    let (_, done_log) = api.transitions(&done).await.expect("transitions");
    drop(source);

    // Into the other backend.
    let target_dir = TempDir::new().expect("temp dir");
    let mut opts = DaemonOptions::new(match &db {
        Some(db) => PathBuf::from(db.url()),
        None => target_dir.path().join("data/spoold.db"),
    })
    .args(FAST_RETRIES.iter().copied());
    if db.is_some() {
        opts = opts.args([
            "--data-dir".to_owned(),
            target_dir.path().display().to_string(),
        ]);
    }
    let target = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(target.base_url());
    hanging.respond_with(Reply::status(200));
    let results = import(&api, &records).await;
    assert_eq!(outcomes(&results), ["imported"; 4], "{results:?}");

    // The finished and the waiting one: the same delivery, history and all.
    assert_eq!(revealed(&api, &done).await, before_done);
    assert_eq!(revealed(&api, &waiting).await, before_waiting);
    assert_eq!(
        revealed(&api, &waiting).await["bodyBase64"],
        base64::engine::general_purpose::STANDARD.encode(bytes)
    );
    assert_eq!(
        api.attempts(&done).await.expect("attempts").1,
        done_attempts
    );
    assert_eq!(
        api.transitions(&done).await.expect("transitions").1,
        done_log
    );

    // In flight where they were: sent again (at least once), or unknown (at most once).
    api.wait_status(&at_least, &["succeeded"], WAIT)
        .await
        .expect("delivered by the importing daemon");
    let (_, amo) = api.get(&at_most).await.expect("get");
    assert_eq!(amo["status"], "unknown", "{amo}");
    let (_, log) = api.transitions(&at_most).await.expect("transitions");
    let last = log["transitions"]
        .as_array()
        .and_then(|t| t.last())
        .cloned();
    assert_eq!(last.map(|t| t["reason"].clone()), Some(json!("imported")));

    // Again: nothing changes. Another request under a taken id or key, or one a create would
    // refuse: reported, not written.
    let results = import(&api, &records).await;
    assert_eq!(outcomes(&results), ["existing"; 4], "{results:?}");
    let mut other = records[0].clone();
    other["delivery"]["targetUrl"] = json!(r.url("/elsewhere"));
    let mut same_key = records[0].clone();
    same_key["delivery"]["id"] = json!("f".repeat(32));
    let mut refused = records[0].clone();
    refused["delivery"]["id"] = json!("e".repeat(32));
    refused["delivery"]["idempotencyKey"] = json!("other");
    refused["delivery"]["targetUrl"] = json!("ftp://127.0.0.1/x");
    let results = import(&api, &[other, same_key, refused]).await;
    assert_eq!(
        outcomes(&results),
        ["conflict", "conflict", "invalid"],
        "{results:?}"
    );
    assert_eq!(
        results[1]["existingId"],
        json!(records[0]["delivery"]["id"])
    );
    assert!(
        results[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("http or https")),
        "{results:?}"
    );
    let (status, _) = api.get(&"f".repeat(32)).await.expect("get");
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn large_bodies_end_an_export_page_early() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let body = base64::engine::general_purpose::STANDARD.encode(vec![7u8; 700 << 10]);
    for n in 0..3 {
        let (status, d) = api
            .create(json!({"targetUrl": format!("http://127.0.0.1:9/big/{n}"),
                           "bodyBase64": body, "notBefore": "2099-01-01T00:00:00Z"}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{d}");
    }
    let (_, _, bytes) = api
        .request(http::Method::GET, "/v1/export?limit=100", None)
        .await
        .expect("export");
    let page: Value = serde_json::from_slice(&bytes).expect("JSON");
    assert_eq!(page["records"].as_array().map(Vec::len), Some(2));
    assert!(page["nextCursor"].is_string(), "the page ended early");
    assert!(bytes.len() < 4 << 20, "{} bytes", bytes.len());
    assert_eq!(
        export_all(&api).await.len(),
        3,
        "every delivery, over pages"
    );
}

/// A record whose history does not add up is `invalid`, its error naming the field: attempt
/// records repeated, a pending delivery with no attempt left, a success without an attempt,
/// times out of range or out of order. The same record with its history intact is imported.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_whose_history_does_not_add_up_is_invalid() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let r = Receiver::start().await.expect("receiver");
    let (_, created) = api
        .create(json!({"targetUrl": r.url("/h"), "body": {"n": 1}, "maxAttempts": 100}))
        .await
        .expect("create");
    let id = id_of(&created);
    api.wait_status(&id, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let record = export_all(&api).await.remove(0);
    assert_eq!(record["attempts"].as_array().map(Vec::len), Some(1));

    let case = |n: u32, change: &dyn Fn(&mut Value)| {
        let mut r = record.clone();
        r["delivery"]["id"] = json!(format!("{n:032x}"));
        change(&mut r);
        r
    };
    let attempt = record["attempts"][0].clone();
    let records = vec![
        case(1, &|_| {}),
        case(2, &|r| r["attempts"] = json!([attempt, attempt, attempt])),
        case(3, &|r| {
            r["delivery"]["status"] = json!("pending");
            r["delivery"]["attempts"] = json!(100);
            r["delivery"]["nextAttemptAtMs"] = json!(1_800_000_000_000i64);
        }),
        case(4, &|r| {
            r["delivery"]["attempts"] = json!(0);
            r["attempts"] = json!([]);
        }),
        case(5, &|r| {
            r["delivery"]["createdAtMs"] = json!(-14_182_940_000i64);
            r["delivery"]["updatedAtMs"] = json!(99_999_999_999_999i64);
        }),
        case(6, &|r| {
            let created = r["delivery"]["createdAtMs"].as_i64().expect("ms");
            r["delivery"]["updatedAtMs"] = json!(created - 1);
        }),
        case(7, &|r| r["attempts"][0]["number"] = json!(2)),
    ];
    let results = import(&api, &records).await;
    assert_eq!(
        outcomes(&results),
        ["imported", "invalid", "invalid", "invalid", "invalid", "invalid", "invalid"]
    );
    let errors: Vec<&str> = results
        .iter()
        .map(|r| r["error"].as_str().unwrap_or(""))
        .collect();
    let said = [
        "attempts[1]: attempt 1 of cycle 1 after attempt 1 of cycle 1 (attempt numbers are \
         unique and increase within a cycle, oldest first)",
        "delivery.attempts 100 of maxAttempts 100: a pending delivery has an attempt left",
        "delivery.status succeeded: reached only by an attempt, and delivery.attempts is 0",
        "delivery.createdAtMs -14182940000 (1969-07-20T20:17:40.000Z): out of range",
        "is before delivery.createdAtMs",
        "attempts[0].number 2: more than delivery.attempts 1 of its cycle",
    ];
    for (error, said) in errors[1..].iter().zip(said) {
        assert!(error.contains(said), "{said:?} in {error:?}");
    }
    for n in 2..=7u32 {
        let (status, _) = api.get(&format!("{n:032x}")).await.expect("get");
        assert_eq!(status, 404, "nothing of an invalid record is kept");
    }
}
