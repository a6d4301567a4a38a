//! The README's runnable sections, run as they are written there, each from an empty
//! directory: the quick start (the three commands of its second block, in a shell each), the
//! retry walkthrough (its commands, and those its prose gives, Ctrl-C included), the first task
//! (its configuration file and its three commands), and the crontab line (under cron's
//! environment: its `PATH=` line, and nothing else). Only the ports are the test's own
//! (two run at once otherwise): `SPOOLD_LISTEN` and `SPOOLD_URL` point the daemon and `spoolctl`
//! at a free one, and a receiver's address becomes another; the crontab's target is that
//! receiver, and its `/home/you/.cargo/bin` the directory of the binaries under test.

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

/// Whether a process of process group `group` is alive (zombies aside), from /proc.
fn group_alive(group: i32) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.first() != Some(&"Z") && fields.get(2) == Some(&group.to_string().as_str())
            })
        })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The lines (blank ones left out) of the first fenced block of kind `lang` after `marker` in
/// the README.
fn readme_block(marker: &str, lang: &str) -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let at = readme.find(marker).expect(marker);
    let block = &readme[at..];
    let fence = format!("```{lang}\n");
    let start = block.find(&fence).expect("the block") + fence.len();
    let end = start + block[start..].find("```").expect("its end");
    block[start..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// The README's section that begins with the heading `marker`, up to the next `## `.
fn readme_section(marker: &str) -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("README.md");
    let at = readme.find(marker).expect(marker);
    let section = &readme[at..];
    let end = section[marker.len()..]
        .find("\n## ")
        .map_or(section.len(), |end| end + marker.len());
    section[..end].to_owned()
}

/// The lines (blank ones left out) of every fenced block of kind `lang` in `text`.
fn blocks(text: &str, lang: &str) -> Vec<Vec<String>> {
    let fence = format!("```{lang}\n");
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&fence) {
        let body = &rest[start + fence.len()..];
        let end = body.find("```").expect("the block's end");
        found.push(
            body[..end]
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect(),
        );
        rest = &body[end + 3..];
    }
    found
}

/// The commands of the README's quick start block.
fn readme_commands() -> Vec<String> {
    readme_block("Then three commands", "sh")
}

/// The directory of the binaries under test, and a `PATH` that finds them first.
fn binaries() -> (std::path::PathBuf, String) {
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
    (bin, path)
}

/// `sh -c COMMAND` in `dir`, in a process group of its own, its output into the file `out`
/// there, with the daemon's and `spoolctl`'s address the test's port `api`.
fn shell(dir: &Path, path: &str, api: u16, command: &str, out: &str) -> Command {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(dir.join(out)).expect("log file");
    let mut sh = Command::new("sh");
    sh.args(["-c", command])
        .current_dir(dir)
        .env("PATH", path)
        // The user is the test's: its home (where the daemon says where its maildrop is) is
        // the test's directory, as cron's HOME below.
        .env("HOME", dir)
        .env_remove("XDG_STATE_HOME")
        .env_remove("SPOOLD_MAILDROP")
        .env("SPOOLD_LISTEN", format!("127.0.0.1:{api}"))
        .env("SPOOLD_URL", format!("http://127.0.0.1:{api}"))
        .env_remove("SPOOLD_TOKEN_FILE")
        .env_remove("SPOOLD_DB")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .process_group(0);
    sh
}

