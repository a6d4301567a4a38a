//! `spoolctl task submit TYPE [-p KEY=VALUE]…`: submit a declared task type. The parameters
//! and the time are checked for form here, before any request; spoold judges the names and
//! values against the type's declaration. `--wait` and `--follow` then wait for its final
//! status and exit like `task wait`.

use std::io;

use spool_proto::SubmitTask;

use crate::cli::{FollowArgs, TaskSubmitArgs, UsageError};
use crate::client::{Client, Submitted};
use crate::commands::task::{follow, wait};
use crate::commands::{wait as delivery_wait, Exit, Refused};
use crate::output::Output;

pub async fn run(
    client: &Client,
    args: TaskSubmitArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let poll = args.poll();
    if args.wait || args.follow {
        delivery_wait::check_poll(&poll)?;
    }
    // clap catches `--follow --json`, but not a global --json given before the subcommand.
    if args.follow && out.is_json() {
        return Err(UsageError::new(
            "--follow prints the task's output, not JSON: use --wait with --json",
        )
        .into());
    }
    let wait_after = args.wait;
    // --follow waits too; given both, it is the one that applies.
    let follow_after = args.follow.then(|| args.follow_args());
    let request = build_request(args)?;
    let submitted = client.submit_task(&request).await.map_err(|e| {
        let refused = e.is_refusal();
        let err = e.said_whether_stored(
            "submit it again with the same parameters and key, which returns it if it was (a type \
             with an idempotency_key derives the key; without one, it may run twice)",
        );
        if refused {
            Refused::new(&err, "submitted").into()
        } else {
            err
        }
    })?;
    let action = if submitted.is_new {
        "submitted"
    } else {
        "existing"
    };
    if let Some(follow_args) = follow_after {
        return follow_output(client, &submitted, action, follow_args, out).await;
    }
    if !wait_after {
        if out.is_json() {
            out.json(&submitted.task)?;
        } else {
            out.task(action, &submitted.task)?;
        }
        return Ok(Exit::Success);
    }
    // With --wait, JSON output is only the final state: one document, not two.
    if !out.is_json() {
        out.task(action, &submitted.task)?;
    }
    let waited = wait::wait(client, &submitted.task.id, &poll).await?;
    Ok(wait::report(out, &waited)?)
}

/// `--follow`: the task's output on `out`, the `submitted` and final `wait` rows on stderr, so
/// that stdout is only what the script wrote. Exits like `--wait`.
async fn follow_output(
    client: &Client,
    submitted: &Submitted,
    action: &str,
    args: FollowArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let mut stderr = io::stderr();
    Output::new(&mut stderr, false).task(action, &submitted.task)?;
    let (task, exit) = follow::follow(client, &submitted.task.id, args, out).await?;
    let waited = wait::Waited {
        task,
        exit,
        timeout: args.timeout.unwrap_or_default(),
    };
    Ok(wait::report(&mut Output::new(&mut stderr, false), &waited)?)
}

/// The submission: the type, the parameters as strings, the key and the time.
fn build_request(args: TaskSubmitArgs) -> Result<SubmitTask, UsageError> {
    let task_type = args.task_type.trim();
    if task_type.is_empty() {
        return Err(UsageError::new("task type must not be empty"));
    }
    let params = parse_params(&args.params)?;
    let not_before = args
        .not_before
        .as_deref()
        .map(crate::commands::send::not_before)
        .transpose()?;
    Ok(SubmitTask {
        task_type: Some(task_type.to_owned()),
        params: (!params.is_empty()).then_some(params),
        idempotency_key: args.idempotency_key.filter(|k| !k.is_empty()),
        not_before,
    })
}

/// `-p KEY=VALUE` arguments as a JSON object of strings. Each is split at its first `=`, so a
/// value may itself contain `=`; a key given twice is refused rather than silently replaced.
pub fn parse_params(
    args: &[String],
) -> Result<serde_json::Map<String, serde_json::Value>, UsageError> {
    let mut params = serde_json::Map::new();
    for arg in args {
        let Some((key, value)) = arg.split_once('=') else {
            return Err(UsageError::new(format!(
                "parameter {arg:?} must be KEY=VALUE (-p {arg}=…)"
            )));
        };
        if key.is_empty() {
            return Err(UsageError::new(format!(
                "parameter {arg:?} has no name before '='"
            )));
        }
        if params
            .insert(key.to_owned(), serde_json::Value::String(value.to_owned()))
            .is_some()
        {
            return Err(UsageError::new(format!(
                "parameter {key:?} was given more than once"
            )));
        }
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<String, String> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_params(&args)
            .map(|m| serde_json::Value::Object(m).to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn params_split_at_the_first_equals_sign() {
        let check = |args: &[&str], expected: Result<&str, &str>| {
            assert_eq!(
                parse(args),
                expected.map(str::to_owned).map_err(str::to_owned),
                "{args:?}"
            );
        };
        check(&[], Ok("{}"));
        check(&["db=one"], Ok(r#"{"db":"one"}"#));
        check(&["q=a=b"], Ok(r#"{"q":"a=b"}"#));
        check(&["empty="], Ok(r#"{"empty":""}"#));
        check(&["a=1", "b=2"], Ok(r#"{"a":"1","b":"2"}"#));
        check(
            &["db"],
            Err(r#"parameter "db" must be KEY=VALUE (-p db=…)"#),
        );
        check(&["=x"], Err(r#"parameter "=x" has no name before '='"#));
        check(
            &["a=1", "a=2"],
            Err(r#"parameter "a" was given more than once"#),
        );
    }

    #[test]
    fn submissions() {
        let args = TaskSubmitArgs {
            task_type: " backup ".into(),
            params: vec!["db=one".into()],
            idempotency_key: Some(String::new()),
            not_before: Some("2026-07-18T12:00:00Z".into()),
            wait: false,
            follow: false,
            timeout: None,
            interval: None,
        };
        let req = build_request(args).expect("valid");
        assert_eq!(
            serde_json::to_string(&req).expect("serializable"),
            r#"{"type":"backup","params":{"db":"one"},"notBefore":"2026-07-18T12:00:00.000Z"}"#
        );
        let args = TaskSubmitArgs {
            task_type: "backup".into(),
            params: vec![],
            idempotency_key: None,
            not_before: Some("tomorrow".into()),
            wait: false,
            follow: false,
            timeout: None,
            interval: None,
        };
        let err = build_request(args).expect_err("a bad time");
        assert!(err.to_string().starts_with("--not-before: "), "{err}");
    }
}
