//! `spoolctl retry ID` and `spoolctl cancel ID`: the operator's two state changes. spoold
//! decides whether the change is allowed (409 `invalid_transition` otherwise).

use crate::cli::IdArgs;
use crate::client::{Client, Transition};
use crate::commands::{delivery_id, Exit};
use crate::output::Output;

pub async fn run(
    client: &Client,
    action: Transition,
    args: IdArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let delivery = client.transition(id, action).await?;
    if out.is_json() {
        out.json(&delivery)?;
    } else {
        out.delivery(action.as_str(), &delivery)?;
    }
    Ok(Exit::Success)
}
