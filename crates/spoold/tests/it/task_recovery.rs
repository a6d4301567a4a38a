//! Tasks across crashes and lost leases, tried the way an adversary would: kill -9 of the
//! daemon while TERM-trapping scripts hold a lock, a host that loses its database but keeps
//! running, a daemon that is PID 1 of a pid namespace (the same pid on every restart), and pid
//! reuse made certain in a private pid namespace.
//!
//! Lock exclusion is checked by the scripts themselves: each takes a flock on a shared file
//! for its whole life (every process of an attempt inherits the descriptor), and writes an
//! overlap down when it cannot take it at once. The flock is free only when every process that
//! held it is gone — exactly the rule the daemon must keep for its own locks.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use spool_testkit::{privileged, Api, DaemonOptions, DaemonProcess, Proxy, TestDatabase};
use tempfile::TempDir;

use crate::task_locks::config_with;
use crate::tasks::{get, id, post, submit, wait_task, Setup};

/// Holds `$LOCKFILE` (flock) from its start to the end of its last process, writes an overlap
/// down if another attempt still held it, and cleans up for `$CLEANUP` seconds on SIGTERM.
/// After a crash of the daemon its stdout and stderr have no reader: it ignores SIGPIPE, as a
/// script whose clean-up must run whatever happens to its output should.
const DEPLOY: &str = r#"trap '' PIPE
exec 9>>"$LOCKFILE"
if ! flock -n 9; then
  echo "overlap $SPOOLD_TASK_ID $SPOOLD_ATTEMPT" >> "$OVERLAPS"
  flock 9
fi
trap 'sleep "$CLEANUP"; echo "cleaned $SPOOLD_TASK_ID $SPOOLD_ATTEMPT" >> "$LOG"; exit 143' TERM
echo "start $SPOOLD_TASK_ID $SPOOLD_ATTEMPT" >> "$LOG"
sleep 1000 &
while :; do sleep 0.05; done"#;

/// Crash cycles of the lock-exclusion tests.
const CYCLES: usize = 20;

/// The `deploy` type (a lock per environment) and the `solo` type (a quota of one), both
/// re-run after a crash, both running [`DEPLOY`]; `grace` is their kill grace.
fn deploy_types(setup: &Setup, grace: &str, on_interrupt: &str) -> String {
    deploy_types_cleaning(setup, grace, on_interrupt, "0.4")
}

/// [`deploy_types`] whose clean-up (the SIGTERM trap) takes `cleanup` seconds.
fn deploy_types_cleaning(setup: &Setup, grace: &str, on_interrupt: &str, cleanup: &str) -> String {
    setup.script("deploy.sh", DEPLOY);
    let env = |lock: &str| {
        format!(
            r#"{{ LOCKFILE = "{}", OVERLAPS = "{}", LOG = "{}", CLEANUP = "{cleanup}" }}"#,
            setup.path(lock),
            setup.path("overlaps"),
            setup.path("log"),
        )
    };
    config_with(
        setup,
        &format!(
            r#"
[tasks.deploy]
command = ["{script}"]
params.env = {{ pattern = "prod|dev" }}
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "deploy:{{env}}:{{n}}"
locks = ["env:{{env}}"]
kill_grace = "{grace}"
timeout = "600s"
on_interrupt = "{on_interrupt}"
max_attempts = 100
env = {deploy_env}

[tasks.solo]
command = ["{script}"]
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "solo:{{n}}"
concurrency = 1
kill_grace = "{grace}"
timeout = "600s"
on_interrupt = "{on_interrupt}"
max_attempts = 100
env = {solo_env}
"#,
            script = setup.path("deploy.sh"),
            deploy_env = env("env.lock"),
            solo_env = env("solo.lock"),
        ),
    )
}

