//! `spoolctl wait ID` (and `send --wait`): poll a delivery until it is terminal or the timeout
//! passes. The exit status carries the outcome so scripts need not parse the output. On a
//! terminal, each change seen while waiting (an attempt going out, failing, the next one's time)
//! is said on stderr as it happens, so a wait is never silent.

use std::io::IsTerminal;
use std::time::Duration;

use spool_proto::units::{self, format_duration};
use spool_proto::{DeliveryStatus, DeliveryView};
use tokio::time::Instant;

use crate::cli::{PollArgs, UsageError, WaitArgs};
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::{now_ms, short_error, Output};

/// Shortest `--interval`: anything faster only loads spoold.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

pub async fn run(client: &Client, args: WaitArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = delivery_id(&args.id)?;
    check_poll(&args.poll)?;
    let waited = wait(client, id, &args.poll).await?;
    Ok(report(out, &waited)?)
}

/// The last state seen and what it means for the exit status.
pub struct Waited {
    pub delivery: DeliveryView,
    pub exit: Exit,
    pub timeout: Duration,
}

/// Refuses polling options that make no sense; called before any request.
pub fn check_poll(poll: &PollArgs) -> Result<(), UsageError> {
    if poll.interval < MIN_INTERVAL {
        return Err(UsageError::new(format!(
            "--interval must be at least {}",
            format_duration(MIN_INTERVAL)
        )));
    }
    Ok(())
}

/// Polls `GET /v1/deliveries/{id}` until the status is terminal or `poll.timeout` has passed;
/// on a terminal, says on stderr what changed at each poll ([`progress`]).
pub async fn wait(client: &Client, id: &str, poll: &PollArgs) -> anyhow::Result<Waited> {
    let (delivery, exit) = poll_until(
        poll,
        || client.get(id, false),
        progress_on_terminal(progress),
        |d: &spool_proto::DeliveryView| match d.status {
            DeliveryStatus::Succeeded => Some(Exit::Success),
            DeliveryStatus::Failed => Some(Exit::Failed),
            DeliveryStatus::Canceled => Some(Exit::Canceled),
            // Not settled, and not by waiting here: reconciliation (which may take the whole
            // observation window) or a person's `resolve` decides.
            DeliveryStatus::Unknown => Some(Exit::Unknown),
            DeliveryStatus::ManualReview => Some(Exit::ManualReview),
            DeliveryStatus::Pending | DeliveryStatus::InFlight => None,
        },
    )
    .await?;
    Ok(Waited {
        delivery,
        exit,
        timeout: poll.timeout,
    })
}

/// What to do with each value polled: on a terminal (stderr), print `describe`'s line when
/// what it says has changed; elsewhere nothing, so scripts and logs see only the outcome.
pub fn progress_on_terminal<T>(describe: fn(&T, i64) -> String) -> impl FnMut(&T) {
    let mut said = std::io::stderr().is_terminal().then(String::new);
    move |value| {
        let Some(said) = said.as_mut() else { return };
        let line = describe(value, now_ms());
        // A countdown changes at every poll: a line is new when what it says is, not when
        // only the time left is.
        let key = line.split(" (in ").next().unwrap_or(&line);
        if !line.is_empty() && key != said {
            eprintln!("spoolctl: {line}");
            *said = key.to_owned();
        }
    }
}

/// What a delivery being waited for is doing, in one line; empty once it is final (the
/// closing row says that). `now` is the wall clock in milliseconds.
pub fn progress(d: &DeliveryView, now: i64) -> String {
    let attempt = format!("attempt {}/{}", d.attempts, d.max_attempts);
    match d.status {
        DeliveryStatus::InFlight => format!("{attempt} is being sent"),
        DeliveryStatus::Pending => {
            let next = when(d.next_attempt_at.as_deref(), now);
            match d.last_error.as_deref().filter(|e| !e.is_empty()) {
                // Due now: the `queued` row has said all there is (a line would only repeat
                // it). A first attempt put off (--not-before) is worth its countdown.
                _ if d.attempts == 0 && !is_ahead(d.next_attempt_at.as_deref(), now) => {
                    String::new()
                }
                _ if d.attempts == 0 => format!("pending; first attempt {next}"),
                Some(err) => format!(
                    "{attempt} failed: {}; next attempt {next}",
                    short_error(err)
                ),
                None => format!("{attempt} ended; next attempt {next}"),
            }
        }
        _ => String::new(),
    }
}

