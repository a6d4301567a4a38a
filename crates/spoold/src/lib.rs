//! The spoold daemon as a library: [`start`] boots it from a [`config::Config`] and returns the
//! bound address, so tests can run it in-process on port 0; the `spoold` binary is a thin
//! wrapper that adds flags, logging and signals.
//!
//! # Layout
//! - [`config`]: flags, the configuration file and the validated configuration.
//! - [`api`]: the control API (one file per resource, deliveries and tasks), errors, OpenAPI.
//! - [`deliveries`]: submission, scheduling, one attempt, classification, the outbound HTTP
//!   client and its address policy, reconciliation, retention.
//! - [`tasks`]: declared task types, the runner, and `exec`, the only place that spawns
//!   processes.
//! - `backoff`: exponential backoff with jitter, shared by both.
//! - [`characters`]: the control and invisible characters refused in keys and parameters.
//! - `schema_watch`: stops the daemon when a newer host migrates a shared database past it.
//! - [`unrecorded`]: attempts' results kept on this host while the database is out of reach.
//! - [`maildrop`]: the pickup of requests `spoolctl send` dropped while the daemon was down.
//! - [`metrics`], [`logging`].
//!
//! Durable state lives in the `spool-store` crate; wire types in `spool-proto`.

// Docs are written for the people who change this crate: they link to private items too
// (`cargo doc --document-private-items` renders those links).
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
mod backoff;
pub mod characters;
pub mod config;
pub mod deliveries;
pub mod logging;
pub mod maildrop;
pub mod metrics;
mod schema_watch;
mod spelling;
pub mod systemd;
pub mod tasks;
mod unix_socket;
pub mod unrecorded;

use std::net::SocketAddr;

use deliveries::{activity, deliver, outbound, reconcile, retention, retry, scheduler, submission};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use spool_store::postgres::{PgConfig, PgStore};
use spool_store::sqlite::{SqliteConfig, SqliteStore};
use spool_store::{Store, StoreError};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::config::{Config, Database, Listen};

/// Create `dir` (and its parents) readable by this user only: task output may hold what a
/// script printed.
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Where the control API ended up listening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bound::Tcp(a) => write!(f, "{a}"),
            Bound::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The `--listen` address cannot be bound: the message names the flag, since the address
    /// may be the default one nobody asked for.
    #[error("cannot listen on {addr} (--listen): {source}{}", listen_hint(source))]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Outbound(#[from] outbound::BuildError),
    #[error("{0}")]
    Socket(String),
    #[error("--task-cgroup: {0}")]
    Cgroup(std::io::Error),
    #[error("task types need pidfds (Linux 5.3 or later): {0}")]
    Pidfd(std::io::Error),
    #[error("{0}")]
    TaskUser(String),
    /// `--strict`: a declared type names a program, directory or secret file that is not there.
    #[error("--strict: {0}")]
    TaskFiles(String),
}

/// The dashboard's address for a browser on this host: an unspecified address (`0.0.0.0`,
/// `[::]`) is reached through loopback.
fn dashboard_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    format!("http://{}/ui", SocketAddr::new(ip, addr.port()))
}

/// What to do about an address that cannot be bound.
fn listen_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "; another program listens there (a spoold already running?): stop it, or give this \
             one another address with --listen ADDR (or SPOOLD_LISTEN, or listen in the \
             --config file)"
        }
        _ => {
            "; give another address with --listen ADDR (or SPOOLD_LISTEN, or listen in the \
              --config file)"
        }
    }
}

/// A started daemon.
pub struct Running {
    pub bound: Bound,
    stop: CancellationToken,
    task: JoinHandle<()>,
    failure: schema_watch::Failure,
    /// The configuration in force (its task types as last reloaded).
    config: Config,
    declared: Arc<tasks::Declared>,
    /// The `[[targets]]` rules deliveries sign by, as last reloaded.
    rules: Arc<deliveries::targets::LiveRules>,
    store: Store,
}

/// What a reload ([`Running::reload`]) did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// Task types declared now that were not before, gone, and declared differently.
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub changed: Vec<String>,
    /// Settings that differ in the new configuration but cannot change while the daemon runs,
    /// by flag name: kept as they were until the next start.
    pub kept: Vec<&'static str>,
    /// `[[targets]]` rules now in force (their secrets read again).
    pub target_rules: usize,
    /// `[secrets]` entries declared before and not now: deliveries that name one are not sent
    /// (`secret_missing`, retried) until it is declared again.
    pub removed_secrets: Vec<RemovedSecret>,
    /// Pending tasks of removed types sent to `manual_review` (`type_undeclared`), giving up
    /// the locks they kept through a backoff, as a start would (SQLite: no other host can run
    /// them).
    pub reviewed: Vec<String>,
    /// On PostgreSQL, where another host may still declare a removed type: the locks its
    /// pending tasks keep through a backoff (`LOCK (TYPE task ID)`), which stay held until one
    /// runs them or a person decides.
    pub held_by_removed: Vec<String>,
}