/// Lines of the scripts' log that start with `kind`.
fn logged(setup: &Setup, kind: &str) -> Vec<String> {
    std::fs::read_to_string(setup.dir.join("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').next() == Some(kind))
        .map(str::to_owned)
        .collect()
}

fn overlaps(setup: &Setup) -> String {
    std::fs::read_to_string(setup.dir.join("overlaps")).unwrap_or_default()
}

async fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Submit two deploys to one environment and two tasks of the quota-of-one type.
async fn submit_contenders(api: &Api) -> Vec<String> {
    let mut ids = Vec::new();
    for body in [
        json!({"type": "deploy", "params": {"env": "prod", "n": "1"}}),
        json!({"type": "deploy", "params": {"env": "prod", "n": "2"}}),
        json!({"type": "solo", "params": {"n": "1"}}),
        json!({"type": "solo", "params": {"n": "2"}}),
    ] {
        let (status, t) = submit(api, body).await;
        assert_eq!(status, 201, "{t}");
        ids.push(id(&t));
    }
    ids
}

/// Cancel every task (they run forever) and wait until each is over.
async fn cancel_all(api: &Api, ids: &[String]) {
    for id in ids {
        let (status, t) = post(api, &format!("/v1/tasks/{id}/cancel")).await;
        assert!(status == 200 || status == 409, "{status} {t}");
    }
    for id in ids {
        wait_task(
            api,
            id,
            &["canceled", "manual_review", "failed", "succeeded"],
        )
        .await;
    }
}

/// kill -9 of the daemon while one deploy holds the lock (the other waits) and one task of the
/// quota-of-one type runs (the other waits), [`CYCLES`] times; each crashed attempt's script
/// traps SIGTERM and cleans up for 0.4 s. After every restart the new daemon ends what the old
/// one left before anything else takes the lock or the slot: no script ever finds its flock
/// held by another attempt.
async fn one_holder_across_crashes(db: Option<&TestDatabase>) {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = deploy_types(&setup, "5s", "retry");
    let data = TempDir::new().expect("data dir");
    let opts = || match db {
        Some(db) => pg_host(db.url(), &data, &config),
        None => {
            crate::process_opts(&data).args(["--config", config.as_str(), "--task-lease", "3s"])
        }
    };
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let mut api = Api::new(daemon.base_url());
    let ids = submit_contenders(&api).await;
    let mut saw_ending = false;
    for cycle in 0..CYCLES {
        let want = 2 * (cycle + 1);
        wait_for("a deploy and a solo task to start", crate::WAIT, || {
            logged(&setup, "start").len() >= want
        })
        .await;
        daemon.kill9();
        daemon = DaemonProcess::start(opts()).await.expect("restart");
        api = Api::new(daemon.base_url());
        // While the old attempts are being ended their tasks hold the lock, visibly.
        if !saw_ending {
            let locks = get(&api, "/v1/locks").await;
            saw_ending = locks["locks"]
                .as_array()
                .expect("locks")
                .iter()
                .any(|l| l["name"] == "env:prod" && l["ending"] == "daemon_restart");
        }
        assert_eq!(overlaps(&setup), "", "cycle {cycle}");
    }
    wait_for("the last waiters to start", crate::WAIT, || {
        logged(&setup, "start").len() >= 2 * (CYCLES + 1)
    })
    .await;
    assert!(saw_ending, "a lock held by an attempt being ended shows it");
    assert_eq!(overlaps(&setup), "", "two holders of one lock at once");
    // Every crashed attempt cleaned up (its SIGTERM handler ran) before the next one started.
    assert_eq!(logged(&setup, "cleaned").len(), 2 * CYCLES);
    cancel_all(&api, &ids).await;
    let zombies = crate::task_processes::zombie_children(daemon.pid());
    assert!(
        zombies.is_empty(),
        "zombie children of the daemon: {zombies:?}"
    );
    daemon.terminate().await.expect("stop");
    // No process is left (the setup checks that when it is dropped).
}

/// kill -9 of the daemon **and** its supervisors at once, without a cgroup, while one deploy
/// holds the lock and one task of the quota-of-one type runs, [`BOTH_KILLED_CYCLES`] times.
/// Nothing is left to end the attempts by parenthood (their processes are re-parented to
/// init); the next daemon finds them by the record file each of them inherited, ends them
/// (SIGTERM: their clean-up runs; the kill grace; SIGKILL) and only then frees the lock and
/// the slot: no script ever finds its flock held by another attempt. Before, 28 overlapping
/// pairs in 19 such cycles.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_has_one_holder_when_the_daemon_and_its_supervisors_die_together() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = deploy_types(&setup, "5s", "retry");
    let data = TempDir::new().expect("data dir");
    let opts = || {
        crate::process_opts(&data).args([
            "--config",
            config.as_str(),
            "--task-lease",
            "3s",
            "--task-cgroup",
            "off",
        ])
    };
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let mut api = Api::new(daemon.base_url());
    let ids = submit_contenders(&api).await;
    for cycle in 0..BOTH_KILLED_CYCLES {
        let want = 2 * (cycle + 1);
        wait_for("a deploy and a solo task to start", crate::WAIT, || {
            logged(&setup, "start").len() >= want
        })
        .await;
        // Both supervisors, as the daemon's children (a start logged by a script may come a
        // moment before its supervisor shows among them).
        let pid = daemon.pid();
        wait_for("both supervisors", crate::WAIT, || {
            crate::task_processes::supervisors_of(pid).len() == 2
        })
        .await;
        crate::tasks::kill_all(&crate::task_processes::supervisors_of(pid));
        daemon.kill9();
        daemon = DaemonProcess::start(opts()).await.expect("restart");
        api = Api::new(daemon.base_url());
        assert_eq!(overlaps(&setup), "", "cycle {cycle}");
    }
    wait_for("the last waiters to start", crate::WAIT, || {
        logged(&setup, "start").len() >= 2 * (BOTH_KILLED_CYCLES + 1)
    })
    .await;
    assert_eq!(overlaps(&setup), "", "two holders of one lock at once");
    // Every orphaned attempt got SIGTERM from the next daemon and cleaned up.
    assert_eq!(logged(&setup, "cleaned").len(), 2 * BOTH_KILLED_CYCLES);
    assert!(
        daemon.stderr().contains("ended by the fact that they held"),
        "{}",
        daemon.stderr()
    );
    cancel_all(&api, &ids).await;
    daemon.terminate().await.expect("stop");
    // No process is left (the setup checks that when it is dropped).
}

/// Crash cycles of the test where the daemon and its supervisors die together.
const BOTH_KILLED_CYCLES: usize = 8;

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_has_one_holder_across_crashes() {
    one_holder_across_crashes(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_has_one_holder_across_crashes_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    one_holder_across_crashes(Some(&db)).await;
}

/// What a pid namespace test needs: root and `unshare(1)`.
fn pid_namespaces() -> anyhow::Result<()> {
    privileged::require_root()?;
    privileged::run("unshare", ["--pid", "--fork", "--mount-proc", "true"])?;
    Ok(())
}

/// Run a daemon as PID 1 of a pid namespace of its own (as in a container); it dies, with
/// everything in the namespace, when it is killed.
const AS_PID_1: [&str; 5] = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"];

/// `url` with its host and port replaced by `addr`.
fn through(url: &str, addr: std::net::SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (auth, path) = rest.split_once('/').expect("a database");
    let user = auth.rsplit_once('@').map_or("", |(u, _)| u);
    format!("{scheme}://{user}@{addr}/{path}")
}

/// The server of a PostgreSQL URL.
fn server_of(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once("://").expect("a URL").1;
    let auth = rest.split_once('/').map_or(rest, |(a, _)| a);
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    host.parse().expect("127.0.0.1:PORT")
}

/// A daemon on the PostgreSQL database at `url` with the task types of `config`, keeping its
/// files in `data`, with a task lease of 3 s (the shortest allowed).
fn pg_host(url: &str, data: &TempDir, config: &str) -> DaemonOptions {
    DaemonOptions::new(PathBuf::from(url)).args([
        "--data-dir",
        &data.path().display().to_string(),
        "--config",
        config,
        "--task-lease",
        "3s",
    ])
}

/// Two hosts on one database, each running [`DEPLOY`]: A's deploy holds the lock (it has
/// started), B's waits for it.
struct TwoHosts {
    a: DaemonProcess,
    b: DaemonProcess,
    api_b: Api,
    /// A's deploy and B's.
    x: serde_json::Value,
    y: serde_json::Value,
}

/// Start host A (`a`), submit a deploy to it and wait until it runs; then start host B (`b`)
/// and submit a second deploy to the same environment there.
async fn deploys_on_two_hosts(setup: &Setup, a: DaemonOptions, b: DaemonOptions) -> TwoHosts {
    let a = DaemonProcess::start(a).await.expect("host A");
    let api_a = Api::new(a.base_url());
    let (_, x) = submit(
        &api_a,
        json!({"type": "deploy", "params": {"env": "prod", "n": "1"}}),
    )
    .await;
    wait_for("A's deploy to start", crate::WAIT, || {
        !logged(setup, "start").is_empty()
    })
    .await;
    let b = DaemonProcess::start(b).await.expect("host B");
    let api_b = Api::new(b.base_url());
    let (_, y) = submit(
        &api_b,
        json!({"type": "deploy", "params": {"env": "prod", "n": "2"}}),
    )
    .await;
    TwoHosts { a, b, api_b, x, y }
}

/// PostgreSQL, two hosts: A runs a deploy holding a lock and then loses its database (its
/// connections stay open, nothing answers); B's deploy waits for the lock. A cannot renew, so
/// it stops its attempt before its lease runs out; B, which cannot see A's processes (A runs
/// in a pid namespace of its own), takes the task over once the lease lapsed and frees the
/// lock only after A's kill grace too. The waiting deploy never starts while A's runs; A's late
/// end, once its database is back, changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_that_loses_its_database_stops_its_attempt_first() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    if privileged::available("SPOOLD_REQUIRE_PIDNS", pid_namespaces()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = deploy_types(&setup, "2s", "review");
    let proxy = Proxy::start(server_of(db.url())).await.expect("proxy");
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let TwoHosts {
        mut a,
        mut b,
        api_b,
        x,
        y,
    } = deploys_on_two_hosts(
        &setup,
        pg_host(&through(db.url(), proxy.addr()), &data_a, &config).wrapper(AS_PID_1),
        pg_host(db.url(), &data_b, &config),
    )
    .await;
    proxy.pause();
    let paused = tokio::time::Instant::now();
    wait_for(
        "the waiting deploy to start on B",
        Duration::from_secs(30),
        || logged(&setup, "start").len() >= 2,
    )
    .await;
    let waited = paused.elapsed();
    assert_eq!(overlaps(&setup), "", "two holders of one lock at once");
    let cleaned = logged(&setup, "cleaned");
    assert_eq!(cleaned.len(), 1, "A stopped its own attempt: {cleaned:?}");
    assert!(cleaned[0].contains(&id(&x)), "{cleaned:?}");
    // B freed the lock only past A's lease and kill grace.
    assert!(waited >= Duration::from_secs(4), "{waited:?}");
    let t = get(&api_b, &format!("/v1/tasks/{}", id(&x))).await;
    assert_eq!(
        (&t["status"], &t["errorCode"]),
        (&json!("manual_review"), &json!("lease_expired")),
        "{t}"
    );
    // A's database comes back: its late end of the attempt is refused.
    proxy.resume();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = get(&api_b, &format!("/v1/tasks/{}", id(&x))).await;
    assert_eq!(t["status"], "manual_review", "{t}");
    let attempts = get(&api_b, &format!("/v1/tasks/{}/attempts", id(&x))).await;
    assert_eq!(
        attempts["attempts"][0]["outcome"], "interrupted",
        "{attempts}"
    );
    cancel_all(&api_b, &[id(&y)]).await;
    b.terminate().await.expect("stop B");
    a.kill9();
}

/// PostgreSQL, the daemon as PID 1 of a pid namespace, restarted the same way: the same pid
/// each time. The restarted daemon is another executor all the same, so the task its crashed
/// run left `running` (with its lock) is taken over once the lease lapsed, and an operator's
/// cancel of it — with no live host running its attempt — takes effect; the task waiting for
/// the lock runs then.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_that_is_pid_1_recovers_its_own_tasks() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    if privileged::available("SPOOLD_REQUIRE_PIDNS", pid_namespaces()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = deploy_types(&setup, "1s", "review");
    let data = TempDir::new().expect("data dir");
    let opts = || pg_host(db.url(), &data, &config).wrapper(AS_PID_1);
    let mut daemon = DaemonProcess::start(opts()).await.expect("daemon");
    let api = Api::new(daemon.base_url());
    let (_, x) = submit(
        &api,
        json!({"type": "deploy", "params": {"env": "prod", "n": "1"}}),
    )
    .await;
    let (_, y) = submit(
        &api,
        json!({"type": "deploy", "params": {"env": "prod", "n": "2"}}),
    )
    .await;
    wait_for("the first deploy to start", crate::WAIT, || {
        !logged(&setup, "start").is_empty()
    })
    .await;
    let executor = get(&api, &format!("/v1/tasks/{}/attempts", id(&x))).await["attempts"][0]
        ["executorId"]
        .clone();
    daemon.kill9();
    let daemon = DaemonProcess::start(opts()).await.expect("restart");
    let api = Api::new(daemon.base_url());
    let (status, t) = post(&api, &format!("/v1/tasks/{}/cancel", id(&x))).await;
    assert_eq!((status, &t["cancelRequested"]), (200, &json!(true)), "{t}");
    let t = wait_task(&api, &id(&x), &["canceled", "manual_review"]).await;
    assert_eq!(t["status"], "canceled", "the cancel took effect: {t}");
    wait_task(&api, &id(&y), &["running"]).await;
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id(&y))).await;
    let other = &attempts["attempts"][0]["executorId"];
    assert_ne!(other, &executor, "each run is an executor of its own");
    assert_eq!(overlaps(&setup), "");
    cancel_all(&api, &[id(&y)]).await;
    drop(daemon);
}

