//! The maildrop's pickup, against a real daemon process and receiver: drops written while the
//! daemon was down are delivered once each when it starts (with or without idempotency keys,
//! binary bodies byte for byte), a drop picked up again after a crash makes nothing twice, and
//! every hostile or malformed drop is refused — moved aside with why, listed by the API,
//! counted — without blocking the ones behind it. The drops are written here as `spoolctl send`
//! writes them (whole under a temporary name, then renamed into place).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use spool_testkit::{Api, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{process_opts, WAIT};

/// The default maildrop of a daemon started with [`process_opts`] on `dir`.
fn maildrop_of(dir: &TempDir) -> PathBuf {
    dir.path().join("data/maildrop")
}

/// Write `request` as a drop into `maildrop`, as `spoolctl send` does; its id.
fn drop_request(maildrop: &Path, request: &Value) -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    write_drop(maildrop, &id, &drop_text(&id, request));
    id
}

fn drop_text(id: &str, request: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "spooldDrop": 1,
        "id": id,
        "droppedAt": "2026-12-07T23:00:00Z",
        "request": request,
    }))
    .expect("JSON")
}

fn write_drop(maildrop: &Path, id: &str, bytes: &[u8]) {
    std::fs::create_dir_all(maildrop).expect("maildrop");
    let temp = maildrop.join(format!(".{id}.tmp"));
    std::fs::write(&temp, bytes).expect("write");
    std::fs::rename(&temp, maildrop.join(format!("{id}.drop"))).expect("rename");
}

/// The drops still waiting in `maildrop`.
fn waiting(maildrop: &Path) -> Vec<String> {
    std::fs::read_dir(maildrop)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".drop"))
        .collect()
}

/// The delivery ids the receiver got, each with how often.
fn received(r: &Receiver) -> std::collections::BTreeMap<String, usize> {
    let mut seen = std::collections::BTreeMap::new();
    for q in r.requests() {
        let id = q.header("X-Spoold-Delivery-ID").unwrap_or("?").to_owned();
        *seen.entry(id).or_insert(0) += 1;
    }
    seen
}

async fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Drops made while the daemon was down — without keys, with keys, binary bodies — are each
/// delivered once when it starts, as their delivery (the drop's id); their files go once the
/// creates are durable. A drop seen again after its pickup (a crash between the create and the
/// removal) makes nothing new, and a job that sends the same keyed request through the API
/// after the start gets the same delivery.
#[tokio::test(flavor = "multi_thread")]
async fn drops_made_while_the_daemon_was_down_are_delivered_once() {
    let dir = TempDir::new().expect("temp dir");
    let maildrop = maildrop_of(&dir);
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200));
    let binary: Vec<u8> = (0..=255u8).collect();
    let mut ids = Vec::new();
    for i in 0..30 {
        let request = match i % 3 {
            0 => json!({"targetUrl": r.url(&format!("/plain/{i}")), "body": {"n": i}}),
            1 => json!({"targetUrl": r.url(&format!("/keyed/{i}")), "body": {"n": i},
                        "idempotencyKey": format!("job-{i}")}),
            _ => json!({"targetUrl": r.url(&format!("/binary/{i}")),
                        "bodyBase64": base64::engine::general_purpose::STANDARD.encode(&binary)}),
        };
        ids.push(drop_request(&maildrop, &request));
    }
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    r.wait_for_requests(30, WAIT)
        .await
        .expect("every drop delivered");
    until("the maildrop to empty", || waiting(&maildrop).is_empty()).await;
    let seen = received(&r);
    assert_eq!(seen.len(), 30, "{seen:?}");
    for id in &ids {
        assert_eq!(
            seen.get(id),
            Some(&1),
            "drop {id} delivered as itself, once"
        );
    }
    for q in r
        .requests()
        .iter()
        .filter(|q| q.path.starts_with("/binary/"))
    {
        assert_eq!(
            q.body.as_ref(),
            binary.as_slice(),
            "binary body byte for byte"
        );
    }
    // Seen again after its pickup (as after a crash before its file was removed): removed,
    // nothing new made or sent.
    let again = &ids[0];
    write_drop(
        &maildrop,
        again,
        &drop_text(
            again,
            &json!({"targetUrl": r.url("/plain/0"), "body": {"n": 0}}),
        ),
    );
    until("the repeated drop to go", || waiting(&maildrop).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(r.requests().len(), 30, "a repeated pickup sent again");
    // The job sends its keyed request again through the API: the same delivery.
    let (status, d) = api
        .create(
            json!({"targetUrl": r.url("/keyed/1"), "body": {"n": 1}, "idempotencyKey": "job-1"}),
        )
        .await
        .expect("create");
    assert_eq!((status, &d["id"]), (200, &json!(ids[1])), "{d}");
    assert_eq!(
        api.metric("spoold_maildrop_picked_up_total")
            .await
            .expect("metrics"),
        Some(30.0)
    );
}