/// A `[secrets]` entry a reload removed, and how many deliveries waiting to be sent name it.
#[derive(Debug, PartialEq, Eq)]
pub struct RemovedSecret {
    pub name: String,
    /// `None` when the store could not be asked (the count is for the warning only).
    pub waiting: Option<u64>,
}

impl Running {
    /// Begin a graceful shutdown (what SIGTERM does).
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// Apply a configuration read again (SIGHUP): the declared task types are replaced, after
    /// the checks a start makes (pidfds, the users they run as, their directories); a submission
    /// or claim from then on sees the new set, while attempts already running keep the type they
    /// started with. Pending tasks of a type no longer declared go to review as at a start,
    /// giving up the locks they kept (SQLite); on PostgreSQL, where another host may declare the
    /// type, they wait, and the locks they keep are named. Every other setting that differs is
    /// kept and named in the answer. `Err`
    /// (nothing changed) when the new task types cannot be run. A removed `[secrets]` entry is
    /// named with the number of deliveries waiting to be sent that name it, counted once the new
    /// configuration is in force.
    pub async fn reload(&mut self, new: Config) -> Result<Reloaded, StartError> {
        let types = &new.task_types;
        if !types.is_empty() {
            tasks::processes::pidfds_supported().map_err(StartError::Pidfd)?;
            check_task_users(types)?;
            check_task_files(types, new.strict)?;
            let data = &self.config.data_dir;
            let (results, output) = (data.join("task-results"), data.join("task-output"));
            for dir in [&results, &output, &data.join("task-attempts")] {
                if let Err(e) = create_private_dir(dir) {
                    warn!(error = %e, dir = %dir.display(), "cannot create a task directory");
                }
            }
            open_results_to_task_users(&results, types)?;
            if let Err(e) = tasks::processes::become_subreaper() {
                warn!(error = %e, "cannot become a child subreaper");
            }
        }
        let old = self.declared.now();
        let described = |t: &tasks::TaskTypes, name: &str| t.get(name).map(|k| format!("{k:?}"));
        let mut reloaded = Reloaded {
            kept: self.config.fixed_changes(&new),
            ..Reloaded::default()
        };
        for name in types.names() {
            match described(&old, &name) {
                None => reloaded.added.push(name),
                before if before != described(types, &name) => reloaded.changed.push(name),
                Some(_) => {}
            }
        }
        reloaded.removed = old
            .names()
            .into_iter()
            .filter(|name| types.get(name).is_none())
            .collect();
        self.declared.replace(Arc::clone(types));
        if !reloaded.removed.is_empty() {
            self.settle_removed_types(&mut reloaded).await;
        }
        self.config.task_types = new.task_types;
        reloaded.target_rules = new.target_rules.len();
        let removed: Vec<String> = self
            .config
            .target_rules
            .secret_names()
            .filter(|name| new.target_rules.secret(name).is_none())
            .map(str::to_owned)
            .collect();
        self.rules.replace(Arc::clone(&new.target_rules));
        self.config.target_rules = new.target_rules;
        for name in removed {
            let waiting = match self.store.waiting_on_secret(name.clone()).await {
                Ok(n) => Some(n),
                Err(e) => {
                    warn!(error = %e, secret = %name,
                          "cannot count the deliveries that name a removed secret");
                    None
                }
            };
            reloaded
                .removed_secrets
                .push(RemovedSecret { name, waiting });
        }
        Ok(reloaded)
    }

    /// What a reload does to the pending tasks of the types it removed (see [`Self::reload`]).
    async fn settle_removed_types(&self, reloaded: &mut Reloaded) {
        if !self.store.is_shared() {
            match self
                .store
                .review_undeclared_tasks(self.declared.now().names())
                .await
            {
                Ok(ids) => reloaded.reviewed = ids,
                Err(e) => warn!(error = %e, "cannot send the tasks of removed types to review"),
            }
            return;
        }
        match self.store.held_task_locks(0).await {
            Ok(locks) => {
                reloaded.held_by_removed = locks
                    .into_iter()
                    .filter(|l| {
                        l.task_status == spool_store::tasks::TaskStatus::Pending
                            && reloaded.removed.contains(&l.task_type)
                    })
                    .map(|l| format!("{} ({} task {})", l.name, l.task_type, l.task_id))
                    .collect();
            }
            Err(e) => warn!(error = %e, "cannot list the locks held by tasks of removed types"),
        }
    }