/// PostgreSQL, two hosts: an operator cancels through host B a task whose attempt runs on host
/// A, and the script exits with a retryable code right after. A learns of the cancel through
/// its lease renewals — but the store decides anyway: a cancel recorded before the attempt's
/// end wins over its outcome, so the task ends `canceled` and no further attempt starts.
#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_through_another_host_wins_over_a_retryable_exit() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "await.sh",
        r#"echo "run $SPOOLD_ATTEMPT" >> "$LOG"
while [ ! -e "$GO" ]; do sleep 0.01; done
exit 75"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.awaiting]\ncommand = [\"{}\"]\nmax_attempts = 3\n\
             backoff = {{ base = \"50ms\", cap = \"50ms\" }}\n\
             env = {{ GO = \"{}\", LOG = \"{}\" }}\n",
            setup.path("await.sh"),
            setup.path("go"),
            setup.path("log"),
        ),
    );
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = DaemonProcess::start(pg_host(db.url(), &data_a, &config))
        .await
        .expect("host A");
    let api_a = Api::new(a.base_url());
    let (_, t) = submit(&api_a, json!({"type": "awaiting", "idempotencyKey": "x"})).await;
    wait_for("the attempt to run on A", crate::WAIT, || {
        !logged(&setup, "run").is_empty()
    })
    .await;
    let b = DaemonProcess::start(pg_host(db.url(), &data_b, &config))
        .await
        .expect("host B");
    let api_b = Api::new(b.base_url());
    let (status, body) = post(&api_b, &format!("/v1/tasks/{}/cancel", id(&t))).await;
    assert_eq!(
        (status, &body["cancelRequested"]),
        (200, &json!(true)),
        "{body}"
    );
    std::fs::write(setup.dir.join("go"), "").expect("go");
    let done = wait_task(&api_b, &id(&t), &["canceled", "failed"]).await;
    assert_eq!(done["status"], "canceled", "{done}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(logged(&setup, "run").len(), 1, "no further attempt ran");
    let attempts = get(&api_b, &format!("/v1/tasks/{}/attempts", id(&t))).await;
    assert_eq!(
        attempts["attempts"].as_array().map(Vec::len),
        Some(1),
        "{attempts}"
    );
    assert_eq!(
        attempts["attempts"][0]["outcome"], "failed",
        "the attempt as it ended"
    );
    drop((a, b));
}

