//! The command line: clap definitions and help texts. Nothing here does I/O; commands get the
//! parsed values and decide what they mean.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use spool_proto::{units, DeliveryStatus, StepName, TaskStatus, MAX_LIST_LIMIT, MAX_MAX_ATTEMPTS};

/// Where spoold listens unless `--server` or `SPOOLD_URL` says otherwise (its own default).
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

const EXIT_CODES: &str = "\
Exit codes:
  0  success (for `wait`, `send --wait`, `task wait` and `task submit --wait|--follow`: it
     succeeded; for `step check`: the step is done)
  1  spoold returned an error, could not be reached, or a local file could not be read
     (for `step check`: the step is not done; its errors exit 9); for `send` and `task
     submit`: not queued, or not known to be (the message says which): try again later
  2  usage error: bad arguments, bad --server, body that is not JSON, -p without '=', a bad
     step name, `step` outside a task (SPOOLD_TASK_ID or SPOOLD_ATTEMPT missing)
  3  `wait`, `task wait`: the delivery or task failed
  4  `wait`, `task wait`: the delivery or task was canceled
  5  `wait`, `task wait`: timed out waiting (still not in a final status)
  6  `task wait`: the task timed out (its type's timeout or queue_timeout)
  7  `wait`, `task wait`: the delivery or task is in manual review: a person decides
  8  `step done`: the attempt is no longer the task's running attempt (stop the script)
  9  `step check`: spoold returned an error or could not be reached
  10 `wait`, `send --wait`: at most once, the outcome is unknown (the request may have arrived)
  13 `send`, `task submit`: spoold refused it (HTTP 4xx: a bad field, a blocked target, an
     unknown task type or secret, an idempotency key used for another request, the token):
     nothing was queued, and the same command would be refused again";

/// A mistake in the command line that clap cannot see (bad JSON body, bad header, bad
/// `--server`). Exits 2 like clap's own errors, and is checked before any network call.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    pub fn new(message: impl Into<String>) -> Self {
        UsageError(message.into())
    }
}

/// spoolctl submits and manages durable HTTP deliveries through a local spoold.
#[derive(Debug, Parser)]
#[command(
    name = "spoolctl",
    version,
    about = "Submit and manage durable HTTP deliveries through a local spoold",
    long_about = "Submit and manage durable HTTP deliveries through a local spoold.\n\n\
        spoolctl talks to spoold's HTTP API over loopback TCP or a unix socket. Every \
        command prints a short aligned table, or the API's JSON with --json. `spoolctl task` \
        runs and manages the ops tasks declared in spoold's configuration file (`task logs` \
        prints their output as it is); `spoolctl step` is called by their scripts.",
    after_long_help = EXIT_CODES
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

const GLOBAL: &str = "Global options";

