//! `spoolctl version`: the CLI's own version; it does not contact spoold.

use crate::commands::Exit;
use crate::output::Output;

pub fn run(out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let version = env!("CARGO_PKG_VERSION");
    if out.is_json() {
        out.json(&serde_json::json!({ "version": version }))?;
    } else {
        out.line(&format!("spoolctl {version}"))?;
    }
    Ok(Exit::Success)
}
