//! Reading a transition log, a delivery's or a task's (see [`crate::status_log`]).

use rusqlite::types::Type;
use rusqlite::{Connection, Row};

use super::map_err;
use crate::error::Result;
use crate::status_log::{Logged, Transition};

/// The log of one delivery or task, oldest first; `None` if there is no such one.
pub(crate) fn read<S: Logged>(conn: &Connection, id: &str) -> Result<Option<Vec<Transition<S>>>> {
    let exists = conn
        .prepare_cached(&format!("SELECT 1 FROM {} WHERE id = ?1", S::OWNERS))
        .and_then(|mut st| st.exists([id]))
        .map_err(map_err)?;
    if !exists {
        return Ok(None);
    }
    let sql = format!(
        "SELECT from_status, to_status, attempt, at, reason, note FROM {} \
         WHERE {} = ?1 ORDER BY seq",
        S::LOG,
        S::KEY
    );
    conn.prepare_cached(&sql)
        .and_then(|mut st| {
            st.query_map([id], |r| {
                Ok(Transition {
                    from: status(r, 0)?,
                    to: status(r, 1)?.ok_or(rusqlite::Error::InvalidColumnType(
                        1,
                        "to_status".into(),
                        Type::Null,
                    ))?,
                    attempt: r.get(2)?,
                    at: r.get(3)?,
                    reason: r.get(4)?,
                    note: r.get(5)?,
                })
            })?
            .collect()
        })
        .map(Some)
        .map_err(map_err)
}

fn status<S: Logged>(r: &Row<'_>, column: usize) -> rusqlite::Result<Option<S>> {
    let text: Option<String> = r.get(column)?;
    text.map(|t| {
        t.parse::<S>()
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(column, Type::Text, Box::new(e)))
    })
    .transpose()
}
