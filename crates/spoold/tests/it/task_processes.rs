//! What the daemon does to the processes of attempts: SIGTERM once per process, nothing left
//! a zombie, a worker that cleared its environment ended after a crash all the same, and
//! attempts run as the user their type names.

use std::time::Duration;

use serde_json::json;
use spool_testkit::{privileged, Api, DaemonProcess};
use tempfile::TempDir;

use crate::task_locks::config_with;
use crate::tasks::{get, id, kill_all, submit, wait_gone, wait_gone_within, wait_task, Setup};

/// Zombies whose parent is `parent`, from /proc.
pub(crate) fn zombie_children(parent: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
                let mut fields = rest.split_whitespace();
                let state = fields.next();
                let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
                state == Some("Z") && ppid == Some(parent)
            })
        })
        .collect()
}

/// The `stubborn` type, with `timeout` and `kill_grace`: its leader, a member of its group and
/// an escapee (it calls `setsid`) each trap SIGTERM, write it down (`term PID` in `terms`) and
/// stay; their pids are in `pids`. It ignores SIGPIPE, so a crash of the daemon does not end it.
fn stubborn(setup: &Setup, timeout: &str, grace: &str) -> String {
    setup.script(
        "stubborn.sh",
        r#"trap '' PIPE
trap 'echo "term $$" >> "$TERMS"' TERM
sh -c 'trap "echo \"term \$\$\" >> \"$TERMS\"" TERM; echo $$ >> "$PIDS"; while :; do sleep 0.05; done' &
setsid sh -c 'trap "echo \"term \$\$\" >> \"$TERMS\"" TERM; echo $$ >> "$PIDS"; while :; do sleep 0.05; done' &
echo $$ >> "$PIDS"
while :; do sleep 0.05; done"#,
    );
    config_with(
        setup,
        &format!(
            "\n[tasks.stubborn]\ncommand = [\"{}\"]\ntimeout = \"{timeout}\"\n\
             kill_grace = \"{grace}\"\nenv = {{ TERMS = \"{}\", PIDS = \"{}\" }}\n",
            setup.path("stubborn.sh"),
            setup.path("terms"),
            setup.path("pids"),
        ),
    )
}

/// A timeout stops an attempt whose leader, a member of its group and an escapee (it called
/// `setsid`) all trap SIGTERM and stay: each gets SIGTERM exactly once — the group's members
/// through the group, the escapee on its own — and SIGKILL after the grace. Tools that take a
/// second SIGTERM for "force quit now" keep their graceful shutdown.
#[tokio::test(flavor = "multi_thread")]
async fn each_process_gets_sigterm_once() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = stubborn(&setup, "1s", "1s");
    let daemon = crate::InProcess::boot_in(
        TempDir::new().expect("temp dir"),
        crate::Targets::Loopback,
        &["--config", &config, "--task-cgroup", "off"],
    )
    .await;
    let (_, task) = submit(
        &daemon.api,
        json!({"type": "stubborn", "idempotencyKey": "s"}),
    )
    .await;
    let done = wait_task(&daemon.api, &id(&task), &["timed_out", "failed"]).await;
    assert_eq!(done["status"], "timed_out", "{done}");
    let pids = std::fs::read_to_string(setup.dir.join("pids")).expect("pids");
    let terms = std::fs::read_to_string(setup.dir.join("terms")).unwrap_or_default();
    let pids: Vec<&str> = pids.lines().collect();
    assert_eq!(pids.len(), 3, "{pids:?}");
    for pid in &pids {
        let got = terms
            .lines()
            .filter(|l| *l == format!("term {pid}"))
            .count();
        assert_eq!(got, 1, "process {pid} got SIGTERM {got} times: {terms:?}");
    }
    let attempts = get(&daemon.api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    assert_eq!(attempts["attempts"][0]["killed"], true, "{attempts}");
}

