//! `spoolctl wait ID` (and `send --wait`): poll a delivery until it is terminal or the timeout
//! passes. The exit status carries the outcome so scripts need not parse the output.

use std::time::Duration;

use spool_proto::units::format_duration;
use spool_proto::{DeliveryStatus, DeliveryView};
use tokio::time::Instant;

use crate::cli::{PollArgs, UsageError, WaitArgs};
use crate::client::Client;
use crate::commands::{delivery_id, Exit};
use crate::output::Output;

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

/// Polls `GET /v1/deliveries/{id}` until the status is terminal or `poll.timeout` has passed.
pub async fn wait(client: &Client, id: &str, poll: &PollArgs) -> anyhow::Result<Waited> {
    let (delivery, exit) = poll_until(
        poll,
        || client.get(id, false),
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

/// Fetch with `fetch` until `settled` names an exit for what came back, or `poll.timeout` has
/// passed (then [`Exit::WaitTimedOut`]), every `poll.interval`. There is always at least one
/// fetch, and one more at the deadline. Shared by `wait` and `task wait`.
pub async fn poll_until<T, E, Fut>(
    poll: &PollArgs,
    mut fetch: impl FnMut() -> Fut,
    settled: impl Fn(&T) -> Option<Exit>,
) -> anyhow::Result<(T, Exit)>
where
    Fut: std::future::Future<Output = Result<T, E>>,
    anyhow::Error: From<E>,
{
    let deadline = Instant::now() + poll.timeout;
    loop {
        let current = fetch().await?;
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
