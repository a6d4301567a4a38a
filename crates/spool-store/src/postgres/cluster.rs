//! Which PostgreSQL server a host may use, and what it promises.
//!
//! **Fencing.** After a failover the old primary may come back as it was — still a primary, on
//! the timeline it was on, missing what the new primary took since (with asynchronous
//! replication) or holding what the new one never saw. A host that connected to it would run a
//! second queue. Every connection this host opens first asks the server who it is: a standby
//! (in recovery) is refused; so is a primary of the cluster this host already used (the same
//! system identifier) on an older timeline than the newest this host has seen. The newest
//! timeline is remembered across restarts in a file of the host's data directory
//! ([`Fence`]); with several servers in the URL, the next one is tried. Timelines grow by one
//! with each promotion, so a primary that missed one is behind.
//!
//! **What the server promises.** Whether an acknowledged commit survives a failover is the
//! server's replication: with `synchronous_standby_names` set and a synchronous standby
//! streaming, a commit is answered only once the standby has it; with asynchronous standbys
//! only, a failover may lose the last acknowledged writes; with a synchronous standby named and
//! none streaming, every commit waits ([`Replication`]).

use std::path::PathBuf;
use std::sync::Mutex;

use deadpool_postgres::Connect;
use futures_util::future::BoxFuture;
use tokio_postgres::config::{Host, LoadBalanceHosts};
use tokio_postgres::{Client, Config};

/// Who a server is, as it says at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// A standby (in recovery): read-only.
    pub in_recovery: bool,
    /// `pg_control_system()`: the same on a primary and every standby made from it.
    pub system_identifier: i64,
    /// The timeline it writes on (a primary's; `None` on a standby).
    pub timeline: Option<u32>,
}

/// The identity query. `pg_current_wal_lsn()` fails during recovery: only asked of a primary.
const IDENTITY_SQL: &str = "SELECT pg_is_in_recovery(), \
     (SELECT system_identifier FROM pg_control_system()), \
     CASE WHEN pg_is_in_recovery() THEN NULL \
          ELSE pg_walfile_name(pg_current_wal_lsn()) END";

/// Ask a server who it is. `None`: it cannot say (a PostgreSQL-wire database without
/// `pg_control_system()` or `pg_walfile_name()`): it is used unfenced, as the docs say.
pub(crate) async fn identify(client: &Client) -> Result<Option<Identity>, tokio_postgres::Error> {
    let row = match client.query_one(IDENTITY_SQL, &[]).await {
        Ok(row) => row,
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => {
            if !UNFENCED_LOGGED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "the database does not say its cluster and timeline: a stale primary \
                     cannot be told from the current one, and is not refused"
                );
            }
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let walfile: Option<String> = row.get(2);
    Ok(Some(Identity {
        in_recovery: row.get(0),
        system_identifier: row.get(1),
        // A WAL file's name starts with its timeline, eight hex digits.
        timeline: walfile
            .as_deref()
            .and_then(|name| name.get(..8))
            .and_then(|tli| u32::from_str_radix(tli, 16).ok()),
    }))
}

/// Whether the warning that the database cannot be fenced was logged.
static UNFENCED_LOGGED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The newest timeline this host has seen of its cluster: kept in memory, and in a file (when
/// given) across restarts.
#[derive(Debug)]
pub struct Fence {
    file: Option<PathBuf>,
    seen: Mutex<Option<Seen>>,
}

/// A cluster and the newest of its timelines seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub system_identifier: i64,
    pub timeline: u32,
}

