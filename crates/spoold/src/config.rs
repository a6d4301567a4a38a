//! Command-line flags and the validated [`Config`] the daemon runs with. Flag names follow
//! spoold v0.1.0 where it has one (`-listen` and `--listen` both work), so existing service
//! files keep working.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use spool_proto::units::{parse_duration, parse_size};

use crate::deliveries::outbound::Cidr;
use crate::deliveries::targets::TargetRules;
use crate::tasks::{TaskTypes, TypeSpec};

/// spoold: a durable outbound HTTP spool.
///
/// Accepts HTTP requests to deliver, makes them durable before acknowledging, and delivers them
/// at least once with bounded retries, across crashes and restarts.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "spoold",
    version,
    about,
    long_about = None,
    after_help = "Logging: SPOOLD_LOG sets the level (default info; e.g. SPOOLD_LOG=spoold=debug).\n\
        spoold v0.1.0's flags work too: single-dash spellings (-listen, -workers=4) and the \
        aliases --workers, --per-target-workers, --max-journal-bytes."
)]
pub struct Args {
    /// Configuration file (TOML): declared task types (`[tasks.NAME]`) and any flag as a key
    /// (`listen = "127.0.0.1:8080"`); a flag given on the command line or in its environment
    /// variable wins over the file.
    #[arg(long, env = "SPOOLD_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// Task attempts running at once, over all task types.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub task_concurrency: u32,

    /// How long a running task attempt is owned without a heartbeat; the daemon renews it every
    /// third of this. A task whose lease lapsed under another executor becomes `interrupted`.
    #[arg(long, default_value = "30s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub task_lease: Duration,

    /// Put each task attempt in a cgroup of its own below this cgroup v2 directory and end it
    /// with cgroup.kill; `auto`: the daemon's own cgroup when it is delegated (writable, not
    /// the root); `off`: process groups and tags only.
    #[arg(long, default_value = "auto", value_name = "DIR|auto|off")]
    pub task_cgroup: crate::tasks::cgroup::CgroupChoice,

    /// TCP address of the control API (:PORT and localhost:PORT are on loopback).
    #[arg(
        long,
        env = "SPOOLD_LISTEN",
        default_value = "127.0.0.1:8080",
        value_name = "ADDR"
    )]
    pub listen: String,

    /// Serve the control API on this unix socket (absolute path) instead of TCP.
    #[arg(long, value_name = "PATH")]
    pub unix_socket: Option<PathBuf>,

    /// A connection to the API must deliver a request's whole head within this long of being
    /// opened, and of its last response (an idle keep-alive connection is closed after it too).
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub header_read_timeout: Duration,

    /// A request's body must arrive in full within this long of its head; a body that trickles
    /// in slower is answered 408 and its connection closed.
    #[arg(long, default_value = "60s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub body_read_timeout: Duration,

    /// Connections to the API open at once; beyond it new ones wait to be accepted until one
    /// closes.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    pub max_connections: usize,

    /// The store: a SQLite file (a path or sqlite:PATH; created with its directory if missing),
    /// or a PostgreSQL database shared by several hosts (postgres://user@host/db).
    #[arg(
        long,
        env = "SPOOLD_DB",
        default_value = "data/spoold.db",
        value_name = "PATH|URL"
    )]
    pub db: PathBuf,

    /// Where task results and output logs are kept. Default: the SQLite file's directory; with
    /// PostgreSQL, ./data.
    #[arg(long, env = "SPOOLD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// Where `spoolctl send` drops requests while the daemon cannot be reached, picked up from
    /// here at start and while the daemon runs; `off`: none is picked up. Default: `maildrop`
    /// in the data directory.
    #[arg(long, env = "SPOOLD_MAILDROP", value_name = "DIR|off")]
    pub maildrop: Option<PathBuf>,

    /// Refuse to start (or to reload) when a declared task type's program, working_dir or
    /// secret file is not there; without it, each is a warning.
    #[arg(long)]
    pub strict: bool,

    /// Check the flags and the configuration file (task types, target rules, the secret, CA
    /// and certificate files they name) as a start would, print a summary and exit: 0 when
    /// the daemon would start with them, 2 when not. Opens no database, listens nowhere.
    #[arg(long)]
    pub check_config: bool,

    /// Print the configuration in effect — flags, environment, the configuration file and
    /// defaults combined — as a configuration file would say it (secrets masked), and exit:
    /// 0, or 2 when it does not load. Opens no database, listens nowhere.
    #[arg(long, conflicts_with = "check_config")]
    pub print_config: bool,

    /// Print the manual page (roff) to stdout and exit: `spoold --man | man -l -`.
    #[arg(long)]
    pub man: bool,

    /// PostgreSQL: connections this host opens to the database in all (at least 5). The default
    /// lets ten hosts share a server at PostgreSQL's default max_connections (100).
    #[arg(
        long,
        env = "SPOOLD_DB_CONNECTIONS",
        default_value_t = spool_store::postgres::DEFAULT_CONNECTIONS,
        value_name = "N"
    )]
    pub db_connections: usize,

    /// PostgreSQL: `on`, hosts tell each other of new work with LISTEN/NOTIFY; `off`, no LISTEN
    /// or NOTIFY is ever sent (for PostgreSQL-wire databases without them) and each host finds
    /// other hosts' work by polling (--db-poll-interval). No effect with SQLite.
    #[arg(long, value_enum, default_value_t = DbNotify::On, value_name = "on|off")]
    pub db_notify: DbNotify,

    /// PostgreSQL: how often each host looks for work other hosts made due without telling it
    /// (at least 10ms) [default: 5s; 1s with --db-notify off]
    #[arg(long, value_parser = parse_duration_arg, value_name = "DURATION")]
    pub db_poll_interval: Option<Duration>,

    /// PostgreSQL: how long each start-up step (connecting, reading the server's settings,
    /// migrating the schema, recovering) may wait before the start fails, saying what it waits
    /// on (a synchronous standby that is not there, another host's migration, a lock).
    #[arg(long, default_value = "60s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub db_start_timeout: Duration,

    /// Refuse new deliveries (507 journal_full) once the database is this large; 0 = no limit.
    #[arg(long, alias = "max-journal-bytes", default_value = "1GiB", value_parser = parse_size_arg, value_name = "SIZE")]
    pub max_db_bytes: u64,

    /// Requests in flight at once, over all targets.
    #[arg(long, alias = "workers", default_value_t = 64, value_name = "N")]
    pub concurrency: u32,

    /// Requests in flight at once to one target (`scheme://host:port`) [default: 8, or
    /// --concurrency if that is smaller]
    #[arg(long, alias = "per-target-workers", value_name = "N")]
    pub per_target_concurrency: Option<u32>,

    /// 5xx answers or timeouts in a row from one target that open its breaker: its deliveries
    /// wait (uncharged) while probes, one request at a time, spaced like retries and further
    /// apart after each failed one, find out whether it is back; 0 never
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub breaker_failures: u32,

    /// Errors count as in a row only within this long of the first of them
    #[arg(long, default_value = "1m", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub breaker_window: Duration,

    /// The longest wait between two probes of a paused target (its breaker open, or refusing
    /// connections): the waits double from --retry-base after each failed probe, up to this, so
    /// a target that is back is noticed within it however long it was down
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub breaker_probe_cap: Duration,

    /// Time limit of one attempt, from connecting to reading the response's headers and the
    /// first 4 KiB of its body, every redirect hop included.
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub request_timeout: Duration,

    /// How long a claimed attempt is owned before another claim may take it over (attempts still
    /// running are renewed); at least twice --request-timeout and 2s longer.
    #[arg(long, default_value = "30s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub lease: Duration,

    /// On SIGTERM/SIGINT, how long in-flight attempts may finish before they are interrupted.
    #[arg(long, default_value = "10s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub shutdown_timeout: Duration,

    /// First retry delay; doubles per attempt.
    #[arg(long, default_value = "1s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub retry_base: Duration,

    /// Longest retry delay.
    #[arg(long, default_value = "1h", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub retry_cap: Duration,

    /// At most once: the first check of an `unknown` delivery with its target comes this long
    /// after it became unknown; each next one twice as long after the last, at most 5m.
    #[arg(long, default_value = "5s", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub reconcile_base: Duration,

    /// A delivery created without maxAttempts and without expiresAt is retried (up to 100
    /// attempts) for this long after it is first due, then fails as expired; 0 = no window
    /// (then it gets 8 attempts, as in spoold v0.1.0).
    #[arg(long, default_value = "24h", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub retry_window: Duration,

    /// Remove finished deliveries (and their attempts and idempotency keys) this long after
    /// they finished; 0 keeps them forever.
    #[arg(long, default_value = "168h", value_parser = parse_duration_arg, value_name = "DURATION")]
    pub terminal_retention: Duration,

    /// Allow targets on loopback, private and other internal addresses (development only).
    #[arg(long)]
    pub allow_private_targets: bool,

    /// Allow targets in this network although the default policy blocks it, e.g. an internal
    /// callback range (repeatable): 10.20.0.0/16, fd00:1::/64, 192.168.1.7
    #[arg(long = "allow-target", value_name = "CIDR", value_parser = parse_cidr_arg)]
    pub allow_targets: Vec<Cidr>,

    /// Follow up to N redirects per attempt, applying the address policy to every hop and
    /// sending none twice (`redirect_loop`); 0 means a 3xx answer ends the attempt
    /// (`redirect_not_followed`: failed, or unknown at most once).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_redirects: u32,

    /// File holding the bearer token every API request except /healthz and /readyz must carry
    /// (at least 32 bytes; not world-readable). Required to listen on a non-loopback address.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Log format on stderr: `auto` is readable text on a terminal (coloured unless `NO_COLOR`
    /// is set) and JSON lines anywhere else (a pipe, a file, the journal).
    #[arg(long, value_enum, default_value_t = LogFormat::Auto, env = "SPOOLD_LOG_FORMAT")]
    pub log_format: LogFormat,
}

