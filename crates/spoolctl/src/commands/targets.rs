//! `spoolctl targets`: one row per target with work waiting, recent failures or a pause; with
//! `--all` every page merged into one table (or one JSON document). `targets pause|resume
//! TARGET`: an operator's pause, and its end.

use spool_proto::{TargetList, TargetView};

use crate::cli::{TargetsArgs, TargetsCommand};
use crate::client::Client;
use crate::commands::{fetch_pages, Exit, Listing};
use crate::output::{Output, Table};

/// The header of `targets`.
/// `FAILED_1H` counts failed attempts (retried or not: an outage shows at once), `GAVE_UP_1H`
/// the deliveries that failed for good.
const HEADER: [&str; 11] = [
    "TARGET",
    "PENDING",
    "IN_FLIGHT",
    "FAILED_1H",
    "GAVE_UP_1H",
    "CONNECT_FAILS",
    "PAUSE",
    "PAUSED_UNTIL",
    "LAST_ERROR",
    "LAST_FAILURE",
    "LAST_SUCCESS",
];

pub async fn run(client: &Client, args: TargetsArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    if let Some(command) = args.command {
        let (target, pause) = match command {
            TargetsCommand::Pause { target } => (target, true),
            TargetsCommand::Resume { target } => (target, false),
        };
        let done = client.pause_target(&target, pause).await?;
        if out.is_json() {
            out.json(&done)?;
        } else {
            let action = if pause { "paused" } else { "resumed" };
            out.line(&format!("{action}  {}", done.origin))?;
        }
        return Ok(Exit::Success);
    }
    let limit = args.page.limit;
    let list: TargetList = fetch_pages(&args.page, |cursor| async move {
        client.targets(limit, cursor.as_deref()).await
    })
    .await?;
    print(out, &list)?;
    Ok(Exit::Success)
}

impl Listing for TargetList {
    type Entry = TargetView;

    fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    fn into_entries(self) -> Vec<TargetView> {
        self.targets
    }

    fn merged(targets: Vec<TargetView>) -> Self {
        TargetList {
            targets,
            next_cursor: None,
        }
    }
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
        t.failed_attempts_last_hour.to_string(),
        t.failed_last_hour.to_string(),
        t.connect_failures.to_string(),
        t.pause_reason.clone().unwrap_or_else(dash),
        t.paused_until.clone().unwrap_or_else(|| {
            match t.pause_reason.as_deref() {
                // Until an operator resumes it.
                Some("gone" | "operator") => "resume".to_owned(),
                _ => dash(),
            }
        }),
        t.last_error_code.clone().unwrap_or_else(dash),
        t.last_failure_at.clone().unwrap_or_else(dash),
        t.last_success_at.clone().unwrap_or_else(dash),
    ]
}