/// Escapees of attempts (`setsid sleep 1000 &` as the script exits, and the escapee of scripts
/// that time out) are ended with their attempt and re-parented to the daemon, its subreaper,
/// which reaps them: no zombie is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn escapees_leave_no_zombies() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script("leave.sh", "setsid sleep 1000 &\nexit 0");
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.leave]\ncommand = [\"{}\"]\nkill_grace = \"300ms\"\nparams.n = {{ pattern = \"[0-9]\" }}\n",
            setup.path("leave.sh"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(without_cgroups(&data, &config))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let mut ids = Vec::new();
    for n in 0..3 {
        let (_, t) = submit(
            &api,
            json!({"type": "leave", "params": {"n": n.to_string()}}),
        )
        .await;
        ids.push(id(&t));
    }
    for n in 0..2 {
        let (_, t) = submit(
            &api,
            json!({"type": "hang", "idempotencyKey": format!("h{n}")}),
        )
        .await;
        ids.push(id(&t));
    }
    for id in &ids {
        wait_task(&api, id, &["succeeded", "timed_out", "failed"]).await;
    }
    let left = wait_gone(&setup.processes()).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
    let mut zombies = zombie_children(daemon.pid());
    for _ in 0..50 {
        if zombies.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        zombies = zombie_children(daemon.pid());
    }
    assert!(
        zombies.is_empty(),
        "zombie children of the daemon: {zombies:?}"
    );
}

/// kill -9 of the daemon while an attempt's worker runs that cleared its environment and
/// ignores SIGPIPE, and whose leader is about to exit: nothing about the worker names the
/// attempt but its ancestry. Its supervisor, whose descendant it is, ends it at once with no
/// daemon running; the restarted daemon waits for the supervisor's record, counts what it
/// ended, and settles the task.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_cleared_its_environment_is_ended_after_a_crash() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "worker.sh",
        r#"echo "raw: the summary as the script wrote it" > "$SPOOLD_RESULT_FILE"
env -i /bin/sh -c 'trap "" PIPE; echo $$ > "$0.pid"; while :; do echo x >> "$0"; sleep 0.05; done' "$GROW" &
sleep 1"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.worker]\ncommand = [\"{}\"]\ntimeout = \"60s\"\nenv = {{ GROW = \"{}\" }}\n",
            setup.path("worker.sh"),
            setup.path("grow"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let opts =
        || crate::process_opts(&data).args(["--config", config.as_str(), "--task-cgroup", "off"]);
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "worker", "idempotencyKey": "w"})).await;
    let size = || std::fs::metadata(setup.dir.join("grow")).map_or(0, |m| m.len());
    let worker = || std::fs::read_to_string(setup.dir.join("grow.pid")).ok();
    for _ in 0..200 {
        if worker().is_some() && size() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let worker: i32 = worker()
        .expect("the worker started")
        .trim()
        .parse()
        .expect("a pid");
    daemon.kill9();
    let left = wait_gone(&[worker]).await;
    kill_all(&left);
    assert!(left.is_empty(), "the worker outlived its daemon");
    let stopped = size();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(size(), stopped, "the file still grows");
    let daemon = DaemonProcess::start(opts()).await.expect("restart");
    let api = Api::new(daemon.base_url());
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    assert_eq!(t["errorCode"], "daemon_restart", "{t}");
    let recovered = api
        .metric("spoold_task_recovered_processes_total")
        .await
        .expect("metrics");
    assert!(
        recovered >= Some(2.0),
        "the leader and the worker: {recovered:?}"
    );
    // The raw result file of the crashed attempt (it may hold secrets) is gone, and so is the
    // supervisor's record.
    for dir in ["task-results", "task-attempts"] {
        let files: Vec<_> = std::fs::read_dir(data.path().join("data").join(dir))
            .expect("dir")
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(files.is_empty(), "{files:?}");
    }
}

