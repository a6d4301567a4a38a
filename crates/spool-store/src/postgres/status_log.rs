//! Reading a transition log, a delivery's or a task's (see [`crate::status_log`]).

use deadpool_postgres::GenericClient;

use super::{get, int, row, rows};
use crate::error::{Result, StoreError};
use crate::status_log::{Logged, Transition};

/// The log of one delivery or task, oldest first; `None` if there is no such one.
pub(crate) async fn read<S: Logged, C: GenericClient>(
    c: &C,
    id: &str,
) -> Result<Option<Vec<Transition<S>>>> {
    let exists = format!("SELECT 1 FROM {} WHERE id = $1", S::OWNERS);
    if row(c, &exists, &[&id]).await?.is_none() {
        return Ok(None);
    }
    let sql = format!(
        "SELECT from_status, to_status, attempt, at, reason, note FROM {} \
         WHERE {} = $1 ORDER BY seq",
        S::LOG,
        S::KEY
    );
    rows(c, &sql, &[&id])
        .await?
        .iter()
        .map(|r| {
            let from: Option<String> = get(r, "from_status")?;
            Ok(Transition {
                from: from
                    .as_deref()
                    .map(|f| parse(f, "from_status"))
                    .transpose()?,
                to: parse(&get::<String>(r, "to_status")?, "to_status")?,
                attempt: int(r, "attempt")?,
                at: get(r, "at")?,
                reason: get(r, "reason")?,
                note: get(r, "note")?,
            })
        })
        .collect::<Result<_>>()
        .map(Some)
}

fn parse<S: Logged>(text: &str, column: &str) -> Result<S> {
    text.parse()
        .map_err(|e| StoreError::Database(format!("column {column}: {e}")))
}
