//! Power loss, simulated: the daemon's data directory lives on [`PowerFs`], a FUSE file system
//! that keeps every write in memory until it is fsynced. Under concurrent, mixed-size load
//! (deliveries to a real receiver, tasks running `/bin/true`) the power is cut at a random
//! moment, the daemon killed, every write no fsync made durable thrown away, and the daemon
//! started again on what is left. Fifty times. After each cut:
//! - every delivery and task that was acknowledged (2xx) is there;
//! - every delivery or task seen succeeded before the cut is still succeeded (a state change
//!   is read only after its commit was made durable);
//! - nothing answered as failed is stored;
//! - SQLite's `PRAGMA integrity_check` says `ok`.
//!
//! And fsync errors with Linux's semantics (the failed writes are dropped from the disk for
//! good): a create whose commit's fsync failed is never acknowledged and is not stored
//! afterwards, whether the power is then cut or the daemon killed; the daemon goes on serving.
//! A disk that fills up mid-load and then loses power keeps what was acknowledged too.
//!
//! Needs root and /dev/fuse; without them the tests say so and pass, unless
//! `SPOOLD_REQUIRE_MOUNT=1` (CI). `SPOOLD_POWER_SEED` replays a run's random choices (the seed
//! is printed).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::Method;
use serde_json::{json, Value};
use spool_testkit::privileged::available;
use spool_testkit::{Api, DaemonOptions, DaemonProcess, PowerFs, Receiver};
use tempfile::TempDir;
use tokio::task::JoinSet;

/// Power cuts in the main test (the issue asks for at least fifty).
const CYCLES: u64 = 50;
/// Clients creating at once; every fourth request submits a task instead.
const CLIENTS: usize = 6;
/// How long the load runs before the power is cut, at random in this range (milliseconds).
const CUT_AFTER_MS: std::ops::Range<u64> = 50..600;
/// Bodies from a few bytes to this many, so that some batches spill pages before COMMIT.
const MAX_BODY: u64 = 100_000;

#[tokio::test(flavor = "multi_thread")]
async fn every_acknowledged_write_survives_fifty_power_cuts() {
    let Some(mut bench) = available("SPOOLD_REQUIRE_MOUNT", Bench::new()) else {
        return;
    };
    let receiver = Receiver::start().await.expect("receiver");
    let target = receiver.url("/hook");
    let mut rng = Rng::seeded();
    let mut ledger = Ledger::default();
    let started = Instant::now();
    for cycle in 0..CYCLES {
        let mut daemon = bench.start().await;
        let api = Api::new(daemon.base_url());
        ledger.check_against(&api, cycle).await;

        let stop = Arc::new(AtomicBool::new(false));
        let load = Load::start(&api, &target, cycle, &stop, rng.next());
        tokio::time::sleep(Duration::from_millis(rng.within(CUT_AFTER_MS))).await;
        bench.disk.cut_power();
        daemon.kill9();
        stop.store(true, Ordering::Relaxed);
        let answers = load.finish().await;
        ledger.absorb(answers);

        bench.disk.restore_power().expect("power back");
        bench.integrity_check();
    }
    let mut daemon = bench.start().await;
    ledger
        .check_against(&Api::new(daemon.base_url()), CYCLES)
        .await;
    daemon.kill9();
    let counts = bench.disk.counts();
    eprintln!(
        "{CYCLES} power cuts in {:.1?}: {} deliveries and {} tasks acknowledged, {} seen \
         succeeded, {} refused, {} unanswered; disk: {counts:?}",
        started.elapsed(),
        ledger.deliveries.len(),
        ledger.tasks.len(),
        ledger.succeeded.len(),
        ledger.refused.len(),
        ledger.unanswered,
    );
    assert!(
        counts.dropped_bytes > 0,
        "no cut ever dropped an unsynced write: the cuts proved nothing"
    );
    assert!(ledger.deliveries.len() >= 100 && !ledger.succeeded.is_empty());
}

