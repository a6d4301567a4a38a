//! The transition log's entry, one shape for deliveries and tasks: every status change, with
//! the attempt count after it, its time and a stable reason code. Either log is appended to by
//! `changes::log`, written once over `Sql`, and read by one function per backend over [`Logged`]
//! (`sqlite/status_log.rs`, `postgres/status_log.rs`).

use std::str::FromStr;

use crate::clock::Millis;

/// One status change, as a transition log keeps it. A delivery's is `model::Transition`, a
/// task's `tasks::TaskTransition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition<S> {
    /// `None` for the first entry: the delivery or task was created.
    pub from: Option<S>,
    pub to: S,
    /// The attempt count after the change (a delivery's: in its cycle).
    pub attempt: u32,
    pub at: Millis,
    /// Why, as a stable code (the API's `reason`; each resource's codes are listed there).
    pub reason: String,
    pub note: Option<String>,
}

/// A status whose changes a transition log keeps, and where that log is: the tables and the
/// key column are the same in both backends' schemas.
pub trait Logged: FromStr<Err: std::error::Error + Send + Sync + 'static> + Sized {
    /// The table of the things that have this status (`deliveries`, `tasks`).
    const OWNERS: &'static str;
    /// Their log's table, with `from_status`, `to_status`, `attempt`, `at`, `reason`, `note`
    /// and `seq` (the order of the entries).
    const LOG: &'static str;
    /// The log's column naming the owner.
    const KEY: &'static str;
    /// The statement that appends an entry: owner, seq, from, to, attempt, at, reason, note.
    const APPEND: &'static str;

    /// The status as the log stores it.
    fn name(self) -> &'static str;
}