/// A type removed from the configuration while its task waits for a retry, keeping its lock:
/// at the next start the task goes to `manual_review` (`type_undeclared`, naming the type) and
/// its lock is free.
#[tokio::test(flavor = "multi_thread")]
async fn tasks_of_a_removed_type_go_to_review_and_free_their_locks() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let base = std::fs::read_to_string(setup.config()).expect("config");
    let extra = format!(
        "\n[tasks.gone]\ncommand = [\"{}\", \"75\"]\nlocks = [\"db\"]\nmax_attempts = 5\n\
         hold_locks_between_attempts = true\nbackoff = {{ base = \"1h\", cap = \"1h\" }}\n",
        setup.path("exit.sh"),
    );
    let config = config_with(&setup, &extra);
    let data = TempDir::new().expect("data dir");
    let opts = || crate::process_opts(&data).args(["--config", config.as_str()]);
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "gone", "idempotencyKey": "g"})).await;
    // It fails (75: transient) and waits an hour for its retry, holding its lock.
    for _ in 0..500 {
        let t = get(&api, &format!("/v1/tasks/{}", id(&task))).await;
        if t["status"] == "pending" && t["attempt"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let locks = get(&api, "/v1/locks").await;
    assert_eq!(locks["locks"][0]["name"], "db", "{locks}");
    daemon.terminate().await.expect("stop");
    std::fs::write(&config, base).expect("config without the type");
    let daemon = DaemonProcess::start(opts()).await.expect("restart");
    let api = Api::new(daemon.base_url());
    let t = get(&api, &format!("/v1/tasks/{}", id(&task))).await;
    assert_eq!(
        (&t["status"], &t["errorCode"]),
        (&json!("manual_review"), &json!("type_undeclared")),
        "{t}"
    );
    assert!(
        t["error"].as_str().is_some_and(|e| e.contains("\"gone\"")),
        "{t}"
    );
    let locks = get(&api, "/v1/locks").await;
    assert_eq!(locks["locks"], json!([]), "{locks}");
    drop(daemon);
}

/// A type with `user = "nobody"` runs its attempts as that user (the daemon runs as root), its
/// result file given to it; the daemon reads the summary back.
#[tokio::test(flavor = "multi_thread")]
async fn a_type_runs_as_the_user_it_names() {
    if privileged::available("SPOOLD_REQUIRE_TOOLS", privileged::require_root()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "whoami.sh",
        r#"echo "uid $(id -u) gid $(id -g) groups $(id -G)" > "$SPOOLD_RESULT_FILE""#,
    );
    // The scripts and the daemon's files live in private temporary directories: let `nobody`
    // through (the daemon refuses to start otherwise, naming the directory in the way).
    use std::os::unix::fs::PermissionsExt;
    let data = TempDir::new().expect("temp dir");
    std::fs::create_dir(data.path().join("data")).expect("data dir");
    for d in [dir.path(), data.path(), &data.path().join("data")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711)).expect("chmod");
    }
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.whoami]\ncommand = [\"{}\"]\nuser = \"nobody\"\n",
            setup.path("whoami.sh"),
        ),
    );
    let daemon =
        crate::InProcess::boot_in(data, crate::Targets::Loopback, &["--config", &config]).await;
    let (_, task) = submit(
        &daemon.api,
        json!({"type": "whoami", "idempotencyKey": "w"}),
    )
    .await;
    let done = wait_task(&daemon.api, &id(&task), &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let nobody = std::fs::read_to_string("/etc/passwd")
        .expect("passwd")
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"nobody"))
                .then(|| format!("uid {} gid {} groups {}", f[2], f[3], f[3]))
        })
        .expect("a nobody user");
    assert_eq!(done["resultSummary"], json!(nobody), "{done}");
}

/// The test types and one more, `name`, that exits 0 as `user`; the configuration's path.
fn type_run_as(setup: &Setup, name: &str, user: &str) -> String {
    config_with(
        setup,
        &format!(
            "\n[tasks.{name}]\ncommand = [\"{}\", \"0\"]\nuser = \"{user}\"\n",
            setup.path("exit.sh")
        ),
    )
}

