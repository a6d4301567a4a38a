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

/// Connections a test's store or daemon opens to PostgreSQL (`--db-connections`, the least it
/// takes; a daemon's default is 9). The suite shares one server with whatever else runs on the
/// machine: with at most two PostgreSQL tests at once (the nextest group `postgres`), two
/// two-host tests stay near 25 connections, inside a server's `max_connections = 40`.
pub const TEST_DB_CONNECTIONS: usize = 5;

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
            crate::skip::skipped(
                &format!("{PG_URL_VAR} is not set (no PostgreSQL server to test against)"),
                &format!(
                    "{PG_URL_VAR}=postgres://USER@HOST:PORT/DB names one: any database on it; \
                     each test creates and drops its own"
                ),
            );
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

impl TestDatabase {
    /// Begin a transaction on this database, run `sql` in it (e.g. `SELECT … FOR UPDATE` to hold
    /// a row lock others wait for) and keep it open until [`HeldTransaction::commit`] or drop.
    pub async fn hold(&self, sql: &str) -> anyhow::Result<HeldTransaction> {
        let client = connect(&self.url).await?;
        client.batch_execute(&format!("BEGIN; {sql}")).await?;
        Ok(HeldTransaction { client })
    }
}

/// A transaction [`TestDatabase::hold`] keeps open.
pub struct HeldTransaction {
    client: tokio_postgres::Client,
}

impl HeldTransaction {
    /// Commit it, releasing what it held.
    pub async fn commit(self) -> anyhow::Result<()> {
        self.client.batch_execute("COMMIT").await?;
        Ok(())
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
                "postgres://127.0.0.1:1/test?sslmode=disable",
                "postgres://127.0.0.1:1/x?sslmode=disable",
            ),
        ] {
            assert_eq!(with_database(url, "x").expect("url"), expected);
        }
    }
}

/// The longest a statement a test runs on a [`PrivateServer`] may take.
const SQL_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// A PostgreSQL server of a test's own (initdb in a temporary directory, on a loopback port),
/// for what must not touch the shared server: restarting it. Runs as the `postgres` user
/// (PostgreSQL refuses root), so it needs root to start; stopped (by its postmaster's pid,
/// through `pg_ctl`) when dropped.
#[derive(Debug)]
pub struct PrivateServer {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    port: u16,
    /// `-c name=value` settings the server runs with.
    settings: Vec<String>,
}

/// Connections a test holds open on a server (see [`PrivateServer::hold`]); closed when
/// dropped.
#[derive(Debug)]
pub struct HeldConnections {
    _clients: Vec<tokio_postgres::Client>,
}

impl PrivateServer {
    /// Create and start a server. Fails when not root or without PostgreSQL's binaries; pass
    /// the result to [`crate::privileged::available`].
    pub fn start() -> anyhow::Result<PrivateServer> {
        PrivateServer::start_with(&[])
    }

