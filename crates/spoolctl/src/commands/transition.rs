//! `spoolctl retry` and `spoolctl cancel`: the operator's two state changes, on deliveries
//! named by ID or on every delivery a filter matches (`POST /v1/deliveries/bulk`). spoold
//! decides whether each change is allowed: one named by ID that is not is an error (409
//! `invalid_transition`); one matched by a filter is skipped and counted.

use std::io::{BufRead, IsTerminal};

use anyhow::anyhow;
use spool_proto::{units, BulkAction, BulkRequest, BulkResult, DeliveryFilter, DeliveryStatus};

use crate::cli::{ActionArgs, FilterArgs, UsageError};
use crate::client::{Client, ClientError, Transition};
use crate::commands::list::moment;
use crate::commands::{each_id, Exit};
use crate::output::Output;

pub async fn run(
    client: &Client,
    action: Transition,
    args: ActionArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let filter = filter(&args.filter)?;
    match (args.ids.is_empty(), filter) {
        (false, Some(_)) => Err(UsageError::new(format!(
            "{} takes delivery IDs or a filter, not both",
            action.as_str()
        ))
        .into()),
        (true, None) => Err(UsageError::new(format!(
            "{} needs delivery IDs, or a filter: --status, --target, --since, --until, \
             --error-code",
            action.as_str()
        ))
        .into()),
        (false, None) if args.dry_run || args.yes => {
            Err(UsageError::new("--dry-run and --yes go with a filter, not with IDs").into())
        }
        (false, None) => {
            each_id(
                &args.ids,
                "delivery",
                action.as_str(),
                out,
                |id| async move { Ok(client.transition(&id, action).await?) },
                |out, delivery| {
                    if out.is_json() {
                        Ok(out.json(delivery)?)
                    } else {
                        Ok(out.delivery(action.as_str(), delivery)?)
                    }
                },
            )
            .await
        }
        (true, Some(filter)) => bulk(client, action, filter, &args, out).await,
    }
}

/// The filter the flags describe; `None` when no flag is given.
pub(crate) fn filter(args: &FilterArgs) -> Result<Option<DeliveryFilter>, UsageError> {
    let since = args
        .since
        .as_deref()
        .map(|t| moment("--since", t).map(|at| (t, at)))
        .transpose()?;
    let until = args
        .until
        .as_deref()
        .map(|t| moment("--until", t).map(|at| (t, at)))
        .transpose()?;
    // An empty range matches nothing, so an action on it would say "0" and succeed: almost
    // surely the two were swapped (`--since 1h --until 2h`).
    if let (Some((since_text, after)), Some((until_text, before))) = (&since, &until) {
        let ms = |t: &str| units::parse_time(t).unwrap_or_default();
        if ms(after) >= ms(before) {
            return Err(UsageError::new(format!(
                "--since {since_text} ({after}) is not before --until {until_text} ({before}):                  the range is empty; durations count back from now, so --since takes the                  longer one"
            )));
        }
    }
    let filter = DeliveryFilter {
        status: args.status.map(DeliveryStatus::from),
        target_origin: args.target.clone(),
        last_error_code: args.error_code.clone(),
        created_after: since.map(|(_, at)| at),
        created_before: until.map(|(_, at)| at),
    };
    Ok((filter != DeliveryFilter::default()).then_some(filter))
}

/// The action on every delivery `filter` matches.
async fn bulk(
    client: &Client,
    action: Transition,
    filter: DeliveryFilter,
    args: &ActionArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let request = |dry_run: bool| BulkRequest {
        action: Some(bulk_action(action)),
        filter: Some(filter.clone()),
        dry_run: Some(dry_run),
    };
    let ask = Ask {
        action,
        noun: "deliveries",
        dry_run: args.dry_run,
        yes: args.yes,
    };
    ask.run(out, |dry_run| {
        let request = request(dry_run);
        async move { client.bulk(&request).await }
    })
    .await
}

/// The API's name of an operator action.
pub(crate) fn bulk_action(action: Transition) -> BulkAction {
    match action {
        Transition::Retry => BulkAction::Retry,
        Transition::Cancel => BulkAction::Cancel,
    }
}

/// How a bulk action is run from the command line: counted first and asked about on a
/// terminal, unless `--dry-run` (count only) or `--yes`.
pub(crate) struct Ask {
    pub action: Transition,
    /// `deliveries` or `tasks`.
    pub noun: &'static str,
    pub dry_run: bool,
    pub yes: bool,
}

impl Ask {
    /// `send(dry_run)` makes the request.
    pub async fn run<F, Fut>(&self, out: &mut Output<'_>, send: F) -> anyhow::Result<Exit>
    where
        F: Fn(bool) -> Fut,
        Fut: std::future::Future<Output = Result<BulkResult, ClientError>>,
    {
        let (action, noun) = (self.action.as_str(), self.noun);
        if !self.dry_run && !self.yes {
            if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
                return Err(UsageError::new(format!(
                    "{action} of every one of the {noun} a filter matches needs --yes when not \
                     run on a terminal (--dry-run counts them first)"
                ))
                .into());
            }
            let counted = send(true).await?;
            if counted.changed == 0 {
                print(out, noun, &counted)?;
                return Ok(Exit::Success);
            }
            eprint!(
                "{action} {} {noun} ({} match, {} skipped)? [y/N] ",
                counted.changed, counted.matched, counted.skipped
            );
            let mut answer = String::new();
            std::io::stdin().lock().read_line(&mut answer)?;
            if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
                return Err(anyhow!("not confirmed; nothing was changed"));
            }
        }
        let result = send(self.dry_run).await?;
        print(out, noun, &result)?;
        Ok(Exit::Success)
    }
}

/// `retried 118 of 120 matching deliveries (2 skipped: not in a status retry applies to)`, then
/// the first ids; on a dry run, `would retry …`.
fn print(out: &mut Output<'_>, noun: &str, result: &BulkResult) -> anyhow::Result<()> {
    if out.is_json() {
        return Ok(out.json(result)?);
    }
    let (done, verb) = match result.action {
        BulkAction::Retry => ("retried", "retry"),
        BulkAction::Cancel => ("canceled", "cancel"),
    };
    let said = if result.dry_run {
        format!("would {verb}")
    } else {
        done.to_owned()
    };
    let mut line = format!(
        "{said} {} of {} matching {noun}",
        result.changed, result.matched
    );
    if result.skipped > 0 {
        line.push_str(&format!(
            " ({} skipped: {verb} does not apply to them)",
            result.skipped
        ));
    }
    out.line(&line)?;
    if !result.ids.is_empty() {
        let more = if result.changed > result.ids.len() as u64 {
            " …"
        } else {
            ""
        };
        out.line(&format!("first: {}{more}", result.ids.join(" ")))?;
    }
    Ok(())
}