/// `--db-notify`: how PostgreSQL hosts learn of each other's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DbNotify {
    /// LISTEN/NOTIFY, with a slow poll as the safety net.
    On,
    /// Polling alone: no LISTEN, no NOTIFY.
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Text when stderr is a terminal, JSON otherwise.
    Auto,
    Json,
    Text,
}

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    parse_duration(s).map_err(|e| e.to_string())
}

fn parse_cidr_arg(s: &str) -> Result<Cidr, String> {
    s.parse()
}

fn parse_size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Where the control API listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// spoold(1) as `spoold --man` prints it: `docs/man/spoold.1` as committed, built in. A test
/// holds the file to [`man_page`]; printed that way, the generator stays out of the optimised
/// daemon.
pub const MAN_PAGE: &str = include_str!("../../../docs/man/spoold.1");

/// spoold(1): the manual page (roff), generated from the flags' definitions.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    use clap::CommandFactory as _;
    let mut page = Vec::new();
    clap_mangen::Man::new(Args::command()).render(&mut page)?;
    Ok(page)
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    /// `--header-read-timeout` and `--max-connections`.
    pub connections: ConnectionLimits,
    pub db: Database,
    /// Task results and output logs (absolute).
    pub data_dir: PathBuf,
    /// The maildrop picked up (absolute); `None`: `--maildrop off`.
    pub maildrop: Option<PathBuf>,
    pub max_db_bytes: u64,
    pub db_connections: usize,
    /// `--db-notify` (PostgreSQL only).
    pub db_notify: DbNotify,
    /// `--db-poll-interval`, or its default for `db_notify` (PostgreSQL only).
    pub db_poll_interval: Duration,
    /// `--db-start-timeout` (PostgreSQL only).
    pub db_start_timeout: Duration,
    /// `--strict`: missing task files refuse the start or reload.
    pub strict: bool,
    pub concurrency: u32,
    pub per_target_concurrency: u32,
    pub request_timeout: Duration,
    pub lease: Duration,
    pub shutdown_timeout: Duration,
    pub retry_base: Duration,
    pub retry_cap: Duration,
    pub reconcile_base: Duration,
    /// See [`Args::retry_window`]; `None` for 0.
    pub retry_window: Option<Duration>,
    pub terminal_retention: Duration,
    pub allow_private_targets: bool,
    pub allow_targets: Vec<Cidr>,
    pub max_redirects: u32,
    pub breaker_failures: u32,
    pub breaker_window: Duration,
    /// `--breaker-probe-cap`.
    pub breaker_probe_cap: Duration,
    pub auth_token: Option<AuthToken>,
    /// The store's clock: the host's wall clock (no flag). Tests shift it to step time.
    pub clock: spool_store::Clock,
    /// The declared task types (`[tasks.*]` of `--config`).
    pub task_types: std::sync::Arc<TaskTypes>,
    /// `[[targets]]` rules and the `[secrets]` they sign with (`--config`).
    pub target_rules: std::sync::Arc<TargetRules>,
    pub task_concurrency: u32,
    pub task_lease: Duration,
    pub task_cgroup: crate::tasks::cgroup::CgroupChoice,
    /// The command that supervises each task attempt (a program and the arguments before the
    /// supervisor's own). `None`: the `spoold-attempt` beside the daemon, else `/proc/self/exe`
    /// (`tasks::exec::Supervisor::beside_daemon`); no flag, but the environment variable
    /// `SPOOLD_TASK_SUPERVISOR` (words split at white space) names another: a `spoold` run by an
    /// emulator without binfmt registration, as in `qemu-aarch64-static ./spoold`, must name
    /// both (`/proc/self/exe` is the emulator there). A program that embeds the daemon (the
    /// tests) names the `spoold` binary here.
    pub task_supervisor: Option<Vec<PathBuf>>,
    /// `--log-format` (the binary sets logging up from it; kept to be printed).
    pub log_format: LogFormat,
}