    /// Resolves once a shutdown has begun, asked for or begun by the daemon itself (a shared
    /// database migrated past this binary).
    pub async fn stopping(&self) {
        self.stop.cancelled().await;
    }

    /// Wait until the daemon has stopped: API closed, in-flight attempts finished or
    /// interrupted and recorded, its store handle dropped (an API connection task that is
    /// just ending may hold one a moment longer; the process exiting closes everything).
    /// `Err` with the reason when the daemon stopped by itself.
    pub async fn wait(self) -> Result<(), String> {
        // The daemon's task closes the store as it ends: this handle must not outlive it.
        drop(self.store);
        if let Err(e) = self.task.await {
            warn!(error = %e, "daemon task ended abnormally");
        }
        match self.failure.lock().map(|mut f| f.take()) {
            Ok(Some(why)) => Err(why),
            _ => Ok(()),
        }
    }
}

/// Where a PostgreSQL host remembers the newest timeline of its database's cluster, in its data
/// directory (`spool_store::postgres::Fence`).
pub const POSTGRES_FENCE_FILE: &str = "postgres-cluster";

/// After the shutdown timeout interrupted them, how long running task attempts get to end
/// (their kill grace and SIGKILL) before the daemon stops without them.
const STOP_ATTEMPTS_AT_MOST: Duration = Duration::from_secs(120);

/// Open the store, recover claims left by a previous process, bind the API and start
/// delivering. Returns once the API is accepting connections.
/// What `--check-config` checks beyond loading the configuration: the checks a start makes of
/// the task types (their users, and with `--strict` their files). On success, a summary line.
pub fn check_config(config: &Config) -> Result<String, StartError> {
    check_task_users(&config.task_types)?;
    check_task_files(&config.task_types, config.strict)?;
    Ok(format!(
        "configuration ok: {} task types, {} target rules",
        config.task_types.names().len(),
        config.target_rules.len()
    ))
}