/// Options accepted before or after any subcommand.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// spoold's API: http://HOST:PORT[/BASE] or unix:///ABSOLUTE/PATH.sock
    ///
    /// TLS (https) is not supported: reach spoold over a unix socket or a loopback address.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "SPOOLD_URL",
        default_value = DEFAULT_SERVER,
        value_name = "URL"
    )]
    pub server: String,

    /// Whether `server` came from `SPOOLD_URL` (set by `main` from clap's matches), so that a
    /// bad value is reported under the name it was given by.
    #[arg(skip)]
    pub server_from_env: bool,

    /// Print the API's JSON (one compact line) instead of a table
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,

    /// Read a bearer token from FILE and send it on every request
    ///
    /// One trailing newline is removed; the rest of the file is the token.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "SPOOLD_TOKEN_FILE",
        value_name = "FILE"
    )]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Persist and enqueue an HTTP delivery
    // Boxed: its many flags would make every command as large as this one.
    Send(Box<SendArgs>),
    /// List deliveries, newest first (oldest first for --status pending|in_flight)
    List(ListArgs),
    /// Inspect one delivery
    Get(GetArgs),
    /// Show the attempt history of a delivery
    #[command(
        long_about = "Show the attempt history of a delivery, oldest first.\n\n\
        CYCLE is the retry cycle: 1, then one more for each operator's `retry` (or `resolve \
        --resend`), which gives the delivery its attempts again; ATTEMPT counts from 1 in each \
        cycle and is the X-Spoold-Attempt the request carried. OUTCOME is `succeeded`, `retry` \
        (it failed and the delivery is tried again: the next attempt follows), `failed` (it \
        failed and so did the delivery: an answer that is not retried, such as a 400, or its \
        last attempt), \
        `interrupted` (cut short by a shutdown or crash: sent again, not counted), `unknown` \
        (at most once: it may have arrived) or `in_progress`. HTTP is the status answered, CODE \
        the error code (`http_status`, `connect_failed`, `timeout`, …) and ERROR its first \
        line."
    )]
    Attempts(IdArgs),
    /// Show every status change of a delivery, with its reason
    Transitions(IdArgs),
    /// Start a new retry cycle for failed deliveries: by ID, or every one a filter matches
    #[command(
        override_usage = "spoolctl retry <ID>...\n       spoolctl retry [--status S] [--target URL] \
            [--since WHEN] [--until WHEN] [--error-code CODE] [--dry-run | --yes]",
        long_about = "Start a new retry cycle for failed deliveries: by ID, or every one a filter \
            matches.\n\n\
            With a filter, spoold retries each matching delivery as `retry ID` would, and skips \
            (and counts) those that are not failed, and at-most-once ones whose request reached \
            the target (only `resolve --resend` sends those again). --dry-run only counts. Without --dry-run, \
            spoolctl first says how many would change and asks on a terminal; --yes skips the \
            question, and is needed when stdin is not a terminal."
    )]
    Retry(ActionArgs),
    /// Cancel pending or in-flight delivery work: by ID, or every one a filter matches
    #[command(
        override_usage = "spoolctl cancel <ID>...\n       spoolctl cancel [--status S] [--target URL] \
            [--since WHEN] [--until WHEN] [--error-code CODE] [--dry-run | --yes]",
        long_about = "Cancel pending or in-flight delivery work: by ID, or every one a filter \
            matches.\n\n\
            With a filter, spoold cancels each matching delivery as `cancel ID` would, and skips \
            (and counts) those it cannot cancel. --dry-run only counts. Without --dry-run, \
            spoolctl first says how many would change and asks on a terminal; --yes skips the \
            question, and is needed when stdin is not a terminal."
    )]
    Cancel(ActionArgs),
    /// Write deliveries with their history as JSON lines, to move or back up the queue
    #[command(
        long_about = "Write deliveries with their history as JSON lines, to move or back \
        up the queue.\n\n\
        One JSON object a line: the delivery with its headers (unmasked) and body as stored \
        (base64, byte for byte), its attempts, transitions and checks. Every delivery, or \
        those a filter matches. Keep the file as carefully as the database: it holds the \
        requests' secrets. `spoolctl import` reads it back, into SQLite or PostgreSQL."
    )]
    Export(ExportArgs),
    /// Read deliveries written by `spoolctl export` (or a spoold v0.1.0 journal) into spoold
    #[command(long_about = "Read deliveries written by `spoolctl export` (or, with \
        --spoold-journal, the pending deliveries of a spoold v0.1.0 journal) into spoold.\n\n\
        Idempotent: a delivery already there (same id, same request) is left alone. One whose \
        id or idempotency key belongs to another request is a conflict: reported, not \
        overwritten. Each record is checked as a create would be. Deliveries that were in \
        flight come in as crash recovery would leave them. A torn last line (an export or a \
        journal cut short) is reported and skipped. Exit status 1 if any record was not \
        imported or already there.")]
    Import(ImportArgs),
    /// Settle an at-most-once delivery whose outcome is unknown or in manual review
    #[command(
        override_usage = "spoolctl resolve <ID>... (--succeeded [--remote-id <ID>] | --failed | --resend) \
            --note <TEXT>",
        long_about = "Settle an at-most-once delivery whose outcome is unknown or in manual review.\n\n\
            Say what happened at the target: --succeeded (it arrived; --remote-id records the \
            target's id for it), --failed (it did not arrive and must not be sent), or --resend \
            (send it again, as a new cycle). The --note is kept in the transition log."
    )]
    Resolve(ResolveArgs),
    /// Show the reconciliation checks of an at-most-once delivery
    Checks(IdArgs),
    /// How the spool is doing: counts by status, the oldest due delivery, recent results
    Stats,
    /// Targets with work waiting, recent failures or a pause, in origin order
    Targets(TargetsArgs),
    /// The daemon's maildrop: where it is, the drops waiting, and those it refused, with why
    ///
    /// `send` drops a request there when the daemon cannot be reached; the daemon takes each
    /// in when it runs. A drop it will not take (a blocked target, an idempotency conflict, a
    /// malformed file) is moved aside with its reason and listed here, newest first.
    Maildrop,
    /// Wait until a delivery is succeeded, failed or canceled
    #[command(
        long_about = "Wait until a delivery is succeeded, failed or canceled.\n\n\
            Polls the delivery every --interval until its status is terminal or --timeout \
            has passed, then prints it. An at-most-once delivery that becomes unknown or goes \
            to manual review ends the wait too (exit 10 or 7): reconciliation or a person \
            settles it, not waiting here.",
        after_long_help = WAIT_EXIT_CODES
    )]
    Wait(WaitArgs),
    /// Run a small HTTP receiver that prints every request it gets (for trying spoold out)
    #[command(
        long_about = "Run a small HTTP receiver that prints every request it gets.\n\n\
            For trying spoold out, and for developing against it: each request is printed \
            (method, path, X-Spoold-Delivery-ID, X-Spoold-Attempt, content type, size and the \
            body, or with --json one object per line) and answered --status (200). --fail N \
            answers the first N requests --fail-status (503) instead, so you can watch retries; \
            --delay makes every answer wait. It runs in the foreground until Ctrl-C."
    )]
    Receive(ReceiveArgs),
    /// Check the Standard Webhooks signature of a request a receiver got
    #[command(
        long_about = "Check the Standard Webhooks signature of a request a receiver got.\n\n\
            The request is read from FILE (or stdin) as it was received: an optional request \
            line, the header lines, a blank line, then the body byte for byte. Its \
            webhook-id, webhook-timestamp and webhook-signature headers are checked against \
            every key in --secret-file (whsec_… keys, one per line or separated by spaces), \
            and the timestamp against --tolerance. Prints `valid: …`, `invalid: …` or `too \
            old or new: …`.",
        after_long_help = VERIFY_EXIT_CODES
    )]
    Verify(VerifyArgs),
    /// Run and manage ops tasks: the task types declared in spoold's configuration
    Task {
        #[command(subcommand)]
        command: TaskCommand,
    },
    /// Show the resource locks tasks hold, and the tasks waiting for each
    #[command(
        long_about = "Show the resource locks tasks hold, and the tasks waiting for each.\n\n\
            One row per held lock: its name, the task holding it (its type and status: \
            `running`, or `pending` while it keeps its locks through a retry's backoff), since \
            when, and the pending tasks that want it, in the order they will get it."
    )]
    Locks,
    /// Inside a task's script: report a step done, or ask whether it is
    #[command(
        long_about = "Inside a task's script: report a step done, or ask whether it is.\n\n\
            A step (a checkpoint) is done once per task: when a later attempt runs the \
            script again, `step check` tells it what an earlier attempt already did. The \
            task and attempt come from SPOOLD_TASK_ID and SPOOLD_ATTEMPT, spoold from \
            SPOOLD_URL (or --server), and the bearer token from SPOOLD_STEP_TOKEN when it is \
            set (before --token-file); spoold's executor sets all of them.",
        after_long_help = STEP_EXAMPLE
    )]
    Step {
        #[command(subcommand)]
        command: StepCommand,
    },
    /// Print version information
    Version,
    /// Print a shell completion script to stdout
    #[command(long_about = "Print a shell completion script to stdout.\n\n\
            Example (bash): spoolctl completion bash > ~/.local/share/bash-completion/completions/spoolctl")]
    Completion {
        /// The shell to generate the script for
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) to stdout
    #[command(
        long_about = "Print the manual page (roff) to stdout, generated from these \
            definitions.\n\nRead it with: spoolctl man | man -l -"
    )]
    Man,
}

const STEP_EXAMPLE: &str = "\
Example (sh):
  if spoolctl step check dump; then
      echo 'dump: done by an earlier attempt'
  else
      [ $? -eq 1 ] || exit 1          # 9: could not ask spoold, which is not \"not done\"
      pg_dump mydb > /backup/mydb.sql
      spoolctl step done dump         # exits 8 if this attempt was canceled meanwhile
  fi";