/// fsync fails now and then under load (each failure drops the writes it was to make durable):
/// the creates whose commit it was are refused, the others acknowledged, the daemon goes on;
/// after a power cut every acknowledged create is there and no refused one is.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_fsync_failed_is_refused_and_not_kept() {
    let Some(mut bench) = available("SPOOLD_REQUIRE_MOUNT", Bench::new()) else {
        return;
    };
    let mut run = Loaded::start(&bench).await;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(run.rng.within(20..120))).await;
        bench.disk.fail_fsyncs(1);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answers = run.finish().await;
    let failed = bench.disk.counts().failed_fsyncs;
    assert!(
        failed >= 10 && !answers.refused.is_empty(),
        "the load never met the failing fsyncs: {failed} failed, {} refused",
        answers.refused.len()
    );
    // Still serving, and durable again.
    let (status, body) = run
        .api
        .create(json!({ "targetUrl": run.target, "idempotencyKey": "after" }))
        .await
        .expect("create");
    assert_eq!(status, 201, "{body}");
    bench.disk.cut_power();
    run.daemon.kill9();
    bench.check_after_the_cut(answers).await;
}

/// The disk fills up in the middle of the load (`ENOSPC` on a write, wherever it lands: the WAL,
/// a spill, a checkpoint), then the power goes: every acknowledged create is there, no refused
/// one is.
#[tokio::test(flavor = "multi_thread")]
async fn a_disk_that_fills_up_then_loses_power_keeps_what_was_acknowledged() {
    let Some(mut bench) = available("SPOOLD_REQUIRE_MOUNT", Bench::new()) else {
        return;
    };
    let mut run = Loaded::start(&bench).await;
    tokio::time::sleep(Duration::from_millis(run.rng.within(100..400))).await;
    let room = run.rng.within(200_000..2_000_000);
    bench
        .disk
        .set_capacity(Some(bench.disk.used_bytes() + room));
    tokio::time::sleep(Duration::from_millis(800)).await;
    bench.disk.cut_power();
    run.daemon.kill9();
    let answers = run.finish().await;
    let refused_writes = bench.disk.counts().refused_writes;
    assert!(
        refused_writes > 0 && !answers.refused.is_empty(),
        "the load never met the full disk: {refused_writes} writes refused, {} creates refused",
        answers.refused.len()
    );
    bench.disk.set_capacity(None);
    bench.check_after_the_cut(answers).await;
}

/// A daemon on the bench under [`Load`], for a test to bring its fault into.
struct Loaded {
    daemon: DaemonProcess,
    api: Api,
    target: String,
    rng: Rng,
    stop: Arc<AtomicBool>,
    load: Load,
    _receiver: Receiver,
}

impl Loaded {
    async fn start(bench: &Bench) -> Loaded {
        let receiver = Receiver::start().await.expect("receiver");
        let target = receiver.url("/hook");
        let mut rng = Rng::seeded();
        let daemon = bench.start().await;
        let api = Api::new(daemon.base_url());
        let stop = Arc::new(AtomicBool::new(false));
        let load = Load::start(&api, &target, 0, &stop, rng.next());
        Loaded {
            daemon,
            api,
            target,
            rng,
            stop,
            load,
            _receiver: receiver,
        }
    }

    /// Stop the load and collect its answers (the daemon may be dead by now).
    async fn finish(&mut self) -> Answers {
        self.stop.store(true, Ordering::Relaxed);
        std::mem::replace(&mut self.load, Load::none())
            .finish()
            .await
    }
}