impl Config {
    /// The configuration in effect, as lines of a configuration file (the keys `--config`
    /// takes), with what the file alone declares (task types, target rules, secrets) named in
    /// comments. Secrets are masked: the token is said to be set, keys are not shown, a
    /// PostgreSQL URL loses its password.
    pub fn print(&self) -> String {
        use spool_proto::units::format_duration as d;
        let allow: Vec<String> = self
            .allow_targets
            .iter()
            .map(|c| format!("{:?}", c.to_string()))
            .collect();
        let cgroup = match &self.task_cgroup {
            crate::tasks::cgroup::CgroupChoice::Auto => "auto".to_owned(),
            crate::tasks::cgroup::CgroupChoice::Off => "off".to_owned(),
            crate::tasks::cgroup::CgroupChoice::Path(p) => p.display().to_string(),
        };
        let mut out = String::from(
            "# spoold's configuration in effect: flags, environment, configuration file and \
             defaults combined (secrets masked)\n",
        );
        let mut line = |key: &str, value: String| out.push_str(&format!("{key} = {value}\n"));
        match &self.listen {
            Listen::Tcp(addr) => line("listen", format!("{:?}", addr.to_string())),
            Listen::Unix(path) => line("unix_socket", format!("{:?}", path.display().to_string())),
        }
        if let Some(token) = &self.auth_token {
            line(
                "auth_token_file",
                format!("{:?}", token.file().display().to_string()),
            );
        }
        line(
            "header_read_timeout",
            format!("{:?}", d(self.connections.header_read_timeout)),
        );
        line(
            "body_read_timeout",
            format!("{:?}", d(self.connections.body_read_timeout)),
        );
        line(
            "max_connections",
            self.connections.max_connections.to_string(),
        );
        if let Some(format) = self.log_format.to_possible_value() {
            line("log_format", format!("{:?}", format.get_name()));
        }
        line("db", format!("{:?}", self.db.to_string()));
        line(
            "data_dir",
            format!("{:?}", self.data_dir.display().to_string()),
        );
        line(
            "maildrop",
            format!(
                "{:?}",
                self.maildrop
                    .as_ref()
                    .map_or("off".to_owned(), |d| d.display().to_string())
            ),
        );
        line("max_db_bytes", self.max_db_bytes.to_string());
        line("db_connections", self.db_connections.to_string());
        if let Some(notify) = self.db_notify.to_possible_value() {
            line("db_notify", format!("{:?}", notify.get_name()));
        }
        line(
            "db_poll_interval",
            format!("{:?}", d(self.db_poll_interval)),
        );
        line(
            "db_start_timeout",
            format!("{:?}", d(self.db_start_timeout)),
        );
        line("strict", self.strict.to_string());
        line("concurrency", self.concurrency.to_string());
        line(
            "per_target_concurrency",
            self.per_target_concurrency.to_string(),
        );
        line("request_timeout", format!("{:?}", d(self.request_timeout)));
        line("lease", format!("{:?}", d(self.lease)));
        line(
            "shutdown_timeout",
            format!("{:?}", d(self.shutdown_timeout)),
        );
        line("retry_base", format!("{:?}", d(self.retry_base)));
        line("retry_cap", format!("{:?}", d(self.retry_cap)));
        line("reconcile_base", format!("{:?}", d(self.reconcile_base)));
        line(
            "retry_window",
            format!("{:?}", self.retry_window.map_or_else(|| "0".to_owned(), d)),
        );
        line(
            "terminal_retention",
            format!("{:?}", d(self.terminal_retention)),
        );
        line(
            "allow_private_targets",
            self.allow_private_targets.to_string(),
        );
        line("allow_target", format!("[{}]", allow.join(", ")));
        line("max_redirects", self.max_redirects.to_string());
        line("breaker_failures", self.breaker_failures.to_string());
        line("breaker_window", format!("{:?}", d(self.breaker_window)));
        line(
            "breaker_probe_cap",
            format!("{:?}", d(self.breaker_probe_cap)),
        );
        line("task_concurrency", self.task_concurrency.to_string());
        line("task_lease", format!("{:?}", d(self.task_lease)));
        line("task_cgroup", format!("{cgroup:?}"));
        out.push_str(&format!(
            "# auth token: {}\n# task types: {}\n# target rules: {}; secrets: {}\n",
            if self.auth_token.is_some() {
                "set (read from auth_token_file; not shown)"
            } else {
                "none (the API asks for no token)"
            },
            match self.task_types.names() {
                names if names.is_empty() => "none".to_owned(),
                names => names.join(", "),
            },
            self.target_rules.len(),
            match self.target_rules.secret_names().collect::<Vec<_>>() {
                names if names.is_empty() => "none".to_owned(),
                names => format!("{} (keys not shown)", names.join(", ")),
            },
        ));
        out
    }