/// A type whose user cannot reach the result files (the data directory is in a private
/// directory, as on a fresh machine) stops the start before the daemon binds its API or logs
/// `listening`, in one line naming the type, the user and the directory in the way (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_user_who_cannot_reach_the_result_files_stops_the_start_before_listening() {
    if privileged::available("SPOOLD_REQUIRE_TOOLS", privileged::require_root()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let config = type_run_as(&Setup::new(dir.path()), "backup", "nobody");
    // The data directory spoold creates is 0700 and root's: nobody cannot pass it.
    let data = TempDir::new().expect("data dir");
    let (status, stderr) =
        DaemonProcess::run_to_exit(crate::process_opts(&data).args(["--config", config.as_str()]))
            .await
            .expect("the daemon runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let private = data.path().join("data");
    let private = private.display();
    assert!(
        stderr.contains(&format!(
            "[tasks.backup] user = \"nobody\": that user cannot reach its result file, since \
             {private} does not let it through (chmod o+x {private}, or use a --data-dir it can \
             reach)"
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("listening"), "{stderr}");
}

/// Without the privilege to switch users, a daemon whose configuration has a type with `user`
/// refuses to start, in one line naming the type, the user and what it needs (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_type_with_a_user_needs_the_privilege_to_switch() {
    if privileged::available("SPOOLD_REQUIRE_TOOLS", privileged::require_root()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let config = type_run_as(&Setup::new(dir.path()), "as_root", "root");
    // The daemon runs as nobody, in a directory of its own; nobody reads the configuration.
    use std::os::unix::fs::PermissionsExt;
    let data = TempDir::new().expect("data dir");
    for d in [dir.path(), data.path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (status, stderr) = DaemonProcess::run_to_exit(
        crate::process_opts(&data)
            .args(["--config", config.as_str()])
            .wrapper([
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]),
    )
    .await
    .expect("the daemon runs");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("[tasks.as_root] user = \"root\": running tasks as another user needs root"),
        "{stderr}"
    );
}

/// kill -9 of the daemon, a restart, and a second kill -9 while the first crash's attempt is
/// still being ended (its processes trap SIGTERM and stay through the kill grace): each process
/// gets SIGTERM exactly once. The attempt's supervisor ends it, once, whatever happens to the
/// daemons meanwhile; no daemon signals it.
#[tokio::test(flavor = "multi_thread")]
async fn each_process_gets_sigterm_once_across_two_crashes() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = stubborn(&setup, "600s", "3s");
    let data = TempDir::new().expect("data dir");
    let opts =
        || crate::process_opts(&data).args(["--config", config.as_str(), "--task-cgroup", "off"]);
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "stubborn", "idempotencyKey": "s"})).await;
    let pids = || {
        std::fs::read_to_string(setup.dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    for _ in 0..500 {
        if pids().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pids().len(), 3, "{:?}", pids());
    daemon.kill9();
    let mut daemon = DaemonProcess::start(opts()).await.expect("restart");
    tokio::time::sleep(Duration::from_millis(500)).await;
    daemon.kill9();
    let daemon = DaemonProcess::start(opts()).await.expect("second restart");
    let api = Api::new(daemon.base_url());
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    assert_eq!(t["errorCode"], "daemon_restart", "{t}");
    let terms = std::fs::read_to_string(setup.dir.join("terms")).unwrap_or_default();
    for pid in pids() {
        let got = terms
            .lines()
            .filter(|l| *l == format!("term {pid}"))
            .count();
        assert_eq!(got, 1, "process {pid} got SIGTERM {got} times: {terms:?}");
    }
    let left = wait_gone(&setup.processes()).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
}

/// A daemon process on `data` with the task types of the file `config`, its attempts contained
/// without cgroups.
fn without_cgroups(data: &TempDir, config: &str) -> spool_testkit::DaemonOptions {
    crate::process_opts(data).args(["--config", config, "--task-cgroup", "off"])
}

/// The supervisors among the children of `daemon` (their name is `spoold-attempt`).
pub(crate) fn supervisors_of(daemon: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{daemon}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|task| {
            std::fs::read_to_string(task.path().join("children"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "spoold-attempt")
        })
        .collect()
}

/// Someone kills an attempt's supervisor (kill -9; the OOM killer would do the same): the
/// attempt's processes are re-parented to the daemon, a child subreaper, which ends them — the
/// script's group and what left it with `setsid`, its own children — before it records the
/// attempt as interrupted (`supervisor_lost`: how it ended is not known), and the type's
/// `on_interrupt` decides; nothing is left behind.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_killed_supervisor_leaves_is_ended_by_the_daemon() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "hang.sh",
        r#"sleep 1000 & echo "$!" >> "$PIDS"
setsid sh -c 'echo "$$" >> "$PIDS"; exec sleep 1000' &
echo "$$" >> "$PIDS"
sleep 1000"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.orphaned]\ncommand = [\"{}\"]\ntimeout = \"600s\"\nkill_grace = \"1s\"\n\
             env = {{ PIDS = \"{}\" }}\n",
            setup.path("hang.sh"),
            setup.path("pids"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(without_cgroups(&data, &config))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "orphaned", "idempotencyKey": "o"})).await;
    let pids = || setup.pids();
    for _ in 0..500 {
        if pids().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = pids();
    assert_eq!(started.len(), 3, "{started:?}");
    let supervisors = supervisors_of(daemon.pid());
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    kill_all(&supervisors);
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    let attempt = &attempts["attempts"][0];
    assert_eq!(
        (&attempt["outcome"], &attempt["errorCode"]),
        (&json!("interrupted"), &json!("supervisor_lost")),
        "{attempts}"
    );
    assert!(
        attempt["error"]
            .as_str()
            .is_some_and(|e| e.contains("supervisor ended abnormally")),
        "{t}"
    );
    let left = wait_gone(&started).await;
    kill_all(&left);
    assert!(
        left.is_empty(),
        "the daemon left the attempt's processes: {left:?}"
    );
    let zombies = zombie_children(daemon.pid());
    assert!(
        zombies.is_empty(),
        "zombie children of the daemon: {zombies:?}"
    );
}

