//! Versioned migrations for PostgreSQL, plain SQL embedded in the binary. Applied at open in
//! one transaction under an advisory lock, so two hosts starting together never run one twice;
//! `spoold_schema` holds the version.
//!
//! **Rolling upgrades.** Several hosts share one database, so a host of a newer spoold may
//! migrate it while hosts of the older one still run. Each binary declares [`OLDEST_HOST`]: the
//! oldest schema version whose hosts may keep running against a database at [`LATEST`]. The
//! host that migrates writes it to `meta` (`schema_oldest_host`). A host whose version is below
//! it refuses to start, and a running one sees the change ([`fit`], polled) and stops cleanly
//! and loudly instead of failing every request against tables it no longer knows.

use deadpool_postgres::ClientWrapper;

use super::{map_err, Result};
use crate::error::StoreError;

/// Each entry upgrades the schema from version `index` to `index + 1`.
const MIGRATIONS: &[&str] = &[
    include_str!("schema.sql"),
    include_str!("steps.sql"),
    include_str!("counts.sql"),
    include_str!("in_flight.sql"),
    include_str!("lean_steps.sql"),
    include_str!("take.sql"),
    include_str!("carry.sql"),
    include_str!("orphans.sql"),
];

/// The schema version this binary writes.
pub const LATEST: i64 = MIGRATIONS.len() as i64;

/// The oldest schema version whose hosts may run side by side with this one (see the module
/// documentation). Every migration so far changed what older hosts' statements rely on
/// (columns, result types, functions' bodies), so: only hosts of this very schema.
pub const OLDEST_HOST: i64 = LATEST;

/// Where the migrating host leaves [`OLDEST_HOST`] for the others, as `VERSION:OLDEST` (so a
/// value left by an older migration is not taken for the newer schema's).
const OLDEST_HOST_KEY: &str = "schema_oldest_host";

/// How this binary fits the database's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    /// The schema this binary writes.
    Same,
    /// Migrated by a newer spoold that lets hosts of this schema keep running.
    NewerCompatible { found: i64 },
    /// Migrated past what this binary can run with.
    MovedPast { found: i64, oldest_host: i64 },
}

/// How this binary fits the database's schema now.
pub(crate) async fn fit(client: &tokio_postgres::Client) -> Result<Fit> {
    let found: i64 = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM spoold_schema", &[])
        .await
        .map_err(map_err)?
        .get(0);
    if found <= LATEST {
        return Ok(Fit::Same);
    }
    let oldest_host: Option<String> = client
        .query_opt("SELECT value FROM meta WHERE key = $1", &[&OLDEST_HOST_KEY])
        .await
        .map_err(map_err)?
        .and_then(|row| row.get(0));
    // A newer schema that does not say which hosts it serves serves only its own.
    let oldest_host = oldest_host
        .as_deref()
        .and_then(|v| v.split_once(':'))
        .filter(|(version, _)| version.parse() == Ok(found))
        .and_then(|(_, oldest)| oldest.parse::<i64>().ok())
        .unwrap_or(found);
    Ok(if oldest_host <= LATEST {
        Fit::NewerCompatible { found }
    } else {
        Fit::MovedPast { found, oldest_host }
    })
}

/// The advisory lock key migrations hold ("spoold" in ASCII): only serialises them.
const MIGRATION_LOCK: i64 = 0x7370_6f6f_6c64;

/// Bring the schema to [`LATEST`], or refuse a database that is not ours or newer than this
/// binary can run with. `Ok` tells how this binary fits it.
pub(crate) async fn migrate(client: &ClientWrapper) -> Result<Fit> {
    // `client` is only borrowed: a transaction needs it mutably, so run the statements by hand.
    client.batch_execute("BEGIN").await.map_err(map_err)?;
    let applied = apply(client).await;
    match applied {
        Ok(fit) => client
            .batch_execute("COMMIT")
            .await
            .map_err(map_err)
            .map(|()| fit),
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

async fn apply(client: &ClientWrapper) -> Result<Fit> {
    client
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(map_err)?;
    let has_version: bool = client
        .query_one("SELECT to_regclass('spoold_schema') IS NOT NULL", &[])
        .await
        .map_err(map_err)?
        .get(0);
    let found: i64 = if has_version {
        client
            .query_one("SELECT COALESCE(MAX(version), 0) FROM spoold_schema", &[])
            .await
            .map_err(map_err)?
            .get(0)
    } else {
        // Without our version table, a database holding a `deliveries` table belongs to
        // another program: migrating would write spoold's schema into its data.
        let foreign: bool = client
            .query_one("SELECT to_regclass('deliveries') IS NOT NULL", &[])
            .await
            .map_err(map_err)?
            .get(0);
        if foreign {
            return Err(StoreError::Database(
                "the database has a `deliveries` table but no spoold schema version".into(),
            ));
        }
        client
            .batch_execute("CREATE TABLE spoold_schema (version BIGINT NOT NULL)")
            .await
            .map_err(map_err)?;
        0
    };
    if found > LATEST {
        return match fit(client).await? {
            Fit::MovedPast { found, .. } => Err(StoreError::TooNew {
                found,
                supported: LATEST,
            }),
            fit => Ok(fit),
        };
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        client.batch_execute(sql).await.map_err(map_err)?;
        let version = version as i64 + 1;
        client
            .execute("DELETE FROM spoold_schema", &[])
            .await
            .map_err(map_err)?;
        client
            .execute(
                "INSERT INTO spoold_schema (version) VALUES ($1)",
                &[&version],
            )
            .await
            .map_err(map_err)?;
    }
    // The newest host says which older ones may run with its schema.
    client
        .execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&OLDEST_HOST_KEY, &format!("{LATEST}:{OLDEST_HOST}")],
        )
        .await
        .map_err(map_err)?;
    Ok(Fit::Same)
}