    /// The settings a running daemon keeps as it started with them — all but the declared task
    /// types — that differ in `other`, by their flag names: a reload (SIGHUP) names them and
    /// keeps them; they take effect at the next start.
    pub fn fixed_changes(&self, other: &Config) -> Vec<&'static str> {
        let mut changed = Vec::new();
        macro_rules! compare {
            ($($field:ident => $flag:literal),* $(,)?) => {
                $(
                    if format!("{:?}", self.$field) != format!("{:?}", other.$field) {
                        changed.push($flag);
                    }
                )*
            };
        }
        compare!(
            listen => "--listen",
            db => "--db",
            data_dir => "--data-dir",
            maildrop => "--maildrop",
            max_db_bytes => "--max-db-bytes",
            db_connections => "--db-connections",
            db_notify => "--db-notify",
            db_poll_interval => "--db-poll-interval",
            db_start_timeout => "--db-start-timeout",
            concurrency => "--concurrency",
            per_target_concurrency => "--per-target-concurrency",
            request_timeout => "--request-timeout",
            lease => "--lease",
            shutdown_timeout => "--shutdown-timeout",
            retry_base => "--retry-base",
            retry_cap => "--retry-cap",
            reconcile_base => "--reconcile-base",
            retry_window => "--retry-window",
            terminal_retention => "--terminal-retention",
            allow_private_targets => "--allow-private-targets",
            allow_targets => "--allow-target",
            max_redirects => "--max-redirects",
            breaker_failures => "--breaker-failures",
            breaker_window => "--breaker-window",
            breaker_probe_cap => "--breaker-probe-cap",
            task_concurrency => "--task-concurrency",
            task_lease => "--task-lease",
            task_cgroup => "--task-cgroup",
            log_format => "--log-format",
        );
        if self.connections.header_read_timeout != other.connections.header_read_timeout {
            changed.push("--header-read-timeout");
        }
        if self.connections.body_read_timeout != other.connections.body_read_timeout {
            changed.push("--body-read-timeout");
        }
        if self.connections.max_connections != other.connections.max_connections {
            changed.push("--max-connections");
        }
        // Its `Debug` hides the value.
        let token = |c: &Config| {
            c.auth_token
                .as_ref()
                .map(|t| (t.token.clone(), t.file.clone()))
        };
        if token(self) != token(other) {
            changed.push("--auth-token-file");
        }
        changed
    }
}

/// The API bearer token, and the file it was read from. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct AuthToken {
    token: String,
    file: PathBuf,
}

impl AuthToken {
    /// Shortest token accepted, in bytes.
    pub const MIN_BYTES: usize = 32;

    /// Read and check a token file: not readable by others, at least [`Self::MIN_BYTES`]
    /// bytes once one trailing newline is removed.
    pub fn from_file(path: &Path) -> Result<AuthToken, ConfigError> {
        use std::os::unix::fs::PermissionsExt;
        let fail = |m: String| ConfigError(format!("--auth-token-file {}: {m}", path.display()));
        let meta = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if meta.permissions().mode() & 0o004 != 0 {
            return Err(fail(
                "is readable by every user; chmod o-r (or 600) it".into(),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let token = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text);
        if token.len() < Self::MIN_BYTES {
            return Err(fail(format!(
                "token is {} bytes; at least {} are required",
                token.len(),
                Self::MIN_BYTES
            )));
        }
        Ok(AuthToken {
            token: token.to_owned(),
            file: path.to_owned(),
        })
    }

    pub fn expose(&self) -> &str {
        &self.token
    }

    /// The file the token was read from (`--auth-token-file`).
    pub fn file(&self) -> &Path {
        &self.file
    }
}

impl std::fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthToken([redacted])")
    }
}

/// Requests in flight to one target unless `--per-target-concurrency` says otherwise (or
/// `--concurrency` is smaller).
pub const DEFAULT_PER_TARGET: u32 = 8;

use spool_proto::MAX_CHECK_INTERVAL;

/// Default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// The limits of the API's connections (`api::server` enforces them).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub max_connections: usize,
}

/// The shortest `--db-poll-interval`: a poll is two transactions on every host.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The least a lease must exceed the request timeout by (see `Args::into_config`).
pub const LEASE_SLACK: Duration = Duration::from_secs(2);

/// A flag combination that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

