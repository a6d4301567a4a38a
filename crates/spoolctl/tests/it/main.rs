//! Runs the built `spoolctl` binary: exit codes, usage errors and messages that need no daemon
//! here; against a real `spoold` process and a real receiver in [`e2e`] (TCP) and
//! [`unix_socket`]; `spoolctl task` against a daemon with declared task types in [`tasks`].
//! Network: only 127.0.0.1 and unix sockets.

mod at_most_once;
mod auth;
mod e2e;
mod maildrop;
mod migration;
mod moving_in;
mod quick_start;
mod signing;
mod tasks;
mod unix_socket;

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver};
use tempfile::TempDir;
use tokio::io::AsyncWriteExt as _;

/// `spoolctl` with a clean environment: no inherited SPOOLD_URL or token file.
fn spoolctl() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spoolctl"));
    // Never a maildrop unless a test names one: not the one this machine's spoold may have.
    cmd.env_remove("SPOOLD_URL")
        .env_remove("SPOOLD_TOKEN_FILE")
        .env("SPOOLD_MAILDROP", "off")
        .stdin(Stdio::null());
    cmd
}

fn run(args: &[&str]) -> Output {
    spoolctl().args(args).output().expect("spoolctl runs")
}

fn run_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = spoolctl()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spoolctl runs");
    // spoolctl may exit before reading everything; a broken pipe here is fine.
    let _ = child.stdin.take().expect("piped stdin").write_all(stdin);
    child.wait_with_output().expect("spoolctl finishes")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A loopback URL where nothing listens: bound to get a free port, then released.
fn refusing_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("bound address");
    drop(listener);
    format!("http://{addr}")
}

/// Asserts the exit code and that stderr is exactly one `spoolctl: …` line.
fn check_error(o: &Output, code: i32, message: &str) {
    assert_eq!(o.status.code(), Some(code), "stderr: {}", stderr(o));
    assert_eq!(stderr(o), format!("spoolctl: {message}\n"));
    assert!(o.stdout.is_empty(), "stdout: {}", stdout(o));
}

