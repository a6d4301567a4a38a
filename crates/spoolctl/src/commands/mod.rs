//! One file per subcommand. `run` builds what a command needs (client, runtime, output) and
//! turns its outcome into an exit status; the server and token are only looked at by commands
//! that talk to spoold, so `version` and `completion` work whatever the environment says.

mod attempts;
mod checks;
mod completion;
mod get;
mod list;
mod locks;
mod maildrop;
mod receive;
mod resolve;
mod send;
mod stats;
mod step;
mod targets;
mod task;
mod transfer;
mod transition;
mod transitions;
mod verify;
mod version;
mod wait;

use std::future::Future;
use std::io::{self, Write};

use anyhow::Context as _;

use crate::cli::{Cli, Command, GlobalArgs, PageArgs, UsageError};
use crate::client::{Client, Server, Token, Transition};
use crate::output::Output;

/// How a successful run ends. Errors end with 1 (runtime) or 2 (usage) instead; see `main`.
/// The exception is `step check`, whose errors end as [`Exit::StepUnknown`] because 1 means
/// "not done" there. The codes are documented in `cli` (help texts) and the book (`docs/src/cli.md`); scripts
/// depend on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Done; for `wait` and `task wait`, the delivery or task succeeded.
    Success,
    /// `wait`, `task wait`: the delivery or task failed.
    Failed,
    /// `wait`, `task wait`: the delivery or task was canceled.
    Canceled,
    /// `wait`, `task wait`: not in a final status when the timeout passed.
    WaitTimedOut,
    /// `task wait`: the task itself timed out (its type's `timeout` or `queue_timeout`).
    TaskTimedOut,
    /// `wait`, `task wait`: the delivery or task is in manual review; a person decides.
    ManualReview,
    /// `wait`: an at-most-once delivery's outcome is unknown (it may have arrived); spoold
    /// reconciles it with the target, or a person resolves it.
    Unknown,
    /// `step check`: the step is not done. 1, like a runtime error elsewhere.
    NotDone,
    /// `step done`: the attempt is no longer the task's running attempt; the script should
    /// stop.
    NotCurrentAttempt,
    /// `step check`: spoold could not say whether the step is done (an error, reported on
    /// stderr): not to be taken for "not done".
    StepUnknown,
    /// `verify`: the signature is missing or matches no key.
    SignatureInvalid,
    /// `verify`: the timestamp is outside the tolerance.
    SignatureTime,
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failed => 3,
            Exit::Canceled => 4,
            Exit::WaitTimedOut => 5,
            Exit::TaskTimedOut => 6,
            Exit::ManualReview => 7,
            Exit::Unknown => 10,
            Exit::NotDone => 1,
            Exit::NotCurrentAttempt => 8,
            Exit::StepUnknown => 9,
            Exit::SignatureInvalid => 11,
            Exit::SignatureTime => 12,
        }
    }
}

/// spoold refused a write (`send`, `task submit`) for good (see
/// [`ClientError::is_refusal`](crate::client::ClientError::is_refusal)): nothing was queued, and
/// the same command would be refused again. `main` exits [`EXIT_REFUSED`] for it, so that a job
/// tells "fix it" from "try again later" (1). The message is the whole line, as it is printed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(String);

/// The exit status of a [`Refused`] write.
pub const EXIT_REFUSED: u8 = 13;

impl Refused {
    /// `err`, spoold's refusal of a write, with what a job must know: `what` (`queued`,
    /// `submitted`) was not done, and doing it again as it is will not help.
    pub fn new(err: &anyhow::Error, what: &str) -> Refused {
        Refused(format!(
            "{err:#}; nothing was {what}, and the same command would be refused again"
        ))
    }
}

/// Runs the parsed command line, writing results to stdout.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    let stdout = io::stdout();
    let mut stdout = stdout.lock();
    let exit = {
        let width = terminal_size::terminal_size_of(io::stdout()).map(|(w, _)| usize::from(w.0));
        let out = &mut Output::new(&mut stdout, cli.global.json)
            .fit_to(width)
            .coloured(crate::output::colour_wanted());
        let global = &cli.global;
        match cli.command {
            Command::Version => version::run(out)?,
            Command::Completion { shell } => completion::run(shell, out)?,
            Command::Man => completion::man(out)?,
            Command::Send(args) => block_on(send::run(&connect(global)?, *args, out))?,
            Command::List(args) => block_on(list::run(&connect(global)?, args, out))?,
            Command::Get(args) => block_on(get::run(&connect(global)?, args, out))?,
            Command::Attempts(args) => block_on(attempts::run(&connect(global)?, args, out))?,
            Command::Transitions(args) => block_on(transitions::run(&connect(global)?, args, out))?,
            Command::Retry(args) => block_on(transition::run(
                &connect(global)?,
                Transition::Retry,
                args,
                out,
            ))?,
            Command::Cancel(args) => block_on(transition::run(
                &connect(global)?,
                Transition::Cancel,
                args,
                out,
            ))?,
            Command::Export(args) => block_on(transfer::export(&connect(global)?, args, out))?,
            Command::Import(args) => block_on(transfer::import(&connect(global)?, args, out))?,
            Command::Resolve(args) => block_on(resolve::run(&connect(global)?, args, out))?,
            Command::Checks(args) => block_on(checks::run(&connect(global)?, args, out))?,
            Command::Wait(args) => block_on(wait::run(&connect(global)?, args, out))?,
            Command::Stats => block_on(stats::run(&connect(global)?, out))?,
            Command::Targets(args) => block_on(targets::run(&connect(global)?, args, out))?,
            Command::Maildrop => block_on(maildrop::run(&connect(global)?, out))?,
            Command::Task { command } => block_on(task::run(&connect(global)?, command, out))?,
            Command::Locks => block_on(locks::run(&connect(global)?, out))?,
            Command::Receive(args) => block_on(receive::run(args, out))?,
            Command::Verify(args) => verify::run(args, out)?,
            Command::Step { command } => {
                let (client, env) = step::connect(global)?;
                block_on(step::run(&client, &env, command, out))?
            }
        }
    };
    stdout.flush().context("write output")?;
    Ok(exit)
}

