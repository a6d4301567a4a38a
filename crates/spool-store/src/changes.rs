//! What every status change writes besides its row, for deliveries and tasks alike, over
//! [`Sql`]: the transition log's entry. Above `status_log` (the entry's shape and where each
//! log is) and `sql`; below `delivery_changes` and `task_changes`, which call it.

use crate::clock::Millis;
use crate::error::Result;
use crate::sql::Sql;
use crate::status_log::Logged;

/// Append a status change to its owner's log. Every write that changes a status bumps the
/// owner's `log_seq` and calls this in the same transaction, with its position: the `seq` and
/// the attempt count after the change, as its `RETURNING log_seq, attempts` gave them back (so
/// logging costs one insert and no lookup).
#[allow(
    clippy::too_many_arguments,
    reason = "one row of the log, written in one place; a struct would only rename the columns"
)]
pub(crate) async fn log<S: Logged + Copy>(
    db: &impl Sql,
    id: &str,
    from: Option<S>,
    to: S,
    position: impl Into<(i64, i64)>,
    at: Millis,
    reason: &str,
    note: Option<&str>,
) -> Result<()> {
    let (seq, attempt) = position.into();
    db.exec(
        S::APPEND,
        &[
            id.into(),
            seq.into(),
            from.map(S::name).into(),
            to.name().into(),
            attempt.into(),
            at.into(),
            reason.into(),
            note.into(),
        ],
    )
    .await?;
    Ok(())
}
