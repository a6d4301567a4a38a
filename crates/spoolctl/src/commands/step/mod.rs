//! `spoolctl step …`: checkpoints, reported from inside a task's script. The task, the attempt
//! and the token come from the environment spoold's executor sets; a missing or malformed
//! value is a usage error, found before any request.

mod check;
mod done;

use std::ffi::OsString;

use crate::cli::{GlobalArgs, StepCommand, UsageError};
use crate::client::{Client, ClientError, Token};
use crate::commands::{connect_with, Exit};
use crate::output::Output;

/// The task the script runs for (set by spoold's executor).
pub const TASK_ID_VAR: &str = "SPOOLD_TASK_ID";
/// The attempt the script runs as, from 1 (set by spoold's executor).
pub const ATTEMPT_VAR: &str = "SPOOLD_ATTEMPT";
/// The bearer token for step requests (set by spoold's executor when its API needs one). It
/// comes before `--token-file`: inside a script, it is the credential meant for this.
pub const STEP_TOKEN_VAR: &str = "SPOOLD_STEP_TOKEN";

/// Who is asking: the task and attempt the script runs as, and where the token came from.
#[derive(Debug)]
pub struct StepEnv {
    pub task_id: String,
    pub attempt: u32,
    /// The step token, if set; `None`: `--token-file`'s, if any, is used.
    step_token: Option<Token>,
    /// Where the token sent comes from, for the message of a refused one.
    credential: Credential,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    StepToken,
    TokenFile,
    None,
}

/// Runs one `step` subcommand.
pub async fn run(
    client: &Client,
    env: &StepEnv,
    command: StepCommand,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    match command {
        StepCommand::Done(args) => done::run(client, env, args, out).await,
        StepCommand::Check(args) => check::run(client, env, args, out).await,
    }
}

/// Reads the step environment, then builds the client: `SPOOLD_STEP_TOKEN` if set, otherwise
/// `--token-file`.
pub fn connect(global: &GlobalArgs) -> anyhow::Result<(Client, StepEnv)> {
    let mut env = StepEnv::read(|name| std::env::var_os(name))?;
    if env.step_token.is_none() && global.token_file.is_some() {
        env.credential = Credential::TokenFile;
    }
    let client = connect_with(global, env.step_token.clone())?;
    Ok((client, env))
}

impl StepEnv {
    /// The step environment from `var` (the process environment, or a table in tests). An
    /// empty `SPOOLD_STEP_TOKEN` counts as unset.
    fn read(var: impl Fn(&str) -> Option<OsString>) -> Result<StepEnv, UsageError> {
        let text = |name: &str| -> Result<Option<String>, UsageError> {
            match var(name) {
                None => Ok(None),
                Some(value) => value
                    .into_string()
                    .map(Some)
                    .map_err(|_| UsageError::new(format!("{name} is not valid UTF-8"))),
            }
        };
        let outside = "`spoolctl step` runs inside a task's script, where spoold sets it";
        let task_id = match text(TASK_ID_VAR)?.as_deref().map(str::trim) {
            None | Some("") => {
                return Err(UsageError::new(format!(
                    "{TASK_ID_VAR} is not set: {outside}"
                )))
            }
            Some(id) => id.to_owned(),
        };
        let attempt = match text(ATTEMPT_VAR)? {
            None => {
                return Err(UsageError::new(format!(
                    "{ATTEMPT_VAR} is not set: {outside}"
                )))
            }
            Some(value) => parse_attempt(&value)?,
        };
        let step_token = match text(STEP_TOKEN_VAR)? {
            Some(value) if !value.is_empty() => {
                Some(Token::from_contents(&value).ok_or_else(|| {
                    UsageError::new(format!(
                        "{STEP_TOKEN_VAR} contains characters not allowed in an HTTP header"
                    ))
                })?)
            }
            _ => None,
        };
        Ok(StepEnv {
            task_id,
            attempt,
            credential: if step_token.is_some() {
                Credential::StepToken
            } else {
                Credential::None
            },
            step_token,
        })
    }

    /// `err` as the command reports it: a refused request (401, 403) also says which
    /// credential was sent, since a script cannot easily tell.
    pub fn explain(&self, err: ClientError) -> anyhow::Error {
        let refused = matches!(err.status(), Some(401 | 403));
        let hint = match self.credential {
            _ if !refused => return err.into(),
            Credential::StepToken => format!("spoold refused the token in {STEP_TOKEN_VAR}"),
            Credential::TokenFile => {
                format!("spoold refused the token of --token-file ({STEP_TOKEN_VAR} is not set)")
            }
            Credential::None => format!("no token was sent ({STEP_TOKEN_VAR} is not set)"),
        };
        anyhow::Error::from(err).context(hint)
    }
}