/// `spoolctl step …`: checkpoints, reported from inside a task's script.
#[derive(Debug, Subcommand)]
pub enum StepCommand {
    /// Record a step of this task as done by this attempt (prints nothing; --json the record)
    #[command(
        long_about = "Record a step of this task as done by this attempt.\n\n\
            Prints nothing (--json: the record). A step done before, by this attempt or an \
            earlier one, stays as it was recorded and is not an error. spoold refuses (409 \
            `not_current_attempt`, exit 8) when the attempt is no longer the task's running \
            attempt: it was canceled or timed out, and the script should stop.",
        after_long_help = STEP_DONE_EXIT_CODES
    )]
    Done(StepArgs),
    /// Exit 0 if a step of this task is done (by any attempt), 1 if not
    #[command(
        long_about = "Exit 0 if a step of this task is done (by any attempt), 1 if not.\n\n\
            Prints nothing (--json: the record of a step that is done). An error exits 9, not \
            1, so that it is not taken for \"not done\".",
        after_long_help = STEP_CHECK_EXIT_CODES
    )]
    Check(StepArgs),
}

const STEP_DONE_EXIT_CODES: &str = "\
Exit codes:
  0  the step is recorded as done (now, or before)
  1  spoold returned an error (e.g. 404: no such task; 401: the token) or could not be reached
  2  usage error: a bad step name, SPOOLD_TASK_ID or SPOOLD_ATTEMPT missing or invalid
  8  the attempt is no longer the task's running attempt (canceled, timed out, …): stop";

const STEP_CHECK_EXIT_CODES: &str = "\
Exit codes:
  0  the step is done (by this attempt or an earlier one)
  1  the step is not done
  2  usage error: a bad step name, SPOOLD_TASK_ID or SPOOLD_ATTEMPT missing or invalid
  9  spoold returned an error or could not be reached: whether it is done is not known";

#[derive(Debug, Args)]
pub struct StepArgs {
    /// The step: 1–128 characters of letters, digits, '.', '_', ':' and '-'
    #[arg(value_name = "NAME", value_parser = parse_step_name)]
    pub name: StepName,
}

const VERIFY_EXIT_CODES: &str = "\
Exit codes:
  0  the signature is valid
  1  the secret file or the request could not be read
  2  usage error (e.g. a request without headers, a bad secret)
  11 the signature is missing or matches no key
  12 the timestamp is outside --tolerance (the signature was not checked)";

const WAIT_EXIT_CODES: &str = "\
Exit codes:
  0  the delivery succeeded
  1  spoold returned an error or could not be reached
  2  usage error
  3  the delivery failed
  4  the delivery was canceled
  5  timed out: the delivery is still pending or in flight
  7  the delivery is in manual review: a person decides (`spoolctl resolve`)
  10 at most once, the outcome is unknown (the request may have arrived): spoold asks the
     target (`spoolctl checks ID`), or a person resolves it";

#[derive(Debug, Args)]
#[command(after_long_help = EXIT_CODES)]
pub struct SendArgs {
    #[command(flatten)]
    pub request: RequestArgs,

    /// After queuing, wait until the delivery is terminal and exit like `wait` (at most 30s)
    ///
    /// Prints the `queued` row, then a `wait` row with the final state. With --json, prints
    /// only the final delivery. Gives up after --timeout, 30s unless given (exit 5: the
    /// delivery is queued and still being tried).
    #[arg(long)]
    pub wait: bool,

    /// With --wait: give up after DURATION (exit 5) [default: 30s]
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,

    /// With --wait: time between polls [default: 200ms]
    #[arg(long, value_name = "DURATION", requires = "wait", value_parser = parse_duration_arg)]
    pub interval: Option<Duration>,

    /// Where to drop the request when spoold cannot be reached; `off`: never [default: where
    /// the daemon said at its start, else /var/lib/spoold/maildrop]
    ///
    /// When no answer comes (spoold down, starting or stopping), the request is written whole
    /// into spoold's maildrop, and spoold queues it when it runs: `dropped`, exit 0.
    #[arg(long, env = "SPOOLD_MAILDROP", value_name = "DIR|off")]
    pub maildrop: Option<PathBuf>,
}

/// The flags that shape a create request.
#[derive(Debug, Clone, Default, Args)]
pub struct RequestArgs {
    /// The http or https URL spoold delivers to
    #[arg(value_name = "TARGET_URL")]
    pub url: String,

    /// HTTP method of the delivery
    #[arg(short = 'X', long, default_value = "POST")]
    pub method: String,

    /// Add a header to the delivery, as 'Name: value' (repeatable)
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,

    /// JSON body, inline, sent byte for byte; or, as curl takes it, @FILE for the JSON in FILE
    /// (@- for stdin)
    #[arg(short = 'd', long, value_name = "JSON|@FILE")]
    pub data: Option<String>,

    /// JSON body read from FILE, or from stdin with '-'
    #[arg(long, value_name = "FILE|-")]
    pub data_file: Option<PathBuf>,

    /// Raw body bytes read from FILE, or from stdin with '-' (sent as bodyBase64)
    #[arg(long, value_name = "FILE|-")]
    pub data_binary: Option<PathBuf>,

    /// Reusing a key with the same request returns the existing delivery
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Attempts per retry cycle (spoold's default when absent)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_MAX_ATTEMPTS)))]
    pub max_attempts: Option<u32>,

    /// Make no attempt before this time: RFC 3339 (2026-07-18T12:00:00Z) or a duration from
    /// now (10m, 1d)
    #[arg(long, value_name = "TIME")]
    pub not_before: Option<String>,

    /// Fail the delivery as expired if no attempt has started within DURATION (e.g. 10m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub expires_in: Option<Duration>,

    /// Fail the delivery as expired if no attempt has started by TIME (RFC 3339): the same
    /// deadline on every run, so a job run again with the same --idempotency-key repeats its
    /// request (--expires-in counts from each run)
    #[arg(long, value_name = "TIME", conflicts_with = "expires_in")]
    pub expires_at: Option<String>,

    /// JSON pointer to the target's id in a 2xx response body (e.g. /id), kept as its remote id
    #[arg(long, value_name = "POINTER")]
    pub remote_id_pointer: Option<String>,

    /// Sign every attempt (Standard Webhooks) with the daemon's [secrets] entry NAME, in place
    /// of its [[targets]] rule's
    #[arg(long, value_name = "NAME")]
    pub sign: Option<String>,

    #[command(flatten)]
    pub at_most_once: AtMostOnceArgs,
}

const AT_MOST_ONCE: &str = "At-most-once options";

/// The flags of an at-most-once delivery and of its reconciliation query.
#[derive(Debug, Clone, Default, Args)]
pub struct AtMostOnceArgs {
    /// Never send the request again once it may have reached the target
    ///
    /// An attempt without a definite answer (timeout, dropped connection) leaves the delivery
    /// `unknown` instead of retrying it; the reconcile query, or a person with `spoolctl
    /// resolve`, settles it. The options below need it; those that shape the reconcile query
    /// also need --reconcile-url.
    #[arg(long, help_heading = AT_MOST_ONCE)]
    pub at_most_once: bool,

