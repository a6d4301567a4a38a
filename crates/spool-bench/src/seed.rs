//! Seeds pending deliveries straight into a spoold database file, for the scenarios that need a
//! backlog far larger than is worth enqueueing over HTTP (a million rows in seconds).
//!
//! The daemon creates the schema (it is started once on the empty file and stopped); the rows
//! are then written with the columns `spool-store`'s insert sets, with the values it would give
//! a fresh delivery. Before writing, the table is checked against that column set: a schema
//! change that adds a required column shows up here as an error, not as rows the daemon
//! cannot read (changes that only add indexes or optional columns pass).

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use rusqlite::{params, Connection};

/// The columns the seeder fills, as `spool-store`'s insert does (minus the idempotency key and
/// expiry, which it leaves NULL here).
const COLUMNS: &[&str] = &[
    "id",
    "target_url",
    "origin",
    "method",
    "headers",
    "body_kind",
    "body",
    "status",
    "max_attempts",
    "created_at",
    "updated_at",
    "next_attempt_at",
    "not_before",
    "attempts",
    "last_error",
    "last_error_code",
];
/// Rows per transaction.
const ROWS_PER_TRANSACTION: u64 = 50_000;
/// `body_kind` of a JSON body.
const BODY_JSON: i64 = 1;
/// spoold's default attempts per cycle.
const MAX_ATTEMPTS: i64 = 8;

/// Pending deliveries to seed.
#[derive(Debug, Clone)]
pub struct Backlog {
    pub count: u64,
    /// `http://127.0.0.1:PORT`, as spoold stores origins (`scheme://host:port`).
    pub origin: String,
    /// Path appended to the origin for each delivery's target URL.
    pub path: String,
    pub due: Due,
}

/// When the seeded deliveries become due.
#[derive(Debug, Clone, Copy)]
pub enum Due {
    /// Due at once: the daemon starts on them as soon as it is up.
    Now,
    /// Not before this far in the future (`notBefore`): they sit in the database untouched.
    After(Duration),
    /// Never: they are `failed`, every attempt spent on an `HTTP 503` (for bulk retries).
    Failed,
}

/// Insert `backlog` into the spoold database at `db`, which the daemon must have created and
/// must not be running on. Returns how long it took.
pub fn seed(db: &Path, backlog: &Backlog) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut conn = Connection::open(db).with_context(|| format!("open {}", db.display()))?;
    check_columns(&conn).with_context(|| {
        format!(
            "{}: the deliveries table no longer matches what the seeder writes \
             (update crates/spool-bench/src/seed.rs)",
            db.display()
        )
    })?;
    // Seeding is set-up, not the measurement: no need to wait for the disk on every batch.
    conn.pragma_update(None, "synchronous", "OFF")
        .context("set synchronous=OFF for seeding")?;
    let now = now_ms();
    let (next_attempt_at, not_before) = match backlog.due {
        Due::Now => (Some(now), None),
        Due::After(d) => {
            let at = now + d.as_millis() as i64;
            (Some(at), Some(at))
        }
        Due::Failed => (None, None),
    };
    let failed = matches!(backlog.due, Due::Failed);
    let (status, attempts, last_error, last_error_code) = if failed {
        (
            "failed",
            MAX_ATTEMPTS,
            Some("HTTP 503"),
            Some("http_status"),
        )
    } else {
        ("pending", 0, None, None)
    };
    let target_url = format!("{}{}", backlog.origin, backlog.path);
    let mut seq = 0u64;
    while seq < backlog.count {
        let end = (seq + ROWS_PER_TRANSACTION).min(backlog.count);
        let tx = conn.transaction().context("begin")?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO deliveries (id, target_url, origin, method, headers, body_kind, \
                     body, status, max_attempts, created_at, updated_at, next_attempt_at, \
                     not_before, attempts, last_error, last_error_code) \
                     VALUES (?1, ?2, ?3, 'POST', '[]', ?4, ?5, ?10, ?6, ?7, ?7, ?8, ?9, ?11, ?12, \
                     ?13)",
                )
                .context("prepare the insert")?;
            for i in seq..end {
                insert
                    .execute(params![
                        delivery_id(now, i),
                        target_url,
                        backlog.origin,
                        BODY_JSON,
                        format!("{{\"seq\":{i}}}").into_bytes(),
                        MAX_ATTEMPTS,
                        now,
                        next_attempt_at,
                        not_before,
                        status,
                        attempts,
                        last_error,
                        last_error_code,
                    ])
                    .context("insert a delivery")?;
            }
        }
        tx.commit().context("commit")?;
        seq = end;
    }
    // Leave a plain database file: WAL folded in and emptied, everything on disk, so the
    // daemon's start and the copies made of the file measure no leftover seeding work.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .context("checkpoint")?;
    drop(conn);
    sync_file(db)?;
    Ok(started.elapsed())
}

/// Every column the seeder fills exists, and every column it leaves out may be left out.
fn check_columns(conn: &Connection) -> anyhow::Result<()> {
    let columns: Vec<(String, bool, bool)> = conn
        .prepare(
            "SELECT name, \"notnull\", dflt_value IS NOT NULL FROM pragma_table_info('deliveries')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    if columns.is_empty() {
        bail!("no deliveries table");
    }
    for wanted in COLUMNS {
        if !columns.iter().any(|(name, _, _)| name == wanted) {
            bail!("column {wanted} is gone");
        }
    }
    for (name, not_null, has_default) in &columns {
        if *not_null && !*has_default && !COLUMNS.contains(&name.as_str()) {
            bail!("column {name} is required and the seeder does not set it");
        }
    }
    Ok(())
}

/// Copy a seeded database (a file with an empty WAL) and make the copy durable.
pub fn copy_database(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    sync_file(to)
}

fn sync_file(path: &Path) -> anyhow::Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("sync {}", path.display()))
}

/// 32 lowercase hex characters, time-ordered like spoold's UUIDv7 ids, unique per `seq`.
fn delivery_id(now_ms: i64, seq: u64) -> String {
    format!("{:012x}7bbb{seq:016x}", now_ms as u64 & 0xffff_ffff_ffff)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_look_like_spoold_ids() {
        let a = delivery_id(1_700_000_000_000, 1);
        let b = delivery_id(1_700_000_000_000, 2);
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert!(a < b);
    }

    #[test]
    fn column_check() {
        let conn = Connection::open_in_memory().expect("in-memory database");
        let base = COLUMNS
            .iter()
            .map(|c| format!("{c} TEXT NOT NULL"))
            .collect::<Vec<_>>()
            .join(", ");
        let check = |extra: &str| {
            conn.execute_batch(&format!(
                "DROP TABLE IF EXISTS deliveries; CREATE TABLE deliveries ({base}{extra})"
            ))
            .expect("create table");
            check_columns(&conn).map_err(|e| e.to_string())
        };
        assert_eq!(check(""), Ok(()));
        assert_eq!(check(", note TEXT, n INTEGER NOT NULL DEFAULT 0"), Ok(()));
        let err = check(", tenant TEXT NOT NULL").expect_err("required column");
        assert!(err.contains("tenant"), "{err}");
    }
}