impl Fence {
    /// A fence remembered in `file` (read now; a file that cannot be read is refused, so that a
    /// fence is never silently forgotten), or in memory only.
    pub fn open(file: Option<PathBuf>) -> std::io::Result<Fence> {
        let seen = match &file {
            Some(path) => match std::fs::read_to_string(path) {
                Ok(text) => Some(parse(&text).ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "{} does not hold a cluster's identifier and timeline; remove it if \
                             it is damaged",
                            path.display()
                        ),
                    )
                })?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        Ok(Fence {
            file,
            seen: Mutex::new(seen),
        })
    }

    /// What this host has seen, if anything.
    pub fn seen(&self) -> Option<Seen> {
        *self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `server` (`the server at HOST:PORT`), which says it is `id`, may be used: `Err`
    /// says why not. A newer timeline of the cluster is remembered from now on.
    pub fn admit(&self, server: &str, id: &Identity) -> Result<(), String> {
        if id.in_recovery {
            return Err(format!(
                "{server} is a standby (in recovery, read-only): spoold needs \
                 the primary. Name the primary in --db, or list every member with \
                 target_session_attrs=read-write"
            ));
        }
        let Some(timeline) = id.timeline else {
            return Err(format!("{server} did not say its timeline"));
        };
        let mut seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *seen {
            Some(s) if s.system_identifier == id.system_identifier && timeline < s.timeline => {
                return Err(format!(
                    "{server} is a stale primary: it writes on timeline \
                     {timeline} of cluster {}, and this host has already used timeline {} of \
                     it — a primary that was failed over and came back on its own, missing \
                     what the new primary has taken since. Refused: rejoin it to the cluster \
                     as a standby (through the cluster manager: Patroni, repmgr, pg_rewind), \
                     and name the current primary in --db",
                    id.system_identifier, s.timeline
                ));
            }
            Some(s) if s.system_identifier == id.system_identifier && timeline == s.timeline => {
                return Ok(())
            }
            Some(s) if s.system_identifier != id.system_identifier => {
                tracing::warn!(
                    server,
                    cluster = id.system_identifier,
                    timeline,
                    previous_cluster = s.system_identifier,
                    previous_timeline = s.timeline,
                    "the database server is another cluster than the one this host used before \
                     (restored, upgraded with pg_upgrade, or moved): its timelines start anew, \
                     and this host follows them from here"
                );
            }
            Some(s) => tracing::info!(
                server,
                timeline,
                previous_timeline = s.timeline,
                "the database server writes on a newer timeline (a failover or switchover \
                 happened): older primaries of this cluster are refused from now on"
            ),
            None => {}
        }
        let now = Seen {
            system_identifier: id.system_identifier,
            timeline,
        };
        if let Some(path) = &self.file {
            let text = format!("{} {}\n", now.system_identifier, now.timeline);
            if let Err(e) = crate::durable_file::write(path, text.as_bytes()) {
                // Kept in memory: this run still refuses older primaries.
                tracing::warn!(file = %path.display(), error = %e,
                               "cannot remember the database's timeline on disk");
            }
        }
        *seen = Some(now);
        Ok(())
    }
}

/// `CLUSTER TIMELINE`, as [`Fence::admit`] writes it.
fn parse(text: &str) -> Option<Seen> {
    let mut words = text.split_whitespace();
    let system_identifier = words.next()?.parse().ok()?;
    let timeline = words.next()?.parse().ok()?;
    Some(Seen {
        system_identifier,
        timeline,
    })
}

/// The connections of a pool and of the listener: each server of the URL in turn (in the
/// URL's order, or shuffled with `load_balance_hosts=random`), the first one the fence admits.
/// When none does but one answered, that one is returned: the pool's `post_create` check
/// ([`admit_connection`]) then refuses it with the fence's reason.
pub(crate) struct FencedConnect<T> {
    pub(crate) servers: Vec<(String, Config)>,
    pub(crate) tls: T,
    pub(crate) fence: std::sync::Arc<Fence>,
}

impl<T> FencedConnect<T> {
    /// One single-server configuration per server `config` names, with everything else it
    /// says.
    pub(crate) fn new(config: &Config, tls: T, fence: std::sync::Arc<Fence>) -> Self {
        FencedConnect {
            servers: split(config),
            tls,
            fence,
        }
    }
}

/// `config` once per server it names (`host`/`hostaddr` and its port).
pub(crate) fn split(config: &Config) -> Vec<(String, Config)> {
    let hosts = config.get_hosts();
    let addrs = config.get_hostaddrs();
    let count = hosts.len().max(addrs.len()).max(1);
    let ports = config.get_ports();
    (0..count)
        .map(|i| {
            let mut one = Config::new();
            if let Some(user) = config.get_user() {
                one.user(user);
            }
            if let Some(password) = config.get_password() {
                one.password(password);
            }
            if let Some(dbname) = config.get_dbname() {
                one.dbname(dbname);
            }
            if let Some(options) = config.get_options() {
                one.options(options);
            }
            if let Some(name) = config.get_application_name() {
                one.application_name(name);
            }
            one.ssl_mode(config.get_ssl_mode());
            one.ssl_negotiation(config.get_ssl_negotiation());
            let port = match ports {
                [] => 5432,
                [only] => *only,
                many => many.get(i).copied().unwrap_or(5432),
            };
            let shown = match (hosts.get(i), addrs.get(i)) {
                (Some(Host::Tcp(host)), _) => {
                    one.host(host);
                    format!("{host}:{port}")
                }
                (Some(Host::Unix(dir)), _) => {
                    one.host_path(dir);
                    format!("{}/.s.PGSQL.{port}", dir.display())
                }
                (None, _) => {
                    one.host("localhost");
                    format!("localhost:{port}")
                }
            };
            if let Some(addr) = addrs.get(i) {
                one.hostaddr(*addr);
            }
            one.port(port);
            if let Some(t) = config.get_connect_timeout() {
                one.connect_timeout(*t);
            }
            if let Some(t) = config.get_tcp_user_timeout() {
                one.tcp_user_timeout(*t);
            }
            one.keepalives(config.get_keepalives());
            one.keepalives_idle(config.get_keepalives_idle());
            if let Some(t) = config.get_keepalives_interval() {
                one.keepalives_interval(t);
            }
            if let Some(n) = config.get_keepalives_retries() {
                one.keepalives_retries(n);
            }
            one.target_session_attrs(config.get_target_session_attrs());
            one.channel_binding(config.get_channel_binding());
            (shown, one)
        })
        .collect()
}

