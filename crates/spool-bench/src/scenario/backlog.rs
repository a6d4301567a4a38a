//! Backlog: a daemon restarted on a database holding a large number of pending deliveries.
//! Measures restart-to-ready, memory, database size, the time `/metrics` and `/v1/stats` take
//! (they must not grow with the table), and the end-to-end rate of a fresh batch delivered on
//! top of the backlog.
//!
//! The backlog is seeded straight into the database file ([`crate::seed`]), once per
//! invocation, and copied for each run. Its deliveries are due 30 days from now, so they sit in
//! the database (indexes, pages, the scheduler's due query) without being attempted.

use std::time::Duration;

use anyhow::Context as _;

use super::e2e::{deliver_batch, record_batch, Batch};
use super::{database_bytes, ms, Bench, DB_FILE};
use crate::daemon::Daemon;
use crate::receiver::{refusing_port, Receiver};
use crate::seed::{copy_database, seed, Backlog, Due};

const SCENARIO: &str = "backlog";
const MIB: f64 = 1024.0 * 1024.0;
/// Requests timed per overview path, one after another on one connection.
const GETS: usize = 20;

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let pending = bench.plan.backlog_pending;
    let case = format!("{pending} pending");
    bench.results.note(format!(
        "backlog: {pending} pending deliveries (due in 30 days) are written into the database \
         file directly with the daemon's schema, then the daemon is started on a copy per run; \
         ready = first 200 from /readyz after spawn; the copy is in the page cache (warm restart)"
    ));
    let template = bench.fresh_dir("backlog-template")?;
    let outcome = measure(bench, &template, &case).await;
    bench.discard(&template);
    outcome
}

async fn measure(bench: &mut Bench, template: &std::path::Path, case: &str) -> anyhow::Result<()> {
    let pending = bench.plan.backlog_pending;
    // The daemon creates the schema; then the rows go in while it is stopped.
    bench.start_daemon(template, &[]).await?.stop().await?;
    let backlog = Backlog {
        count: pending,
        origin: format!("http://127.0.0.1:{}", refusing_port()?),
        path: "/backlog".into(),
        due: Due::After(Duration::from_secs(30 * 24 * 3600)),
    };
    let db = template.join(DB_FILE);
    let seeding = tokio::task::spawn_blocking(move || seed(&db, &backlog))
        .await
        .context("seed task panicked")??;
    eprintln!(
        "[{SCENARIO}] seeded {pending} pending deliveries in {:.1} s",
        seeding.as_secs_f64()
    );
    let batch = Batch {
        deliveries: bench.plan.backlog_batch,
        concurrency: bench.plan.e2e_enqueue_concurrency,
        at_most_once: bench.plan.at_most_once,
        body_bytes: 0,
    };
    for run in 0..bench.plan.runs {
        let dir = bench.fresh_dir(SCENARIO)?;
        let from = template.join(DB_FILE);
        let to = dir.join(DB_FILE);
        tokio::task::spawn_blocking(move || copy_database(&from, &to))
            .await
            .context("copy task panicked")??;
        let size = database_bytes(&dir);

        let mut daemon = Daemon::start(&bench.spec(&dir, &[])).await?;
        let ready = daemon.wait_ready().await?;
        let at_ready = daemon.memory()?;
        // What a scrape asks, and what the dashboard's overview and deliveries pages ask.
        for path in [
            "/metrics",
            "/v1/stats",
            "/v1/targets?limit=100",
            "/v1/deliveries?limit=50&order=desc",
        ] {
            let (median, max) = time_gets(&daemon, path).await?;
            let r = &mut bench.results;
            r.record(
                SCENARIO,
                case,
                &format!("GET {path} median"),
                "ms",
                ms(median),
            );
            r.record(
                SCENARIO,
                case,
                &format!("GET {path} max of {GETS}"),
                "ms",
                ms(max),
            );
        }
        let receiver = Receiver::start().await?;
        let report = deliver_batch(std::slice::from_ref(&daemon), &receiver, batch).await?;
        let at_end = daemon.memory()?;
        eprintln!(
            "{} ready in {:.0} ms, RSS {:.1} MiB, {:.0} MiB on disk; fresh batch of {}: {:.0}/s",
            bench.label(SCENARIO, case, run),
            ms(ready),
            at_ready.rss_bytes as f64 / MIB,
            size as f64 / MIB,
            batch.deliveries,
            report.rate(),
        );
        let r = &mut bench.results;
        r.record(SCENARIO, case, "restart to ready", "ms", ms(ready));
        r.record(
            SCENARIO,
            case,
            "RSS at ready",
            "MiB",
            at_ready.rss_bytes as f64 / MIB,
        );
        r.record(
            SCENARIO,
            case,
            "RSS at ready, anonymous (RssAnon)",
            "MiB",
            at_ready.anon_bytes as f64 / MIB,
        );
        r.record(SCENARIO, case, "database size", "MiB", size as f64 / MIB);
        r.record(
            SCENARIO,
            case,
            "database bytes per pending delivery",
            "bytes",
            size as f64 / pending.max(1) as f64,
        );
        let batch_case = format!("{case}, fresh {}", batch.deliveries);
        record_batch(
            bench,
            SCENARIO,
            &batch_case,
            std::slice::from_ref(&daemon),
            &report,
            batch.deliveries,
        );
        let r = &mut bench.results;
        r.record(
            SCENARIO,
            &batch_case,
            "RSS after batch",
            "MiB",
            at_end.rss_bytes as f64 / MIB,
        );
        r.record(
            SCENARIO,
            &batch_case,
            "RSS after batch, anonymous (RssAnon)",
            "MiB",
            at_end.anon_bytes as f64 / MIB,
        );
        r.record(
            SCENARIO,
            &batch_case,
            "peak RSS (VmHWM)",
            "MiB",
            at_end.peak_bytes as f64 / MIB,
        );
        daemon.stop().await?;
        receiver.stop().await;
        bench.discard(&dir);
    }
    bench.results.record(
        SCENARIO,
        case,
        "seeding time (set-up, not spoold)",
        "s",
        seeding.as_secs_f64(),
    );
    Ok(())
}

/// Median and longest time of [`GETS`] sequential `GET path`s on one keep-alive connection.
async fn time_gets(daemon: &Daemon, path: &str) -> anyhow::Result<(Duration, Duration)> {
    let mut conn = daemon.connect().await?;
    let mut times = Vec::with_capacity(GETS);
    for _ in 0..GETS {
        let started = std::time::Instant::now();
        let (status, _) = conn.send(http::Method::GET, path, None).await?;
        anyhow::ensure!(status.is_success(), "GET {path}: {status}");
        times.push(started.elapsed());
    }
    times.sort();
    Ok((times[GETS / 2], times[GETS - 1]))
}
