//! `spoolctl task types`: the task types spoold declares, one row each; `--json` shows every
//! field (commands, parameter patterns, exit-code classes, …).

use spool_proto::{TaskTypeList, TaskTypeView};

use crate::client::Client;
use crate::commands::Exit;
use crate::output::{Output, Table};

/// The header of `task types`; the description comes last so a terminal cuts only it.
const HEADER: [&str; 6] = [
    "TYPE",
    "PARAMS",
    "MAX_ATTEMPTS",
    "TIMEOUT",
    "ON_INTERRUPT",
    "DESCRIPTION",
];

pub async fn run(client: &Client, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let list = client.task_types().await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        out.table(&table(&list))?;
    }
    Ok(Exit::Success)
}

fn table(list: &TaskTypeList) -> Table {
    let mut table = Table::new();
    table.row(HEADER);
    for t in &list.types {
        table.row(row(t));
    }
    table
}

/// One type; a parameter with a default is optional and shown in brackets.
fn row(t: &TaskTypeView) -> Vec<String> {
    let params: Vec<String> = t
        .params
        .iter()
        .map(|(name, p)| match p.default {
            Some(_) => format!("[{name}]"),
            None => name.clone(),
        })
        .collect();
    vec![
        t.name.clone(),
        if params.is_empty() {
            "-".to_owned()
        } else {
            params.join(",")
        },
        t.max_attempts.to_string(),
        t.timeout.clone(),
        t.on_interrupt.clone(),
        t.description
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "-".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_rows() {
        let list: TaskTypeList = serde_json::from_value(serde_json::json!({"types": [
            {"name": "backup", "description": "Dump one database", "command": ["/b", "{db}"],
             "params": {"db": {"pattern": "[a-z]+", "maxLength": 256},
                        "mode": {"pattern": "full|diff", "maxLength": 256, "default": "full"}},
             "scope": "{db}", "timeout": "1h", "maxAttempts": 3, "backoffBase": "2s",
             "backoffCap": "5m", "killGrace": "10s", "retryOnTimeout": false,
             "exitCodes": {}, "onInterrupt": "review", "operatorRetry": true, "env": [],
             "outputLimit": "1MiB", "onPartialFailure": "review"},
            {"name": "noop", "command": ["/n"], "params": {}, "scope": "default",
             "timeout": "500ms", "maxAttempts": 1, "backoffBase": "2s", "backoffCap": "5m",
             "killGrace": "10s", "retryOnTimeout": false, "exitCodes": {},
             "onInterrupt": "fail", "operatorRetry": false, "env": [],
             "outputLimit": "1MiB", "onPartialFailure": "review"}
        ]}))
        .expect("valid types");
        assert_eq!(
            table(&list).render(),
            "TYPE    PARAMS     MAX_ATTEMPTS  TIMEOUT  ON_INTERRUPT  DESCRIPTION\n\
             backup  db,[mode]  3             1h       review        Dump one database\n\
             noop    -          1             500ms    fail          -\n"
        );
    }
}