impl<T> FencedConnect<T>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    /// The first server the fence admits (see [`FencedConnect`]), with the task that drives its
    /// connection; `messages` gets its notifications.
    pub(crate) async fn connect_with(
        &self,
        messages: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
        load_balance: LoadBalanceHosts,
    ) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
        let mut order: Vec<usize> = (0..self.servers.len()).collect();
        if load_balance == LoadBalanceHosts::Random && order.len() > 1 {
            let mut seed = [0u8; 8];
            let _ = rustix::rand::getrandom(&mut seed, rustix::rand::GetRandomFlags::empty());
            let mut x = u64::from_le_bytes(seed) | 1;
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        let mut refused: Option<(Client, tokio::task::JoinHandle<()>)> = None;
        let mut last_error = None;
        for i in order {
            let (address, config) = &self.servers[i];
            let (client, connection) = match config.connect(self.tls.clone()).await {
                Ok(connected) => connected,
                Err(e) => {
                    last_error = Some(e);
                    continue;
                }
            };
            let driver = tokio::spawn(super::connect::drive(connection, messages.clone()));
            let verdict = match identify(&client).await {
                Ok(Some(id)) => self.fence.admit(&format!("the server at {address}"), &id),
                Ok(None) => Ok(()),
                Err(e) => {
                    driver.abort();
                    last_error = Some(e);
                    continue;
                }
            };
            match verdict {
                Ok(()) => return Ok((client, driver)),
                Err(why) => {
                    super::warn_every(&REFUSED_SERVER_LOGGED, &why);
                    if refused.is_none() {
                        refused = Some((client, driver));
                    } else {
                        driver.abort();
                    }
                }
            }
        }
        match (refused, last_error) {
            // None admitted: the refused one goes to the check that says why.
            (Some(refused), _) => Ok(refused),
            (None, Some(e)) => Err(e),
            (None, None) => unreachable!("a configuration names at least one server"),
        }
    }
}

/// When (seconds on the steady clock) a refused server was last logged.
static REFUSED_SERVER_LOGGED: std::sync::atomic::AtomicI64 =
    std::sync::atomic::AtomicI64::new(i64::MIN);

impl<T> Connect for FencedConnect<T>
where
    T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + Clone + Sync + Send + 'static,
    T::Stream: Sync + Send,
    T::TlsConnect: Sync + Send,
    <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
{
    fn connect(
        &self,
        pg_config: &Config,
    ) -> BoxFuture<'_, Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> {
        let load_balance = pg_config.get_load_balance_hosts();
        Box::pin(self.connect_with(None, load_balance))
    }
}

/// The pool's check of a new connection: refused (with the fence's reason) unless the server
/// is one the fence admits.
pub(crate) async fn admit_connection(fence: &Fence, client: &Client) -> Result<(), String> {
    match identify(client).await.map_err(|e| e.to_string())? {
        Some(id) => fence.admit("the server", &id),
        None => Ok(()),
    }
}

/// What the server's replication promises an acknowledged commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replication {
    /// `synchronous_standby_names`, as the server has it.
    pub synchronous_standby_names: String,
    /// Standbys streaming as synchronous (or quorum) ones.
    pub synchronous: u32,
    /// Standbys streaming asynchronously (or as potential synchronous ones).
    pub asynchronous: u32,
    /// Standbys whose state this role may not see (it lacks `pg_monitor`).
    pub hidden: u32,
}

/// The replication query.
const REPLICATION_SQL: &str = "SELECT current_setting('synchronous_standby_names'), \
     count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum')), \
     count(*) FILTER (WHERE state = 'streaming' AND sync_state IN ('async', 'potential')), \
     count(*) FILTER (WHERE state IS NULL) \
     FROM pg_stat_replication";

pub(crate) async fn replication(client: &Client) -> Result<Replication, tokio_postgres::Error> {
    let row = client.query_one(REPLICATION_SQL, &[]).await?;
    let count = |i: usize| u32::try_from(row.get::<_, i64>(i)).unwrap_or(u32::MAX);
    Ok(Replication {
        synchronous_standby_names: row.get(0),
        synchronous: count(1),
        asynchronous: count(2),
        hidden: count(3),
    })
}

