//! `spoolctl task …`: ops tasks, the task types declared in spoold's configuration. One file
//! per subcommand, as for deliveries; rows and statuses are printed by `output`.

mod attempts;
mod follow;
mod get;
mod list;
mod logs;
mod steps;
mod submit;
mod transition;
mod transitions;
mod types;
mod wait;

use crate::cli::{TaskCommand, UsageError};
use crate::client::{Client, Transition};
use crate::commands::{non_empty_id, Exit};
use crate::output::Output;

/// Runs one `task` subcommand.
pub async fn run(
    client: &Client,
    command: TaskCommand,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    match command {
        TaskCommand::Submit(args) => submit::run(client, args, out).await,
        TaskCommand::List(args) => list::run(client, args, out).await,
        TaskCommand::Get(args) => get::run(client, args, out).await,
        TaskCommand::Attempts(args) => attempts::run(client, args, out).await,
        TaskCommand::Transitions(args) => transitions::run(client, args, out).await,
        TaskCommand::Steps(args) => steps::run(client, args, out).await,
        TaskCommand::Logs(args) => logs::run(client, args, out).await,
        TaskCommand::Cancel(args) => transition::run(client, Transition::Cancel, args, out).await,
        TaskCommand::Retry(args) => transition::run(client, Transition::Retry, args, out).await,
        TaskCommand::Resolve(args) => transition::resolve(client, args, out).await,
        TaskCommand::Types => types::run(client, out).await,
        TaskCommand::Wait(args) => wait::run(client, args, out).await,
    }
}

/// A task id from the command line: an empty one would address the collection instead.
fn task_id(id: &str) -> Result<&str, UsageError> {
    non_empty_id(id, "task")
}