/// What is installed beside the daemon's executable, for
/// [`each_attempt_is_supervised_by_the_spoold_attempt_beside_the_daemon`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beside {
    /// This build's `spoold-attempt`.
    Ours,
    /// Nothing.
    Nothing,
    /// Another program by that name (as one of another build would, it answers `--version`
    /// with another line).
    OtherBuild,
}

/// `from` at `to`: a hard link where the file system allows, else a copy.
fn link_or_copy(from: &std::path::Path, to: &std::path::Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).expect("copy the binary");
    }
}

/// The supervisor of each attempt is `spoold-attempt` when this build's is installed beside the
/// daemon (`/proc/PID/exe`, not a name), copied into memory at the daemon's start: replacing the
/// file meanwhile, as an upgrade does, changes nothing for the running daemon. With none beside it,
/// or one of another build, the daemon re-executes itself and says why in its log; the attempt
/// is supervised the same (it times out and its processes are ended).
#[tokio::test(flavor = "multi_thread")]
async fn each_attempt_is_supervised_by_the_spoold_attempt_beside_the_daemon() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = setup.config().display().to_string();
    for beside in [Beside::Ours, Beside::Nothing, Beside::OtherBuild] {
        let bin = TempDir::new().expect("bin dir");
        let spoold = bin.path().join("spoold");
        let attempt = bin.path().join("spoold-attempt");
        link_or_copy(&spool_testkit::cargo_bin("spoold"), &spoold);
        match beside {
            Beside::Ours => link_or_copy(&spool_testkit::cargo_bin("spoold-attempt"), &attempt),
            Beside::OtherBuild => link_or_copy(std::path::Path::new("/bin/echo"), &attempt),
            Beside::Nothing => {}
        }
        let data = TempDir::new().expect("data dir");
        let mut daemon = DaemonProcess::start(without_cgroups(&data, &config).program(&spoold))
            .await
            .expect("daemon");
        if beside == Beside::Ours {
            // An upgrade puts a new file in its place (a rename, as dpkg and install(1) do);
            // this one would fail every attempt.
            let new = bin.path().join("spoold-attempt.new");
            executable_script(&new, "exit 1");
            std::fs::rename(&new, &attempt).expect("replace spoold-attempt");
        }
        let api = Api::new(daemon.base_url());
        let _ = std::fs::remove_file(setup.path("pids"));
        let (status, task) = submit(&api, json!({"type": "hang"})).await;
        assert_eq!(status, 201, "{task}");
        for _ in 0..500 {
            if setup.pids().len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            setup.pids().len(),
            3,
            "{beside:?}: the attempt did not start"
        );
        let supervisors = supervisors_of(daemon.pid());
        assert_eq!(supervisors.len(), 1, "{beside:?}: {supervisors:?}");
        let exe = std::fs::read_link(format!("/proc/{}/exe", supervisors[0])).expect("exe");
        let argv = std::fs::read(format!("/proc/{}/cmdline", supervisors[0])).expect("cmdline");
        let argv: Vec<String> = argv
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let log = || daemon.stderr();
        match beside {
            Beside::Ours => {
                // Not the file now at that path: the daemon's private copy of the one it
                // found, in memory.
                assert_eq!(
                    exe,
                    std::path::PathBuf::from("/memfd:spoold-attempt (deleted)"),
                    "{argv:?}"
                );
                assert_eq!(argv, ["spoold-attempt", "--supervise-attempt"]);
                assert!(
                    log().contains("supervised by the spoold-attempt beside this spoold"),
                    "{}",
                    log()
                );
            }
            Beside::Nothing | Beside::OtherBuild => {
                assert_eq!(exe, spoold, "{beside:?}: {argv:?}");
                assert_eq!(argv, ["/proc/self/exe", "--supervise-attempt"]);
                let why = if beside == Beside::Nothing {
                    "no spoold-attempt beside it"
                } else {
                    "spoold-attempt: --version says"
                };
                assert!(log().contains(why), "{beside:?}: {}", log());
            }
        }
        let done = wait_task(&api, &id(&task), &["timed_out", "failed"]).await;
        assert_eq!(done["status"], "timed_out", "{beside:?}: {done}");
        let left = wait_gone(&setup.pids()).await;
        kill_all(&left);
        assert!(left.is_empty(), "{beside:?}: left running: {left:?}");
        daemon.terminate().await.expect("stop the daemon");
    }
}