pub async fn start(config: Config) -> Result<Running, StartError> {
    let store = open_store(&config).await?;

    let executor = executor(&store, &config.data_dir);
    // Results an earlier run held when it stopped during a database outage: recorded before
    // anything is taken back, so that their claims are still theirs.
    let journal = unrecorded::Journal::new(&config.data_dir);
    let recovering = async {
        let replayed = journal.replay(&store).await;
        if replayed != unrecorded::Replayed::default() {
            info!(
                recorded = replayed.recorded,
                kept = replayed.kept,
                unreadable = replayed.unreadable,
                "results an earlier run kept while the database was out of reach"
            );
        }
        recover(&store, &config, &executor).await
    };
    let orphans =
        match &store {
            // Its writes commit on a server that may wait for a standby: bounded, and said why.
            Store::Postgres(pg) => tokio::time::timeout(config.db_start_timeout, recovering)
                .await
                .map_err(|_| {
                    let why = pg.last_replication().and_then(|r| r.risk()).unwrap_or_else(|| {
                    "its writes did not commit (a lock another host holds, or a server that \
                     stopped answering)"
                        .into()
                });
                    StoreError::Unavailable(format!(
                        "start-up: recovering what an earlier run left did not finish within {} s \
                     (--db-start-timeout): {why}",
                        config.db_start_timeout.as_secs()
                    ))
                })??,
            Store::Sqlite(_) => recovering.await?,
        };
    if !config.task_types.is_empty() {
        tasks::processes::pidfds_supported().map_err(StartError::Pidfd)?;
        check_task_users(&config.task_types)?;
        check_task_files(&config.task_types, config.strict)?;
        if let Err(e) = tasks::processes::become_subreaper() {
            warn!(error = %e, "cannot become a child subreaper: a task's descendants that leave \
                               its process group are not re-parented to spoold");
        }
    }
    let running_tasks = Arc::new(tasks::runner::Running::default());
    let declared = Arc::new(tasks::Declared::new(Arc::clone(&config.task_types)));
    let task_cgroup = if config.task_types.is_empty() {
        None
    } else {
        let chosen =
            tasks::cgroup::CgroupRoot::choose(&config.task_cgroup).map_err(StartError::Cgroup)?;
        match &chosen {
            Some(root) => {
                info!(cgroup = %root.path().display(), "task attempts run in cgroups of their own")
            }
            None => info!(
                "task attempts are contained by their supervisors (parenthood) and the record \
                 file each of their processes holds (no delegated cgroup)"
            ),
        }
        chosen
    };

    let policy = outbound::AddressPolicy {
        allow_all: config.allow_private_targets,
        allowed: config.allow_targets.clone(),
    };
    if config.allow_private_targets {
        warn!(
            "--allow-private-targets is set: deliveries may reach loopback and internal networks"
        );
    }
    let outbound = outbound::Outbound::new(outbound::OutboundConfig {
        policy: policy.clone(),
        per_target: config.per_target_concurrency,
        connect_timeout: config.request_timeout,
        max_redirects: config.max_redirects,
    })?;
    let metrics = Arc::new(metrics::Metrics::new(metrics::Settings {
        postgres: store.is_shared(),
        max_db_bytes: config.max_db_bytes,
        allow_private_targets: config.allow_private_targets,
        allowed_target_ranges: config.allow_targets.len(),
        max_redirects: config.max_redirects,
    }));
    if let Some(replication) = store.last_replication() {
        metrics.observe_replication(&replication);
    }
    let activity = Arc::new(activity::Activity::default());
    let control = Arc::new(scheduler::TargetControl::default());
    let gone = Arc::new(deliveries::gone::GoneUrls::default());
    learn_gone_urls(&store, &gone, &metrics).await;
    store.observe_commits(metrics.clone());
    // Task results (while an attempt runs) and output logs: next to a SQLite file.
    let data_dir = config.data_dir.clone();

    let rules = Arc::new(deliveries::targets::LiveRules::new(Arc::clone(
        &config.target_rules,
    )));
    let state = Arc::new(api::AppState {
        control: Arc::clone(&control),
        gone: Arc::clone(&gone),
        store: store.clone(),
        metrics: Arc::clone(&metrics),
        rules: submission::Rules {
            policy,
            retry_window: config.retry_window,
        },
        auth_token: config.auth_token.clone(),
        readiness: api::system::Readiness::default(),
        activity: Arc::clone(&activity),
        started_at: store.now_ms(),
        max_db_bytes: config.max_db_bytes,
        task_types: Arc::clone(&declared),
        running_tasks: Arc::clone(&running_tasks),
        task_output_dir: data_dir.join("task-output"),
        target_rules: Arc::clone(&rules),
        maildrop: prepare_maildrop(config.maildrop.as_deref()),
    });
    let router = api::router(Arc::clone(&state));

    // The task directories, before the API is bound: a daemon that cannot run its task types
    // (a user who cannot reach the result files) refuses to start before it says `listening`.
    // Records of supervisors that no orphan waits for: attempts whose end was recorded just
    // before a crash. One still locked belongs to a supervisor still running: it stays.
    let (results_dir, output_dir, records_dir) = (
        data_dir.join("task-results"),
        data_dir.join("task-output"),
        data_dir.join("task-attempts"),
    );
    remove_unlocked_records(&records_dir, &orphans);
    if !config.task_types.is_empty() {
        for dir in [&results_dir, &output_dir, &records_dir] {
            if let Err(e) = create_private_dir(dir) {
                warn!(error = %e, dir = %dir.display(), "cannot create a task directory");
            }
        }
        // Result files a previous process left (they may hold secrets): nothing runs here yet.
        for entry in std::fs::read_dir(&results_dir)
            .into_iter()
            .flatten()
            .flatten()
        {
            tasks::runner::remove_result(&entry.path());
        }
        open_results_to_task_users(&results_dir, &config.task_types)?;
    }
    // Before `listening` too: the supervisor program is asked its version (a process started
    // and waited for).
    let supervisor = {
        let (named, records) = (config.task_supervisor.clone(), records_dir.clone());
        match tokio::task::spawn_blocking(move || supervisor(named, records)).await {
            Ok(supervisor) => supervisor,
            Err(e) => {
                warn!(error = %e, "cannot look for the supervisor program: spoold re-executed");
                tasks::exec::Supervisor::command(vec!["/proc/self/exe".into()], records_dir.clone())
            }
        }
    };

    let stop = CancellationToken::new();
    let (bound, server) = match &config.listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Listen {
                    addr: addr.to_string(),
                    source,
                })?;
            let local = listener.local_addr().map_err(|source| StartError::Listen {
                addr: addr.to_string(),
                source,
            })?;
            let serve = api::server::serve(listener, router, config.connections, stop.clone());
            (Bound::Tcp(local), tokio::spawn(serve))
        }
        Listen::Unix(path) => {
            let listener = unix_socket::bind(path).map_err(StartError::Socket)?;
            let serve = api::server::serve(listener, router, config.connections, stop.clone());
            (Bound::Unix(path.clone()), tokio::spawn(serve))
        }
    };
    // `config.db` is absolute (or a URL without its password): a daemon started elsewhere
    // shows at once which queue it has.
    info!(addr = %bound, db = %config.db, "listening");
    if let Bound::Tcp(addr) = &bound {
        info!(url = %dashboard_url(*addr), "dashboard");
    }

    let deliverer_metrics = Arc::clone(&metrics);
    let unknown_entered = Arc::new(tokio::sync::Notify::new());
    let reconciler = reconcile::Reconciler {
        rules: Arc::clone(&rules),
        store: store.clone(),
        outbound: outbound.clone(),
        metrics: Arc::clone(&metrics),
        base: config.reconcile_base,
        request_timeout: config.request_timeout,
        wake: Arc::clone(&unknown_entered),
    };
    let deliverer = Arc::new(deliver::Deliverer {
        store: store.clone(),
        outbound,
        rules: Arc::clone(&rules),
        limiter: Arc::new(deliveries::targets::RateLimiter::new(Arc::clone(&rules))),
        metrics,
        backoff: retry::Backoff {
            base: config.retry_base,
            cap: config.retry_cap,
        },
        request_timeout: config.request_timeout,
        lease: config.lease,
        live: deliver::LiveClaims::default(),
        activity: Arc::clone(&activity),
        stop: stop.clone(),
        reconcile_base: config.reconcile_base,
        unknown_entered,
        journal: journal.clone(),
        gone,
    });
    let scheduler = scheduler::Scheduler {
        store: store.clone(),
        deliverer,
        wake: store.work_available(),
        concurrency: config.concurrency,
        per_target: config.per_target_concurrency,
        breaker: scheduler::Breaker {
            failures: config.breaker_failures,
            window: config.breaker_window,
            probe_cap: config.breaker_probe_cap,
        },
        control,
        lease: config.lease,
        pause_backoff: retry::Backoff {
            base: config.retry_base,
            cap: config.retry_cap,
        },
    };
    let attempts = TaskTracker::new();
    let interrupt = CancellationToken::new();
    let scheduler_task =
        tokio::spawn(scheduler.run(stop.clone(), interrupt.clone(), attempts.clone()));

    let reconciler_task = tokio::spawn(reconciler.run(stop.clone()));
    let task_attempts = TaskTracker::new();
    let runner = Arc::new(tasks::runner::Runner {
        store: store.clone(),
        types: Arc::clone(&declared),
        concurrency: config.task_concurrency,
        executor,
        lease: config.task_lease,
        results_dir,
        output_dir,
        api_url: match &bound {
            Bound::Tcp(addr) => format!("http://{addr}"),
            Bound::Unix(path) => format!("unix://{}", path.display()),
        },
        running: Arc::clone(&running_tasks),
        stop: stop.clone(),
        interrupt: interrupt.clone(),
        metrics: Arc::clone(&deliverer_metrics),
        cgroup: task_cgroup,
        spoolctl: spoolctl_next_to_daemon(),
        supervisor,
        journal,
    });
    // In the background: the orphaned tasks keep their locks and slots until what is left of
    // their attempts is gone, which may take a type's kill_grace.
    runner.adopt(orphans, tokio::time::Instant::now(), &task_attempts);
    let runner_task = tokio::spawn(Arc::clone(&runner).run(task_attempts.clone()));
    let failure = schema_watch::Failure::default();
    let schema_task = tokio::spawn(schema_watch::run(
        store.clone(),
        Arc::clone(&failure),
        stop.clone(),
    ));
    let maildrop_task = state
        .maildrop
        .clone()
        .map(|m| tokio::spawn(api::maildrop::run(m, Arc::clone(&state), stop.clone())));
    let retention_task = tokio::spawn(retention::run(
        store.clone(),
        config.terminal_retention,
        Arc::clone(&deliverer_metrics),
        stop.clone(),
    ));

    let task_stop = stop.clone();
    let task_bound = bound.clone();
    let reload_store = store.clone();
    let shutdown_timeout = config.shutdown_timeout;
    let task = tokio::spawn(async move {
        task_stop.cancelled().await;
        info!("shutting down: no new requests or claims");
        let _ = scheduler_task.await;
        let _ = retention_task.await;
        if let Some(task) = maildrop_task {
            let _ = task.await;
        }
        let _ = schema_task.await;
        let _ = reconciler_task.await;
        let _ = runner_task.await;
        attempts.close();
        task_attempts.close();
        if !attempts.is_empty() {
            info!(
                in_flight = attempts.len(),
                wait_at_most_ms = shutdown_timeout.as_millis() as u64,
                "waiting for in-flight attempts to finish"
            );
        }
        let all_attempts = async {
            tokio::join!(attempts.wait(), task_attempts.wait());
        };
        if tokio::time::timeout(shutdown_timeout, all_attempts)
            .await
            .is_err()
        {
            warn!(
                in_flight = attempts.len(),
                "shutdown timeout reached: interrupting attempts (they are not charged)"
            );
            interrupt.cancel();
            attempts.wait().await;
            // Attempts end within their kill grace; one whose processes survive SIGKILL
            // (uninterruptible sleep) is left `running` in the store, to be taken over — and
            // its locks kept — until what is left of it is gone.
            if tokio::time::timeout(STOP_ATTEMPTS_AT_MOST, task_attempts.wait())
                .await
                .is_err()
            {
                error!(
                    running = task_attempts.len(),
                    "task attempts could not be ended; stopping without them (their tasks stay \
                     running until a daemon finds them gone)"
                );
            }
        }
        match tokio::time::timeout(shutdown_timeout, server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "API server task failed"),
            Err(_) => warn!("API connections still open at shutdown; closing them"),
        }
        if let Bound::Unix(path) = &task_bound {
            let _ = std::fs::remove_file(path);
        }
        drop(store);
        info!("stopped");
    });
    Ok(Running {
        bound,
        stop,
        task,
        failure,
        config,
        declared,
        rules,
        store: reload_store,
    })
}

