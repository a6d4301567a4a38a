//! End-to-end tests of the daemon: a real `spoold` (booted in-process on port 0 through
//! `spoold::start`, or as a separate process where kill -9, restarts or signals are the point),
//! a real SQLite file in a temporary directory, and a real HTTP receiver on 127.0.0.1.

mod at_most_once;
mod backup;
mod book;
mod breaker;
mod bulk;
mod bytes;
mod classification;
mod connections;
mod crash;
mod dashboard;
mod disk_full;
mod emulated;
mod failover;
mod fairness;
mod fuzz;
mod idempotency;
mod isolation;
mod keep_alive;
mod leases;
mod lifecycle;
mod maildrop;
mod mixed_trial;
mod observability;
mod openapi;
mod overview;
mod power_loss;
mod rate_limits;
mod redirects;
mod reload;
mod reservations;
mod retention;
mod scripts;
mod security;
mod shared_db;
mod signing;
mod ssrf_netns;
mod storage_faults;
mod systemd;
mod task_locks;
mod task_output;
mod task_processes;
mod task_recovery;
mod task_steps;
mod tasks;
mod tidy;
mod tls;
mod transfer;
mod upgrade;
mod validation;

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde_json::Value;
use spool_testkit::{Api, DaemonOptions};
use tempfile::TempDir;

/// Fast retries so tests exercise several attempts in well under a second.
pub const FAST_RETRIES: &[&str] = &["--retry-base", "50ms", "--retry-cap", "200ms"];

/// Which targets the daemon may reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Targets {
    /// `--allow-private-targets`: the test receiver on 127.0.0.1 is reachable.
    Loopback,
    /// The default address policy.
    PolicyDefault,
}

/// A daemon running inside the test process.
pub struct InProcess {
    pub api: Api,
    pub dir: TempDir,
    running: Option<spoold::Running>,
}

impl InProcess {
    /// Boot on 127.0.0.1:0 with a fresh database, private targets allowed (the receiver is on
    /// loopback) and fast retries, plus `extra` flags.
    pub async fn boot(extra: &[&str]) -> InProcess {
        let dir = TempDir::new().expect("temp dir");
        Self::boot_in(dir, Targets::Loopback, extra).await
    }

    pub async fn boot_in(dir: TempDir, targets: Targets, extra: &[&str]) -> InProcess {
        Self::boot_configured(dir, targets, extra, |_| ()).await
    }

    /// Like [`Self::boot`], on the PostgreSQL database `pg` if one is given (a test run on both
    /// backends).
    pub async fn boot_either(pg: Option<&spool_testkit::TestDatabase>) -> InProcess {
        Self::boot_on(
            TempDir::new().expect("temp dir"),
            Targets::Loopback,
            &[],
            pg,
        )
        .await
    }

    /// Like [`Self::boot_in`], on the PostgreSQL database `pg` if one is given (a test run on
    /// both backends).
    pub async fn boot_on(
        dir: TempDir,
        targets: Targets,
        extra: &[&str],
        pg: Option<&spool_testkit::TestDatabase>,
    ) -> InProcess {
        let url = pg.map(|db| db.url().to_owned());
        Self::boot_configured(dir, targets, extra, move |config| {
            if let Some(url) = url {
                use_postgres(config, url);
            }
        })
        .await
    }