/// An executable shell script at `path`.
fn executable_script(path: &std::path::Path, body: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Send `signal` to `pids`.
fn signal_pids(pids: &[i32], signal: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// The `stubborn` attempt's three processes, once each has written its pid.
async fn stubborn_started(setup: &Setup) -> Vec<i32> {
    for _ in 0..500 {
        if setup.pids().len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pids = setup.pids();
    assert_eq!(pids.len(), 3, "{pids:?}");
    pids
}

/// How many times each of `pids` wrote that it got SIGTERM.
fn terms_of(setup: &Setup, pids: &[i32]) -> Vec<usize> {
    let terms = std::fs::read_to_string(setup.dir.join("terms")).unwrap_or_default();
    pids.iter()
        .map(|pid| {
            terms
                .lines()
                .filter(|l| *l == format!("term {pid}"))
                .count()
        })
        .collect()
}

/// The daemon owns the deadline: a supervisor stopped (SIGSTOP) in the middle of an attempt
/// stops no clock. The daemon notices that it does not answer, logs it, and at the attempt's
/// timeout ends the attempt itself — kills the supervisor, then SIGTERM once to each process
/// of the attempt, SIGKILL after the grace — and records it `timed_out` with why. Before, the
/// task stayed `running` as long as the supervisor was stopped.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_supervisor_stops_no_clock() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = stubborn(&setup, "4s", "1s");
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(without_cgroups(&data, &config))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let submitted = std::time::Instant::now();
    let (_, task) = submit(&api, json!({"type": "stubborn", "idempotencyKey": "s"})).await;
    let pids = stubborn_started(&setup).await;
    let supervisors = supervisors_of(daemon.pid());
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    signal_pids(&supervisors, rustix::process::Signal::STOP);
    let t = wait_task(&api, &id(&task), &["timed_out", "failed", "interrupted"]).await;
    let took = submitted.elapsed();
    // The supervisor stays stopped: it was killed, not resumed.
    let left = wait_gone(&supervisors).await;
    signal_pids(&left, rustix::process::Signal::CONT);
    kill_all(&left);
    assert!(left.is_empty(), "the silent supervisor lives: {left:?}");
    assert_eq!(t["status"], "timed_out", "{t}");
    // The timeout (4 s) and the grace (1 s), not the 20 s the supervisor was stopped for.
    assert!(took < Duration::from_secs(9), "{took:?}");
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    let attempt = &attempts["attempts"][0];
    assert_eq!(attempt["killed"], true, "{attempts}");
    assert!(
        attempt["error"]
            .as_str()
            .is_some_and(|e| e.contains("timeout") && e.contains("answered nothing")),
        "{attempts}"
    );
    assert_eq!(terms_of(&setup, &pids), [1, 1, 1], "SIGTERM once each");
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
    assert!(
        daemon.stderr().contains("does not answer"),
        "the silence is logged"
    );
}

/// Each process of an attempt gets SIGTERM once, also when its supervisor is killed during
/// the grace that followed its SIGTERM: the daemon, which ends what the supervisor left, sends
/// SIGKILL when the grace is over and no second SIGTERM (a second one means "force quit now"
/// to many tools).
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_once_when_the_supervisor_dies_during_its_grace() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = stubborn(&setup, "1s", "3s");
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(without_cgroups(&data, &config))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "stubborn", "idempotencyKey": "s"})).await;
    let pids = stubborn_started(&setup).await;
    let supervisors = supervisors_of(daemon.pid());
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    for _ in 0..500 {
        if terms_of(&setup, &pids).iter().all(|n| *n == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        terms_of(&setup, &pids),
        [1, 1, 1],
        "the supervisor's SIGTERM"
    );
    // Give the daemon the supervisor's `term` line, then kill the supervisor mid-grace.
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill_all(&supervisors);
    let killed_at = std::time::Instant::now();
    wait_task(
        &api,
        &id(&task),
        &["manual_review", "interrupted", "failed"],
    )
    .await;
    let left = wait_gone_within(&pids, Duration::from_secs(6)).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
    assert_eq!(terms_of(&setup, &pids), [1, 1, 1], "SIGTERM once each");
    // SIGKILL when the supervisor's grace would have ended, not a whole grace later.
    assert!(
        killed_at.elapsed() < Duration::from_secs(4),
        "{:?}",
        killed_at.elapsed()
    );
}