/// Warn of every file a declared task type names that is not there; with `--strict`, refuse
/// instead (the start, or the reload).
fn check_task_files(types: &tasks::TaskTypes, strict: bool) -> Result<(), StartError> {
    let problems = types.missing_files();
    if strict && !problems.is_empty() {
        return Err(StartError::TaskFiles(problems.join("; ")));
    }
    for problem in problems {
        warn!("{problem}: the type's tasks will fail until it is there");
    }
    Ok(())
}

/// This daemon run as the executor of task attempts: `host:pid:run` (unique per run, even when
/// a restart gets the same pid, as PID 1 of a container does) and where its processes can be
/// seen from.
fn executor(store: &Store, data_dir: &std::path::Path) -> spool_store::tasks::Executor {
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let mut run = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut run, rustix::rand::GetRandomFlags::empty());
    // Mixed with the clock, in case the kernel gave nothing.
    let stamp = store.now_ms() as u32 ^ u32::from_le_bytes(run);
    spool_store::tasks::Executor {
        id: format!("{host}:{}:{stamp:08x}", std::process::id()),
        host: tasks::processes::host_identity(data_dir),
    }
}

/// Types that run as another user need the privilege to switch to it.
fn check_task_users(types: &tasks::TaskTypes) -> Result<(), StartError> {
    let Some(kind) = types.iter().find(|t| t.run_as.is_some()) else {
        return Ok(());
    };
    if rustix::process::geteuid().is_root() || can_switch_users() {
        return Ok(());
    }
    Err(StartError::TaskUser(format!(
        "[tasks.{}] user = {:?}: running tasks as another user needs root (or the CAP_SETUID \
         and CAP_SETGID capabilities)",
        kind.name,
        kind.run_as.as_ref().map_or("", |u| u.name.as_str())
    )))
}

