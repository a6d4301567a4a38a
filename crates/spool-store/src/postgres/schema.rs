//! The PostgreSQL schema: versioned migrations for tables, indexes and data, plain SQL embedded
//! in the binary, and the functions and triggers, each defined once in a file of its own and
//! created again after the migrations whenever they differ from what the database holds
//! (Flyway's "repeatable migrations"). Applied at open in one transaction under an advisory
//! lock, so two hosts starting together never run one twice; `spoold_schema` holds the
//! version, `meta` the fingerprint of the functions in force.
//!
//! **Rolling upgrades.** Several hosts share one database, so a host of a newer spoold may
//! migrate it while hosts of the older one still run. Each binary declares [`OLDEST_HOST`]: the
//! oldest schema version whose hosts may keep running against a database at [`LATEST`]. The
//! host that migrates writes it to `meta` (`schema_oldest_host`). A host whose version is below
//! it refuses to start, and a running one sees the change ([`fit`], polled) and stops cleanly
//! and loudly instead of failing every request against tables it no longer knows. A change to
//! a function is a schema change like any other: it comes with a new version (a migration with
//! no statements if nothing else changed), so that hosts of one version run one set of
//! functions — [`FUNCTIONS_FINGERPRINT`] is checked by a test for that.

use deadpool_postgres::ClientWrapper;

use super::{map_err, Result};
use crate::error::StoreError;

/// Each entry upgrades the schema from version `index` to `index + 1`: tables, indexes and
/// data. Versions that changed only functions have no statements of their own.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/v1_tables.sql"),
    include_str!("migrations/v2_in_place.sql"),
    // 3: creates and purges counted per statement (functions/count_deliveries.sql).
    "",
    include_str!("migrations/v4_in_flight.sql"),
    include_str!("migrations/v5_bytewise_keys.sql"),
    // 6: a slot's step takes its next delivery in one change of the row (functions/steps.sql).
    "",
    // 7: the steps of one call look on from where the call last found (functions/steps.sql).
    "",
    include_str!("migrations/v8_orphans.sql"),
    include_str!("migrations/v9_sign_secret.sql"),
    // 10: creates and purges counted per row where the database has no transition tables
    // (functions/count_deliveries.sql).
    "",
];

/// The functions and their triggers, in the order they are created (a function before those
/// that call it, all after the tables). Every function spoold defines is named `spoold_*`:
/// all of them are dropped before these are created, so one removed from here is gone too.
const FUNCTIONS: &[(&str, &str)] = &[
    ("now_ms.sql", include_str!("functions/now_ms.sql")),
    ("expire.sql", include_str!("functions/expire.sql")),
    ("steps.sql", include_str!("functions/steps.sql")),
    (
        "count_deliveries.sql",
        include_str!("functions/count_deliveries.sql"),
    ),
    ("count_tasks.sql", include_str!("functions/count_tasks.sql")),
];

/// The fingerprint of [`FUNCTIONS`] as schema version [`LATEST`] was released with them. A test
/// fails when the files change: add a version (see the module documentation) and put the new
/// fingerprint here.
const FUNCTIONS_FINGERPRINT: u64 = 0xc966_574c_480a_2d1a;

/// Where the fingerprint of the functions in force is kept, as `VERSION:FINGERPRINT`.
const FUNCTIONS_KEY: &str = "schema_functions";

/// Drops every `spoold_*` function of the schema, whatever its arguments, with the triggers
/// that call it.
const DROP_FUNCTIONS: &str = "DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'spoold\\_%'
    LOOP
        EXECUTE format('DROP FUNCTION %s CASCADE', f);
    END LOOP;
END $$";

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
    define_functions(client).await?;
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

/// Create the functions and triggers again unless the database holds these very ones.
async fn define_functions(client: &ClientWrapper) -> Result<()> {
    let wanted = format!("{LATEST}:{FUNCTIONS_FINGERPRINT:016x}");
    let held: Option<String> = client
        .query_opt("SELECT value FROM meta WHERE key = $1", &[&FUNCTIONS_KEY])
        .await
        .map_err(map_err)?
        .and_then(|row| row.get(0));
    if held.as_deref() == Some(wanted.as_str()) {
        return Ok(());
    }
    client
        .batch_execute(DROP_FUNCTIONS)
        .await
        .map_err(map_err)?;
    for (name, sql) in FUNCTIONS {
        client
            .batch_execute(sql)
            .await
            .map_err(|e| StoreError::Database(format!("functions/{name}: {}", map_err(e))))?;
    }
    client
        .execute(
            "INSERT INTO meta (key, value) VALUES ($1, $2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&FUNCTIONS_KEY, &wanted],
        )
        .await
        .map_err(map_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a (64 bits) of the function files, names and contents: stable across builds and
    /// platforms, which is all a fingerprint compared for equality needs.
    fn functions_fingerprint() -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for (name, sql) in FUNCTIONS {
            for byte in name.bytes().chain([0]).chain(sql.bytes()).chain([0]) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        hash
    }

    #[test]
    fn the_functions_are_those_this_version_was_released_with() {
        assert_eq!(
            format!("{:#018x}", functions_fingerprint()),
            format!("{FUNCTIONS_FINGERPRINT:#018x}"),
            "the files in postgres/functions changed: add a schema version (a migration with no \
             statements will do) and set FUNCTIONS_FINGERPRINT to the new fingerprint"
        );
    }
}
