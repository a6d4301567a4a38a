//! spoolctl against a daemon that requires a bearer token.

use std::os::unix::fs::PermissionsExt;

use spool_testkit::{DaemonOptions, DaemonProcess};
use tempfile::TempDir;

use crate::{capture, check_ok, spoolctl, stderr, FAST_RETRIES};

#[tokio::test(flavor = "multi_thread")]
async fn token_file_authenticates_every_command() {
    let dir = TempDir::new().expect("temp dir");
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "a-long-enough-token-for-spoold-tests-42\n").expect("write");
    std::fs::set_permissions(&token_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let token = token_path.display().to_string();
    let daemon = DaemonProcess::start(
        DaemonOptions::new(dir.path().join("data/spoold.db"))
            .args(FAST_RETRIES)
            .args(["--auth-token-file", &token]),
    )
    .await
    .expect("daemon");
    let server = daemon.base_url();

    let mut without = spoolctl();
    without.args(["list", "--server", &server]);
    let out = capture(without, None).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("spoold returned HTTP 401 (unauthorized)"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).ends_with(
            ": give spoolctl the token spoold requires with --token-file or SPOOLD_TOKEN_FILE\n"
        ),
        "{}",
        stderr(&out)
    );

    let mut with_flag = spoolctl();
    with_flag.args(["list", "--server", &server, "--token-file", &token]);
    // Nothing is queued yet: no rows, nothing printed, exit 0.
    let listed = check_ok(&capture(with_flag, None).await);
    assert_eq!(listed, "");

    // A send the daemon refuses for its token is refused for good: exit 13, not 1.
    let mut send_without = spoolctl();
    send_without.args(["send", "http://127.0.0.1:9/x", "--server", &server]);
    let out = capture(send_without, None).await;
    assert_eq!(out.status.code(), Some(13), "{}", stderr(&out));
    assert!(
        stderr(&out).ends_with(
            "SPOOLD_TOKEN_FILE; nothing was queued, and the same command would be refused \
             again\n"
        ),
        "{}",
        stderr(&out)
    );

    let mut with_env = spoolctl();
    with_env
        .args([
            "send",
            "http://127.0.0.1:9/x",
            "--not-before",
            "2099-01-01T00:00:00Z",
        ])
        .args(["--server", &server])
        .env("SPOOLD_TOKEN_FILE", &token);
    let sent = check_ok(&capture(with_env, None).await);
    assert!(sent.starts_with("queued  "), "{sent}");
}
