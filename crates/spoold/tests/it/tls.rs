//! TLS to receivers with a CA made in the test (nothing the system trusts): an unknown issuer
//! fails with `tls_failed` naming the reason; a `[[targets]]` rule's `ca_file` makes it
//! trusted; a receiver that requires a client certificate gets one from `client_cert` and
//! `client_key`, and refuses the handshake without. Receivers on 127.0.0.1.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};
use spool_testkit::tls::{server_config, TestCa};
use spool_testkit::{Api, DaemonProcess, Receiver};
use tempfile::TempDir;

use crate::{id_of, process_opts, WAIT};

fn write(dir: &Path, name: &str, text: &str, mode: u32) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path.display().to_string()
}

/// Creates a delivery and waits until it succeeded, or until its first attempt failed.
async fn deliver(api: &Api, url: &str, want: &str) -> Value {
    let (status, created) = api
        .create(json!({"targetUrl": url, "body": {"tls": true}}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    if want == "succeeded" {
        return api
            .wait_status(&id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, d) = api.get(&id).await.expect("get");
        if d["lastErrorCode"] == want {
            return d;
        }
        assert!(tokio::time::Instant::now() < deadline, "never {want}: {d}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn private_cas_and_client_certificates_by_target_rule() {
    let dir = TempDir::new().expect("temp dir");
    let ca = TestCa::new("spoold test CA").expect("CA");
    let server = ca.issue(&["127.0.0.1"]).expect("server certificate");
    let client = ca.issue(&["spoold-client"]).expect("client certificate");
    let plain_tls = server_config(&server, None).expect("config");
    let mutual_tls = server_config(&server, Some(&ca.cert_pem())).expect("config");
    let trusted = Receiver::start_tls(plain_tls.clone())
        .await
        .expect("receiver");
    let untrusted = Receiver::start_tls(plain_tls).await.expect("receiver");
    let mutual = Receiver::start_tls(mutual_tls.clone())
        .await
        .expect("receiver");
    let no_client_cert = Receiver::start_tls(mutual_tls).await.expect("receiver");

    let ca_file = write(dir.path(), "ca.pem", &ca.cert_pem(), 0o644);
    let cert = write(dir.path(), "client.pem", &client.cert, 0o644);
    let key = write(dir.path(), "client.key", &client.key, 0o600);
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[[targets]]\nmatch = \"{}\"\nca_file = {ca_file:?}\nmin_tls = \"1.2\"\n\n\
             [[targets]]\nmatch = \"{}\"\nca_file = {ca_file:?}\nclient_cert = {cert:?}\nclient_key = {key:?}\n\n\
             [[targets]]\nmatch = \"{}\"\nca_file = {ca_file:?}\n",
            trusted.url("/*"),
            mutual.url("/*"),
            no_client_cert.url("/*"),
        ),
    )
    .expect("config");
    let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
    let daemon = DaemonProcess::start(opts).await.expect("daemon");
    let api = Api::new(daemon.base_url());

    let d = deliver(&api, &untrusted.url("/x"), "tls_failed").await;
    assert_eq!(d["status"], "pending", "retried: {d}");
    assert!(
        d["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("certificate is signed by an unknown authority")),
        "{d}"
    );
    assert!(untrusted.requests().is_empty());

    deliver(&api, &trusted.url("/a"), "succeeded").await;
    assert_eq!(trusted.requests()[0].body_text(), r#"{"tls":true}"#);

    deliver(&api, &mutual.url("/b"), "succeeded").await;
    assert_eq!(mutual.requests().len(), 1);

    let d = deliver(&api, &no_client_cert.url("/c"), "tls_failed").await;
    assert!(no_client_cert.requests().is_empty(), "{d}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_settings_that_do_not_check_out_refuse_the_start() {
    let dir = TempDir::new().expect("temp dir");
    let ca = TestCa::new("spoold test CA").expect("CA");
    let client = ca.issue(&["spoold-client"]).expect("client certificate");
    let not_pem = write(dir.path(), "junk.pem", "not a certificate", 0o644);
    let cert = write(dir.path(), "client.pem", &client.cert, 0o644);
    let open_key = write(dir.path(), "open.key", &client.key, 0o644);
    // Another certificate's key: a pair that does not belong together.
    let other = ca.issue(&["another-client"]).expect("another certificate");
    let other_key = write(dir.path(), "other.key", &other.key, 0o600);
    let cases = [
        (
            format!("ca_file = {not_pem:?}"),
            "ca_file: no certificate in it".to_owned(),
        ),
        (
            format!("client_cert = {cert:?}"),
            "client_cert and client_key go together".to_owned(),
        ),
        (
            format!("client_cert = {cert:?}\nclient_key = {open_key:?}"),
            format!("client_key {open_key} is readable by every user; chmod o-r (or 600) it"),
        ),
        (
            format!("client_cert = {cert:?}\nclient_key = {other_key:?}"),
            format!(
                "[[targets]] #1 (match = \"https://127.0.0.1:9/*\"): client_cert {cert} and \
                 client_key {other_key} do not match: the key is not the private key of the \
                 certificate"
            ),
        ),
        (
            "min_tls = \"1.1\"".to_owned(),
            "min_tls \"1.1\": \"1.2\" or \"1.3\"".to_owned(),
        ),
    ];
    for (settings, said) in cases {
        let config = dir.path().join("spoold.toml");
        std::fs::write(
            &config,
            format!("[[targets]]\nmatch = \"https://127.0.0.1:9/*\"\n{settings}\n"),
        )
        .expect("config");
        let opts = process_opts(&dir).args(["--config".to_owned(), config.display().to_string()]);
        let (status, stderr) = DaemonProcess::run_to_exit(opts).await.expect("exits");
        assert_eq!(status.code(), Some(2), "{settings}: {stderr}");
        assert!(stderr.contains(&said), "{settings}: {stderr}");
    }
}