impl Replication {
    /// Whether a failover can lose acknowledged writes, or every commit waits: what to warn
    /// of, if anything.
    pub fn risk(&self) -> Option<String> {
        let named = !self.synchronous_standby_names.trim().is_empty();
        if named && self.synchronous == 0 {
            return Some(format!(
                "every commit waits for a synchronous standby (synchronous_standby_names = \
                 '{}'), and none is streaming: creates and results wait until one is back, or \
                 until synchronous_standby_names is cleared",
                self.synchronous_standby_names
            ));
        }
        if !named && self.asynchronous > 0 {
            return Some(format!(
                "replication is asynchronous ({} standby streaming, synchronous_standby_names is \
                 empty): a failover to a standby can lose the last acknowledged creates and \
                 results; name the standbys in synchronous_standby_names (Patroni: \
                 synchronous_mode) for acknowledged to mean replicated",
                self.asynchronous
            ));
        }
        if self.hidden > 0 && self.synchronous == 0 && self.asynchronous == 0 {
            return Some(
                "the server's standbys cannot be seen by this role (grant it pg_monitor): \
                 whether a failover keeps acknowledged writes is not known"
                    .into(),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn primary(system_identifier: i64, timeline: u32) -> Identity {
        Identity {
            in_recovery: false,
            system_identifier,
            timeline: Some(timeline),
        }
    }

    #[test]
    fn a_fence_refuses_standbys_and_older_timelines_and_remembers_newer_ones() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("postgres-cluster");
        let fence = Fence::open(Some(file.clone())).expect("fence");
        assert_eq!(fence.seen(), None);
        assert_eq!(fence.admit("a", &primary(7, 2)), Ok(()));
        assert_eq!(std::fs::read_to_string(&file).expect("file"), "7 2\n");
        let stale = fence
            .admit("a", &primary(7, 1))
            .expect_err("older timeline");
        assert!(stale.contains("stale primary"), "{stale}");
        let standby = Identity {
            in_recovery: true,
            system_identifier: 7,
            timeline: None,
        };
        assert!(fence
            .admit("b", &standby)
            .expect_err("standby")
            .contains("standby"));
        assert_eq!(fence.admit("b", &primary(7, 3)), Ok(()));
        // Remembered across a restart.
        let again = Fence::open(Some(file.clone())).expect("fence");
        assert_eq!(
            again.seen(),
            Some(Seen {
                system_identifier: 7,
                timeline: 3
            })
        );
        assert!(again.admit("a", &primary(7, 2)).is_err());
        // Another cluster starts anew.
        assert_eq!(again.admit("c", &primary(9, 1)), Ok(()));
        assert_eq!(std::fs::read_to_string(&file).expect("file"), "9 1\n");
        // A damaged file is refused, not forgotten.
        std::fs::write(&file, "garbage").expect("write");
        assert!(Fence::open(Some(file)).is_err());
    }

    #[test]
    fn replication_risks() {
        let r = |names: &str, synchronous, asynchronous, hidden| Replication {
            synchronous_standby_names: names.into(),
            synchronous,
            asynchronous,
            hidden,
        };
        assert_eq!(r("", 0, 0, 0).risk(), None);
        assert_eq!(r("*", 1, 0, 0).risk(), None);
        assert_eq!(r("ANY 1 (a, b)", 2, 0, 0).risk(), None);
        assert!(r("*", 0, 0, 0)
            .risk()
            .expect("waits")
            .contains("every commit waits"));
        assert!(r("", 0, 2, 0)
            .risk()
            .expect("async")
            .contains("asynchronous"));
        assert!(r("", 0, 0, 1)
            .risk()
            .expect("hidden")
            .contains("pg_monitor"));
    }

    #[test]
    fn a_url_of_several_servers_is_split_keeping_everything_else() {
        let config: Config = "postgres://u:pw@10.0.0.1:5433,db2:5434/queue?target_session_attrs=read-write&application_name=x"
            .parse()
            .expect("url");
        let split = split(&config);
        let names: Vec<&str> = split.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(names, ["10.0.0.1:5433", "db2:5434"]);
        for (_, one) in &split {
            assert_eq!(one.get_hosts().len(), 1);
            assert_eq!(one.get_user(), Some("u"));
            assert_eq!(one.get_password(), Some(&b"pw"[..]));
            assert_eq!(one.get_dbname(), Some("queue"));
            assert_eq!(one.get_application_name(), Some("x"));
            assert_eq!(
                one.get_target_session_attrs(),
                tokio_postgres::config::TargetSessionAttrs::ReadWrite
            );
        }
        assert_eq!(split[1].1.get_ports(), [5434]);
    }
}
