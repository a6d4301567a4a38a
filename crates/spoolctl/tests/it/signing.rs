//! Standard Webhooks signatures from the receiver's side: `spoolctl verify` on a request as
//! received (the specification's example), and `spoolctl receive --secret-file` checking what a
//! real spoold, signing by a `[[targets]]` rule, sends — 401 for a key that does not match.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::quick_start::Running;
use crate::{run_with_stdin, spoolctl, stderr, stdout, Spoold};

const KEY: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_KEY: &str = "whsec_KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

/// The specification's example request, as a receiver would have logged it.
const EXAMPLE: &str = "POST /hook HTTP/1.1\r\nHost: 127.0.0.1:9000\r\n\
    webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek\r\nwebhook-timestamp: 1614265330\r\n\
    webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=\r\n\r\n{\"test\": 2432232314}";

fn key_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path.display().to_string()
}

#[test]
fn verify_says_valid_invalid_or_too_old_with_its_exit_code() {
    let dir = TempDir::new().expect("temp dir");
    let key = key_file(dir.path(), "k", &format!("{KEY}\n"));
    let verify = |extra: &[&str], request: &str| {
        let mut args = vec!["verify", "--secret-file", &key];
        args.extend_from_slice(extra);
        run_with_stdin(&args, request.as_bytes())
    };

    let o = verify(&["--at", "1614265340"], EXAMPLE);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "valid: signed by key 1 of 1, 10s ago, webhook-id msg_p5jXN8AQM9LWM0D4loKWxJek\n"
    );
    // Today, the example is years old.
    let o = verify(&[], EXAMPLE);
    assert_eq!(o.status.code(), Some(12), "{}", stdout(&o));
    assert!(
        stdout(&o).starts_with("too old or new: too old: signed "),
        "{}",
        stdout(&o)
    );
    let o = verify(&["--tolerance", "0"], EXAMPLE);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    // One byte of the body changed.
    let o = verify(
        &["--at", "1614265340"],
        &EXAMPLE.replace("2432232314", "2432232315"),
    );
    assert_eq!(o.status.code(), Some(11), "{}", stdout(&o));
    assert_eq!(
        stdout(&o),
        "invalid: no signature matches a key (wrong secret, or the id, timestamp or body changed)\n"
    );
    // The request from a file, and a secret that is not one.
    let request = dir.path().join("request.http");
    std::fs::write(&request, EXAMPLE).expect("write");
    let other = key_file(dir.path(), "other", OTHER_KEY);
    let o = run_with_stdin(
        &[
            "verify",
            "--secret-file",
            &other,
            "--at",
            "1614265330",
            request.to_str().expect("path"),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(11), "{}", stdout(&o));
    let bad = key_file(dir.path(), "bad", "secret");
    let o = run_with_stdin(&["verify", "--secret-file", &bad], EXAMPLE.as_bytes());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!("spoolctl: --secret-file {bad}: key 1 does not start with whsec_\n")
    );
    let o = verify(&[], "no headers at all");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `spoolctl receive --listen 127.0.0.1:0 --json ARGS…` in a process group of its own, and the
/// address it listens on.
fn receive(dir: &Path, name: &str, args: &[&str]) -> (Running, String) {
    let out = std::fs::File::create(dir.join(format!("{name}.out"))).expect("out");
    let err_path = dir.join(format!("{name}.err"));
    let err = std::fs::File::create(&err_path).expect("err");
    let mut cmd = spoolctl();
    cmd.args(["receive", "--listen", "127.0.0.1:0", "--json"])
        .args(args)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    let running = Running(cmd.spawn().expect("receive starts"));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let said = std::fs::read_to_string(&err_path).unwrap_or_default();
        if let Some(addr) = said
            .split("receiving on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
        {
            return (running, addr.to_owned());
        }
        assert!(Instant::now() < deadline, "receive never listened: {said}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn receive_checks_what_spoold_signs_and_refuses_another_key() {
    let dir = TempDir::new().expect("temp dir");
    let key = key_file(dir.path(), "k", KEY);
    let other = key_file(dir.path(), "other", OTHER_KEY);
    let (_good, good_url) = receive(dir.path(), "good", &["--secret-file", &key]);
    let (_wrong, wrong_url) = receive(dir.path(), "wrong", &["--secret-file", &other]);
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!(
            "[secrets]\nbilling = {{ file = {key:?} }}\n\n\
             [[targets]]\nmatch = \"{good_url}/*\"\nsign = \"billing\"\n\n\
             [[targets]]\nmatch = \"{wrong_url}/*\"\nsign = \"billing\"\n"
        ),
    )
    .expect("config");
    let s = Spoold::start_args(&["--config", config.to_str().expect("path")]).await;

    let o = s
        .ctl(&[
            "send",
            &format!("{good_url}/hook"),
            "-d",
            r#"{"a":1}"#,
            "--wait",
        ])
        .await;
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let printed = std::fs::read_to_string(dir.path().join("good.out")).expect("printed");
    let line: Value =
        serde_json::from_str(printed.lines().next().expect("a request")).expect("JSON line");
    assert_eq!(line["signature"], "valid", "{line}");
    assert_eq!(line["answered"], 200, "{line}");

    // Signed with a key this receiver does not have: 401, which spoold does not retry.
    let o = s
        .ctl(&["send", &format!("{wrong_url}/hook"), "-d", "{}", "--wait"])
        .await;
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    assert!(stdout(&o).contains("HTTP 401"), "{}", stdout(&o));
    let printed = std::fs::read_to_string(dir.path().join("wrong.out")).expect("printed");
    let line: Value =
        serde_json::from_str(printed.lines().next().expect("a request")).expect("JSON line");
    assert_eq!(
        line["signature"],
        "invalid: no signature matches a key (wrong secret, or the id, timestamp or body changed)"
    );
    assert_eq!(line["answered"], 401);
}
