//! Dev-only support for spoold's tests: run the real `spoold` binary, a scripted HTTP receiver
//! on 127.0.0.1, and a thin client for the daemon's JSON API. Everything binds and dials the
//! loopback address only.
//!
//! # Layout
//! - [`bin_path`]: [`cargo_bin`] finds (and, when missing, builds) a workspace binary.
//! - [`daemon`]: [`DaemonProcess`] spawns `spoold` as a child process and waits for its
//!   `listening` log line; for tests where a process is the point (kill -9, restart, signals).
//! - [`receiver`]: [`Receiver`] records requests and answers from a [`Reply`] script; `stop`
//!   drops open connections so the port refuses, as a crashed target would.
//! - [`closing`]: [`ClosingReceiver`], a receiver whose keep-alive timeout (1–20 ms after each
//!   answer) closes connections under the client's next request.
//! - [`remote`]: [`RemoteApi`], the far side of the at-most-once tests: it commits records,
//!   then answers, stalls or resets as scripted, and lists them by fingerprint for
//!   reconciliation.
//! - [`api`]: [`Api`] calls the daemon's HTTP API (TCP or unix socket) and returns
//!   `(status, json)` pairs.
//! - [`pg`]: [`TestDatabase`], a PostgreSQL database of a test's own (`SPOOLD_TEST_PG_URL`);
//!   [`PrivateServer`], a PostgreSQL server of a test's own, to restart or to crowd.
//! - [`tls`]: a CA made in the test, certificates it signs, and the server configuration a
//!   TLS receiver ([`Receiver::start_tls`]) serves with.
//! - [`proxy`]: [`Proxy`], a TCP proxy a test can pause, for a daemon that loses its database
//!   while its connections stay open.
//! - [`powerfs`]: [`PowerFs`], a FUSE file system that keeps writes in memory until they are
//!   fsynced, so a test can cut the power and find only what was made durable; it can also
//!   fail fsyncs (with Linux's semantics) and run out of space.
//! - [`privileged`]: for tests that need root (network namespaces, mounts): a root check, a
//!   command runner, and the rule that skips such a test where it cannot run unless an
//!   environment variable requires it.
//! - [`skip`]: how a test that skips itself says so, where `scripts/test` finds it to report
//!   what a run did not cover.
//!
//! # Example
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use spool_testkit::{Api, DaemonOptions, DaemonProcess, Receiver, Reply};
//!
//! let dir = std::env::temp_dir();
//! let receiver = Receiver::start().await?;
//! receiver.push_replies(vec![Reply::status(503)]);
//! let daemon = DaemonProcess::start(DaemonOptions::new(dir.join("spool.db"))).await?;
//! let api = Api::new(daemon.base_url());
//! let (status, created) = api
//!     .create(serde_json::json!({ "targetUrl": receiver.url("/hook") }))
//!     .await?;
//! assert_eq!(status, 201);
//! let id = created["id"].as_str().unwrap_or_default();
//! api.wait_status(id, &["succeeded"], std::time::Duration::from_secs(10)).await?;
//! assert_eq!(receiver.requests().len(), 2);
//! # Ok(())
//! # }
//! ```

// Docs are written for the people who change this crate: they link to private items too
// (`cargo doc --document-private-items` renders those links).
#![allow(rustdoc::private_intra_doc_links)]

pub mod api;
pub mod bin_path;
pub mod closing;
pub mod daemon;
pub mod group;
pub mod pg;
pub mod powerfs;
pub mod privileged;
pub mod proxy;
pub mod receiver;
pub mod remote;
pub mod skip;
pub mod tls;

pub use api::Api;
pub use bin_path::cargo_bin;
pub use closing::ClosingReceiver;
pub use daemon::{parse_listening_line, DaemonOptions, DaemonProcess};
pub use group::run_in_group;
pub use pg::{HeldConnections, HeldTransaction, PrivateServer, TestDatabase};
pub use powerfs::PowerFs;
pub use proxy::Proxy;
pub use receiver::{Receiver, Recorded, Reply};
pub use remote::{CreateBehavior, Record, RemoteApi, SearchBehavior};
