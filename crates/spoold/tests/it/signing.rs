//! Standard Webhooks signatures on the wire: a real spoold signs requests to the targets a
//! `[[targets]]` rule names, with the `[secrets]` key read from a file; the requests a real
//! receiver got verify with spool-proto's implementation and with an independent one (the
//! `standardwebhooks` package from PyPI, when `SPOOLD_TEST_PYTHON` names a Python that has it;
//! `scripts/test` sets one up); a retry keeps the id and signs again; a rotation by SIGHUP signs
//! with both keys.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use spool_proto::signing::Secret;
use spool_testkit::{Api, DaemonProcess, Receiver, Recorded, Reply};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

const OLD_KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn write_key(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write key");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// The three signature headers of a recorded request.
fn signed(r: &Recorded) -> (String, String, String) {
    let h = |name| {
        r.header(name)
            .unwrap_or_else(|| panic!("{} has no {name}: {:?}", r.path, r.headers))
            .to_owned()
    };
    (
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
    )
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Verifies every request with the `standardwebhooks` package, in one Python run; `None` when
/// no such Python is configured (CI sets `SPOOLD_REQUIRE_TOOLS`, which makes that a failure).
fn verify_with_python(dir: &Path, key: &str, requests: &[Recorded]) -> Option<String> {
    let Some(python) = std::env::var_os("SPOOLD_TEST_PYTHON") else {
        assert!(
            std::env::var_os("SPOOLD_REQUIRE_TOOLS").is_none(),
            "SPOOLD_TEST_PYTHON must name a Python with standardwebhooks (scripts/test sets it)"
        );
        spool_testkit::skip::skipped(
            "SPOOLD_TEST_PYTHON is not set: signatures were not verified independently \
             (PyPI's standardwebhooks)",
            "scripts/test sets it; SPOOLD_REQUIRE_TOOLS=1 makes this a failure",
        );
        return None;
    };
    let cases: Vec<_> = requests
        .iter()
        .map(|r| {
            let (id, ts, sig) = signed(r);
            json!({"id": id, "ts": ts, "sig": sig,
                   "body": base64::engine::general_purpose::STANDARD.encode(&r.body)})
        })
        .collect();
    let cases_file = dir.join("cases.json");
    std::fs::write(&cases_file, serde_json::to_vec(&cases).expect("JSON")).expect("write");
    let script = r#"
import base64, hashlib, hmac, json, sys
from standardwebhooks.webhooks import Webhook
wh = Webhook(sys.argv[1])
key = base64.b64decode(sys.argv[1].removeprefix("whsec_"))
for case in json.load(open(sys.argv[2])):
    body = base64.b64decode(case["body"])
    headers = {"webhook-id": case["id"], "webhook-timestamp": case["ts"],
               "webhook-signature": case["sig"]}
    try:
        body.decode()
    except UnicodeDecodeError:
        # The package takes text only: a binary body is checked with Python's own HMAC.
        signed = case["id"].encode() + b"." + case["ts"].encode() + b"." + body
        mac = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        assert "v1," + mac in case["sig"].split(" "), case
        continue
    wh.verify(body, headers)
print("verified", len(json.load(open(sys.argv[2]))))
"#;
    let out = Command::new(python)
        .args(["-c", script, key])
        .arg(&cases_file)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "standardwebhooks refused a request: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_to_signed_targets_verify_with_the_key_and_independently() {
    let dir = TempDir::new().expect("temp dir");
    let key_file = dir.path().join("billing.key");
    write_key(&key_file, &format!("{OLD_KEY}\n"));
    let r = Receiver::start().await.expect("receiver");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[secrets]\nbilling = {{ file = {:?} }}\n\n[[targets]]\nmatch = \"{}\"\nsign = \"billing\"\n",
            key_file,
            r.url("/signed/*")
        ),
    )
    .expect("write config");
    let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    let mut daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let old = Secret::parse(OLD_KEY).expect("key");

    // A retry: the first answer is a 503.
    r.push_replies([Reply::status(503)]);
    let (_, retried) = api
        .create(json!({"targetUrl": r.url("/signed/retry"), "body": {"n": 0}}))
        .await
        .expect("create");
    let retried = id_of(&retried);
    api.wait_status(&retried, &["succeeded"], WAIT)
        .await
        .expect("delivered on the second attempt");
    let bodies = [
        json!({"targetUrl": r.url("/signed/json"), "body": {"amount": 12, "note": "ü"}}),
        json!({"targetUrl": r.url("/signed/binary"),
               "bodyBase64": base64::engine::general_purpose::STANDARD.encode([0u8, 255, 10, 13])}),
        json!({"targetUrl": r.url("/plain")}),
    ];
    let mut ids = Vec::new();
    for body in bodies {
        let (status, created) = api.create(body).await.expect("create");
        assert_eq!(status, 201, "{created}");
        ids.push(id_of(&created));
    }
    for id in &ids {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }

    let seen = r.requests();
    assert_eq!(seen.len(), 5, "{seen:?}");
    let now = now_secs();
    let mut signed_requests = Vec::new();
    for req in &seen {
        if req.path == "/plain" {
            assert!(
                req.header("webhook-signature").is_none() && req.header("webhook-id").is_none(),
                "an unmatched target is not signed: {:?}",
                req.headers
            );
            continue;
        }
        let (id, ts, sig) = signed(req);
        assert_eq!(
            Some(id.as_str()),
            req.header("x-spoold-delivery-id"),
            "webhook-id is the delivery id"
        );
        let ts_n: i64 = ts.parse().expect("seconds");
        assert!((now - 60..=now + 1).contains(&ts_n), "{ts} vs {now}");
        assert_eq!(sig.split(' ').count(), 1, "one key, one signature: {sig}");
        assert_eq!(
            old.verify(&id, &ts, &sig, &req.body, now, Some(300)),
            Ok(1),
            "{}",
            req.path
        );
        signed_requests.push(req.clone());
    }
    // Both attempts of the retried delivery carry its id, each signed on its own.
    let attempts: Vec<_> = seen.iter().filter(|q| q.path == "/signed/retry").collect();
    assert_eq!(attempts.len(), 2);
    assert_eq!(signed(attempts[0]).0, retried);
    assert_eq!(signed(attempts[1]).0, retried);
    if let Some(said) = verify_with_python(dir.path(), OLD_KEY, &signed_requests) {
        assert_eq!(said, "verified 4");
    }

    // A rotation: the new key first, the old one kept while receivers move; SIGHUP.
    let new_key = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([42u8; 32])
    );
    write_key(&key_file, &format!("{new_key}\n{OLD_KEY}\n"));
    daemon.signal("HUP").await.expect("SIGHUP");
    reloaded(&daemon, 1).await;
    r.clear_requests();
    let (_, rotated) = api
        .create(json!({"targetUrl": r.url("/signed/rotated"), "body": {"n": 1}}))
        .await
        .expect("create");
    api.wait_status(&id_of(&rotated), &["succeeded"], WAIT)
        .await
        .expect("delivered");
    let seen = r.requests();
    let (id, ts, sig) = signed(&seen[0]);
    assert_eq!(sig.split(' ').count(), 2, "both keys sign: {sig}");
    let only_new = Secret::parse(&new_key).expect("key");
    for secret in [&old, &only_new] {
        assert_eq!(
            secret.verify(&id, &ts, &sig, &seen[0].body, now_secs(), Some(300)),
            Ok(1)
        );
    }
    for key in [OLD_KEY, new_key.as_str()] {
        if let Some(said) = verify_with_python(dir.path(), key, &seen) {
            assert_eq!(said, "verified 1");
        }
    }
    // The key is in no response and no log line.
    let (_, got) = api.get(&id).await.expect("get");
    let shown = format!("{got} {}", daemon.stderr());
    assert!(
        !shown.contains("MfKQ9r8G") && !shown.contains(&new_key[6..20]),
        "{shown}"
    );
    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rule_naming_an_undeclared_secret_refuses_the_start() {
    let dir = TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        "[[targets]]\nmatch = \"http://127.0.0.1:9/*\"\nsign = \"billing\"\n",
    )
    .expect("write config");
    let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    let (status, stderr) = DaemonProcess::run_to_exit(opts).await.expect("exits");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sign = \"billing\" is not declared in [secrets] (declared: none)"),
        "{stderr}"
    );
}