/// A positive attempt number, as the executor writes it.
fn parse_attempt(value: &str) -> Result<u32, UsageError> {
    match value.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(UsageError::new(format!(
            "{ATTEMPT_VAR} must be an attempt number from 1, not {value:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<StepEnv, String> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), OsString::from(v)))
            .collect();
        StepEnv::read(|name| vars.get(name).cloned()).map_err(|e| e.to_string())
    }

    #[test]
    fn the_environment_names_task_and_attempt() {
        let env = read(&[(TASK_ID_VAR, "t1"), (ATTEMPT_VAR, "2")]).expect("valid");
        assert_eq!((env.task_id.as_str(), env.attempt), ("t1", 2));
        assert!(env.step_token.is_none());
        assert_eq!(env.credential, Credential::None);

        let env = read(&[
            (TASK_ID_VAR, " t1\n"),
            (ATTEMPT_VAR, "3\n"),
            (STEP_TOKEN_VAR, "s3cret"),
        ])
        .expect("valid");
        assert_eq!((env.task_id.as_str(), env.attempt), ("t1", 3));
        assert_eq!(env.credential, Credential::StepToken);
        assert_eq!(format!("{:?}", env.step_token), "Some(Token([redacted]))");

        // Empty is unset.
        let env =
            read(&[(TASK_ID_VAR, "t"), (ATTEMPT_VAR, "1"), (STEP_TOKEN_VAR, "")]).expect("valid");
        assert!(env.step_token.is_none());
    }

    #[test]
    fn a_missing_or_bad_variable_is_a_usage_error() {
        let outside = "`spoolctl step` runs inside a task's script, where spoold sets it";
        let check = |vars: &[(&str, &str)], expected: &str| {
            assert_eq!(read(vars).map(|_| ()), Err(expected.to_owned()), "{vars:?}");
        };
        check(&[], &format!("SPOOLD_TASK_ID is not set: {outside}"));
        check(
            &[(TASK_ID_VAR, " "), (ATTEMPT_VAR, "1")],
            &format!("SPOOLD_TASK_ID is not set: {outside}"),
        );
        check(
            &[(TASK_ID_VAR, "t")],
            &format!("SPOOLD_ATTEMPT is not set: {outside}"),
        );
        for bad in ["", "0", "-1", "x", "1.5", "99999999999"] {
            check(
                &[(TASK_ID_VAR, "t"), (ATTEMPT_VAR, bad)],
                &format!("SPOOLD_ATTEMPT must be an attempt number from 1, not {bad:?}"),
            );
        }
        check(
            &[
                (TASK_ID_VAR, "t"),
                (ATTEMPT_VAR, "1"),
                (STEP_TOKEN_VAR, "a\nb"),
            ],
            "SPOOLD_STEP_TOKEN contains characters not allowed in an HTTP header",
        );
    }

    #[test]
    fn a_refused_request_names_the_credential() {
        let env = |credential| StepEnv {
            task_id: "t".into(),
            attempt: 1,
            step_token: None,
            credential,
        };
        let refused = || ClientError::Api {
            status: 401,
            code: "unauthorized".into(),
            message: "bearer token required".into(),
        };
        let check = |credential, expected: &str| {
            assert_eq!(
                format!("{:#}", env(credential).explain(refused())),
                expected,
                "{credential:?}"
            );
        };
        let api = "spoold returned HTTP 401 (unauthorized): bearer token required";
        check(
            Credential::StepToken,
            &format!("spoold refused the token in SPOOLD_STEP_TOKEN: {api}"),
        );
        check(
            Credential::TokenFile,
            &format!(
                "spoold refused the token of --token-file (SPOOLD_STEP_TOKEN is not set): {api}"
            ),
        );
        check(
            Credential::None,
            &format!("no token was sent (SPOOLD_STEP_TOKEN is not set): {api}"),
        );
        // Other errors are left as they are.
        let not_found = ClientError::Api {
            status: 404,
            code: "not_found".into(),
            message: "task not found".into(),
        };
        assert_eq!(
            format!("{:#}", env(Credential::StepToken).explain(not_found)),
            "spoold returned HTTP 404 (not_found): task not found"
        );
    }
}
