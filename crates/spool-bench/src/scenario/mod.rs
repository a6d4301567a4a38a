//! The scenarios, one file each, and what they share: the [`Bench`] (plan, daemon binary, data
//! directory, store backend, results) and the pieces every daemon run uses.
//!
//! `enqueue` and `e2e` start their daemons through [`Bench::start_hosts`], which follows
//! `--db` and `--hosts`: one daemon on a fresh SQLite file, or N daemons sharing a fresh
//! PostgreSQL database; so does `bulk` on PostgreSQL (on SQLite it seeds the file first).
//! `handoff` runs on PostgreSQL only, with two hosts ([`Bench::start_pg_hosts`]); the other
//! scenarios run on SQLite only ([`Bench::start_daemon`]).

pub mod backlog;
pub mod bulk;
pub mod ceiling;
pub mod e2e;
pub mod enqueue;
pub mod fsync;
pub mod handoff;
pub mod idle;
pub mod latency;
pub mod rate;
pub mod tasks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;

use crate::daemon::{Daemon, DaemonSpec, Metrics};
use crate::load::{BodyFn, ClosedLoop, ClosedLoopReport};
use crate::plan::Plan;
use crate::postgres::{PgDatabase, PgServer};
use crate::report::Results;

/// The daemon's CPU a create (`enqueue`), a delivery (`e2e`) and a task (`tasks`), and the
/// floors each is shown as a multiple of (see [`crate::floor`]).
pub mod cpu {
    pub const PER_REQUEST: &str = "daemon CPU per request (utime + stime, all threads)";
    pub const PER_DELIVERY: &str = "daemon CPU per delivery (utime + stime, all threads)";
    pub const PER_TASK: &str = "daemon CPU per task (utime + stime, all threads)";
    pub const CHILDREN_PER_TASK: &str =
        "reaped children's CPU per task (each attempt's supervisor and /bin/true)";
    pub const HTTP_FLOOR: &str =
        "HTTP floor: CPU per request (bare axum handler, reads the body, answers 201)";
    pub const SENDING_FLOOR: &str = "sending floor: CPU per request (bare reqwest loop)";
    pub const SPAWNING_FLOOR: &str =
        "spawning floor: CPU per spawn (posix_spawn + pidfd_open + waitid)";
    pub const SPAWNING_FLOOR_CHILDREN: &str =
        "spawning floor: reaped children's CPU per spawn (/bin/true)";
    /// A delivery's floor: its create received and its request sent.
    pub const DELIVERY_FLOOR: &str = "floor per delivery (HTTP floor + sending floor)";
    /// A task's floor: its submission received and its process spawned and reaped.
    pub const TASK_FLOOR: &str = "floor per task (HTTP floor + spawning floor)";
}

/// Where the SQLite file lives inside a run's directory.
pub const DB_FILE: &str = "spoold.db";

/// The store the daemons of `enqueue` and `e2e` run on.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A fresh SQLite file per run, one daemon (the default).
    Sqlite,
    /// A fresh database per run on this server, shared by `hosts` daemons.
    Postgres { server: PgServer, hosts: usize },
}

impl Backend {
    /// `sqlite` or `postgres`, as the results name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres { .. } => "postgres",
        }
    }

    /// Daemons per run.
    pub fn hosts(&self) -> usize {
        match self {
            Backend::Sqlite => 1,
            Backend::Postgres { hosts, .. } => *hosts,
        }
    }
}

/// State shared by the scenarios of one invocation.
pub struct Bench {
    pub plan: Plan,
    pub spoold: PathBuf,
    /// This invocation's data directory; every daemon run gets a fresh one below it.
    root: PathBuf,
    keep_data: bool,
    next_dir: u32,
    backend: Backend,
    pub results: Results,
}

/// The daemons of one run: one on a SQLite file, or `--hosts` sharing a PostgreSQL database
/// of the run's own. Stop them with [`Bench::stop_hosts`]; dropped, they are killed (the
/// daemons first, then the database is dropped).
pub struct Hosts {
    pub daemons: Vec<Daemon>,
    dir: PathBuf,
    database: Option<PgDatabase>,
}

impl Hosts {
    /// The daemons' API addresses, in host order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.daemons.iter().map(Daemon::addr).collect()
    }
}

