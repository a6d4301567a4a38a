//! `spoolctl --server unix:///…` against a real `spoold` listening on a unix socket, and the
//! socket's permissions: owner-only from the start, in an owner-only directory spoold created.

use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};

use crate::{check_ok, row, row_id, spoolctl, stderr, stdout, Spoold, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn send_list_and_wait_over_a_unix_socket() {
    let s = Spoold::start_unix(|dir| dir.join("sock/spoold.sock")).await;
    let socket = s.dir.path().join("sock/spoold.sock");
    assert_eq!(s.daemon.unix_socket(), Some(socket.as_path()));
    assert_eq!(s.server, format!("unix://{}", socket.display()));

    let meta = std::fs::metadata(&socket).expect("socket exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "socket mode");
    let dir_mode = std::fs::metadata(socket.parent().expect("socket dir"))
        .expect("socket dir exists")
        .permissions()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700, "directory spoold created");

    let url = s.receiver.url("/over-unix");
    // `--server` before the subcommand, as in `spoolctl --server unix:///… send URL`.
    let mut cmd = spoolctl();
    cmd.args([
        "--server",
        &s.server,
        "send",
        &url,
        "-d",
        r#"{"via":"unix"}"#,
    ]);
    let out = check_ok(&crate::capture(cmd, None).await);
    let id = row_id(&out);
    assert_eq!(out, row("queued", &id, "pending", "0/100", "POST", &url));
    let seen = s
        .receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("delivered");
    assert_eq!(seen[0].body_text(), r#"{"via":"unix"}"#);

    let o = s.ctl(&["wait", &id, "--interval", "20ms"]).await;
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    assert_eq!(
        stdout(&o),
        row("wait", &id, "succeeded", "1/100", "POST", &url)
    );

    assert_eq!(
        crate::e2e::ages(&check_ok(&s.ctl(&["list"]).await)),
        format!(
            "ID STATUS ATTEMPTS UPDATED METHOD TARGET\n\
             {id} succeeded 1/100 <age> POST {url}\n"
        )
    );

    // SPOOLD_URL reaches the socket as well.
    let mut cmd = spoolctl();
    cmd.args(["get", &id, "--json"])
        .env("SPOOLD_URL", &s.server);
    let out = check_ok(&crate::capture(cmd, None).await);
    let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["id"], id.as_str(), "{json}");
    assert_eq!(json["status"], "succeeded", "{json}");
}

#[tokio::test(flavor = "multi_thread")]
async fn socket_in_an_existing_directory_is_owner_only() {
    let s = Spoold::start_unix(|dir| dir.join("spoold.sock")).await;
    let socket = s.dir.path().join("spoold.sock");
    let mode = std::fs::metadata(&socket)
        .expect("socket exists")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let out = check_ok(&s.ctl(&["list", "--json"]).await);
    assert_eq!(out, "{\"count\":0,\"deliveries\":[]}\n");
}
