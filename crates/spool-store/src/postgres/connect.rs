//! Connecting to PostgreSQL: the URL, TLS (rustls, only when the URL asks for it), the session
//! settings every connection carries (`synchronous_commit = on`, READ COMMITTED), and the pool.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Hook;
use deadpool_postgres::{HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::SslMode;

use super::{cluster, map_err};
use crate::error::{Result, StoreError};

/// The settings every session starts with (`options` of the startup message: a backslash
/// keeps the space in a value).
const SESSION_OPTIONS: &str =
    "-c synchronous_commit=on -c default_transaction_isolation=read\\ committed";

/// How long to wait for a connection: from the server, and from the pool.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connection settings parsed from a `postgres://` URL.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: tokio_postgres::Config,
    /// `None`: plain TCP or a unix socket.
    pub(crate) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// Which servers every connection may go to ([`cluster::Fence`]).
    pub(crate) fence: Arc<cluster::Fence>,
}

impl Target {
    /// Where it connects, for messages: `host:port` (or the socket directory), no credentials.
    pub(crate) fn address(&self) -> String {
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        match self.config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => format!("{host}:{port}"),
            Some(tokio_postgres::config::Host::Unix(dir)) => {
                format!("{}/.s.PGSQL.{port}", dir.display())
            }
            None => format!("localhost:{port}"),
        }
    }

    /// Parse `url`. `sslmode=require`, `verify-ca` and `verify-full` connect with TLS and verify
    /// the server's certificate against the system's roots (rustls has no unverified mode);
    /// without `sslmode`, or with `disable`/`prefer`, the connection is not encrypted.
    ///
    /// `stalled`: the session's `idle_in_transaction_session_timeout` (see
    /// [`super::PgConfig::stalled_transaction`]); zero leaves the server's.
    pub(crate) fn parse(
        url: &str,
        stalled: Duration,
        fence: Arc<cluster::Fence>,
    ) -> Result<Target> {
        let (url, verify) = strip_verify_mode(url);
        let mut config = tokio_postgres::Config::from_str(&url).map_err(|e| {
            StoreError::Database(format!(
                "invalid PostgreSQL URL: {}",
                redact_url(&e.to_string())
            ))
        })?;
        let tls = if verify || config.get_ssl_mode() == SslMode::Require {
            config.ssl_mode(SslMode::Require);
            Some(rustls_connector()?)
        } else {
            config.ssl_mode(SslMode::Disable);
            None
        };
        // Every session acknowledges a commit only once it is flushed to disk, whatever the
        // server's default: our "acknowledged" means durable. And its transactions run at READ
        // COMMITTED, which every statement is written for, whatever a database or role default
        // says (these settings come from the client, which outranks both).
        let mut options = config.get_options().unwrap_or_default().to_owned();
        if !options.is_empty() {
            options.push(' ');
        }
        options.push_str(SESSION_OPTIONS);
        if !stalled.is_zero() {
            options.push_str(&format!(
                " -c idle_in_transaction_session_timeout={}",
                stalled.as_millis().max(1)
            ));
        }
        config.options(&options);
        if config.get_application_name().is_none() {
            config.application_name("spoold");
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        Ok(Target { config, tls, fence })
    }

    /// A pool of up to `size` connections, each to a server the fence admits: a connection is
    /// made to the first of the URL's servers that it admits ([`cluster::FencedConnect`]), and
    /// checked again before the pool hands it out, so that one it refused never is.
    pub(crate) fn pool(&self, size: usize) -> Result<Pool> {
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let fence = Arc::clone(&self.fence);
        let manager = match &self.tls {
            Some(tls) => Manager::from_connect(
                self.config.clone(),
                cluster::FencedConnect::new(&self.config, tls.clone(), fence),
                manager_config,
            ),
            None => Manager::from_connect(
                self.config.clone(),
                cluster::FencedConnect::new(&self.config, tokio_postgres::NoTls, fence),
                manager_config,
            ),
        };
        let fence = Arc::clone(&self.fence);
        Pool::builder(manager)
            .max_size(size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .post_create(Hook::async_fn(move |client, _| {
                let fence = Arc::clone(&fence);
                Box::pin(async move {
                    cluster::admit_connection(&fence, client)
                        .await
                        .map_err(HookError::message)
                })
            }))
            .build()
            .map_err(|e| StoreError::Database(format!("cannot build the connection pool: {e}")))
    }

    /// A connection of its own (not pooled), to a server the fence admits, with the task that
    /// drives it. Notifications arrive on `messages`.
    pub(crate) async fn connect_dedicated(
        &self,
        messages: tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>,
    ) -> Result<(tokio_postgres::Client, tokio::task::JoinHandle<()>)> {
        let fence = Arc::clone(&self.fence);
        let balance = self.config.get_load_balance_hosts();
        let (client, driver) = match &self.tls {
            Some(tls) => {
                cluster::FencedConnect::new(&self.config, tls.clone(), fence)
                    .connect_with(Some(messages), balance)
                    .await
            }
            None => {
                cluster::FencedConnect::new(&self.config, tokio_postgres::NoTls, fence)
                    .connect_with(Some(messages), balance)
                    .await
            }
        }
        .map_err(map_err)?;
        if let Err(why) = cluster::admit_connection(&self.fence, &client).await {
            driver.abort();
            return Err(StoreError::Unavailable(why));
        }
        Ok((client, driver))
    }
}

/// Poll a connection until it closes, forwarding notifications to `messages`, if any.
pub(crate) async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    messages: Option<tokio::sync::mpsc::UnboundedSender<tokio_postgres::Notification>>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        let message = std::future::poll_fn(|cx| connection.poll_message(cx)).await;
        match message {
            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                if let Some(messages) = &messages {
                    if messages.send(n).is_err() {
                        return;
                    }
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                if messages.is_some() {
                    tracing::warn!(error = %e, "PostgreSQL notification connection failed");
                } else {
                    tracing::debug!(error = %e, "PostgreSQL connection ended");
                }
                return;
            }
            None => return,
        }
    }
}

