//! The soak: spoold under a steady mixed load for a long time (30 minutes by default) against a
//! receiver that misbehaves as real ones do — 20 % of requests answered 503, 1 % hung until the
//! daemon's request timeout, 1 % reset without an answer — plus tasks that time out and tasks
//! that print floods of output. Every few seconds it samples what must stay flat: resident
//! memory, open file descriptors, database and WAL size, the backlog, and the enqueue latency's
//! p99 over that window. At the end the load stops and the backlog must drain: a delivery or
//! task still pending or running some minutes after the last enqueue is stuck.
//!
//! It writes `soak.json` (every sample) and `soak.svg` (a chart of them) into `--out`, and
//! fails if anything is stuck or the daemon logged an error. Not part of the test suite: run it
//! by hand (`spool-soak --help`) and commit the chart to docs/src/soak/.
//!
//! Deliveries are kept `--terminal-retention 5m` after they finish, so the database's size
//! levels off after five minutes instead of growing with the run's length.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::daemon::{Daemon, DaemonSpec};
use crate::load::{paced, Paced, PacedReport};
use crate::summary::Latencies;

/// What the soak runs.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub spoold: PathBuf,
    /// How long the load runs (the drain comes after).
    pub duration: Duration,
    /// Deliveries created per second.
    pub rate: u32,
    /// Tasks submitted per second (half time out, half print floods).
    pub task_rate: u32,
    /// How often the daemon is sampled.
    pub every: Duration,
    /// Where the database lives (a fresh directory under it).
    pub work_dir: PathBuf,
    /// Where soak.json and soak.svg go.
    pub out: PathBuf,
}

/// One sample of the daemon.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load began.
    pub t: f64,
    pub rss_bytes: u64,
    pub open_fds: u64,
    pub db_bytes: u64,
    pub wal_bytes: u64,
    /// Deliveries pending or in flight.
    pub backlog: f64,
    /// Tasks queued or running.
    pub tasks_active: f64,
    pub deliveries_succeeded: f64,
    pub tasks_finished: f64,
    /// Enqueue latency over the window that ends here (milliseconds), once the load is over.
    pub enqueue_p50_ms: Option<f64>,
    pub enqueue_p99_ms: Option<f64>,
    pub enqueue_max_ms: Option<f64>,
}

/// The whole run, as written to soak.json.
#[derive(Debug, Serialize)]
pub struct SoakReport {
    pub spoold: String,
    pub duration_s: f64,
    pub rate: u32,
    pub task_rate: u32,
    pub receiver: ReceiverCounts,
    pub samples: Vec<Sample>,
    /// Deliveries and tasks still active when the drain gave up.
    pub stuck_deliveries: f64,
    pub stuck_tasks: f64,
    pub drained_in_s: Option<f64>,
    pub daemon_problems: Vec<String>,
}

/// How the flaky receiver answered.
#[derive(Debug, Default, Serialize)]
pub struct ReceiverCounts {
    pub ok: u64,
    pub failed: u64,
    pub hung: u64,
    pub reset: u64,
}

/// How long the backlog may take to drain after the load stops (retries back off to 10 s).
const DRAIN_LIMIT: Duration = Duration::from_secs(180);

