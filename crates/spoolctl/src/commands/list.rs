//! `spoolctl list`: one page of deliveries, or with `--all` every page merged into one table
//! (or one JSON document), so columns line up across pages.

use spool_proto::{DeliveryList, DeliveryStatus, DeliveryView};

use crate::cli::ListArgs;
use crate::client::{Client, ListQuery};
use crate::commands::{fetch_pages, Exit, Listing};
use crate::output::{delivery_row, Output, Table, LIST_HEADER};

pub async fn run(client: &Client, args: ListArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let status = args.status.map(DeliveryStatus::from);
    let limit = args.page.limit;
    let list: DeliveryList = fetch_pages(&args.page, |cursor| async move {
        let query = ListQuery {
            status,
            limit,
            cursor: cursor.as_deref(),
        };
        client.list(&query).await
    })
    .await?;
    print(out, &list)?;
    Ok(Exit::Success)
}

impl Listing for DeliveryList {
    type Entry = DeliveryView;

    fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    fn into_entries(self) -> Vec<DeliveryView> {
        self.deliveries
    }

    fn merged(deliveries: Vec<DeliveryView>) -> Self {
        DeliveryList {
            count: deliveries.len(),
            deliveries,
            next_cursor: None,
        }
    }
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
