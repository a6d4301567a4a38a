//! Idle cost: the daemon holding a backlog for a target that refuses connections. Measures the
//! CPU time (user + system, from `/proc/<pid>/stat`) it uses over a fixed window that starts
//! when it is ready, and how many attempts it made in that window.
//!
//! The deliveries are seeded due at once and the window starts when the daemon is ready, so it
//! holds whatever the daemon does about them with its default flags (attempts, retries,
//! backing off from the target): what a restart with a dead target costs over that time.

use std::time::Instant;

use anyhow::Context as _;

use super::{Bench, DB_FILE};
use crate::receiver::refusing_port;
use crate::seed::{seed, Backlog, Due};

const SCENARIO: &str = "idle";

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let pending = bench.plan.idle_pending;
    let window = bench.plan.idle_window;
    let case = format!("{pending} pending, target refuses");
    bench.results.note(format!(
        "idle: {pending} deliveries due at once to a port that refuses connections are \
         written into the database directly; CPU is measured over {}s from ready (attempts made \
         before ready are counted in 'attempts since start' only)",
        window.as_secs()
    ));
    for run in 0..bench.plan.runs {
        let dir = bench.fresh_dir(SCENARIO)?;
        bench.start_daemon(&dir, &[]).await?.stop().await?;
        let backlog = Backlog {
            count: pending,
            origin: format!("http://127.0.0.1:{}", refusing_port()?),
            path: "/down".into(),
            due: Due::Now,
        };
        let db = dir.join(DB_FILE);
        tokio::task::spawn_blocking(move || seed(&db, &backlog))
            .await
            .context("seed task panicked")??;

        let daemon = bench.start_daemon(&dir, &[]).await?;
        // Metrics first: reading them costs the daemon CPU, which belongs outside the window.
        let before = daemon.metrics().await?;
        let cpu_before = daemon.cpu_time()?;
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let cpu_after = daemon.cpu_time()?;
        let elapsed = started.elapsed();
        let after = daemon.metrics().await?;
        let memory = daemon.memory()?;
        daemon.stop().await?;
        bench.discard(&dir);

        let cpu = cpu_after.saturating_sub(cpu_before);
        let attempts = after.attempts() - before.attempts();
        let percent = cpu.as_secs_f64() / elapsed.as_secs_f64() * 100.0;
        eprintln!(
            "{} {:.2} s CPU over {:.0} s ({percent:.1}% of a core), {attempts:.0} attempts",
            bench.label(SCENARIO, &case, run),
            cpu.as_secs_f64(),
            elapsed.as_secs_f64(),
        );
        let r = &mut bench.results;
        r.record(
            SCENARIO,
            &case,
            &format!("CPU time over {}s", window.as_secs()),
            "s",
            cpu.as_secs_f64(),
        );
        r.record(SCENARIO, &case, "CPU use", "% of one core", percent);
        r.record(SCENARIO, &case, "attempts in window", "attempts", attempts);
        r.record(
            SCENARIO,
            &case,
            "attempts since start",
            "attempts",
            after.attempts(),
        );
        r.record(
            SCENARIO,
            &case,
            "RSS at end",
            "MiB",
            memory.rss_bytes as f64 / (1024.0 * 1024.0),
        );
        r.record(
            SCENARIO,
            &case,
            "RSS at end, anonymous (RssAnon)",
            "MiB",
            memory.anon_bytes as f64 / (1024.0 * 1024.0),
        );
    }
    Ok(())
}
