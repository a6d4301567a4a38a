//! Several hosts on one PostgreSQL database: real `spoold` processes sharing a database of the
//! test's own, one receiver. Work is shared, an idempotency key makes one row whichever host
//! takes it, a host killed mid-run loses nothing, a task lock holds across hosts, the daemons
//! ride out the database dropping their connections, and hosts without LISTEN/NOTIFY
//! (`--db-notify off`) share work by polling alone.
//!
//! Skipped (with a message) without `SPOOLD_TEST_PG_URL`; `.ci/run` sets it, so there they
//! are mandatory.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use spool_testkit::{
    Api, DaemonOptions, DaemonProcess, PrivateServer, Receiver, Reply, TestDatabase,
};
use tempfile::TempDir;

use crate::tasks::{get, id, submit, wait_task, Setup};
use crate::{commits, create_for_later, id_of, FAST_RETRIES, WAIT};

/// A request timeout and lease short enough that a dead host's claims come back in seconds.
const SHORT_LEASE: &[&str] = &["--request-timeout", "1s", "--lease", "3s"];

/// A `spoold` process on `db`, keeping its task files in a directory of its own.
async fn host(db: &TestDatabase, data: &TempDir, extra: &[&str]) -> DaemonProcess {
    DaemonProcess::start(host_options(db, data, extra))
        .await
        .expect("host starts")
}

fn host_options(db: &TestDatabase, data: &TempDir, extra: &[&str]) -> DaemonOptions {
    DaemonOptions::new(PathBuf::from(db.url()))
        .args(FAST_RETRIES.iter().copied())
        .args(SHORT_LEASE.iter().copied())
        .args(["--data-dir".to_owned(), data.path().display().to_string()])
        .args(extra.iter().copied())
}

/// The delivery ids the receiver saw, with how many requests each.
fn seen(receiver: &Receiver) -> HashMap<String, usize> {
    let mut seen = HashMap::new();
    for r in receiver.requests() {
        if let Some(id) = r.header("x-spoold-delivery-id") {
            *seen.entry(id.to_owned()).or_insert(0) += 1;
        }
    }
    seen
}

async fn wait_for<F: Fn() -> bool>(what: &str, timeout: Duration, done: F) {
    let deadline = tokio::time::Instant::now() + timeout;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn attempts_made(api: &Api) -> f64 {
    api.metric("spoold_delivery_attempts_total")
        .await
        .expect("metrics")
        .unwrap_or(0.0)
}

/// 20,000 deliveries enqueued through two hosts: each delivered, both hosts did work, and a
/// delivery reached the receiver twice only if its first claim was taken back.
#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_share_one_queue() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    const N: usize = 20_000;
    let receiver = Receiver::start().await.expect("receiver");
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = host(&db, &data_a, &[]).await;
    let b = host(&db, &data_b, &[]).await;
    let apis = Arc::new([Api::new(a.base_url()), Api::new(b.base_url())]);
    let url = receiver.url("/hook");
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..32 {
        let apis = Arc::clone(&apis);
        let url = url.clone();
        writers.spawn(async move {
            let mut ids = Vec::new();
            for n in (w..N).step_by(32) {
                let (status, d) = apis[n % 2]
                    .create(json!({"targetUrl": url, "body": {"n": n}}))
                    .await
                    .expect("create");
                assert_eq!(status, 201, "{d}");
                ids.push(id_of(&d));
            }
            ids
        });
    }
    let mut ids = HashSet::new();
    while let Some(batch) = writers.join_next().await {
        ids.extend(batch.expect("writer"));
    }
    assert_eq!(ids.len(), N, "every create made its own delivery");
    wait_for("every delivery to arrive", Duration::from_secs(180), || {
        seen(&receiver).len() >= N
    })
    .await;
    let seen = seen(&receiver);
    assert!(ids.iter().all(|id| seen.contains_key(id)));
    for (id, times) in seen.iter().filter(|(_, n)| **n > 1) {
        let (_, attempts) = apis[0].attempts(id).await.expect("attempts");
        assert!(
            attempts["attempts"]
                .as_array()
                .expect("attempts")
                .iter()
                .any(|a| a["errorCode"] == "lease_expired"),
            "{id} arrived {times} times without a lease taken back: {attempts}"
        );
    }
    for api in apis.iter() {
        assert!(attempts_made(api).await > 0.0, "both hosts delivered");
    }
    let (_, page) = apis[1]
        .list("?status=succeeded&limit=1")
        .await
        .expect("list");
    assert_eq!(page["deliveries"].as_array().map(Vec::len), Some(1));
}

