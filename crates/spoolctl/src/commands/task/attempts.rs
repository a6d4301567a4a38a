//! `spoolctl task attempts ID`: the attempts of one task, oldest first: how each process
//! ended (exit code or signal), how long it ran, and the error spoold recorded.

use std::time::Duration;

use spool_proto::units::format_duration;
use spool_proto::TaskAttemptView;

use crate::cli::TaskIdArgs;
use crate::client::Client;
use crate::commands::task::task_id;
use crate::commands::Exit;
use crate::output::{short_error, Output, Table};

/// The header of `task attempts`; like `attempts`, the error comes last so a terminal cuts
/// only it.
const HEADER: [&str; 8] = [
    "ATTEMPT", "STARTED", "OUTCOME", "EXIT", "SIGNAL", "CODE", "DURATION", "ERROR",
];

pub async fn run(client: &Client, args: TaskIdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    let list = client.task_attempts(id).await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        let mut table = Table::new();
        table.row(HEADER);
        for attempt in &list.attempts {
            table.row(row(attempt));
        }
        out.table(&table)?;
    }
    Ok(Exit::Success)
}

/// One attempt; `-` stands for an absent value, `running` for an outcome not known yet.
fn row(a: &TaskAttemptView) -> Vec<String> {
    let dash = || "-".to_owned();
    vec![
        a.number.to_string(),
        a.started_at.clone(),
        a.outcome.clone().unwrap_or_else(|| "running".to_owned()),
        a.exit_code.map_or_else(dash, |c| c.to_string()),
        a.signal.map_or_else(dash, |s| s.to_string()),
        a.error_code.clone().unwrap_or_else(dash),
        a.duration_ms
            .and_then(|ms| u64::try_from(ms).ok())
            .map_or_else(dash, |ms| format_duration(Duration::from_millis(ms))),
        a.error
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
    fn attempt_rows() {
        let a: TaskAttemptView = serde_json::from_str(
            r#"{"number":1,"startedAt":"2026-07-18T12:00:00.000Z","outcome":"timed_out",
                "signal":9,"errorCode":"timed_out","error":"ran longer than its timeout of 500ms",
                "durationMs":700,"executorId":"host:1","killed":true}"#,
        )
        .expect("valid attempt");
        assert_eq!(
            row(&a),
            [
                "1",
                "2026-07-18T12:00:00.000Z",
                "timed_out",
                "-",
                "9",
                "timed_out",
                "700ms",
                "ran longer than its timeout of 500ms"
            ]
        );
        let running: TaskAttemptView = serde_json::from_str(
            r#"{"number":2,"startedAt":"2026-07-18T12:00:01.000Z","executorId":"host:1"}"#,
        )
        .expect("valid attempt");
        assert_eq!(
            row(&running),
            [
                "2",
                "2026-07-18T12:00:01.000Z",
                "running",
                "-",
                "-",
                "-",
                "-",
                "-"
            ]
        );
    }
}