/// Run the soak and write its report and chart.
pub async fn run(opts: &SoakOptions) -> anyhow::Result<SoakReport> {
    let dir = opts
        .work_dir
        .join(format!("spool-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let config = dir.join("spoold.toml");
    std::fs::write(&config, TASK_TYPES).context("write the task types")?;
    let receiver = Flaky::start().await?;
    let db = dir.join("spoold.db");
    let spec = DaemonSpec {
        program: opts.spoold.clone(),
        db: db.clone(),
        data_dir: None,
        args: [
            "--config",
            &config.display().to_string(),
            "--retry-base",
            "1s",
            "--retry-cap",
            "10s",
            "--request-timeout",
            "2s",
            "--lease",
            "10s",
            "--terminal-retention",
            "5m",
        ]
        .map(str::to_owned)
        .to_vec(),
    };
    let mut daemon = Daemon::start(&spec).await?;
    daemon.wait_ready().await?;
    let addr = daemon.addr();

    let target = receiver.url();
    let deliveries = Paced {
        addr,
        path: "/v1/deliveries".into(),
        rate: opts.rate,
        duration: opts.duration,
        expect: StatusCode::CREATED,
        max_in_flight: 64,
        body: Arc::new(move |i| {
            // Mostly small bodies, one in fifty of 64 KiB.
            let size = if i % 50 == 0 {
                64 * 1024
            } else {
                200 + (i % 7) * 300
            };
            Bytes::from(format!(
                r#"{{"targetUrl":"{target}","maxAttempts":20,"body":"{}"}}"#,
                "s".repeat(size as usize)
            ))
        }),
    };
    let tasks = Paced {
        addr,
        path: "/v1/tasks".into(),
        rate: opts.task_rate.max(1),
        duration: opts.duration,
        expect: StatusCode::CREATED,
        max_in_flight: 8,
        body: Arc::new(|i| {
            let kind = if i % 2 == 0 { "flood" } else { "stuck" };
            Bytes::from(format!(r#"{{"type":"{kind}"}}"#))
        }),
    };
    let started = Instant::now();
    let delivery_load = tokio::spawn(async move { paced(&deliveries).await });
    let task_load = tokio::spawn(async move { paced(&tasks).await });

    let mut samples = Vec::new();
    let mut next = started;
    eprintln!(
        "soak: {} deliveries/s and {} tasks/s for {:?}, sampling every {:?}",
        opts.rate, opts.task_rate, opts.duration, opts.every
    );
    while started.elapsed() < opts.duration {
        next += opts.every;
        tokio::time::sleep_until(next.into()).await;
        let sample = sample(&daemon, &db, started).await?;
        eprintln!(
            "soak: t={:>6.0}s rss={:>6.1} MiB fds={:>4} db={:>7.1} MiB wal={:>6.1} MiB \
             backlog={:>6} tasks={:>4}",
            sample.t,
            mib(sample.rss_bytes),
            sample.open_fds,
            mib(sample.db_bytes),
            mib(sample.wal_bytes),
            sample.backlog,
            sample.tasks_active
        );
        samples.push(sample);
    }
    let delivery_sends = delivery_load.await.context("delivery load")??;
    let task_sends = task_load.await.context("task load")??;
    eprintln!(
        "soak: load done ({} creates, {} task submissions); draining",
        delivery_sends.sends.len(),
        task_sends.sends.len()
    );
    let drain_started = Instant::now();
    let mut drained_in = None;
    let mut last = samples.last().cloned();
    while drain_started.elapsed() < DRAIN_LIMIT {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let s = sample(&daemon, &db, started).await?;
        let done = s.backlog == 0.0 && s.tasks_active == 0.0;
        last = Some(s);
        if done {
            drained_in = Some(drain_started.elapsed().as_secs_f64());
            break;
        }
    }
    if let Some(s) = &last {
        samples.push(s.clone());
    }
    windowed_latency(&mut samples, &delivery_sends, started, opts.every);
    let problems = daemon.problems();
    daemon.stop().await?;
    let counts = receiver.stop().await;
    let report = SoakReport {
        spoold: opts.spoold.display().to_string(),
        duration_s: opts.duration.as_secs_f64(),
        rate: opts.rate,
        task_rate: opts.task_rate,
        receiver: counts,
        stuck_deliveries: last.as_ref().map_or(0.0, |s| s.backlog),
        stuck_tasks: last.as_ref().map_or(0.0, |s| s.tasks_active),
        drained_in_s: drained_in,
        samples,
        daemon_problems: problems,
    };
    write_report(&report, &opts.out)?;
    std::fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
    Ok(report)
}

/// Two task types: one that overruns its timeout (its process group is killed), one that
/// prints a flood of output (kept to the output limit).
const TASK_TYPES: &str = r#"
[tasks.stuck]
command = ["/bin/sh", "-c", "sleep 30"]
timeout = "1s"
kill_grace = "200ms"
max_attempts = 1
concurrency = 4

[tasks.flood]
command = ["/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo \"flood line $i of many, padded to be long enough\"; i=$((i+1)); done; echo done >&2"]
output_limit = "256KiB"
concurrency = 4
"#;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn sample(daemon: &Daemon, db: &Path, started: Instant) -> anyhow::Result<Sample> {
    let memory = daemon.memory()?;
    let fds = std::fs::read_dir(format!("/proc/{}/fd", daemon.pid()))
        .map(Iterator::count)
        .unwrap_or(0) as u64;
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let metrics = daemon.metrics().await?;
    let status = |name: &str, s: &str| metrics.get(&format!("{name}{{status=\"{s}\"}}"));
    Ok(Sample {
        t: started.elapsed().as_secs_f64(),
        rss_bytes: memory.rss_bytes,
        open_fds: fds,
        db_bytes: size(db.to_owned()),
        wal_bytes: size(PathBuf::from(wal)),
        backlog: status("spoold_deliveries", "pending") + status("spoold_deliveries", "in_flight"),
        tasks_active: status("spoold_tasks", "pending") + status("spoold_tasks", "running"),
        deliveries_succeeded: metrics.succeeded(),
        tasks_finished: ["succeeded", "failed", "timed_out"]
            .iter()
            .map(|s| status("spoold_tasks", s))
            .sum(),
        enqueue_p50_ms: None,
        enqueue_p99_ms: None,
        enqueue_max_ms: None,
    })
}

/// Each sample taken during the load gets the enqueue latency of the creates acknowledged in
/// the window that ends at it.
fn windowed_latency(samples: &mut [Sample], load: &PacedReport, started: Instant, every: Duration) {
    let window = every.as_secs_f64();
    for s in samples.iter_mut() {
        let nanos: Vec<u64> = load
            .sends
            .iter()
            .filter(|send| {
                let at = send.acked.saturating_duration_since(started).as_secs_f64();
                at <= s.t && at > s.t - window
            })
            .map(|send| send.acked.saturating_duration_since(send.sent).as_nanos() as u64)
            .collect();
        if nanos.is_empty() {
            continue;
        }
        let latencies = Latencies::from_nanos(nanos);
        let ms = |q| latencies.percentile(q).as_secs_f64() * 1000.0;
        s.enqueue_p50_ms = Some(ms(0.5));
        s.enqueue_p99_ms = Some(ms(0.99));
        s.enqueue_max_ms = Some(ms(1.0));
    }
}

fn write_report(report: &SoakReport, out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let json = serde_json::to_string_pretty(report).context("encode the report")?;
    std::fs::write(out.join("soak.json"), json).context("write soak.json")?;
    std::fs::write(out.join("soak.svg"), chart(report)).context("write soak.svg")?;
    Ok(())
}

/// What is charted and summed up: a name, and its value in a sample (if it has one).
type Quantity = (&'static str, fn(&Sample) -> Option<f64>);

const QUANTITIES: [Quantity; 8] = [
    ("resident memory (MiB)", |s| Some(mib(s.rss_bytes))),
    ("open file descriptors", |s| Some(s.open_fds as f64)),
    ("database file (MiB)", |s| Some(mib(s.db_bytes))),
    ("WAL file (MiB)", |s| Some(mib(s.wal_bytes))),
    ("enqueue p50 (ms)", |s| s.enqueue_p50_ms),
    ("enqueue p99 (ms)", |s| s.enqueue_p99_ms),
    ("enqueue max (ms)", |s| s.enqueue_max_ms),
    ("deliveries pending or in flight", |s| Some(s.backlog)),
];

/// One panel of the chart: a title and a series over time.
struct Panel {
    title: &'static str,
    points: Vec<(f64, f64)>,
}

/// The samples as an SVG: one small panel per quantity, time on the x axis, each panel's y axis
/// from zero to a little over its largest value (so "flat" looks flat, not magnified noise).
pub fn chart(report: &SoakReport) -> String {
    let panels: Vec<Panel> = QUANTITIES
        .iter()
        .map(|(title, f)| Panel {
            title,
            points: report
                .samples
                .iter()
                .filter_map(|s| f(s).map(|v| (s.t / 60.0, v)))
                .collect(),
        })
        .collect();
    let (w, h, cols) = (360.0, 200.0, 2usize);
    let rows = panels.len().div_ceil(cols);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="11">"#,
        w * cols as f64 + 20.0,
        h * rows as f64 + 40.0
    );
    let _ = write!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="18" font-size="13">spoold soak: {} deliveries/s (20 % 503, 1 % hung, 1 % reset) and {} tasks/s for {:.0} min; x axis: minutes</text>"#,
        report.rate,
        report.task_rate,
        report.duration_s / 60.0
    );
    let t_max = report
        .samples
        .iter()
        .map(|s| s.t / 60.0)
        .fold(1.0_f64, f64::max);
    for (i, panel) in panels.iter().enumerate() {
        let (x0, y0) = (10.0 + (i % cols) as f64 * w, 30.0 + (i / cols) as f64 * h);
        let (pw, ph) = (w - 60.0, h - 50.0);
        let (left, top) = (x0 + 45.0, y0 + 20.0);
        let v_max = panel.points.iter().map(|p| p.1).fold(0.0_f64, f64::max) * 1.2;
        let v_max = if v_max > 0.0 { v_max } else { 1.0 };
        let _ = write!(
            svg,
            r##"<text x="{left}" y="{}">{}</text><rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##,
            y0 + 14.0,
            panel.title
        );
        for (frac, anchor) in [(0.0, "end"), (0.5, "end"), (1.0, "end")] {
            let y = top + ph - frac * ph;
            let _ = write!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="{anchor}">{}</text>"#,
                left - 4.0,
                y + 4.0,
                short(v_max * frac)
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{left}" y="{}">0</text><text x="{}" y="{}" text-anchor="end">{t_max:.0}</text>"#,
            top + ph + 14.0,
            left + pw,
            top + ph + 14.0
        );
        let mut path = String::new();
        for (t, v) in &panel.points {
            let x = left + t / t_max * pw;
            let y = top + ph - v / v_max * ph;
            let _ = write!(path, "{x:.1},{y:.1} ");
        }
        let _ = write!(
            svg,
            r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>"##,
            path.trim_end()
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The misbehaving receiver: per request, by a counter (not at random, so runs compare), 1 in
/// 100 is hung (answered only after a minute, long past the daemon's request timeout), 1 in
/// 100 reset (the connection dropped without an answer), 20 in 100 answered 503, the rest 200.
struct Flaky {
    addr: SocketAddr,
    counts: Arc<Counts>,
    stop: CancellationToken,
    tasks: TaskTracker,
}

#[derive(Default)]
struct Counts {
    seen: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    hung: AtomicU64,
    reset: AtomicU64,
}

/// What one request gets.
enum Fate {
    Ok,
    Fail,
    Hang,
    Reset,
}

impl Counts {
    fn fate(&self) -> Fate {
        let n = self.seen.fetch_add(1, Ordering::Relaxed);
        // Spread over the hundred so the failures do not come in runs.
        match (n * 37) % 100 {
            0 => Fate::Hang,
            1 => Fate::Reset,
            2..=21 => Fate::Fail,
            _ => Fate::Ok,
        }
    }
}

impl Flaky {
    async fn start() -> anyhow::Result<Flaky> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .context("bind the receiver on 127.0.0.1")?;
        let addr = listener.local_addr().context("receiver address")?;
        let counts = Arc::new(Counts::default());
        let stop = CancellationToken::new();
        let tasks = TaskTracker::new();
        let answering = Arc::clone(&counts);
        tasks.spawn(crate::receiver::serve(
            listener,
            move |req| answer(Arc::clone(&answering), req),
            stop.clone(),
            tasks.clone(),
        ));
        Ok(Flaky {
            addr,
            counts,
            stop,
            tasks,
        })
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    async fn stop(self) -> ReceiverCounts {
        self.stop.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        let c = &self.counts;
        ReceiverCounts {
            ok: c.ok.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            hung: c.hung.load(Ordering::Relaxed),
            reset: c.reset.load(Ordering::Relaxed),
        }
    }
}

/// A reset: the service fails, and hyper drops the connection without answering.
#[derive(Debug)]
struct Reset;

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reset by the soak's receiver")
    }
}

impl std::error::Error for Reset {}

async fn answer(
    counts: Arc<Counts>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Reset> {
    let _ = request.into_body().collect().await;
    let status = match counts.fate() {
        Fate::Ok => {
            counts.ok.fetch_add(1, Ordering::Relaxed);
            StatusCode::OK
        }
        Fate::Fail => {
            counts.failed.fetch_add(1, Ordering::Relaxed);
            StatusCode::SERVICE_UNAVAILABLE
        }
        Fate::Hang => {
            counts.hung.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::OK
        }
        Fate::Reset => {
            counts.reset.fetch_add(1, Ordering::Relaxed);
            return Err(Reset);
        }
    };
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = status;
    Ok(response)
}

/// The verdict on a report: what went wrong, if anything.
pub fn problems(report: &SoakReport) -> Vec<String> {
    let mut found = Vec::new();
    if report.stuck_deliveries > 0.0 || report.stuck_tasks > 0.0 {
        found.push(format!(
            "stuck after a {DRAIN_LIMIT:?} drain: {} deliveries pending or in flight, {} tasks \
             active",
            report.stuck_deliveries, report.stuck_tasks
        ));
    }
    for p in &report.daemon_problems {
        if p.contains("\"ERROR\"") {
            found.push(format!("the daemon logged an error: {p}"));
        }
    }
    found
}

/// A short account of the run, for the terminal and for the book's benchmarks: the first and last
/// quarter of the load compared.
pub fn summary(report: &SoakReport) -> String {
    let during: Vec<&Sample> = report
        .samples
        .iter()
        .filter(|s| s.t <= report.duration_s + 0.5)
        .collect();
    let quarter = (during.len() / 4).max(1);
    let (first, last) = (
        &during[..quarter.min(during.len())],
        &during[during.len().saturating_sub(quarter)..],
    );
    let values = |xs: &[&Sample], f: fn(&Sample) -> Option<f64>| -> Vec<f64> {
        xs.iter().filter_map(|s| f(s)).collect()
    };
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "| quantity | first quarter (mean) | last quarter (mean) | max |"
    );
    let _ = writeln!(text, "|---|---|---|---|");
    for (name, f) in QUANTITIES {
        let max = values(&during, f).into_iter().fold(0.0_f64, f64::max);
        let _ = writeln!(
            text,
            "| {name} | {} | {} | {} |",
            short(mean(values(first, f))),
            short(mean(values(last, f))),
            short(max)
        );
    }
    let r = &report.receiver;
    let _ = writeln!(
        text,
        "\nreceiver: {} ok, {} 503, {} hung, {} reset; drained in {}; stuck: {} deliveries, {} tasks",
        r.ok,
        r.failed,
        r.hung,
        r.reset,
        report
            .drained_in_s
            .map_or_else(|| "— (did not drain)".to_owned(), |s| format!("{s:.0} s")),
        report.stuck_deliveries,
        report.stuck_tasks
    );
    text
}

/// Refuse options that cannot make a meaningful run.
pub fn check(opts: &SoakOptions) -> anyhow::Result<()> {
    if opts.duration < Duration::from_secs(10) || opts.every.is_zero() || opts.rate == 0 {
        bail!("a soak needs --duration of at least 10s, --every above 0 and --rate above 0");
    }
    Ok(())
}

impl Sample {
    /// Every quantity, for the tests of the chart.
    #[cfg(test)]
    fn flat(t: f64) -> Sample {
        Sample {
            t,
            rss_bytes: 40 << 20,
            open_fds: 30,
            db_bytes: 10 << 20,
            wal_bytes: 4 << 20,
            backlog: 100.0,
            tasks_active: 2.0,
            deliveries_succeeded: t * 100.0,
            tasks_finished: t,
            enqueue_p50_ms: Some(1.0),
            enqueue_p99_ms: Some(5.0),
            enqueue_max_ms: Some(9.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(samples: Vec<Sample>) -> SoakReport {
        SoakReport {
            spoold: "spoold".into(),
            duration_s: 60.0,
            rate: 100,
            task_rate: 1,
            receiver: ReceiverCounts::default(),
            samples,
            stuck_deliveries: 0.0,
            stuck_tasks: 0.0,
            drained_in_s: Some(3.0),
            daemon_problems: Vec::new(),
        }
    }

    #[test]
    fn the_chart_has_a_line_per_quantity_through_every_sample() {
        let r = report((1..=6).map(|i| Sample::flat(f64::from(i) * 10.0)).collect());
        let svg = chart(&r);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), QUANTITIES.len());
        // Six points on each line.
        let first = svg.split("points=\"").nth(1).expect("a polyline");
        let points = first.split('"').next().expect("its points");
        assert_eq!(points.split(' ').count(), 6, "{points}");
    }

    #[test]
    fn the_receiver_fails_hangs_and_resets_in_the_stated_shares() {
        let counts = Counts::default();
        let (mut fail, mut hang, mut reset) = (0, 0, 0);
        for _ in 0..1000 {
            match counts.fate() {
                Fate::Fail => fail += 1,
                Fate::Hang => hang += 1,
                Fate::Reset => reset += 1,
                Fate::Ok => {}
            }
        }
        assert_eq!((fail, hang, reset), (200, 10, 10));
    }

    #[test]
    fn each_window_gets_its_own_percentiles() {
        let started = Instant::now();
        let sends = (1..=100u64)
            .map(|i| crate::load::PacedSend {
                sent: started,
                // All in the first window: i ms each.
                acked: started + Duration::from_millis(i),
                response: Bytes::new(),
            })
            .collect();
        let load = PacedReport {
            sends,
            elapsed: Duration::from_secs(1),
            max_lag: Duration::ZERO,
        };
        let mut samples = vec![Sample::flat(10.0), Sample::flat(20.0)];
        windowed_latency(&mut samples, &load, started, Duration::from_secs(10));
        assert_eq!(samples[0].enqueue_p50_ms, Some(50.0));
        assert_eq!(samples[0].enqueue_p99_ms, Some(99.0));
        assert_eq!(samples[0].enqueue_max_ms, Some(100.0));
        // Nothing was acknowledged in the second window: it keeps what it had.
        assert_eq!(samples[1].enqueue_p99_ms, Some(5.0));
    }

    #[test]
    fn stuck_work_and_logged_errors_fail_the_run() {
        let mut r = report(vec![Sample::flat(10.0)]);
        assert!(problems(&r).is_empty());
        r.stuck_deliveries = 3.0;
        r.daemon_problems = vec![r#"{"level":"ERROR","message":"x"}"#.into()];
        assert_eq!(problems(&r).len(), 2);
        assert!(summary(&r).contains("| resident memory (MiB) | 40.0 | 40.0 | 40.0 |"));
    }
}