/// A host killed with deliveries in flight: the other one sends them once their lease has run
/// out; none is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_hosts_deliveries_are_sent_by_the_other() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    // Slow answers: the requests are on the wire when the host dies.
    receiver.respond_with(Reply::status(200).delay(Duration::from_secs(30)));
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let mut a = host(&db, &data_a, &[]).await;
    let api_a = Api::new(a.base_url());
    let mut ids = Vec::new();
    for n in 0..10 {
        let (status, d) = api_a
            .create(
                json!({"targetUrl": receiver.url("/hook"), "body": {"n": n}, "maxAttempts": 100}),
            )
            .await
            .expect("create");
        assert_eq!(status, 201, "{d}");
        ids.push(id_of(&d));
    }
    // A's per-target limit (8) is on the wire.
    receiver
        .wait_for_requests(8, WAIT)
        .await
        .expect("host A sends");
    let b = host(&db, &data_b, &[]).await;
    let api_b = Api::new(b.base_url());
    a.kill9();
    receiver.respond_with(Reply::status(200));
    for id in &ids {
        api_b
            .wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered by host B");
    }
    // Host A's claims at its death were taken back, not waited out forever.
    let mut taken_back = 0;
    for id in &ids {
        let (_, attempts) = api_b.attempts(id).await.expect("attempts");
        taken_back += attempts["attempts"]
            .as_array()
            .expect("attempts")
            .iter()
            .filter(|a| a["errorCode"] == "lease_expired")
            .count();
    }
    assert!(taken_back > 0, "no claim of the dead host was taken back");
    assert!(attempts_made(&api_b).await > 0.0);
}

/// 32 creates with one idempotency key, spread over two hosts at once: one delivery.
#[tokio::test(flavor = "multi_thread")]
async fn one_key_on_two_hosts_makes_one_delivery() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = host(&db, &data_a, &[]).await;
    let b = host(&db, &data_b, &[]).await;
    let apis = Arc::new([Api::new(a.base_url()), Api::new(b.base_url())]);
    let mut racers = tokio::task::JoinSet::new();
    for n in 0..32 {
        let apis = Arc::clone(&apis);
        let url = receiver.url("/hook");
        racers.spawn(async move {
            apis[n % 2]
                .create(json!({"targetUrl": url, "idempotencyKey": "once", "body": {"x": 1}}))
                .await
                .expect("create")
        });
    }
    let mut created = 0;
    let mut ids = HashSet::new();
    while let Some(answer) = racers.join_next().await {
        let (status, d) = answer.expect("racer");
        assert!(status == 201 || status == 200, "{status} {d}");
        created += usize::from(status == 201);
        ids.insert(id_of(&d));
    }
    assert_eq!((created, ids.len()), (1, 1));
    assert_eq!(
        db.scalar("SELECT count(*) FROM deliveries")
            .await
            .expect("count"),
        Some("1".into())
    );
}

/// Creates for later through host A cost host B nothing: they announce no work, so B's
/// scheduler is not woken into claims that find nothing (and A's own is not either).
#[tokio::test(flavor = "multi_thread")]
async fn creates_for_later_wake_no_host() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = host(&db, &data_a, &[]).await;
    let b = host(&db, &data_b, &[]).await;
    let (api_a, api_b) = (Api::new(a.base_url()), Api::new(b.base_url()));
    // Let start-up's own writes (recovery, the first sweep) finish first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = (commits(&api_a).await, commits(&api_b).await);
    const CREATES: u32 = 40;
    create_for_later(&api_a, CREATES).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let spent_a = commits(&api_a).await - before.0;
    let spent_b = commits(&api_b).await - before.1;
    // Sweeps (every 750 ms with the short lease, a few commits each) fall in the window on
    // both hosts: a handful of commits, not one or more a create.
    let spent = format!("host A {spent_a}, host B {spent_b} commits for {CREATES} creates");
    assert!(spent_a <= f64::from(CREATES + 12), "{spent}");
    assert!(spent_b <= 12.0, "{spent}");
}

/// A task holding `env:prod` on host A keeps host B's task for `env:prod` waiting; the two
/// scripts never overlap.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_lock_holds_across_hosts() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "span.sh",
        r#"echo "deploying $1"
