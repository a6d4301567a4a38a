//! `spoolctl task steps ID`: the steps a task's script reported done, in the order they were
//! reported, with the attempt that did each.

use spool_proto::{TaskStepList, TaskStepView};

use crate::cli::TaskIdArgs;
use crate::client::Client;
use crate::commands::task::task_id;
use crate::commands::Exit;
use crate::output::{Output, Table};

/// The header of `task steps`.
const HEADER: [&str; 3] = ["NAME", "ATTEMPT", "AT"];

pub async fn run(client: &Client, args: TaskIdArgs, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let id = task_id(&args.id)?;
    let list = client.task_steps(id).await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        out.table(&table(&list))?;
    }
    Ok(Exit::Success)
}

fn table(list: &TaskStepList) -> Table {
    let mut table = Table::new();
    table.row(HEADER);
    for step in &list.steps {
        table.row(row(step));
    }
    table
}

fn row(s: &TaskStepView) -> Vec<String> {
    vec![s.name.clone(), s.attempt.to_string(), s.at.clone()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_rows() {
        let list: TaskStepList = serde_json::from_str(
            r#"{"steps":[{"name":"dump","attempt":1,"at":"2026-07-18T12:00:00.000Z"},
                         {"name":"db1.upload:s3","attempt":12,"at":"2026-07-18T12:05:00.000Z"}]}"#,
        )
        .expect("valid steps");
        assert_eq!(
            table(&list).render(),
            "NAME           ATTEMPT  AT\n\
             dump           1        2026-07-18T12:00:00.000Z\n\
             db1.upload:s3  12       2026-07-18T12:05:00.000Z\n"
        );
        let none = TaskStepList { steps: vec![] };
        assert_eq!(table(&none).render(), "NAME  ATTEMPT  AT\n");
    }
}
