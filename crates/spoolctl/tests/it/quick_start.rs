//! The README's quick start, run as it is written there: the three commands of its second
//! block, taken from the README, in a shell each, from an empty directory. Only the ports are
//! the test's own (two run at once otherwise): `SPOOLD_LISTEN` and `SPOOLD_URL` point the daemon
//! and `spoolctl` at a free one, and the receiver's `127.0.0.1:9000` becomes another.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A shell running one README command in a process group of its own, ended (the whole group)
/// when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The commands of the README's quick start block.
fn readme_commands() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let at = readme
        .find("Then three commands")
        .expect("the quick start's commands");
    let block = &readme[at..];
    let start = block.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = start + block[start..].find("```").expect("its end");
    block[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_quick_start_delivers() {
    let commands = readme_commands();
    assert_eq!(commands.len(), 3, "{commands:?}");
    let (api, receiver) = (free_port(), free_port());
    let ours = |command: &str| {
        command
            .replace("127.0.0.1:9000", &format!("127.0.0.1:{receiver}"))
            .replacen(
                "spoolctl receive",
                &format!("spoolctl receive --listen 127.0.0.1:{receiver}"),
                1,
            )
    };
    let dir = TempDir::new().expect("temp dir");
    let bin = Path::new(env!("CARGO_BIN_EXE_spoolctl"))
        .parent()
        .expect("the binaries' directory")
        .to_path_buf();
    spool_testkit::cargo_bin("spoold");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |command: &str, out: &str| {
        use std::os::unix::process::CommandExt;
        let log = std::fs::File::create(dir.path().join(out)).expect("log file");
        let mut sh = Command::new("sh");
        sh.args(["-c", &ours(command)])
            .current_dir(dir.path())
            .env("PATH", &path)
            .env("SPOOLD_LISTEN", format!("127.0.0.1:{api}"))
            .env("SPOOLD_URL", format!("http://127.0.0.1:{api}"))
            .env_remove("SPOOLD_TOKEN_FILE")
            .env_remove("SPOOLD_DB")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0);
        sh
    };
    let _receive = Running(shell(&commands[0], "receive.log").spawn().expect("receive"));
    let _daemon = Running(shell(&commands[1], "spoold.log").spawn().expect("spoold"));
    let log = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log("spoold.log").contains("\"listening\"") {
        assert!(
            Instant::now() < deadline,
            "spoold never listened:\n{}",
            log("spoold.log")
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut send = Running(shell(&commands[2], "send.log").spawn().expect("send"));
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = send.0.try_wait().expect("send") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "send --wait never ended:\n{}",
            log("send.log")
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let sent = log("send.log");
    assert!(
        status.success(),
        "{status:?}\n{sent}\n{}",
        log("spoold.log")
    );
    let lines: Vec<&str> = sent.lines().collect();
    assert_eq!(lines.len(), 2, "{sent}");
    let id = lines[0]
        .split_whitespace()
        .nth(1)
        .expect("the delivery id")
        .to_owned();
    assert!(
        lines[0].starts_with(&format!(
            "queued  {id}  pending  0/100  POST  http://127.0.0.1:{receiver}/hook"
        )),
        "{sent}"
    );
    assert!(
        lines[1].starts_with(&format!("wait  {id}  succeeded  1/100  POST")),
        "{sent}"
    );
    let received = log("receive.log");
    assert!(
        received.contains(&format!(
            "POST /hook  delivery {id}  attempt 1  application/json  17 bytes  -> 200\n  {{\"hello\":\"world\"}}\n"
        )),
        "{received}"
    );
    // The daemon keeps its queue where the README says.
    assert!(dir.path().join("data/spoold.db").is_file());
}