impl Bench {
    pub fn new(
        plan: Plan,
        spoold: PathBuf,
        root: PathBuf,
        keep_data: bool,
        backend: Backend,
    ) -> Bench {
        Bench {
            plan,
            spoold,
            root,
            keep_data,
            next_dir: 0,
            backend,
            results: Results::default(),
        }
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The name `enqueue` and `e2e` record under: the plain name on SQLite (as always), the
    /// backend and host count added on PostgreSQL, e.g. `e2e (postgres, 2 hosts)`. Either way
    /// the JSON entries carry `backend` and `hosts`.
    pub fn scenario_name(&mut self, base: &str) -> String {
        let name = match &self.backend {
            Backend::Sqlite => base.to_owned(),
            Backend::Postgres { hosts, .. } => format!(
                "{base} (postgres, {hosts} host{})",
                if *hosts == 1 { "" } else { "s" }
            ),
        };
        self.results
            .describe(&name, self.backend.kind(), self.backend.hosts());
        name
    }

    /// A new, empty directory for one run.
    /// A configuration file that signs every delivery with one key (written once into this
    /// invocation's data directory), as a `--config` value.
    pub fn signing_config(&self) -> anyhow::Result<String> {
        use std::os::unix::fs::PermissionsExt;
        let root = std::path::absolute(&self.root).context("the data directory")?;
        std::fs::create_dir_all(&root).context("create the data directory")?;
        let key = root.join("bench.key");
        std::fs::write(&key, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n")
            .context("write the key")?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .context("chmod the key")?;
        let config = root.join("sign.toml");
        std::fs::write(
            &config,
            format!(
                "[secrets]\nbench = {{ file = {:?} }}\n\n[[targets]]\nmatch = \"http://*\"\nsign = \"bench\"\n",
                key.display().to_string()
            ),
        )
        .context("write the signing config")?;
        Ok(config.display().to_string())
    }

    pub fn fresh_dir(&mut self, label: &str) -> anyhow::Result<PathBuf> {
        self.next_dir += 1;
        let dir = self.root.join(format!("{:03}-{label}", self.next_dir));
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        Ok(dir)
    }

    /// Remove a run's directory, unless the data is to be kept.
    pub fn discard(&self, dir: &Path) {
        if !self.keep_data {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// How to start the daemon on `dir`'s database with extra flags.
    pub fn spec(&self, dir: &Path, args: &[String]) -> DaemonSpec {
        DaemonSpec {
            program: self.spoold.clone(),
            db: dir.join(DB_FILE),
            data_dir: None,
            args: args.to_vec(),
        }
    }

    /// Start the daemon on `dir`'s SQLite file and wait until `/readyz` answers 200.
    pub async fn start_daemon(&self, dir: &Path, args: &[String]) -> anyhow::Result<Daemon> {
        let mut daemon = Daemon::start(&self.spec(dir, args)).await?;
        daemon.wait_ready().await?;
        Ok(daemon)
    }

    /// Start a run's daemons, with extra flags, on the backend `--db` and `--hosts` ask for,
    /// each ready (`/readyz` 200) before the next starts: on SQLite one daemon on a fresh file
    /// in a fresh directory `label`; on PostgreSQL a fresh database and the hosts on it, each
    /// with `--data-dir` in a directory of its own under the fresh one.
    pub async fn start_hosts(&mut self, label: &str, args: &[String]) -> anyhow::Result<Hosts> {
        let Backend::Postgres { hosts, .. } = &self.backend else {
            let dir = self.fresh_dir(label)?;
            let daemon = self.start_daemon(&dir, args).await?;
            return Ok(Hosts {
                daemons: vec![daemon],
                dir,
                database: None,
            });
        };
        let hosts = *hosts;
        self.start_pg_hosts(label, hosts, args).await
    }

    /// As [`Bench::start_hosts`] on PostgreSQL, with `hosts` daemons whatever `--hosts` says
    /// (for scenarios about several hosts); fails on SQLite.
    pub async fn start_pg_hosts(
        &mut self,
        label: &str,
        hosts: usize,
        args: &[String],
    ) -> anyhow::Result<Hosts> {
        let Backend::Postgres { server, .. } = &self.backend else {
            anyhow::bail!("{label} runs on PostgreSQL only: pass --db postgres://…");
        };
        let server = server.clone();
        let dir = self.fresh_dir(label)?;
        let database = server.create_database(self.keep_data).await?;
        // Declared after the database, so dropped (killed) before it on an early return.
        let mut daemons = Vec::with_capacity(hosts);
        for host in 1..=hosts {
            let data_dir = dir.join(format!("host-{host}"));
            std::fs::create_dir_all(&data_dir)
                .with_context(|| format!("create {}", data_dir.display()))?;
            let spec = DaemonSpec {
                program: self.spoold.clone(),
                db: PathBuf::from(database.url()),
                data_dir: Some(data_dir),
                args: args.to_vec(),
            };
            let mut daemon = Daemon::start(&spec)
                .await
                .with_context(|| format!("host {host} of {hosts} on {}", database.name()))?;
            daemon
                .wait_ready()
                .await
                .with_context(|| format!("host {host} of {hosts} on {}", database.name()))?;
            daemons.push(daemon);
        }
        Ok(Hosts {
            daemons,
            dir,
            database: Some(database),
        })
    }

    /// Stop a run's daemons (each one, even after another failed to stop cleanly), then drop
    /// its database and remove its directory, unless the data is to be kept.
    pub async fn stop_hosts(&self, hosts: Hosts) -> anyhow::Result<()> {
        let Hosts {
            daemons,
            dir,
            database,
        } = hosts;
        let mut outcome = Ok(());
        for daemon in daemons {
            let stopped = daemon.stop().await;
            if outcome.is_ok() {
                outcome = stopped.map(|_| ());
            }
        }
        if let Some(database) = database {
            let removed = database.remove().await;
            if outcome.is_ok() {
                outcome = removed;
            }
        }
        self.discard(&dir);
        outcome
    }

    /// What the floors are and how they are counted, for the notes (once).
    pub fn note_floors(&mut self) {
        if !self.plan.floors {
            return;
        }
        self.results.note(
            "floors: after each daemon run of enqueue, e2e and tasks, the same work is done by \
             a bare process of this binary, its CPU (utime + stime, all threads; cutime + cstime \
             for its reaped children) read from /proc/<pid>/stat as the daemon's is: the HTTP \
             floor (the same creates or submissions, same client and concurrency, against a \
             bare axum handler that reads the body and answers 201), the sending floor (a bare \
             reqwest loop sending spoold's requests to the receiver at the per-target \
             concurrency), the spawning floor (std::process::Command, i.e. glibc posix_spawn, + \
             pidfd_open + waitid of /bin/true at the task concurrency); a delivery's floor is \
             HTTP + sending, a task's HTTP + spawning; × floor = median / the floor's median",
        );
    }

    /// Run the HTTP floor with `load` (the daemon run's load, sent to `servers` bare axum
    /// processes instead) and record its CPU a request as [`cpu::HTTP_FLOOR`]; returns it (µs).
    pub async fn http_floor(
        &mut self,
        scenario: &str,
        case: &str,
        run: usize,
        load: &ClosedLoop,
        servers: usize,
    ) -> anyhow::Result<f64> {
        let (floor, report) = crate::floor::http_floor(load, servers).await?;
        eprintln!(
            "{} HTTP floor: {:.1} µs CPU a request ({:.0} req/s)",
            self.label(scenario, case, run),
            floor.own_us(),
            report.throughput(),
        );
        self.results
            .record(scenario, case, cpu::HTTP_FLOOR, "µs", floor.own_us());
        Ok(floor.own_us())
    }

    /// `[scenario case run i/n]`, for progress lines.
    pub fn label(&self, scenario: &str, case: &str, run: usize) -> String {
        format!("[{scenario} {case} run {}/{}]", run + 1, self.plan.runs)
    }

    /// Remarks that hold for every daemon number.
    pub fn note_common(&mut self) {
        self.results.note(
            "spoold runs with its default flags plus --allow-private-targets and its default \
             log level (info): one JSON log line per API request and per delivery attempt, \
             drained from its stderr, so that cost is inside every daemon number",
        );
        self.results.note(
            "daemon, load generator and receiver share this machine's CPUs; latencies run from \
             sending a request to reading its whole response; percentiles are exact (nearest \
             rank over every request of a run); spread = (max - min) / median over the runs",
        );
    }

    /// Record what a daemon run cost per unit of work: commits, writes per commit, log volume
    /// (summed over the run's daemons).
    pub fn record_daemon_costs(&mut self, scenario: &str, case: &str, costs: &DaemonCosts<'_>) {
        let DaemonCosts {
            before,
            after,
            daemons,
            units,
            unit,
        } = *costs;
        let commits = after.commits() - before.commits();
        let writes = after.committed_writes() - before.committed_writes();
        let per = |v: f64| v / units.max(1) as f64;
        self.results.record(
            scenario,
            case,
            &format!("store commits per {unit}"),
            "commits",
            per(commits),
        );
        if commits > 0.0 {
            self.results.record(
                scenario,
                case,
                "writes per commit (mean batch)",
                "writes",
                writes / commits,
            );
        }
        let log_bytes: u64 = daemons.iter().map(|d| d.log_volume().1).sum();
        self.results.record(
            scenario,
            case,
            &format!("daemon log per {unit}"),
            "bytes",
            per(log_bytes as f64),
        );
    }
}

/// What a daemon run did, for [`Bench::record_daemon_costs`]: metrics at its start and end
/// (summed over its daemons), and how many units of work (requests, deliveries) it did in
/// between.
#[derive(Clone, Copy)]
pub struct DaemonCosts<'a> {
    pub before: &'a Metrics,
    pub after: &'a Metrics,
    pub daemons: &'a [Daemon],
    pub units: u64,
    pub unit: &'a str,
}

/// The daemons' CPU time so far (`utime + stime`, all threads), summed.
pub fn cpu_of(daemons: &[Daemon]) -> anyhow::Result<Duration> {
    let mut sum = Duration::ZERO;
    for daemon in daemons {
        sum += daemon.cpu_time()?;
    }
    Ok(sum)
}

/// The body of `POST /v1/deliveries` for delivery number `i` to `target_url`, optionally not
/// before `not_before` (RFC 3339).
pub fn create_body(
    target_url: String,
    not_before: Option<&'static str>,
    mode: Option<&'static str>,
) -> BodyFn {
    Arc::new(move |i| {
        let mut text = format!(r#"{{"targetUrl":"{target_url}","body":{{"seq":{i}}}"#);
        if let Some(nb) = not_before {
            text.push_str(&format!(r#","notBefore":"{nb}""#));
        }
        if let Some(mode) = mode {
            text.push_str(&format!(r#","mode":"{mode}""#));
        }
        text.push('}');
        Bytes::from(text)
    })
}

/// Like [`create_body`], with the delivery's JSON body padded (`"pad":"xxx…"`) to about
/// `bytes` bytes.
pub fn padded_body(target_url: String, mode: Option<&'static str>, bytes: usize) -> BodyFn {
    if bytes == 0 {
        return create_body(target_url, None, mode);
    }
    let pad = "x".repeat(bytes.saturating_sub(30));
    Arc::new(move |i| {
        let mut text =
            format!(r#"{{"targetUrl":"{target_url}","body":{{"seq":{i},"pad":"{pad}"}}"#);
        if let Some(mode) = mode {
            text.push_str(&format!(r#","mode":"{mode}""#));
        }
        text.push('}');
        Bytes::from(text)
    })
}

/// A generous time limit for `n` requests or deliveries: two minutes plus 20 ms each (50 per
/// second), so that a slow daemon is measured rather than failed, yet no run is unbounded.
pub fn time_limit(n: u64) -> Duration {
    Duration::from_secs(120)
        + Duration::from_millis(20).saturating_mul(n.min(u64::from(u32::MAX)) as u32)
}

/// Milliseconds, for recording.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes of the database file and its WAL.
pub fn database_bytes(dir: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(dir.join(format!("{DB_FILE}{suffix}"))).ok())
        .map(|m| m.len())
        .sum()
}

/// Record a closed-loop run: throughput and p50/p99/p99.9 latency; returns a progress line.
pub fn record_load(
    results: &mut Results,
    scenario: &str,
    case: &str,
    report: &ClosedLoopReport,
) -> String {
    results.record(scenario, case, "throughput", "req/s", report.throughput());
    for (name, q) in [("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)] {
        let v = ms(report.latencies.percentile(q));
        results.record(scenario, case, &format!("{name} latency"), "ms", v);
    }
    format!(
        "{:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms",
        report.throughput(),
        ms(report.latencies.percentile(0.5)),
        ms(report.latencies.percentile(0.99)),
        ms(report.latencies.percentile(0.999)),
    )
}
