//! PostgreSQL test databases: each test gets a database of its own on the server named by
//! `SPOOLD_TEST_PG_URL`, dropped when the test ends.
//!
//! Without the variable, [`TestDatabase::create`] returns `None` after printing why, and the
//! test skips; `.ci/run` always sets it, so there a missing server fails the test.

use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context;

/// The environment variable naming the server (any database on it) tests may create
/// databases on.
pub const PG_URL_VAR: &str = "SPOOLD_TEST_PG_URL";

/// A database created for one test; dropped (with any connection still open) on drop.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// A new, empty database, or `None` (with a message on stderr) when no server is
    /// configured.
    pub async fn create() -> anyhow::Result<Option<TestDatabase>> {
        let Ok(admin_url) = std::env::var(PG_URL_VAR) else {
            eprintln!("skipped: {PG_URL_VAR} is not set (no PostgreSQL server to test against)");
            return Ok(None);
        };
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "spoold_t_{}_{}_{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let client = connect(&admin_url).await?;
        client
            .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0"))
            .await
            .with_context(|| format!("create database {name}"))?;
        let url = with_database(&admin_url, &name)?;
        Ok(Some(TestDatabase {
            admin_url,
            name,
            url,
        }))
    }

    /// The URL of this database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run SQL on the server's administrative database (the one `SPOOLD_TEST_PG_URL` names):
    /// for what cannot run inside this database, e.g. refusing its connections.
    pub async fn admin(&self, sql: &str) -> anyhow::Result<()> {
        connect(&self.admin_url).await?.batch_execute(sql).await?;
        Ok(())
    }

    /// Run SQL on this database (for checks and fault injection).
    pub async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        connect(&self.url).await?.batch_execute(sql).await?;
        Ok(())
    }

    /// The first column of the first row of `sql`, as text.
    pub async fn scalar(&self, sql: &str) -> anyhow::Result<Option<String>> {
        let client = connect(&self.url).await?;
        let rows = client.simple_query(sql).await?;
        Ok(rows.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        }))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let admin_url = self.admin_url.clone();
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // Drop may run inside a runtime: use a thread with its own.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                connect(&admin_url).await?.batch_execute(&sql).await?;
                anyhow::Ok(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test database {}: {e:#}", self.name);
        }
    }
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connect to PostgreSQL at {url} ({PG_URL_VAR})"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> anyhow::Result<String> {
    let scheme_end = url.find("://").context("PostgreSQL URL without a scheme")? + 3;
    let (query_start, query) = match url.find('?') {
        Some(i) => (i, &url[i..]),
        None => (url.len(), ""),
    };
    let head = &url[..query_start];
    let path_start = head[scheme_end..]
        .find('/')
        .map_or(head.len(), |i| scheme_end + i);
    Ok(format!("{}/{name}{query}", &head[..path_start]))
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        for (url, expected) in [
            (
                "postgres://postgres@127.0.0.1:5432/test",
                "postgres://postgres@127.0.0.1:5432/x",
            ),
            ("postgres://127.0.0.1", "postgres://127.0.0.1/x"),
            (
                "postgres://h:1/test?sslmode=disable",
                "postgres://h:1/x?sslmode=disable",
            ),
        ] {
            assert_eq!(with_database(url, "x").expect("url"), expected);
        }
    }
}
