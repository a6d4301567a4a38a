//! Latency to first attempt: enqueues at a steady rate (open loop, whatever the responses do),
//! and for each delivery the time from its enqueue being acknowledged (the 201 read by the
//! client) to the receiver seeing its request (the `X-Spoold-Delivery-ID` header arriving).
//!
//! Both instants are taken in this process, on one clock. The daemon wakes its scheduler when
//! the insert commits, before the 201 is written, so a request can reach the receiver before
//! the client has read its ack: such latencies are negative and kept as they are.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use http::StatusCode;

use super::{create_body, ms, Bench};
use crate::load::{paced, Paced};
use crate::receiver::Receiver;
use crate::summary::nearest_rank;

const SCENARIO: &str = "latency";
/// Requests in flight at most; beyond it the schedule slips (reported as lag).
const MAX_IN_FLIGHT: usize = 256;
/// How long after the last enqueue every delivery must have reached the receiver.
const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let rate = bench.plan.latency_rate;
    let duration = bench.plan.latency_duration;
    let case = format!("{rate}/s for {}s", duration.as_secs());
    bench.results.note(
        "latency: ack→arrival runs from the client reading the 201 to the receiver reading \
         the request head, both on this process's clock; negative when the delivery overtakes \
         its ack",
    );
    for run in 0..bench.plan.runs {
        let dir = bench.fresh_dir(SCENARIO)?;
        let receiver = Receiver::start().await?;
        let daemon = bench.start_daemon(&dir, &[]).await?;
        let load = Paced {
            addr: daemon.addr(),
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
        daemon.stop().await?;
        receiver.stop().await;
        bench.discard(&dir);

        let mut ack_to_arrival = Vec::with_capacity(n as usize);
        let mut send_to_arrival = Vec::with_capacity(n as usize);
        for send in &report.sends {
            let id = delivery_id(&send.response)?;
            let Some(&arrived) = arrivals.get(&id) else {
                bail!("delivery {id} was acknowledged but never reached the receiver");
            };
            ack_to_arrival.push(signed_micros(send.acked, arrived));
            send_to_arrival.push(signed_micros(send.sent, arrived));
        }
        ack_to_arrival.sort_unstable();
        send_to_arrival.sort_unstable();
        let pct = |v: &[i64], q: f64| nearest_rank(v, q).unwrap_or(0) as f64 / 1000.0;
        let achieved = n as f64 / report.elapsed.as_secs_f64();
        let overtaken = ack_to_arrival.iter().filter(|&&us| us < 0).count();
        eprintln!(
            "{} {achieved:.0} enqueues/s; ack→arrival p50 {:.2} ms, p99 {:.2} ms; \
             send→arrival p50 {:.2} ms, p99 {:.2} ms",
            bench.label(SCENARIO, &case, run),
            pct(&ack_to_arrival, 0.5),
            pct(&ack_to_arrival, 0.99),
            pct(&send_to_arrival, 0.5),
            pct(&send_to_arrival, 0.99),
        );
        let r = &mut bench.results;
        r.record(SCENARIO, &case, "achieved rate", "enqueues/s", achieved);
        r.record(
            SCENARIO,
            &case,
            "ack → arrival p50",
            "ms",
            pct(&ack_to_arrival, 0.5),
        );
        r.record(
            SCENARIO,
            &case,
            "ack → arrival p99",
            "ms",
            pct(&ack_to_arrival, 0.99),
        );
        r.record(
            SCENARIO,
            &case,
            "send → arrival p50",
            "ms",
            pct(&send_to_arrival, 0.5),
        );
        r.record(
            SCENARIO,
            &case,
            "send → arrival p99",
            "ms",
            pct(&send_to_arrival, 0.99),
        );
        r.record(
            SCENARIO,
            &case,
            "arrivals before ack",
            "%",
            overtaken as f64 * 100.0 / n.max(1) as f64,
        );
        r.record(
            SCENARIO,
            &case,
            "max schedule lag",
            "ms",
            ms(report.max_lag),
        );
    }
    Ok(())
}

/// `b − a` in microseconds, negative when `b` came first.
pub(super) fn signed_micros(a: Instant, b: Instant) -> i64 {
    match b.checked_duration_since(a) {
        Some(d) => d.as_micros() as i64,
        None => -(a.duration_since(b).as_micros() as i64),
    }
}

/// The `id` of a create response.
pub(super) fn delivery_id(response: &[u8]) -> anyhow::Result<String> {
    let v: serde_json::Value =
        serde_json::from_slice(response).context("create response is not JSON")?;
    v.get("id")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .context("create response without id")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_differences() {
        let a = Instant::now();
        let b = a + Duration::from_micros(1500);
        assert_eq!(signed_micros(a, b), 1500);
        assert_eq!(signed_micros(b, a), -1500);
    }
}
