//! Statements written once for both backends: values bound the same way, rows read the same
//! way, and the placeholders PostgreSQL writes (`$1`, `$2`, …), which SQLite is given as `?1`,
//! `?2`, … . A store operation that is the same in both dialects is written once over [`Sql`]
//! (as `task_changes.rs` and `delivery_changes.rs` do); each backend implements [`Sql`] for its connection. SQLite's
//! implementation never waits: its callers drive the operation with [`ready`].
//!
//! What is not the same in both dialects stays in the backends: arrays and JSON, row locks
//! (`FOR UPDATE`, which SQLite's one writer does not need: [`Sql::FOR_UPDATE`]), index hints.

use std::borrow::Cow;
use std::error::Error;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use tokio_postgres::types::{to_sql_checked, IsNull, Type};

use crate::error::{Result, StoreError};

/// A value bound to a statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    Null,
    /// Any integer column (BIGINT in PostgreSQL's schema, INTEGER in SQLite's).
    Int(i64),
    Text(&'a str),
    Bool(bool),
    /// BYTEA in PostgreSQL, BLOB in SQLite.
    Bytes(&'a [u8]),
}

impl From<i64> for Value<'_> {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl From<u32> for Value<'_> {
    fn from(n: u32) -> Self {
        Value::Int(i64::from(n))
    }
}

impl From<bool> for Value<'_> {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Text(s)
    }
}

impl<'a> From<&'a [u8]> for Value<'a> {
    fn from(b: &'a [u8]) -> Self {
        Value::Bytes(b)
    }
}

impl<'a> From<&'a Vec<u8>> for Value<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        Value::Bytes(b)
    }
}

impl<'a> From<&'a String> for Value<'a> {
    fn from(s: &'a String) -> Self {
        Value::Text(s)
    }
}

impl<'a, T> From<Option<T>> for Value<'a>
where
    T: Into<Value<'a>>,
{
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl<'a> From<&'a Option<String>> for Value<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().into()
    }
}

impl From<u16> for Value<'_> {
    fn from(n: u16) -> Self {
        Value::Int(i64::from(n))
    }
}

impl From<i32> for Value<'_> {
    fn from(n: i32) -> Self {
        Value::Int(i64::from(n))
    }
}

/// A value from a reference to one: what call sites hold (`&row.column`).
macro_rules! from_ref {
    ($($t:ty),*) => {$(
        impl<'a> From<&$t> for Value<'a> {
            fn from(v: &$t) -> Self {
                (*v).into()
            }
        }
    )*};
}

from_ref!(
    i64,
    i32,
    u32,
    u16,
    bool,
    Option<i64>,
    Option<i32>,
    Option<u32>,
    Option<u16>,
    Option<bool>
);

impl<'a> From<&&'a str> for Value<'a> {
    fn from(s: &&'a str) -> Self {
        Value::Text(s)
    }
}

impl<'a> From<&Option<&'a str>> for Value<'a> {
    fn from(s: &Option<&'a str>) -> Self {
        (*s).into()
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::Null => ValueRef::Null,
            Value::Int(n) => ValueRef::Integer(n),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Bool(b) => ValueRef::Integer(i64::from(b)),
            Value::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

impl tokio_postgres::types::ToSql for Value<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn Error + Sync + Send>> {
        match *self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(n) if *ty == Type::INT4 => i32::try_from(n)?.to_sql(ty, out),
            Value::Int(n) => n.to_sql(ty, out),
            Value::Text(s) => s.to_sql(ty, out),
            Value::Bool(b) => b.to_sql(ty, out),
            Value::Bytes(b) => b.to_sql(ty, out),
        }
    }

    /// Whether the value fits is checked when it is written: a value is bound to whatever the
    /// statement says the parameter is.
    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A value read from a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
    Bool(bool),
}

/// A row read through [`Sql::row`]: its cells in the order the statement selects them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row(pub(crate) Vec<Cell>);

impl Row {
    fn cell(&self, i: usize) -> Result<&Cell> {
        self.0
            .get(i)
            .ok_or_else(|| StoreError::Database(format!("column {i} is not in the row")))
    }

    fn wrong(&self, i: usize, wanted: &str) -> StoreError {
        StoreError::Database(format!("column {i}: {:?} is not {wanted}", self.0.get(i)))
    }

    pub(crate) fn int<T: TryFrom<i64>>(&self, i: usize) -> Result<T> {
        self.opt_int(i)?.ok_or_else(|| self.wrong(i, "an integer"))
    }

