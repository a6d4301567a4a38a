//! End-to-end: enqueue a batch of deliveries to one local receiver and time it from the first
//! enqueue until the daemon has recorded the last one as succeeded; at the default per-target
//! concurrency and at the values the issue names.
//!
//! "Succeeded" is read from the daemon, not assumed from the receiver: once the receiver has
//! seen every delivery id, the daemon is asked until nothing is in flight and its count of
//! recorded successes has grown by the batch size.
//!
//! With `--db postgres://… --hosts N`, N daemons share one fresh database: the batch is
//! enqueued through all of them in turn, all of them deliver, and the successes counted are
//! their sum.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use http::StatusCode;

use super::{cpu, cpu_of, ms, time_limit, Bench, DaemonCosts};
use crate::daemon::{metrics_of, Daemon, Metrics};
use crate::floor::{per_op_us, sending_floor, Sending};
use crate::load::{closed_loop, ClosedLoop, ClosedLoopReport};
use crate::plan::DAEMON_PER_TARGET;
use crate::receiver::Receiver;

const SCENARIO: &str = "e2e";
/// How often the daemon is asked whether the batch is done, once the receiver has it all.
const DONE_POLL: Duration = Duration::from_millis(5);

/// One batch: how many deliveries, enqueued at what client concurrency.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    pub deliveries: u64,
    pub concurrency: usize,
    /// Deliveries are created with `mode: at_most_once`.
    pub at_most_once: bool,
    /// Bodies padded to about this many bytes (0: `{"seq":N}`).
    pub body_bytes: usize,
}

/// What delivering a batch took.
pub struct BatchReport {
    /// First enqueue sent → the daemon reports the last success.
    pub total: Duration,
    /// First enqueue sent → the receiver has seen every delivery.
    pub received: Duration,
    pub enqueue: ClosedLoopReport,
    /// Requests the receiver got beyond one per delivery (at-least-once redeliveries).
    pub duplicates: u64,
    /// Summed over the daemons.
    pub before: Metrics,
    pub after: Metrics,
    /// Attempts each daemon made during the batch, in host order.
    pub attempts_by_host: Vec<f64>,
    /// The daemons' CPU (`utime + stime`, all threads, summed) from just before the first
    /// enqueue until done.
    pub cpu: Duration,
}

