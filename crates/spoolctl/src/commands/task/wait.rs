//! `spoolctl task wait ID` (and `task submit --wait`): poll a task until it is in a final
//! status or the timeout passes. The exit status names the outcome, so scripts need not parse
//! the output.

use std::time::Duration;

use spool_proto::units::format_duration;
use spool_proto::{TaskStatus, TaskView};

use crate::cli::{PollArgs, TaskWaitArgs};
use crate::client::Client;
use crate::commands::task::task_id;
use crate::commands::{wait as delivery_wait, Exit};
use crate::output::Output;

pub async fn run(
    client: &Client,
    args: TaskWaitArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    delivery_wait::check_poll(&args.poll)?;
    let waited = wait(client, id, &args.poll).await?;
    Ok(report(out, &waited)?)
}

/// The last state seen and what it means for the exit status.
pub struct Waited {
    pub task: TaskView,
    pub exit: Exit,
    pub timeout: Duration,
}

/// The exit status of a task in `status`, or `None` while it may still move on by itself.
pub fn final_exit(status: TaskStatus) -> Option<Exit> {
    match status {
        TaskStatus::Succeeded => Some(Exit::Success),
        TaskStatus::Failed => Some(Exit::Failed),
        TaskStatus::Canceled => Some(Exit::Canceled),
        TaskStatus::TimedOut => Some(Exit::TaskTimedOut),
        TaskStatus::ManualReview => Some(Exit::ManualReview),
        // Interrupted is passed through: the type's on_interrupt policy moves it on (to
        // pending, failed or manual_review) without anyone's help.
        TaskStatus::Pending | TaskStatus::Running | TaskStatus::Interrupted => None,
    }
}

/// Polls `GET /v1/tasks/{id}` until the status is final or `poll.timeout` has passed.
pub async fn wait(client: &Client, id: &str, poll: &PollArgs) -> anyhow::Result<Waited> {
    let (task, exit) = crate::commands::wait::poll_until(
        poll,
        || client.task(id),
        crate::commands::wait::progress_on_terminal(progress),
        |t: &TaskView| final_exit(t.status),
    )
    .await?;
    Ok(Waited {
        task,
        exit,
        timeout: poll.timeout,
    })
}

/// What a task being waited for is doing, in one line (on a terminal, while waiting); empty once
/// it is final.
fn progress(t: &TaskView, now: i64) -> String {
    let attempt = format!("attempt {}/{}", t.attempt, t.max_attempts);
    let next = || crate::commands::wait::when(t.next_run_at.as_deref(), now);
    match t.status {
        TaskStatus::Running => format!("{attempt} is running"),
        TaskStatus::Interrupted => format!("{attempt} was interrupted"),
        // Due now: the `submitted` row has said so already.
        TaskStatus::Pending
            if t.attempt == 0
                && !crate::commands::wait::is_ahead(t.next_run_at.as_deref(), now) =>
        {
            String::new()
        }
        TaskStatus::Pending if t.attempt == 0 => format!("pending; first attempt {}", next()),
        TaskStatus::Pending => match t.error.as_deref().filter(|e| !e.is_empty()) {
            Some(err) => format!(
                "{attempt} failed: {}; next attempt {}",
                crate::output::short_error(err),
                next()
            ),
            None => format!("{attempt} ended; next attempt {}", next()),
        },
        _ => String::new(),
    }
}

/// Prints the final state as a `wait` row (or JSON); a timeout also gets a line on stderr.
pub fn report(out: &mut Output<'_>, waited: &Waited) -> std::io::Result<Exit> {
    let t = &waited.task;
    if out.is_json() {
        out.json(t)?;
    } else {
        out.task("wait", t)?;
    }
    if waited.exit == Exit::WaitTimedOut {
        eprintln!(
            "spoolctl: timed out after {}: task {} is still {}",
            format_duration(waited.timeout),
            t.id,
            t.status.as_str()
        );
    }
    Ok(waited.exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_by_status() {
        let check = |status, code: Option<u8>| {
            assert_eq!(final_exit(status).map(Exit::code), code, "{status:?}");
        };
        check(TaskStatus::Succeeded, Some(0));
        check(TaskStatus::Failed, Some(3));
        check(TaskStatus::Canceled, Some(4));
        check(TaskStatus::TimedOut, Some(6));
        check(TaskStatus::ManualReview, Some(7));
        check(TaskStatus::Pending, None);
        check(TaskStatus::Running, None);
        check(TaskStatus::Interrupted, None);
        assert_eq!(Exit::WaitTimedOut.code(), 5);
    }
}
