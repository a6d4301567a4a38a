//! Versioned migrations for PostgreSQL, plain SQL embedded in the binary. Applied at open in
//! one transaction under an advisory lock, so two hosts starting together never run one twice;
//! `spoold_schema` holds the version, and a database from a newer spoold is refused.

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

/// The advisory lock key migrations hold ("spoold" in ASCII): only serialises them.
const MIGRATION_LOCK: i64 = 0x7370_6f6f_6c64;

/// Bring the schema to [`LATEST`], or refuse a database that is newer or not ours.
pub(crate) async fn migrate(client: &ClientWrapper) -> Result<()> {
    // `client` is only borrowed: a transaction needs it mutably, so run the statements by hand.
    client.batch_execute("BEGIN").await.map_err(map_err)?;
    let applied = apply(client).await;
    match applied {
        Ok(()) => client.batch_execute("COMMIT").await.map_err(map_err),
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            Err(e)
        }
    }
}

async fn apply(client: &ClientWrapper) -> Result<()> {
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
        return Err(StoreError::TooNew {
            found,
            supported: LATEST,
        });
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
    Ok(())
}
