//! PostgreSQL going away under a running host, on servers of the test's own: results that come
//! while the database is out of reach are kept and recorded once it is back (in memory, and in
//! the data directory across a restart of the host).
//!
//! Each test starts its own PostgreSQL server(s) as the `postgres` user: they need root, and
//! skip (with a message) without it unless `SPOOLD_REQUIRE_TOOLS=1`, as CI sets.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use spool_testkit::{Api, DaemonOptions, DaemonProcess, PrivateServer, Receiver, Reply};
use tempfile::TempDir;

use crate::tasks::{get, id, submit, wait_task, Setup};
use crate::{id_of, FAST_RETRIES, WAIT};

/// A request timeout and leases longer than the outage's first seconds: a script that ends and
/// a target that answers while the server is down.
const OUTAGE_FLAGS: &[&str] = &[
    "--request-timeout",
    "5s",
    "--lease",
    "12s",
    "--task-lease",
    "6s",
];

/// How long the server stays down: longer than the task's lease, and than half a delivery's
/// lease after the answers came (as long as spoold used to keep writing a result).
const OUTAGE: Duration = Duration::from_secs(10);

/// How long the receiver takes to answer: the server is down by then.
const ANSWER_AFTER: Duration = Duration::from_secs(2);

/// A task type whose script succeeds once the test opens its gate (a file), at most 30 s on.
fn gated_task(setup: &Setup) -> String {
    setup.script(
        "gated.sh",
        r#"for _ in $(seq 600); do [ -e "$GATE" ] && { echo done; exit 0; }; sleep 0.05; done
exit 1"#,
    );
    crate::task_locks::config_with(
        setup,
        &format!(
            r#"
[tasks.gated]
command = ["{gated}"]
locks = ["gated"]
env = {{ GATE = "{gate}" }}
"#,
            gated = setup.path("gated.sh"),
            gate = setup.path("gate"),
        ),
    )
}

/// Let the gated task's script end.
fn open_gate(setup: &Setup) {
    std::fs::write(setup.dir.join("gate"), "").expect("open the gate");
}

fn host(server: &PrivateServer, data: &TempDir, config: &str) -> DaemonOptions {
    DaemonOptions::new(PathBuf::from(server.url()))
        .args(FAST_RETRIES.iter().copied())
        .args(OUTAGE_FLAGS.iter().copied())
        .args(["--data-dir", &data.path().display().to_string()])
        .args(["--config", config])
}

/// What is in flight when the server goes down: a task running its gated script, and one
/// delivery of each mode whose request has reached its receiver (one each: an at-most-once
/// request waits for the one before it to the same target), which answers 200
/// [`ANSWER_AFTER`] later, while the server is down.
struct InFlight {
    task: String,
    at_least_once: String,
    at_most_once: String,
}

/// One receiver per delivery mode.
async fn receivers() -> [Receiver; 2] {
    let mut both = Vec::new();
    for _ in 0..2 {
        let receiver = Receiver::start().await.expect("receiver");
        receiver.respond_with(Reply::status(200).delay(ANSWER_AFTER));
        both.push(receiver);
    }
    both.try_into()
        .unwrap_or_else(|_| unreachable!("two receivers"))
}

