//! The outbound address policy end to end, with real name resolution: the daemon runs under
//! `ip netns exec` in a network namespace of its own that has nothing but `lo`, its default
//! policy in force, and the test talks to it over a unix socket. Test names resolve through
//! the namespace's own `/etc/hosts` (`/etc/netns/<ns>/hosts`); any other name is asked of the
//! namespace's own loopback (`/etc/netns/<ns>/resolv.conf`), where no DNS server listens.
//!
//! Nothing can leave the namespace: a public address has no route there, so an attempt the
//! policy allows fails in the kernel with "network unreachable" before any packet is sent.
//!
//! Needs root and `ip` (iproute2). Without them the tests say so on stderr and pass, unless
//! `SPOOLD_REQUIRE_NETNS=1` (CI), which turns that into a failure.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{bail, Context as _};
use serde_json::{json, Value};
use spool_testkit::privileged::{self, available};
use spool_testkit::{Api, DaemonOptions, DaemonProcess};
use tempfile::TempDir;

use crate::{db_path, id_of, WAIT};

/// Set to `1` to make these tests fail instead of skipping where namespaces are unavailable.
const REQUIRE: &str = "SPOOLD_REQUIRE_NETNS";

/// The namespace's `/etc/hosts`. 93.184.216.34 is a public address with no route inside.
const HOSTS: &str = "\
10.1.2.3 private.test
169.254.169.254 meta.test
::ffff:127.0.0.1 mapped.test
93.184.216.34 mixed.test
127.0.0.1 mixed.test
93.184.216.34 public.test
";

/// IP literals are judged at submission: 400 `target_blocked`, nothing stored.
#[tokio::test(flavor = "multi_thread")]
async fn blocked_literals_are_refused_at_submission() {
    let Some(spoold) = Spoold::boot(&[]).await else {
        return;
    };
    let loopback = "127.0.0.1 is blocked (loopback 127.0.0.0/8)";
    let cases: &[(&str, &str)] = &[
        ("http://2130706433/", loopback),
        ("http://0x7f.1/", loopback),
        ("http://0177.0.0.1/", loopback),
        (
            "http://[::ffff:127.0.0.1]/",
            "::ffff:127.0.0.1 is blocked \
             (IPv4-mapped address of 127.0.0.1: loopback 127.0.0.0/8)",
        ),
        ("http://[::]/", ":: is blocked (unspecified ::/128)"),
        (
            "http://169.254.169.254/latest/meta-data",
            "169.254.169.254 is blocked (link-local 169.254.0.0/16)",
        ),
        (
            "http://10.0.0.1/",
            "10.0.0.1 is blocked (private 10.0.0.0/8)",
        ),
        (
            "http://[fd00::1]/",
            "fd00::1 is blocked (unique local fc00::/7)",
        ),
    ];
    for (url, reason) in cases {
        let (status, err) = spoold
            .api
            .create(json!({"targetUrl": url}))
            .await
            .expect(url);
        assert_eq!(status, 400, "{url}: {err}");
        assert_eq!(err["error"]["code"], "target_blocked", "{url}: {err}");
        let message = err["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{url}: {message}");
        assert!(
            message.ends_with("or, for development, --allow-private-targets"),
            "{url}: {message}"
        );
    }
    let (status, list) = spoold.api.list("").await.expect("list");
    assert_eq!((status, &list["count"]), (200, &json!(0)), "{list}");
    assert_eq!(
        spoold.metric("spoold_blocked_targets_total").await,
        cases.len() as u64
    );
}