/// Wait (at most `secs`) until the file `name` in `dir` holds `text`.
fn wait_for(dir: &Path, name: &str, text: &str, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let log = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        if log.contains(text) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never said {text:?}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ctrl-C in the command's terminal: SIGINT to its process group (the shell dies of it, the
/// command ends as it does on Ctrl-C); then wait (at most `secs`) for the shell's exit.
fn interrupt(running: &mut Running, secs: u64) -> std::process::ExitStatus {
    let group = format!("-{}", running.0.id());
    let sent = Command::new("kill")
        .args(["-INT", "--", &group])
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -INT {group}");
    exit_of(running, secs)
}

/// Wait (at most `secs`) for a running command's exit.
fn exit_of(running: &mut Running, secs: u64) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(status) = running.0.try_wait().expect("wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "the command never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let (_, path) = binaries();
    let shell = |command: &str, out: &str| shell(dir.path(), &path, api, &ours(command), out);
    let _receive = Running(shell(&commands[0], "receive.log").spawn().expect("receive"));
    let _daemon = Running(shell(&commands[1], "spoold.log").spawn().expect("spoold"));
    let log = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    wait_for(dir.path(), "spoold.log", "\"listening\"", 30);

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

/// The README's first task: its configuration file, the daemon started with it, a task
/// submitted and waited for, and its output read back — each command as it is written there
/// (`ID` becomes the id `submit` printed).
#[test]
fn the_readme_first_task_runs() {
    let config = readme_block("## A first task", "toml");
    let commands = readme_block("## A first task", "sh");
    assert_eq!(commands.len(), 3, "{commands:?}");
    let api = free_port();
    let dir = TempDir::new().expect("temp dir");
    std::fs::write(dir.path().join("hello.toml"), config.join("\n") + "\n").expect("hello.toml");
    let (_, path) = binaries();
    let log = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let _daemon = Running(
        shell(dir.path(), &path, api, &commands[0], "spoold.log")
            .spawn()
            .expect("spoold"),
    );
    wait_for(dir.path(), "spoold.log", "\"listening\"", 30);

    let mut submit = Running(
        shell(dir.path(), &path, api, &commands[1], "submit.log")
            .spawn()
            .expect("submit"),
    );
    let status = exit_of(&mut submit, 60);
    let said = log("submit.log");
    assert!(
        status.success(),
        "{status:?}\n{said}\n{}",
        log("spoold.log")
    );
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    let id = lines[0].split_whitespace().nth(1).expect("the task id");
    assert_eq!(
        lines[0],
        format!("submitted  {id}  pending  0/1  hello"),
        "{said}"
    );
    assert_eq!(
        lines[1],
        format!("wait  {id}  succeeded  1/1  hello"),
        "{said}"
    );

    assert!(commands[2].contains(" ID"), "{}", commands[2]);
    let logs = commands[2].replacen(" ID", &format!(" {id}"), 1);
    let mut read = Running(
        shell(dir.path(), &path, api, &logs, "logs.log")
            .spawn()
            .expect("logs"),
    );
    let status = exit_of(&mut read, 30);
    assert!(status.success(), "{status:?}\n{}", log("logs.log"));
    assert_eq!(log("logs.log"), "hello, cron\n");
}

/// The README's crontab line, run as cron runs it: `sh -c` with the line's command (`\\%`
/// made `%`, as cron does), an environment of nothing but the crontab's `PATH=` line and what
/// cron itself sets (`HOME`, `LOGNAME`, `SHELL`). It queues once however often it runs (its
/// idempotency key), prints nothing on success (cron would mail it), and a job without the
/// `PATH=` line fails with exit 127; with the daemon stopped, it is dropped into the daemon's
/// maildrop (exit 0, nothing printed) and is the same delivery once the daemon picks it up.
#[test]
fn the_readme_crontab_line_works_under_crons_environment() {
    let crontab = readme_block("## From cron", "crontab");
    assert_eq!(crontab.len(), 2, "{crontab:?}");
    let (bin, path) = binaries();
    let cron_path = crontab[0]
        .strip_prefix("PATH=")
        .expect("a PATH= line first")
        .replace("/home/you/.cargo/bin", &bin.display().to_string());
    // Five time fields, then the command, in which cron turns `\\%` into `%` (and a bare `%`
    // into a new line: the README has none).
    let job = crontab[1]
        .splitn(6, ' ')
        .nth(5)
        .expect("a command")
        .to_owned();
    assert!(!job.replace("\\%", "").contains('%'), "a bare % in {job}");
    let job = job.replace("\\%", "%");
    let (api, receiver) = (free_port(), free_port());
    let job = job.replacen("backup-all", "true", 1).replace(
        "https://hooks.example.com/",
        &format!("http://127.0.0.1:{receiver}/"),
    );

    let dir = TempDir::new().expect("temp dir");
    let log = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let _receive = Running(
        shell(
            dir.path(),
            &path,
            api,
            &format!("spoolctl receive --listen 127.0.0.1:{receiver}"),
            "receive.log",
        )
        .spawn()
        .expect("receive"),
    );
    let daemon = Running(
        shell(
            dir.path(),
            &path,
            api,
            "spoold --allow-target 127.0.0.1/32",
            "spoold.log",
        )
        .spawn()
        .expect("spoold"),
    );
    wait_for(dir.path(), "spoold.log", "\"listening\"", 30);
    let cron = |path: &str| {
        Command::new("/bin/sh")
            .args(["-c", &job])
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", path)
            .env("HOME", dir.path())
            .env("LOGNAME", "root")
            .env("SHELL", "/bin/sh")
            // The test's port in place of the default 127.0.0.1:8080.
            .env("SPOOLD_URL", format!("http://127.0.0.1:{api}"))
            .stdin(Stdio::null())
            .output()
            .expect("sh")
    };
    for run in 1..=2 {
        let out = cron(&cron_path);
        assert!(
            out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
            "run {run}: {out:?}\n{}",
            log("spoold.log")
        );
    }
    wait_for(dir.path(), "receive.log", "POST /backup", 30);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        log("receive.log").matches("POST /backup").count(),
        1,
        "{}",
        log("receive.log")
    );

    // Without the PATH= line: cron's own PATH, where no spoolctl is (unless a package put one
    // in /usr/bin).
    if !Path::new("/usr/bin/spoolctl").exists() && !Path::new("/bin/spoolctl").exists() {
        let out = cron("/usr/bin:/bin");
        assert_eq!(out.status.code(), Some(127), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("spoolctl: not found"),
            "{out:?}"
        );
    }

    // The daemon stopped: the job's send is dropped into the daemon's maildrop (found where
    // the daemon said, in the user's home) and exits 0, printing nothing but on stdout; the
    // daemon, started again, picks it up — and its key makes it the same delivery, sent once.
    let group = daemon.0.id() as i32;
    drop(daemon);
    // Its shell goes at once; the daemon itself (and its hold on the database) a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    while group_alive(group) {
        assert!(
            Instant::now() < deadline,
            "the daemon's group outlived its kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = cron(&cron_path);
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "{out:?}"
    );
    let maildrop = dir.path().join("data/maildrop");
    let dropped = || {
        std::fs::read_dir(&maildrop)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".drop"))
            .count()
    };
    assert_eq!(
        dropped(),
        1,
        "the send was dropped into {}",
        maildrop.display()
    );
    let _daemon = Running(
        shell(
            dir.path(),
            &path,
            api,
            "spoold --allow-target 127.0.0.1/32",
            "spoold-again.log",
        )
        .spawn()
        .expect("spoold"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while dropped() > 0 {
        assert!(
            Instant::now() < deadline,
            "not picked up: {}",
            log("spoold-again.log")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        log("receive.log").matches("POST /backup").count(),
        1,
        "{}",
        log("receive.log")
    );
}

/// The README's "Watching it retry", as it is written there: a receiver that fails three times,
/// a send that waits through the retries, its attempts and the queue; then, the receiver
/// stopped, a send whose delivery outlives a Ctrl-C of the daemon (it is still pending, its
/// attempts counted, when the daemon is started again) and arrives once the receiver is back.
/// `ID` becomes the id each send printed; the commands the prose names are run as it names
/// them.
#[test]
fn the_readme_retry_walkthrough_works() {
    let section = readme_section("## Watching it retry");
    let blocks = blocks(&section, "sh");
    assert_eq!(blocks.len(), 2, "{blocks:?}");
    let (retry, outlive) = (&blocks[0], &blocks[1]);
    assert_eq!((retry.len(), outlive.len()), (4, 2), "{blocks:?}");
    // The prose's commands: the daemon started again as before, `get`, the receiver again.
    let daemon = "spoold --allow-target 127.0.0.1/32";
    for said in [daemon, "spoolctl get ID", "spoolctl receive"] {
        assert!(section.contains(&format!("`{said}`")), "{said}");
    }
    assert!(readme_commands()[1].starts_with(daemon));

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
    let (_, path) = binaries();
    let start = |command: &str, out: &str| {
        Running(
            shell(dir.path(), &path, api, &ours(command), out)
                .spawn()
                .expect(command),
        )
    };
    let log = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    // A command run to its end: its exit status and what it printed.
    let run = |command: &str, out: &str| {
        let status = exit_of(&mut start(command, out), 60);
        (status, log(out))
    };
    let with_id = |command: &str, id: &str| {
        assert!(command.contains(" ID"), "{command}");
        command.replacen(" ID", &format!(" {id}"), 1)
    };

    // A receiver that fails three times; the send waits through the retries.
    let mut failing = start(&retry[0], "receive-fail.log");
    let mut spoold = start(daemon, "spoold.log");
    wait_for(dir.path(), "spoold.log", "\"listening\"", 30);
    let (status, sent) = run(&retry[1], "send.log");
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
        .expect("an id")
        .to_owned();
    let url = format!("http://127.0.0.1:{receiver}/hook");
    assert!(
        lines[0].starts_with(&format!("queued  {id}  pending  0/100  POST  {url}")),
        "{sent}"
    );
    assert!(
        lines[1].starts_with(&format!("wait  {id}  succeeded  4/100  POST  {url}")),
        "{sent}"
    );
    let (status, attempts) = run(&with_id(&retry[2], &id), "attempts.log");
    assert!(status.success(), "{attempts}");
    let rows: Vec<Vec<&str>> = attempts
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let outcomes: Vec<(&str, &str, &str, &str)> =
        rows.iter().map(|r| (r[0], r[1], r[3], r[4])).collect();
    assert_eq!(
        outcomes,
        [
            ("1", "1", "retry", "503"),
            ("1", "2", "retry", "503"),
            ("1", "3", "retry", "503"),
            ("1", "4", "succeeded", "200"),
        ],
        "{attempts}"
    );
    let (status, listed) = run(&retry[3], "list.log");
    assert!(status.success(), "{listed}");
    assert!(
        listed
            .lines()
            .nth(1)
            .is_some_and(|row| row.starts_with(&id) && row.contains("succeeded")),
        "{listed}"
    );

    // The receiver stopped: the next send is queued, and its attempts are refused.
    interrupt(&mut failing, 15);
    let (status, sent) = run(&outlive[0], "send-later.log");
    assert!(status.success(), "{sent}");
    let later = sent.split_whitespace().nth(1).expect("an id").to_owned();
    assert!(
        sent.starts_with(&format!("queued  {later}  pending")),
        "{sent}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, attempts) = run(&with_id(&outlive[1], &later), "attempts-later.log");
        assert!(status.success(), "{attempts}");
        if attempts.contains("connect_failed") && attempts.contains("retry") {
            break;
        }
        assert!(Instant::now() < deadline, "never refused: {attempts}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Ctrl-C the daemon while it retries, start it again: the delivery is still there.
    interrupt(&mut spoold, 30);
    assert!(
        log("spoold.log").contains("\"stopped\""),
        "{}",
        log("spoold.log")
    );
    let _spoold = start(daemon, "spoold-again.log");
    wait_for(dir.path(), "spoold-again.log", "\"listening\"", 30);
    let deadline = Instant::now() + Duration::from_secs(30);
    let shown = loop {
        let (status, shown) = run(&format!("spoolctl get {later}"), "get.log");
        assert!(status.success(), "{shown}");
        // An attempt under way is `in_flight` for a moment.
        let status = shown.lines().find_map(|l| l.trim().strip_prefix("status:"));
        if status.is_some_and(|s| s.trim() == "pending") {
            break shown;
        }
        assert!(Instant::now() < deadline, "never pending: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(shown.contains("  next attempt:"), "{shown}");
    assert!(
        shown.contains("last error code: connect_failed\n"),
        "{shown}"
    );

    // The receiver back: the delivery arrives, as a later attempt than the first.
    let _receive = start("spoolctl receive", "receive.log");
    let arrived = format!("POST /hook  delivery {later}  attempt ");
    wait_for(dir.path(), "receive.log", &arrived, 60);
    let received = log("receive.log");
    let attempt: u32 = received[received.find(&arrived).expect("arrived") + arrived.len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("an attempt number");
    assert!(attempt >= 2, "{received}");
}
