//! `spoolctl locks`: the resource locks tasks hold, one row each, with the tasks waiting for
//! them in the order they will get them.

use spool_proto::{LockList, LockView};

use crate::client::Client;
use crate::commands::Exit;
use crate::output::{Output, Table};

/// The header of `locks`; the waiting tasks come last so a terminal cuts only them.
const HEADER: [&str; 7] = [
    "NAME", "TASK", "TYPE", "STATUS", "ATTEMPT", "SINCE", "WAITING",
];

pub async fn run(client: &Client, out: &mut Output<'_>) -> anyhow::Result<Exit> {
    let list = client.locks().await?;
    if out.is_json() {
        out.json(&list)?;
    } else {
        out.table(&table(&list))?;
    }
    Ok(Exit::Success)
}

fn table(list: &LockList) -> Table {
    let mut table = Table::new();
    table.row(HEADER);
    for lock in &list.locks {
        table.row(row(lock));
    }
    table
}

fn row(l: &LockView) -> Vec<String> {
    vec![
        l.name.clone(),
        l.task_id.clone(),
        l.task_type.clone(),
        l.task_status.as_str().to_owned(),
        holder(l),
        l.since.clone(),
        waiting(&l.waiting),
    ]
}

/// The attempt holding it: `2`, or `2, ending (daemon_restart)` while another executor ends
/// what is left of it.
fn holder(l: &LockView) -> String {
    match &l.ending {
        Some(why) => format!("{}, ending ({why})", l.attempt),
        None => l.attempt.to_string(),
    }
}

/// `0`, or the count and the ids in order: `2: ID ID`.
fn waiting(ids: &[String]) -> String {
    if ids.is_empty() {
        "0".to_owned()
    } else {
        format!("{}: {}", ids.len(), ids.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_rows() {
        let list: LockList = serde_json::from_str(
            r#"{"locks":[
                {"name":"db:one","taskId":"0190f3c2a1b27c4e9d0a5b6c7d8e9f01","taskType":"backup",
                 "taskStatus":"running","attempt":1,"ending":"daemon_restart",
                 "since":"2026-07-18T12:00:00.000Z","waiting":[]},
                {"name":"deploy","taskId":"0190f3c2a1b27c4e9d0a5b6c7d8e9f02","taskType":"deploy",
                 "taskStatus":"pending","attempt":2,"since":"2026-07-18T12:01:00.000Z",
                 "waiting":["0190f3c2a1b27c4e9d0a5b6c7d8e9f03","0190f3c2a1b27c4e9d0a5b6c7d8e9f04"]}
            ]}"#,
        )
        .expect("valid locks");
        assert_eq!(
            table(&list).render(),
            "NAME    TASK                              TYPE    STATUS   ATTEMPT                     SINCE                     WAITING\n\
             db:one  0190f3c2a1b27c4e9d0a5b6c7d8e9f01  backup  running  1, ending (daemon_restart)  2026-07-18T12:00:00.000Z  0\n\
             deploy  0190f3c2a1b27c4e9d0a5b6c7d8e9f02  deploy  pending  2                           2026-07-18T12:01:00.000Z  \
             2: 0190f3c2a1b27c4e9d0a5b6c7d8e9f03 0190f3c2a1b27c4e9d0a5b6c7d8e9f04\n"
        );
        let none = LockList { locks: vec![] };
        assert_eq!(
            table(&none).render(),
            "NAME  TASK  TYPE  STATUS  ATTEMPT  SINCE  WAITING\n"
        );
    }
}