impl Args {
    /// Check the flags against each other and build the [`Config`].
    pub fn into_config(self) -> Result<Config, ConfigError> {
        let err = |m: &str| Err(ConfigError(m.to_owned()));
        let (task_types, target_rules) = load_file(self.config.as_deref())?;
        if self.task_concurrency == 0 {
            return err("--task-concurrency must be at least 1");
        }
        if self.task_lease < Duration::from_secs(3) {
            return err("--task-lease must be at least 3s");
        }
        let listen = match self.unix_socket {
            Some(path) if !path.is_absolute() => {
                return err("--unix-socket must be an absolute path")
            }
            Some(path) => Listen::Unix(path),
            None => Listen::Tcp(listen_addr(&self.listen)?),
        };
        let auth_token = self
            .auth_token_file
            .as_deref()
            .map(AuthToken::from_file)
            .transpose()?;
        if let Listen::Tcp(addr) = &listen {
            if !addr.ip().is_loopback() && auth_token.is_none() {
                return Err(ConfigError(format!(
                    "--listen {addr} is not a loopback address: anyone who can reach it could \
                     make this host send requests; set --auth-token-file (or listen on \
                     127.0.0.1 or a unix socket)"
                )));
            }
        }
        let db = database(&self.db)?;
        let data_dir = match (&self.data_dir, &db) {
            (Some(dir), _) => std::path::absolute(dir)
                .map_err(|e| ConfigError(format!("--data-dir {}: {e}", dir.display())))?,
            (None, Database::Sqlite(path)) => path
                .parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
            (None, Database::Postgres(_)) => {
                std::path::absolute("data").map_err(|e| ConfigError(format!("--data-dir: {e}")))?
            }
        };
        let maildrop = match &self.maildrop {
            Some(dir) if dir.as_os_str() == "off" => None,
            Some(dir) => Some(
                std::path::absolute(dir)
                    .map_err(|e| ConfigError(format!("--maildrop {}: {e}", dir.display())))?,
            ),
            None => Some(data_dir.join("maildrop")),
        };
        if self.concurrency == 0 {
            return err("--concurrency must be at least 1");
        }
        let per_target_concurrency = match self.per_target_concurrency {
            None => DEFAULT_PER_TARGET.min(self.concurrency),
            Some(n) if n == 0 || n > self.concurrency => {
                return Err(ConfigError(format!(
                    "--per-target-concurrency {n} must be between 1 and --concurrency ({})",
                    self.concurrency
                )))
            }
            Some(n) => n,
        };
        if self.request_timeout.is_zero() {
            return err("--request-timeout must be greater than 0");
        }
        let least_lease = (self.request_timeout * 2).max(self.request_timeout + LEASE_SLACK);
        if self.lease < least_lease {
            return Err(ConfigError(format!(
                "--lease ({}) must be at least {} with --request-timeout {}: twice the request \
                 timeout and at least {} more, so that a claim outlasts its request, the commits \
                 around it and the recording of its result",
                spool_proto::units::format_duration(self.lease),
                spool_proto::units::format_duration(least_lease),
                spool_proto::units::format_duration(self.request_timeout),
                spool_proto::units::format_duration(LEASE_SLACK),
            )));
        }
        if self.db_connections < 5 {
            return err("--db-connections must be at least 5");
        }
        let db_poll_interval = match (self.db_poll_interval, self.db_notify) {
            (Some(every), _) if every < MIN_POLL_INTERVAL => {
                return err("--db-poll-interval must be at least 10ms")
            }
            (Some(every), _) => every,
            (None, DbNotify::On) => spool_store::postgres::DEFAULT_POLL_INTERVAL,
            (None, DbNotify::Off) => spool_store::postgres::DEFAULT_POLL_ONLY_INTERVAL,
        };
        if self.db_start_timeout.is_zero() {
            return err("--db-start-timeout must be greater than 0");
        }
        if self.breaker_probe_cap.is_zero() {
            return err("--breaker-probe-cap must be greater than 0");
        }
        if self.shutdown_timeout.is_zero() {
            return err("--shutdown-timeout must be greater than 0");
        }
        if self.retry_base.is_zero() || self.retry_cap < self.retry_base {
            return err("--retry-base must be greater than 0 and at most --retry-cap");
        }
        if self.reconcile_base.is_zero() || self.reconcile_base > MAX_CHECK_INTERVAL {
            return err("--reconcile-base must be greater than 0 and at most 5m");
        }
        if self.header_read_timeout.is_zero() {
            return err("--header-read-timeout must be greater than 0");
        }
        if self.body_read_timeout.is_zero() {
            return err("--body-read-timeout must be greater than 0");
        }
        if self.max_connections == 0 {
            return err("--max-connections must be at least 1");
        }
        Ok(Config {
            listen,
            connections: ConnectionLimits {
                header_read_timeout: self.header_read_timeout,
                body_read_timeout: self.body_read_timeout,
                max_connections: self.max_connections,
            },
            db,
            data_dir,
            maildrop,
            max_db_bytes: self.max_db_bytes,
            db_connections: self.db_connections,
            db_notify: self.db_notify,
            db_poll_interval,
            db_start_timeout: self.db_start_timeout,
            strict: self.strict,
            concurrency: self.concurrency,
            per_target_concurrency,
            request_timeout: self.request_timeout,
            lease: self.lease,
            shutdown_timeout: self.shutdown_timeout,
            retry_base: self.retry_base,
            retry_cap: self.retry_cap,
            reconcile_base: self.reconcile_base,
            retry_window: (!self.retry_window.is_zero()).then_some(self.retry_window),
            terminal_retention: self.terminal_retention,
            allow_private_targets: self.allow_private_targets,
            allow_targets: self.allow_targets,
            max_redirects: self.max_redirects,
            breaker_failures: self.breaker_failures,
            breaker_window: self.breaker_window,
            breaker_probe_cap: self.breaker_probe_cap,
            auth_token,
            clock: spool_store::Clock::system(),
            task_types: std::sync::Arc::new(task_types),
            target_rules: std::sync::Arc::new(target_rules),
            task_concurrency: self.task_concurrency,
            task_lease: self.task_lease,
            task_cgroup: self.task_cgroup,
            task_supervisor: std::env::var_os("SPOOLD_TASK_SUPERVISOR").and_then(|words| {
                let words: Vec<PathBuf> = words
                    .to_string_lossy()
                    .split_whitespace()
                    .map(PathBuf::from)
                    .collect();
                (!words.is_empty()).then_some(words)
            }),
            log_format: self.log_format,
        })
    }
}

/// The store `--db` names.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// A SQLite file (absolute path).
    Sqlite(PathBuf),
    /// A PostgreSQL URL (`postgres://` or `postgresql://`).
    Postgres(String),
}

impl std::fmt::Display for Database {
    /// The path, or the URL without its password: fit for logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Database::Sqlite(path) => write!(f, "{}", path.display()),
            Database::Postgres(url) => f.write_str(&spool_store::postgres::redact_url(url)),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Database({self})")
    }
}

/// The store `--db` names: a PostgreSQL URL, or a SQLite file — a path, or `sqlite:PATH` /
/// `sqlite://PATH`. Any other URL is refused, so that a typo in a scheme cannot quietly create
/// a file called `postgress:`.
fn database(given: &Path) -> Result<Database, ConfigError> {
    let text = given.to_string_lossy();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        return Ok(Database::Postgres(text.into_owned()));
    }
    if let Some(keyword) = libpq_keyword(&text) {
        // Taken as a file name, it would make a SQLite queue nobody else shares.
        return Err(ConfigError(format!(
            "--db looks like a libpq connection string ({keyword}=…), which spoold does not \
             take: give PostgreSQL as a URL, e.g. \
             postgres://user@host1:5432,host2:5432/database?target_session_attrs=read-write"
        )));
    }
    database_path(given).map(Database::Sqlite)
}