/// Whether this process has CAP_SETUID and CAP_SETGID (`CapEff` of `/proc/self/status`).
fn can_switch_users() -> bool {
    const CAP_SETGID: u64 = 1 << 6;
    const CAP_SETUID: u64 = 1 << 7;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (CAP_SETGID | CAP_SETUID) == CAP_SETGID | CAP_SETUID)
}

/// With types that run as other users, the result files' directory lets them through (0711: no
/// listing; each file is 0600 and belongs to its attempt's user), and every directory above it
/// must too: otherwise the daemon refuses to start, naming the one in the way.
fn open_results_to_task_users(
    results: &std::path::Path,
    types: &tasks::TaskTypes,
) -> Result<(), StartError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let users: Vec<&tasks::types::RunAs> = types.iter().filter_map(|t| t.run_as.as_ref()).collect();
    if users.is_empty() {
        return Ok(());
    }
    std::fs::set_permissions(results, std::fs::Permissions::from_mode(0o711)).map_err(|e| {
        StartError::TaskUser(format!(
            "cannot open {} to task users: {e}",
            results.display()
        ))
    })?;
    let kind = |user: &tasks::types::RunAs| {
        types
            .iter()
            .find(|t| t.run_as.as_ref() == Some(user))
            .map_or_else(String::new, |t| t.name.clone())
    };
    for dir in results.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        for user in &users {
            let through = meta.mode() & 0o001 != 0
                || (meta.uid() == user.uid && meta.mode() & 0o100 != 0)
                || (meta.gid() == user.gid && meta.mode() & 0o010 != 0)
                || user.uid == 0;
            if !through {
                return Err(StartError::TaskUser(format!(
                    "[tasks.{kind}] user = {name:?}: that user cannot reach its result file, \
                     since {dir} does not let it through (chmod o+x {dir}, or use a --data-dir \
                     it can reach)",
                    kind = kind(user),
                    name = user.name,
                    dir = dir.display()
                )));
            }
        }
    }
    Ok(())
}