impl BatchReport {
    pub fn rate(&self) -> f64 {
        self.enqueue.latencies.len() as f64 / self.total.as_secs_f64()
    }
}

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let batch = Batch {
        deliveries: bench.plan.e2e_deliveries,
        concurrency: bench.plan.e2e_enqueue_concurrency,
        at_most_once: bench.plan.at_most_once,
        body_bytes: bench.plan.body_bytes,
    };
    let signing = if bench.plan.sign {
        vec!["--config".to_owned(), bench.signing_config()?]
    } else {
        Vec::new()
    };
    bench.results.note(format!(
        "e2e: the batch is enqueued at client concurrency {} while the daemon delivers; time \
         runs from the first enqueue to the daemon reporting the last success{}",
        batch.concurrency,
        if batch.at_most_once {
            "; deliveries are at-most-once"
        } else {
            ""
        }
    ));
    bench.note_floors();
    let host_count = bench.backend().hosts();
    if host_count > 1 {
        bench.results.note(format!(
            "e2e on {host_count} hosts: the batch is enqueued through every host in turn and \
             every host delivers; per-target concurrency is each host's own limit, so up to \
             {host_count} times as many requests reach the receiver at once"
        ));
    }
    let scenario = bench.scenario_name(SCENARIO);
    let mode = if batch.at_most_once {
        " at-most-once"
    } else {
        ""
    };
    for per_target in bench.plan.e2e_per_target.clone() {
        let (mut case, mut args) = match per_target {
            None => (
                format!("per-target={DAEMON_PER_TARGET} (default){mode}"),
                Vec::new(),
            ),
            Some(n) => (
                format!("per-target={n}{mode}"),
                vec!["--per-target-concurrency".to_owned(), n.to_string()],
            ),
        };
        args.extend(signing.iter().cloned());
        if batch.body_bytes > 0 {
            case.push_str(&format!(" body={}B", batch.body_bytes));
        }
        if !signing.is_empty() {
            case.push_str(" signed");
        }
        for run in 0..bench.plan.runs {
            let receiver = Receiver::start().await?;
            let label = format!("{SCENARIO}-pt{}", per_target.unwrap_or(DAEMON_PER_TARGET));
            let hosts = bench.start_hosts(&label, &args).await?;
            let report = deliver_batch(&hosts.daemons, &receiver, batch).await?;
            let cpu = per_op_us(report.cpu, batch.deliveries);
            eprintln!(
                "{} {} deliveries in {:.2} s: {:.0}/s (enqueue {:.0} req/s), daemon CPU {cpu:.1} µs a delivery{}",
                bench.label(&scenario, &case, run),
                batch.deliveries,
                report.total.as_secs_f64(),
                report.rate(),
                report.enqueue.throughput(),
                if report.attempts_by_host.len() > 1 {
                    let each: Vec<String> = report
                        .attempts_by_host
                        .iter()
                        .map(|a| format!("{a:.0}"))
                        .collect();
                    format!("; attempts by host {}", each.join(" / "))
                } else {
                    String::new()
                },
            );
            record_batch(
                bench,
                &scenario,
                &case,
                &hosts.daemons,
                &report,
                batch.deliveries,
            );
            bench
                .results
                .record(&scenario, &case, cpu::PER_DELIVERY, "µs", cpu);
            let servers = hosts.daemons.len();
            bench.stop_hosts(hosts).await?;
            if bench.plan.floors {
                let per_target = per_target.unwrap_or(DAEMON_PER_TARGET) as usize;
                floors(
                    bench, &scenario, &case, run, &receiver, batch, per_target, servers,
                )
                .await?;
            }
            receiver.stop().await;
        }
    }
    Ok(())
}

/// A delivery's floors, after its daemon run: the batch's creates against bare axum (the HTTP
/// floor) and its requests sent by a bare reqwest loop to the same receiver at the per-target
/// concurrency (the sending floor); the daemon's CPU a delivery is shown as a multiple of their
/// sum.
#[allow(clippy::too_many_arguments)]
async fn floors(
    bench: &mut Bench,
    scenario: &str,
    case: &str,
    run: usize,
    receiver: &Receiver,
    batch: Batch,
    per_target: usize,
    servers: usize,
) -> anyhow::Result<()> {
    let load = create_load(Vec::new(), receiver, batch);
    let http = bench
        .http_floor(scenario, case, run, &load, servers)
        .await?;
    let sending = sending_floor(&Sending {
        url: receiver.url("/hook"),
        requests: batch.deliveries,
        concurrency: per_target,
        body_bytes: batch.body_bytes,
        time_limit: time_limit(batch.deliveries),
    })
    .await?;
    let send = sending.own_us();
    eprintln!(
        "{} sending floor at concurrency {per_target}: {send:.1} µs CPU a request",
        bench.label(scenario, case, run),
    );
    let r = &mut bench.results;
    r.record(scenario, case, cpu::SENDING_FLOOR, "µs", send);
    r.record(scenario, case, cpu::DELIVERY_FLOOR, "µs", http + send);
    r.compare_to_floor(scenario, case, cpu::PER_DELIVERY, cpu::DELIVERY_FLOOR);
    Ok(())
}

/// The batch's creates, due at once, to `receiver`, sent to `addrs` in turn.
fn create_load(addrs: Vec<std::net::SocketAddr>, receiver: &Receiver, batch: Batch) -> ClosedLoop {
    let n = batch.deliveries;
    ClosedLoop {
        addrs,
        path: "/v1/deliveries".into(),
        concurrency: batch.concurrency,
        requests: n,
        expect: StatusCode::CREATED,
        time_limit: time_limit(n),
        body: super::padded_body(
            receiver.url("/hook"),
            batch.at_most_once.then_some("at_most_once"),
            batch.body_bytes,
        ),
    }
}