/// The first libpq connection keyword `text` sets (`host=a port=5432 …`), if it reads as a
/// keyword/value connection string rather than a file name.
fn libpq_keyword(text: &str) -> Option<&str> {
    const KEYWORDS: &[&str] = &[
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "sslmode",
        "target_session_attrs",
        "application_name",
        "connect_timeout",
        "options",
        "service",
    ];
    text.split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(key, _)| key.trim())
        .find(|key| KEYWORDS.contains(key))
}

/// The SQLite file `--db` names. A relative path is made absolute here, against the working
/// directory: the daemon logs it, and a daemon started from cron or another shell shows at
/// once which queue it has.
fn database_path(given: &Path) -> Result<PathBuf, ConfigError> {
    let text = given.to_string_lossy();
    let path = if let Some(rest) = text.strip_prefix("sqlite://") {
        rest.to_owned()
    } else if let Some(rest) = text.strip_prefix("sqlite:") {
        rest.to_owned()
    } else if text.starts_with("postgres:") || text.starts_with("postgresql:") {
        return Err(ConfigError(
            "--db: a PostgreSQL database is given as a URL: postgres://user@host:port/database"
                .into(),
        ));
    } else if let Some((scheme, _)) = text.split_once("://") {
        return Err(ConfigError(format!(
            "--db: unknown database URL scheme {scheme:?}; give a file path, sqlite:PATH or \
             postgres://…"
        )));
    } else {
        return std::path::absolute(given)
            .map_err(|e| ConfigError(format!("--db {}: {e}", given.display())));
    };
    if path.is_empty() {
        return Err(ConfigError("--db must not be empty".into()));
    }
    database_path(Path::new(&path))
}

/// The configuration file as read: the daemon's settings (any flag, by its long name with `_`
/// or `-`) and the task types.
#[derive(Debug, Default, serde::Deserialize)]
struct FileConfig {
    #[serde(default)]
    tasks: std::collections::BTreeMap<String, TypeSpec>,
    #[serde(default)]
    secrets: std::collections::BTreeMap<String, crate::deliveries::targets::SecretSpec>,
    #[serde(default)]
    targets: Vec<crate::deliveries::targets::TargetSpec>,
    #[serde(flatten)]
    settings: toml::Table,
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        // toml's own form, several lines with a caret under the place: kept as it is.
        let mut message = format!("{}: {}", path.display(), e.to_string().trim_end());
        if let Some(hint) = misplaced_setting(&e, &text) {
            message.push('\n');
            message.push_str(&hint);
        }
        ConfigError(message)
    })
}

/// A daemon setting written after a `[tasks.NAME]` header belongs to that table, where it is
/// an unknown field: say so, naming the table.
fn misplaced_setting(e: &toml::de::Error, text: &str) -> Option<String> {
    use clap::CommandFactory;
    let field = e
        .message()
        .strip_prefix("unknown field `")?
        .split('`')
        .next()?;
    let long = field.replace('_', "-");
    let command = Args::command();
    let known = command
        .get_arguments()
        .any(|a| a.get_long() == Some(long.as_str()));
    let table = e
        .span()
        .and_then(|span| text.get(..span.start))
        .and_then(|before| {
            before
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| l.starts_with('['))
        })
        .unwrap_or("[tasks.NAME]");
    known.then(|| {
        format!(
            "`{field}` is a daemon setting, but keys after the {table} header belong to that \
             table: put daemon settings at the top of the file, before the first table"
        )
    })
}

/// The daemon setting whose name is nearest `long` (a typo), if one is near.
fn closest_setting(command: &clap::Command, long: &str) -> Option<String> {
    let names = command
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|name| *name != "config");
    crate::spelling::nearest(names, long).map(|name| name.replace('-', "_"))
}

/// The task types and the target rules (with their secrets read) declared in `path`.
fn load_file(path: Option<&Path>) -> Result<(TaskTypes, TargetRules), ConfigError> {
    let Some(path) = path else {
        return Ok(Default::default());
    };
    let file = read_file(path)?;
    let types = TaskTypes::from_specs(path, file.tasks).map_err(|e| ConfigError(e.0))?;
    let rules = TargetRules::load(path, file.secrets, file.targets).map_err(ConfigError)?;
    Ok((types, rules))
}