/// tokio-postgres knows `disable`, `prefer` and `require`; libpq's verifying modes are
/// `require` plus a certificate check, which rustls always makes.
fn strip_verify_mode(url: &str) -> (String, bool) {
    for mode in ["sslmode=verify-full", "sslmode=verify-ca"] {
        if url.contains(mode) {
            return (url.replace(mode, "sslmode=require"), true);
        }
    }
    (url.to_owned(), false)
}

fn rustls_connector() -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for cert in found.certs {
        // A certificate the store cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(StoreError::Database(
            "sslmode asks for TLS, but no trusted root certificates were found on this system"
                .into(),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Database(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A URL or a message that may quote one, with any password replaced.
pub fn redact_url(text: &str) -> String {
    // postgres://user:password@host → postgres://user:***@host
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("://") {
        let (head, tail) = rest.split_at(start + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        for (input, expected) in [
            (
                "postgres://spool:s3cret@127.0.0.1:5432/spool",
                "postgres://spool:***@127.0.0.1:5432/spool",
            ),
            (
                "postgres://spool@127.0.0.1/spool",
                "postgres://spool@127.0.0.1/spool",
            ),
            (
                "postgres://127.0.0.1/spool?sslmode=require",
                "postgres://127.0.0.1/spool?sslmode=require",
            ),
            ("no url here", "no url here"),
        ] {
            assert_eq!(redact_url(input), expected, "{input}");
        }
    }

    #[test]
    fn tls_only_when_asked() {
        let url = "postgres://postgres@127.0.0.1:5432/test";
        let fence = || Arc::new(cluster::Fence::open(None).expect("fence"));
        let plain = Target::parse(url, Duration::ZERO, fence()).expect("parse");
        assert!(plain.tls.is_none());
        assert_eq!(plain.config.get_ssl_mode(), SslMode::Disable);
        assert_eq!(
            plain.config.get_options(),
            Some("-c synchronous_commit=on -c default_transaction_isolation=read\\ committed")
        );
        let bounded = Target::parse(url, Duration::from_millis(1500), fence()).expect("parse");
        assert_eq!(
            bounded.config.get_options(),
            Some(
                "-c synchronous_commit=on -c default_transaction_isolation=read\\ committed \
                 -c idle_in_transaction_session_timeout=1500"
            )
        );
        let (url, verify) = strip_verify_mode("postgres://127.0.0.1/db?sslmode=verify-full");
        assert!(verify);
        assert_eq!(url, "postgres://127.0.0.1/db?sslmode=require");
    }
}
