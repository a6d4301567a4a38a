//! `spoolctl list`: one page of deliveries, or with `--all` every page merged into one table
//! (or one JSON document), so columns line up across pages.

use spool_proto::units;
use spool_proto::{DeliveryList, DeliveryStatus, DeliveryView};

use crate::cli::{ListArgs, UsageError};
use crate::client::{Client, ListQuery};
use crate::commands::{fetch_pages, say_more, Exit, Listing};
use crate::output::{delivery_list_row, now_ms, Output, Table, LIST_HEADER};

pub async fn run(client: &Client, args: ListArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let status = args.status.map(DeliveryStatus::from);
    let limit = args.page.limit;
    let created_after = args
        .since
        .as_deref()
        .map(|t| moment("--since", t))
        .transpose()?;
    let newest_first = newest_first(&args, status);
    let (target, created_after) = (args.target.as_deref(), created_after.as_deref());
    let list: DeliveryList = fetch_pages(&args.page, |cursor| async move {
        let query = ListQuery {
            status,
            target,
            created_after,
            newest_first,
            limit,
            cursor: cursor.as_deref(),
        };
        client.list(&query).await
    })
    .await?;
    print(out, &list)?;
    say_more(&list);
    Ok(Exit::Success)
}

/// The order asked for: newest first, unless the listing is of work still to be sent (pending,
/// in flight), which reads best in the order it goes out.
fn newest_first(args: &ListArgs, status: Option<DeliveryStatus>) -> bool {
    if args.newest_first || args.oldest_first {
        return args.newest_first;
    }
    !matches!(
        status,
        Some(DeliveryStatus::Pending | DeliveryStatus::InFlight)
    )
}

/// `--since`, `--until`: a duration ago (`24h`, `7d`) or an RFC 3339 time, as RFC 3339.
pub(crate) fn moment(flag: &str, text: &str) -> Result<String, UsageError> {
    let now = crate::output::now_ms();
    let at = match units::parse_time(text) {
        Ok(at) => at,
        Err(_) => units::parse_duration(text)
            .map(|ago| now - ago.as_millis() as i64)
            .map_err(|_| {
                UsageError::new(format!(
                    "{flag} {text:?} is not a duration ago (24h, 7d) or an RFC 3339 time"
                ))
            })?,
    };
    Ok(units::format_time(at))
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

/// The table, or nothing at all when there are no rows: a crontab line that mails what `list
/// --status failed` prints mails nothing while nothing failed.
fn print(out: &mut Output<'_>, list: &DeliveryList) -> std::io::Result<()> {
    if out.is_json() {
        return out.json(list);
    }
    if list.deliveries.is_empty() {
        return Ok(());
    }
    let mut table = Table::new();
    table.row(LIST_HEADER);
    let now = now_ms();
    for d in &list.deliveries {
        table.row(delivery_list_row(d, now));
    }
    out.table(&table)
}
