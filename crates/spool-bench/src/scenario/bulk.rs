//! Bulk retry: `failed` deliveries, then one `POST /v1/deliveries/bulk` that retries them all,
//! timed — and, while it runs, the API's answers to another client (`GET /v1/stats` every
//! 20 ms on a connection of its own), to show the daemon keeps serving. The retried deliveries
//! go out to the receiver meanwhile, as they would in production.
//!
//! On SQLite the failed deliveries are written into the database file directly (fast, for a
//! large backlog). On PostgreSQL (`--db`) they are made through the API — created with one
//! attempt each, against a target that answers 404 until the bulk retry and 200 after — since
//! that store keeps its counts by status in the transactions of its own writes, which rows
//! written behind its back would leave wrong.

use std::convert::Infallible;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Backend, Bench, Hosts, DB_FILE};
use crate::load::{closed_loop, ClosedLoop};
use crate::receiver::serve;
use crate::seed::{seed, Backlog, Due};
use crate::summary::Latencies;

const SCENARIO: &str = "bulk";
/// How often the other client asks while the bulk retry runs.
const PROBE_EVERY: Duration = Duration::from_millis(20);
/// How long making the failed deliveries through the API (on PostgreSQL) may take, and so may
/// the bulk retry's answer.
const SET_UP_LIMIT: Duration = Duration::from_secs(600);

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let failed = bench.plan.bulk_failed;
    let scenario = bench.scenario_name(SCENARIO);
    let case = format!("retry {failed} failed");
    let made = match bench.backend() {
        Backend::Sqlite => "written into the database",
        Backend::Postgres { .. } => "made through the API (one attempt each, answered 404)",
    };
    bench.results.note(format!(
        "{scenario}: {failed} failed deliveries {made}, retried by one POST /v1/deliveries/bulk \
         (status failed, the target's origin); GET /v1/stats every {} ms on another connection \
         meanwhile",
        PROBE_EVERY.as_millis()
    ));
    for run in 0..bench.plan.runs {
        let target = Target::start().await?;
        let hosts = match bench.backend() {
            Backend::Sqlite => {
                let dir = bench.fresh_dir(SCENARIO)?;
                bench.start_daemon(&dir, &[]).await?.stop().await?;
                let backlog = Backlog {
                    count: failed,
                    origin: target.origin.clone(),
                    path: "/bulk".into(),
                    due: Due::Failed,
                };
                let db = dir.join(DB_FILE);
                tokio::task::spawn_blocking(move || seed(&db, &backlog))
                    .await
                    .context("seed task panicked")??;
                let daemon = bench.start_daemon(&dir, &[]).await?;
                Hosts {
                    daemons: vec![daemon],
                    dir,
                    database: None,
                }
            }
            Backend::Postgres { .. } => {
                let hosts = bench.start_hosts(SCENARIO, &[]).await?;
                let made = Instant::now();
                fail_through_the_api(&hosts, &target, failed).await?;
                eprintln!(
                    "{} {failed} failed deliveries made in {:.1} s",
                    bench.label(SCENARIO, &case, run),
                    made.elapsed().as_secs_f64()
                );
                hosts
            }
        };
        // From now on the target takes what it is sent.
        target.reject.store(false, Ordering::Relaxed);
        let daemon = &hosts.daemons[0];

        let stop = Arc::new(AtomicBool::new(false));
        let mut probe_conn = daemon.connect().await?;
        let probing = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let mut nanos = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    probe_conn.get_json("/v1/stats").await?;
                    nanos.push(asked.elapsed().as_nanos() as u64);
                    tokio::time::sleep(PROBE_EVERY).await;
                }
                anyhow::Ok(Latencies::from_nanos(nanos))
            })
        };
        let request = serde_json::json!({
            "action": "retry",
            "filter": {"status": "failed", "targetOrigin": target.origin},
        });
        let started = Instant::now();
        let (status, body) = daemon
            .connect()
            .await?
            .send_within(
                Method::POST,
                "/v1/deliveries/bulk",
                Some(Bytes::from(serde_json::to_vec(&request)?)),
                SET_UP_LIMIT,
            )
            .await?;
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        let probes = probing.await.context("probe task panicked")??;
        if status != StatusCode::OK {
            bail!("bulk retry: {status}: {}", String::from_utf8_lossy(&body));
        }
        let answer: serde_json::Value = serde_json::from_slice(&body)?;
        let changed = answer["changed"].as_u64().unwrap_or(0);
        if changed != failed {
            bail!("bulk retry changed {changed} of {failed}: {answer}");
        }
        bench.stop_hosts(hosts).await?;
        target.stop().await;

        let rate = changed as f64 / took.as_secs_f64();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let (p50, p99, max) = (
            probes.percentile(0.5),
            probes.percentile(0.99),
            probes.percentile(1.0),
        );
        eprintln!(
            "{} {changed} retried in {:.2} s ({rate:.0}/s); meanwhile GET /v1/stats p50 {:.1} ms, \
             p99 {:.1} ms, max {:.1} ms over {} requests",
            bench.label(SCENARIO, &case, run),
            took.as_secs_f64(),
            ms(p50),
            ms(p99),
            ms(max),
            probes.len()
        );
        let r = &mut bench.results;
        r.record(&scenario, &case, "bulk retry time", "s", took.as_secs_f64());
        r.record(&scenario, &case, "retried", "deliveries/s", rate);
        r.record(
            &scenario,
            &case,
            "other client p99 meanwhile",
            "ms",
            ms(p99),
        );
        r.record(
            &scenario,
            &case,
            "other client max meanwhile",
            "ms",
            ms(max),
        );
    }
    Ok(())
}

