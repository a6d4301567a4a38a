//! `spoolctl maildrop`: where the daemon's maildrop is, how many drops wait, and the drops it
//! refused (newest first) with why.

use crate::client::Client;
use crate::commands::Exit;
use crate::output::{Output, Table};

pub async fn run(client: &Client, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let view = client.maildrop().await?;
    if out.is_json() {
        out.json(&view)?;
        return Ok(Exit::Success);
    }
    out.line(&format!(
        "maildrop {}: {} waiting, {} refused",
        view.path,
        view.waiting,
        view.refused.len()
    ))?;
    if view.refused.is_empty() {
        return Ok(Exit::Success);
    }
    let mut table = Table::new();
    table.row(
        ["REFUSED_AT", "CODE", "DROP", "WHY"]
            .map(str::to_owned)
            .to_vec(),
    );
    for r in &view.refused {
        table.row(vec![
            r.refused_at.clone(),
            r.code.clone(),
            r.name.clone(),
            r.message.clone(),
        ]);
    }
    out.table(&table)?;
    Ok(Exit::Success)
}
