//! `spoolctl task transitions ID`: every status change of one task, oldest first, with why;
//! the same columns as the delivery transition log.

use spool_proto::TaskTransitionView;

use crate::cli::TaskIdArgs;
use crate::client::Client;
use crate::commands::task::task_id;
use crate::commands::transitions::HEADER;
use crate::commands::Exit;
use crate::output::{Output, Table};

pub async fn run(client: &Client, args: TaskIdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    let list = client.task_transitions(id).await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        let mut table = Table::new();
        table.row(HEADER);
        for t in &list.transitions {
            table.row(row(t));
        }
        out.table(&table)?;
    }
    Ok(Exit::Success)
}

fn row(t: &TaskTransitionView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        t.at.clone(),
        t.from.map_or_else(dash, |s| s.as_str().to_owned()),
        t.to.as_str().to_owned(),
        t.attempt.to_string(),
        t.reason.clone(),
        t.note.clone().unwrap_or_else(dash),
    ]
}