    /// Like [`Self::boot_in`], with a last change to the configuration that no flag makes
    /// (the store's clock).
    pub async fn boot_configured(
        dir: TempDir,
        targets: Targets,
        extra: &[&str],
        change: impl FnOnce(&mut spoold::config::Config),
    ) -> InProcess {
        let db = dir.path().join("data/spoold.db");
        let mut argv: Vec<String> = vec![
            "spoold".into(),
            "--db".into(),
            db.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ];
        if targets == Targets::Loopback {
            argv.push("--allow-private-targets".into());
        }
        argv.extend(FAST_RETRIES.iter().map(|s| s.to_string()));
        argv.extend(extra.iter().map(|s| s.to_string()));
        let mut config = spoold::config::Args::try_parse_from(argv)
            .expect("test flags parse")
            .into_config()
            .expect("test flags are valid");
        // Task attempts are supervised by the spoold binary (this process is the test's).
        config.task_supervisor = Some(vec![env!("CARGO_BIN_EXE_spoold").into()]);
        change(&mut config);
        // A daemon stopped just before on the same database may still be letting go of it:
        // `Running::wait` returns once the daemon dropped its store handle, but a connection
        // task of its API can hold one for a moment longer (the file lock goes with the last).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let running = loop {
            match spoold::start(config.clone()).await {
                Err(spoold::StartError::Store(spool_store::StoreError::Locked { .. }))
                    if std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                started => break started.expect("daemon starts"),
            }
        };
        let spoold::Bound::Tcp(addr) = running.bound.clone() else {
            panic!("expected a TCP listener");
        };
        InProcess {
            api: Api::new(format!("http://{addr}")),
            dir,
            running: Some(running),
        }
    }

    /// Create a delivery (it must be accepted with 201) and wait until its status is one of
    /// `want`; the delivery as it is then.
    pub async fn deliver(&self, request: Value, want: &[&str]) -> Value {
        let (status, created) = self.api.create(request).await.expect("create");
        assert_eq!(status, 201, "{created}");
        self.api
            .wait_status(&id_of(&created), want, WAIT)
            .await
            .unwrap_or_else(|e| panic!("delivery never reached {want:?}: {e}"))
    }

    /// Graceful shutdown, as SIGTERM would do it.
    pub async fn stop(mut self) -> TempDir {
        if let Some(r) = self.running.take() {
            r.shutdown();
            let _ = r.wait().await;
        }
        self.dir
    }
}

/// Options for a daemon process on a database in `dir`, with fast retries.
pub fn process_opts(dir: &TempDir) -> DaemonOptions {
    DaemonOptions::new(db_path(dir)).args(FAST_RETRIES.iter().copied())
}

/// Options for a daemon process on the PostgreSQL test database `db` (its data directory, for
/// what is not in the database, in `dir`), with fast retries.
pub fn postgres_opts(db: &spool_testkit::TestDatabase, dir: &TempDir) -> DaemonOptions {
    on_postgres(db, dir).args(FAST_RETRIES.iter().copied())
}

/// The same with the daemon's own retry spacing.
pub fn on_postgres(db: &spool_testkit::TestDatabase, dir: &TempDir) -> DaemonOptions {
    DaemonOptions::new(PathBuf::from(db.url()))
        .args(["--data-dir".to_owned(), dir.path().display().to_string()])
}

pub fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("data/spoold.db")
}

/// `config` on the PostgreSQL database at `url`, with the few connections a test may take.
pub fn use_postgres(config: &mut spoold::config::Config, url: String) {
    config.db = spoold::config::Database::Postgres(url);
    config.db_connections = spool_testkit::pg::TEST_DB_CONNECTIONS;
}

/// The id of a created delivery.
pub fn id_of(v: &Value) -> String {
    v["id"].as_str().expect("delivery has an id").to_owned()
}

pub const WAIT: Duration = Duration::from_secs(20);

/// Commits the daemon behind `api` has made so far (`spoold_store_commit_batch_size_count`).
pub async fn commits(api: &Api) -> f64 {
    api.metric("spoold_store_commit_batch_size_count")
        .await
        .expect("metrics")
        .unwrap_or(0.0)
}

/// Create `n` deliveries due in 2099 (to a port that would refuse), each answered 201.
pub async fn create_for_later(api: &Api, n: u32) {
    for i in 0..n {
        let (status, _) = api
            .create(
                serde_json::json!({"targetUrl": format!("http://127.0.0.1:9/{i}"),
                                       "notBefore": "2099-01-01T00:00:00Z"}),
            )
            .await
            .expect("create");
        assert_eq!(status, 201);
    }
}

/// Poll until `done` holds for the delivery, or fail after [`WAIT`].
pub async fn wait_for(api: &Api, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (_, d) = api.get(id).await.expect("get");
        if done(&d) {
            return d;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "delivery never got {what}: {d}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