/// `--shutdown-timeout` is a promise: a graceful stop with a stopped (SIGSTOP) supervisor does
/// not wait for it — the daemon takes the attempt over once the timeout has passed, ends it
/// within its kill grace and exits, naming the silent supervisor in the log.
#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_supervisor_does_not_hold_up_a_shutdown() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = stubborn(&setup, "600s", "1s");
    let data = TempDir::new().expect("data dir");
    let mut daemon =
        DaemonProcess::start(without_cgroups(&data, &config).args(["--shutdown-timeout", "1s"]))
            .await
            .expect("daemon");
    let api = Api::new(daemon.base_url());
    submit(&api, json!({"type": "stubborn", "idempotencyKey": "s"})).await;
    let pids = stubborn_started(&setup).await;
    let supervisors = supervisors_of(daemon.pid());
    assert_eq!(supervisors.len(), 1, "{supervisors:?}");
    signal_pids(&supervisors, rustix::process::Signal::STOP);
    let asked = std::time::Instant::now();
    daemon.signal("TERM").await.expect("SIGTERM");
    let exit = daemon.wait_exit(Duration::from_secs(20)).await;
    let took = asked.elapsed();
    let left = wait_gone(&supervisors).await;
    signal_pids(&left, rustix::process::Signal::CONT);
    kill_all(&left);
    let exit = exit.expect("the daemon exits");
    assert!(exit.success(), "{exit:?}");
    // Shutdown timeout 1 s, silence 2 s, grace 1 s, and slack for a loaded machine.
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(left.is_empty(), "the silent supervisor lives: {left:?}");
    let left = wait_gone(&pids).await;
    kill_all(&left);
    assert!(left.is_empty(), "{left:?}");
    let log = daemon.stderr();
    assert!(
        log.contains("taking over an attempt from its silent supervisor")
            && log.contains(&format!("\"supervisor\":{}", supervisors[0])),
        "{log}"
    );
}

/// The supervisor program changed in place under a running daemon — overwritten (`cp` over it)
/// by a program that never answers, truncated, made not executable — changes nothing: the
/// daemon starts supervisors from the private copy it made at its start. Before, every later
/// attempt failed ("Broken pipe", `supervisor_lost`) with no word of why.
#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_program_changed_in_place_breaks_nothing() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = setup.config().display().to_string();
    let bin = TempDir::new().expect("bin dir");
    let spoold = bin.path().join("spoold");
    let attempt = bin.path().join("spoold-attempt");
    link_or_copy(&spool_testkit::cargo_bin("spoold"), &spoold);
    // A copy of its own: changed below, in place.
    std::fs::copy(spool_testkit::cargo_bin("spoold-attempt"), &attempt).expect("copy");
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(without_cgroups(&data, &config).program(&spoold))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let changes: [(&str, &dyn Fn()); 3] = [
        (
            "overwritten in place by a program that never answers",
            &|| std::fs::write(&attempt, "#!/bin/sh\nexec sleep 1000\n").expect("overwrite"),
        ),
        ("truncated", &|| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&attempt)
                .and_then(|f| f.set_len(0))
                .expect("truncate")
        }),
        ("made not executable", &|| {
            std::fs::set_permissions(&attempt, std::fs::Permissions::from_mode(0o644))
                .expect("chmod")
        }),
    ];
    for (n, (what, change)) in changes.iter().enumerate() {
        change();
        let (status, task) = submit(
            &api,
            json!({"type": "exit", "params": {"code": "0"}, "idempotencyKey": format!("x{n}")}),
        )
        .await;
        assert_eq!(status, 201, "{task}");
        let done = wait_task(&api, &id(&task), &["succeeded", "failed", "interrupted"]).await;
        assert_eq!(done["status"], "succeeded", "{what}: {done}");
    }
    let log = daemon.stderr();
    assert!(!log.contains("Broken pipe"), "{log}");
}