    /// The business key the target can be searched by (default: the idempotency key)
    #[arg(long, value_name = "TEXT", help_heading = AT_MOST_ONCE, requires = "at_most_once")]
    pub fingerprint: Option<String>,

    /// URL that asks the target whether an unknown request arrived
    ///
    /// {fingerprint} and {deliveryId} are replaced, percent-encoded, e.g.
    /// 'https://api.example.com/orders?ref={fingerprint}'. The answer must be JSON holding
    /// an array of matches: exactly one settles the delivery as succeeded, more than one sends
    /// it to manual review.
    #[arg(
        long,
        value_name = "TEMPLATE",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once"
    )]
    pub reconcile_url: Option<String>,

    /// HTTP method of the reconcile query (default: GET)
    #[arg(
        long,
        value_name = "METHOD",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once",
        requires = "reconcile_url"
    )]
    pub reconcile_method: Option<String>,

    /// Add a header to the reconcile query, as 'Name: value' (repeatable)
    #[arg(
        long = "reconcile-header",
        value_name = "NAME: VALUE",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once",
        requires = "reconcile_url"
    )]
    pub reconcile_headers: Vec<String>,

    /// JSON pointer to the array of matches in the answer (default: the answer is the array)
    #[arg(
        long,
        value_name = "POINTER",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once",
        requires = "reconcile_url"
    )]
    pub matches_pointer: Option<String>,

    /// JSON pointer to the target's id inside one match (default: /id)
    #[arg(
        long,
        value_name = "POINTER",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once",
        requires = "reconcile_url"
    )]
    pub reconcile_id_pointer: Option<String>,

    /// How long an unknown outcome is checked before it goes to manual review (default: 1h)
    #[arg(
        long,
        value_name = "DURATION",
        help_heading = AT_MOST_ONCE,
        requires = "at_most_once",
        requires = "reconcile_url",
        value_parser = parse_duration_arg
    )]
    pub observation_window: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only deliveries with this status
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,

    /// Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path
    /// (its deliveries, whatever their query)
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,

    /// Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// Oldest first [default: newest first, but oldest first for --status pending|in_flight,
    /// the order they are sent in]
    #[arg(long, conflicts_with = "newest_first")]
    pub oldest_first: bool,

    /// Newest first, whatever --status
    #[arg(long)]
    pub newest_first: bool,

    #[command(flatten)]
    pub page: PageArgs,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TargetsArgs {
    #[command(subcommand)]
    pub command: Option<TargetsCommand>,

    #[command(flatten)]
    pub page: PageArgs,
}

#[derive(Debug, Subcommand)]
pub enum TargetsCommand {
    /// Send nothing to a target until it is resumed: its deliveries wait, uncharged (on the
    /// daemon's host; not kept across a restart)
    Pause {
        /// An origin (https://hooks.example.com); given a URL, its origin
        target: String,
    },
    /// Send to a target again. An origin: lifts a pause by hand, an open breaker, a pause for
    /// refused connections, and the 410 Gone of each of its URLs. A URL with a path: lifts
    /// only that URL's 410 Gone
    Resume {
        /// An origin (https://hooks.example.com) or one URL of it
        target: String,
    },
}

/// How much of a listing to fetch.
#[derive(Debug, Args)]
pub struct PageArgs {
    /// Entries per page
    #[arg(
        long,
        value_name = "N",
        default_value_t = spool_proto::DEFAULT_LIST_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_LIST_LIMIT))
    )]
    pub limit: u32,

    /// Start at this page (the cursor `more:` gave after an earlier one)
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,

    /// Follow next-page cursors until everything has been listed
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    /// The delivery ID
    pub id: String,

    /// Show the values of sensitive headers instead of masking them
    #[arg(long)]
    pub reveal: bool,

    /// Print only the body, whole and byte for byte as it is sent (binary bodies decoded)
    #[arg(long, conflicts_with = "json")]
    pub body: bool,
}

#[derive(Debug, Args)]
pub struct IdArgs {
    /// The delivery ID
    pub id: String,
}

#[derive(Debug, Args)]
pub struct ActionArgs {
    /// Delivery IDs; or, instead, a filter
    pub ids: Vec<String>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// With a filter: only count what would change
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,

    /// With a filter: act without asking (needed when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub filter: FilterArgs,

    /// Write to FILE (created, not readable by others) instead of standard output
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The file (`-`: standard input)
    pub file: PathBuf,

    /// FILE is a spoold v0.1.0 journal: its pending and in-flight deliveries are imported, and
    /// its finished ones for the rest of v0.1.0's retention (168h), for their idempotency keys
    #[arg(long)]
    pub spoold_journal: bool,
}

/// Which deliveries a bulk action applies to; every flag given must match.
#[derive(Debug, Args)]
pub struct FilterArgs {
    /// Only deliveries with this status
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,

    /// Only deliveries to this target: an origin (scheme://host[:port]), or a URL with a path
    /// (its deliveries, whatever their query)
    #[arg(long, value_name = "URL")]
    pub target: Option<String>,

    /// Only deliveries created since: a duration ago (24h, 7d) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// Only deliveries created before: a duration ago (1h) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,

    /// Only deliveries whose last attempt ended with this error code (connect_failed, …)
    #[arg(long, value_name = "CODE")]
    pub error_code: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("outcome").required(true).args(["succeeded", "failed", "resend"])))]
pub struct ResolveArgs {
    /// The delivery IDs (one decision for each)
    #[arg(required = true)]
    pub ids: Vec<String>,

    /// It arrived: the delivery succeeded
    #[arg(long)]
    pub succeeded: bool,

    /// It did not arrive, and must not be sent: the delivery failed
    #[arg(long)]
    pub failed: bool,

    /// Send it again, as a new cycle
    #[arg(long)]
    pub resend: bool,

    /// With --succeeded: the target's id for what it created
    #[arg(long, value_name = "ID", conflicts_with_all = ["failed", "resend"])]
    pub remote_id: Option<String>,