echo "start $1 $(date +%s%N)" >> "$LOG"
sleep 1
echo "end $1 $(date +%s%N)" >> "$LOG""#,
    );
    let config = crate::task_locks::config_with(
        &setup,
        &format!(
            r#"
[tasks.deploy]
command = ["{span}", "{{env}}{{n}}"]
params.env = {{ pattern = "prod|dev" }}
params.n = {{ pattern = "[0-9]+" }}
idempotency_key = "{{env}}{{n}}"
locks = ["env:{{env}}"]
env = {{ LOG = "{log}" }}
"#,
            span = setup.path("span.sh"),
            log = setup.path("deploy.log"),
        ),
    );
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let a = host(&db, &data_a, &["--config", &config]).await;
    let b = host(&db, &data_b, &["--config", &config]).await;
    let (api_a, api_b) = (Api::new(a.base_url()), Api::new(b.base_url()));
    let (status, first) = submit(
        &api_a,
        json!({"type": "deploy", "params": {"env": "prod", "n": "1"}}),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    wait_task(&api_a, &id(&first), &["running"]).await;
    let (status, second) = submit(
        &api_b,
        json!({"type": "deploy", "params": {"env": "prod", "n": "2"}}),
    )
    .await;
    assert_eq!(status, 201, "{second}");
    // Seen from host B: A's task holds the lock and B's waits for it.
    let locks = get(&api_b, "/v1/locks").await;
    let prod = locks["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .find(|l| l["name"] == "env:prod")
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(prod["taskId"], first["id"], "{locks}");
    assert_eq!(
        get(&api_b, &format!("/v1/tasks/{}", id(&second))).await["status"],
        "pending"
    );
    for t in [&first, &second] {
        let done = wait_task(&api_b, &id(t), &["succeeded", "failed"]).await;
        assert_eq!(done["status"], "succeeded", "{done}");
    }
    let log = std::fs::read_to_string(setup.dir.join("deploy.log")).expect("log");
    let times: Vec<u128> = log
        .lines()
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|t| t.parse().ok())
                .expect("time")
        })
        .collect();
    let kinds: Vec<&str> = log
        .lines()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["start", "end", "start", "end"], "{log}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{log}");

    // An attempt's output is kept by the host that ran it; the other one names it.
    let path = format!("/v1/tasks/{}/output", id(&first));
    let mut answers = Vec::new();
    for (api, pid) in [(&api_a, a.pid()), (&api_b, b.pid())] {
        let (status, _, body) = api
            .request(http::Method::GET, &path, None)
            .await
            .expect("output");
        answers.push((status, String::from_utf8_lossy(&body).into_owned(), pid));
    }
    let ran = answers
        .iter()
        .find(|(s, ..)| *s == 200)
        .expect("one host kept it");
    assert_eq!(ran.1, "deploying prod1\n");
    let other = answers
        .iter()
        .find(|(s, ..)| *s == 404)
        .expect("the other did not");
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    assert!(
        other.1.contains(&format!(
            "it ran on host {host} (spoold pid {}), whose data directory keeps its log",
            ran.2
        )),
        "{}",
        other.1
    );
}