/// Record a delivered batch's numbers under `scenario`/`case`.
pub fn record_batch(
    bench: &mut Bench,
    scenario: &str,
    case: &str,
    daemons: &[Daemon],
    report: &BatchReport,
    deliveries: u64,
) {
    let r = &mut bench.results;
    r.record(
        scenario,
        case,
        "first enqueue → last succeeded",
        "s",
        report.total.as_secs_f64(),
    );
    r.record(
        scenario,
        case,
        "delivery rate",
        "deliveries/s",
        report.rate(),
    );
    r.record(
        scenario,
        case,
        "first enqueue → last received",
        "s",
        report.received.as_secs_f64(),
    );
    r.record(
        scenario,
        case,
        "enqueue throughput (while delivering)",
        "req/s",
        report.enqueue.throughput(),
    );
    r.record(
        scenario,
        case,
        "enqueue p99 latency (while delivering)",
        "ms",
        ms(report.enqueue.latencies.percentile(0.99)),
    );
    let attempts = report.after.attempts() - report.before.attempts();
    r.record(
        scenario,
        case,
        "attempts per delivery",
        "attempts",
        attempts / deliveries.max(1) as f64,
    );
    r.record(
        scenario,
        case,
        "duplicate receipts",
        "requests",
        report.duplicates as f64,
    );
    if report.attempts_by_host.len() > 1 && attempts > 0.0 {
        let least = report
            .attempts_by_host
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        r.record(
            scenario,
            case,
            "least busy host's share of attempts",
            "%",
            least / attempts * 100.0,
        );
    }
    bench.record_daemon_costs(
        scenario,
        case,
        &DaemonCosts {
            before: &report.before,
            after: &report.after,
            daemons,
            units: deliveries,
            unit: "delivery",
        },
    );
}

/// Enqueue `batch` (due at once) to `receiver` through the daemons in turn and wait until they
/// have recorded every one as succeeded.
pub async fn deliver_batch(
    daemons: &[Daemon],
    receiver: &Receiver,
    batch: Batch,
) -> anyhow::Result<BatchReport> {
    let n = batch.deliveries;
    let daemon = daemons.first().context("no daemon to deliver through")?;
    let (before_each, before) = metrics_of(daemons).await?;
    let seen_before = receiver.unique();
    let requests_before = receiver.requests();
    let limit = time_limit(n);
    let load = create_load(daemons.iter().map(Daemon::addr).collect(), receiver, batch);
    let cpu_before = cpu_of(daemons)?;
    let enqueue = closed_loop(&load).await?;
    let started = enqueue.started;
    let deadline = started + limit;
    receiver
        .wait_unique(
            seen_before + n,
            deadline.saturating_duration_since(Instant::now()),
        )
        .await?;
    let received = receiver.last_arrival().map_or_else(
        || started.elapsed(),
        |t| t.saturating_duration_since(started),
    );
    // The listing reads the store, which the daemons share: one of them can tell.
    let mut conn = daemon.connect().await?;
    loop {
        let page = conn
            .get_json("/v1/deliveries?status=in_flight&limit=1")
            .await?;
        let in_flight = page
            .get("count")
            .and_then(serde_json::Value::as_u64)
            .context("listing without count")?;
        if in_flight == 0 {
            let (_, now) = metrics_of(daemons).await?;
            if now.succeeded() - before.succeeded() >= n as f64 {
                break;
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the daemon had not recorded {n} successes within {limit:?} (receiver saw {})",
                receiver.unique() - seen_before
            );
        }
        tokio::time::sleep(DONE_POLL).await;
    }
    let total = started.elapsed();
    let cpu = cpu_of(daemons)?.saturating_sub(cpu_before);
    let (after_each, after) = metrics_of(daemons).await?;
    let requests = receiver.requests() - requests_before;
    let attempts_by_host = before_each
        .iter()
        .zip(&after_each)
        .map(|(b, a)| a.attempts() - b.attempts())
        .collect();
    Ok(BatchReport {
        total,
        received,
        enqueue,
        duplicates: requests.saturating_sub(n),
        before,
        after,
        attempts_by_host,
        cpu,
    })
}