    /// Why: kept in the transition log
    #[arg(long, value_name = "TEXT", required = true)]
    pub note: String,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("outcome").required(true).args(["succeeded", "failed"])))]
pub struct TaskResolveArgs {
    /// The task IDs (one decision for each)
    #[arg(required = true)]
    pub ids: Vec<String>,

    /// The work was done: the task succeeded
    #[arg(long)]
    pub succeeded: bool,

    /// It was not: the task failed (and is not run again by itself)
    #[arg(long)]
    pub failed: bool,

    /// Why: kept in the transition log
    #[arg(long, value_name = "TEXT", required = true)]
    pub note: String,
}

#[derive(Debug, Args)]
pub struct ReceiveArgs {
    /// Where to listen (ADDR:PORT; port 0 picks a free one, printed at start)
    #[arg(long, default_value = "127.0.0.1:9000", value_name = "ADDR")]
    pub listen: std::net::SocketAddr,

    /// Answer the first N requests with --fail-status instead
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub fail: u32,

    /// The status of the failing answers
    #[arg(long, default_value_t = 503, value_name = "CODE", value_parser = clap::value_parser!(u16).range(100..=599))]
    pub fail_status: u16,

    /// The status of every other answer
    #[arg(long, default_value_t = 200, value_name = "CODE", value_parser = clap::value_parser!(u16).range(100..=599))]
    pub status: u16,

    /// Wait this long before each answer (e.g. 2s)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_arg)]
    pub delay: Option<Duration>,

    /// Check every request's Standard Webhooks signature with these keys (whsec_…): a
    /// request whose signature is missing, wrong or older than 5 minutes is answered 401
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<std::path::PathBuf>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The request as received (headers, a blank line, the body); `-` or none: stdin
    #[arg(value_name = "FILE")]
    pub request: Option<String>,

    /// The secret: one or more whsec_… keys (one per line, or separated by spaces)
    #[arg(long, value_name = "FILE")]
    pub secret_file: std::path::PathBuf,

    /// Refuse a timestamp further than this from now (or --at); 0 does not check it
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration_arg)]
    pub tolerance: Duration,

    /// Check as of this time (Unix seconds or RFC 3339) instead of now, e.g. for a logged request
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The delivery ID
    pub id: String,

    #[command(flatten)]
    pub poll: PollArgs,
}

/// How `wait` polls.
#[derive(Debug, Clone, Copy, Args)]
pub struct PollArgs {
    /// Give up after DURATION (exit 5)
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration_arg)]
    pub timeout: Duration,

    /// Time between polls
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration_arg)]
    pub interval: Duration,
}

/// `spoolctl task …`: one subcommand per task endpoint, plus `wait`.
#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Run a declared task type with parameters
    #[command(
        long_about = "Run a declared task type with parameters.\n\n\
            Each -p KEY=VALUE is split at its first '='; spoold checks the names and values \
            against the type's declared parameters (`spoolctl task types --json` shows their \
            patterns). Prints `submitted <id> <status> <attempt>/<max> <type>`, or `existing …` \
            when the idempotency key (given, or derived by the type) names a task already \
            submitted with the same parameters.\n\n\
            --follow prints the output of each attempt as it runs (a `--- attempt N ---` \
            line on stderr before each) and exits like --wait; stdout then carries only the \
            output, and the `submitted` and final `wait` rows go to stderr.",
        after_long_help = TASK_WAIT_EXIT_CODES
    )]
    Submit(TaskSubmitArgs),
    /// List tasks, oldest first
    List(TaskListArgs),
    /// Inspect one task: its fields, parameters, result and error
    Get(TaskIdArgs),
    /// Show the attempts of a task: exit code, signal, duration, error
    Attempts(TaskIdArgs),
    /// Show every status change of a task, with its reason
    Transitions(TaskIdArgs),
    /// Show the steps a task's script reported done: name, attempt, time
    Steps(TaskIdArgs),
    /// Print what an attempt of a task wrote to stdout and stderr
    #[command(
        long_about = "Print what an attempt of a task wrote to stdout and stderr.\n\n\
            The output is printed byte for byte as spoold kept it (redacted, and cut in the \
            middle when it was longer than the type's limit), as it arrives. Without \
            --attempt, spoold picks the latest attempt. With --follow, printing goes on while \
            the attempt runs and stops when it ends."
    )]
    Logs(TaskLogsArgs),
    /// Cancel a pending task, or stop a running one
    #[command(long_about = "Cancel a pending task, or stop a running one.\n\n\
            A pending task is canceled at once. A running task stays `running` with \
            `cancelRequested` while spoold stops its process group; `spoolctl task wait` then \
            exits 4. A task that has ended cannot be canceled (409).\n\n\
            Several IDs may be given; or, instead, a filter (--type, --status, --since, \
            --until): every matching task is canceled as one would be, and those that cannot \
            be are skipped and counted. --dry-run only counts; without it spoolctl says how \
            many would change and asks on a terminal (--yes skips the question, and is needed \
            when stdin is not a terminal).")]
    Cancel(TaskActionArgs),
    /// Run a task that ended (failed, timed out, interrupted, manual review) again
    #[command(
        long_about = "Run a task that ended (failed, timed out, interrupted, manual \
            review) again.\n\n\
            The task becomes pending with its type's max_attempts more attempts. spoold \
            refuses (409) a task in another status, or of a type with operator_retry = false.\n\n\
            Several IDs may be given; or, instead, a filter (--type, --status, --since, \
            --until): every matching task is retried as one would be, and those that cannot \
            be are skipped and counted. --dry-run only counts; without it spoolctl says how \
            many would change and asks on a terminal (--yes skips the question, and is needed \
            when stdin is not a terminal)."
    )]
    Retry(TaskActionArgs),
    /// Settle a task in manual review: it succeeded after all, or it failed
    #[command(
        override_usage = "spoolctl task resolve <ID> (--succeeded | --failed) --note <TEXT>",
        long_about = "Settle a task in manual review: it succeeded after all, or it failed.\n\n\
            A person looked at what the task did (a partial failure, an interrupted deploy) \
            and says how it ended; the --note is kept in the transition log. To run it \
            again instead: `task retry`; to drop it: `task cancel`. spoold refuses (409) a \
            task that is not in manual review."
    )]
    Resolve(TaskResolveArgs),
    /// List the declared task types
    Types,
    /// Wait until a task is in a final status
    #[command(
        long_about = "Wait until a task is in a final status.\n\n\
            Polls the task every --interval until it is succeeded, failed, timed_out, \
            canceled or in manual_review, or --timeout has passed, then prints it. A pending \
            or running task is waited for, and so is an interrupted one: its type's \
            on_interrupt policy still moves it on.",
        after_long_help = TASK_WAIT_EXIT_CODES
    )]
    Wait(TaskWaitArgs),
}

