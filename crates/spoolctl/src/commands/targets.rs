//! `spoolctl targets`: one row per target with work waiting, recent failures or a pause; with
//! `--all` every page merged into one table (or one JSON document).

use spool_proto::{TargetList, TargetView};

use crate::cli::TargetsArgs;
use crate::client::Client;
use crate::commands::Exit;
use crate::output::{Output, Table};

/// The header of `targets`.
const HEADER: [&str; 8] = [
    "TARGET",
    "PENDING",
    "IN_FLIGHT",
    "FAILED_1H",
    "CONNECT_FAILS",
    "PAUSED_UNTIL",
    "LAST_ERROR",
    "LAST_SUCCESS",
];

pub async fn run(client: &Client, args: TargetsArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let mut cursor = args.cursor.filter(|c| !c.is_empty());
    let mut targets = Vec::new();
    loop {
        let page = client.targets(args.limit, cursor.as_deref()).await?;
        let next = page.next_cursor.clone().filter(|c| !c.is_empty());
        if !args.all {
            print(out, &page)?;
            if let Some(next) = next {
                eprintln!("next cursor: {next}");
            }
            return Ok(Exit::Success);
        }
        targets.extend(page.targets);
        match next {
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                anyhow::bail!("spoold returned the same next cursor twice: {next}")
            }
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    print(
        out,
        &TargetList {
            targets,
            next_cursor: None,
        },
    )?;
    Ok(Exit::Success)
}

fn print(out: &mut Output<'_>, list: &TargetList) -> std::io::Result<()> {
    if out.is_json() {
        return out.json(list);
    }
    let mut table = Table::new();
    table.row(HEADER);
    for t in &list.targets {
        table.row(row(t));
    }
    out.table(&table)
}

fn row(t: &TargetView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        t.origin.clone(),
        t.pending.to_string(),
        t.in_flight.to_string(),
        t.failed_last_hour.to_string(),
        t.connect_failures.to_string(),
        t.paused_until.clone().unwrap_or_else(dash),
        t.last_error_code.clone().unwrap_or_else(dash),
        t.last_success_at.clone().unwrap_or_else(dash),
    ]
}
