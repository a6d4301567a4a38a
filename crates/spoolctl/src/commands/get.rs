//! `spoolctl get ID`: one delivery with its last error and next attempt time.

use crate::cli::GetArgs;
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::{Details, Output};

pub async fn run(client: &Client, args: GetArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let delivery = client.get(id, args.reveal).await?;
    if out.is_json() {
        out.json(&delivery)?;
    } else {
        out.delivery("get", &delivery, Details::Full)?;
    }
    Ok(Exit::Success)
}