/// The hard case for "refused means not kept": the fsync of a create's commit fails and the
/// daemon dies before any later commit could overwrite what that commit wrote. The page cache
/// still holds those bytes (reads return them), so a restart without a power cut reads them.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_refused_for_a_failed_fsync_is_not_there_after_kill_9() {
    let Some(bench) = available("SPOOLD_REQUIRE_MOUNT", Bench::new()) else {
        return;
    };
    for round in 0..5 {
        let mut daemon = bench.start().await;
        let api = Api::new(daemon.base_url());
        let key = format!("refused-{round}");
        // The failing fsync must be the create's: a fresh daemon's checkpoint of what the last
        // one wrote fsyncs in the background for a moment after it listens.
        bench.quiet().await;
        bench.disk.fail_fsyncs(1);
        let (status, body) = api
            .create(json!({
                "targetUrl": "http://127.0.0.1:9/never",
                "notBefore": "2099-01-01T00:00:00Z",
                "idempotencyKey": key,
            }))
            .await
            .expect("create");
        assert_eq!(status, 500, "{body}");
        assert_eq!(body["error"]["code"], "persistence_failed", "{body}");
        daemon.kill9();
        let refused_log = daemon.stderr();
        let mut daemon = bench.start().await;
        let stored = stored_deliveries(&Api::new(daemon.base_url())).await;
        daemon.kill9();
        assert!(
            !stored.contains_key(&key),
            "round {round}: a create answered 500 after a failed fsync is stored\n\
             the daemon that refused it:\n{refused_log}\nthe next one:\n{}",
            daemon.stderr()
        );
    }
}

/// A daemon's data directory on a power-loss disk, and the task type the load submits.
struct Bench {
    disk: PowerFs,
    db: PathBuf,
    config: PathBuf,
    _dir: TempDir,
}

impl Bench {
    fn new() -> anyhow::Result<Bench> {
        let dir = TempDir::new()?;
        let mountpoint = dir.path().join("disk");
        std::fs::create_dir(&mountpoint)?;
        let disk = PowerFs::mount(&mountpoint)?;
        let config = dir.path().join("spoold.toml");
        std::fs::write(
            &config,
            "[tasks.ok]\ncommand = [\"/bin/true\"]\nconcurrency = 2\n",
        )?;
        Ok(Bench {
            db: mountpoint.join("data/spoold.db"),
            disk,
            config,
            _dir: dir,
        })
    }

    async fn start(&self) -> DaemonProcess {
        DaemonProcess::start(
            DaemonOptions::new(&self.db).args(["--config", &self.config.display().to_string()]),
        )
        .await
        .expect("daemon on the power-loss disk")
    }

    /// Until no fsync has come for 300 ms (at most 10 s): the daemon's background writes and
    /// checkpoints are done.
    async fn quiet(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut last = self.disk.counts().fsyncs;
        let mut since = tokio::time::Instant::now();
        while since.elapsed() < Duration::from_millis(300) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the disk never went quiet"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            let now = self.disk.counts().fsyncs;
            if now != last {
                (last, since) = (now, tokio::time::Instant::now());
            }
        }
    }

    /// With the power cut and the daemon dead: power back, the file checked, a daemon started
    /// on it, and everything `answers` acknowledged there, nothing it refused.
    async fn check_after_the_cut(&mut self, answers: Answers) {
        self.disk.restore_power().expect("power back");
        self.integrity_check();
        let mut ledger = Ledger::default();
        ledger.absorb(answers);
        let mut daemon = self.start().await;
        ledger.check_against(&Api::new(daemon.base_url()), 1).await;
        daemon.kill9();
        assert!(!daemon.stderr().contains("panicked"), "{}", daemon.stderr());
    }

    /// SQLite's own check of the database file as the power left it (after WAL recovery).
    fn integrity_check(&self) {
        let conn = rusqlite::Connection::open(&self.db).expect("open the database");
        let result: String = conn
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .expect("integrity_check");
        assert_eq!(result, "ok", "integrity_check after a power cut");
    }
}

/// What the daemon answered, over every cycle.
#[derive(Debug, Default)]
struct Ledger {
    /// Acknowledged deliveries: idempotency key → id.
    deliveries: HashMap<String, String>,
    /// Acknowledged task ids.
    tasks: HashSet<String>,
    /// Deliveries and tasks seen `succeeded` (ids).
    succeeded: HashSet<String>,
    /// Idempotency keys of refused creates (5xx).
    refused: HashSet<String>,
    unanswered: usize,
}

