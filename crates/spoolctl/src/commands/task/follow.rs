//! `task submit --follow`: print the output of each attempt of a task while it runs, attempt
//! after attempt (a retry runs the script again), until the task is in a final status. The
//! output goes to stdout untouched; the `--- attempt N ---` lines go to stderr, so that stdout
//! is exactly what the script wrote.

use spool_proto::TaskView;

use crate::cli::FollowArgs;
use crate::client::{Client, ClientError, OutputQuery};
use crate::commands::task::logs::{self, OUTPUT_NOT_FOUND};
use crate::commands::task::wait::final_exit;
use crate::commands::Exit;
use crate::output::Output;

/// Follows the task's attempts, then returns its last state and what it means for the exit
/// status (as `task wait` maps it). Past `args.timeout`, if there is one, the task is read once
/// more: still not final, that is [`Exit::WaitTimedOut`].
pub async fn follow(
    client: &Client,
    id: &str,
    args: FollowArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<(TaskView, Exit)> {
    let Some(timeout) = args.timeout else {
        return watch(client, id, args, out).await;
    };
    match tokio::time::timeout(timeout, watch(client, id, args, out)).await {
        Ok(result) => result,
        Err(_) => {
            let task = client.task(id).await?;
            let exit = final_exit(task.status).unwrap_or(Exit::WaitTimedOut);
            Ok((task, exit))
        }
    }
}

/// What the follower does after reading the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Print the output of this attempt (the next one not printed yet).
    Stream(u32),
    /// Done: the task is final and every attempt it started was printed.
    Finish(Exit),
    /// Nothing to print yet: read the task again after the interval.
    Poll,
}

/// The step after reading `task`, when the output of attempts up to `printed` is printed.
fn next(task: &TaskView, printed: u32) -> Next {
    if task.attempt > printed {
        return Next::Stream(printed + 1);
    }
    match final_exit(task.status) {
        Some(exit) => Next::Finish(exit),
        // Pending (first start, retry backoff), interrupted (its policy moves it on), or
        // running an attempt whose stream has ended but whose end is not recorded yet.
        None => Next::Poll,
    }
}

async fn watch(
    client: &Client,
    id: &str,
    args: FollowArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<(TaskView, Exit)> {
    let mut printed = 0;
    let mut announced = 0;
    loop {
        let task = client.task(id).await?;
        let attempt = match next(&task, printed) {
            Next::Finish(exit) => return Ok((task, exit)),
            Next::Poll => {
                tokio::time::sleep(args.interval).await;
                continue;
            }
            Next::Stream(attempt) => attempt,
        };
        if announced < attempt {
            eprintln!("--- attempt {attempt} ---");
            announced = attempt;
        }
        let query = OutputQuery {
            attempt: Some(attempt),
            follow: true,
        };
        match logs::stream(client, id, query, out).await {
            Ok(()) => printed = attempt,
            Err(ClientError::Api { code, .. }) if code == OUTPUT_NOT_FOUND => {
                // Just started, its output may not be there yet: try again while it runs.
                // An attempt that kept none has nothing to print.
                let task = client.task(id).await?;
                if still_running(&task, attempt) {
                    tokio::time::sleep(args.interval).await;
                } else {
                    printed = attempt;
                }
            }
            Err(err) => return Err(err.into()),
        }
    }
}

fn still_running(task: &TaskView, attempt: u32) -> bool {
    task.status == spool_proto::TaskStatus::Running && task.attempt == attempt
}

#[cfg(test)]
mod tests {
    use spool_proto::TaskStatus;

    use super::*;

    fn task(status: TaskStatus, attempt: u32) -> TaskView {
        let mut t: TaskView = serde_json::from_value(serde_json::json!({
            "id": "t1", "type": "backup", "status": "pending", "attempt": 0, "maxAttempts": 3,
            "params": {}, "scope": "default", "createdAt": "2026-07-18T12:00:00.000Z",
            "retryable": true, "completedSteps": [],
        }))
        .expect("a task");
        t.status = status;
        t.attempt = attempt;
        t
    }

    #[test]
    fn attempts_are_printed_in_order_until_the_task_is_final() {
        use TaskStatus::*;
        let check = |status, attempt, printed, expected| {
            assert_eq!(
                next(&task(status, attempt), printed),
                expected,
                "{status:?} attempt {attempt}, printed {printed}"
            );
        };
        // Not started yet: wait for the first attempt.
        check(Pending, 0, 0, Next::Poll);
        check(Running, 1, 0, Next::Stream(1));
        // Its stream ended before its end was recorded: read again.
        check(Running, 1, 1, Next::Poll);
        // Retry backoff, then the next attempt.
        check(Pending, 1, 1, Next::Poll);
        check(Running, 2, 1, Next::Stream(2));
        check(Interrupted, 2, 2, Next::Poll);
        // Attempts that ran before the first read are still printed, one by one.
        check(Failed, 3, 0, Next::Stream(1));
        check(Failed, 3, 2, Next::Stream(3));
        check(Failed, 3, 3, Next::Finish(Exit::Failed));
        check(Succeeded, 1, 1, Next::Finish(Exit::Success));
        check(TimedOut, 1, 1, Next::Finish(Exit::TaskTimedOut));
        check(ManualReview, 2, 2, Next::Finish(Exit::ManualReview));
        // Canceled before it ever started.
        check(Canceled, 0, 0, Next::Finish(Exit::Canceled));
    }

    #[test]
    fn only_the_running_attempt_is_waited_for() {
        assert!(still_running(&task(TaskStatus::Running, 2), 2));
        assert!(!still_running(&task(TaskStatus::Running, 3), 2));
        assert!(!still_running(&task(TaskStatus::Failed, 2), 2));
    }
}
