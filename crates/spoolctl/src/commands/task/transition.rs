//! `spoolctl task cancel`, `task retry` and `task resolve ID`. cancel and retry take task IDs,
//! or a filter (`POST /v1/tasks/bulk`). spoold decides whether each change is allowed: one
//! named by ID that is not is an error (409 `invalid_transition`), one matched by a filter is
//! skipped and counted; a running task's cancel is a request, said so.

use spool_proto::{ResolveTask, TaskBulkRequest, TaskFilter, TaskResolveOutcome, TaskStatus};

use crate::cli::{TaskActionArgs, TaskResolveArgs, UsageError};
use crate::client::{Client, Transition};
use crate::commands::list::moment;
use crate::commands::transition::{bulk_action, Ask};
use crate::commands::{each_id, Exit};
use crate::output::Output;

pub async fn run(
    client: &Client,
    action: Transition,
    args: TaskActionArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let filter = TaskFilter {
        status: args.status.map(TaskStatus::from),
        task_type: args.task_type.clone(),
        created_after: args
            .since
            .as_deref()
            .map(|t| moment("--since", t))
            .transpose()?,
        created_before: args
            .until
            .as_deref()
            .map(|t| moment("--until", t))
            .transpose()?,
    };
    let by_filter = filter != TaskFilter::default();
    match (args.ids.is_empty(), by_filter) {
        (false, true) => Err(UsageError::new(format!(
            "task {} takes task IDs or a filter, not both",
            action.as_str()
        ))
        .into()),
        (true, false) => Err(UsageError::new(format!(
            "task {} needs task IDs, or a filter: --type, --status, --since, --until",
            action.as_str()
        ))
        .into()),
        (false, false) if args.dry_run || args.yes => {
            Err(UsageError::new("--dry-run and --yes go with a filter, not with IDs").into())
        }
        (false, false) => {
            each_id(
                &args.ids,
                "task",
                action.as_str(),
                out,
                |id| async move { Ok(client.task_transition(&id, action).await?) },
                |out, task| {
                    if out.is_json() {
                        return Ok(out.json(task)?);
                    }
                    out.task(action.as_str(), task)?;
                    if task.cancel_requested {
                        out.line("cancel requested: spoold is stopping the running attempt")?;
                    }
                    Ok(())
                },
            )
            .await
        }
        (true, true) => {
            let request = |dry_run: bool| TaskBulkRequest {
                action: Some(bulk_action(action)),
                filter: Some(filter.clone()),
                dry_run: Some(dry_run),
            };
            let ask = Ask {
                action,
                noun: "tasks",
                dry_run: args.dry_run,
                yes: args.yes,
            };
            ask.run(out, |dry_run| {
                let request = request(dry_run);
                async move { client.task_bulk(&request).await }
            })
            .await
        }
    }
}

/// `task resolve`: clap has made sure exactly one outcome is given.
pub async fn resolve(
    client: &Client,
    args: TaskResolveArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
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
    let request = &request;
    each_id(
        &args.ids,
        "task",
        "resolve",
        out,
        |id| async move { Ok(client.resolve_task(&id, request).await?) },
        |out, task| {
            if out.is_json() {
                Ok(out.json(task)?)
            } else {
                Ok(out.task("resolve", task)?)
            }
        },
    )
    .await
}
