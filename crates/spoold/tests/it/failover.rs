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

/// How long the server stays down: longer than the task's lease, shorter than a delivery's.
const OUTAGE: Duration = Duration::from_secs(7);

/// How long the receiver takes to answer: the server is down by then.
const ANSWER_AFTER: Duration = Duration::from_secs(3);

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
/// wire, and stays down for 7 s — longer than the task's lease. The script exits 0 and the
/// target answers 200 while it is down: the host keeps each result (counted by
/// `spoold_unrecorded_results`, written to its data directory) and records it once the server is
/// back. The task succeeds instead of going to review, the at-least-once delivery is not sent
/// again, and the at-most-once one is not `unknown`.
#[tokio::test(flavor = "multi_thread")]
async fn results_that_come_during_an_outage_are_recorded_when_it_ends() {
    let Some(server) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let dir = TempDir::new().expect("dir");
    let setup = Setup::new(dir.path());
    let config = gated_task(&setup);
    let receivers = receivers().await;
    let data = TempDir::new().expect("dir");
    let daemon = DaemonProcess::start(host(&server, &data, &config))
        .await
        .expect("host starts");
    let api = Api::new(daemon.base_url());
    let work = start_work(&api, &receivers).await;
    server.stop().expect("stop the server");
    let down = tokio::time::Instant::now();
    open_gate(&setup);
    // The script ends now and the answers come soon: all three results are held, in memory and
    // on disk, while the server is down.
    let deadline = down + ANSWER_AFTER + Duration::from_secs(2);
    loop {
        let held = (
            unrecorded(&api, "delivery").await,
            unrecorded(&api, "task").await,
        );
        if held == (2.0, 1.0) && kept(&data).len() == 3 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "results held {held:?}, kept {:?}\n{}",
            kept(&data),
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep_until(down + OUTAGE).await;
    server.start_again().expect("start the server again");
    check_recorded(&api, &receivers, &work, || daemon.stderr()).await;
    assert_eq!(unrecorded(&api, "delivery").await, 0.0);
    assert_eq!(unrecorded(&api, "task").await, 0.0);
    assert!(kept(&data).is_empty(), "{:?}", kept(&data));
}

/// As above, but the host is killed (kill -9) while the server is down and its results are
/// held: they are in its data directory, and the host started again records them before it
/// takes anything back — the task succeeds, neither delivery is sent again or left `unknown`.
#[tokio::test(flavor = "multi_thread")]
async fn results_kept_on_disk_outlive_a_killed_host() {
    let Some(server) =
        spool_testkit::privileged::available("SPOOLD_REQUIRE_TOOLS", PrivateServer::start())
    else {
        return;
    };
    let dir = TempDir::new().expect("dir");
    let setup = Setup::new(dir.path());
    let config = gated_task(&setup);
    let receivers = receivers().await;
    let data = TempDir::new().expect("dir");
    let mut daemon = DaemonProcess::start(host(&server, &data, &config))
        .await
        .expect("host starts");
    let api = Api::new(daemon.base_url());
    let work = start_work(&api, &receivers).await;
    server.stop().expect("stop the server");
    open_gate(&setup);
    let deadline = tokio::time::Instant::now() + ANSWER_AFTER + Duration::from_secs(2);
    while kept(&data).len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "kept {:?}\n{}",
            kept(&data),
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first_log = daemon.stderr();
    daemon.kill9();
    server.start_again().expect("start the server again");
    let again = DaemonProcess::start(host(&server, &data, &config))
        .await
        .expect("host starts again");
    let api = Api::new(again.base_url());
    let log = || format!("{first_log}\n--- after the restart ---\n{}", again.stderr());
    check_recorded(&api, &receivers, &work, log).await;
    assert!(
        again
            .stderr()
            .contains("results an earlier run kept while the database was out of reach"),
        "{}",
        again.stderr()
    );
    assert!(kept(&data).is_empty(), "{:?}", kept(&data));
}
