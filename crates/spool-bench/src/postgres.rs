//! The PostgreSQL server of `--db postgres://…`: every daemon run gets a database of its own on
//! it, created empty from `template0` (`spoold_bench_<pid>_<n>`) and dropped after the run
//! (`WITH (FORCE)`), unless `--keep-data`. The URL given names the server and the database this
//! benchmark connects to for that; the daemons get the same URL with the run's database in it.
//!
//! The benchmark's own connection is plain (no TLS): a server that requires TLS is refused
//! with an error. The daemons connect as their URL says.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context as _};
use tokio_postgres::{Client, NoTls};

/// A server that runs' databases are created on.
#[derive(Debug, Clone)]
pub struct PgServer {
    /// The URL as given: connected to for `CREATE DATABASE` and `DROP DATABASE`.
    admin_url: String,
}

/// A database created for one run. [`PgDatabase::remove`] drops it; one that is dropped
/// without it (a run that failed half-way) is removed from a thread of its own, unless kept.
#[derive(Debug)]
pub struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
    /// Dropped or kept: nothing left to do on drop.
    settled: bool,
    keep: bool,
}

impl PgServer {
    /// Check the URL's form (`postgres://` or `postgresql://`, parsable by the client).
    pub fn parse(url: &str) -> anyhow::Result<PgServer> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            bail!("--db takes a PostgreSQL URL: postgres://user@host:port/database");
        }
        url.parse::<tokio_postgres::Config>()
            .with_context(|| format!("--db {}: not a valid PostgreSQL URL", redact_url(url)))?;
        with_database(url, "x")?;
        Ok(PgServer {
            admin_url: url.to_owned(),
        })
    }

    /// The URL as given, password hidden: for messages and the results.
    pub fn shown(&self) -> String {
        redact_url(&self.admin_url)
    }

    /// Connect once and return the server's version (`SHOW server_version`), so that a wrong
    /// URL fails before any scenario runs.
    pub async fn version(&self) -> anyhow::Result<String> {
        let client = connect(&self.admin_url).await?;
        let row = client
            .query_one("SHOW server_version", &[])
            .await
            .context("SHOW server_version")?;
        row.try_get::<_, String>(0).context("read server_version")
    }

    /// A new, empty database `spoold_bench_<pid>_<n>`; `keep` leaves it in place when it is
    /// removed or dropped.
    pub async fn create_database(&self, keep: bool) -> anyhow::Result<PgDatabase> {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        let name = format!(
            "spoold_bench_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let client = connect(&self.admin_url).await?;
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
            .with_context(|| format!("CREATE DATABASE {name} on {}", self.shown()))?;
        Ok(PgDatabase {
            url: with_database(&self.admin_url, &name)?,
            admin_url: self.admin_url.clone(),
            name,
            settled: false,
            keep,
        })
    }
}

impl PgDatabase {
    /// The URL the daemons are given.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drop the database (any connection left is closed by the server), or keep it and say so.
    pub async fn remove(mut self) -> anyhow::Result<()> {
        self.settled = true;
        if self.keep {
            eprintln!("spool-bench: kept database {}", redact_url(&self.url));
            return Ok(());
        }
        drop_database(&self.admin_url, &self.name).await
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        if self.keep {
            eprintln!("spool-bench: kept database {}", redact_url(&self.url));
            return;
        }
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        // Drop may run on the runtime's threads: use a thread with a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("start a runtime to drop the database")?;
            runtime.block_on(drop_database(&admin_url, &name))
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("spool-bench: could not drop database {}: {e:#}", self.name),
            Err(_) => eprintln!("spool-bench: could not drop database {}", self.name),
        }
    }
}

async fn drop_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    connect(admin_url)
        .await?
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .with_context(|| format!("DROP DATABASE {name}"))
}

async fn connect(url: &str) -> anyhow::Result<Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .with_context(|| format!("connect to PostgreSQL at {}", redact_url(url)))?;
    tokio::spawn(async move {
        // Ends when the client is dropped; errors show up on the client.
        let _ = connection.await;
    });
    Ok(client)
}

/// `url` with its database name replaced by `name` (query parameters kept).
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let scheme_end = url.find("://").context("PostgreSQL URL without a scheme")? + 3;
    let query_start = url.find('?').unwrap_or(url.len());
    let (head, query) = url.split_at(query_start);
    let path_start = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |i| scheme_end + i);
    Ok(format!("{}/{name}{query}", &head[..path_start]))
}

/// `url` with the password of its user info, if any, replaced by `***`.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    match authority[..at].find(':') {
        Some(colon) => format!(
            "{}{}:***{}",
            &url[..scheme_end],
            &authority[..colon],
            &url[scheme_end + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_name_is_replaced() {
        for (url, expected) in [
            (
                "postgres://postgres@127.0.0.1:5432/test",
                "postgres://postgres@127.0.0.1:5432/x",
            ),
            ("postgres://127.0.0.1", "postgres://127.0.0.1/x"),
            (
                "postgresql://127.0.0.1:1/test?sslmode=disable",
                "postgresql://127.0.0.1:1/x?sslmode=disable",
            ),
        ] {
            assert_eq!(with_database(url, "x").expect("url"), expected);
        }
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            redact_url("postgres://u:secret@127.0.0.1:5432/db?sslmode=disable"),
            "postgres://u:***@127.0.0.1:5432/db?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgres://u@127.0.0.1/db"),
            "postgres://u@127.0.0.1/db"
        );
        assert_eq!(
            redact_url("postgres://127.0.0.1/db"),
            "postgres://127.0.0.1/db"
        );
    }

    #[test]
    fn only_postgres_urls() {
        assert!(PgServer::parse("postgres://postgres@127.0.0.1:5432/test").is_ok());
        assert!(PgServer::parse("postgresql://127.0.0.1/test").is_ok());
        assert!(PgServer::parse("spoold.db").is_err());
        assert!(PgServer::parse("postgres:localhost").is_err());
    }
}