/// The database drops every connection of the daemons and refuses new ones for a while, as a
/// restarting server does: creates are refused with 503 `storage_unavailable`, `/readyz` says
/// not ready, and once the database is back the daemons serve again without a restart of their
/// own; everything acknowledged before is delivered.
#[tokio::test(flavor = "multi_thread")]
async fn hosts_ride_out_a_database_outage() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let data = TempDir::new().expect("dir");
    let daemon = host(&db, &data, &[]).await;
    let api = Api::new(daemon.base_url());
    let mut ids = Vec::new();
    for n in 0..20 {
        let (status, d) = api
            .create(json!({"targetUrl": receiver.url("/hook"), "body": {"n": n}}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{d}");
        ids.push(id_of(&d));
    }
    let name = db.name().to_owned();
    db.admin(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        .await
        .expect("refuse connections");
    db.admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
    ))
    .await
    .expect("drop connections");
    let (status, refused) = api
        .create(json!({"targetUrl": receiver.url("/hook")}))
        .await
        .expect("create during the outage");
    assert_eq!(status, 503, "{refused}");
    assert_eq!(refused["error"]["code"], "storage_unavailable");
    let (ready, _, _) = api
        .request(http::Method::GET, "/readyz", None)
        .await
        .expect("readyz");
    assert_eq!(ready, 503);
    db.admin(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true"))
        .await
        .expect("allow connections");
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, d) = api
            .create(json!({"targetUrl": receiver.url("/hook"), "body": {"after": true}}))
            .await
            .expect("create after the outage");
        if status == 201 {
            ids.push(id_of(&d));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never served again: {status} {d}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in &ids {
        api.wait_status(id, &["succeeded"], WAIT)
            .await
            .expect("delivered after the outage");
    }
    let (ready, _, _) = api
        .request(http::Method::GET, "/readyz", None)
        .await
        .expect("readyz");
    assert_eq!(ready, 200);
}

/// At most once, host A's request has arrived and its 200 is on the way back when A is stopped
/// past its lease; host B takes the claim back, and the delivery is `unknown`. When A wakes it
/// reads the 200 after all: that answer is recorded on the attempt and settles the delivery
/// `succeeded` (`late_answer`) instead of leaving it for a check or a person. Nothing is sent
/// again.
#[tokio::test(flavor = "multi_thread")]
async fn a_late_success_settles_what_a_take_back_left_unknown() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    receiver.respond_with(Reply::status(200).delay(Duration::from_millis(400)));
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let mut a = host(&db, &data_a, &["--reconcile-base", "5m"]).await;
    let (status, created) = Api::new(a.base_url())
        .create(json!({"targetUrl": receiver.url("/orders"), "mode": "at_most_once"}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    receiver
        .wait_for_requests(1, WAIT)
        .await
        .expect("the request arrived");
    a.signal("STOP").await.expect("SIGSTOP");
    let b = host(&db, &data_b, &["--reconcile-base", "5m"]).await;
    let api_b = Api::new(b.base_url());
    api_b
        .wait_status(&id, &["unknown"], WAIT)
        .await
        .expect("taken back");
    a.signal("CONT").await.expect("SIGCONT");
    let d = match api_b.wait_status(&id, &["succeeded"], WAIT).await {
        Ok(d) => d,
        Err(e) => panic!(
            "not settled by the late answer: {e:#}\nhost A:\n{}",
            a.stderr()
        ),
    };
    assert_eq!(d["lastResponseCode"], 200, "{d}");
    let (_, log) = api_b.transitions(&id).await.expect("transitions");
    let last = &log["transitions"]
        .as_array()
        .expect("log")
        .last()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&last["from"], &last["reason"]),
        (&json!("unknown"), &json!("late_answer")),
        "{log}"
    );
    let (_, tried) = api_b.attempts(&id).await.expect("attempts");
    assert_eq!(tried["attempts"][0]["httpStatus"], 200, "{tried}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.requests().len(), 1, "sent again");
    drop((a, b));
}

/// A newer spoold migrates the shared database while this host runs (simulated here: the
/// schema's version raised past this binary's). While the new schema still serves hosts of this
/// one, the host runs on, warned once. Once it no longer does, the host stops by itself within
/// seconds — exit 1, the reason as its last line — instead of failing request after request;
/// started again, it refuses the database (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn a_host_stops_when_a_newer_host_migrates_past_it() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let data = TempDir::new().expect("dir");
    let mut daemon = host(&db, &data, &[]).await;
    let api = Api::new(daemon.base_url());
    let ours = spool_store::postgres::SCHEMA_VERSION;
    let oldest = db
        .scalar("SELECT value FROM meta WHERE key = 'schema_oldest_host'")
        .await
        .expect("read meta");
    assert_eq!(
        oldest,
        Some(format!("{ours}:{ours}")),
        "the migrating host says whom it serves"
    );

    db.execute(&format!(
        "UPDATE spoold_schema SET version = {}; \
         UPDATE meta SET value = '{}:{ours}' WHERE key = 'schema_oldest_host'",
        ours + 1,
        ours + 1
    ))
    .await
    .expect("a compatible migration");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, d) = api
        .create(json!({"targetUrl": receiver.url("/hook")}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{d}");
    api.wait_status(&id_of(&d), &["succeeded"], WAIT)
        .await
        .expect("delivered beside the newer schema");
    let warned = daemon.stderr().matches("lets this one").count();
    assert_eq!(warned, 1, "{}", daemon.stderr());

    db.execute(&format!(
        "UPDATE meta SET value = '{0}:{0}' WHERE key = 'schema_oldest_host'",
        ours + 1
    ))
    .await
    .expect("an incompatible migration");
    let status = daemon
        .wait_exit(Duration::from_secs(15))
        .await
        .expect("the host stops by itself");
    assert_eq!(status.code(), Some(1), "{}", daemon.stderr());
    let log = daemon.stderr();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("spoold: a newer spoold migrated the database"),
        "{log}"
    );

    let (status, out) = DaemonProcess::run_to_exit(
        DaemonOptions::new(PathBuf::from(db.url()))
            .args(["--data-dir".to_owned(), data.path().display().to_string()]),
    )
    .await
    .expect("run");
    assert_eq!(status.code(), Some(1), "{out}");
    assert!(out.contains("newer than this spoold supports"), "{out}");
}

