//! `spoolctl task logs ID [--attempt N] [--follow]`: an attempt's output, byte for byte, copied
//! to stdout as it arrives (it may be large, and need not be UTF-8).

use spool_proto::TaskStatus;

use crate::cli::{TaskLogsArgs, UsageError};
use crate::client::{Client, ClientError, OutputQuery};
use crate::commands::task::task_id;
use crate::commands::Exit;
use crate::output::Output;

pub async fn run(
    client: &Client,
    args: TaskLogsArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    if out.is_json() {
        return Err(UsageError::new(
            "--json does not apply to `task logs`: it prints the output as it was kept",
        )
        .into());
    }
    let query = OutputQuery {
        attempt: args.attempt,
        follow: args.follow,
    };
    if !args.follow {
        stream(client, id, query, out).await?;
        return Ok(Exit::Success);
    }
    // Following a task that has not started yet (or an attempt that has not): wait for it, as
    // `task submit --follow` does, instead of answering that there is no output.
    let mut said = false;
    loop {
        match stream(client, id, query, out).await {
            Err(ClientError::Api { code, .. }) if code == OUTPUT_NOT_FOUND => {
                let task = client.task(id).await?;
                let wanted = args.attempt.unwrap_or(task.attempt.max(1));
                let coming = match task.status {
                    TaskStatus::Pending => task.attempt < wanted || task.attempt == 0,
                    TaskStatus::Running => task.attempt <= wanted,
                    _ => false,
                };
                if !coming {
                    return Err(ClientError::Api {
                        status: 404,
                        code,
                        message: format!(
                            "task {id} kept no output for attempt {wanted} (it is {})",
                            task.status
                        ),
                    }
                    .into());
                }
                if !said {
                    eprintln!(
                        "spoolctl: task {id} is {}; waiting for attempt {wanted} to start",
                        task.status
                    );
                    said = true;
                }
                tokio::time::sleep(WAIT_FOR_START).await;
            }
            done => {
                done?;
                return Ok(Exit::Success);
            }
        }
    }
}

/// How often a follower asks again for an attempt that has not started.
const WAIT_FOR_START: std::time::Duration = std::time::Duration::from_millis(200);

/// spoold's error code for an attempt without output (none kept, or not there yet).
pub const OUTPUT_NOT_FOUND: &str = "output_not_found";

/// Copies the output `query` names to `out`, each chunk flushed as it comes. Shared with
/// `task submit --follow`.
pub async fn stream(
    client: &Client,
    id: &str,
    query: OutputQuery,
    out: &mut Output<'_>,
) -> Result<(), ClientError> {
    client
        .task_output(id, query, |chunk| {
            out.raw(chunk)?;
            out.flush()
        })
        .await
}