#[test]
fn version() {
    let o = run(&["version"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!("spoolctl {}\n", env!("CARGO_PKG_VERSION"))
    );

    let o = run(&["version", "--json"]);
    assert_eq!(
        stdout(&o),
        format!("{{\"version\":\"{}\"}}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn version_and_completion_ignore_a_bad_server() {
    let o = spoolctl()
        .arg("version")
        .env("SPOOLD_URL", "ftp://nowhere")
        .output()
        .expect("spoolctl runs");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn completion_scripts() {
    for shell in ["bash", "zsh", "fish"] {
        let o = run(&["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        assert!(script.contains("spoolctl"), "{shell}");
        assert!(script.contains("send"), "{shell}");
    }
    assert_eq!(run(&["completion", "tcsh"]).status.code(), Some(2));
}

#[test]
fn help_documents_exit_codes() {
    let o = run(&["wait", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for line in [
        "3  the delivery failed",
        "4  the delivery was canceled",
        "5  timed out",
        "7  the delivery is in manual review",
        "10 at most once, the outcome is unknown",
    ] {
        assert!(help.contains(line), "{help}");
    }
}

#[test]
fn task_help_documents_exit_codes() {
    for command in ["wait", "submit"] {
        let o = run(&["task", command, "--help"]);
        assert_eq!(o.status.code(), Some(0));
        let help = stdout(&o);
        for line in [
            "3  the task failed",
            "4  the task was canceled",
            "5  timed out waiting",
            "6  the task timed out",
            "7  the task is in manual review",
            "13 `task submit`: spoold refused it",
        ] {
            assert!(help.contains(line), "task {command}: {help}");
        }
    }
    let help = stdout(&run(&["--help"]));
    for line in [
        "6  `task wait`: the task timed out",
        "7  `wait`, `task wait`: the delivery or task is in manual review",
        "10 `wait`, `send --wait`: at most once, the outcome is unknown",
        "13 `send`, `task submit`: spoold refused it",
    ] {
        assert!(help.contains(line), "{help}");
    }
}

#[test]
fn clap_usage_errors_exit_2() {
    for args in [
        &[][..],
        &["frobnicate"][..],
        &["send"][..],
        &["send", "http://127.0.0.1:1/", "--max-attempts", "0"][..],
        &["send", "http://127.0.0.1:1/", "--expires-in", "10"][..],
        &["send", "http://127.0.0.1:1/", "--timeout", "1s"][..],
        &["get"][..],
        &["list", "--limit", "501"][..],
        &["list", "--status", "done"][..],
        &["send", "http://127.0.0.1:1/", "--fingerprint", "f"][..],
        &[
            "send",
            "http://127.0.0.1:1/",
            "--reconcile-url",
            "http://127.0.0.1:1/q",
        ][..],
        &[
            "send",
            "http://127.0.0.1:1/",
            "--at-most-once",
            "--reconcile-method",
            "GET",
        ][..],
        &[
            "send",
            "http://127.0.0.1:1/",
            "--at-most-once",
            "--observation-window",
            "1h",
        ][..],
        &["resolve", "x", "--note", "n"][..],
        &["resolve", "x", "--succeeded"][..],
        &["resolve", "x", "--failed", "--resend", "--note", "n"][..],
        &[
            "resolve",
            "x",
            "--failed",
            "--remote-id",
            "r",
            "--note",
            "n",
        ][..],
        &["checks"][..],
        &["wait", "x", "--timeout", "soon"][..],
        &["task"][..],
        &["task", "frobnicate"][..],
        &["task", "submit"][..],
        &["task", "submit", "t", "--timeout", "1s"][..],
        &["task", "list", "--status", "in_flight"][..],
        &["task", "list", "--limit", "0"][..],
        &["task", "get"][..],
        &["task", "wait", "x", "--interval", "soon"][..],
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn send_usage_errors_exit_2_before_any_request() {
    let server = refusing_server();
    let s = server.as_str();
    let url = "http://127.0.0.1:9/events";
    let cases: &[(&[&str], &str)] = &[
        (
            &["send", url, "-d", "{not json"],
            "request body must be valid JSON: key must be a string at line 1 column 2; for a \
             body that is not JSON, use --data-binary FILE (or - for stdin)",
        ),
        (
            &["send", "localhost:9000/hook", "-d", "{}"],
            "target URL needs http:// or https://, as in http://localhost:9000/hook",
        ),
        (
            &["send", "hooks.example.com/x"],
            "target URL needs http:// or https://, as in http://hooks.example.com/x",
        ),
        // A scheme with a slash short is mended, not doubled.
        (
            &["send", "http:/127.0.0.1:9000/x"],
            "target URL needs http:// or https://, as in http://127.0.0.1:9000/x",
        ),
        (
            &["send", "HTTPS:hooks.example.com/x"],
            "target URL needs http:// or https://, as in https://hooks.example.com/x",
        ),
        (
            &["send", "http//hooks.example.com/x"],
            "target URL needs http:// or https://, as in http://hooks.example.com/x",
        ),
        (
            &["send", "httpbin.example.com/x"],
            "target URL needs http:// or https://, as in http://httpbin.example.com/x",
        ),
        (
            &["send", url, "-d", "@"],
            "--data @ needs a file name: -d @body.json (or -d @- for stdin)",
        ),
        (
            &["send", "ftp://files.example.com/x"],
            "target URL has the scheme ftp://: spoold sends HTTP requests only (http:// or \
             https://)",
        ),
        (
            &["send", url, "-d", "{}", "--data-file", "-"],
            "--data, --data-file, and --data-binary cannot be used together",
        ),
        (
            &["send", url, "--data-file", "a", "--data-binary", "b"],
            "--data, --data-file, and --data-binary cannot be used together",
        ),
        (
            &["send", url, "-H", "NoColon"],
            "header must use 'Name: value' form",
        ),
        (
            &["send", url, "-H", "x-a: 1", "-H", "X-A: 2"],
            "header \"X-A\" was provided more than once",
        ),
        (
            &["send", url, "--expires-in", "0"],
            "--expires-in must be greater than zero",
        ),
        (
            &["send", url, "--wait", "--interval", "1ms"],
            "--interval must be at least 10ms",
        ),
        (&["get", " "], "delivery ID must not be empty"),
        (
            &[
                "send",
                url,
                "--at-most-once",
                "--reconcile-url",
                "http://127.0.0.1:9/q",
                "--reconcile-header",
                "NoColon",
            ],
            "--reconcile-header: header must use 'Name: value' form",
        ),
        (
            &[
                "send",
                url,
                "--at-most-once",
                "--reconcile-url",
                "http://127.0.0.1:9/q",
                "--observation-window",
                "0",
            ],
            "--observation-window must be greater than zero",
        ),
        (
            &["resolve", "x", "--failed", "--note", " "],
            "--note must not be empty",
        ),
        (
            &["resolve", " ", "--failed", "--note", "n"],
            "delivery ID must not be empty",
        ),
        (&["checks", " "], "delivery ID must not be empty"),
    ];
    for (args, message) in cases {
        let o = spoolctl()
            .args(*args)
            .args(["--server", s])
            .output()
            .expect("spoolctl runs");
        check_error(&o, 2, message);
    }

    let o = run(&["send", url, "--server", s, "--not-before", "tomorrow"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("spoolctl: --not-before: invalid time"));
}

/// The at-most-once flags name what they are missing, and exit 2 before any request.
#[test]
fn at_most_once_flags_say_what_they_need() {
    let url = "http://127.0.0.1:9/events";
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--reconcile-url", "http://127.0.0.1:9/q"],
            &["--at-most-once"],
        ),
        (&["--fingerprint", "f"], &["--at-most-once"]),
        (
            &["--at-most-once", "--matches-pointer", "/data"],
            &["--reconcile-url <TEMPLATE>"],
        ),
        (
            &["--observation-window", "1h"],
            &["--at-most-once", "--reconcile-url <TEMPLATE>"],
        ),
    ];
    for (args, missing) in cases {
        let o = run(&[&["send", url][..], args].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.starts_with("error: the following required arguments were not provided:\n"),
            "{args:?}: {err}"
        );
        for flag in *missing {
            assert!(err.contains(&format!("\n  {flag}\n")), "{args:?}: {err}");
        }
        assert!(o.stdout.is_empty());
    }

    let o = run(&["resolve", "x", "--succeeded"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("\n  --note <TEXT>\n"), "{}", stderr(&o));
}

#[test]
fn json_from_stdin_is_validated() {
    let server = refusing_server();
    let o = run_with_stdin(
        &[
            "send",
            "http://127.0.0.1:9/",
            "--data-file",
            "-",
            "--server",
            &server,
        ],
        b"{\"a\": ",
    );
    check_error(
        &o,
        2,
        "request body must be valid JSON: EOF while parsing a value at line 1 column 5; for a \
         body that is not JSON, use --data-binary FILE (or - for stdin)",
    );
}

/// curl's habits with a body file: `-d FILE` (the name where its JSON was meant) and
/// `--data-binary @FILE` each say what the flag takes.
#[test]
fn a_body_file_named_the_curl_way_says_what_the_flag_takes() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("body.json"), "{}").expect("write file");
    let server = refusing_server();
    let in_dir = |args: &[&str]| {
        spoolctl()
            .args(args)
            .args(["--server", &server])
            .current_dir(dir.path())
            .output()
            .expect("spoolctl runs")
    };
    check_error(
        &in_dir(&["send", "http://127.0.0.1:9/", "-d", "body.json"]),
        2,
        "-d takes the JSON itself, and body.json is a file: -d @body.json (or --data-file \
         body.json) sends the JSON it holds",
    );
    check_error(
        &in_dir(&["send", "http://127.0.0.1:9/", "--data-binary", "@body.json"]),
        1,
        "open data file @body.json: no such file (--data-binary takes the file name itself, \
         without curl's @: --data-binary body.json)",
    );
    check_error(
        &in_dir(&["send", "http://127.0.0.1:9/", "--data-file", "@body.json"]),
        1,
        "open data file @body.json: no such file (--data-file takes the file name itself, \
         without curl's @: --data-file body.json)",
    );
}

/// `list` shows the newest first (the work still to be sent oldest first), and its help, and
/// the command list's, say so.
#[test]
fn list_help_says_the_order_it_lists_in() {
    for (args, line) in [
        (
            &["--help"][..],
            "list         List deliveries, newest first (oldest first for --status",
        ),
        (
            &["list", "--help"][..],
            "List deliveries, newest first (oldest first for --status pending|in_flight)",
        ),
    ] {
        let help = stdout(&run(args));
        assert!(help.contains(line), "{args:?}: {help}");
        assert!(!help.contains("List deliveries, oldest first"), "{help}");
    }
}

#[test]
fn oversized_data_file_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("big.json");
    std::fs::write(&path, vec![b' '; 1024 * 1024 + 1]).expect("write file");
    let server = refusing_server();
    let o = run(&[
        "send",
        "http://127.0.0.1:9/",
        "--data-file",
        path.to_str().expect("utf-8 temp path"),
        "--server",
        &server,
    ]);
    check_error(&o, 1, "request body exceeds 1048576 bytes");
}

#[test]
fn bad_server_exits_2() {
    let cases = [
        (
            "ftp://127.0.0.1",
            "--server must be http://host:port (or host:port) or unix:///path/to/socket",
        ),
        ("http://", "--server must include a host"),
        ("http://[bad", "parse --server: invalid IPv6 address"),
        (
            "http://user@127.0.0.1:8080",
            "--server must not include user information, a query, or a fragment",
        ),
        (
            "unix://relative.sock",
            "unix --server must contain an absolute socket path",
        ),
        (
            "unix:///tmp/s.sock?x=1",
            "unix --server must not include user information, a query, or a fragment",
        ),
        (
            "https://127.0.0.1:8443",
            "--server uses https, but spoolctl does not support TLS; \
             use a unix:///path socket or a loopback http:// address",
        ),
    ];
    for (server, message) in cases {
        // Global options work after the subcommand…
        check_error(&run(&["list", "--server", server]), 2, message);
        // …before it…
        check_error(&run(&["--server", server, "get", "x"]), 2, message);
        // …and from the environment, named as it was given.
        let o = spoolctl()
            .args(["cancel", "x"])
            .env("SPOOLD_URL", server)
            .output()
            .expect("spoolctl runs");
        check_error(
            &o,
            2,
            &format!(
                "{} (from the environment; --server overrides it)",
                message.replacen("--server", "SPOOLD_URL", 1)
            ),
        );
    }
}

#[test]
fn refused_connection_exits_1() {
    let server = refusing_server();
    for args in [
        &["list"][..],
        &["get", "abc"][..],
        &["attempts", "abc"][..],
        &["retry", "abc"][..],
        &["cancel", "abc"][..],
        &["resolve", "abc", "--resend", "--note", "n"][..],
        &["checks", "abc"][..],
        &["wait", "abc", "--timeout", "0"][..],
        &["send", "http://127.0.0.1:9/", "-d", "{}"][..],
        &["task", "submit", "backup", "-p", "db=one"][..],
        &["task", "list"][..],
        &["task", "types"][..],
        &["task", "wait", "abc", "--timeout", "0"][..],
    ] {
        let o = spoolctl()
            .args(args)
            .args(["--server", &server])
            .output()
            .expect("spoolctl runs");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        let prefix = format!("spoolctl: contact spoold at {server}: connect: ");
        assert!(err.starts_with(&prefix), "{args:?}: {err}");
        // A write says what a job must know: nothing was stored.
        let writes = args[0] == "send" || args.starts_with(&["task", "submit"]);
        assert!(
            err.ends_with(&format!(
                ": is spoold running there? (it listens on --listen, 127.0.0.1:8080 by default; \
                 spoolctl asks --server or SPOOLD_URL){}\n",
                if writes { "; nothing was queued" } else { "" }
            )),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    // SPOOLD_URL is the default for --server.
    let o = spoolctl()
        .arg("list")
        .env("SPOOLD_URL", &server)
        .output()
        .expect("spoolctl runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with(&format!("spoolctl: contact spoold at {server}: ")));
}

/// A server that takes the request and closes the connection without an answer: spoold may
/// have stored it, so `send` and `task submit` say how to repeat it safely.
#[test]
fn a_write_without_an_answer_may_have_been_queued() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let server = format!("http://{}", listener.local_addr().expect("address"));
    let taker = std::thread::spawn(move || {
        use std::io::Read as _;
        for _ in 0..2 {
            let (mut conn, _) = listener.accept().expect("a connection");
            conn.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("read timeout");
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            // Dropped: closed without a word.
        }
    });
    for (args, again) in [
        (
            &["send", "http://127.0.0.1:9/", "--idempotency-key", "k"][..],
            "send it again with the same --idempotency-key, which returns it if it was (without \
             a key, it may be queued twice)",
        ),
        (
            &["task", "submit", "backup"][..],
            "submit it again with the same parameters and key, which returns it if it was (a \
             type with an idempotency_key derives the key; without one, it may run twice)",
        ),
    ] {
        let o = spoolctl()
            .args(args)
            .args(["--server", &server])
            .output()
            .expect("spoolctl runs");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = stderr(&o);
        assert!(
            err.starts_with(&format!("spoolctl: contact spoold at {server}: ")),
            "{err}"
        );
        assert!(
            err.ends_with(&format!("; it may have been queued: {again}\n")),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    taker.join().expect("the server thread");
}

#[test]
fn missing_unix_socket_exits_1() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = format!("unix://{}", dir.path().join("absent.sock").display());
    let o = run(&["list", "--server", &server]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with(&format!("spoolctl: contact spoold at {server}: connect: ")),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unreadable_token_file_exits_1() {
    let server = refusing_server();
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing-token");
    let o = run(&[
        "list",
        "--server",
        &server,
        "--token-file",
        path_str(&missing),
    ]);
    assert_eq!(o.status.code(), Some(1));
    // The operating system's reason, once.
    assert_eq!(
        stderr(&o),
        format!(
            "spoolctl: read token file {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );

    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "\n").expect("write token");
    let o = spoolctl()
        .args(["list", "--server", &server])
        .env("SPOOLD_TOKEN_FILE", &empty)
        .output()
        .expect("spoolctl runs");
    check_error(&o, 1, &format!("token file {} is empty", empty.display()));
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// How long a test waits for a delivery to reach a state or for the receiver to see a request.
const WAIT: Duration = Duration::from_secs(20);

/// Fast retries so a retried delivery finishes in well under a second.
const FAST_RETRIES: [&str; 4] = ["--retry-base", "50ms", "--retry-cap", "200ms"];

/// A real `spoold` process on a fresh database, and a receiver on 127.0.0.1 for it to deliver
/// to. Fields drop in order: the daemon is killed before its directory is removed.
struct Spoold {
    daemon: DaemonProcess,
    receiver: Receiver,
    /// The `--server` value that reaches the daemon.
    server: String,
    dir: TempDir,
}

impl Spoold {
    /// A daemon on 127.0.0.1 with an OS-chosen port.
    async fn start() -> Spoold {
        Self::start_with(|_| None, &[]).await
    }

    /// Like [`Self::start`], with extra daemon arguments.
    async fn start_args(args: &[&str]) -> Spoold {
        Self::start_with(|_| None, args).await
    }

    /// A daemon on the unix socket `socket(dir)`, `dir` being the test's temp directory.
    async fn start_unix(socket: impl FnOnce(&Path) -> PathBuf) -> Spoold {
        Self::start_with(|dir| Some(socket(dir)), &[]).await
    }

    async fn start_with(socket: impl FnOnce(&Path) -> Option<PathBuf>, args: &[&str]) -> Spoold {
        let dir = TempDir::new().expect("temp dir");
        // Fast retries unless the test chose its own.
        let retries = if args.contains(&"--retry-base") {
            &[][..]
        } else {
            &FAST_RETRIES[..]
        };
        let mut opts = DaemonOptions::new(dir.path().join("data/spoold.db"))
            .args(retries.iter().copied())
            .args(args.iter().copied());
        if let Some(path) = socket(dir.path()) {
            opts = opts.unix_socket(path);
        }
        let daemon = DaemonProcess::start(opts).await.expect("spoold starts");
        let receiver = Receiver::start().await.expect("receiver starts");
        Spoold {
            server: daemon.base_url(),
            daemon,
            receiver,
            dir,
        }
    }

    /// The testkit's API client, for waiting on states (TCP daemons only).
    fn api(&self) -> Api {
        assert!(
            self.daemon.addr().is_some(),
            "the testkit's Api speaks TCP only"
        );
        Api::new(self.daemon.base_url())
    }

    /// `spoolctl ARGS… --server <this daemon>`, run to completion.
    async fn ctl(&self, args: &[&str]) -> Output {
        capture(self.command(args), None).await
    }

    /// Like [`Self::ctl`], with `stdin` on spoolctl's standard input.
    async fn ctl_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        capture(self.command(args), Some(stdin)).await
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = spoolctl();
        cmd.args(args).args(["--server", &self.server]);
        cmd
    }
}

/// Runs `cmd` on tokio's process support, so the receiver keeps serving on the test's runtime
/// while the synchronous CLI waits for spoold.
async fn capture(cmd: Command, stdin: Option<&[u8]>) -> Output {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("spoolctl runs");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        // spoolctl may exit before reading everything; a broken pipe here is fine.
        let _ = pipe.write_all(bytes).await;
        drop(pipe);
    }
    child.wait_with_output().await.expect("spoolctl finishes")
}

/// Asserts success with nothing on stderr; returns stdout.
fn check_ok(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(o));
    assert_eq!(stderr(o), "", "stdout: {}", stdout(o));
    stdout(o)
}

/// The delivery id in a one-row `ACTION  ID  …` output, checked to be 32 lowercase hex digits.
fn row_id(out: &str) -> String {
    let id = out
        .split("  ")
        .nth(1)
        .unwrap_or_else(|| panic!("no id column in {out:?}"));
    assert!(
        id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "not a delivery id: {id:?} in {out:?}"
    );
    id.to_owned()
}

/// One delivery row as `send`, `get`, `wait`, `retry` and `cancel` print it.
fn row(action: &str, id: &str, status: &str, attempts: &str, method: &str, url: &str) -> String {
    format!("{action}  {id}  {status}  {attempts}  {method}  {url}\n")
}

/// Every subcommand of `spoolctl --help` appears in the book's command table
/// (`docs/src/cli.md`).
#[test]
fn every_command_is_in_the_books_command_table() {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/cli.md"),
    )
    .expect("docs/src/cli.md");
    let table: String = page
        .lines()
        .skip_while(|l| !l.starts_with("| command | what it does |"))
        .take_while(|l| l.starts_with('|'))
        .collect::<Vec<_>>()
        .join("\n");
    let help = stdout(&run(&["--help"]));
    let commands = subcommands(&help);
    assert!(commands.len() >= 10, "{help}");
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !table.contains(&format!("`{c}")) && !table.contains(&format!(", `{c} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "commands missing from the table of docs/src/cli.md: {missing:?}"
    );

    // The `task` group: every subcommand has its own `task NAME` entry.
    let help = stdout(&run(&["task", "--help"]));
    let commands = subcommands(&help);
    assert!(commands.len() >= 9, "{help}");
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !table.contains(&format!("`task {c}")))
        .collect();
    assert!(
        missing.is_empty(),
        "task commands missing from the table of docs/src/cli.md: {missing:?}"
    );
}

/// The subcommands a `--help` text lists, without `help` itself.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// A target on this machine's own name is refused by spoold's default address policy: `send`
/// says so at once, with the flag that opens it, before it talks to spoold.
#[test]
fn localhost_targets_are_warned_about() {
    let server = refusing_server();
    let o = run(&["send", "http://localhost:9000/hook", "--server", &server]);
    let err = stderr(&o);
    assert!(
        err.starts_with(
            "spoolctl: warning: localhost is this machine; spoold refuses loopback targets \
             unless it was started with --allow-target 127.0.0.1/32 (or, for development, \
             --allow-private-targets)\n"
        ),
        "{err}"
    );
    // Then the real error: nothing listens at the server.
    assert_eq!(o.status.code(), Some(1), "{err}");
}

/// A server that answers JSON but is not spoold (another API on the port): the error says so,
/// instead of what field its answer lacked.
#[tokio::test(flavor = "multi_thread")]
async fn another_json_api_is_not_taken_for_spoold() {
    let other = Receiver::start().await.expect("receiver");
    other.respond_with(
        spool_testkit::Reply::status(200)
            .header("content-type", "application/json")
            .body(r#"{"hello":"world"}"#),
    );
    let mut cmd = spoolctl();
    cmd.args(["stats", "--server", &other.url("")]);
    let o = capture(cmd, None).await;
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.starts_with("spoolctl: the server did not answer like spoold (")
            && err.ends_with("): is --server (or SPOOLD_URL) spoold's address?\n"),
        "{err}"
    );
}
