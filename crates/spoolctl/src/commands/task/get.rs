//! `spoolctl task get ID`: the whole task: its row, every field that is set, its parameters,
//! the steps it reported done, what it wrote to its result file, and its error.

use spool_proto::TaskView;

use crate::cli::TaskIdArgs;
use crate::client::Client;
use crate::commands::task::task_id;
use crate::commands::Exit;
use crate::output::{task_row, Output, Table};

pub async fn run(client: &Client, args: TaskIdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    let task = client.task(id).await?;
    if out.is_json() {
        out.json(&task)?;
    } else {
        out.raw(render(&task).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// The lines `task get` prints.
fn render(t: &TaskView) -> String {
    let mut out = String::new();
    let mut row = Table::new();
    row.row(task_row(Some("get"), t));
    out.push_str(&row.render());

    let mut fields = Table::new();
    let mut field = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            fields.row([format!("{name}:"), value]);
        }
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_owned();
    field("type", Some(t.task_type.clone()));
    field("status", Some(t.status.as_str().to_owned()));
    field(
        "attempts",
        Some(format!("{} of {}", t.attempt, t.max_attempts)),
    );
    field("scope", Some(t.scope.clone()));
    field("idempotency key", t.idempotency_key.clone());
    field("created", Some(t.created_at.clone()));
    field("started", t.started_at.clone());
    field("finished", t.finished_at.clone());
    field("next run", t.next_run_at.clone());
    field("queue deadline", t.queue_deadline.clone());
    field("retry deadline", t.retry_deadline.clone());
    field("retryable", Some(yes_no(t.retryable)));
    field("cancel requested", t.cancel_requested.then(|| yes_no(true)));
    field(
        "ending",
        t.ending.as_ref().map(|why| {
            format!("its executor is gone ({why}); what is left of its attempt is being ended")
        }),
    );
    field("exit code", t.exit_code.map(|c| c.to_string()));
    field("signal", t.signal.map(|s| s.to_string()));
    field("error code", t.error_code.clone());
    out.push_str(&indent(&fields.render(), "  "));

    if t.params.is_empty() {
        out.push_str("params: none\n");
    } else {
        out.push_str("params:\n");
        for (name, value) in &t.params {
            out.push_str(&format!("  {name}: {value}\n"));
        }
    }
    if !t.completed_steps.is_empty() {
        out.push_str(&format!(
            "completed steps: {}\n",
            t.completed_steps.join(", ")
        ));
    }
    match t.result_summary.as_deref() {
        Some(result) if !result.trim().is_empty() => {
            // The script wrote it: no escape sequences reach the terminal.
            let result: String = result
                .trim_end()
                .chars()
                .map(|c| if c.is_control() && c != '\n' { ' ' } else { c })
                .collect();
            out.push_str("result:\n");
            out.push_str(&indent(&result, "  "));
        }
        _ => {}
    }
    if let Some(err) = t.error.as_deref().filter(|e| !e.is_empty()) {
        out.push_str(&format!("last error: {err}\n"));
    }
    out
}

fn indent(text: &str, by: &str) -> String {
    text.lines().map(|l| format!("{by}{l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_task() {
        let t: TaskView = serde_json::from_value(serde_json::json!({
            "id": "0190f3c2a1b27c4e9d0a5b6c7d8e9f01", "type": "backup", "status": "failed",
            "attempt": 2, "maxAttempts": 2, "params": {"db": "one"}, "scope": "one",
            "createdAt": "2026-07-18T12:00:00.000Z", "startedAt": "2026-07-18T12:00:01.000Z",
            "finishedAt": "2026-07-18T12:00:03.000Z", "errorCode": "script_error",
            "error": "exited with 1 (script_error)", "retryable": false, "exitCode": 1,
            "resultSummary": "dumped 3 tables\nthen failed\n", "completedSteps": ["dump"],
        }))
        .expect("a task");
        assert_eq!(
            render(&t),
            "get  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  failed  2/2  backup\n\
             \x20 type:        backup\n\
             \x20 status:      failed\n\
             \x20 attempts:    2 of 2\n\
             \x20 scope:       one\n\
             \x20 created:     2026-07-18T12:00:00.000Z\n\
             \x20 started:     2026-07-18T12:00:01.000Z\n\
             \x20 finished:    2026-07-18T12:00:03.000Z\n\
             \x20 retryable:   no\n\
             \x20 exit code:   1\n\
             \x20 error code:  script_error\n\
             params:\n\
             \x20 db: one\n\
             completed steps: dump\n\
             result:\n\
             \x20 dumped 3 tables\n\
             \x20 then failed\n\
             last error: exited with 1 (script_error)\n"
        );
    }

    #[test]
    fn a_task_whose_attempt_is_being_ended() {
        let t: TaskView = serde_json::from_value(serde_json::json!({
            "id": "0190f3c2a1b27c4e9d0a5b6c7d8e9f01", "type": "deploy", "status": "running",
            "attempt": 1, "maxAttempts": 1, "params": {}, "scope": "deploy",
            "createdAt": "2026-07-18T12:00:00.000Z", "retryable": false, "completedSteps": [],
            "ending": "daemon_restart",
        }))
        .expect("a task");
        assert!(
            render(&t).contains(
                "  ending:     its executor is gone (daemon_restart); what is left of its attempt \
                 is being ended\n"
            ),
            "{}",
            render(&t)
        );
    }
}