/// Whether `at` is more than half a second after `now` (both in milliseconds): something to
/// wait for, rather than due.
pub fn is_ahead(at: Option<&str>, now: i64) -> bool {
    at.and_then(|text| units::parse_time(text).ok())
        .is_some_and(|at| at > now + 500)
}

/// `at 2026-12-03T15:50:01Z`, with `(in 4s)` while that is ahead ([`is_ahead`]); `now` when
/// no time is set.
pub fn when(at: Option<&str>, now: i64) -> String {
    match at.map(|text| (text, units::parse_time(text))) {
        Some((_, Ok(at))) if at > now + 500 => format!(
            "at {} (in {})",
            units::format_time(at),
            format_duration(Duration::from_secs(((at - now + 999) / 1000) as u64))
        ),
        Some((text, _)) => format!("at {text}"),
        None => "now".to_owned(),
    }
}

/// Fetch with `fetch` until `settled` names an exit for what came back, or `poll.timeout` has
/// passed (then [`Exit::WaitTimedOut`]), every `poll.interval`; `seen` is shown every value
/// fetched. There is always at least one fetch, and one more at the deadline. Shared by `wait`
/// and `task wait`.
pub async fn poll_until<T, E, Fut>(
    poll: &PollArgs,
    mut fetch: impl FnMut() -> Fut,
    mut seen: impl FnMut(&T),
    settled: impl Fn(&T) -> Option<Exit>,
) -> anyhow::Result<(T, Exit)>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    anyhow::Error: From<E>,
{
    let deadline = Instant::now() + poll.timeout;
    loop {
        let current = fetch().await?;
        seen(&current);
        let now = Instant::now();
        match settled(&current) {
            Some(exit) => return Ok((current, exit)),
            None if now >= deadline => return Ok((current, Exit::WaitTimedOut)),
            None => tokio::time::sleep(poll.interval.min(deadline - now)).await,
        }
    }
}

/// Prints the final state as a `wait` row (or JSON); a timeout also gets a line on stderr.
pub fn report(out: &mut Output<'_>, waited: &Waited) -> std::io::Result<Exit> {
    let d = &waited.delivery;
    if out.is_json() {
        out.json(d)?;
    } else {
        out.delivery("wait", d)?;
    }
    match waited.exit {
        Exit::WaitTimedOut => eprintln!(
            "spoolctl: timed out after {}: delivery {} is still {}",
            format_duration(waited.timeout),
            d.id,
            d.status
        ),
        Exit::Unknown => eprintln!(
            "spoolctl: the outcome of delivery {id} is unknown (the request may have reached the \
             target): spoold asks the target if it has a reconcile query (`spoolctl checks \
             {id}`), or a person decides (`spoolctl resolve {id} …`)",
            id = d.id
        ),
        Exit::ManualReview => eprintln!(
            "spoolctl: delivery {id} needs a person: `spoolctl resolve {id} --succeeded | \
             --failed | --resend --note …`",
            id = d.id
        ),
        _ => {}
    }
    Ok(waited.exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        let poll = |ms| PollArgs {
            timeout: Duration::from_secs(1),
            interval: Duration::from_millis(ms),
        };
        assert!(check_poll(&poll(200)).is_ok());
        assert!(check_poll(&poll(10)).is_ok());
        let err = check_poll(&poll(0)).expect_err("zero interval");
        assert_eq!(err.to_string(), "--interval must be at least 10ms");
    }
}
