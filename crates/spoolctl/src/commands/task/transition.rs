//! `spoolctl task cancel ID` and `spoolctl task retry ID`. spoold decides whether the change is
//! allowed (409 `invalid_transition` otherwise); a running task's cancel is a request, said so.

use crate::cli::TaskIdArgs;
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
