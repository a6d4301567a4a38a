//! Versioned migrations, applied at open inside one transaction. `PRAGMA user_version` holds the
//! version; a database from a newer spoold is refused rather than guessed at.

use rusqlite::Connection;

use super::map_err;
use crate::error::{Result, StoreError};

/// Each entry upgrades the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: deliveries, their attempts, and idempotency keys.
    r#"
    CREATE TABLE deliveries (
        id                 TEXT    NOT NULL UNIQUE,
        idempotency_key    TEXT,
        target_url         TEXT    NOT NULL,
        origin             TEXT    NOT NULL,
        method             TEXT    NOT NULL,
        headers            TEXT    NOT NULL,
        body_kind          INTEGER NOT NULL,
        body               BLOB,
        status             TEXT    NOT NULL,
        attempts           INTEGER NOT NULL DEFAULT 0,
        uncharged          INTEGER NOT NULL DEFAULT 0,
        max_attempts       INTEGER NOT NULL,
        claim_seq          INTEGER NOT NULL DEFAULT 0,
        cycle              INTEGER NOT NULL DEFAULT 1,
        last_error         TEXT,
        last_error_code    TEXT,
        last_response_code INTEGER,
        created_at         INTEGER NOT NULL,
        updated_at         INTEGER NOT NULL,
        next_attempt_at    INTEGER,
        not_before         INTEGER,
        expires_at         INTEGER,
        lease_until        INTEGER
    );
    -- The claim path: due pending work in due order, origin included so that saturated
    -- targets are skipped inside the index.
    CREATE INDEX deliveries_due ON deliveries (next_attempt_at, origin) WHERE status = 'pending';
    CREATE INDEX deliveries_lease ON deliveries (lease_until) WHERE status = 'in_flight';
    CREATE INDEX deliveries_status ON deliveries (status, id);
    CREATE INDEX deliveries_finished ON deliveries (updated_at)
        WHERE status IN ('succeeded', 'failed', 'canceled');

    CREATE TABLE attempts (
        delivery_id TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        cycle       INTEGER NOT NULL,
        number      INTEGER NOT NULL,
        started_at  INTEGER NOT NULL,
        finished_at INTEGER,
        outcome     TEXT,
        http_status INTEGER,
        error_code  TEXT,
        error       TEXT,
        duration_ms INTEGER,
        PRIMARY KEY (delivery_id, seq)
    ) WITHOUT ROWID;

    CREATE TABLE idempotency_keys (
        key         TEXT NOT NULL PRIMARY KEY,
        delivery_id TEXT NOT NULL,
        fingerprint BLOB NOT NULL
    ) WITHOUT ROWID;

    CREATE TABLE meta (
        key   TEXT NOT NULL PRIMARY KEY,
        value TEXT
    ) WITHOUT ROWID;
    "#,
    // 2: find overdue deliveries without scanning (they may wait behind a paused target).
    r#"
    CREATE INDEX deliveries_expiry ON deliveries (expires_at)
        WHERE status = 'pending' AND expires_at IS NOT NULL;
    "#,
    // 3: the next due delivery of one target, for an attempt that hands its slot on.
    r#"
    CREATE INDEX deliveries_origin_due ON deliveries (origin, next_attempt_at)
        WHERE status = 'pending';
    "#,
    // 4: deliveries counted by status and by origin and status, kept in the same transactions
    // that change them (by triggers, so no write path can forget), so that metrics, stats and
    // the targets overview never count rows. Exact across crashes: a count commits or rolls
    // back with the change it counts.
    r#"
    CREATE TABLE status_counts (
        status TEXT    NOT NULL PRIMARY KEY,
        n      INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE origin_counts (
        origin TEXT    NOT NULL,
        status TEXT    NOT NULL,
        n      INTEGER NOT NULL,
        PRIMARY KEY (origin, status)
    ) WITHOUT ROWID;
    INSERT INTO status_counts (status, n)
        SELECT status, COUNT(*) FROM deliveries GROUP BY status;
    INSERT INTO origin_counts (origin, status, n)
        SELECT origin, status, COUNT(*) FROM deliveries
        WHERE status IN ('pending', 'in_flight') GROUP BY origin, status;

    CREATE TRIGGER deliveries_counted_in AFTER INSERT ON deliveries BEGIN
        INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
        INSERT INTO origin_counts (origin, status, n)
            SELECT NEW.origin, NEW.status, 1 WHERE NEW.status IN ('pending', 'in_flight')
            ON CONFLICT (origin, status) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER deliveries_counted_out AFTER DELETE ON deliveries BEGIN
        UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
        UPDATE origin_counts SET n = n - 1 WHERE origin = OLD.origin AND status = OLD.status;
        DELETE FROM origin_counts WHERE origin = OLD.origin AND status = OLD.status AND n = 0;
    END;
    CREATE TRIGGER deliveries_counted_moved AFTER UPDATE OF status ON deliveries
        WHEN OLD.status <> NEW.status BEGIN
        UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
        INSERT INTO status_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
        UPDATE origin_counts SET n = n - 1 WHERE origin = OLD.origin AND status = OLD.status;
        DELETE FROM origin_counts WHERE origin = OLD.origin AND status = OLD.status AND n = 0;
        INSERT INTO origin_counts (origin, status, n)
            SELECT NEW.origin, NEW.status, 1 WHERE NEW.status IN ('pending', 'in_flight')
            ON CONFLICT (origin, status) DO UPDATE SET n = n + 1;
    END;
    "#,
    // 5: every status change of every delivery, in order: the transition log. `log_seq` is the
    // delivery's last entry, bumped by the statement that changes the status (no lookup).
    r#"
    ALTER TABLE deliveries ADD COLUMN log_seq INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE transitions (
        delivery_id TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        from_status TEXT,
        to_status   TEXT    NOT NULL,
        attempt     INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        reason      TEXT    NOT NULL,
        note        TEXT,
        PRIMARY KEY (delivery_id, seq)
    ) WITHOUT ROWID;
    "#,
    // 6: at-most-once deliveries: the mode, what reconciliation needs, the `unknown` clock,
    // and the reconciler's checks. `unknown` and `manual_review` are not finished: retention
    // never purges them.
    r#"
    ALTER TABLE deliveries ADD COLUMN mode TEXT NOT NULL DEFAULT 'at_least_once';
    ALTER TABLE deliveries ADD COLUMN fingerprint TEXT;
    ALTER TABLE deliveries ADD COLUMN reconcile TEXT;
    ALTER TABLE deliveries ADD COLUMN remote_id_pointer TEXT;
    ALTER TABLE deliveries ADD COLUMN window_ms INTEGER;
    ALTER TABLE deliveries ADD COLUMN remote_id TEXT;
    ALTER TABLE deliveries ADD COLUMN unknown_since INTEGER;
    ALTER TABLE deliveries ADD COLUMN review_at INTEGER;
    ALTER TABLE deliveries ADD COLUMN check_at INTEGER;
    ALTER TABLE deliveries ADD COLUMN checks INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX deliveries_checks ON deliveries (check_at) WHERE status = 'unknown';
    CREATE TABLE checks (
        delivery_id TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        http_status INTEGER,
        matches     INTEGER,
        error_code  TEXT,
        error       TEXT,
        duration_ms INTEGER NOT NULL,
        PRIMARY KEY (delivery_id, seq)
    ) WITHOUT ROWID;
    "#,
    // 7: tasks (declared commands run as durable tasks), their attempts and transition log.
    // (scope, idempotency_key) is UNIQUE: two racing submissions create one task.
    r#"
    CREATE TABLE tasks (
        id               TEXT    NOT NULL UNIQUE,
        task_type        TEXT    NOT NULL,
        scope            TEXT    NOT NULL,
        idempotency_key  TEXT,
        params           TEXT    NOT NULL,
        digest           BLOB    NOT NULL,
        status           TEXT    NOT NULL,
        attempts         INTEGER NOT NULL DEFAULT 0,
        max_attempts     INTEGER NOT NULL,
        claim_seq        INTEGER NOT NULL DEFAULT 0,
        log_seq          INTEGER NOT NULL DEFAULT 0,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL,
        started_at       INTEGER,
        finished_at      INTEGER,
        next_run_at      INTEGER,
        not_before       INTEGER,
        queue_deadline   INTEGER,
        retry_deadline   INTEGER,
        lease_until      INTEGER,
        executor_id      TEXT,
        error_code       TEXT,
        error            TEXT,
        exit_code        INTEGER,
        signal           INTEGER,
        result_summary   TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        UNIQUE (scope, idempotency_key)
    );
    CREATE INDEX tasks_due ON tasks (next_run_at) WHERE status = 'pending';
    CREATE INDEX tasks_queued ON tasks (queue_deadline)
        WHERE status = 'pending' AND attempts = 0 AND queue_deadline IS NOT NULL;
    CREATE INDEX tasks_retry_deadline ON tasks (retry_deadline)
        WHERE status = 'pending' AND retry_deadline IS NOT NULL;
    CREATE INDEX tasks_status ON tasks (status, id);
    CREATE INDEX tasks_type ON tasks (task_type, id);
    CREATE TABLE task_attempts (
        task_id          TEXT    NOT NULL,
        number           INTEGER NOT NULL,
        started_at       INTEGER NOT NULL,
        finished_at      INTEGER,
        outcome          TEXT,
        exit_code        INTEGER,
        signal           INTEGER,
        error_code       TEXT,
        error            TEXT,
        duration_ms      INTEGER,
        executor_id      TEXT    NOT NULL,
        output_bytes     INTEGER,
        output_truncated INTEGER,
        killed           INTEGER,
        PRIMARY KEY (task_id, number)
    ) WITHOUT ROWID;
    CREATE TABLE task_transitions (
        task_id     TEXT    NOT NULL,
        seq         INTEGER NOT NULL,
        from_status TEXT,
        to_status   TEXT    NOT NULL,
        attempt     INTEGER NOT NULL,
        at          INTEGER NOT NULL,
        reason      TEXT    NOT NULL,
        note        TEXT,
        PRIMARY KEY (task_id, seq)
    ) WITHOUT ROWID;
    -- Tasks by status, kept by triggers in the transactions that change them (as for
    -- deliveries), so metrics never count rows.
    CREATE TABLE task_counts (
        status TEXT    NOT NULL PRIMARY KEY,
        n      INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE TRIGGER tasks_counted_in AFTER INSERT ON tasks BEGIN
        INSERT INTO task_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER tasks_counted_out AFTER DELETE ON tasks BEGIN
        UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
    END;
    CREATE TRIGGER tasks_counted_moved AFTER UPDATE OF status ON tasks
        WHEN OLD.status <> NEW.status BEGIN
        UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
        INSERT INTO task_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END;
    "#,
    // 8: tasks, part 2. Resource locks: the rendered lock names of a task (JSON array) and the
    // locks held, one row per lock (its name is the key: one holder at a time). Checkpoints:
    // the steps a task's attempts reported done. Who ran an attempt: the process group and its
    // leader's start time and boot, so that after a crash a reused pid is never taken for ours.
    r#"
    ALTER TABLE tasks ADD COLUMN locks TEXT;
    CREATE INDEX tasks_locked ON tasks (next_run_at)
        WHERE status = 'pending' AND locks IS NOT NULL;
    CREATE TABLE task_locks (
        name    TEXT    NOT NULL PRIMARY KEY,
        task_id TEXT    NOT NULL,
        since   INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX task_locks_task ON task_locks (task_id);
    CREATE TABLE task_steps (
        task_id TEXT    NOT NULL,
        name    TEXT    NOT NULL,
        attempt INTEGER NOT NULL,
        at      INTEGER NOT NULL,
        PRIMARY KEY (task_id, name)
    ) WITHOUT ROWID;
    ALTER TABLE task_attempts ADD COLUMN pgid INTEGER;
    ALTER TABLE task_attempts ADD COLUMN leader_start INTEGER;
    ALTER TABLE task_attempts ADD COLUMN boot_id TEXT;
    ALTER TABLE task_attempts ADD COLUMN redactions INTEGER;
    "#,
    // 9: tasks, part 3. An attempt whose executor is gone is taken over and ended before its
    // task leaves `running` (`ending`: why its executor is gone). Each attempt records where
    // its processes can be seen from (`host`), how long its executor gives them after SIGTERM
    // (`kill_grace_ms`) and its group's session (`sid`); a task, where its lease holder runs
    // (`executor_host`).
    r#"
    ALTER TABLE tasks ADD COLUMN ending TEXT;
    ALTER TABLE tasks ADD COLUMN executor_host TEXT;
    ALTER TABLE task_attempts ADD COLUMN host TEXT;
    ALTER TABLE task_attempts ADD COLUMN kill_grace_ms INTEGER;
    ALTER TABLE task_attempts ADD COLUMN sid INTEGER;
    "#,
    // 10: the `[secrets]` entry a delivery's create named to sign its attempts (the name only).
    r#"
    ALTER TABLE deliveries ADD COLUMN sign_secret TEXT;
    "#,
];

/// The schema version this binary writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// Refuse a database this binary must not touch: one from a newer spoold, or another
/// program's (tables, but no spoold schema version). Only reads.
pub fn check(conn: &Connection) -> Result<i64> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(map_err)?;
    if found > LATEST {
        return Err(StoreError::TooNew {
            found,
            supported: LATEST,
        });
    }
    if found == 0 {
        // Version 0 is only ever an empty database. Tables without our version belong to
        // another program; migrating would write spoold's schema into its data.
        let objects: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(map_err)?;
        if objects > 0 {
            return Err(StoreError::Database(
                "it has tables but no spoold schema version".into(),
            ));
        }
    }
    Ok(found)
}

/// Bring the schema to [`LATEST`], or refuse a database that is newer or not ours.
pub fn migrate(conn: &Connection) -> Result<()> {
    if check(conn)? == LATEST {
        return Ok(());
    }
    conn.execute_batch("BEGIN IMMEDIATE").map_err(map_err)?;
    let applied = (|| {
        // Again inside the transaction: nothing may have changed since, but this is the check
        // the writes below rely on.
        let found = check(conn)?;
        for (version, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            conn.execute_batch(sql).map_err(map_err)?;
            conn.pragma_update(None, "user_version", version as i64 + 1)
                .map_err(map_err)?;
        }
        Ok(())
    })();
    match applied {
        Ok(()) => conn.execute_batch("COMMIT").map_err(map_err),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}