/// A name is judged when it is resolved, on every attempt: if any of its addresses is blocked
/// the attempt fails at once, is not retried, and names the address and the rule.
#[tokio::test(flavor = "multi_thread")]
async fn names_resolving_to_blocked_addresses_fail_without_retry() {
    let Some(spoold) = Spoold::boot(&[]).await else {
        return;
    };
    let cases: &[(&str, &str)] = &[
        ("private.test", "10.1.2.3 is blocked (private 10.0.0.0/8)"),
        (
            "meta.test",
            "169.254.169.254 is blocked (link-local 169.254.0.0/16)",
        ),
        (
            "mapped.test",
            "::ffff:127.0.0.1 is blocked \
             (IPv4-mapped address of 127.0.0.1: loopback 127.0.0.0/8)",
        ),
        // One public and one loopback address: the public one must not be picked.
        ("mixed.test", "127.0.0.1 is blocked (loopback 127.0.0.0/8)"),
    ];
    let mut ids = Vec::new();
    for (host, _) in cases {
        let url = format!("http://{host}/hook");
        let (status, created) = spoold
            .api
            .create(json!({"targetUrl": url, "maxAttempts": 5}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{host}: {created}");
        ids.push(id_of(&created));
    }
    for ((host, reason), id) in cases.iter().zip(&ids) {
        let done = spoold
            .api
            .wait_status(id, &["failed", "succeeded"], WAIT)
            .await
            .expect("finishes");
        assert_eq!(done["status"], "failed", "{host}: {done}");
        assert_eq!(done["attempts"], 1, "{host}: not retried: {done}");
        assert_eq!(done["lastErrorCode"], "target_blocked", "{host}: {done}");
        // `reason` is "ADDR is blocked (RULE)".
        let (addr, rest) = reason.split_once(" is blocked").expect("a reason");
        let bits = if addr.contains(':') { 128 } else { 32 };
        assert_eq!(
            done["lastError"].as_str().unwrap_or_default(),
            format!(
                "{host} resolves to {addr}, which is blocked{rest}; start spoold with \
                 --allow-target {addr}/{bits} or, for development, --allow-private-targets"
            ),
            "{host}"
        );
        let history = attempt_summary(&spoold.api, id).await;
        assert_eq!(
            history,
            [("failed".to_owned(), "target_blocked".to_owned())],
            "{host}"
        );
    }
    assert_eq!(
        spoold.metric("spoold_blocked_targets_total").await,
        cases.len() as u64
    );
}

/// A public address passes the policy, so the attempt is made: it fails with `connect_failed`
/// (no route in the namespace) and is retried like any transport error.
#[tokio::test(flavor = "multi_thread")]
async fn public_addresses_are_attempted() {
    let Some(spoold) = Spoold::boot(&[]).await else {
        return;
    };
    for url in ["http://public.test/hook", "http://93.184.216.34/hook"] {
        let (status, created) = spoold
            .api
            .create(json!({"targetUrl": url, "maxAttempts": 2}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{url}: {created}");
        let id = id_of(&created);
        let done = spoold
            .api
            .wait_status(&id, &["failed", "succeeded"], WAIT)
            .await
            .expect("finishes");
        assert_connect_failed(url, &done);
        let history = attempt_summary(&spoold.api, &id).await;
        assert_eq!(history.len(), 2, "{url}: {history:?}");
        assert_eq!(history[0].0, "retry", "{url}: {history:?}");
        assert!(
            history.iter().all(|(_, code)| code == "connect_failed"),
            "{url}: {history:?}"
        );
    }
    assert_eq!(spoold.metric("spoold_blocked_targets_total").await, 0);
    assert_eq!(
        spoold.metric("spoold_config_allow_private_targets").await,
        0
    );
    assert_eq!(
        spoold.metric("spoold_config_allowed_target_ranges").await,
        0
    );
}

/// A name that does not resolve: `dns_failed`, told as such, and retried.
#[tokio::test(flavor = "multi_thread")]
async fn names_that_do_not_resolve_fail_as_dns_errors() {
    let Some(spoold) = Spoold::boot(&[]).await else {
        return;
    };
    let (status, created) = spoold
        .api
        .create(json!({"targetUrl": "http://nosuch.test/hook", "maxAttempts": 2}))
        .await
        .expect("create");
    assert_eq!(status, 201, "{created}");
    let id = id_of(&created);
    let done = spoold
        .api
        .wait_status(&id, &["failed", "succeeded"], WAIT)
        .await
        .expect("finishes");
    assert_eq!(
        (&done["status"], &done["attempts"], &done["lastErrorCode"]),
        (&json!("failed"), &json!(2), &json!("dns_failed")),
        "{done}"
    );
    // What getaddrinfo says depends on how the lookup failed: the server is not there.
    let error = done["lastError"].as_str().unwrap_or_default();
    assert!(
        [
            "DNS: cannot resolve nosuch.test: temporary failure in name resolution",
            "DNS: cannot resolve nosuch.test: no such host",
        ]
        .contains(&error),
        "{error}"
    );
}

/// `--allow-target 10.1.2.0/24` opens that range, for names and literals, and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn allow_target_opens_only_its_range() {
    let Some(spoold) = Spoold::boot(&["--allow-target", "10.1.2.0/24"]).await else {
        return;
    };
    let (status, err) = spoold
        .api
        .create(json!({"targetUrl": "http://10.1.3.1/"}))
        .await
        .expect("create");
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["code"], "target_blocked", "{err}");

    let mut created = Vec::new();
    for url in [
        "http://private.test/hook",
        "http://10.1.2.3/hook",
        "http://meta.test/hook",
    ] {
        let (status, delivery) = spoold
            .api
            .create(json!({"targetUrl": url, "maxAttempts": 2}))
            .await
            .expect("create");
        assert_eq!(status, 201, "{url}: {delivery}");
        created.push((url, id_of(&delivery)));
    }
    for (url, id) in &created {
        let done = spoold
            .api
            .wait_status(id, &["failed", "succeeded"], WAIT)
            .await
            .expect("finishes");
        if url.contains("meta.test") {
            assert_eq!(done["attempts"], 1, "{url}: {done}");
            assert_eq!(done["lastErrorCode"], "target_blocked", "{url}: {done}");
        } else {
            assert_connect_failed(url, &done);
        }
    }
    assert_eq!(spoold.metric("spoold_blocked_targets_total").await, 2);
    assert_eq!(
        spoold.metric("spoold_config_allowed_target_ranges").await,
        1
    );
}

/// Two attempts (maxAttempts 2), both refused by the kernel for want of a route.
fn assert_connect_failed(url: &str, done: &Value) {
    assert_eq!(done["status"], "failed", "{url}: {done}");
    assert_eq!(done["attempts"], 2, "{url}: retried once: {done}");
    assert_eq!(done["lastErrorCode"], "connect_failed", "{url}: {done}");
    let error = done["lastError"].as_str().unwrap_or_default();
    assert!(
        error
            .to_ascii_lowercase()
            .contains("network is unreachable"),
        "{url}: {error}"
    );
}

/// `(outcome, errorCode)` of every attempt, oldest first.
async fn attempt_summary(api: &Api, id: &str) -> Vec<(String, String)> {
    let (status, history) = api.attempts(id).await.expect("attempts");
    assert_eq!(status, 200, "{history}");
    history["attempts"]
        .as_array()
        .expect("attempts array")
        .iter()
        .map(|a| {
            let field = |name: &str| a[name].as_str().unwrap_or("-").to_owned();
            (field("outcome"), field("errorCode"))
        })
        .collect()
}

/// A daemon inside its own namespace. Fields drop in order: the daemon is killed before its
/// directory and the namespace go.
struct Spoold {
    api: Api,
    _daemon: DaemonProcess,
    _dir: TempDir,
    _netns: Netns,
}

impl Spoold {
    /// Boot in a fresh namespace with the default policy, fast retries and `extra` flags;
    /// `None` where namespaces are unavailable (and not required).
    async fn boot(extra: &[&str]) -> Option<Spoold> {
        let netns = available(REQUIRE, Netns::create())?;
        let dir = TempDir::new().expect("temp dir");
        let socket = dir.path().join("spoold.sock");
        let opts = DaemonOptions::new(db_path(&dir))
            .unix_socket(&socket)
            .default_address_policy()
            .wrapper(["ip", "netns", "exec", netns.name.as_str()])
            .args(["--retry-base", "50ms", "--retry-cap", "100ms"])
            .args(extra.iter().copied());
        let daemon = DaemonProcess::start(opts)
            .await
            .expect("spoold starts in the namespace");
        Some(Spoold {
            api: Api::unix(socket),
            _daemon: daemon,
            _dir: dir,
            _netns: netns,
        })
    }

    /// The value of a counter or gauge.
    async fn metric(&self, name: &str) -> u64 {
        let value = self.api.metric(name).await.expect("metrics");
        value.unwrap_or_else(|| panic!("no metric {name}")) as u64
    }
}

/// A network namespace with only `lo` (up) and its own `/etc/hosts`; deleted, with
/// `/etc/netns/<name>`, on drop.
struct Netns {
    name: String,
    etc: PathBuf,
}

impl Netns {
    fn create() -> anyhow::Result<Netns> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        privileged::require_root()?;
        let name = format!(
            "spoold-it-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        privileged::run("ip", ["netns", "add", name.as_str()])?;
        // From here on, the guard cleans up whatever else fails.
        let netns = Netns {
            etc: Path::new("/etc/netns").join(&name),
            name,
        };
        std::fs::create_dir_all(&netns.etc)
            .with_context(|| format!("create {}", netns.etc.display()))?;
        std::fs::write(netns.etc.join("hosts"), HOSTS).context("write the namespace's hosts")?;
        // A name missing from the hosts file is asked of a DNS server on the namespace's own
        // loopback, where nothing listens: the lookup fails without a packet leaving.
        std::fs::write(
            netns.etc.join("resolv.conf"),
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .context("write the namespace's resolv.conf")?;
        netns.exec(&["ip", "link", "set", "lo", "up"])?;
        // The rule these tests rely on: nothing but loopback inside.
        let links = netns.exec(&["ip", "-o", "link", "show"])?;
        let names: Vec<&str> = links
            .lines()
            .filter_map(|line| line.split(':').nth(1))
            .map(str::trim)
            .collect();
        if names != ["lo"] {
            bail!(
                "namespace {} has links {names:?}, expected only lo",
                netns.name
            );
        }
        Ok(netns)
    }

    fn exec(&self, command: &[&str]) -> anyhow::Result<String> {
        let mut args = vec!["netns", "exec", self.name.as_str()];
        args.extend_from_slice(command);
        privileged::run("ip", args)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = privileged::run("ip", ["netns", "del", self.name.as_str()]) {
            eprintln!("cannot delete network namespace {}: {e:#}", self.name);
        }
        if let Err(e) = std::fs::remove_dir_all(&self.etc) {
            eprintln!("cannot remove {}: {e}", self.etc.display());
        }
    }
}
