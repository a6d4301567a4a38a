//! `spoolctl targets`: one row per target with work waiting, recent failures or a pause, and
//! one row under it for each of its URLs that answered 410 Gone; with `--all` every page
//! merged into one table (or one JSON document). `targets pause|resume TARGET`: an operator's
//! pause, and its end (a URL's: the end of its 410).

use spool_proto::{TargetList, TargetView};

use crate::cli::{TargetsArgs, TargetsCommand};
use crate::client::Client;
use crate::commands::{fetch_pages, say_more, Exit, Listing};
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
            out.line(&format!(
                "{action}  {}",
                done.url.as_deref().unwrap_or(&done.origin)
            ))?;
            for url in done
                .resumed_urls
                .iter()
                .filter(|u| done.url.as_ref() != Some(*u))
            {
                out.line(&format!("resumed  {url} (gone)"))?;
            }
            if let Some(n) = done.unparked.filter(|n| *n > 0) {
                out.line(&format!(
                    "{n} deliveries that waited for a gone URL are due again"
                ))?;
            }
        }
        return Ok(Exit::Success);
    }
    let limit = args.page.limit;
    let list: TargetList = fetch_pages(&args.page, |cursor| async move {
        client.targets(limit, cursor.as_deref()).await
    })
    .await?;
    print(out, &list)?;
    say_more(&list);
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
        for gone in &t.gone_urls {
            table.row(gone_row(gone));
        }
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
                Some("operator") => "resume".to_owned(),
                _ => dash(),
            }
        }),
        t.last_error_code.clone().unwrap_or_else(dash),
        t.last_failure_at.clone().unwrap_or_else(dash),
        t.last_success_at.clone().unwrap_or_else(dash),
    ]
}

/// A URL of the target above that answered 410 Gone: held until resumed (`PAUSED_UNTIL`), its
/// 410 the `LAST_FAILURE`.
fn gone_row(g: &spool_proto::GoneUrlView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        format!("  {}", g.url),
        dash(),
        dash(),
        dash(),
        dash(),
        dash(),
        "gone".to_owned(),
        "resume".to_owned(),
        "gone".to_owned(),
        g.since.clone(),
        dash(),
    ]
}