async fn start_work(api: &Api, receivers: &[Receiver; 2]) -> InFlight {
    let (status, task) = submit(api, json!({"type": "gated"})).await;
    assert_eq!(status, 201, "{task}");
    let task = id(&task);
    let mut ids = Vec::new();
    for (mode, receiver) in ["at_least_once", "at_most_once"].into_iter().zip(receivers) {
        let (status, d) = api
            .create(json!({"targetUrl": receiver.url("/hook"), "mode": mode}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{d}");
        ids.push(id_of(&d));
    }
    wait_task(api, &task, &["running"]).await;
    for receiver in receivers {
        receiver
            .wait_for_requests(1, WAIT)
            .await
            .expect("the request arrived");
    }
    InFlight {
        task,
        at_most_once: ids.pop().expect("id"),
        at_least_once: ids.pop().expect("id"),
    }
}

/// Each piece of work ended as its attempt did — the task `succeeded` on its one attempt, each
/// delivery `succeeded` on its one request — and nothing was sent twice.
async fn check_recorded(
    api: &Api,
    receivers: &[Receiver; 2],
    work: &InFlight,
    log: impl Fn() -> String,
) {
    let task = wait_task(
        api,
        &work.task,
        &["succeeded", "failed", "manual_review", "interrupted"],
    )
    .await;
    assert_eq!(task["status"], "succeeded", "{task}\n{}", log());
    assert_eq!(task["attempt"], 1, "{task}");
    for id in [&work.at_least_once, &work.at_most_once] {
        let d = match api
            .wait_status(id, &["succeeded", "unknown", "failed"], WAIT)
            .await
        {
            Ok(d) => d,
            Err(e) => panic!("{e:#}\n{}", log()),
        };
        assert_eq!(d["status"], "succeeded", "{d}\n{}", log());
        assert_eq!(d["attempts"], 1, "{d}");
    }
    // No take-back in any log of transitions.
    let transitions = get(api, &format!("/v1/tasks/{}/transitions", work.task)).await;
    assert!(
        !transitions.to_string().contains("lease_expired"),
        "{transitions}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    for receiver in receivers {
        assert_eq!(receiver.requests().len(), 1, "a request was sent again");
    }
}

/// One host on a server of the test's own, with work under way ([`start_work`]) when the
/// server was stopped and the gated script let go.
struct Outage {
    /// Dropped first (killed), then the rest.
    daemon: DaemonProcess,
    work: InFlight,
    receivers: [Receiver; 2],
    data: TempDir,
    config: String,
    server: PrivateServer,
    /// Held for its drop: a process its script left fails the test.
    _setup: Setup,
    _dir: TempDir,
}

impl Outage {
    /// `None` where a server of the test's own cannot be started (not root): the test skips.
    async fn begin() -> Option<Outage> {
        let server =
            spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())?;
        let dir = TempDir::new().expect("dir");
        let setup = Setup::new(dir.path());
        let config = gated_task(&setup);
        let receivers = receivers().await;
        let data = TempDir::new().expect("dir");
        let daemon = DaemonProcess::start(host(&server, &data, &config))
            .await
            .expect("host starts");
        let work = start_work(&Api::new(daemon.base_url()), &receivers).await;
        server.stop().expect("stop the server");
        open_gate(&setup);
        Some(Outage {
            server,
            _setup: setup,
            _dir: dir,
            config,
            receivers,
            data,
            daemon,
            work,
        })
    }
}

/// The files a host keeps its unrecorded results in.
fn kept(data: &TempDir) -> Vec<String> {
    std::fs::read_dir(data.path().join("unrecorded"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect()
}

async fn unrecorded(api: &Api, kind: &str) -> f64 {
    let (_, _, body) = api
        .request(http::Method::GET, "/metrics", None)
        .await
        .expect("metrics");
    let text = String::from_utf8_lossy(&body);
    let prefix = format!("spoold_unrecorded_results{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// The server is stopped while a task's script runs and two deliveries' requests are on the
/// wire, and stays down for 10 s — longer than the task's lease. The script exits 0 and the
/// target answers 200 while it is down: the host keeps each result (counted by
/// `spoold_unrecorded_results`, written to its data directory) and records it once the server is
/// back. The task succeeds instead of going to review, the at-least-once delivery is not sent
/// again, and the at-most-once one is not `unknown`.
#[tokio::test(flavor = "multi_thread")]
async fn results_that_come_during_an_outage_are_recorded_when_it_ends() {
    let Some(mut o) = Outage::begin().await else {
        return;
    };
    let down = tokio::time::Instant::now();
    let api = Api::new(o.daemon.base_url());
    let (data, daemon) = (&o.data, &o.daemon);
    // The script ends now and the answers come soon: all three results are held, in memory and
    // on disk, while the server is down.
    let deadline = down + ANSWER_AFTER + Duration::from_secs(2);
    loop {
        let held = (
            unrecorded(&api, "delivery").await,
            unrecorded(&api, "task").await,
        );
        if held == (2.0, 1.0) && kept(data).len() == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "results held {held:?}, kept {:?}\n{}",
            kept(data),
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep_until(down + OUTAGE).await;
    o.server.start_again().expect("start the server again");
    check_recorded(&api, &o.receivers, &o.work, || daemon.stderr()).await;
    assert_eq!(unrecorded(&api, "delivery").await, 0.0);
    assert_eq!(unrecorded(&api, "task").await, 0.0);
    assert!(kept(data).is_empty(), "{:?}", kept(data));
    o.daemon.terminate().await.expect("stops");
}

/// As above, but the host is killed (kill -9) while the server is down and its results are
/// held: they are in its data directory, and the host started again records them before it
/// takes anything back — the task succeeds, neither delivery is sent again or left `unknown`.
#[tokio::test(flavor = "multi_thread")]
async fn results_kept_on_disk_outlive_a_killed_host() {
    let Some(mut o) = Outage::begin().await else {
        return;
    };
    let deadline = tokio::time::Instant::now() + ANSWER_AFTER + Duration::from_secs(2);
    while kept(&o.data).len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kept {:?}\n{}",
            kept(&o.data),
            o.daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_log = o.daemon.stderr();
    o.daemon.kill9();
    o.server.start_again().expect("start the server again");
    let again = DaemonProcess::start(host(&o.server, &o.data, &o.config))
        .await
        .expect("host starts again");
    let api = Api::new(again.base_url());
    let log = || format!("{first_log}\n--- after the restart ---\n{}", again.stderr());
    check_recorded(&api, &o.receivers, &o.work, log).await;
    assert!(
        again
            .stderr()
            .contains("results an earlier run kept while the database was out of reach"),
        "{}",
        again.stderr()
    );
    assert!(kept(&o.data).is_empty(), "{:?}", kept(&o.data));
}

/// A primary and a streaming standby of it, on servers of the test's own, with a database
/// `spool`; the roles swap at each failover.
struct Cluster {
    servers: [PrivateServer; 2],
    primary: usize,
}

impl Cluster {
    /// A cluster on `first` (a new server) and a standby of it, the standby following the
    /// primary (synchronous if `synchronous`).
    async fn start(first: PrivateServer, synchronous: bool) -> anyhow::Result<Cluster> {
        first.execute("CREATE DATABASE spool").await?;
        let second = first.standby()?;
        let cluster = Cluster {
            servers: [first, second],
            primary: 0,
        };
        if synchronous {
            cluster.make_synchronous().await?;
        } else {
            cluster.streaming("async").await?;
        }
        Ok(cluster)
    }

    fn primary(&self) -> &PrivateServer {
        &self.servers[self.primary]
    }

    fn standby(&self) -> &PrivateServer {
        &self.servers[1 - self.primary]
    }

    /// Both servers, `first` listed first, for `target_session_attrs=read-write` to find the
    /// primary among.
    fn url(&self, first: usize) -> String {
        let ports = [self.servers[first].port(), self.servers[1 - first].port()];
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/spool?target_session_attrs=read-write",
            ports[0], ports[1]
        )
    }

    /// The primary's commits wait for the standby from now on.
    async fn make_synchronous(&self) -> anyhow::Result<()> {
        let primary = self.primary();
        primary
            .execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            .await?;
        primary.execute("SELECT pg_reload_conf()").await?;
        self.streaming("sync").await
    }

    /// Until the primary sees its standby streaming with `sync_state`.
    async fn streaming(&self, sync_state: &str) -> anyhow::Result<()> {
        let sql = format!(
            "SELECT count(*) FROM pg_stat_replication \
             WHERE state = 'streaming' AND sync_state = '{sync_state}'"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if self.primary().scalar(&sql).await?.as_deref() == Some("1") {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the standby is not streaming ({sync_state}) after 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The primary dies (kill -9) and its standby is promoted, as a failover manager does.
    fn fail_over(&mut self) -> anyhow::Result<()> {
        self.primary().kill9()?;
        self.standby().promote()?;
        self.primary = 1 - self.primary;
        Ok(())
    }

    /// The old primary rejoins as the new one's standby (a fresh base backup), synchronous.
    async fn rejoin(&self) -> anyhow::Result<()> {
        self.standby().rejoin_as_standby_of(self.primary())?;
        self.make_synchronous().await
    }
}

/// Hosts on both servers of a cluster, with the load flags and a locked task type.
fn cluster_host(url: &str, data: &TempDir, config: &str) -> DaemonOptions {
    DaemonOptions::new(PathBuf::from(url))
        .args(FAST_RETRIES.iter().copied())
        .args(OUTAGE_FLAGS.iter().copied())
        .args(["--data-dir", &data.path().display().to_string()])
        .args(["--config", config])
}

/// A task type holding the lock `env:prod` for half a second, writing when it starts and ends.
fn locked_task(setup: &Setup) -> String {
    setup.script(
        "deploy.sh",
        r#"echo "start $1 $(date +%s%N)" >> "$LOG"
sleep 0.5
echo "end $1 $(date +%s%N)" >> "$LOG""#,
    );
    crate::task_locks::config_with(
        setup,
        &format!(
            r#"
[tasks.deploy]
command = ["{deploy}", "{{n}}"]
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "deploy-{{n}}"
locks = ["env:prod"]
env = {{ LOG = "{log}" }}
"#,
            deploy = setup.path("deploy.sh"),
            log = setup.path("deploy.log"),
        ),
    )
}

/// What the load made: every create and task acknowledged, by key.
#[derive(Debug, Default)]
struct Acknowledged {
    deliveries: std::collections::HashMap<String, (String, bool)>,
    tasks: Vec<String>,
    refused: usize,
}

/// Creates at about 30 a second (one in ten at most once) and a task a second, through the
/// hosts in turn, each with an idempotency key and sent again with it until acknowledged,
/// until `stop`.
async fn load(
    apis: Vec<Api>,
    target: String,
    stop: tokio_util::sync::CancellationToken,
) -> Acknowledged {
    let mut acked = Acknowledged::default();
    let mut n: u64 = 0;
    let mut next_task = tokio::time::Instant::now();
    while !stop.is_cancelled() {
        n += 1;
        let api = &apis[(n as usize) % apis.len()];
        let key = format!("load-{n}");
        let at_most_once = n.is_multiple_of(10);
        let body = json!({
            "targetUrl": target,
            "idempotencyKey": key,
            "mode": if at_most_once { "at_most_once" } else { "at_least_once" },
            "body": {"n": n},
        });
        // Sent again with its key until a host acknowledges it (a failover takes seconds).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let answer =
                tokio::time::timeout(Duration::from_secs(10), api.create(body.clone())).await;
            match answer {
                Ok(Ok((201 | 200, d))) => {
                    acked
                        .deliveries
                        .insert(key.clone(), (id_of(&d), at_most_once));
                    break;
                }
                Ok(Ok((503, d))) => {
                    assert_eq!(d["error"]["code"], "storage_unavailable", "{d}");
                    acked.refused += 1;
                }
                Ok(Ok((status, d))) => panic!("create answered {status}: {d}"),
                Ok(Err(_)) | Err(_) => acked.refused += 1,
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{key} never acknowledged"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if tokio::time::Instant::now() >= next_task {
            next_task += Duration::from_secs(1);
            let task = json!({"type": "deploy", "params": {"n": n.to_string()}});
            loop {
                match tokio::time::timeout(Duration::from_secs(10), submit(api, task.clone())).await
                {
                    Ok((201 | 200, t)) => {
                        acked.tasks.push(id(&t));
                        break;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "task {n} never acknowledged"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(33)).await;
    }
    acked
}

/// The primary of a synchronous pair is killed (kill -9) and its standby promoted, three times
/// under load through two hosts whose URL lists both servers: every acknowledged create is
/// delivered, each exactly once (an at-most-once one is never `unknown`, an at-least-once one
/// never received twice although answers came while the database was away), every task
/// succeeds (none to review) and no two held the lock at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_failover_under_load_loses_nothing_acknowledged() {
    let Some(first) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let mut cluster = Cluster::start(first, true).await.expect("cluster");
    let dir = TempDir::new().expect("dir");
    let setup = Setup::new(dir.path());
    let config = locked_task(&setup);
    let receiver = Receiver::start().await.expect("receiver");
    receiver.respond_with(Reply::status(200).delay(Duration::from_millis(150)));
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = DaemonProcess::start(cluster_host(&cluster.url(0), &data_a, &config))
        .await
        .expect("host A starts");
    let b = DaemonProcess::start(cluster_host(&cluster.url(1), &data_b, &config))
        .await
        .expect("host B starts");
    let logs = || format!("host A:\n{}\nhost B:\n{}", a.stderr(), b.stderr());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(load(
        vec![Api::new(a.base_url()), Api::new(b.base_url())],
        receiver.url("/hook"),
        stop.clone(),
    ));
    for cycle in 1..=3 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        cluster
            .fail_over()
            .unwrap_or_else(|e| panic!("failover {cycle}: {e:#}"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        cluster
            .rejoin()
            .await
            .unwrap_or_else(|e| panic!("rejoin {cycle}: {e:#}"));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let acked = running.await.expect("load");
    assert!(
        acked.deliveries.len() > 100,
        "{} creates",
        acked.deliveries.len()
    );
    let api = Api::new(a.base_url());
    for (key, (id, _)) in &acked.deliveries {
        match api
            .wait_status(
                id,
                &["succeeded", "unknown", "failed", "manual_review"],
                Duration::from_secs(60),
            )
            .await
        {
            Ok(d) => assert_eq!(d["status"], "succeeded", "{key}: {d}\n{}", logs()),
            Err(e) => panic!("{key} lost: {e:#}\n{}", logs()),
        }
    }
    let mut received: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for r in receiver.requests() {
        if let Some(id) = r.header("x-spoold-delivery-id") {
            *received.entry(id.to_owned()).or_default() += 1;
        }
    }
    for (key, (id, at_most_once)) in &acked.deliveries {
        assert_eq!(
            received.get(id),
            Some(&1),
            "{key} (at most once: {at_most_once}) received {:?} times\n{}",
            received.get(id),
            logs()
        );
    }
    for task in &acked.tasks {
        let t = wait_task(
            &api,
            task,
            &[
                "succeeded",
                "failed",
                "manual_review",
                "interrupted",
                "canceled",
            ],
        )
        .await;
        assert_eq!(t["status"], "succeeded", "{t}\n{}", logs());
    }
    let log = std::fs::read_to_string(setup.dir.join("deploy.log")).expect("deploy log");
    let kinds: Vec<&str> = log
        .lines()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert!(
        kinds.chunks(2).all(|pair| pair == ["start", "end"]),
        "two attempts held env:prod at once:\n{log}"
    );
    let kept = logs()
        .matches("is kept and recorded once it is back")
        .count();
    eprintln!(
        "{} creates and {} tasks acknowledged, {} refused while the database was away; {kept} \
         results kept until it was back",
        acked.deliveries.len(),
        acked.tasks.len(),
        acked.refused
    );
}

/// With asynchronous replication, readiness warns that a failover may lose acknowledged
/// writes. The primary is killed and its standby promoted; host A, which lists the old primary
/// first, moves to the new one (a newer timeline, remembered in its data directory). The old
/// primary then comes back as it was — a primary, on the old timeline — and A restarts: it
/// refuses the stale primary, says so, and uses the new one; a host that names only the stale
/// one refuses to start (exit 1). Nothing A acknowledges after its restart lands on the stale
/// primary.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_primary_is_refused_by_a_host_that_starts_after_the_failover() {
    let Some(first) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let mut cluster = Cluster::start(first, false).await.expect("cluster");
    let dir = TempDir::new().expect("dir");
    let setup = Setup::new(dir.path());
    let config = setup.config().display().to_string();
    let receiver = Receiver::start().await.expect("receiver");
    let data = TempDir::new().expect("dir");
    let old = cluster.primary;
    let url = cluster.url(old);
    let mut a = DaemonProcess::start(cluster_host(&url, &data, &config))
        .await
        .expect("host A starts");
    let api = Api::new(a.base_url());
    let (status, _, body) = api
        .request(http::Method::GET, "/readyz", None)
        .await
        .expect("readyz");
    let ready: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(status, 200, "{ready}");
    assert!(
        ready["warnings"][0]
            .as_str()
            .is_some_and(|w| w.contains("replication is asynchronous")),
        "{ready}"
    );
    assert!(
        a.stderr().contains("replication is asynchronous"),
        "{}",
        a.stderr()
    );
    assert_eq!(
        api.metric("spoold_db_replication_risk")
            .await
            .expect("metrics"),
        Some(1.0)
    );

    cluster.fail_over().expect("failover");
    // A moves to the promoted standby by itself.
    let deadline = tokio::time::Instant::now() + WAIT;
    let before = loop {
        let (status, d) = api
            .create(json!({"targetUrl": receiver.url("/hook")}))
            .await
            .expect("create");
        if status == 201 {
            break id_of(&d);
        }
        assert!(tokio::time::Instant::now() < deadline, "never served: {d}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    api.wait_status(&before, &["succeeded"], WAIT)
        .await
        .expect("delivered through the new primary");
    let fence = std::fs::read_to_string(data.path().join("postgres-cluster")).expect("fence");
    assert!(fence.trim().ends_with(" 2"), "remembered {fence:?}");
    a.terminate().await.expect("stop A");

    // The old primary comes back on its own: a primary still, one timeline behind.
    cluster.servers[old]
        .start_again()
        .expect("stale primary starts");
    let a = DaemonProcess::start(cluster_host(&url, &data, &config))
        .await
        .expect("host A starts again");
    let api = Api::new(a.base_url());
    let (status, d) = api
        .create(json!({"targetUrl": receiver.url("/hook"), "body": {"after": "restart"}}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{d}\n{}", a.stderr());
    let after = id_of(&d);
    api.wait_status(&after, &["succeeded"], WAIT)
        .await
        .expect("delivered");
    assert!(
        a.stderr()
            .contains("is a stale primary: it writes on timeline 1"),
        "{}",
        a.stderr()
    );
    let sql = format!("SELECT count(*) FROM deliveries WHERE id = '{after}'");
    let count = |server: usize| {
        let sql = sql.clone();
        let server = &cluster.servers[server];
        async move { server.scalar_in("spool", &sql).await.expect("count") }
    };
    assert_eq!(
        count(cluster.primary).await.as_deref(),
        Some("1"),
        "not on the new primary"
    );
    assert_eq!(
        count(old).await.as_deref(),
        Some("0"),
        "written to the stale primary"
    );

    // A host that names only the stale primary does not start.
    let only_stale = format!(
        "postgres://postgres@127.0.0.1:{}/spool",
        cluster.servers[old].port()
    );
    let (status, stderr) = DaemonProcess::run_to_exit(cluster_host(&only_stale, &data, &config))
        .await
        .expect("runs to its exit");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is a stale primary"), "{stderr}");
}

/// A primary whose synchronous standby is gone makes every commit wait. A host started against
/// it says so at once, says what its migration waits on while it waits (SyncRep), and gives up
/// after `--db-start-timeout` with that reason (exit 1) instead of hanging silently. A running
/// host whose standby goes away reports not ready, naming the reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_against_a_missing_synchronous_standby_says_so_within_its_timeout() {
    let Some(server) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    // Both databases first: a commit made after the standby is named waits for it.
    for name in ["spool", "fresh"] {
        server
            .execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("database");
    }
    let url = format!("postgres://postgres@127.0.0.1:{}/spool", server.port());
    let data = TempDir::new().expect("dir");
    let running = DaemonProcess::start(
        DaemonOptions::new(PathBuf::from(&url))
            .args(["--data-dir", &data.path().display().to_string()]),
    )
    .await
    .expect("host starts");
    server
        .execute("ALTER SYSTEM SET synchronous_standby_names = 'gone'")
        .await
        .expect("name a standby");
    server
        .execute("SELECT pg_reload_conf()")
        .await
        .expect("reload");
    let api = Api::new(running.base_url());
    // The reload reaches the server's sessions within moments, and readiness answers from a
    // probe up to a second old: asked until it says not ready, each answer within 10 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let body = loop {
        let asked = tokio::time::Instant::now();
        let (status, _, body) = tokio::time::timeout(
            Duration::from_secs(10),
            api.request(http::Method::GET, "/readyz", None),
        )
        .await
        .expect("readyz answers within 10 s")
        .expect("readyz");
        let body = String::from_utf8_lossy(&body).into_owned();
        if status == 503 {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still ready 30 s after the standby was named: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200).saturating_sub(asked.elapsed())).await;
    };
    assert!(body.contains("waits for a synchronous standby"), "{body}");
    drop(running);

    let fresh = TempDir::new().expect("dir");
    let url = format!("postgres://postgres@127.0.0.1:{}/fresh", server.port());
    let started = tokio::time::Instant::now();
    let (status, stderr) = DaemonProcess::run_to_exit(
        DaemonOptions::new(PathBuf::from(url))
            .args(["--data-dir", &fresh.path().display().to_string()])
            .args(["--db-start-timeout", "7s"])
            .ready_timeout(Duration::from_secs(30)),
    )
    .await
    .expect("runs to its exit");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        took >= Duration::from_secs(7) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert!(
        stderr.contains("every commit waits for a synchronous standby"),
        "{stderr}"
    );
    assert!(
        stderr.contains("start-up is waiting on the database") && stderr.contains("SyncRep"),
        "{stderr}"
    );
    assert!(
        stderr.contains("migrate the schema did not finish within 7 s"),
        "{stderr}"
    );
}

/// A server that stops taking writes under a running host (here `default_transaction_read_only`,
/// as a demoted or misconfigured server does) gets creates answered 503 `storage_unavailable`
/// saying what to do, not 500; `/readyz` says the same. A host pointed at a standby alone does
/// not start, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_server_is_unavailable_and_a_standby_is_refused() {
    let Some(first) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let cluster = Cluster::start(first, false).await.expect("cluster");
    let data = TempDir::new().expect("dir");
    let url =
        |server: &PrivateServer| format!("postgres://postgres@127.0.0.1:{}/spool", server.port());
    let standby_only = DaemonOptions::new(PathBuf::from(url(cluster.standby())))
        .args(["--data-dir", &data.path().display().to_string()]);
    let (status, stderr) = DaemonProcess::run_to_exit(standby_only)
        .await
        .expect("runs to its exit");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is a standby (in recovery, read-only): spoold needs the primary"),
        "{stderr}"
    );

    let daemon = DaemonProcess::start(
        DaemonOptions::new(PathBuf::from(url(cluster.primary())))
            .args(["--data-dir", &data.path().display().to_string()]),
    )
    .await
    .expect("host starts on the primary");
    let receiver = Receiver::start().await.expect("receiver");
    cluster
        .primary()
        .execute("ALTER DATABASE spool SET default_transaction_read_only = on")
        .await
        .expect("read-only");
    // Sessions take the database's default when they start: new ones only.
    cluster
        .primary()
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = 'spool' AND pid <> pg_backend_pid()",
        )
        .await
        .expect("drop sessions");
    let api = Api::new(daemon.base_url());
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, _, body) = api
            .request(http::Method::GET, "/readyz", None)
            .await
            .expect("readyz");
        let body = String::from_utf8_lossy(&body);
        if status == 503 && body.contains("accepts no writes") {
            assert!(body.contains("point --db at the primary"), "{body}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..3 {
        let (status, d) = api
            .create(json!({"targetUrl": receiver.url("/hook")}))
            .await
            .expect("create");
        assert_eq!(status, 503, "{d}");
        assert_eq!(d["error"]["code"], "storage_unavailable", "{d}");
    }
}
