//! Baseline: the no-op HTTP ceiling. The same load generator, with the same request bodies,
//! against the receiver directly: the most any daemon could answer on this machine with this
//! client, before doing any work.

use http::StatusCode;

use super::{create_body, record_load, time_limit, Bench};
use crate::load::{closed_loop, ClosedLoop};
use crate::receiver::Receiver;

const SCENARIO: &str = "http-ceiling";

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
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
            let load = ClosedLoop {
                addrs: vec![receiver.addr()],
                path: "/hook".into(),
                concurrency,
                requests,
                expect: StatusCode::OK,
                time_limit: time_limit(requests),
                body: create_body(receiver.url("/hook"), None, None),
            };
            let report = closed_loop(&load).await?;
            let line = record_load(&mut bench.results, SCENARIO, &case, &report);
            eprintln!("{} {line}", bench.label(SCENARIO, &case, run));
        }
    }
    Ok(())
}