/// A server whose `max_connections` is taken refuses the daemon's next connection: the create
/// that needed it is answered 503 `storage_unavailable`, the log names the cause and the flag
/// (once, not per request), and the daemon serves again as soon as connections are free.
/// Under load a host opens at most `--db-connections` (9 by default: ten hosts fit in
/// PostgreSQL's default 100).
#[tokio::test(flavor = "multi_thread")]
async fn a_server_out_of_connections_is_named_and_ridden_out() {
    const MAX: usize = 12;
    let Some(server) = spool_testkit::privileged::available(
        "SPOOLD_REQUIRE_TOOLS",
        PrivateServer::start_with(&[("max_connections", &MAX.to_string())]),
    ) else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let data = TempDir::new().expect("dir");
    // The default number of connections (tests elsewhere use the fewest).
    let opts = DaemonOptions::new(PathBuf::from(server.url()))
        .args(FAST_RETRIES.iter().copied())
        .args(["--data-dir".to_owned(), data.path().display().to_string()])
        .env(
            "SPOOLD_DB_CONNECTIONS",
            spool_store::postgres::DEFAULT_CONNECTIONS.to_string(),
        );
    let daemon = DaemonProcess::start(opts).await.expect("daemon starts");
    let api = Api::new(daemon.base_url());
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The test takes every connection the idle daemon does not hold; a create needs another.
    let idle = server.client_count(None).await.expect("count");
    let crowd = server.hold(MAX - idle).await.expect("hold connections");
    let create = || api.create(json!({"targetUrl": receiver.url("/hook")}));
    let (status, err) = create().await.expect("create");
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "storage_unavailable", "{err}");
    for _ in 0..5 {
        assert_eq!(create().await.expect("create").0, 503);
    }
    let log = daemon.stderr();
    let named: Vec<_> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("max_connections is taken"))
        .collect();
    assert_eq!(named.len(), 1, "{log}");
    assert!(named[0].contains("--db-connections"), "{log}");

    drop(crowd);
    let (status, d) = create().await.expect("create");
    assert_eq!(status, 201, "{d}");
    api.wait_status(&id_of(&d), &["succeeded"], WAIT)
        .await
        .expect("delivered");
    // Under load: every create answered, never more than nine connections.
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (api, url) = (Api::new(daemon.base_url()), receiver.url("/hook"));
        load.spawn(async move {
            for _ in 0..10 {
                let (status, d) = api.create(json!({"targetUrl": url})).await.expect("create");
                assert_eq!(status, 201, "{d}");
            }
        });
    }
    let mut most = 0;
    while !load.is_empty() {
        let spoold = server.client_count(Some("spoold")).await.expect("count");
        most = most.max(spoold);
        if let Ok(Some(done)) =
            tokio::time::timeout(Duration::from_millis(20), load.join_next()).await
        {
            done.expect("creates");
        }
    }
    assert!((idle..=9).contains(&most), "{most} connections");
}

