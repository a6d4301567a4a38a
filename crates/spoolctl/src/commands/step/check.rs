//! `spoolctl step check NAME`: exit 0 if a step of this task is done (by any attempt), 1 if
//! not, for `if spoolctl step check NAME; then …`. An error must not read as "not done" (the
//! script would redo the step), so it exits 9, not 1.

use spool_proto::{StepName, TaskStepList, TaskStepView};

use crate::cli::StepArgs;
use crate::client::Client;
use crate::commands::step::StepEnv;
use crate::commands::Exit;
use crate::output::Output;

pub async fn run(
    client: &Client,
    env: &StepEnv,
    args: StepArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let list = match client.task_steps(&env.task_id).await {
        Ok(list) => list,
        Err(err) => {
            eprintln!("spoolctl: {:#}", env.explain(err));
            return Ok(Exit::StepUnknown);
        }
    };
    match find(&list, &args.name) {
        Some(step) => {
            if out.is_json() {
                out.json(step)?;
            }
            Ok(Exit::Success)
        }
        None => Ok(Exit::NotDone),
    }
}

/// The record of `name`, if any attempt did it.
fn find<'a>(list: &'a TaskStepList, name: &StepName) -> Option<&'a TaskStepView> {
    list.steps.iter().find(|s| s.name == name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_done_by_any_attempt() {
        let list: TaskStepList = serde_json::from_str(
            r#"{"steps":[{"name":"dump","attempt":1,"at":"2026-07-18T12:00:00.000Z"},
                         {"name":"upload","attempt":2,"at":"2026-07-18T12:05:00.000Z"}]}"#,
        )
        .expect("valid steps");
        let name = |n: &str| StepName::parse(n).expect("valid name");
        assert_eq!(find(&list, &name("dump")).map(|s| s.attempt), Some(1));
        assert_eq!(find(&list, &name("upload")).map(|s| s.attempt), Some(2));
        assert!(find(&list, &name("Dump")).is_none(), "names are exact");
        assert!(find(&list, &name("verify")).is_none());
        assert_eq!(Exit::NotDone.code(), 1);
        assert_eq!(Exit::StepUnknown.code(), 9);
    }
}
