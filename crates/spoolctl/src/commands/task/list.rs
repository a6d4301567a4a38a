//! `spoolctl task list`: one page of tasks, or with `--all` every page merged into one table
//! (or one JSON document), so columns line up across pages.

use spool_proto::{TaskList, TaskStatus, TaskView};

use crate::cli::TaskListArgs;
use crate::client::{Client, TaskQuery};
use crate::commands::{fetch_pages, say_more, Exit, Listing};
use crate::output::{now_ms, task_list_row, Output, Table, TASK_LIST_HEADER};

pub async fn run(
    client: &Client,
    args: TaskListArgs,
    out: &mut Output<'_>,
) -> anyhow::Result<Exit> {
    let status = args.status.map(TaskStatus::from);
    let task_type = args.task_type.as_deref().filter(|t| !t.is_empty());
    let limit = args.page.limit;
    let list: TaskList = fetch_pages(&args.page, |cursor| async move {
        let query = TaskQuery {
            status,
            task_type,
            limit,
            cursor: cursor.as_deref(),
        };
        client.tasks(&query).await
    })
    .await?;
    print(out, &list)?;
    say_more(&list);
    Ok(Exit::Success)
}

impl Listing for TaskList {
    type Entry = TaskView;

    fn next_cursor(&self) -> Option<&str> {
        self.next_cursor.as_deref()
    }

    fn into_entries(self) -> Vec<TaskView> {
        self.tasks
    }

    fn merged(tasks: Vec<TaskView>) -> Self {
        TaskList {
            count: tasks.len(),
            tasks,
            next_cursor: None,
        }
    }
}

/// The table, or nothing at all when there are no rows (as `list` does).
fn print(out: &mut Output<'_>, list: &TaskList) -> std::io::Result<()> {
    if out.is_json() {
        return out.json(list);
    }
    if list.tasks.is_empty() {
        return Ok(());
    }
    let mut table = Table::new();
    table.row(TASK_LIST_HEADER);
    let now = now_ms();
    for t in &list.tasks {
        table.row(task_list_row(t, now));
    }
    out.table(&table)
}
