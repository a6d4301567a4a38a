//! `spoolctl step done NAME`: record a step of this task as done by this attempt. Quiet on
//! success, since scripts call it; a step done before is success too. An attempt that is no
//! longer the task's running one gets its own exit status, so the script can stop.

use spool_proto::ReportStep;

use crate::cli::StepArgs;
use crate::client::{Client, ClientError};
use crate::commands::step::StepEnv;
use crate::commands::Exit;
use crate::output::Output;

/// spoold's error code for a report from an attempt that is not the task's running attempt.
const NOT_CURRENT_ATTEMPT: &str = "not_current_attempt";

pub async fn run(
    client: &Client,
    env: &StepEnv,
    args: StepArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let req = ReportStep {
        name: Some(args.name.to_string()),
        attempt: Some(i64::from(env.attempt)),
    };
    match client.report_step(&env.task_id, &req).await {
        Ok(step) => {
            if out.is_json() {
                out.json(&step)?;
            }
            Ok(Exit::Success)
        }
        Err(ClientError::Api { code, message, .. }) if code == NOT_CURRENT_ATTEMPT => {
            eprintln!("spoolctl: {message}");
            Ok(Exit::NotCurrentAttempt)
        }
        Err(err) => Err(env.explain(err)),
    }
}
