//! `spoolctl list`: one page of deliveries, or with `--all` every page merged into one table
//! (or one JSON document), so columns line up across pages.

use spool_proto::{DeliveryList, DeliveryStatus};

use crate::cli::ListArgs;
use crate::client::{Client, ListQuery};
use crate::commands::Exit;
use crate::output::{delivery_row, Output, Table, LIST_HEADER};

pub async fn run(client: &Client, args: ListArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let status = args.status.map(DeliveryStatus::from);
    let mut cursor = args.cursor.filter(|c| !c.is_empty());
    let mut deliveries = Vec::new();
    loop {
        let query = ListQuery {
            status,
            limit: args.limit,
            cursor: cursor.as_deref(),
        };
        let page = client.list(&query).await?;
        let next = page.next_cursor.clone().filter(|c| !c.is_empty());
        if !args.all {
            print(out, &page)?;
            if let Some(next) = next {
                eprintln!("next cursor: {next}");
            }
            return Ok(Exit::Success);
        }
        deliveries.extend(page.deliveries);
        match next {
            // A server that hands back the cursor it was given would keep us here forever.
            Some(next) if cursor.as_deref() == Some(next.as_str()) => {
                anyhow::bail!("spoold returned the same next cursor twice: {next}")
            }
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let merged = DeliveryList {
        count: deliveries.len(),
        deliveries,
        next_cursor: None,
    };
    print(out, &merged)?;
    Ok(Exit::Success)
}

fn print(out: &mut Output<'_>, list: &DeliveryList) -> std::io::Result<()> {
    if out.is_json() {
        return out.json(list);
    }
    let mut table = Table::new();
    table.row(LIST_HEADER);
    for d in &list.deliveries {
        table.row(delivery_row(None, d));
    }
    out.table(&table)
}
