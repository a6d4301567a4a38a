//! `spoolctl task logs ID [--attempt N] [--follow]`: an attempt's output, byte for byte, copied
//! to stdout as it arrives (it may be large, and need not be UTF-8).

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
    stream(client, id, query, out).await?;
    Ok(Exit::Success)
}

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