    pub(crate) fn opt_int<T: TryFrom<i64>>(&self, i: usize) -> Result<Option<T>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => T::try_from(*n)
                .map(Some)
                .map_err(|_| self.wrong(i, "in range")),
            _ => Err(self.wrong(i, "an integer")),
        }
    }

    /// A boolean: PostgreSQL's BOOLEAN, SQLite's 0 or 1.
    pub(crate) fn bool(&self, i: usize) -> Result<bool> {
        match self.cell(i)? {
            Cell::Bool(b) => Ok(*b),
            Cell::Int(n) => Ok(*n != 0),
            _ => Err(self.wrong(i, "a boolean")),
        }
    }

    pub(crate) fn text(&self, i: usize) -> Result<String> {
        self.opt_text(i)?.ok_or_else(|| self.wrong(i, "text"))
    }

    pub(crate) fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.cell(i)? {
            Cell::Null => Ok(None),
            Cell::Text(s) => Ok(Some(s.clone())),
            _ => Err(self.wrong(i, "text")),
        }
    }
}

/// A connection (SQLite) or transaction (PostgreSQL) that runs statements written with
/// PostgreSQL's placeholders.
pub(crate) trait Sql {
    /// What makes a `SELECT` lock the rows it reads until the transaction ends: ` FOR UPDATE`
    /// in PostgreSQL; nothing in SQLite, whose one writer already excludes every other.
    const FOR_UPDATE: &'static str;

    /// Run a statement; the number of rows it changed.
    async fn exec(&self, sql: &str, values: &[Value<'_>]) -> Result<u64>;

    /// The first row of a statement, or `None`.
    async fn row(&self, sql: &str, values: &[Value<'_>]) -> Result<Option<Row>>;
}

/// The result of a future that never waits: SQLite's statements behind [`Sql`] (and a claim
/// pass's behind its backend's I/O). Polled once; a future that did wait is an error in this
/// crate, reported as such rather than blocked on.
pub(crate) fn ready<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(result) => result,
        Poll::Pending => Err(StoreError::Database(
            "a synchronous store operation waited (a bug in spool-store)".to_owned(),
        )),
    }
}

/// A statement written with `$1`, `$2`, … as SQLite takes it: `?1`, `?2`, … . A `$` counts as a
/// placeholder only before a digit (SQLite's JSON paths, `'$.name'`, stay as they are).
pub(crate) fn sqlite_placeholders(sql: &str) -> Cow<'_, str> {
    let bytes = sql.as_bytes();
    let placeholder =
        |i: usize| bytes[i] == b'$' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
    if !(0..bytes.len()).any(placeholder) {
        return Cow::Borrowed(sql);
    }
    let mut out = String::with_capacity(sql.len());
    for (i, c) in sql.char_indices() {
        out.push(if placeholder(i) { '?' } else { c });
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_sqlite_s_and_json_paths_stay() {
        assert_eq!(
            sqlite_placeholders("UPDATE t SET a = $2, b = $10 WHERE id = $1"),
            "UPDATE t SET a = ?2, b = ?10 WHERE id = ?1"
        );
        assert_eq!(
            sqlite_placeholders("SELECT json_extract(x, '$.a') FROM t WHERE id = $1"),
            "SELECT json_extract(x, '$.a') FROM t WHERE id = ?1"
        );
        assert!(matches!(sqlite_placeholders("SELECT 1"), Cow::Borrowed(_)));
        assert_eq!(sqlite_placeholders("SELECT '€' || $1"), "SELECT '€' || ?1");
    }

    #[test]
    fn rows_read_integers_booleans_and_text_as_either_backend_gives_them() {
        let row = Row(vec![
            Cell::Int(7),
            Cell::Null,
            Cell::Int(1),
            Cell::Bool(false),
            Cell::Text("x".into()),
            Cell::Int(-1),
        ]);
        assert_eq!(row.int::<u32>(0).ok(), Some(7));
        assert_eq!(row.opt_int::<i64>(1).ok(), Some(None));
        assert!(row.int::<i64>(1).is_err());
        assert_eq!(row.bool(2).ok(), Some(true));
        assert_eq!(row.bool(3).ok(), Some(false));
        assert_eq!(row.opt_text(4).ok(), Some(Some("x".to_owned())));
        assert_eq!(row.opt_text(1).ok(), Some(None));
        assert!(row.int::<u32>(5).is_err(), "out of range is an error");
        assert!(row.opt_text(0).is_err());
        assert!(row.int::<i64>(9).is_err());
    }

    #[test]
    fn values_come_from_the_model_s_types() {
        let missing: Option<String> = None;
        let note = Some("n".to_owned());
        assert_eq!(Value::from(&missing), Value::Null);
        assert_eq!(Value::from(&note), Value::Text("n"));
        assert_eq!(Value::from(3u32), Value::Int(3));
        assert_eq!(Value::from(Some("a")), Value::Text("a"));
        assert_eq!(Value::from(None::<i64>), Value::Null);
    }
}