const TASK_WAIT_EXIT_CODES: &str = "\
Exit codes:
  0  the task succeeded (`task submit` without --wait or --follow: it was submitted)
  1  spoold returned an error or could not be reached (`task submit`: not submitted, or not
     known to be: try again later)
  2  usage error (e.g. -p without '=')
  3  the task failed
  4  the task was canceled
  5  timed out waiting: the task is still pending, running or interrupted
  6  the task timed out (its type's timeout or queue_timeout)
  7  the task is in manual review
  13 `task submit`: spoold refused it (HTTP 4xx: an unknown task type, a parameter the type
     does not take, an idempotency key used for other parameters, the token): nothing was
     submitted, and the same command would be refused again";

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("waiting").multiple(true).args(["wait", "follow"])))]
pub struct TaskSubmitArgs {
    /// A task type declared in spoold's configuration (see `spoolctl task types`)
    #[arg(value_name = "TYPE")]
    pub task_type: String,

    /// A parameter of the type, as KEY=VALUE (repeatable; split at the first '=')
    #[arg(short = 'p', long = "param", value_name = "KEY=VALUE")]
    pub params: Vec<String>,

    /// Reusing a key with the same parameters returns the existing task
    ///
    /// Only for a type without its own idempotency_key template (spoold refuses it otherwise).
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Start no attempt before this time: RFC 3339 (2026-07-18T12:00:00Z) or a duration from
    /// now (10m, 1d)
    #[arg(long, value_name = "TIME")]
    pub not_before: Option<String>,

    /// After submitting, wait until the task is in a final status and exit like `task wait`
    ///
    /// Prints the `submitted` row, then a `wait` row with the final state. With --json, prints
    /// only the final task.
    #[arg(long)]
    pub wait: bool,

    /// After submitting, print each attempt's output as it runs, then exit like --wait
    ///
    /// stdout carries only the output, byte for byte; a `--- attempt N ---` line before each
    /// attempt and the `submitted` and final `wait` rows go to stderr. Waits as long as the
    /// task runs unless --timeout is given.
    #[arg(long, conflicts_with = "json")]
    pub follow: bool,

    /// With --wait or --follow: give up after DURATION (exit 5)
    ///
    /// --wait gives up after 30s without it; --follow never does.
    #[arg(long, value_name = "DURATION", requires = "waiting", value_parser = parse_duration_arg)]
    pub timeout: Option<Duration>,

    /// With --wait or --follow: time between polls of the task [default: 200ms]
    #[arg(long, value_name = "DURATION", requires = "waiting", value_parser = parse_duration_arg)]
    pub interval: Option<Duration>,
}

impl TaskSubmitArgs {
    /// The polling options of `task submit --wait`, with `wait`'s defaults.
    pub fn poll(&self) -> PollArgs {
        PollArgs {
            timeout: self.timeout.unwrap_or(DEFAULT_WAIT_TIMEOUT),
            interval: self.interval.unwrap_or(DEFAULT_WAIT_INTERVAL),
        }
    }

    /// The options of `task submit --follow`: like [`Self::poll`], but no timeout unless one
    /// was given (a followed task is watched as long as it runs).
    pub fn follow_args(&self) -> FollowArgs {
        FollowArgs {
            timeout: self.timeout,
            interval: self.interval.unwrap_or(DEFAULT_WAIT_INTERVAL),
        }
    }
}

/// How `task submit --follow` waits: polls every `interval` while no attempt runs, gives up
/// after `timeout` if there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowArgs {
    pub timeout: Option<Duration>,
    pub interval: Duration,
}

#[derive(Debug, Args)]
pub struct TaskListArgs {
    /// Only tasks with this status
    #[arg(long, value_enum)]
    pub status: Option<TaskStatusArg>,

    /// Only tasks of this type
    #[arg(long = "type", value_name = "TYPE")]
    pub task_type: Option<String>,

    #[command(flatten)]
    pub page: PageArgs,
}

#[derive(Debug, Args)]
pub struct TaskIdArgs {
    /// The task ID
    pub id: String,
}

#[derive(Debug, Args)]
pub struct TaskLogsArgs {
    /// The task ID
    pub id: String,

    /// The attempt whose output to print (default: the latest)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: Option<u32>,

    /// Keep printing while the attempt runs; stop when it ends
    #[arg(short = 'f', long)]
    pub follow: bool,
}

#[derive(Debug, Args)]
pub struct TaskWaitArgs {
    /// The task ID
    pub id: String,

    #[command(flatten)]
    pub poll: PollArgs,
}

#[derive(Debug, Args)]
pub struct TaskActionArgs {
    /// Task IDs; or, instead, a filter
    pub ids: Vec<String>,

    /// Only tasks of this type
    #[arg(long = "type", value_name = "TYPE")]
    pub task_type: Option<String>,

    /// Only tasks with this status
    #[arg(long, value_enum)]
    pub status: Option<TaskStatusArg>,

    /// Only tasks created since: a duration ago (24h, 7d) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,

    /// Only tasks created before: a duration ago (1h) or an RFC 3339 time
    #[arg(long, value_name = "WHEN")]
    pub until: Option<String>,

    /// With a filter: only count what would change
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,

    /// With a filter: act without asking (needed when stdin is not a terminal)
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// A task status as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TaskStatusArg {
    Pending,
    Running,
    Succeeded,
    Failed,
    #[value(name = "timed_out")]
    TimedOut,
    Interrupted,
    Canceled,
    #[value(name = "manual_review")]
    ManualReview,
}

impl From<TaskStatusArg> for TaskStatus {
    fn from(s: TaskStatusArg) -> Self {
        match s {
            TaskStatusArg::Pending => TaskStatus::Pending,
            TaskStatusArg::Running => TaskStatus::Running,
            TaskStatusArg::Succeeded => TaskStatus::Succeeded,
            TaskStatusArg::Failed => TaskStatus::Failed,
            TaskStatusArg::TimedOut => TaskStatus::TimedOut,
            TaskStatusArg::Interrupted => TaskStatus::Interrupted,
            TaskStatusArg::Canceled => TaskStatus::Canceled,
            TaskStatusArg::ManualReview => TaskStatus::ManualReview,
        }
    }
}

