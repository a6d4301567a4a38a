//! On a shared PostgreSQL database, notice when a host of a newer spoold migrates the schema
//! past what this binary can run with, and stop this daemon cleanly and loudly (exit 1 with
//! the reason) rather than fail every request against tables it no longer knows. A newer
//! schema that still lets this binary run is logged once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use spool_store::postgres::{SchemaFit, SCHEMA_VERSION};
use spool_store::Store;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

/// How often the schema version is read.
pub const EVERY: Duration = Duration::from_secs(2);

/// Why the daemon stopped by itself, if it did: the one line `spoold` exits with.
pub type Failure = Arc<Mutex<Option<String>>>;

/// Read the schema's version every [`EVERY`] until `stop`; when it has moved past this binary,
/// record why in `failure` and begin the shutdown.
pub async fn run(store: Store, failure: Failure, stop: CancellationToken) {
    if !store.is_shared() {
        return;
    }
    let mut warned = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
        match store.schema_fit().await {
            Ok(Some(SchemaFit::MovedPast { found, oldest_host })) => {
                let why = format!(
                    "a newer spoold migrated the database to schema {found}, which serves hosts \
                     of schema {oldest_host} or newer; this spoold writes schema \
                     {SCHEMA_VERSION}: stopping (upgrade this host, then start it again)"
                );
                error!("{why}");
                if let Ok(mut slot) = failure.lock() {
                    *slot = Some(why);
                }
                stop.cancel();
                return;
            }
            Ok(Some(SchemaFit::NewerCompatible { found })) if !warned => {
                warned = true;
                warn!(
                    "a newer spoold migrated the database to schema {found} and lets this one \
                     (schema {SCHEMA_VERSION}) run beside it: upgrade this host"
                );
            }
            // The same schema; or the database out of reach, which requests report.
            _ => {}
        }
    }
}