/// Parse the command line, with the settings of `--config` (or `SPOOLD_CONFIG`) filled in
/// where neither a flag nor its environment variable gave a value. Precedence: command line,
/// then environment variable, then the file, then the default.
pub fn parse_args(argv: Vec<String>) -> Result<Args, ArgsError> {
    use clap::parser::ValueSource;
    use clap::CommandFactory;
    let matches = Args::command()
        .try_get_matches_from(&argv)
        .map_err(ArgsError::Usage)?;
    let Some(path) = matches.get_one::<PathBuf>("config").cloned() else {
        return Args::try_parse_from(argv).map_err(ArgsError::Usage);
    };
    let file = read_file(&path).map_err(ArgsError::Config)?;
    let command = Args::command();
    let mut from_file: Vec<String> = Vec::new();
    for (key, value) in &file.settings {
        let long = key.replace('_', "-");
        let arg = command
            .get_arguments()
            .find(|a| a.get_long() == Some(long.as_str()) && long != "config")
            .ok_or_else(|| {
                let suggestion = closest_setting(&command, &long)
                    .map_or_else(String::new, |name| format!("did you mean {name:?}? "));
                ArgsError::Config(ConfigError(format!(
                    "{}: unknown key {key:?} ({suggestion}a daemon setting is a flag's long name, \
                     e.g. listen, db; task types go in [tasks.NAME])",
                    path.display()
                )))
            })?;
        let given = matches!(
            matches.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if given {
            continue;
        }
        let bad = |what: &str| {
            ArgsError::Config(ConfigError(format!("{}: {key}: {what}", path.display())))
        };
        let values: Vec<&toml::Value> = match value {
            toml::Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for value in values {
            match value {
                toml::Value::Boolean(true) => from_file.push(format!("--{long}")),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => from_file.push(format!("--{long}={s}")),
                toml::Value::Integer(n) => from_file.push(format!("--{long}={n}")),
                _ => {
                    return Err(bad(
                        "must be a string, a number, true/false or a list of them",
                    ))
                }
            }
        }
    }
    let mut combined = vec![argv.first().cloned().unwrap_or_else(|| "spoold".into())];
    combined.extend(from_file);
    combined.extend(argv.into_iter().skip(1));
    Args::try_parse_from(combined).map_err(|e| match e.kind() {
        clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
            ArgsError::Usage(e)
        }
        _ => ArgsError::Config(ConfigError(format!(
            "{}: {}",
            path.display(),
            e.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
        ))),
    })
}

/// [`parse_args`] and [`Args::into_config`] in one, every error as text (one line, but for a
/// TOML error, which keeps its caret under the place).
pub fn load(argv: Vec<String>) -> Result<Config, String> {
    match parse_args(argv) {
        Ok(args) => args.into_config().map_err(|e| e.to_string()),
        Err(ArgsError::Usage(e)) => Err(e.to_string()),
        Err(ArgsError::Config(e)) => Err(e.to_string()),
    }
}

/// Why the arguments could not be read.
#[derive(Debug)]
pub enum ArgsError {
    /// clap's own error (usage, `--help`, `--version`): print it its way.
    Usage(clap::Error),
    /// The configuration file is wrong.
    Config(ConfigError),
}

/// `--listen` as people write it: an address (`127.0.0.1:8080`, `[::1]:8080`), `:8080` (on
/// loopback, 127.0.0.1 — never every interface by surprise, as Go would), `localhost:8080`
/// (127.0.0.1, without asking a resolver), or another host name, resolved once at start.
fn listen_addr(text: &str) -> Result<SocketAddr, ConfigError> {
    use std::net::{Ipv4Addr, ToSocketAddrs};
    let bad = || {
        ConfigError(format!(
            "--listen {text:?} is not an address like 127.0.0.1:8080, localhost:8080 or :8080"
        ))
    };
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| ConfigError(format!("--listen {text:?}: cannot resolve {host:?}: {e}")))?
        .next()
        .ok_or_else(bad)
}

/// Accept spoold v0.1.0's Go-style single-dash long flags (`-listen x`, `-workers=4`) by
/// rewriting them to `--listen x` before clap sees them. Single-letter flags (`-h`, `-V`) and
/// values are left alone.
pub fn normalize_go_flags(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut expecting_value = false;
    for (i, arg) in args.into_iter().enumerate() {
        let rewrite = i > 0
            && !expecting_value
            && arg.starts_with('-')
            && !arg.starts_with("--")
            && arg.len() > 2
            && arg[1..2].chars().all(|c| c.is_ascii_alphabetic());
        expecting_value = false;
        if rewrite {
            let name = arg[1..].split('=').next().unwrap_or_default();
            expecting_value = !arg.contains('=') && !BOOLEAN_FLAGS.contains(&name);
            out.push(format!("-{arg}"));
        } else {
            if arg.starts_with("--") && !arg.contains('=') {
                expecting_value = !BOOLEAN_FLAGS.contains(&&arg[2..]);
            }
            out.push(arg);
        }
    }
    out
}