/// The PostgreSQL server itself restarts while creates keep coming: the daemon reconnects by
/// itself, every create it acknowledged (201) is delivered, and it serves again afterwards.
/// On a server of the test's own (restarting the shared one would cut off other tests).
#[tokio::test(flavor = "multi_thread")]
async fn a_database_restart_is_ridden_out() {
    let Some(server) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let data = TempDir::new().expect("dir");
    let opts = DaemonOptions::new(PathBuf::from(server.url()))
        .args(FAST_RETRIES.iter().copied())
        .args(["--data-dir".to_owned(), data.path().display().to_string()]);
    let daemon = DaemonProcess::start(opts)
        .await
        .expect("daemon on the private server");
    let api = Arc::new(Api::new(daemon.base_url()));
    let stop = tokio_util::sync::CancellationToken::new();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4 {
        let (api, stop, url) = (Arc::clone(&api), stop.clone(), receiver.url("/hook"));
        writers.spawn(async move {
            let (mut acked, mut refused) = (Vec::new(), 0);
            let mut n = 0;
            while !stop.is_cancelled() {
                n += 1;
                let (status, d) = api
                    .create(json!({"targetUrl": url, "body": {"w": w, "n": n}}))
                    .await
                    .expect("create");
                match status {
                    201 => acked.push(id_of(&d)),
                    503 => {
                        assert_eq!(d["error"]["code"], "storage_unavailable", "{d}");
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    other => panic!("create answered {other}: {d}"),
                }
            }
            (acked, refused)
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.restart().expect("restart the server");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.cancel();
    let mut acked = Vec::new();
    while let Some(done) = writers.join_next().await {
        let (ids, _refused) = done.expect("writer");
        acked.extend(ids);
    }
    assert!(!acked.is_empty());
    for id in &acked {
        if let Err(e) = api.wait_status(id, &["succeeded"], WAIT).await {
            panic!(
                "an acknowledged create was not delivered: {e:#}\ndaemon log:\n{}",
                daemon.stderr()
            );
        }
    }
    let (status, d) = api
        .create(json!({"targetUrl": receiver.url("/hook")}))
        .await
        .expect("create after the restart");
    assert_eq!(status, 201, "{d}");
}

/// Stop cycles of the SIGSTOP test (each stops host A past its lease: about 4.5 s).
const STOP_CYCLES: usize = 50;

/// PostgreSQL, two hosts, at-most-once deliveries streaming to a quick target. Host A is stopped
/// (SIGSTOP) past its lease again and again, and host B takes A's claims back: those whose
/// request may have left become `unknown`. When A wakes it writes no request for a claim it lost:
/// no request whose body A let through after a wake reaches the target after the moment its
/// delivery was called `unknown`, and no delivery is received twice.
///
/// The window the design leaves — A stopped between the body's look at the clock and the write
/// itself, a few microseconds wide — is hit by about one run in six (measured 2026-12-06: 1 of
/// 6 runs, 50 stops each, about 200 requests a second). A's log says when each body's look was (`BODY_RELEASED`, at `trace`), so a late
/// request is told apart: looked before a stop and arrived after the wake, it was caught inside
/// the window (counted, shown, allowed); looked after a wake, the gate failed.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_host_writes_nothing_after_its_claim_was_taken_back() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    receiver.respond_with(Reply::status(200).delay(Duration::from_millis(20)));
    // With the short lease every host here has (`--lease 3s --request-timeout 1s`).
    let flags = ["--reconcile-base", "5m", "--per-target-concurrency", "8"];
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    let mut a = DaemonProcess::start(host_options(&db, &data_a, &flags).env(
        "SPOOLD_LOG",
        "info,spoold::deliveries::outbound::gate=trace",
    ))
    .await
    .expect("host A starts");
    let b = host(&db, &data_b, &flags).await;
    // The test's clock and the database's agree (one machine): receipts in wall-clock time.
    let (mono, wall) = (std::time::Instant::now(), std::time::SystemTime::now());
    let wall_us = |at: std::time::Instant| {
        let t = wall + at.duration_since(mono);
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as i64)
    };
    // A client keeps the queue fed, so a stop finds requests at every step of their way out.
    let creating = tokio::spawn({
        let api = Api::new(b.base_url());
        let url = receiver.url("/orders");
        async move {
            // With a body, as at-most-once POSTs have: the body is what holds a late request
            // back (a bodyless one has only the check before its connection: see the book,
            // docs/src/at-most-once.md).
            while let Ok((201, _)) = api
                .create(json!({"targetUrl": url, "mode": "at_most_once", "body": {"order": 1}}))
                .await
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    // When A was woken (wall clock, µs): A runs only outside [stop, wake].
    let mut wakes = Vec::with_capacity(STOP_CYCLES);
    for cycle in 0..STOP_CYCLES {
        // A moment of work, then a stop that outlasts A's lease.
        tokio::time::sleep(Duration::from_millis(300 + 37 * (cycle as u64 % 11))).await;
        a.signal("STOP").await.expect("SIGSTOP");
        tokio::time::sleep(Duration::from_millis(3_800)).await;
        // Taken before the signal: A cannot have run between this and its wake.
        wakes.push(wall_us(std::time::Instant::now()));
        a.signal("CONT").await.expect("SIGCONT");
    }
    creating.abort();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let received = receiver.requests();
    let counts = seen(&receiver);
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "received more than once: {twice:?}");
    // Every delivery a take-back made `unknown`, and when (the late 2xx of some has settled
    // them since, `late_answer`).
    let rows = db
        .scalar(
            "SELECT string_agg(delivery_id || ' ' || at, ',') FROM transitions \
             WHERE to_status = 'unknown' AND reason = 'lease_expired'",
        )
        .await
        .expect("read the transitions")
        .unwrap_or_default();
    let unknown_at: HashMap<&str, i64> = rows
        .split(',')
        .filter_map(|row| row.split_once(' '))
        .map(|(id, at)| (id, at.parse().expect("a time")))
        .collect();
    let looks = body_looks(&a.stderr());
    assert!(
        !looks.is_empty(),
        "host A logged no body's look: is its gate's trace event on?"
    );
    let (mut late, mut in_window, mut taken_back) = (Vec::new(), Vec::new(), 0);
    for r in &received {
        let Some(id) = r.header(spool_proto::DELIVERY_ID_HEADER) else {
            continue;
        };
        let Some(&unknown_at) = unknown_at.get(id) else {
            continue;
        };
        taken_back += 1;
        // The whole request had arrived by `received_at`; it began leaving just before.
        let arrived = wall_us(r.received_at);
        if arrived <= (unknown_at + 20) * 1000 {
            continue;
        }
        // A's last look for it before it arrived, and the first wake after that look.
        let looked = looks
            .get(id)
            .and_then(|at| at.iter().copied().filter(|&t| t <= arrived).max());
        let woken = looked.and_then(|t| wakes.iter().copied().find(|&w| w > t));
        let what = (id.to_owned(), (arrived / 1000) - unknown_at, looked, woken);
        match woken {
            // Looked, stopped, woken, written: the window.
            Some(w) if arrived >= w => in_window.push(what),
            _ => late.push(what),
        }
    }
    let settled_late = db
        .scalar("SELECT count(*) FROM transitions WHERE reason = 'late_answer'")
        .await
        .expect("count");
    eprintln!(
        "{} requests received, {taken_back} of them taken back while on the wire, {} of \
         those settled by their late 2xx; {} caught by a stop between the look and the write \
         (id, ms after `unknown`, look, wake in µs): {in_window:?}",
        received.len(),
        settled_late.unwrap_or_default(),
        in_window.len(),
    );
    assert!(taken_back > 0, "no stop came while a request was out");
    assert!(
        late.is_empty(),
        "written after the claim was taken back, its body let through after a wake (id, ms \
         after `unknown`, look, wake in µs): {late:?}"
    );
    a.kill9();
    drop(b);
}

/// When a daemon's write gate let each delivery's body through (`looked_at_us`, µs since the
/// Unix epoch), from its `trace` log lines.
fn body_looks(log: &str) -> HashMap<String, Vec<i64>> {
    let mut looks: HashMap<String, Vec<i64>> = HashMap::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["message"] != spoold::deliveries::outbound::BODY_RELEASED {
            continue;
        }
        if let (Some(id), Some(at)) = (
            event["delivery_id"].as_str(),
            event["looked_at_us"].as_i64(),
        ) {
            looks.entry(id.to_owned()).or_default().push(at);
        }
    }
    looks
}

/// Sessions of the test's database whose last statement was a LISTEN, UNLISTEN or NOTIFY (a
/// listening connection runs nothing else), or that called pg_notify.
async fn listening_sessions(db: &TestDatabase) -> u32 {
    db.scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND (query ~* '^\\s*(LISTEN|UNLISTEN|NOTIFY)\\M' OR query ~* 'pg_notify\\s*\\(')",
    )
    .await
    .expect("read pg_stat_activity")
    .and_then(|n| n.parse().ok())
    .unwrap_or(u32::MAX)
}

/// An operator's pause or resume of `receiver`'s origin on the host behind `api`.
async fn target_control(api: &Api, receiver: &Receiver, action: &str) -> u16 {
    let origin = format!("http%3A%2F%2F127.0.0.1%3A{}", receiver.port());
    let (status, _, _) = api
        .request(
            http::Method::POST,
            &format!("/v1/targets/{origin}/{action}"),
            None,
        )
        .await
        .expect("target control");
    status
}

/// The pid of the daemon that ran the first attempt of task `id` (executor `host:pid:run`).
async fn ran_on(api: &Api, id: &str) -> u32 {
    let attempts = get(api, &format!("/v1/tasks/{id}/attempts")).await;
    attempts["attempts"][0]["executorId"]
        .as_str()
        .and_then(|e| e.split(':').nth(1))
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no executor pid in {attempts}"))
}

/// Two hosts with `--db-notify off` — no LISTEN, no NOTIFY, each polling every second — share
/// work enqueued on either. Deliveries created through a host whose target is paused there are
/// sent by the other, each within a few seconds of its create (the poll finds it; the other
/// host's sweep, which would too, comes only every 5 s with the default lease). A task
/// submitted through a host whose one task slot is busy is run by the other (whose runner would
/// otherwise sleep for a minute). No session of theirs ever LISTENs or NOTIFYs; a host started
/// with notify on, the control, is seen listening by the same probe.
#[tokio::test(flavor = "multi_thread")]
async fn poll_only_hosts_share_work_without_listen_or_notify() {
    let Some(db) = TestDatabase::create().await.expect("test database") else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let dir = TempDir::new().expect("temp dir");
    let setup = Setup::new(dir.path());
    setup.script(
        "hold.sh",
        r#"i=0
while [ ! -e "$RELEASE" ] && [ "$i" -lt 600 ]; do sleep 0.05; i=$((i + 1)); done"#,
    );
    setup.script("quick.sh", "echo done");
    let release = dir.path().join("release");
    let config = crate::task_locks::config_with(
        &setup,
        &format!(
            r#"
[tasks.hold]
command = ["{hold}"]
env = {{ RELEASE = "{release}" }}

[tasks.quick]
command = ["{quick}"]
"#,
            hold = setup.path("hold.sh"),
            quick = setup.path("quick.sh"),
            release = release.display(),
        ),
    );
    let (data_a, data_b) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
    // The default lease: sweeps every 5 s, so a pickup within a few seconds is the poll's.
    let start = |data: &TempDir| {
        let opts = DaemonOptions::new(PathBuf::from(db.url()))
            .args(FAST_RETRIES.iter().copied())
            .args(["--db-notify", "off", "--task-concurrency", "1"])
            .args(["--config", config.as_str()])
            .args(["--data-dir".to_owned(), data.path().display().to_string()]);
        DaemonProcess::start(opts)
    };
    let a = start(&data_a).await.expect("host A starts");
    let b = start(&data_b).await.expect("host B starts");
    let hosts = [
        (Api::new(a.base_url()), a.pid()),
        (Api::new(b.base_url()), b.pid()),
    ];
    let mut probes = vec![listening_sessions(&db).await];

    // Deliveries: created through the host whose target is paused, sent by the other.
    for (through, other) in [(0, 1), (1, 0)] {
        let api = &hosts[through].0;
        assert_eq!(target_control(api, &receiver, "pause").await, 200);
        let before = (
            attempts_made(api).await,
            attempts_made(&hosts[other].0).await,
        );
        for n in 0..5 {
            let (status, d) = api
                .create(json!({"targetUrl": receiver.url("/hook"), "body": {"n": n}}))
                .await
                .expect("create");
            assert_eq!(status, 201, "{d}");
            let created = std::time::Instant::now();
            api.wait_status(&id_of(&d), &["succeeded"], WAIT)
                .await
                .expect("sent by the other host");
            let took = created.elapsed();
            assert!(
                took < Duration::from_secs(3),
                "host {other} took {took:?} to find a delivery of host {through}: not by its \
                 1 s poll"
            );
        }
        assert_eq!(attempts_made(api).await, before.0, "sent by its own host");
        assert_eq!(attempts_made(&hosts[other].0).await, before.1 + 5.0);
        assert_eq!(target_control(api, &receiver, "resume").await, 200);
        probes.push(listening_sessions(&db).await);
    }

    // Tasks: submitted through the host whose one slot is busy, run by the other.
    let (status, hold) = submit(&hosts[0].0, json!({"type": "hold"})).await;
    assert_eq!(status, 201, "{hold}");
    wait_task(&hosts[0].0, &id(&hold), &["running"]).await;
    let held_by = ran_on(&hosts[0].0, &id(&hold)).await;
    let busy = hosts
        .iter()
        .position(|(_, pid)| *pid == held_by)
        .expect("the hold task runs on one of the hosts");
    let idle = 1 - busy;
    let (status, quick) = submit(&hosts[busy].0, json!({"type": "quick"})).await;
    assert_eq!(status, 201, "{quick}");
    let submitted = std::time::Instant::now();
    let done = wait_task(&hosts[busy].0, &id(&quick), &["succeeded", "failed"]).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    let took = submitted.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "the idle host took {took:?} to find the task: not by its 1 s poll"
    );
    assert_eq!(ran_on(&hosts[busy].0, &id(&quick)).await, hosts[idle].1);
    std::fs::write(&release, "").expect("release the hold task");
    let held = wait_task(&hosts[idle].0, &id(&hold), &["succeeded", "failed"]).await;
    assert_eq!(held["status"], "succeeded", "{held}");
    probes.push(listening_sessions(&db).await);
    assert!(
        probes.iter().all(|&n| n == 0),
        "sessions listening or notifying: {probes:?}"
    );

    // The control: a host with notify on (the default) is seen by the same probe. (A and B
    // stop first: the test never holds more than two hosts' connections.)
    drop((a, b));
    let data_c = TempDir::new().expect("dir");
    let c = DaemonProcess::start(
        DaemonOptions::new(PathBuf::from(db.url()))
            .args(["--data-dir".to_owned(), data_c.path().display().to_string()]),
    )
    .await
    .expect("host C starts");
    let deadline = tokio::time::Instant::now() + WAIT;
    while listening_sessions(&db).await != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the probe never saw host C listen"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);
}
