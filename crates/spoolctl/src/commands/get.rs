//! `spoolctl get ID`: the whole delivery (see `detail`), or with `--body` only its body, byte
//! for byte.

use std::io::Write as _;

use anyhow::Context as _;
use spool_proto::DeliveryStatus;

use crate::cli::GetArgs;
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::detail;
use crate::output::Output;

pub async fn run(client: &Client, args: GetArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let delivery = client.get(id, args.reveal).await?;
    if args.body {
        let body = detail::body_bytes(&delivery).context("decode the body")?;
        out.raw(&body)?;
        std::io::stdout().flush().context("write the body")?;
    } else if out.is_json() {
        out.json(&delivery)?;
    } else {
        let mut shown = detail::render_styled(&delivery, out.is_coloured());
        // A success clears `lastError`; what came before it is in the attempts.
        let cleared = delivery
            .last_error
            .as_deref()
            .unwrap_or_default()
            .is_empty();
        if delivery.status == DeliveryStatus::Succeeded && cleared {
            shown.push_str(&detail::earlier_error(&client.attempts(id).await?.attempts));
        }
        out.raw(shown.as_bytes())?;
    }
    Ok(Exit::Success)
}
