//! Tasks: `tasks` submissions of a type that runs `/bin/true` (each attempt in its own process
//! group, every state change through group commit), at task concurrency 2 and 16. Time runs
//! from the first submission to the daemon reporting the last task `succeeded`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::StatusCode;

use super::{time_limit, Bench, DaemonCosts};
use crate::load::{closed_loop, ClosedLoop};

const SCENARIO: &str = "tasks";
/// How often the daemon is asked whether every task has succeeded.
const DONE_POLL: Duration = Duration::from_millis(10);
/// Client concurrency of the submissions.
const SUBMIT_CONCURRENCY: usize = 64;

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let n = bench.plan.tasks;
    bench.results.note(format!(
        "tasks: {n} submissions of a type running /bin/true, at client concurrency \
         {SUBMIT_CONCURRENCY}, while the daemon runs them; time runs from the first submission \
         to the daemon reporting the last success"
    ));
    for concurrency in bench.plan.task_concurrency.clone() {
        let case = format!("task-concurrency={concurrency}");
        for run in 0..bench.plan.runs {
            let dir = bench.fresh_dir(&format!("{SCENARIO}-c{concurrency}"))?;
            let config = dir.join("spoold.toml");
            std::fs::write(&config, "[tasks.true]\ncommand = [\"/bin/true\"]\n")
                .with_context(|| format!("write {}", config.display()))?;
            let args = vec![
                "--config".to_owned(),
                config.display().to_string(),
                "--task-concurrency".to_owned(),
                concurrency.to_string(),
            ];
            let daemon = bench.start_daemon(&dir, &args).await?;
            let before = daemon.metrics().await?;
            let limit = time_limit(n);
            let load = ClosedLoop {
                addr: daemon.addr(),
                path: "/v1/tasks".into(),
                concurrency: SUBMIT_CONCURRENCY,
                requests: n,
                expect: StatusCode::CREATED,
                time_limit: limit,
                body: Arc::new(|i| {
                    Bytes::from(format!(r#"{{"type":"true","idempotencyKey":"t-{i}"}}"#))
                }),
            };
            let submitted = closed_loop(&load).await?;
            let started = submitted.started;
            let done_metric = r#"spoold_tasks{status="succeeded"}"#;
            let after = loop {
                let m = daemon.metrics().await?;
                if m.get(done_metric) >= n as f64 {
                    break m;
                }
                if Instant::now() > started + limit {
                    bail!(
                        "the daemon had not run {n} tasks within {limit:?} ({} succeeded)",
                        m.get(done_metric)
                    );
                }
                tokio::time::sleep(DONE_POLL).await;
            };
            let total = started.elapsed();
            let rate = n as f64 / total.as_secs_f64();
            eprintln!(
                "{} {n} tasks in {:.2} s: {rate:.0}/s (submissions {:.0} req/s)",
                bench.label(SCENARIO, &case, run),
                total.as_secs_f64(),
                submitted.throughput(),
            );
            let r = &mut bench.results;
            r.record(
                SCENARIO,
                &case,
                "first submission → last succeeded",
                "s",
                total.as_secs_f64(),
            );
            r.record(SCENARIO, &case, "task rate", "tasks/s", rate);
            r.record(
                SCENARIO,
                &case,
                "submission throughput (while running)",
                "req/s",
                submitted.throughput(),
            );
            bench.record_daemon_costs(
                SCENARIO,
                &case,
                &DaemonCosts {
                    before: &before,
                    after: &after,
                    daemon: &daemon,
                    units: n,
                    unit: "task",
                },
            );
            daemon.stop().await?;
            bench.discard(&dir);
        }
    }
    Ok(())
}