/// What supervises task attempts: the command `SPOOLD_TASK_SUPERVISOR` names
/// (`Config::task_supervisor`), else `spoold-attempt` installed beside this daemon, else the
/// daemon's own binary re-executed (the same code, costlier to start: the reason is logged).
fn supervisor(
    named: Option<Vec<std::path::PathBuf>>,
    records: std::path::PathBuf,
) -> tasks::exec::Supervisor {
    use tasks::exec::Supervisor;
    if let Some(command) = named {
        info!(command = ?command, "task attempts are supervised by SPOOLD_TASK_SUPERVISOR");
        return Supervisor::command(command, records);
    }
    let own = || Supervisor::command(vec!["/proc/self/exe".into()], records.clone());
    match Supervisor::beside_daemon(records.clone()) {
        Ok(Some(found)) => {
            info!(
                program = tasks::supervision::PROGRAM,
                "task attempts are supervised by the {} beside this spoold",
                tasks::supervision::PROGRAM
            );
            found
        }
        Ok(None) => {
            info!(
                program = tasks::supervision::PROGRAM,
                "task attempts are supervised by this spoold re-executed: no {} beside it \
                 (the same supervisor, started at several times the CPU)",
                tasks::supervision::PROGRAM
            );
            own()
        }
        Err(why) => {
            warn!(program = tasks::supervision::PROGRAM, %why,
                  "task attempts are supervised by this spoold re-executed: the {} beside it \
                   cannot be used", tasks::supervision::PROGRAM);
            own()
        }
    }
}

/// The `spoolctl` installed beside this daemon's executable (the same build, or the same
/// package), for task scripts.
fn spoolctl_next_to_daemon() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let ctl = exe.parent()?.join("spoolctl");
    ctl.is_file().then_some(ctl)
}

