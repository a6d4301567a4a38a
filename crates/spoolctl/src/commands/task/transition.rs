//! `spoolctl task cancel ID`, `task retry ID` and `task resolve ID`. spoold decides whether the
//! change is allowed (409 `invalid_transition` otherwise); a running task's cancel is a request,
//! said so.

use spool_proto::{ResolveTask, TaskResolveOutcome};

use crate::cli::{TaskIdArgs, TaskResolveArgs, UsageError};
use crate::client::{Client, Transition};
use crate::commands::task::task_id;
use crate::commands::Exit;
use crate::output::Output;

pub async fn run(
    client: &Client,
    action: Transition,
    args: TaskIdArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    let task = client.task_transition(id, action).await?;
    if out.is_json() {
        out.json(&task)?;
    } else {
        out.task(action.as_str(), &task)?;
        if task.cancel_requested {
            out.line("cancel requested: spoold is stopping the running attempt")?;
        }
    }
    Ok(Exit::Success)
}

/// `task resolve`: clap has made sure exactly one outcome is given.
pub async fn resolve(
    client: &Client,
    args: TaskResolveArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    // An empty note would reach spoold only to be refused there.
    let note = args.note.trim();
    if note.is_empty() {
        return Err(UsageError::new("--note must not be empty").into());
    }
    let request = ResolveTask {
        outcome: Some(if args.succeeded {
            TaskResolveOutcome::Succeeded
        } else {
            TaskResolveOutcome::Failed
        }),
        note: Some(note.to_owned()),
    };
    let task = client.resolve_task(id, &request).await?;
    if out.is_json() {
        out.json(&task)?;
    } else {
        out.task("resolve", &task)?;
    }
    Ok(Exit::Success)
}