/// Waits for a `configuration reloaded` line after the `n`-th.
async fn reloaded(daemon: &DaemonProcess, n: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while daemon.stderr().matches("configuration reloaded").count() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_names_the_secret_that_signs_it() {
    let dir = TempDir::new().expect("temp dir");
    let billing_file = dir.path().join("billing.key");
    write_key(&billing_file, &format!("{OLD_KEY}\n"));
    let ops_key = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    let ops_file = dir.path().join("ops.key");
    write_key(&ops_file, &format!("{ops_key}\n"));
    let r = Receiver::start().await.expect("receiver");
    let config = dir.path().join("spoold.toml");
    let write_config = |with_ops: bool| {
        let ops = if with_ops {
            format!("ops = {{ file = {ops_file:?} }}\n")
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!(
                "[secrets]\nbilling = {{ file = {billing_file:?} }}\n{ops}\n\
                 [[targets]]\nmatch = \"{}\"\nsign = \"billing\"\n",
                r.url("/signed/*")
            ),
        )
        .expect("write config");
    };
    write_config(true);
    let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    let mut daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let ops = Secret::parse(&ops_key).expect("key");
    let billing = Secret::parse(OLD_KEY).expect("key");

    // Named by the create: in place of the rule's secret, and where no rule signs.
    let mut ids = Vec::new();
    for path in ["/signed/by-ops", "/plain/by-ops"] {
        let (status, created) = api
            .create(json!({"targetUrl": r.url(path), "body": {"path": path},
                           "sign": {"secretRef": "ops"}, "idempotencyKey": path}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{created}");
        assert_eq!(created["sign"], json!({"secretRef": "ops"}));
        ids.push(id_of(&created));
    }
    for id in &ids {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
    let seen = r.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for req in &seen {
        let (id, ts, sig) = signed(req);
        assert_eq!(
            ops.verify(&id, &ts, &sig, &req.body, now_secs(), Some(300)),
            Ok(1),
            "{} is signed with ops",
            req.path
        );
        assert!(
            billing
                .verify(&id, &ts, &sig, &req.body, now_secs(), Some(300))
                .is_err(),
            "{} is not signed with the rule's secret",
            req.path
        );
    }
    if let Some(said) = verify_with_python(dir.path(), &ops_key, &seen) {
        assert_eq!(said, "verified 2");
    }
    // The same key with another secret is another request.
    let (status, conflict) = api
        .create(
            json!({"targetUrl": r.url("/plain/by-ops"), "body": {"path": "/plain/by-ops"},
                       "sign": {"secretRef": "billing"}, "idempotencyKey": "/plain/by-ops"}),
        )
        .await
        .expect("create");
    assert_eq!(
        (status, conflict["error"]["code"].as_str()),
        (409, Some("idempotency_conflict")),
        "{conflict}"
    );

    // Refused: an undeclared name (the declared ones are named), a malformed one, none.
    for (sign, code, says) in [
        (
            json!({"secretRef": "nope"}),
            "unknown_secret",
            "sign.secretRef \"nope\" is not declared in [secrets] (declared: billing, ops)",
        ),
        (
            json!({"secretRef": "a b"}),
            "invalid_delivery",
            "sign.secretRef must be 1 to 64 letters",
        ),
        (json!({}), "invalid_delivery", "sign.secretRef is required"),
    ] {
        let (status, refused) = api
            .create(json!({"targetUrl": r.url("/plain/refused"), "sign": sign}))
            .await
            .expect("create");
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["error"]["code"], code, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{message}");
    }

    // A secret removed by a reload: the delivery that names it is not sent unsigned; it waits,
    // and goes once the secret is back.
    r.clear_requests();
    let (_, held) = api
        .create(
            json!({"targetUrl": r.url("/plain/held"), "sign": {"secretRef": "ops"},
                       "notBefore": in_secs(4)}),
        )
        .await
        .expect("create");
    let held = id_of(&held);
    write_config(false);
    daemon.signal("HUP").await.expect("SIGHUP");
    reloaded(&daemon, 1).await;
    let warned = daemon
        .stderr()
        .lines()
        .filter(|l| l.contains("[secrets] entries were removed"))
        .map(str::to_owned)
        .collect::<Vec<_>>();
    // The two deliveries sent with it earlier succeeded: only the held one waits.
    let line: Option<serde_json::Value> = match warned.as_slice() {
        [line] => serde_json::from_str(line).ok(),
        _ => None,
    };
    assert!(
        line.is_some_and(|l| l["level"] == "WARN"
            && l["secrets"] == "ops (1 waiting to be sent name it)"
            && l["waiting"] == 1),
        "the reload names the removed secret and what waits on it: {warned:?}"
    );
    let (_, d) = api.get(&held).await.expect("get");
    assert_eq!(d["attempts"], 0, "the reload took longer than 4 s: {d}");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, d) = api.get(&held).await.expect("get");
        if d["lastErrorCode"] == "secret_missing" {
            // Back to pending for a retry (which, with fast retries, may already be claimed
            // again by the time it is read: the log says where the attempt took it).
            let (_, log) = api.transitions(&held).await.expect("transitions");
            assert!(
                log["transitions"].as_array().is_some_and(|t| t
                    .iter()
                    .any(|t| { t["to"] == "pending" && t["reason"] == "secret_missing" })),
                "{log}"
            );
            assert!(
                ["pending", "in_flight"].contains(&d["status"].as_str().unwrap_or_default()),
                "{d}"
            );
            let error = d["lastError"].as_str().unwrap_or_default();
            assert!(error.contains("\"ops\" is not declared"), "{error}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{d}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(r.requests().is_empty(), "nothing was sent unsigned");
    write_config(true);
    daemon.signal("HUP").await.expect("SIGHUP");
    reloaded(&daemon, 2).await;
    api.wait_status(&held, &["succeeded"], WAIT)
        .await
        .expect("delivered once the secret is back");
    let seen = r.requests();
    let (id, ts, sig) = signed(&seen[0]);
    assert_eq!(
        ops.verify(&id, &ts, &sig, &seen[0].body, now_secs(), Some(300)),
        Ok(1)
    );

    let status = daemon.terminate().await.expect("stops");
    assert!(status.success(), "{status:?}");
}

/// The time `secs` seconds from now, as the API writes times.
fn in_secs(secs: i64) -> String {
    spool_proto::units::format_time(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64)
            + secs * 1000,
    )
}