/// Runs one command's future on a current-thread runtime: the CLI makes one request at a time.
fn block_on<F: Future<Output = anyhow::Result<Exit>>>(command: F) -> anyhow::Result<Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?
        .block_on(command)
}

/// The client for `--server` and `--token-file`. A bad server is a usage error; an unreadable
/// token file is a runtime error, like an unreadable data file.
fn connect(global: &GlobalArgs) -> anyhow::Result<Client> {
    connect_with(global, None)
}

/// Like [`connect`], with `token` (when there is one) instead of `--token-file`'s, which is
/// then not read at all.
fn connect_with(global: &GlobalArgs, token: Option<Token>) -> anyhow::Result<Client> {
    let server = Server::parse(&global.server).map_err(|e| {
        // The messages name --server; a value from the environment is named where it is.
        let message = e.to_string();
        UsageError::new(if global.server_from_env {
            format!(
                "{} (from the environment; --server overrides it)",
                message.replacen("--server", "SPOOLD_URL", 1)
            )
        } else {
            message
        })
    })?;
    let token = match token {
        Some(token) => Some(token),
        None => global
            .token_file
            .as_deref()
            .map(Token::from_file)
            .transpose()?,
    };
    Ok(Client::new(server, token))
}

/// A paged listing of the API: its entries and the cursor of the next page.
pub trait Listing: Sized {
    type Entry;
    fn next_cursor(&self) -> Option<&str>;
    fn into_entries(self) -> Vec<Self::Entry>;
    /// One listing holding every page's entries, with no next page.
    fn merged(entries: Vec<Self::Entry>) -> Self;
}

/// Says on stderr, after a page is printed, how to see the rest when there is more: `more: run
/// again with --cursor C, or --all`.
fn say_more<L: Listing>(listing: &L) {
    if let Some(next) = listing.next_cursor().filter(|c| !c.is_empty()) {
        eprintln!("more: run again with --cursor {next}, or --all");
    }
}

/// One page as asked (its next cursor, if any, for [`say_more`]), or with `--all` every page
/// merged into one listing, so that a table's columns line up across pages.
async fn fetch_pages<L, F, Fut>(page: &PageArgs, mut fetch: F) -> anyhow::Result<L>
where
    L: Listing,
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<L, crate::client::ClientError>>,
{
    let mut cursor = page.cursor.clone().filter(|c| !c.is_empty());
    let mut entries = Vec::new();
    loop {
        let listing = fetch(cursor.clone()).await?;
        let next = listing
            .next_cursor()
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if !page.all {
            return Ok(listing);
        }
        entries.extend(listing.into_entries());
        match next {
            // A server that hands back the cursor it was given would keep us here forever.
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                anyhow::bail!("spoold returned the same next cursor twice: {next}")
            }
            Some(next) => cursor = Some(next),
            None => return Ok(L::merged(entries)),
        }
    }
}

/// A delivery id from the command line: an empty one would address the collection instead.
fn delivery_id(id: &str) -> Result<&str, UsageError> {
    non_empty_id(id, "delivery")
}

/// An operator's action on each of several IDs, in order: `act` makes it, `show` prints what
/// came back. With one ID its error is the command's; with several, one that fails is reported
/// on stderr (`spoolctl: ID: …`) and the rest still go ahead, and the command fails at the end
/// (`N of M deliveries could not retry`).
pub(crate) async fn each_id<T, F, Fut>(
    ids: &[String],
    noun: &str,
    verb: &str,
    out: &mut Output<'_>,
    mut act: F,
    show: impl Fn(&mut Output<'_>, &T) -> anyhow::Result<()>,
) -> anyhow::Result<Exit>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut failed = 0;
    for id in ids {
        let done = match non_empty_id(id, noun) {
            Ok(id) => act(id.to_owned()).await,
            Err(e) => Err(e.into()),
        };
        match done {
            Ok(item) => show(out, &item)?,
            Err(e) if ids.len() == 1 => return Err(e),
            Err(e) => {
                eprintln!("spoolctl: {id}: {e:#}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        let plural = if noun == "delivery" {
            "deliveries"
        } else {
            "tasks"
        };
        return Err(anyhow::anyhow!(
            "{failed} of {} {plural} could not {verb}",
            ids.len()
        ));
    }
    Ok(Exit::Success)
}

/// An id from the command line, trimmed; `what` names it in the message.
fn non_empty_id<'a>(id: &'a str, what: &str) -> Result<&'a str, UsageError> {
    let id = id.trim();
    if id.is_empty() {
        return Err(UsageError::new(format!("{what} ID must not be empty")));
    }
    Ok(id)
}