/// Make `count` deliveries to `target` fail: each created with one attempt, which the target
/// answers with 404; done once the store counts them all `failed`.
async fn fail_through_the_api(hosts: &Hosts, target: &Target, count: u64) -> anyhow::Result<()> {
    let url = format!("{}/bulk", target.origin);
    let body = move |i: u64| {
        Bytes::from(
            serde_json::json!({"targetUrl": url, "maxAttempts": 1, "body": {"n": i}}).to_string(),
        )
    };
    closed_loop(&ClosedLoop {
        addrs: hosts.addrs(),
        path: "/v1/deliveries".into(),
        concurrency: 64,
        requests: count,
        expect: StatusCode::CREATED,
        time_limit: SET_UP_LIMIT,
        body: Arc::new(body),
    })
    .await
    .context("create the deliveries to fail")?;
    let deadline = Instant::now() + SET_UP_LIMIT;
    let mut conn = hosts.daemons[0].connect().await?;
    loop {
        let stats = conn.get_json("/v1/stats").await?;
        let now = stats["deliveries"]["failed"].as_u64().unwrap_or(0);
        if now >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{now} of {count} deliveries failed within {SET_UP_LIMIT:?}: {stats}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The target of the retried deliveries: an HTTP/1.1 server on 127.0.0.1 that answers 404
/// while `reject` is set and an empty 200 once it is not.
struct Target {
    origin: String,
    reject: Arc<AtomicBool>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Target {
    async fn start() -> anyhow::Result<Target> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("bind the target on 127.0.0.1")?;
        let origin = format!("http://{}", listener.local_addr()?);
        let reject = Arc::new(AtomicBool::new(true));
        let (stop, tasks) = (CancellationToken::new(), TaskTracker::new());
        let answer = {
            let reject = Arc::clone(&reject);
            move |request: http::Request<hyper::body::Incoming>| {
                let status = if reject.load(Ordering::Relaxed) {
                    StatusCode::NOT_FOUND
                } else {
                    StatusCode::OK
                };
                async move {
                    // Read the body so the connection can carry the next request.
                    let _ = request.into_body().collect().await;
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = status;
                    Ok::<_, Infallible>(response)
                }
            }
        };
        tasks.spawn(serve(listener, answer, stop.clone(), tasks.clone()));
        Ok(Target {
            origin,
            reject,
            stop,
            tasks,
        })
    }

    async fn stop(self) {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }
}