/// The other way round, so that a status added to the wire cannot be forgotten here: this
/// match stops compiling.
impl From<TaskStatus> for TaskStatusArg {
    fn from(s: TaskStatus) -> Self {
        match s {
            TaskStatus::Pending => TaskStatusArg::Pending,
            TaskStatus::Running => TaskStatusArg::Running,
            TaskStatus::Succeeded => TaskStatusArg::Succeeded,
            TaskStatus::Failed => TaskStatusArg::Failed,
            TaskStatus::TimedOut => TaskStatusArg::TimedOut,
            TaskStatus::Interrupted => TaskStatusArg::Interrupted,
            TaskStatus::Canceled => TaskStatusArg::Canceled,
            TaskStatus::ManualReview => TaskStatusArg::ManualReview,
        }
    }
}

/// A delivery status as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    Pending,
    #[value(name = "in_flight")]
    InFlight,
    Succeeded,
    Failed,
    Canceled,
    Unknown,
    #[value(name = "manual_review")]
    ManualReview,
}

impl From<StatusArg> for DeliveryStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Pending => DeliveryStatus::Pending,
            StatusArg::InFlight => DeliveryStatus::InFlight,
            StatusArg::Succeeded => DeliveryStatus::Succeeded,
            StatusArg::Failed => DeliveryStatus::Failed,
            StatusArg::Canceled => DeliveryStatus::Canceled,
            StatusArg::Unknown => DeliveryStatus::Unknown,
            StatusArg::ManualReview => DeliveryStatus::ManualReview,
        }
    }
}

impl SendArgs {
    /// The polling options of `send --wait`, with `wait`'s defaults.
    pub fn poll(&self) -> PollArgs {
        PollArgs {
            timeout: self.timeout.unwrap_or(DEFAULT_WAIT_TIMEOUT),
            interval: self.interval.unwrap_or(DEFAULT_WAIT_INTERVAL),
        }
    }
}

/// Defaults of `wait`, repeated for `send --wait` (whose flags are optional).
const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_WAIT_INTERVAL: Duration = Duration::from_millis(200);

