//! Tasks: `tasks` submissions of a type that runs `/bin/true` (each attempt in its own process
//! group, every state change through group commit), at task concurrency 2 and 16; then the same
//! spread over 4 types that share 2 locks, at the highest concurrency. Time runs from the first
//! submission to the daemon reporting the last task `succeeded`. Last, one task that prints
//! `task_output_bytes` through 3 secrets and 2 patterns: its output rate, the daemon's peak
//! memory, and the output kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::StatusCode;

use super::{cpu, time_limit, Bench, DaemonCosts};
use crate::floor::spawning_floor;
use crate::load::{closed_loop, ClosedLoop};

const SCENARIO: &str = "tasks";
/// How often the daemon is asked whether every task has succeeded.
const DONE_POLL: Duration = Duration::from_millis(10);
/// Client concurrency of the submissions.
const SUBMIT_CONCURRENCY: usize = 64;

/// What every task runs, and the spawning floor too.
const PROGRAM: &str = "/bin/true";

/// One type running `/bin/true`, no locks.
const LOCK_FREE: &str = "[tasks.t0]\ncommand = [\"/bin/true\"]\n";

/// Four types running `/bin/true`; two share lock `a`, two lock `b`.
const LOCKED: &str = "[tasks.t0]\ncommand = [\"/bin/true\"]\nlocks = [\"a\"]\n\
     [tasks.t1]\ncommand = [\"/bin/true\"]\nlocks = [\"a\"]\n\
     [tasks.t2]\ncommand = [\"/bin/true\"]\nlocks = [\"b\"]\n\
     [tasks.t3]\ncommand = [\"/bin/true\"]\nlocks = [\"b\"]\n";

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let n = bench.plan.tasks;
    bench.results.note(format!(
        "tasks: {n} submissions of a type running /bin/true, at client concurrency \
         {SUBMIT_CONCURRENCY}, while the daemon runs them; time runs from the first submission \
         to the daemon reporting the last success. 4-types-2-locks: the same spread over four \
         types, two holding lock a and two lock b (at most two run at once)"
    ));
    bench.note_floors();
    let highest = bench
        .plan
        .task_concurrency
        .iter()
        .copied()
        .max()
        .unwrap_or(2);
    let mut cases: Vec<(String, u32, &str, u64)> = bench
        .plan
        .task_concurrency
        .iter()
        .map(|c| (format!("task-concurrency={c}"), *c, LOCK_FREE, 1))
        .collect();
    cases.push((
        format!("4-types-2-locks task-concurrency={highest}"),
        highest,
        LOCKED,
        4,
    ));
    for (case, concurrency, types, type_count) in cases {
        for run in 0..bench.plan.runs {
            let dir = bench.fresh_dir(&format!("{SCENARIO}-c{concurrency}-t{type_count}"))?;
            let config = dir.join("spoold.toml");
            std::fs::write(&config, types)
                .with_context(|| format!("write {}", config.display()))?;
            let args = vec![
                "--config".to_owned(),
                config.display().to_string(),
                "--task-concurrency".to_owned(),
                concurrency.to_string(),
            ];
            let daemon = bench.start_daemon(&dir, &args).await?;
            let before = daemon.metrics().await?;
            let cpu_before = (daemon.cpu_time()?, daemon.children_cpu_time()?);
            let limit = time_limit(n);
            let load = ClosedLoop {
                addrs: vec![daemon.addr()],
                path: "/v1/tasks".into(),
                concurrency: SUBMIT_CONCURRENCY,
                requests: n,
                expect: StatusCode::CREATED,
                time_limit: limit,
                body: Arc::new(move |i| {
                    let t = i % type_count;
                    Bytes::from(format!(r#"{{"type":"t{t}","idempotencyKey":"t-{i}"}}"#))
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
            let cpu_after = (daemon.cpu_time()?, daemon.children_cpu_time()?);
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
            let per_task = |d: Duration| d.as_secs_f64() * 1e6 / n.max(1) as f64;
            r.record(
                SCENARIO,
                &case,
                cpu::PER_TASK,
                "µs",
                per_task(cpu_after.0.saturating_sub(cpu_before.0)),
            );
            r.record(
                SCENARIO,
                &case,
                cpu::CHILDREN_PER_TASK,
                "µs",
                per_task(cpu_after.1.saturating_sub(cpu_before.1)),
            );
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
                    daemons: std::slice::from_ref(&daemon),
                    units: n,
                    unit: "task",
                },
            );
            daemon.stop().await?;
            bench.discard(&dir);
            // The locked case's concurrency is the locks', not the flag's: no floor for it.
            if bench.plan.floors && type_count == 1 {
                floors(bench, &case, run, &load, concurrency as usize).await?;
            }
        }
    }
    output(bench).await
}

/// A task's floors, after its daemon run: the submissions against bare axum (the HTTP floor)
/// and `/bin/true` spawned and reaped as many times at the task concurrency (the spawning
/// floor). The daemon's CPU a task is shown as a multiple of their sum, its reaped children's
/// as a multiple of the spawning floor's children.
async fn floors(
    bench: &mut Bench,
    case: &str,
    run: usize,
    load: &ClosedLoop,
    concurrency: usize,
) -> anyhow::Result<()> {
    let http = bench.http_floor(SCENARIO, case, run, load, 1).await?;
    let spawning = spawning_floor(PROGRAM, load.requests, concurrency, load.time_limit).await?;
    eprintln!(
        "{} spawning floor at concurrency {concurrency}: {:.1} µs CPU a spawn, children {:.1} µs",
        bench.label(SCENARIO, case, run),
        spawning.own_us(),
        spawning.children_us(),
    );
    let r = &mut bench.results;
    r.record(SCENARIO, case, cpu::SPAWNING_FLOOR, "µs", spawning.own_us());
    r.record(
        SCENARIO,
        case,
        cpu::SPAWNING_FLOOR_CHILDREN,
        "µs",
        spawning.children_us(),
    );
    r.record(
        SCENARIO,
        case,
        cpu::TASK_FLOOR,
        "µs",
        http + spawning.own_us(),
    );
    r.compare_to_floor(SCENARIO, case, cpu::PER_TASK, cpu::TASK_FLOOR);
    r.compare_to_floor(
        SCENARIO,
        case,
        cpu::CHILDREN_PER_TASK,
        cpu::SPAWNING_FLOOR_CHILDREN,
    );
    Ok(())
}

/// One task prints `task_output_bytes` of log-like lines (with secrets and passwords in them)
/// as fast as it can, through 3 secrets and 2 patterns, into a 1 MiB log.
async fn output(bench: &mut Bench) -> anyhow::Result<()> {
    let bytes = bench.plan.task_output_bytes;
    let case = "1 task printing, 3 secrets, 2 patterns";
    bench.results.note(format!(
        "tasks output: one task prints {} MiB of 60-byte lines holding secrets and passwords \
         (`yes … | head -c`) with 3 secret_env values and 2 redact patterns and output_limit \
         1MiB; rate = bytes / the attempt's duration; memory = the daemon's peak RSS (VmHWM)",
        bytes >> 20
    ));
    for run in 0..bench.plan.runs {
        let dir = bench.fresh_dir(&format!("{SCENARIO}-output"))?;
        let mut secrets = String::new();
        for (i, value) in [
            "alpha-s3cret-0001",
            "bravo-s3cret-0002",
            "charlie-s3cret-03",
        ]
        .iter()
        .enumerate()
        {
            let file = dir.join(format!("secret{i}"));
            std::fs::write(&file, value).with_context(|| format!("write {}", file.display()))?;
            secrets.push_str(&format!(
                "secret_env.S{i} = {{ file = \"{}\" }}\n",
                file.display()
            ));
        }
        let config = dir.join("spoold.toml");
        let script = format!(
            "yes \"line $S0 password=hunter2 Authorization: Bearer $S2 ok\" | head -c {bytes}"
        );
        std::fs::write(
            &config,
            format!(
                "[tasks.chatty]\ncommand = [\"/bin/sh\", \"-c\", {script:?}]\ntimeout = \"10m\"\n\
                 output_limit = \"1MiB\"\n{secrets}\
                 redact = [\"(?i)password=\\\\S+\", \"(?i)authorization: bearer \\\\S+\"]\n"
            ),
        )
        .with_context(|| format!("write {}", config.display()))?;
        let args = vec!["--config".to_owned(), config.display().to_string()];
        let daemon = bench.start_daemon(&dir, &args).await?;
        let before = daemon.memory()?;
        let mut api = daemon.connect().await?;
        let (status, body) = api
            .send(
                http::Method::POST,
                "/v1/tasks",
                Some(Bytes::from_static(
                    br#"{"type":"chatty","idempotencyKey":"o"}"#,
                )),
            )
            .await?;
        if status != StatusCode::CREATED {
            bail!("submit: {status}");
        }
        let task: serde_json::Value = serde_json::from_slice(&body).context("task JSON")?;
        let id = task["id"].as_str().context("task id")?.to_owned();
        let limit = Duration::from_secs(600);
        let started = Instant::now();
        let attempt = loop {
            let list = api.get_json(&format!("/v1/tasks/{id}/attempts")).await?;
            let a = list["attempts"][0].clone();
            if a["finishedAt"].is_string() {
                break a;
            }
            if started.elapsed() > limit {
                bail!("the output task did not end within {limit:?}");
            }
            tokio::time::sleep(DONE_POLL * 10).await;
        };
        if attempt["outcome"] != "succeeded" {
            bail!("the output task ended {attempt}");
        }
        let memory = daemon.memory()?;
        let (_, kept) = api
            .send(http::Method::GET, &format!("/v1/tasks/{id}/output"), None)
            .await?;
        let seconds = attempt["durationMs"].as_f64().unwrap_or(0.0) / 1000.0;
        let rate = bytes as f64 / (1 << 20) as f64 / seconds.max(1e-9);
        let leaked = ["alpha-s3cret-0001", "hunter2"]
            .iter()
            .any(|s| kept.windows(s.len()).any(|w| w == s.as_bytes()));
        if leaked {
            bail!("a secret is in the kept output");
        }
        eprintln!(
            "{} {} MiB in {seconds:.2} s: {rate:.0} MiB/s; peak RSS {} MiB (before {} MiB); kept {} bytes",
            bench.label(SCENARIO, case, run),
            bytes >> 20,
            memory.peak_bytes >> 20,
            before.rss_bytes >> 20,
            kept.len(),
        );
        let r = &mut bench.results;
        r.record(
            SCENARIO,
            case,
            "output rate through redaction",
            "MiB/s",
            rate,
        );
        r.record(
            SCENARIO,
            case,
            "daemon peak RSS",
            "MiB",
            (memory.peak_bytes >> 20) as f64,
        );
        r.record(SCENARIO, case, "output kept", "bytes", kept.len() as f64);
        daemon.stop().await?;
        bench.discard(&dir);
    }
    Ok(())
}
