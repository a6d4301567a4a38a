//! `spoolctl resolve ID…`: an operator's decision on an at-most-once delivery whose outcome is
//! `unknown` or in `manual_review`. spoold decides whether it is allowed (409
//! `invalid_transition` from any other status).

use spool_proto::{ResolveOutcome, ResolveRequest};

use crate::cli::{ResolveArgs, UsageError};
use crate::client::Client;
use crate::commands::{each_id, Exit};
use crate::output::Output;

pub async fn run(client: &Client, args: ResolveArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let request = &request(&args)?;
    each_id(
        &args.ids,
        "delivery",
        "resolve",
        out,
        |id| async move { Ok(client.resolve(&id, request).await?) },
        |out, delivery| {
            if out.is_json() {
                Ok(out.json(delivery)?)
            } else {
                Ok(out.delivery("resolve", delivery)?)
            }
        },
    )
    .await
}

/// The request for the parsed flags; clap has made sure exactly one outcome is given and
/// `--remote-id` only with `--succeeded`.
fn request(args: &ResolveArgs) -> Result<ResolveRequest, UsageError> {
    let outcome = match (args.succeeded, args.failed, args.resend) {
        (true, _, _) => ResolveOutcome::Succeeded,
        (_, true, _) => ResolveOutcome::Failed,
        _ => ResolveOutcome::Resend,
    };
    // An empty note would reach spoold only to be refused there; say so before any request.
    let note = args.note.trim();
    if note.is_empty() {
        return Err(UsageError::new("--note must not be empty"));
    }
    Ok(ResolveRequest {
        outcome: Some(outcome),
        note: Some(note.to_owned()),
        remote_id: args.remote_id.clone().filter(|r| !r.trim().is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(succeeded: bool, failed: bool, resend: bool, note: &str) -> ResolveArgs {
        ResolveArgs {
            ids: vec!["x".into()],
            succeeded,
            failed,
            resend,
            remote_id: None,
            note: note.into(),
        }
    }

    #[test]
    fn outcomes_and_notes() {
        let cases = [
            (
                args(true, false, false, "seen in the CRM"),
                ResolveOutcome::Succeeded,
            ),
            (
                args(false, true, false, "not there"),
                ResolveOutcome::Failed,
            ),
            (
                args(false, false, true, "  send it  "),
                ResolveOutcome::Resend,
            ),
        ];
        for (a, outcome) in cases {
            let req = request(&a).expect("valid");
            assert_eq!(req.outcome, Some(outcome));
            assert_eq!(req.note.as_deref(), Some(a.note.trim()));
        }
        let err = request(&args(true, false, false, " \n")).expect_err("empty note");
        assert_eq!(err.to_string(), "--note must not be empty");
    }

    #[test]
    fn request_json() {
        let mut a = args(true, false, false, "found it");
        a.remote_id = Some("rec-7".into());
        let req = request(&a).expect("valid");
        assert_eq!(
            serde_json::to_string(&req).expect("serializable"),
            r#"{"outcome":"succeeded","note":"found it","remoteId":"rec-7"}"#
        );
    }
}