    /// Like [`PrivateServer::start`], with server settings (`("max_connections", "8")`).
    pub fn start_with(settings: &[(&str, &str)]) -> anyhow::Result<PrivateServer> {
        crate::privileged::require_root()?;
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context("no PostgreSQL server binaries under /usr/lib/postgresql")?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("initdb").exists())
            .context("no initdb under /usr/lib/postgresql/*/bin")?;
        let (dir, port) = place()?;
        let settings = settings
            .iter()
            .map(|(name, value)| format!(" -c {name}={value}"))
            .collect();
        let server = PrivateServer {
            dir,
            bin,
            port,
            settings,
        };
        server.as_postgres(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        )?;
        server.pg_ctl("start")?;
        Ok(server)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Open `n` connections and keep them until the result is dropped (to use up the server's
    /// `max_connections`).
    pub async fn hold(&self, n: usize) -> anyhow::Result<HeldConnections> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(connect(&self.url()).await?);
        }
        Ok(HeldConnections { _clients: held })
    }

    /// How many client connections the server has besides the one asking, or only those of
    /// `application` (`application_name`: spoold's are `spoold`).
    pub async fn client_count(&self, application: Option<&str>) -> anyhow::Result<usize> {
        let client = connect(&self.url()).await?;
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() \
                 AND ($1::text IS NULL OR application_name = $1)",
                &[&application],
            )
            .await?;
        Ok(usize::try_from(row.get::<_, i64>(0))?)
    }

    /// Restart the server (`pg_ctl restart -m fast`): every connection is dropped, the server
    /// is down for a moment, then accepts connections again.
    pub fn restart(&self) -> anyhow::Result<()> {
        self.pg_ctl("restart")
    }

    /// Stop the server at once (`pg_ctl stop -m immediate`: no shutdown checkpoint, as a crash
    /// would, but through its postmaster): connections are dropped and new ones refused until
    /// [`PrivateServer::start_again`].
    pub fn stop(&self) -> anyhow::Result<()> {
        self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-m",
                "immediate",
                "-w",
                "-t",
                "30",
                "stop",
            ],
        )
    }

    /// Start a server stopped by [`PrivateServer::stop`] or [`PrivateServer::kill9`], as it is
    /// (a primary killed before a failover comes back as a primary: a stale one).
    pub fn start_again(&self) -> anyhow::Result<()> {
        self.pg_ctl("start")
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kill the server's postmaster with SIGKILL, as a crash or a power cut would, and wait
    /// (up to 30 s) until none of its processes is left: its backends notice their postmaster's
    /// death and exit by themselves. Processes are found through `/proc` (their working
    /// directory is the data directory), never by name.
    pub fn kill9(&self) -> anyhow::Result<()> {
        let pid_file = self.dir.path().join("data/postmaster.pid");
        let text = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("read {}", pid_file.display()))?;
        let pid: i32 = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .context("no pid in postmaster.pid")?;
        let postmaster = rustix::process::Pid::from_raw(pid).context("postmaster pid")?;
        rustix::process::kill_process(postmaster, rustix::process::Signal::KILL)
            .context("SIGKILL the postmaster")?;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left = self.processes();
            if left.is_empty() {
                // The dead postmaster's pid may linger as a zombie (an init that does not reap
                // it): a restart would take its lock file for a live server's. Every process of
                // the server is gone, so the file is stale.
                std::fs::remove_file(&pid_file).context("remove the dead server's lock file")?;
                for stale in [".s.PGSQL.{}.lock", ".s.PGSQL.{}"] {
                    let name = stale.replace("{}", &self.port.to_string());
                    let _ = std::fs::remove_file(self.dir.path().join(name));
                }
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "processes of the killed server still running after 30 s: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The processes of this server: those whose working directory is its data directory.
    fn processes(&self) -> Vec<i32> {
        let data = std::path::PathBuf::from(self.data());
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == data)
            })
            .collect()
    }

    /// A streaming standby of this server, on a port of its own: a base backup
    /// (`pg_basebackup -R`: it follows this server from its start), started. Made a primary by
    /// [`PrivateServer::promote`].
    pub fn standby(&self) -> anyhow::Result<PrivateServer> {
        let (dir, port) = place()?;
        let standby = PrivateServer {
            dir,
            bin: self.bin.clone(),
            port,
            settings: self.settings.clone(),
        };
        standby.follow(self)?;
        Ok(standby)
    }

    /// Make this server (stopped, or killed) a standby of `primary`: its data directory is
    /// replaced by a base backup of `primary`'s, and it starts following it — what a cluster
    /// manager does with a failed primary before it rejoins.
    pub fn rejoin_as_standby_of(&self, primary: &PrivateServer) -> anyhow::Result<()> {
        if !self.processes().is_empty() {
            self.as_postgres(
                "pg_ctl",
                &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
            )?;
        }
        std::fs::remove_dir_all(self.data()).context("remove the old data directory")?;
        self.follow(primary)
    }

    fn follow(&self, primary: &PrivateServer) -> anyhow::Result<()> {
        let port = primary.port.to_string();
        self.as_postgres(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &self.data(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "-c",
                "fast",
            ],
        )?;
        // Its name, for the primary's `synchronous_standby_names` and `pg_stat_replication`;
        // and no synchronous standby of its own (what the primary had set with ALTER SYSTEM
        // came along), until it is promoted and given one.
        let auto = self.dir.path().join("data/postgresql.auto.conf");
        let conf = std::fs::read_to_string(&auto).context("read postgresql.auto.conf")?;
        let conf: String = conf
            .lines()
            .filter(|l| !l.trim_start().starts_with("synchronous_standby_names"))
            .map(|l| format!("{l}\n"))
            .collect();
        let conf = conf.replace(
            "primary_conninfo = '",
            &format!(
                "primary_conninfo = 'application_name=standby_{} ",
                self.port
            ),
        );
        std::fs::write(&auto, conf).context("write postgresql.auto.conf")?;
        self.pg_ctl("start")
    }

    /// Promote this standby to a primary (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&self) -> anyhow::Result<()> {
        self.as_postgres("pg_ctl", &["-D", &self.data(), "-w", "-t", "30", "promote"])
    }

    /// Run `sql` on this server's `postgres` database, waiting at most [`SQL_BOUND`] (a commit
    /// waits for a synchronous standby that may not be there).
    pub async fn execute(&self, sql: &str) -> anyhow::Result<()> {
        let run = async {
            connect(&self.url())
                .await?
                .batch_execute(sql)
                .await
                .map_err(anyhow::Error::from)
        };
        tokio::time::timeout(SQL_BOUND, run)
            .await
            .with_context(|| format!("{sql}: no answer within {SQL_BOUND:?}"))??;
        Ok(())
    }

    /// The first column of the first row of `sql` on this server's `postgres` database, as
    /// text.
    pub async fn scalar(&self, sql: &str) -> anyhow::Result<Option<String>> {
        self.scalar_in("postgres", sql).await
    }

    /// [`PrivateServer::scalar`] on the server's database `database`.
    pub async fn scalar_in(&self, database: &str, sql: &str) -> anyhow::Result<Option<String>> {
        let url = with_database(&self.url(), database)?;
        let run = async {
            connect(&url)
                .await?
                .simple_query(sql)
                .await
                .map_err(anyhow::Error::from)
        };
        let rows = tokio::time::timeout(SQL_BOUND, run)
            .await
            .with_context(|| format!("{sql}: no answer within {SQL_BOUND:?}"))??;
        Ok(rows.into_iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        }))
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn pg_ctl(&self, action: &str) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1{}",
            self.port,
            self.dir.path().display(),
            self.settings.concat()
        );
        let log_path = self.dir.path().join("server.log");
        let log = log_path.display().to_string();
        self.as_postgres(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-m",
                "fast",
                "-w",
                "-t",
                "30",
                action,
            ],
        )
        .with_context(|| {
            // What the server said of it: the end of its log.
            let text = std::fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "the server's log ends:\n{}",
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        })
    }

    fn as_postgres(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let program = self.bin.join(program).display().to_string();
        let mut all = vec!["-u", "postgres", "--", program.as_str()];
        all.extend_from_slice(args);
        crate::privileged::run("runuser", all).map(drop)
    }
}

/// Where a new server lives: a temporary directory the `postgres` user owns, and a free
/// loopback port.
fn place() -> anyhow::Result<(tempfile::TempDir, u16)> {
    let dir = tempfile::Builder::new()
        .prefix("spoold-pg-")
        .tempdir_in("/tmp")
        .context("temp dir")?;
    crate::privileged::run("chown", ["postgres:", &dir.path().display().to_string()])?;
    let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port();
    Ok((dir, port))
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let data = self.data();
        if self.processes().is_empty() {
            // Stopped or killed already.
            return;
        }
        let stopped = self.as_postgres("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        if let Err(e) = stopped {
            eprintln!("could not stop the private PostgreSQL server in {data}: {e:#}");
        }
    }
}
