//! The daemon as a process: exclusive ownership of the database, refusal of unusable files,
//! the admission limit, graceful shutdown, health and metrics.

use serde_json::json;
use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply};
use tempfile::TempDir;

use crate::{db_path, id_of, process_opts, InProcess, WAIT};

#[tokio::test(flavor = "multi_thread")]
async fn second_daemon_on_the_same_database_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    let first = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("first");
    let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&dir))
        .await
        .expect("second runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use by another spoold"), "{stderr}");
    // The same file under another name: a symlink, a hard link.
    let db = db_path(&dir);
    let symlink = dir.path().join("symlink.db");
    std::os::unix::fs::symlink(&db, &symlink).expect("symlink");
    let hard_link = dir.path().join("data/hard-link.db");
    std::fs::hard_link(&db, &hard_link).expect("hard link");
    for other in [symlink, hard_link] {
        let (status, stderr) = DaemonProcess::run_to_exit(DaemonOptions::new(&other))
            .await
            .expect("second runs");
        assert_eq!(status.code(), Some(1), "{}: {stderr}", other.display());
        assert!(stderr.contains("in use by another spoold"), "{stderr}");
    }
    // The first one is unaffected.
    let (status, _) = Api::new(first.base_url()).list("").await.expect("list");
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn unusable_database_files_are_refused() {
    let dir = TempDir::new().expect("temp dir");
    let db = db_path(&dir);
    std::fs::create_dir_all(db.parent().expect("parent")).expect("mkdir");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&db, &garbage).expect("write garbage");
    let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&dir))
        .await
        .expect("runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("corrupt or not a spoold database"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db).expect("read back"),
        garbage,
        "file left untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_flags_exit_2() {
    let dir = TempDir::new().expect("temp dir");
    let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&dir).args([
        "--request-timeout",
        "40s",
        "--lease",
        "30s",
    ]))
    .await
    .expect("runs");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--lease"), "{stderr}");

    // A database URL in an unknown scheme is refused, and no file is created for it.
    let (status, stderr) = DaemonProcess::run_to_exit(
        DaemonOptions::new("postgress://spool@127.0.0.1/spool").args(["--concurrency", "4"]),
    )
    .await
    .expect("runs");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "spoold: --db: unknown database URL scheme \"postgress\"; give a file path, \
         sqlite:PATH or postgres://…"
    );
    assert!(!std::path::Path::new("postgress:").exists());
}

/// A PostgreSQL server that cannot be reached stops the start with exit 1 and one line that
/// says so, without the URL's password.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_database_server_exits_1() {
    let port = spool_testkit::Receiver::refusing_port();
    let (status, stderr) = DaemonProcess::run_to_exit(DaemonOptions::new(format!(
        "postgres://spool:hunter2@127.0.0.1:{port}/spool"
    )))
    .await
    .expect("runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    // The server, where, and why: one line, its last.
    let last = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "spoold: database unavailable: PostgreSQL at 127.0.0.1:{port}: cannot connect: error \
             connecting to server: Connection refused (os error 111)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

/// The database path in the `listening` line is absolute, and a start-up error is told once.
#[tokio::test(flavor = "multi_thread")]
async fn start_up_names_the_absolute_database_and_errors_once() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let stderr = daemon.stderr();
    let listening = stderr
        .lines()
        .find(|l| l.contains("\"listening\""))
        .expect("a listening line");
    let line: serde_json::Value = serde_json::from_str(listening).expect("JSON");
    let db = line["db"].as_str().expect("db field");
    assert!(
        db.starts_with('/') && db.ends_with("data/spoold.db"),
        "{db}"
    );
    let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&dir))
        .await
        .expect("second runs");
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        stderr.matches("in use by another spoold").count(),
        1,
        "{stderr}"
    );
}

