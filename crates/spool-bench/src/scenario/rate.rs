//! Rate limit accuracy: a target limited to `rate = "100/s"` (burst 1) with a large backlog
//! due at once. The backlog is written into the database directly; the requests the receiver
//! gets are counted over a window that starts after a warm-up, and the rate over it is
//! compared with the limit. Also the daemon's CPU over the window: holding a backlog back
//! should cost little.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::{Bench, DB_FILE};
use crate::receiver::Receiver;
use crate::seed::{seed, Backlog, Due};

const SCENARIO: &str = "rate";
/// The limit measured.
const RATE: u32 = 100;
/// Before the window: the daemon starts, the first claims settle.
const WARM_UP: Duration = Duration::from_secs(3);

pub async fn run(bench: &mut Bench) -> anyhow::Result<()> {
    let pending = bench.plan.rate_pending;
    let window = bench.plan.rate_window;
    // A backlog that runs out before the window ends measures the backlog, not the rate.
    let needed = (WARM_UP + window).as_secs() * u64::from(RATE);
    anyhow::ensure!(
        pending > needed,
        "--rate-pending {pending} runs out before the window ends: more than {needed} are needed"
    );
    let case = format!("{RATE}/s, {pending} pending");
    bench.results.note(format!(
        "rate: {pending} deliveries due at once to a target whose [[targets]] rule says rate = \
         \"{RATE}/s\" (burst 1); requests counted at the receiver over {}s after a {}s warm-up",
        window.as_secs(),
        WARM_UP.as_secs()
    ));
    for run in 0..bench.plan.runs {
        let receiver = Receiver::start().await?;
        let dir = bench.fresh_dir(SCENARIO)?;
        let config = dir.join("rate.toml");
        std::fs::write(
            &config,
            format!(
                "[[targets]]\nmatch = \"{}/*\"\nrate = \"{RATE}/s\"\n",
                receiver.origin()
            ),
        )
        .context("write the rate config")?;
        let args = vec!["--config".to_owned(), config.display().to_string()];
        bench.start_daemon(&dir, &args).await?.stop().await?;
        let backlog = Backlog {
            count: pending,
            origin: receiver.origin(),
            path: "/limited".into(),
            due: Due::Now,
        };
        let db = dir.join(DB_FILE);
        tokio::task::spawn_blocking(move || seed(&db, &backlog))
            .await
            .context("seed task panicked")??;

        let daemon = bench.start_daemon(&dir, &args).await?;
        tokio::time::sleep(WARM_UP).await;
        let (seen_before, cpu_before) = (receiver.unique(), daemon.cpu_time()?);
        let started = Instant::now();
        tokio::time::sleep(window).await;
        let (seen_after, cpu_after) = (receiver.unique(), daemon.cpu_time()?);
        let elapsed = started.elapsed().as_secs_f64();
        let metrics = daemon.metrics().await?;
        daemon.stop().await?;
        receiver.stop().await;
        bench.discard(&dir);

        let rate = (seen_after - seen_before) as f64 / elapsed;
        let cpu = cpu_after.saturating_sub(cpu_before).as_secs_f64() / elapsed * 100.0;
        let given_back = metrics.get("spoold_delivery_rate_limited_total");
        eprintln!(
            "{} {rate:.2}/s over {elapsed:.1} s (limit {RATE}/s), CPU {cpu:.1}% of a core, {given_back:.0} given back",
            bench.label(SCENARIO, &case, run),
        );
        let r = &mut bench.results;
        r.record(SCENARIO, &case, "delivered rate", "req/s", rate);
        r.record(SCENARIO, &case, "CPU use", "% of one core", cpu);
        r.record(
            SCENARIO,
            &case,
            "given back unsent",
            "deliveries",
            given_back,
        );
    }
    Ok(())
}
