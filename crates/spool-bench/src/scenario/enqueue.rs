//! Durable enqueue: `POST /v1/deliveries` at a fixed request count and several client
//! concurrencies, each run on a fresh daemon and database. Every 201 means the delivery was
//! committed with `synchronous=FULL`.
//!
//! The deliveries are created with a `notBefore` far in the future, so the daemon does not
//! deliver them during the run: this measures accepting work, not sending it (the end-to-end
//! scenario measures both together).

use http::StatusCode;

use super::{create_body, record_load, time_limit, Bench, DaemonCosts};
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
    // Only named as the target; nothing is delivered to it in this scenario.
    let receiver = Receiver::start().await?;
    let outcome = measure(bench, &receiver).await;
    receiver.stop().await;
    outcome
}

async fn measure(bench: &mut Bench, receiver: &Receiver) -> anyhow::Result<()> {
    let requests = bench.plan.requests;
    for concurrency in bench.plan.concurrencies.clone() {
        let case = format!("c={concurrency}");
        for run in 0..bench.plan.runs {
            let dir = bench.fresh_dir(&format!("{SCENARIO}-c{concurrency}"))?;
            let daemon = bench.start_daemon(&dir, &[]).await?;
            let before = daemon.metrics().await?;
            let load = ClosedLoop {
                addr: daemon.addr(),
                path: "/v1/deliveries".into(),
                concurrency,
                requests,
                expect: StatusCode::CREATED,
                time_limit: time_limit(requests),
                body: create_body(receiver.url("/hook"), Some(FAR_FUTURE), None),
            };
            let report = closed_loop(&load).await?;
            let after = daemon.metrics().await?;
            let line = record_load(&mut bench.results, SCENARIO, &case, &report);
            eprintln!("{} {line}", bench.label(SCENARIO, &case, run));
            bench.record_daemon_costs(
                SCENARIO,
                &case,
                &DaemonCosts {
                    before: &before,
                    after: &after,
                    daemon: &daemon,
                    units: requests,
                    unit: "request",
                },
            );
            daemon.stop().await?;
            bench.discard(&dir);
        }
    }
    Ok(())
}
