//! Hand-off between PostgreSQL hosts: how long a delivery enqueued through one host waits for
//! another host to start it, with LISTEN/NOTIFY (`--db-notify on`, the default) and with polling
//! alone (`--db-notify off`: no LISTEN, no NOTIFY, each host looks every `--db-poll-interval`,
//! 1 s by default in that mode) — what running on a PostgreSQL-wire database without
//! LISTEN/NOTIFY costs.
//!
//! Two hosts share a fresh database. An operator's pause of the receiver's target on host A
//! keeps A from claiming anything for it, so every delivery enqueued through A, at a steady low
//! rate, is started by host B, which learns of it by a notification or by its poll. The
//! hand-off is the time from the client reading A's 201 to the receiver reading the request
//! head (both on this process's clock, as in `latency`). A run whose host A made an attempt
//! measured something else, and fails.

use std::time::Duration;

use anyhow::{bail, Context as _};
use http::{Method, StatusCode};

use super::latency::{delivery_id, signed_micros};
use super::{create_body, Bench};
use crate::daemon::metrics_of;
use crate::load::{paced, Paced};
use crate::receiver::Receiver;
use crate::summary::nearest_rank;

const SCENARIO: &str = "handoff (postgres, 2 hosts)";
/// Host A takes the enqueues, host B delivers them.
const HOSTS: usize = 2;
/// Requests in flight at most (the rate is low: never reached).
const MAX_IN_FLIGHT: usize = 16;
/// How long after the last enqueue every delivery must have reached the receiver.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(60);

/// After the last arrival, how long the hosts are left to record the last results before
/// their idle transactions are counted.
const SETTLE: Duration = Duration::from_secs(1);

/// The cases: a name, and the flags both hosts run with.
const CASES: &[(&str, &[&str])] = &[
    ("notify on", &[]),
    ("notify off (poll 1s)", &["--db-notify", "off"]),
    (
        "notify off (poll 250ms)",
        &["--db-notify", "off", "--db-poll-interval", "250ms"],
    ),
];

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let rate = bench.plan.handoff_rate.max(1);
    let deliveries = bench.plan.handoff_deliveries.max(1);
    let duration = Duration::from_secs_f64(deliveries as f64 / f64::from(rate));
    let idle_window = if bench.plan.smoke {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(10)
    };
    bench.results.describe(SCENARIO, "postgres", HOSTS);
    bench.results.note(format!(
        "handoff: {deliveries} deliveries at {rate}/s enqueued through host A, whose target is \
         paused by an operator there, so host B starts every one; hand-off = the client reading \
         A's 201 → the receiver reading the request; with --db-notify off host B learns of the \
         work only by its poll (every 1 s, or as the case says) or its sweep (every 5 s); idle \
         transactions: the store transactions a host commits per second once the work is done \
         (over {}s, mean of the two hosts)",
        idle_window.as_secs()
    ));
    for &(case, flags) in CASES {
        let args: Vec<String> = flags.iter().map(|&f| f.to_owned()).collect();
        for run in 0..bench.plan.runs {
            let receiver = Receiver::start().await?;
            let hosts = bench.start_pg_hosts("handoff", HOSTS, &args).await?;
            let (a, b) = (&hosts.daemons[0], &hosts.daemons[1]);
            pause(a, &receiver).await?;
            let (before, _) = metrics_of(&hosts.daemons).await?;
            let load = Paced {
                addr: a.addr(),
                path: "/v1/deliveries".into(),
                rate,
                duration,
                expect: StatusCode::CREATED,
                max_in_flight: MAX_IN_FLIGHT,
                body: create_body(receiver.url("/hook"), None, None),
            };
            let report = paced(&load).await?;
            let n = report.sends.len() as u64;
            receiver.wait_unique(n, ARRIVAL_TIMEOUT).await?;
            let arrivals = receiver.take_arrivals();
            let (after, _) = metrics_of(&hosts.daemons).await?;
            let by_a = after[0].attempts() - before[0].attempts();
            let by_b = after[1].attempts() - before[1].attempts();
            // What waiting costs the database: the hosts' transactions while there is nothing
            // to do (sweeps, and polls that find nothing), once the last results are written.
            tokio::time::sleep(SETTLE).await;
            let (settled, _) = metrics_of(&hosts.daemons).await?;
            tokio::time::sleep(idle_window).await;
            let (idle, _) = metrics_of(&hosts.daemons).await?;
            let idle_rate = |host: usize| {
                (idle[host].commits() - settled[host].commits()) / idle_window.as_secs_f64()
            };
            let idle_per_host = (idle_rate(0) + idle_rate(1)) / HOSTS as f64;
            let b_pid = b.pid();
            bench.stop_hosts(hosts).await?;
            receiver.stop().await;
            if by_a > 0.0 {
                bail!("host A made {by_a} attempts: its target was not paused");
            }

            let mut handoff = Vec::with_capacity(n as usize);
            for send in &report.sends {
                let id = delivery_id(&send.response)?;
                let Some(&arrived) = arrivals.get(&id) else {
                    bail!("delivery {id} was acknowledged but never reached the receiver");
                };
                handoff.push(signed_micros(send.acked, arrived));
            }
            handoff.sort_unstable();
            let pct = |q: f64| nearest_rank(&handoff, q).unwrap_or(0) as f64 / 1000.0;
            let max = handoff.last().copied().unwrap_or(0) as f64 / 1000.0;
            eprintln!(
                "{} {n} deliveries, all started by host B (pid {b_pid}, {by_b} attempts); \
                 hand-off p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {max:.1} ms; idle, \
                 {idle_per_host:.1} transactions/s per host",
                bench.label("handoff", case, run),
                pct(0.5),
                pct(0.9),
                pct(0.99),
            );
            let r = &mut bench.results;
            for (name, q) in [("p50", 0.5), ("p90", 0.9), ("p99", 0.99)] {
                r.record(SCENARIO, case, &format!("hand-off {name}"), "ms", pct(q));
            }
            r.record(SCENARIO, case, "hand-off max", "ms", max);
            r.record(
                SCENARIO,
                case,
                "idle transactions per host",
                "1/s",
                idle_per_host,
            );
        }
    }
    Ok(())
}

/// An operator's pause of `receiver`'s target on `daemon`: it claims nothing for it.
async fn pause(daemon: &crate::daemon::Daemon, receiver: &Receiver) -> anyhow::Result<()> {
    let origin = receiver.origin().replace(':', "%3A").replace('/', "%2F");
    let mut conn = daemon.connect().await?;
    let path = format!("/v1/targets/{origin}/pause");
    let (status, body) = conn
        .send(Method::POST, &path, None)
        .await
        .context("pause the target on host A")?;
    if status != StatusCode::OK {
        bail!(
            "POST {path}: {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    Ok(())
}
