//! `spoolctl transitions ID`: every status change of one delivery, oldest first, with why.

use spool_proto::TransitionView;

use crate::cli::IdArgs;
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::{Output, Table};

/// The header of `transitions` (and `task transitions`).
pub const HEADER: [&str; 6] = ["AT", "FROM", "TO", "ATTEMPT", "REASON", "NOTE"];

pub async fn run(client: &Client, args: IdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let list = client.transitions(id).await?;
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

fn row(t: &TransitionView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        t.at.clone(),
        t.from.map_or_else(dash, |s| s.to_string()),
        t.to.to_string(),
        t.attempt.to_string(),
        t.reason.clone(),
        t.note.clone().unwrap_or_else(dash),
    ]
}
