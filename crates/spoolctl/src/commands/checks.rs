//! `spoolctl checks ID`: the reconciliation checks of one at-most-once delivery, oldest first:
//! what spoold asked the target while the delivery's outcome was `unknown`, and what it heard.

use std::time::Duration;

use spool_proto::units::format_duration;
use spool_proto::CheckView;

use crate::cli::IdArgs;
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::{short_error, Output, Table};

/// The header of `checks`; like `attempts`, the error comes last so a terminal cuts only it.
const HEADER: [&str; 6] = ["AT", "HTTP", "MATCHES", "CODE", "DURATION", "ERROR"];

pub async fn run(client: &Client, args: IdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    let list = client.checks(id).await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        let mut table = Table::new();
        table.row(HEADER);
        for check in &list.checks {
            table.row(row(check));
        }
        out.table(&table)?;
    }
    Ok(Exit::Success)
}

/// One check; `-` stands for an absent value.
fn row(c: &CheckView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        c.at.clone(),
        c.http_status.map_or_else(dash, |s| s.to_string()),
        c.matches.map_or_else(dash, |m| m.to_string()),
        c.error_code.clone().unwrap_or_else(dash),
        u64::try_from(c.duration_ms)
            .map_or_else(|_| dash(), |ms| format_duration(Duration::from_millis(ms))),
        c.error
            .as_deref()
            .map(short_error)
            .filter(|e| !e.is_empty())
            .unwrap_or_else(dash),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_rows() {
        let check = |json: &str, expected: [&str; 6]| {
            let c: CheckView = serde_json::from_str(json).expect("valid check");
            assert_eq!(row(&c), expected, "{json}");
        };
        check(
            r#"{"at":"2026-07-18T12:00:00.000Z","httpStatus":200,"matches":1,"durationMs":12}"#,
            ["2026-07-18T12:00:00.000Z", "200", "1", "-", "12ms", "-"],
        );
        check(
            r#"{"at":"2026-07-18T12:00:05.000Z","httpStatus":503,"errorCode":"http_status",
                "error":"HTTP 503: busy\nmore","durationMs":1500}"#,
            [
                "2026-07-18T12:00:05.000Z",
                "503",
                "-",
                "http_status",
                "1s500ms",
                "HTTP 503: busy …",
            ],
        );
        check(
            r#"{"at":"2026-07-18T12:00:09.000Z","errorCode":"timeout",
                "error":"no response within 10s","durationMs":0}"#,
            [
                "2026-07-18T12:00:09.000Z",
                "-",
                "-",
                "timeout",
                "0s",
                "no response within 10s",
            ],
        );
    }
}