impl Ledger {
    fn absorb(&mut self, answers: Answers) {
        self.deliveries.extend(answers.deliveries);
        self.tasks.extend(answers.tasks);
        self.succeeded.extend(answers.succeeded);
        self.refused.extend(answers.refused);
        self.unanswered += answers.unanswered;
    }

    /// Everything acknowledged is there, nothing seen succeeded went back, nothing refused was
    /// stored.
    async fn check_against(&self, api: &Api, cycle: u64) {
        let stored = stored_deliveries(api).await;
        let tasks = stored_tasks(api).await;
        let lost: Vec<_> = self
            .deliveries
            .iter()
            .filter(|(key, id)| stored.get(*key).map(|(i, _)| i) != Some(*id))
            .collect();
        let lost_tasks: Vec<_> = self
            .tasks
            .iter()
            .filter(|id| !tasks.contains_key(*id))
            .collect();
        let kept: Vec<_> = self
            .refused
            .iter()
            .filter(|key| stored.contains_key(*key))
            .collect();
        let states: HashMap<&str, &str> = stored
            .values()
            .map(|(id, status)| (id.as_str(), status.as_str()))
            .chain(tasks.iter().map(|(id, s)| (id.as_str(), s.as_str())))
            .collect();
        let regressed: Vec<_> = self
            .succeeded
            .iter()
            .filter(|id| states.get(id.as_str()) != Some(&"succeeded"))
            .map(|id| (id, states.get(id.as_str())))
            .collect();
        assert!(
            lost.is_empty() && lost_tasks.is_empty() && kept.is_empty() && regressed.is_empty(),
            "after cut {cycle}: acknowledged deliveries missing {lost:?}, acknowledged tasks \
             missing {lost_tasks:?}, refused creates stored {kept:?}, succeeded no more \
             {regressed:?}"
        );
    }
}

/// One cycle's answers.
#[derive(Debug, Default)]
struct Answers {
    deliveries: HashMap<String, String>,
    tasks: HashSet<String>,
    succeeded: HashSet<String>,
    refused: HashSet<String>,
    unanswered: usize,
}

/// Clients creating until told to stop or until the daemon is gone, and an observer listing
/// what has succeeded.
struct Load {
    clients: JoinSet<Answers>,
}

