//! `spoolctl attempts ID`: the attempt history of one delivery, oldest first.

use crate::cli::IdArgs;
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::{attempt_row, Output, Table, ATTEMPTS_HEADER};

pub async fn run(client: &Client, args: IdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let list = client.attempts(id).await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        let mut table = Table::new();
        table.row(ATTEMPTS_HEADER);
        for attempt in &list.attempts {
            table.row(attempt_row(attempt));
        }
        out.table(&table)?;
    }
    Ok(Exit::Success)
}