const BOOLEAN_FLAGS: &[&str] = &["allow-private-targets", "version", "help"];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let argv = normalize_go_flags(
            std::iter::once("spoold")
                .chain(args.iter().copied())
                .map(String::from),
        );
        Args::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .into_config()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn listen_takes_what_people_type_and_stays_on_loopback() {
        let tcp = |text: &str| parse(&["--listen", text]).map(|c| c.listen);
        let loopback = |port: u16| Ok(Listen::Tcp(SocketAddr::from(([127, 0, 0, 1], port))));
        assert_eq!(tcp(":8282"), loopback(8282));
        assert_eq!(tcp("localhost:8282"), loopback(8282));
        assert_eq!(tcp("LOCALHOST:1"), loopback(1));
        assert_eq!(
            tcp("[::1]:8282"),
            Ok(Listen::Tcp("[::1]:8282".parse().expect("addr")))
        );
        for bad in ["8282", "localhost", "localhost:http", ":70000", ""] {
            let err = tcp(bad).expect_err(bad);
            assert!(err.contains("is not an address like"), "{bad}: {err}");
        }
        // Every interface is asked for in so many words, and needs a token.
        let err = tcp("0.0.0.0:8282").expect_err("needs a token");
        assert!(err.contains("not a loopback address"), "{err}");
    }

    #[test]
    fn defaults() {
        let c = parse(&[]).expect("defaults are valid");
        assert_eq!(
            c.listen,
            Listen::Tcp("127.0.0.1:8080".parse().expect("addr"))
        );
        let cwd = std::env::current_dir().expect("working directory");
        assert_eq!(
            c.db,
            Database::Sqlite(cwd.join("data/spoold.db")),
            "made absolute"
        );
        assert_eq!(c.max_db_bytes, 1 << 30);
        assert_eq!((c.concurrency, c.per_target_concurrency), (64, 8));
        assert_eq!(c.request_timeout, Duration::from_secs(10));
        assert_eq!(c.terminal_retention, Duration::from_secs(168 * 3600));
        assert!(!c.allow_private_targets);
    }

    #[test]
    fn sqlite_urls_name_files() {
        let db = |given: &str| match parse(&["--db", given]).expect("valid").db {
            Database::Sqlite(path) => path,
            other => panic!("expected a SQLite file, got {other:?}"),
        };
        assert_eq!(
            db("sqlite:///var/lib/spoold/q.db"),
            PathBuf::from("/var/lib/spoold/q.db")
        );
        assert_eq!(db("sqlite:/var/q.db"), PathBuf::from("/var/q.db"));
        assert_eq!(db("/abs/q.db"), PathBuf::from("/abs/q.db"));
        let cwd = std::env::current_dir().expect("working directory");
        assert_eq!(db("sqlite:rel.db"), cwd.join("rel.db"));
    }

    #[test]
    fn postgres_urls_name_a_shared_database() {
        let c = parse(&["--db", "postgres://spool:pw@127.0.0.1:5432/spool"]).expect("valid");
        assert_eq!(
            c.db,
            Database::Postgres("postgres://spool:pw@127.0.0.1:5432/spool".into())
        );
        assert_eq!(
            c.db.to_string(),
            "postgres://spool:***@127.0.0.1:5432/spool"
        );
        let cwd = std::env::current_dir().expect("working directory");
        assert_eq!(c.data_dir, cwd.join("data"));
        let c = parse(&[
            "--db",
            "postgresql://127.0.0.1/db",
            "--data-dir",
            "/srv/spool",
        ])
        .expect("valid");
        assert_eq!(c.data_dir, PathBuf::from("/srv/spool"));
        let c = parse(&["--db", "/var/lib/spoold/q.db"]).expect("valid");
        assert_eq!(c.data_dir, PathBuf::from("/var/lib/spoold"));
    }

    #[test]
    fn the_poll_interval_follows_db_notify_unless_given() {
        let wakeups = |args: &[&str]| parse(args).map(|c| (c.db_notify, c.db_poll_interval));
        let ms = Duration::from_millis;
        for (args, expected) in [
            (&[][..], (DbNotify::On, ms(5_000))),
            (&["--db-notify", "on"][..], (DbNotify::On, ms(5_000))),
            (&["--db-notify", "off"][..], (DbNotify::Off, ms(1_000))),
            (
                &["--db-notify", "off", "--db-poll-interval", "250ms"][..],
                (DbNotify::Off, ms(250)),
            ),
            (
                &["--db-poll-interval", "30s"][..],
                (DbNotify::On, ms(30_000)),
            ),
        ] {
            assert_eq!(wakeups(args), Ok(expected), "{args:?}");
        }
    }

    #[test]
    fn go_style_flags_and_aliases() {
        let c = parse(&[
            "-listen",
            "127.0.0.1:9000",
            "-workers=4",
            "-per-target-workers",
            "2",
            "-allow-private-targets",
            "-max-journal-bytes",
            "64MiB",
        ])
        .expect("valid");
        assert_eq!(
            c.listen,
            Listen::Tcp("127.0.0.1:9000".parse().expect("addr"))
        );
        assert_eq!((c.concurrency, c.per_target_concurrency), (4, 2));
        assert!(c.allow_private_targets);
        assert_eq!(c.max_db_bytes, 64 << 20);
        // A smaller --concurrency alone (spoold's -workers=4) lowers the per-target default.
        let c = parse(&["-workers=4"]).expect("valid");
        assert_eq!((c.concurrency, c.per_target_concurrency), (4, 4));
    }

    #[test]
    fn refusals() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--lease", "5s"],
                "must be at least 20s with --request-timeout 10s",
            ),
            (
                &["--request-timeout", "1s", "--lease", "1001ms"],
                "must be at least 3s",
            ),
            (
                &["--request-timeout", "1s", "--lease", "2999ms"],
                "at least 3s",
            ),
            (&["--concurrency", "0"], "at least 1"),
            (
                &["--db", "postgres:localhost"],
                "a PostgreSQL database is given as a URL",
            ),
            (
                &["--db", "postgresql:dbname=x"],
                "a PostgreSQL database is given as a URL",
            ),
            (
                &["--db", "mysql://localhost/x"],
                "unknown database URL scheme \"mysql\"",
            ),
            (&["--db", "sqlite:"], "must not be empty"),
            (
                &["--db", "host=a,b port=5432 dbname=spool"],
                "--db looks like a libpq connection string (host=…)",
            ),
            (
                &["--db", "dbname=spool target_session_attrs=read-write"],
                "give PostgreSQL as a URL",
            ),
            (
                &["--db-start-timeout", "0s"],
                "--db-start-timeout must be greater than 0",
            ),
            (
                &["--db-poll-interval", "5ms"],
                "--db-poll-interval must be at least 10ms",
            ),
            (
                &["--db-notify", "maybe"],
                "invalid value 'maybe' for '--db-notify",
            ),
            (
                &["--per-target-concurrency", "65"],
                "--per-target-concurrency 65 must be between 1 and --concurrency (64)",
            ),
            (
                &["--concurrency", "4", "--per-target-concurrency", "6"],
                "--per-target-concurrency 6 must be between 1 and --concurrency (4)",
            ),
            (&["--unix-socket", "rel/path.sock"], "absolute"),
            (&["--listen", "localhost"], "not an address"),
            (&["--request-timeout", "10"], "missing unit"),
            (&["--max-db-bytes", "lots"], "invalid size"),
            (&["--retry-base", "2h"], "at most --retry-cap"),
            (&["--listen", "0.0.0.0:8080"], "--auth-token-file"),
            (&["--listen", "[::]:8080"], "--auth-token-file"),
            (&["--allow-target", "10.0.0.0/40"], "prefix"),
            (
                &["--auth-token-file", "/nonexistent/token"],
                "--auth-token-file",
            ),
        ];
        for (args, want) in cases {
            let err = parse(args).expect_err("must be refused");
            assert!(err.contains(want), "{args:?}: {err}");
        }
    }

    #[test]
    fn token_file_rules() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |name: &str, text: &str, mode: u32| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
            p.display().to_string()
        };
        let good = write("good", &format!("{}\n", "t".repeat(32)), 0o600);
        let short = write("short", &format!("{}\n", "t".repeat(31)), 0o600);
        let open = write("open", &"t".repeat(40), 0o644);
        let c = parse(&["--auth-token-file", &good, "--listen", "0.0.0.0:0"]).expect("valid");
        assert_eq!(c.auth_token.as_ref().map(|t| t.expose().len()), Some(32));
        assert_eq!(format!("{:?}", c.auth_token), "Some(AuthToken([redacted]))");
        let err = parse(&["--auth-token-file", &short]).expect_err("short");
        assert!(err.contains("at least 32"), "{err}");
        let err = parse(&["--auth-token-file", &open]).expect_err("world-readable");
        assert!(err.contains("readable by every user"), "{err}");
    }

    #[test]
    fn values_that_look_like_flags_are_kept() {
        let argv = normalize_go_flags(["spoold", "--db", "-odd-name.db", "-h"].map(String::from));
        assert_eq!(argv, ["spoold", "--db", "-odd-name.db", "-h"]);
    }
}