/// Remove the supervisors' record files in `dir` that no orphan in `orphans` waits for and
/// whose lock is free (best effort).
fn remove_unlocked_records(dir: &std::path::Path, orphans: &[spool_store::tasks::Orphaned]) {
    let waited: std::collections::HashSet<String> = orphans
        .iter()
        .map(|o| tasks::exec::attempt_tag(&o.id, o.attempt))
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !waited.contains(&name) && tasks::supervision::read_record(&entry.path()).is_ok() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

async fn open_store(config: &Config) -> Result<Store, StartError> {
    match &config.db {
        Database::Sqlite(path) => {
            if config.db_notify == crate::config::DbNotify::Off {
                // One host, woken in process: there is nothing to listen to or poll for.
                warn!("--db-notify off applies to PostgreSQL only; with SQLite it changes nothing");
            }
            let sqlite = SqliteConfig {
                path: path.clone(),
                max_db_bytes: config.max_db_bytes,
                readers: 4,
                clock: config.clock.clone(),
            };
            let opened = tokio::task::spawn_blocking(move || SqliteStore::open(&sqlite))
                .await
                .map_err(|e| StoreError::Database(format!("store open task failed: {e}")))??;
            Ok(Store::Sqlite(opened))
        }
        Database::Postgres(url) => {
            let mut pg = PgConfig::new(url.clone());
            pg.max_db_bytes = config.max_db_bytes;
            pg.connections = config.db_connections;
            pg.notify = config.db_notify == crate::config::DbNotify::On;
            pg.poll_interval = config.db_poll_interval;
            pg.clock = config.clock.clone();
            // A host paused inside a transaction must not hold its row locks (the claim gate, a
            // task's row) until the leases it blocks run out: its session ends well before.
            pg.stalled_transaction = (config.lease.min(config.task_lease) / 3)
                .clamp(Duration::from_secs(1), Duration::from_secs(10));
            pg.start_timeout = config.db_start_timeout;
            // The newest timeline of the cluster this host has used, so that a primary left
            // behind by a failover is refused across restarts too.
            if let Err(e) = create_private_dir(&config.data_dir) {
                warn!(error = %e, dir = %config.data_dir.display(), "cannot create the data directory");
            }
            pg.fence_file = Some(config.data_dir.join(POSTGRES_FENCE_FILE));
            Ok(Store::Postgres(PgStore::open(&pg).await?))
        }
    }
}

/// Take back what a previous process of this daemon left claimed; returns the running tasks it
/// left, taken over by `executor` to end what is left of their attempts.
///
/// With SQLite this process holds the file's lock, so whoever claimed anything is dead: its
/// deliveries are sent again now rather than after their leases (at-least-once), at-most-once
/// requests that may have left become `unknown` (a restart never resends them), and its
/// running tasks are taken over (and, with a type no longer declared, its pending tasks go to
/// review). With PostgreSQL other hosts' claims are alive and indistinguishable from a dead
/// one's: what a dead process held is taken back by whichever host sees its lease run out —
/// this one included, starting now.
/// The maildrop at `dir`, made if it is not there; `None` for `--maildrop off`, or when it
/// cannot be made (said in the log: sends while the daemon is down then fail as before).
fn prepare_maildrop(dir: Option<&std::path::Path>) -> Option<maildrop::Maildrop> {
    let found = maildrop::Maildrop {
        dir: dir?.to_path_buf(),
    };
    match found.prepare() {
        Ok(()) => {
            info!(dir = %found.dir.display(), "maildrop: spoolctl send drops requests here while the daemon cannot be reached");
            Some(found)
        }
        Err(e) => {
            error!(dir = %found.dir.display(), error = %e,
                   "cannot make the maildrop: nothing is picked up (--maildrop names another \
                    directory, or off)");
            None
        }
    }
}

/// The URLs that parked deliveries wait for (they answered 410 Gone before this start, or to
/// another host): gone until an operator resumes them. A store that cannot say is only logged.
async fn learn_gone_urls(
    store: &Store,
    gone: &deliveries::gone::GoneUrls,
    metrics: &metrics::Metrics,
) {
    match store.parked_urls(10_000).await {
        Ok(urls) => {
            let now = store.now_ms();
            for url in urls {
                if let Some(origin) = submission::origin_filter(&url) {
                    gone.found(&url, &origin, now);
                }
            }
            metrics.observe_gone(gone.by_origin());
        }
        Err(e) => warn!(error = %e, "could not read which URLs answered 410 Gone before"),
    }
}

async fn recover(
    store: &Store,
    config: &Config,
    executor: &spool_store::tasks::Executor,
) -> Result<Vec<spool_store::tasks::Orphaned>, StoreError> {
    let lease_ms = config.task_lease.as_millis() as i64;
    if matches!(config.db, Database::Postgres(_)) {
        // Earlier runs of this daemon on this host that are certainly gone (their process no
        // longer exists) need not wait for their leases.
        let dead: Vec<String> = store
            .task_executors_on(executor.host.clone(), executor.id.clone())
            .await?
            .into_iter()
            .filter(|id| tasks::processes::executor_gone(id))
            .collect();
        let mut orphans = if dead.is_empty() {
            Vec::new()
        } else {
            store
                .take_over_tasks_from(dead, executor.clone(), lease_ms)
                .await?
        };
        orphans.extend(store.expire_task_leases(executor.clone(), lease_ms).await?);
        return Ok(orphans);
    }
    let reclaimed = store
        .recover(config.reconcile_base.as_millis() as i64)
        .await?;
    if reclaimed.total() > 0 {
        info!(
            interrupted = reclaimed.interrupted,
            released = reclaimed.released,
            unknown = reclaimed.unknown,
            "reclaimed in-flight deliveries left by a previous process"
        );
    }
    let reviewed = store
        .review_undeclared_tasks(config.task_types.names())
        .await?;
    if !reviewed.is_empty() {
        warn!(
            tasks = reviewed.len(),
            "pending tasks of types no longer declared went to manual_review"
        );
    }
    store.recover_tasks(executor.clone(), lease_ms).await
}
