//! Durable enqueue: `POST /v1/deliveries` at a fixed request count and several client
//! concurrencies, each run on a fresh daemon and database. Every 201 means the delivery was
//! committed with `synchronous=FULL` (on PostgreSQL: `synchronous_commit=on`).
//!
//! With `--db postgres://… --hosts N` each run starts N daemons on one fresh database, and
//! each client connection sends its requests to the hosts in turn (request `i` to host
//! `i mod N`), so every host takes an equal share at any concurrency.
//!
//! The deliveries are created with a `notBefore` far in the future, so the daemon does not
//! deliver them during the run: this measures accepting work, not sending it (the end-to-end
//! scenario measures both together).

use http::StatusCode;

use super::{cpu, cpu_of, create_body, record_load, time_limit, Bench, DaemonCosts};
use crate::daemon::metrics_of;
use crate::floor::per_op_us;
use crate::load::{closed_loop, ClosedLoop};
use crate::receiver::Receiver;

const SCENARIO: &str = "enqueue";
/// Far enough ahead that nothing becomes due during a run.
pub const FAR_FUTURE: &str = "2100-01-01T00:00:00Z";

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    bench.results.note(
        "enqueue: deliveries carry notBefore in 2100, so the daemon only accepts them (the \
         scheduler still wakes on each); e2e measures accepting and delivering together",
    );
    bench.note_floors();
    // Only named as the target; nothing is delivered to it in this scenario.
    let receiver = Receiver::start().await?;
    let outcome = measure(bench, &receiver).await;
    receiver.stop().await;
    outcome
}

async fn measure(bench: &mut Bench, receiver: &Receiver) -> anyhow::Result<()> {
    let scenario = bench.scenario_name(SCENARIO);
    let requests = bench.plan.requests;
    for concurrency in bench.plan.concurrencies.clone() {
        let case = format!("c={concurrency}");
        for run in 0..bench.plan.runs {
            let hosts = bench
                .start_hosts(&format!("{SCENARIO}-c{concurrency}"), &[])
                .await?;
            let (_, before) = metrics_of(&hosts.daemons).await?;
            let cpu_before = cpu_of(&hosts.daemons)?;
            let load = ClosedLoop {
                addrs: hosts.addrs(),
                path: "/v1/deliveries".into(),
                concurrency,
                requests,
                expect: StatusCode::CREATED,
                time_limit: time_limit(requests),
                body: create_body(receiver.url("/hook"), Some(FAR_FUTURE), None),
            };
            let report = closed_loop(&load).await?;
            let cpu_after = cpu_of(&hosts.daemons)?;
            let (_, after) = metrics_of(&hosts.daemons).await?;
            let line = record_load(&mut bench.results, &scenario, &case, &report);
            let cpu = per_op_us(cpu_after.saturating_sub(cpu_before), requests);
            eprintln!(
                "{} {line}; daemon CPU {cpu:.1} µs a request",
                bench.label(&scenario, &case, run)
            );
            bench
                .results
                .record(&scenario, &case, cpu::PER_REQUEST, "µs", cpu);
            bench.record_daemon_costs(
                &scenario,
                &case,
                &DaemonCosts {
                    before: &before,
                    after: &after,
                    daemons: &hosts.daemons,
                    units: requests,
                    unit: "request",
                },
            );
            let servers = hosts.daemons.len();
            bench.stop_hosts(hosts).await?;
            if bench.plan.floors {
                bench
                    .http_floor(&scenario, &case, run, &load, servers)
                    .await?;
                bench
                    .results
                    .compare_to_floor(&scenario, &case, cpu::PER_REQUEST, cpu::HTTP_FLOOR);
            }
        }
    }
    Ok(())
}