impl Load {
    fn start(api: &Api, target: &str, cycle: u64, stop: &Arc<AtomicBool>, seed: u64) -> Load {
        let mut clients = JoinSet::new();
        for client in 0..CLIENTS {
            let (api, target, stop) = (api.clone(), target.to_owned(), Arc::clone(stop));
            let mut rng = Rng((seed ^ (client as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
            clients.spawn(async move {
                let mut answers = Answers::default();
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("p{cycle}-{client}-{n}");
                    if n % 4 == 3 {
                        match submit_task(&api, &key).await {
                            Some((201 | 200, body)) => {
                                answers.tasks.insert(id_in(&body));
                            }
                            Some((500 | 507, body)) => {
                                let code = body["error"]["code"].as_str().unwrap_or_default();
                                assert!(
                                    matches!(code, "persistence_failed" | "storage_full"),
                                    "{body}"
                                );
                            }
                            Some((status, body)) => panic!("task submit: {status} {body}"),
                            None => {
                                answers.unanswered += 1;
                                break;
                            }
                        }
                        continue;
                    }
                    let size = if rng.within(0..10) == 0 {
                        rng.within(MAX_BODY / 2..MAX_BODY)
                    } else {
                        rng.within(1..4000)
                    };
                    let request = json!({
                        "targetUrl": target,
                        "idempotencyKey": key,
                        "body": "x".repeat(size as usize),
                    });
                    match api.create(request).await {
                        Ok((201, body)) => {
                            answers.deliveries.insert(key, id_in(&body));
                        }
                        Ok((500 | 507, body)) => {
                            let code = body["error"]["code"].as_str().unwrap_or_default();
                            assert!(
                                matches!(code, "persistence_failed" | "storage_full"),
                                "{body}"
                            );
                            answers.refused.insert(key);
                        }
                        Ok((status, body)) => panic!("unexpected answer {status}: {body}"),
                        Err(_) => {
                            answers.unanswered += 1;
                            break;
                        }
                    }
                }
                answers
            });
        }
        let (api, stop) = (api.clone(), Arc::clone(stop));
        clients.spawn(async move {
            let mut answers = Answers::default();
            while !stop.load(Ordering::Relaxed) {
                for path in [
                    "/v1/deliveries?status=succeeded&limit=200&order=desc",
                    "/v1/tasks?status=succeeded&limit=200",
                ] {
                    let Some((200, page)) = json_get(&api, path).await else {
                        return answers;
                    };
                    for item in page["deliveries"]
                        .as_array()
                        .or(page["tasks"].as_array())
                        .into_iter()
                        .flatten()
                    {
                        answers.succeeded.insert(id_in(item));
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answers
        });
        Load { clients }
    }

    /// A load with nothing running.
    fn none() -> Load {
        Load {
            clients: JoinSet::new(),
        }
    }

    async fn finish(mut self) -> Answers {
        let mut all = Answers::default();
        let deadline = Duration::from_secs(60);
        while let Some(done) = tokio::time::timeout(deadline, self.clients.join_next())
            .await
            .expect("the load stops within a minute")
        {
            let answers = done.expect("client");
            all.deliveries.extend(answers.deliveries);
            all.tasks.extend(answers.tasks);
            all.succeeded.extend(answers.succeeded);
            all.refused.extend(answers.refused);
            all.unanswered += answers.unanswered;
        }
        all
    }
}

fn id_in(body: &Value) -> String {
    body["id"].as_str().expect("an id").to_owned()
}

async fn submit_task(api: &Api, key: &str) -> Option<(u16, Value)> {
    let body = json!({ "type": "ok", "idempotencyKey": key });
    let (status, _, bytes) = api
        .request(
            Method::POST,
            "/v1/tasks",
            Some(body.to_string().into_bytes()),
        )
        .await
        .ok()?;
    Some((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

async fn json_get(api: &Api, path: &str) -> Option<(u16, Value)> {
    let (status, _, bytes) = api.request(Method::GET, path, None).await.ok()?;
    Some((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Every stored delivery: idempotency key → (id, status).
async fn stored_deliveries(api: &Api) -> HashMap<String, (String, String)> {
    let mut stored = HashMap::new();
    for item in all_pages(api, "/v1/deliveries", "deliveries").await {
        if let Some(key) = item["idempotencyKey"].as_str() {
            let status = item["status"].as_str().unwrap_or_default().to_owned();
            stored.insert(key.to_owned(), (id_in(&item), status));
        }
    }
    stored
}

/// Every stored task: id → status.
async fn stored_tasks(api: &Api) -> HashMap<String, String> {
    all_pages(api, "/v1/tasks", "tasks")
        .await
        .iter()
        .map(|t| {
            (
                id_in(t),
                t["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

async fn all_pages(api: &Api, path: &str, field: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor = String::new();
    loop {
        let (status, page) = json_get(api, &format!("{path}?limit=500&cursor={cursor}"))
            .await
            .expect("list");
        assert_eq!(status, 200, "{page}");
        items.extend(page[field].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = next.to_owned(),
            None => return items,
        }
    }
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn seeded() -> Rng {
        let seed = std::env::var("SPOOLD_POWER_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("SPOOLD_POWER_SEED={seed}");
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn within(&mut self, range: std::ops::Range<u64>) -> u64 {
        range.start + self.next() % (range.end - range.start).max(1)
    }
}