/// The init of the namespace the daemon runs in: runs the daemon, and reaps what is
/// re-parented to it for as long as the namespace lives (a daemon killed alone may be started
/// again inside it).
const INIT: &str = r#""$0" "$@" & while :; do wait; sleep 0.05; done"#;

/// `sh` as PID 1 of a pid namespace, running the daemon (so the daemon can be killed alone).
fn under_init(wrapper_init: &str) -> Vec<String> {
    [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "/bin/sh",
        "-c",
        wrapper_init,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The namespace's init (the wrapper's child), by its pid outside the namespace.
fn namespace_init(daemon: &DaemonProcess) -> i32 {
    let pid = daemon.pid();
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .expect("children")
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the namespace's init")
}

/// Run `script` with `sh` inside the pid (and mount) namespace of `init`; its stdout.
fn in_namespace(init: i32, script: &str) -> String {
    privileged::run(
        "nsenter",
        [
            "-t",
            &init.to_string(),
            "-p",
            "-m",
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
    )
    .expect("nsenter")
}

/// Start, inside the namespace of `init`, a process that takes pid `pid` there if it is free
/// (`ns_last_pid`) and makes itself a session and group leader (`setsid`): an unrelated
/// process that a daemon signalling a stale group id would hit. It writes down every signal
/// it gets.
fn foreign(init: i32, pid: i32, dir: &Path) {
    let hits = dir.join("foreign-hits");
    let pids = dir.join("foreign-pids");
    in_namespace(
        init,
        &format!(
            "echo {} > /proc/sys/kernel/ns_last_pid; \
             setsid /bin/sh -c 'trap \"echo TERM >> {hits}\" TERM; echo $$ >> {pids}; \
             while :; do sleep 0.1; done' >/dev/null 2>&1 & echo $!",
            pid - 1,
            hits = hits.display(),
            pids = pids.display(),
        ),
    );
}

/// Until task `task` is `done` (and a second after): whenever the pid `leader` had in the pid
/// namespace of `init` is free, start an unrelated process with it, once ([`foreign`]). Then
/// check that such a process was started, with that pid, and never signalled.
async fn take_the_pid_meanwhile(
    api: &Api,
    task: &str,
    done: &str,
    (init, leader): (i32, i32),
    dir: &Path,
) {
    let mut taken = false;
    let until = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut over_at = None;
    while tokio::time::Instant::now() < until {
        let free = in_namespace(init, &format!("test -e /proc/{leader} || echo free"));
        if free.trim() == "free" && !taken {
            foreign(init, leader, dir);
            taken = true;
        }
        let t = get(api, &format!("/v1/tasks/{task}")).await;
        if t["status"] == done && over_at.is_none() {
            over_at = Some(tokio::time::Instant::now());
        }
        if taken && over_at.is_some_and(|at| at.elapsed() > Duration::from_secs(1)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        over_at.is_some(),
        "the attempt was ended: its task is {done}"
    );
    assert!(taken, "the leader's pid came free at last");
    let hits = std::fs::read_to_string(dir.join("foreign-hits")).unwrap_or_default();
    assert_eq!(hits, "", "an unrelated process was signalled");
    let pids = std::fs::read_to_string(dir.join("foreign-pids")).unwrap_or_default();
    assert!(
        pids.lines().any(|p| p.trim() == leader.to_string()),
        "the unrelated process got the leader's pid {leader}: {pids}"
    );
    for pid in pids.lines() {
        let alive = in_namespace(
            init,
            &format!("test -e /proc/{pid} && echo alive || echo gone"),
        );
        assert_eq!(alive.trim(), "alive", "foreign process {pid} was killed");
    }
}

/// Pid reuse made certain: the daemon runs in a pid namespace of its own, where the test can
/// pick the pid a new process gets. An attempt times out; its leader and group exit on
/// SIGTERM, but a TERM-ignoring escapee (it called `setsid`; it carries the attempt's tag)
/// keeps the stop going through the kill grace. Meanwhile the test keeps trying to start an
/// unrelated process with the leader's pid, as its own group's leader. That process is never
/// signalled: the leader is held (a zombie, unreaped) until the escapee is gone too, so its
/// pid — and group id — is not free while the daemon might still signal the group.
#[tokio::test(flavor = "multi_thread")]
async fn a_reused_pid_is_never_signalled() {
    if privileged::available("SPOOLD_REQUIRE_PIDNS", pid_namespaces()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "reuse.sh",
        r#"setsid sh -c 'trap "" TERM; exec sleep 1000' &
echo $$ > "$LEADER"
sleep 1000"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.reuse]\ncommand = [\"{}\"]\ntimeout = \"1s\"\nkill_grace = \"3s\"\n\
             env = {{ LEADER = \"{}\" }}\n",
            setup.path("reuse.sh"),
            setup.path("leader"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let daemon = DaemonProcess::start(
        crate::process_opts(&data)
            .args(["--config", config.as_str(), "--task-cgroup", "off"])
            .wrapper(under_init(INIT)),
    )
    .await
    .expect("daemon");
    let init = namespace_init(&daemon);
    let api = Api::new(daemon.base_url());
    let (_, task) = submit(&api, json!({"type": "reuse", "idempotencyKey": "r"})).await;
    wait_for("the leader to write its pid", crate::WAIT, || {
        setup.dir.join("leader").exists()
    })
    .await;
    let leader: i32 = std::fs::read_to_string(setup.dir.join("leader"))
        .expect("leader")
        .trim()
        .parse()
        .expect("a pid");
    take_the_pid_meanwhile(&api, &id(&task), "timed_out", (init, leader), &setup.dir).await;
    // The namespace goes with its init, and everything in it.
    drop(daemon);
}

/// The pid, outside the namespace, of the one child of `init` (the daemon it runs).
fn child_of(init: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
        .expect("children")
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a child")
}

/// The init of a pid namespace that never forks (so the test decides which pid comes next),
/// with a small `pid_max` (pids of the namespace wrap within a thousand), running its
/// arguments in a session of their own (the daemon is a session leader, as one started by a
/// service manager or `setsid` is) and reaping whatever is re-parented to it.
const QUIET_INIT: &str = r#"import os, subprocess, sys, time
try:
    open("/proc/sys/kernel/pid_max", "w").write("1024")
except OSError:
    pass
subprocess.Popen(sys.argv[1:], start_new_session=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.05)
"#;

/// An unrelated process (run as `python3 -c VICTIM HITS PIDS LEADER`): it makes itself a
/// session leader, then forks a child with the pid after `ns_last_pid` is set to LEADER - 1,
/// which makes itself a group leader. Both write down every signal they get, and their pid,
/// group and session.
const VICTIM: &str = r#"import os, signal, sys, time
hits, pids, leader = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.setsid()
def log(sig, frame):
    with open(hits, "a") as f:
        f.write(f"{sig} {os.getpid()}\n")
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
    signal.signal(s, log)
with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(str(leader - 1))
if os.fork() == 0:
    os.setpgid(0, 0)
with open(pids, "a") as f:
    f.write(f"{os.getpid()} {os.getpgid(0)} {os.getsid(0)}\n")
while True:
    time.sleep(0.1)
"#;

/// The pid that `outer` (a pid in this namespace) has in its own, innermost pid namespace.
fn inner_pid(outer: i32) -> i32 {
    std::fs::read_to_string(format!("/proc/{outer}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|ids| ids.split_whitespace().last()?.parse().ok())
        .expect("NSpid")
}

/// The issue's reproduction of a restart that signalled unrelated processes: in a private pid
/// namespace with a small `pid_max`, kill -9 the daemon (a session leader) and its attempt's
/// process group; a new process takes the old daemon's pid and calls `setsid`; its child takes
/// the old leader's pid and calls `setpgid(0, 0)` — the recorded session, the recorded group,
/// started after the leader: everything an id-based recovery looked at. Then restart spoold.
/// It signals neither (they log every signal: none is received): the attempt's supervisor
/// ended what was left of it when the daemon died, and the restarted daemon only read its
/// record.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_daemon_signals_no_process_it_did_not_spawn() {
    if privileged::available("SPOOLD_REQUIRE_PIDNS", pid_namespaces()).is_none() {
        return;
    }
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "hold.sh",
        r#"trap '' PIPE
echo $$ > "$LEADER"
sleep 1000 &
while :; do sleep 0.05; done"#,
    );
    let config = config_with(
        &setup,
        &format!(
            "\n[tasks.hold]\ncommand = [\"{}\"]\ntimeout = \"600s\"\nkill_grace = \"3s\"\n\
             env = {{ LEADER = \"{}\" }}\n",
            setup.path("hold.sh"),
            setup.path("leader"),
        ),
    );
    let data = TempDir::new().expect("data dir");
    let opts =
        || crate::process_opts(&data).args(["--config", config.as_str(), "--task-cgroup", "off"]);
    let wrapper: Vec<String> = [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "python3",
        "-c",
        QUIET_INIT,
    ]
    .map(str::to_owned)
    .to_vec();
    let first = DaemonProcess::start(opts().wrapper(wrapper))
        .await
        .expect("daemon");
    let init = namespace_init(&first);
    let api = Api::new(first.base_url());
    let (_, task) = submit(&api, json!({"type": "hold", "idempotencyKey": "h"})).await;
    wait_for("the attempt's leader to write its pid", crate::WAIT, || {
        setup.dir.join("leader").exists()
    })
    .await;
    let leader: i32 = std::fs::read_to_string(setup.dir.join("leader"))
        .expect("leader")
        .trim()
        .parse()
        .expect("a pid");
    let daemon = inner_pid(child_of(init));
    // kill -9 of the daemon and of the attempt's group, at once (the supervisor, which ends
    // the attempt as soon as the daemon is gone, may have ended the group first).
    in_namespace(
        init,
        &format!("kill -KILL {daemon}; kill -KILL -{leader} 2>/dev/null; true"),
    );
    let record = data
        .path()
        .join("data/task-attempts")
        .join(format!("{}-1", id(&task)));
    // Gone once its record file's lock is free (or the file is gone: it told its daemon just
    // before the daemon died).
    wait_for("the supervisor to finish", crate::WAIT, || {
        std::fs::File::open(&record).map_or(true, |f| {
            rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok()
        })
    })
    .await;
    wait_for("the leader's pid to be free", crate::WAIT, || {
        in_namespace(init, &format!("test -e /proc/{leader} || echo free")).trim() == "free"
            && in_namespace(init, &format!("test -e /proc/{daemon} || echo free")).trim() == "free"
    })
    .await;
    let (hits, pids) = (setup.dir.join("victim-hits"), setup.dir.join("victim-pids"));
    std::fs::write(setup.dir.join("victim.py"), VICTIM).expect("victim");
    in_namespace(
        init,
        &format!(
            "echo {} > /proc/sys/kernel/ns_last_pid; python3 {} {} {} {leader} \
             >/dev/null 2>&1 &",
            daemon - 1,
            setup.dir.join("victim.py").display(),
            hits.display(),
            pids.display(),
        ),
    );
    wait_for("the victims to start", crate::WAIT, || {
        std::fs::read_to_string(&pids).is_ok_and(|p| p.lines().count() == 2)
    })
    .await;
    let victims: Vec<Vec<i32>> = std::fs::read_to_string(&pids)
        .expect("pids")
        .lines()
        .map(|l| l.split(' ').filter_map(|n| n.parse().ok()).collect())
        .collect();
    assert!(
        victims.contains(&vec![daemon, daemon, daemon]),
        "a process with the old daemon's pid, leading its session: {victims:?}"
    );
    assert!(
        victims.contains(&vec![leader, leader, daemon]),
        "a process with the old leader's pid, leading its group in that session: {victims:?}"
    );
    let second = DaemonProcess::start(opts().wrapper([
        "nsenter".to_owned(),
        "-t".to_owned(),
        init.to_string(),
        "-p".to_owned(),
        "-m".to_owned(),
        "--".to_owned(),
    ]))
    .await
    .expect("restart in the same namespace");
    let api = Api::new(second.base_url());
    let t = wait_task(&api, &id(&task), &["manual_review"]).await;
    assert_eq!(t["errorCode"], "daemon_restart", "{t}");
    // Longer than the kill grace an id-based recovery would have waited before SIGKILL.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        std::fs::read_to_string(&hits).unwrap_or_default(),
        "",
        "an unrelated process was signalled"
    );
    for pid in [daemon, leader] {
        let alive = in_namespace(init, &format!("test -e /proc/{pid} && echo alive"));
        assert_eq!(alive.trim(), "alive", "process {pid} was killed");
    }
    in_namespace(init, &format!("kill -KILL {daemon} {leader}"));
    drop(second);
    drop(first);
}

/// What a pause stops: the daemon alone (a process stopped, a debugger), or the whole host
/// (the daemon, its attempts' supervisors and their processes: a VM or container frozen).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    Daemon,
    Host,
}

/// `pid` and every process below it (children first found, stopped after their parent).
fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        for task in std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            all.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
        i += 1;
    }
    all
}

fn signal_all(pids: &[i32], signal: rustix::process::Signal) {
    for pid in pids {
        if let Some(pid) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// PostgreSQL, two hosts on one machine (each with a data directory of its own, so neither
/// can wait for the other's supervisors): A runs a deploy that holds the lock and traps
/// SIGTERM (its clean-up takes 0.4 s); B's deploy waits for the lock. A is paused for `pause`.
/// The lease is 3 s and the kill grace 4 s: A's attempt must be gone before B frees the lock
/// (the lease's end + the grace + 2 s, counted from A's last renewal). Whether the daemon alone
/// is paused (its supervisor, not paused, stops the attempt by the lease's end on its own) or
/// the whole host is (the supervisor, resumed past the lease's end, kills at once): no overlap,
/// and A's processes got SIGTERM at most once.
async fn a_paused_host_never_overlaps_the_lock(what: Pause, pause: Duration) {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    // A clean-up of 2.5 s within a grace of 4 s: it runs to its end only if SIGKILL comes the
    // grace after SIGTERM (a second before the lease's end), not when the lease runs out.
    let config = deploy_types_cleaning(&setup, "4s", "review", "2.5");
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let TwoHosts {
        a, b, api_b, x, y, ..
    } = deploys_on_two_hosts(
        &setup,
        // A may claim B's deploy too once the lock is free. (Paused inside its claim's
        // transaction, A used to hold every other host's claims up until it resumed, and then
        // took B's deploy with a lease already over: see
        // a_host_paused_inside_a_transaction_holds_no_other_host_up_on_postgres.)
        pg_host(db.url(), &data_a, &config),
        pg_host(db.url(), &data_b, &config),
    )
    .await;
    let paused = match what {
        Pause::Daemon => vec![a.pid() as i32],
        Pause::Host => tree(a.pid() as i32),
    };
    signal_all(&paused, rustix::process::Signal::STOP);
    let stopped_at = tokio::time::Instant::now();
    tokio::time::sleep(pause).await;
    signal_all(&paused, rustix::process::Signal::CONT);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while logged(&setup, "start").len() < 2 {
        // What both hosts said, to tell why B never took the lock over.
        let tail = |log: String| {
            let from = (log.len().saturating_sub(6000)..log.len())
                .find(|i| log.is_char_boundary(*i))
                .unwrap_or(log.len());
            log[from..].to_owned()
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for the waiting deploy to start on B\n--- A:\n{}\n--- B:\n{}",
            tail(a.stderr()),
            tail(b.stderr())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(overlaps(&setup), "", "two holders of one lock at once");
    let waited = stopped_at.elapsed();
    // A's attempt was stopped once: its clean-up ran at most once (a second SIGTERM would run
    // the trap again), and only if it got SIGTERM before its lease was over.
    let cleaned = logged(&setup, "cleaned");
    assert!(cleaned.len() <= 1, "{cleaned:?}");
    if what == Pause::Daemon {
        assert_eq!(
            cleaned.len(),
            1,
            "the supervisor stopped it in time: {cleaned:?}"
        );
    }
    let t = get(&api_b, &format!("/v1/tasks/{}", id(&x))).await;
    assert_eq!(t["status"], "manual_review", "{t}");
    // B freed the lock only past A's lease and kill grace (from the last renewal, up to a
    // second before the pause).
    assert!(waited >= Duration::from_secs(6), "{waited:?}");
    cancel_all(&api_b, &[id(&y)]).await;
    drop((a, b));
}

/// PostgreSQL, two hosts: A runs a deploy holding the lock, B's deploy waits for it, and A is
/// paused inside a transaction that holds the task claim gate (the test held the gate until
/// A's claim waited for it, stopped A, then let go: A's session got the gate and went quiet,
/// as a host stopped between two statements does). The server ends that session after a third
/// of the lease (`idle_in_transaction_session_timeout`), so B is held up by nothing: it takes
/// A's deploy over, frees the lock at its time and starts its own deploy while A is still
/// stopped. (Before, B's claims waited for A's gate until A resumed; A's claim then went on
/// with what it read before the pause, took B's deploy with a lease already over, and B sent
/// that deploy to review although it never started.)
#[tokio::test(flavor = "multi_thread")]
async fn a_host_paused_inside_a_transaction_holds_no_other_host_up_on_postgres() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = deploy_types(&setup, "4s", "review");
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url_a = format!("{}{sep}application_name=spoold-host-a", db.url());
    let TwoHosts {
        a, b, api_b, x, y, ..
    } = deploys_on_two_hosts(
        &setup,
        pg_host(&url_a, &data_a, &config),
        pg_host(db.url(), &data_b, &config),
    )
    .await;
    // While B's deploy waits for the lock, both hosts look for due tasks every 250 ms.
    let gate = db
        .hold("SELECT name FROM task_claim_gate WHERE name = 'claim' FOR UPDATE")
        .await
        .expect("hold the claim gate");
    let a_waits = "SELECT count(*) FROM pg_stat_activity \
                   WHERE application_name = 'spoold-host-a' AND wait_event_type = 'Lock'";
    let deadline = tokio::time::Instant::now() + crate::WAIT;
    while db
        .scalar(a_waits)
        .await
        .expect("pg_stat_activity")
        .as_deref()
        == Some("0")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's claim never waited for the gate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal_all(&[a.pid() as i32], rustix::process::Signal::STOP);
    let stopped_at = tokio::time::Instant::now();
    gate.commit().await.expect("let go of the gate");
    // B's deploy starts while A is still stopped: after A's lease, kill grace and margin
    // (3 + 4 + 2 s from A's last renewal), not after A resumes.
    let started = loop {
        if logged(&setup, "start").len() >= 2 {
            break Some(stopped_at.elapsed());
        }
        if stopped_at.elapsed() > Duration::from_secs(25) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    signal_all(&[a.pid() as i32], rustix::process::Signal::CONT);
    let Some(started) = started else {
        panic!(
            "B's deploy did not start in 25 s while A was stopped\n--- A:\n{}\n--- B:\n{}",
            a.stderr(),
            b.stderr()
        );
    };
    assert!(started >= Duration::from_secs(6), "{started:?}");
    assert_eq!(overlaps(&setup), "", "two holders of one lock at once");
    assert!(
        logged(&setup, "start")[1].contains(&id(&y)),
        "{:?}",
        logged(&setup, "start")
    );
    // A, resumed, decides nothing on what it read before the pause: B's deploy stays B's.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = get(&api_b, &format!("/v1/tasks/{}", id(&y))).await;
    assert_eq!(
        (&t["status"], &t["attempt"]),
        (&json!("running"), &json!(1)),
        "{t}"
    );
    let t = get(&api_b, &format!("/v1/tasks/{}", id(&x))).await;
    assert_eq!(t["status"], "manual_review", "{t}");
    cancel_all(&api_b, &[id(&y)]).await;
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_paused_past_its_lease_never_overlaps_the_lock_on_postgres() {
    a_paused_host_never_overlaps_the_lock(Pause::Daemon, Duration::from_secs(12)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_paused_just_under_lease_and_grace_never_overlaps_the_lock_on_postgres() {
    a_paused_host_never_overlaps_the_lock(Pause::Host, Duration::from_millis(6_500)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_paused_just_over_lease_and_grace_never_overlaps_the_lock_on_postgres() {
    a_paused_host_never_overlaps_the_lock(Pause::Host, Duration::from_millis(7_500)).await;
}

/// A daemon killed between a task's claim and the start of its program (here: its supervisor
/// never got as far as to start it) leaves an attempt that never ran: the next daemon finds no
/// record file for it, sends the task back to `pending` whatever its type's `on_interrupt`
/// says (here `review`) and does not count the attempt (the task's budget grows by one). Before,
/// on SQLite, such a task went to `manual_review`.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_that_never_started_is_run_again_and_not_counted() {
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    let config = setup.config().display().to_string();
    // A "supervisor" that never reads its attempt, never starts anything: as if the daemon had
    // died before the supervisor could start the program.
    let fake = setup.path("fake-supervisor.sh");
    setup.script(
        "fake-supervisor.sh",
        "echo $$ >> \"$0.pids\"; exec sleep 1000",
    );
    let data = TempDir::new().expect("data dir");
    let opts =
        || crate::process_opts(&data).args(["--config", config.as_str(), "--task-cgroup", "off"]);
    let mut daemon = DaemonProcess::start(opts().env("SPOOLD_TASK_SUPERVISOR", fake.clone()))
        .await
        .expect("daemon");
    let api = Api::new(daemon.base_url());
    let (status, task) = submit(
        &api,
        json!({"type": "exit", "params": {"code": "0"}, "idempotencyKey": "never"}),
    )
    .await;
    assert_eq!(status, 201, "{task}");
    let fakes = || -> Vec<i32> {
        std::fs::read_to_string(format!("{fake}.pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    wait_for("the fake supervisor", crate::WAIT, || !fakes().is_empty()).await;
    let t = get(&api, &format!("/v1/tasks/{}", id(&task))).await;
    assert_eq!(
        (&t["status"], &t["maxAttempts"]),
        (&json!("running"), &json!(3)),
        "{t}"
    );
    daemon.kill9();
    crate::tasks::kill_all(&fakes());
    let daemon = DaemonProcess::start(opts()).await.expect("restart");
    let api = Api::new(daemon.base_url());
    let t = wait_task(&api, &id(&task), &["succeeded", "manual_review", "failed"]).await;
    assert_eq!(t["status"], "succeeded", "{t}");
    assert_eq!(
        t["maxAttempts"], 4,
        "the attempt that never ran is not counted: {t}"
    );
    let attempts = get(&api, &format!("/v1/tasks/{}/attempts", id(&task))).await;
    let outcomes: Vec<&Value> = attempts["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| &a["outcome"])
        .collect();
    assert_eq!(
        outcomes,
        [&json!("interrupted"), &json!("succeeded")],
        "{attempts}"
    );
    assert!(
        daemon.stderr().contains("never started its program"),
        "{}",
        daemon.stderr()
    );
}
