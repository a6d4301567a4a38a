//! `spoolctl task get ID`: the whole task: its row, every field that is set, its parameters,
//! the steps it reported done, what it wrote to its result file, and its error.

use spool_proto::{LockList, TaskStatus, TaskView};

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
        // What a pending task that is due waits for: a lock shows in the locks' queues.
        let locks = match task.status {
            TaskStatus::Pending => client.locks().await.ok(),
            _ => None,
        };
        let waiting = waiting_for(&task, locks.as_ref(), crate::output::now_ms());
        out.raw(render(&task, waiting, out.is_coloured()).as_bytes())?;
    }
    Ok(Exit::Success)
}

/// What a pending task waits for, in words: its next run (a retry's backoff, its notBefore),
/// or, when it is due, the lock another task holds, or a free slot.
fn waiting_for(t: &TaskView, locks: Option<&LockList>, now: i64) -> Option<String> {
    if t.status != TaskStatus::Pending {
        return None;
    }
    let next = t
        .next_run_at
        .as_deref()
        .and_then(|at| spool_proto::units::parse_time(at).ok());
    if let Some(at) = next.filter(|at| *at > now) {
        let why = if t.attempt == 0 {
            "its notBefore"
        } else {
            "the backoff before its next attempt"
        };
        return Some(format!(
            "{why}, {} from now",
            spool_proto::units::format_duration(std::time::Duration::from_millis(
                (at - now) as u64
            ))
        ));
    }
    let held = locks.and_then(|l| l.locks.iter().find(|lock| lock.waiting.contains(&t.id)));
    Some(match held {
        Some(lock) => format!(
            "the lock {} (held by task {}, {})",
            lock.name, lock.task_id, lock.task_status
        ),
        None => {
            "a free slot: its type's concurrency, --task-concurrency, or the next claim".to_owned()
        }
    })
}

/// The lines `task get` prints.
fn render(t: &TaskView, waiting: Option<String>, colour: bool) -> String {
    let mut out = String::new();
    let mut row = Table::new();
    row.row(task_row(Some("get"), t));
    out.push_str(&row.render_styled(None, colour));

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
    field("waiting for", waiting);
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
            render(&t, None, false),
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
            render(&t, None, false).contains(
                "  ending:     its executor is gone (daemon_restart); what is left of its attempt \
                 is being ended\n"
            ),
            "{}",
            render(&t, None, false)
        );
    }

    #[test]
    fn a_pending_task_says_what_it_waits_for() {
        let pending = |attempt: u32, next: &str| -> TaskView {
            serde_json::from_value(serde_json::json!({
                "id": "0190f3c2a1b27c4e9d0a5b6c7d8e9f01", "type": "deploy", "status": "pending",
                "attempt": attempt, "maxAttempts": 3, "params": {}, "scope": "deploy",
                "createdAt": "2026-07-18T12:00:00.000Z", "retryable": true,
                "completedSteps": [], "nextRunAt": next,
            }))
            .expect("a task")
        };
        let now = spool_proto::units::parse_time("2026-07-18T12:00:00.000Z").expect("time");
        assert_eq!(
            waiting_for(&pending(0, "2026-07-18T12:01:30.000Z"), None, now).as_deref(),
            Some("its notBefore, 1m30s from now")
        );
        assert_eq!(
            waiting_for(&pending(1, "2026-07-18T12:00:04.000Z"), None, now).as_deref(),
            Some("the backoff before its next attempt, 4s from now")
        );
        let locks: LockList = serde_json::from_value(serde_json::json!({"locks": [{
            "name": "env:prod", "taskId": "0190f3c2a1b27c4e9d0a5b6c7d8e9f02", "taskType": "deploy",
            "taskStatus": "running", "attempt": 1, "since": "2026-07-18T11:59:00.000Z",
            "waiting": ["0190f3c2a1b27c4e9d0a5b6c7d8e9f01"],
        }]}))
        .expect("locks");
        let due = pending(0, "2026-07-18T11:59:59.000Z");
        assert_eq!(
            waiting_for(&due, Some(&locks), now).as_deref(),
            Some("the lock env:prod (held by task 0190f3c2a1b27c4e9d0a5b6c7d8e9f02, running)")
        );
        assert_eq!(
            waiting_for(&due, None, now).as_deref(),
            Some("a free slot: its type's concurrency, --task-concurrency, or the next claim")
        );
        assert!(render(&due, waiting_for(&due, None, now), false).contains("  waiting for: "));
    }
}