/// The start says where the dashboard is, and the daemon's bare address leads a browser there.
#[tokio::test(flavor = "multi_thread")]
async fn the_start_says_where_the_dashboard_is_and_the_root_leads_there() {
    let dir = TempDir::new().expect("temp dir");
    let daemon = DaemonProcess::start(process_opts(&dir))
        .await
        .expect("daemon");
    let url = format!("{}/ui", daemon.base_url());
    // The line after `listening`, which the start returned on.
    let deadline = std::time::Instant::now() + WAIT;
    let line = loop {
        let said = daemon.stderr();
        if let Some(line) = said.lines().find(|l| l.contains("\"dashboard\"")) {
            break line.to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no dashboard line: {said}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    let line: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    assert_eq!(line["url"], url.as_str(), "{line}");

    let api = Api::new(daemon.base_url());
    let (status, headers, _) = api
        .request(http::Method::GET, "/", None)
        .await
        .expect("the root");
    let location = headers.get("location").and_then(|v| v.to_str().ok());
    assert_eq!((status, location), (303, Some("ui")));
    // Where a browser goes from there: the dashboard's page.
    let (status, _, page) = api
        .request(http::Method::GET, "/ui", None)
        .await
        .expect("the dashboard");
    assert_eq!(status, 200);
    assert!(
        String::from_utf8_lossy(&page).contains("<html"),
        "not a page"
    );
}

/// An address another program holds stops the start with a line that names it and the flag
/// it comes from (the default address is nobody's choice), and what to do.
#[tokio::test(flavor = "multi_thread")]
async fn a_taken_address_names_the_listen_flag() {
    use clap::Parser as _;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("its address");
    let dir = TempDir::new().expect("temp dir");
    let db = db_path(&dir).display().to_string();
    let config = spoold::config::Args::try_parse_from([
        "spoold",
        "--db",
        &db,
        "--listen",
        &addr.to_string(),
    ])
    .expect("flags")
    .into_config()
    .expect("a configuration");
    let Err(err) = spoold::start(config).await else {
        panic!("started on a taken address");
    };
    assert_eq!(
        err.to_string(),
        format!(
            "cannot listen on {addr} (--listen): Address already in use (os error 98); another \
             program listens there (a spoold already running?): stop it, or give this one \
             another address with --listen ADDR (or SPOOLD_LISTEN, or listen in the --config \
             file)"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn admission_limit_refuses_new_work_but_not_duplicates() {
    let dir = TempDir::new().expect("temp dir");
    let request = json!({"targetUrl": "http://127.0.0.1:9/x", "idempotencyKey": "keep",
                         "notBefore": "2099-01-01T00:00:00Z"});
    let d = InProcess::boot_in(dir, crate::Targets::Loopback, &[]).await;
    let (status, created) = d.api.create(request.clone()).await.expect("create");
    assert_eq!(status, 201);
    let dir = d.stop().await;

    let d = InProcess::boot_in(dir, crate::Targets::Loopback, &["--max-db-bytes", "1"]).await;
    let (status, err) = d
        .api
        .create(json!({"targetUrl": "http://127.0.0.1:9/new"}))
        .await
        .expect("create");
    assert_eq!(status, 507, "{err}");
    assert_eq!(err["error"]["code"], "journal_full");
    let (status, again) = d.api.create(request).await.expect("duplicate");
    assert_eq!(status, 200, "{again}");
    assert_eq!(id_of(&again), id_of(&created));
    let (_, _, body) = d
        .api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.contains("spoold_admission_rejections_total 1"),
        "{text}"
    );
    assert!(text.contains("spoold_journal_max_bytes 1"), "{text}");
}

/// SIGTERM while an attempt hangs: the daemon exits 0 within the shutdown timeout, and the
/// interrupted attempt is not charged: with maxAttempts 1 the delivery still succeeds later.
#[tokio::test(flavor = "multi_thread")]
async fn graceful_shutdown_interrupts_without_charging() {
    let dir = TempDir::new().expect("temp dir");
    let receiver = Receiver::start().await.expect("receiver");
    receiver.push_replies([Reply::hang()]);
    let opts = || process_opts(&dir).args(["--shutdown-timeout", "300ms"]);
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, created) = api
        .create(json!({"targetUrl": receiver.url("/slow"), "maxAttempts": 1}))
        .await
        .expect("create");
    let id = id_of(&created);
    receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("attempt started");
    let status = daemon.terminate().await.expect("terminates");
    assert_eq!(status.code(), Some(0), "{}", daemon.stderr());
    // The wait is announced, with how many and how long at most.
    let stderr = daemon.stderr();
    let waiting: serde_json::Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["message"] == "waiting for in-flight attempts to finish")
        .unwrap_or_else(|| panic!("no waiting line: {stderr}"));
    assert_eq!(waiting["in_flight"], 1, "{waiting}");
    assert_eq!(waiting["wait_at_most_ms"], 300, "{waiting}");

    let daemon = DaemonProcess::start(opts()).await.expect("restart");
    let api = Api::new(daemon.base_url());
    let done = api
        .wait_status(&id, &["succeeded", "failed"], WAIT)
        .await
        .expect("done");
    assert_eq!(done["status"], "succeeded", "{done}");
    let (_, history) = api.attempts(&id).await.expect("attempts");
    let first = &history["attempts"][0];
    assert_eq!(first["outcome"], "interrupted", "{history}");
    assert_eq!(first["errorCode"], "shutdown", "{history}");
    assert_eq!(history["attempts"][1]["outcome"], "succeeded", "{history}");
}

/// `/readyz` needs no token and makes a real write, so the write is rate-limited: a flood of
/// probes (concurrent and one after another) costs at most one commit per second.
#[tokio::test(flavor = "multi_thread")]
async fn readiness_probes_write_at_most_once_a_second() {
    let d = InProcess::boot(&[]).await;
    let commits = |api: Api| async move {
        api.metric("spoold_store_commit_duration_seconds_count")
            .await
            .expect("metrics")
            .unwrap_or(0.0)
    };
    let before = commits(d.api.clone()).await;
    let started = std::time::Instant::now();
    let mut probes = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let api = d.api.clone();
        probes.spawn(async move {
            for _ in 0..25 {
                let (status, _, _) = api
                    .request(http::Method::GET, "/readyz", None)
                    .await
                    .expect("readyz");
                assert_eq!(status, 200);
            }
        });
    }
    probes.join_all().await;
    let seconds = started.elapsed().as_secs_f64();
    let written = commits(d.api.clone()).await - before;
    // One probe per started second, plus the scrapes' own (they share the probe), plus the
    // scheduler's periodic sweep, which may fall in this window.
    assert!(
        written <= seconds.ceil() + 4.0,
        "{written} commits for 200 probes in {seconds:.2} s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_readiness_and_metrics() {
    let d = InProcess::boot(&[]).await;
    let receiver = Receiver::start().await.expect("receiver");
    for path in ["/healthz", "/readyz"] {
        let (status, _, body) = d
            .api
            .request(http::Method::GET, path, None)
            .await
            .expect("probe");
        assert_eq!(
            (status, body.as_ref()),
            (200, b"{\"status\":\"ok\"}\n".as_slice())
        );
    }
    d.deliver(json!({"targetUrl": receiver.url("/m")}), &["succeeded"])
        .await;
    let (status, headers, body) = d
        .api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    assert_eq!(status, 200);
    assert!(headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain; version=0.0.4")));
    let text = String::from_utf8_lossy(&body);
    for line in [
        "spoold_deliveries{status=\"succeeded\"} 1",
        "spoold_deliveries{status=\"pending\"} 0",
        "spoold_delivery_attempts_total 1",
        "spoold_delivery_results_total{result=\"succeeded\"} 1",
        "spoold_config_allow_private_targets 1",
    ] {
        assert!(text.contains(line), "missing {line} in\n{text}");
    }
    assert!(
        text.contains("spoold_store_commit_duration_seconds_count"),
        "{text}"
    );
    assert!(text.contains("spoold_journal_size_bytes"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unix_socket_lifecycle() {
    let dir = TempDir::new().expect("temp dir");
    let sock = dir.path().join("run/spoold.sock");
    // A stale socket (its listener is gone) is replaced.
    std::fs::create_dir_all(sock.parent().expect("parent")).expect("mkdir");
    drop(std::os::unix::net::UnixListener::bind(&sock).expect("stale socket"));
    assert!(sock.exists());
    let mut daemon = DaemonProcess::start(process_opts(&dir).unix_socket(&sock))
        .await
        .expect("starts over a stale socket");
    std::os::unix::net::UnixStream::connect(&sock).expect("socket answers");

    // A live socket is not taken over: a second daemon (another database) exits 1.
    let other = TempDir::new().expect("temp dir");
    let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&other).unix_socket(&sock))
        .await
        .expect("runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("in use"), "{stderr}");
    std::os::unix::net::UnixStream::connect(&sock).expect("first daemon still answers");

    // Removed on shutdown.
    let status = daemon.terminate().await.expect("terminates");
    assert_eq!(status.code(), Some(0));
    assert!(!sock.exists(), "socket left behind");
}

/// Only a stale socket is ever replaced: a regular file, a directory or a symlink at the path
/// is an error that names it, and is left as it was.
#[tokio::test(flavor = "multi_thread")]
async fn unix_socket_never_replaces_other_files() {
    let dir = TempDir::new().expect("temp dir");
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me").expect("write");
    let directory = dir.path().join("a-directory");
    std::fs::create_dir(&directory).expect("mkdir");
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&file, &link).expect("symlink");
    for path in [&file, &directory, &link] {
        let (status, stderr) = DaemonProcess::run_to_exit(process_opts(&dir).unix_socket(path))
            .await
            .expect("runs");
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("{} exists and is not a socket", path.display())),
            "{stderr}"
        );
    }
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "keep me");
    assert!(directory.is_dir());
    assert!(std::fs::symlink_metadata(&link).expect("link").is_symlink());
}

/// A client that hangs up right after sending its create: the write still commits, and the
/// scheduler is still woken by it (from the store, not from the dropped request handler), so the
/// delivery goes out at once rather than at the next periodic sweep, seconds later.
///
/// The client hangs up after a growing pause: too early and the daemon drops the request before
/// writing anything; too late and it has answered. In between, the write is under way when the
/// handler is dropped: those are the cases that count, and at least three must be seen.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_client_hung_up_is_sent_at_once() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let d = InProcess::boot(&[]).await;
    let receiver = Receiver::start().await.expect("receiver");
    let addr = d.api.base_url().trim_start_matches("http://").to_owned();
    let mut hung_up_mid_write = 0;
    for n in 0..120u64 {
        let url = receiver.url(&format!("/hung-up/{n}"));
        // A large body makes the commit take a moment, so the window is there to hit.
        let body = json!({ "targetUrl": url, "body": "x".repeat(256 * 1024) }).to_string();
        let request = format!(
            "POST /v1/deliveries HTTP/1.1\r\nHost: spoold\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut client = tokio::net::TcpStream::connect(&addr)
            .await
            .expect("connect");
        client.write_all(request.as_bytes()).await.expect("send");
        let pause = std::time::Duration::from_micros(500 * (n % 40));
        let mut first = [0u8; 1];
        if let Ok(read) = tokio::time::timeout(pause, client.read(&mut first)).await {
            assert!(read.is_ok_and(|len| len == 1), "the daemon closed first");
            continue; // answered: the handler finished and proves nothing here
        }
        drop(client);
        let Some(id) = find_by_url(&d.api, &url).await else {
            continue; // dropped before anything was written
        };
        hung_up_mid_write += 1;
        d.api
            .wait_status(&id, &["succeeded"], WAIT)
            .await
            .expect("delivered");
        let (_, delivery) = d.api.get(&id).await.expect("get");
        let (_, attempts) = d.api.attempts(&id).await.expect("attempts");
        let time = |v: &serde_json::Value| {
            spool_proto::units::parse_time(v.as_str().expect("a time")).expect("RFC 3339")
        };
        let waited = time(&attempts["attempts"][0]["startedAt"]) - time(&delivery["createdAt"]);
        // The periodic sweep comes every 5 s; a wake-up takes milliseconds.
        assert!(
            waited < 1000,
            "delivery {n} waited {waited} ms for its first attempt"
        );
        if hung_up_mid_write == 3 {
            return;
        }
    }
    panic!("only {hung_up_mid_write} creates were written after their client hung up");
}

/// The id of the delivery to `url`, if it is listed within a moment.
async fn find_by_url(api: &Api, url: &str) -> Option<String> {
    for _ in 0..15 {
        let (_, page) = api.list("limit=500").await.expect("list");
        let found = page["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["targetUrl"] == url);
        if let Some(d) = found {
            return Some(id_of(d));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}

/// `--check-config` loads the flags and the configuration file as a start would, says so on
/// stdout and exits 0, or exits 2 with the reason; it opens no database.
#[test]
fn check_config_says_whether_a_start_would_work_and_starts_nothing() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let config = dir.path().join("spoold.toml");
    let db = dir.path().join("never/spoold.db");
    let check = |text: &str| {
        std::fs::write(&config, text).expect("config");
        std::process::Command::new(env!("CARGO_BIN_EXE_spoold"))
            .arg("--check-config")
            .arg("--config")
            .arg(&config)
            .arg("--db")
            .arg(&db)
            .env_remove("SPOOLD_LOG_FORMAT")
            .output()
            .expect("spoold runs")
    };
    let o = check(
        "[tasks.hello]\ncommand = [\"/bin/true\"]\n\n[[targets]]\nmatch = \"http://127.0.0.1:9/*\"\nrate = \"5/s\"\n",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "configuration ok: 1 task types, 1 target rules\n"
    );
    assert!(
        !db.exists() && !db.parent().expect("dir").exists(),
        "a database was made"
    );

    let o = check("[[targets]]\nmatch = \"http://127.0.0.1:9/*\"\nrate = \"fast\"\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("rate \"fast\" is not N/s, N/m or N/h"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn print_config_says_what_is_in_effect_masked_and_reads_back() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::TempDir::new().expect("temp dir");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cr3t-token-0123456789abcdefghijklmnop\n").expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let key = dir.path().join("ops.key");
    std::fs::write(&key, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").expect("key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = dir.path().join("spoold.toml");
    std::fs::write(
        &config,
        format!("concurrency = 12\n\n[secrets]\nops = {{ file = {key:?} }}\n"),
    )
    .expect("config");
    let spoold = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_spoold"))
            .args(args)
            .env_remove("SPOOLD_LOG_FORMAT")
            .env_remove("SPOOLD_LISTEN")
            .output()
            .expect("spoold runs")
    };
    let o = spoold(&[
        "--print-config",
        "--config",
        &config.display().to_string(),
        "--db",
        "postgres://spool:hunter2@127.0.0.1:5432/spool",
        "--auth-token-file",
        &token.display().to_string(),
        "--request-timeout",
        "7s",
        "--db-notify",
        "off",
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    for wanted in [
        "concurrency = 12\n",
        "request_timeout = \"7s\"\n",
        "listen = \"127.0.0.1:8080\"\n",
        "db = \"postgres://spool:***@127.0.0.1:5432/spool\"\n",
        "# auth token: set",
        &format!("auth_token_file = {:?}\n", token.display().to_string()),
        "log_format = \"auto\"\n",
        "db_notify = \"off\"\n",
        "db_poll_interval = \"1s\"\n",
        "secrets: ops (keys not shown)",
    ] {
        assert!(printed.contains(wanted), "{wanted:?} in\n{printed}");
    }
    for secret in ["hunter2", "s3cr3t-token", "MfKQ9r8G"] {
        assert!(!printed.contains(secret), "{secret} shown:\n{printed}");
    }
    // What it prints is a configuration file spoold takes, and that file prints the same (the
    // token file, the listen address or socket and the log format included).
    let socket = dir.path().join("api.sock").display().to_string();
    let with_socket = |text: &str| {
        let o = spoold(&["--print-config", "--config", text, "--unix-socket", &socket]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for printed in [printed.clone(), with_socket(&config.display().to_string())] {
        let again = dir.path().join("printed.toml");
        std::fs::write(&again, &printed).expect("write");
        let again = again.display().to_string();
        let o = spoold(&["--check-config", "--config", &again]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // (Task types, rules and secrets are only named in comments: the settings are equal.)
        let settings = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_owned)
                .collect()
        };
        let o = spoold(&["--print-config", "--config", &again]);
        assert_eq!(
            settings(&String::from_utf8_lossy(&o.stdout)),
            settings(&printed)
        );
    }
    assert!(
        with_socket(&config.display().to_string()).contains(&format!("unix_socket = {socket:?}\n")),
        "a unix socket is printed as unix_socket"
    );
}

/// `docs/man/spoold.1` is what the flags' definitions make (regenerate with UPDATE_SNAPSHOTS=1),
/// and what `spoold --man` prints.
#[test]
fn the_committed_manual_page_is_current() {
    let generated = spoold::config::man_page().expect("the page");
    let committed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/man/spoold.1");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&committed, &generated).expect("write the page");
    }
    let page = String::from_utf8_lossy(&generated);
    assert!(
        page.contains(".TH spoold 1") && page.contains("\\-\\-print\\-config"),
        "{page}"
    );
    assert_eq!(
        std::fs::read(&committed).expect("docs/man/spoold.1"),
        generated,
        "docs/man/spoold.1 is stale; regenerate with UPDATE_SNAPSHOTS=1 cargo nextest run -p spoold manual"
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_spoold"))
        .arg("--man")
        .output()
        .expect("spoold runs");
    assert!(o.status.success());
    assert!(
        o.stdout == generated,
        "spoold --man is not docs/man/spoold.1"
    );
}