/// What the daemon will not take is moved aside with why, listed and counted, and never holds
/// up the drops behind it: a symbolic link (not followed), a FIFO (not blocked on), a
/// directory, a file with two links, one too large, malformed or cut short JSON, an unknown
/// format version, a name that is not a drop's, an id that is not the name, a blocked target,
/// an unknown secret, an idempotency key used for another request. Picked up while the daemon
/// runs (the change is noticed).
#[tokio::test(flavor = "multi_thread")]
async fn hostile_and_malformed_drops_are_refused_and_the_rest_picked_up() {
    let dir = TempDir::new().expect("temp dir");
    let maildrop = maildrop_of(&dir);
    let r = Receiver::start().await.expect("receiver");
    r.respond_with(Reply::status(200));
    // The default address policy with only the receiver's address opened: a drop to another
    // loopback address is refused as blocked (and could only ever reach loopback).
    let daemon = DaemonProcess::start(
        process_opts(&dir)
            .default_address_policy()
            .args(["--allow-target", "127.0.0.1/32"]),
    )
    .await
    .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, _) = api
        .create(json!({"targetUrl": r.url("/first"), "idempotencyKey": "taken", "body": 1}))
        .await
        .expect("create");
    assert_eq!(status, 201);
    let good = |n: u32| json!({"targetUrl": r.url(&format!("/good/{n}"))});
    let new_id = || uuid::Uuid::now_v7().simple().to_string();
    let mut bad: Vec<(String, &str)> = Vec::new();
    let mut good_ids = vec![drop_request(&maildrop, &good(1))];
    // A symbolic link to a valid drop elsewhere.
    let outside = dir.path().join("outside.drop");
    let id = new_id();
    std::fs::write(&outside, drop_text(&id, &good(99))).expect("write");
    std::os::unix::fs::symlink(&outside, maildrop.join(format!("{id}.drop"))).expect("symlink");
    bad.push((format!("{id}.drop"), "not_a_file"));
    // A FIFO.
    let id = new_id();
    let status = std::process::Command::new("mkfifo")
        .arg(maildrop.join(format!("{id}.drop")))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    bad.push((format!("{id}.drop"), "not_a_file"));
    // A directory.
    let id = new_id();
    std::fs::create_dir(maildrop.join(format!("{id}.drop"))).expect("dir");
    bad.push((format!("{id}.drop"), "not_a_file"));
    good_ids.push(drop_request(&maildrop, &good(2)));
    // Two links to one file.
    let (a, b) = (new_id(), new_id());
    std::fs::write(dir.path().join("linked"), drop_text(&a, &good(98))).expect("write");
    std::fs::hard_link(
        dir.path().join("linked"),
        maildrop.join(format!("{a}.drop")),
    )
    .expect("link");
    bad.push((format!("{a}.drop"), "not_a_file"));
    let _ = b;
    // Too large.
    let id = new_id();
    write_drop(&maildrop, &id, &vec![b' '; 3 * 1024 * 1024]);
    bad.push((format!("{id}.drop"), "too_large"));
    // Malformed, cut short, another version, a name that is not a drop's, an id not its name.
    let id = new_id();
    write_drop(&maildrop, &id, b"{\"spooldDrop\": 1, nonsense");
    bad.push((format!("{id}.drop"), "malformed"));
    let id = new_id();
    let whole = drop_text(&id, &good(97));
    write_drop(&maildrop, &id, &whole[..whole.len() / 2]);
    bad.push((format!("{id}.drop"), "truncated"));
    let id = new_id();
    let mut v2: Value = serde_json::from_slice(&drop_text(&id, &good(96))).expect("JSON");
    v2["spooldDrop"] = json!(2);
    write_drop(&maildrop, &id, &serde_json::to_vec(&v2).expect("JSON"));
    bad.push((format!("{id}.drop"), "unknown_version"));
    std::fs::write(maildrop.join("notes.txt"), b"hello").expect("write");
    bad.push(("notes.txt".to_owned(), "bad_name"));
    let id = new_id();
    write_drop(&maildrop, &id, &drop_text(&new_id(), &good(95)));
    bad.push((format!("{id}.drop"), "malformed"));
    // Refused as the API refuses them.
    let id = drop_request(
        &maildrop,
        &json!({"targetUrl": format!("http://127.0.0.2:{}/blocked", r.port())}),
    );
    bad.push((format!("{id}.drop"), "target_blocked"));
    let id = drop_request(
        &maildrop,
        &json!({"targetUrl": r.url("/signed"), "sign": {"secretRef": "nope"}}),
    );
    bad.push((format!("{id}.drop"), "unknown_secret"));
    let id = drop_request(
        &maildrop,
        &json!({"targetUrl": r.url("/first"), "idempotencyKey": "taken", "body": 2}),
    );
    bad.push((format!("{id}.drop"), "idempotency_conflict"));
    good_ids.push(drop_request(&maildrop, &good(3)));

    r.wait_for_requests(1 + good_ids.len(), WAIT)
        .await
        .expect("the good drops delivered");
    until("every drop taken or refused", || {
        waiting(&maildrop).is_empty()
    })
    .await;
    let refused_dir = maildrop.join("refused");
    for (name, code) in &bad {
        let reason: Value = serde_json::from_slice(
            &std::fs::read(refused_dir.join(format!("{name}.reason")))
                .unwrap_or_else(|e| panic!("{name} ({code}) has no reason: {e}")),
        )
        .expect("JSON");
        assert_eq!(reason["code"], *code, "{name}: {reason}");
        assert!(
            std::fs::symlink_metadata(refused_dir.join(name)).is_ok(),
            "{name} moved aside"
        );
    }
    // The outside file behind the link is untouched, and nothing it holds was sent.
    assert!(outside.exists());
    let seen = received(&r);
    for id in &good_ids {
        assert_eq!(seen.get(id), Some(&1), "{seen:?}");
    }
    assert_eq!(seen.len(), 1 + good_ids.len(), "{seen:?}");
    let (status, _, body) = api
        .request(http::Method::GET, "/v1/maildrop", None)
        .await
        .expect("maildrop");
    assert_eq!(status, 200);
    let view: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(view["waiting"], 0, "{view}");
    assert_eq!(
        view["refused"].as_array().map(Vec::len),
        Some(bad.len()),
        "{view}"
    );
    assert_eq!(
        api.metric("spoold_maildrop_refused_total{code=\"not_a_file\"}")
            .await
            .expect("metrics"),
        Some(4.0)
    );
}