fn parse_duration_arg(s: &str) -> Result<Duration, String> {
    units::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_step_name(s: &str) -> Result<StepName, String> {
    StepName::parse(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn status_names_match_the_wire() {
        for st in StatusArg::value_variants() {
            let name = st.to_possible_value().expect("no variant is skipped");
            assert_eq!(name.get_name(), DeliveryStatus::from(*st).as_str());
        }
    }

    #[test]
    fn every_wire_status_can_be_listed() {
        for st in DeliveryStatus::ALL {
            assert!(
                StatusArg::from_str(st.as_str(), false).is_ok(),
                "{st} is missing from --status"
            );
        }
    }

    #[test]
    fn task_status_names_match_the_wire() {
        for st in TaskStatusArg::value_variants() {
            let name = st.to_possible_value().expect("no variant is skipped");
            let wire = serde_json::to_value(TaskStatus::from(*st)).expect("serializable");
            assert_eq!(wire.as_str(), Some(name.get_name()));
            assert_eq!(TaskStatusArg::from(TaskStatus::from(*st)), *st);
        }
    }

    #[test]
    fn task_commands_parse() {
        let cli = Cli::try_parse_from([
            "spoolctl",
            "task",
            "submit",
            "backup",
            "-p",
            "db=one",
            "--param",
            "x=a=b",
            "--wait",
            "--timeout",
            "5s",
        ])
        .expect("valid");
        let Command::Task {
            command: TaskCommand::Submit(s),
        } = cli.command
        else {
            panic!("parsed as task submit")
        };
        assert_eq!(s.task_type, "backup");
        assert_eq!(s.params, ["db=one", "x=a=b"]);
        assert_eq!(s.poll().timeout, Duration::from_secs(5));
        assert_eq!(s.poll().interval, DEFAULT_WAIT_INTERVAL);

        let cli = Cli::try_parse_from(["spoolctl", "task", "wait", "x"]).expect("valid");
        let Command::Task {
            command: TaskCommand::Wait(w),
        } = cli.command
        else {
            panic!("parsed as task wait")
        };
        assert_eq!(w.poll.timeout, DEFAULT_WAIT_TIMEOUT);

        for args in [
            &["spoolctl", "task", "submit", "t", "--timeout", "1s"][..],
            &["spoolctl", "task", "submit"],
            &["spoolctl", "task", "list", "--status", "done"],
            &["spoolctl", "task", "get"],
            &["spoolctl", "task"],
        ] {
            let err = Cli::try_parse_from(args).expect_err("a usage error");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    #[test]
    fn step_commands_parse_and_check_the_name() {
        for (args, name) in [
            (&["spoolctl", "step", "done", "dump"][..], "dump"),
            (
                &["spoolctl", "step", "check", "db1.part:2_of-3"],
                "db1.part:2_of-3",
            ),
        ] {
            let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Command::Step { command } = cli.command else {
                panic!("parsed as step")
            };
            let (StepCommand::Done(a) | StepCommand::Check(a)) = command;
            assert_eq!(a.name.as_str(), name);
        }
        let long = "a".repeat(spool_proto::MAX_STEP_NAME_BYTES + 1);
        for args in [
            &["spoolctl", "step", "done", ""][..],
            &["spoolctl", "step", "done", "a b"],
            &["spoolctl", "step", "check", "a/b"],
            &["spoolctl", "step", "check", &long],
            &["spoolctl", "step", "done"],
            &["spoolctl", "step"],
        ] {
            let err = Cli::try_parse_from(args).expect_err("a usage error");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    #[test]
    fn task_logs_and_follow_options() {
        let cli = Cli::try_parse_from(["spoolctl", "task", "logs", "x", "--attempt", "2", "-f"])
            .expect("valid");
        let Command::Task {
            command: TaskCommand::Logs(l),
        } = cli.command
        else {
            panic!("parsed as task logs")
        };
        assert_eq!((l.id.as_str(), l.attempt, l.follow), ("x", Some(2), true));

        let submit = |args: &[&str]| {
            let cli = Cli::try_parse_from(["spoolctl", "task", "submit", "t"].iter().chain(args))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Command::Task {
                command: TaskCommand::Submit(s),
            } = cli.command
            else {
                panic!("parsed as task submit")
            };
            s
        };
        let s = submit(&["--follow"]);
        assert!(s.follow && !s.wait);
        // --follow waits as long as the task runs, unless told otherwise.
        assert_eq!(
            s.follow_args(),
            FollowArgs {
                timeout: None,
                interval: DEFAULT_WAIT_INTERVAL
            }
        );
        let s = submit(&["--follow", "--timeout", "1m", "--interval", "100ms"]);
        assert_eq!(
            s.follow_args(),
            FollowArgs {
                timeout: Some(Duration::from_secs(60)),
                interval: Duration::from_millis(100)
            }
        );
        submit(&["--wait", "--follow"]);
        submit(&["--wait", "--interval", "1s"]);

        for args in [
            &["spoolctl", "task", "logs", "x", "--attempt", "0"][..],
            &["spoolctl", "task", "logs"],
            &["spoolctl", "task", "submit", "t", "--interval", "1s"],
            &["spoolctl", "task", "submit", "t", "--follow", "--json"],
            &["spoolctl", "locks", "x"],
        ] {
            let err = Cli::try_parse_from(args).expect_err("a usage error");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
        // clap does not see a global --json before the subcommand; `task submit` refuses it.
        Cli::try_parse_from(["spoolctl", "--json", "task", "submit", "t", "--follow"])
            .expect("parsed");
        Cli::try_parse_from(["spoolctl", "locks", "--json"]).expect("valid");
        Cli::try_parse_from(["spoolctl", "task", "steps", "x"]).expect("valid");
    }

    #[test]
    fn at_most_once_flags_need_their_parents() {
        let url = "http://127.0.0.1/";
        let ok = |args: &[&str]| {
            Cli::try_parse_from(["spoolctl", "send", url].iter().chain(args))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        };
        let usage = |args: &[&str]| {
            let err = Cli::try_parse_from(["spoolctl", "send", url].iter().chain(args))
                .expect_err("a missing parent flag");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        };
        let cli = ok(&[
            "--at-most-once",
            "--fingerprint",
            "order-7",
            "--reconcile-url",
            "http://127.0.0.1/orders?ref={fingerprint}",
            "--reconcile-method",
            "post",
            "--reconcile-header",
            "X-A: 1",
            "--reconcile-header",
            "X-B: 2",
            "--matches-pointer",
            "/data",
            "--reconcile-id-pointer",
            "/order_id",
            "--observation-window",
            "90s",
            "--remote-id-pointer",
            "/id",
        ]);
        let Command::Send(s) = cli.command else {
            panic!("parsed as send")
        };
        let a = &s.request.at_most_once;
        assert!(a.at_most_once);
        assert_eq!(a.reconcile_headers, ["X-A: 1", "X-B: 2"]);
        assert_eq!(a.observation_window, Some(Duration::from_secs(90)));
        assert_eq!(s.request.remote_id_pointer.as_deref(), Some("/id"));
        // The remote id pointer needs no mode.
        ok(&["--remote-id-pointer", "/id"]);
        ok(&["--at-most-once"]);

        usage(&["--fingerprint", "f"]);
        usage(&["--reconcile-url", "http://127.0.0.1/q"]);
        usage(&["--at-most-once", "--reconcile-method", "GET"]);
        usage(&["--at-most-once", "--reconcile-header", "X-A: 1"]);
        usage(&["--at-most-once", "--matches-pointer", "/data"]);
        usage(&["--at-most-once", "--reconcile-id-pointer", "/id"]);
        usage(&["--at-most-once", "--observation-window", "1h"]);
        usage(&[
            "--reconcile-url",
            "http://127.0.0.1/q",
            "--observation-window",
            "1h",
        ]);
        usage(&[
            "--at-most-once",
            "--reconcile-url",
            "http://127.0.0.1/q",
            "--observation-window",
            "soon",
        ]);
    }

    #[test]
    fn resolve_takes_one_outcome_and_a_note() {
        let parse =
            |args: &[&str]| Cli::try_parse_from(["spoolctl", "resolve", "x"].iter().chain(args));
        for args in [
            &["--succeeded", "--note", "n"][..],
            &["--succeeded", "--remote-id", "rec-1", "--note", "n"],
            &["--failed", "--note", "n"],
            &["--resend", "--note", "n"],
        ] {
            parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        }
        for args in [
            &["--note", "n"][..],
            &["--succeeded"],
            &["--succeeded", "--failed", "--note", "n"],
            &["--failed", "--resend", "--note", "n"],
            &["--failed", "--remote-id", "rec-1", "--note", "n"],
            &["--resend", "--remote-id", "rec-1", "--note", "n"],
        ] {
            let err = parse(args).expect_err("bad outcome flags");
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    #[test]
    fn send_defaults_match_wait_defaults() {
        let cli = Cli::try_parse_from(["spoolctl", "wait", "x"]).expect("valid");
        let Command::Wait(w) = cli.command else {
            panic!("parsed as wait")
        };
        assert_eq!(w.poll.timeout, DEFAULT_WAIT_TIMEOUT);
        assert_eq!(w.poll.interval, DEFAULT_WAIT_INTERVAL);
    }

    #[test]
    fn global_options_go_before_or_after_the_subcommand() {
        for args in [
            &["spoolctl", "--json", "--server", "unix:///s", "get", "x"][..],
            &["spoolctl", "get", "x", "--json", "--server", "unix:///s"][..],
        ] {
            let cli = Cli::try_parse_from(args).expect("valid");
            assert!(cli.global.json);
            assert_eq!(cli.global.server, "unix:///s");
        }
    }

    #[test]
    fn send_options_go_before_or_after_the_url() {
        let cli = Cli::try_parse_from([
            "spoolctl",
            "send",
            "http://127.0.0.1/",
            "-X",
            "PUT",
            "-H",
            "A: b",
        ])
        .expect("valid");
        let Command::Send(s) = cli.command else {
            panic!("parsed as send")
        };
        let r = s.request;
        assert_eq!(
            (r.url.as_str(), r.method.as_str()),
            ("http://127.0.0.1/", "PUT")
        );
        assert_eq!(r.headers, ["A: b"]);
    }

    #[test]
    fn timeout_needs_wait() {
        let err = Cli::try_parse_from(["spoolctl", "send", "http://127.0.0.1/", "--timeout", "1s"])
            .expect_err("--timeout without --wait");
        assert_eq!(err.exit_code(), 2);
    }
}
