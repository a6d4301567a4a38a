//! Per-target rules from the configuration file: which deliveries are signed, and with which
//! secret, and how fast a target may be sent to. Rules are `[[targets]]` tables, tried in the
//! order written, the first whose `match` fits a delivery's URL applying; secrets are
//! `[secrets]` entries read from files at start and at each reload (SIGHUP), kept in memory
//! only — never in the database, the API or a log. Rates are token buckets, one per origin
//! ([`RateLimiter`]): a rule with a `rate` must match whole origins (its pattern ends in `/*`
//! right after the host and port), since the scheduler claims by origin and a
//! narrower rule's rate would hold back the origin's other paths too. At most once, a rule can
//! name the 5xx statuses its receiver answers before any work (`at_most_once_resend_on`):
//! such an answer is resent instead of making the outcome `unknown`.
//!
//! ```toml
//! [secrets]
//! billing = { file = "/etc/spoold/billing.key" }   # whsec_… (several keys during a rotation)
//!
//! [[targets]]
//! match = "https://hooks.example.com/*"
//! sign = "billing"
//! rate = "50/s"      # burst = 1 unless given
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use spool_proto::signing::Secret;

use crate::deliveries::outbound::TlsSettings;
use crate::deliveries::retry;

/// `[secrets] NAME = { file = "…" }` as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    file: PathBuf,
}

/// One `[[targets]]` table as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// A URL where `*` stands for any run of characters (`https://hooks.example.com/*`).
    #[serde(rename = "match")]
    pattern: String,
    /// The name of a `[secrets]` entry: requests to matching URLs are signed with it.
    sign: Option<String>,
    /// `N/s`, `N/m` or `N/h`: requests per unit of time to each origin the rule matches.
    rate: Option<String>,
    /// Requests that may go at once after a quiet spell (default 1: evenly spaced).
    burst: Option<u32>,
    /// PEM certificates to trust besides the system's (a private CA).
    ca_file: Option<PathBuf>,
    /// A PEM certificate chain to present (mutual TLS), with `client_key`.
    client_cert: Option<PathBuf>,
    /// Its PEM private key: not readable by every user.
    client_key: Option<PathBuf>,
    /// The lowest TLS version: "1.2" (the default) or "1.3".
    min_tls: Option<String>,
    /// At most once: 5xx statuses the receiver answers before doing any work (e.g. `[503]`),
    /// resent like a 429 instead of making the outcome `unknown`.
    at_most_once_resend_on: Option<Vec<u16>>,
}

/// A token bucket's shape: `per_sec` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_sec: f64,
    pub burst: f64,
}

impl Rate {
    /// `50/s`, `600/m`, `10/h`, with an optional burst (default 1).
    pub fn parse(text: &str, burst: Option<u32>) -> Result<Rate, String> {
        let bad = || format!("rate {text:?} is not N/s, N/m or N/h (e.g. \"50/s\")");
        let (n, unit) = text.trim().split_once('/').ok_or_else(bad)?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        if n == 0 {
            return Err(format!("rate {text:?} must be at least 1 per unit"));
        }
        let burst = burst.unwrap_or(1);
        if burst == 0 {
            return Err("burst must be at least 1".into());
        }
        Ok(Rate {
            per_sec: f64::from(n) / secs,
            burst: f64::from(burst),
        })
    }
}

/// The rules in force. Their `Debug` names secrets, never their keys.
#[derive(Debug, Default)]
pub struct TargetRules {
    rules: Vec<Rule>,
    /// Every `[secrets]` entry, by name: rules sign with them, and so do deliveries whose
    /// create names one (`sign.secretRef`).
    secrets: BTreeMap<String, Arc<Secret>>,
}

#[derive(Debug)]
struct Rule {
    pattern: String,
    sign: Option<Signer>,
    rate: Option<Rate>,
    tls: Option<Arc<TlsSettings>>,
    resend_on: Vec<u16>,
}

/// A named secret that signs requests.
#[derive(Debug)]
pub struct Signer {
    pub name: String,
    pub secret: Arc<Secret>,
}

impl TargetRules {
    /// Check the tables of the file `path` and read the secrets they use. An error names the
    /// file, the table and the reason (never a key).
    pub fn load(
        path: &Path,
        secrets: BTreeMap<String, SecretSpec>,
        targets: Vec<TargetSpec>,
    ) -> Result<TargetRules, String> {
        let at = |what: String| format!("{}: {what}", path.display());
        let mut read = BTreeMap::new();
        for (name, spec) in &secrets {
            if !is_secret_name(name) {
                return Err(at(format!(
                    "[secrets] {name:?}: a name is 1 to 64 letters, digits, '_', '.' or '-'"
                )));
            }
            let secret =
                read_secret(&spec.file).map_err(|e| at(format!("[secrets] {name}: {e}")))?;
            read.insert(name.clone(), Arc::new(secret));
        }
        let mut rules = Vec::with_capacity(targets.len());
        for (i, spec) in targets.into_iter().enumerate() {
            let table = format!("[[targets]] #{} (match = {:?})", i + 1, spec.pattern);
            check_pattern(&spec.pattern).map_err(|e| at(format!("{table}: {e}")))?;
            let tls = read_tls(&spec).map_err(|e| at(format!("{table}: {e}")))?;
            let sign = match spec.sign {
                None => None,
                Some(name) => {
                    let secret =
                        read.get(&name).ok_or_else(|| {
                            let known: Vec<&str> = read.keys().map(String::as_str).collect();
                            at(format!(
                            "{table}: sign = {name:?} is not declared in [secrets] (declared: {})",
                            if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                        ))
                        })?;
                    Some(Signer {
                        name,
                        secret: Arc::clone(secret),
                    })
                }
            };
            let rate = match (&spec.rate, spec.burst) {
                (Some(_), _) if !covers_whole_origins(&spec.pattern) => {
                    return Err(at(format!(
                        "{table}: rate: rates are per origin (scheme://host:port), and this \
                         pattern matches only part of one; match the whole origin \
                         (\"scheme://host/*\") or move the rate to a rule that does"
                    )));
                }
                (Some(rate), burst) => {
                    Some(Rate::parse(rate, burst).map_err(|e| at(format!("{table}: {e}")))?)
                }
                (None, Some(_)) => {
                    return Err(at(format!("{table}: burst needs a rate")));
                }
                (None, None) => None,
            };
            let resend_on = spec.at_most_once_resend_on.unwrap_or_default();
            if let Some(bad) = resend_on.iter().find(|s| !retry::may_be_trusted(**s)) {
                return Err(at(format!(
                    "{table}: at_most_once_resend_on: {bad} is not a 5xx a receiver answers \
                     before any work (500, 502–504, 506–599; 408, 425 and 429 are always \
                     resent, other 4xx and 501, 505 are final)"
                )));
            }
            rules.push(Rule {
                pattern: spec.pattern,
                sign,
                rate,
                tls: tls.map(Arc::new),
                resend_on,
            });
        }
        Ok(TargetRules {
            rules,
            secrets: read,
        })
    }

    /// The `[secrets]` entry `name`.
    pub fn secret(&self, name: &str) -> Option<&Arc<Secret>> {
        self.secrets.get(name)
    }

    /// The names of the `[secrets]` entries, in order.
    pub fn secret_names(&self) -> impl Iterator<Item = &str> {
        self.secrets.keys().map(String::as_str)
    }

    /// How many `[[targets]]` rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule matching `url`: it alone applies.
    fn rule(&self, url: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| glob_match(&r.pattern, url))
    }

    /// The signer of the rule for `url`, if that rule signs.
    pub fn signer(&self, url: &str) -> Option<&Signer> {
        self.rule(url).and_then(|r| r.sign.as_ref())
    }

    /// The TLS settings of the rule for `url`, if that rule has any.
    pub fn tls(&self, url: &str) -> Option<Arc<TlsSettings>> {
        self.rule(url).and_then(|r| r.tls.clone())
    }

    /// The rate of `url`'s origin: that of the first rule for whole origins
    /// ([`covers_whole_origins`]) that matches the origin, if that rule has one. Rules for part
    /// of an origin are passed over (they carry no rate: refused at load), and the origin is
    /// matched as its root URL (`scheme://host:port/`), so every URL of an origin has the
    /// same rate.
    pub fn rate(&self, url: &str) -> Option<Rate> {
        let root = origin_root(url);
        self.rules
            .iter()
            .find(|r| covers_whole_origins(&r.pattern) && glob_match(&r.pattern, &root))
            .and_then(|r| r.rate)
    }

    /// The statuses the rule for `url` trusts as "not processed" at most once.
    pub fn resend_on(&self, url: &str) -> &[u16] {
        self.rule(url).map_or(&[], |r| r.resend_on.as_slice())
    }
}

/// Whether `pattern` is written for whole origins: `scheme://host[:port]/*`, or
/// `scheme://host…*` (wildcards in the host and port, nothing of a path). Only such a rule may
/// have a rate.
fn covers_whole_origins(pattern: &str) -> bool {
    let Some((_, rest)) = pattern.split_once("://") else {
        return false;
    };
    match rest.strip_suffix("/*") {
        Some(authority) => !authority.is_empty() && !authority.contains('/'),
        None => rest.ends_with('*') && !rest.contains('/'),
    }
}

/// `scheme://authority/` of a URL: everything before its path, and the path's first `/`.
fn origin_root(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    format!("{}/", &url[..end])
}

/// The token buckets of rate-limited origins. The scheduler takes a token for each delivery
/// it claims ([`Self::take`]), claims no more for an origin than it has tokens, and sleeps
/// until the next token of an empty one ([`Self::room`]), so a target held back by its rate
/// costs no attempt and no wake-up before it may be sent to again. A bucket full for a minute
/// is forgotten (a new one starts full).
#[derive(Debug)]
pub struct RateLimiter {
    rules: Arc<LiveRules>,
    buckets: std::sync::Mutex<std::collections::HashMap<String, Bucket>>,
}

/// How long a full bucket is kept: while it is kept, the scheduler claims no more for its
/// origin than it has tokens (a forgotten one is unknown to it until the next request).
const IDLE_BUCKET: std::time::Duration = std::time::Duration::from_secs(60);

/// The part of a token a bucket holds beyond its burst (see `Bucket::cap`).
const LATE_SLACK: f64 = 0.5;

/// Rounding slack of a bucket's arithmetic: a token due at an instant is there at it.
const EPSILON: f64 = 1e-9;

#[derive(Debug)]
struct Bucket {
    rate: Rate,
    tokens: f64,
    at: std::time::Instant,
    /// Since when it has been full, if it is.
    full_since: Option<std::time::Instant>,
}

impl Bucket {
    fn new(rate: Rate, now: std::time::Instant) -> Bucket {
        Bucket {
            rate,
            tokens: rate.burst + LATE_SLACK,
            at: now,
            full_since: Some(now),
        }
    }

    /// What it holds at most: the burst, and half a token more that a request claimed a little
    /// late keeps, so that the scheduler's own delay (a wake-up, a claim's commit) is not lost
    /// from every interval: 100/s stays 100/s, not 100/s less the delay (with a quarter token,
    /// 95.8–99.4/s in `spool-bench rate`; without, 83/s). After a quiet spell, a burst of
    /// `burst` goes at once and the next comes half an interval later.
    fn cap(&self) -> f64 {
        self.rate.burst + LATE_SLACK
    }

    fn refill(&mut self, now: std::time::Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        let filled = self.tokens + elapsed * self.rate.per_sec;
        if filled >= self.cap() && self.full_since.is_none() {
            let to_full = (self.cap() - self.tokens).max(0.0) / self.rate.per_sec;
            self.full_since = Some(self.at + std::time::Duration::from_secs_f64(to_full));
        }
        self.tokens = filled.min(self.cap());
        self.at = now;
    }

    /// When the next whole token is there (now if there is one).
    fn next_token(&self) -> std::time::Instant {
        let missing = (1.0 - self.tokens).max(0.0);
        self.at + std::time::Duration::from_secs_f64(missing / self.rate.per_sec)
    }
}

/// What an origin may be sent now, by its rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Room {
    pub origin: String,
    /// Whole tokens in its bucket.
    pub tokens: u32,
    /// When the next token comes, if there is none now.
    pub next: Option<std::time::Instant>,
}

impl RateLimiter {
    pub fn new(rules: Arc<LiveRules>) -> RateLimiter {
        RateLimiter {
            rules,
            buckets: Default::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Bucket>> {
        self.buckets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether requests to `url` are rate-limited.
    pub fn limited(&self, url: &str) -> bool {
        self.rules.now().rate(url).is_some()
    }

    /// Take a token of `origin` for a request to `url`: true when it may be sent now (always,
    /// without a rate), false when the bucket is empty.
    pub fn take(&self, origin: &str, url: &str, now: std::time::Instant) -> bool {
        let Some(rate) = self.rules.now().rate(url) else {
            return true;
        };
        let mut buckets = self.lock();
        let bucket = buckets
            .entry(origin.to_owned())
            .or_insert_with(|| Bucket::new(rate, now));
        // A reload may have changed the rate.
        bucket.rate = rate;
        bucket.refill(now);
        if bucket.tokens >= 1.0 - EPSILON {
            bucket.tokens = (bucket.tokens - 1.0).max(0.0);
            bucket.full_since = None;
            true
        } else {
            false
        }
    }

    /// Every origin with a bucket: its whole tokens, and when the next comes if it has none.
    /// A bucket that has been full for [`IDLE_BUCKET`] is dropped (the origin's next request
    /// starts a new one, full).
    pub fn room(&self, now: std::time::Instant) -> Vec<Room> {
        let mut buckets = self.lock();
        buckets.retain(|_, b| {
            b.refill(now);
            b.full_since
                .is_none_or(|since| now.saturating_duration_since(since) <= IDLE_BUCKET)
        });
        buckets
            .iter()
            .map(|(origin, b)| Room {
                origin: origin.clone(),
                tokens: ((b.tokens + EPSILON).floor() as u32).min(b.rate.burst as u32),
                next: (b.tokens < 1.0 - EPSILON).then(|| b.next_token()),
            })
            .collect()
    }
}

/// A rule's TLS settings, its files read and checked; `None` when it sets none.
fn read_tls(spec: &TargetSpec) -> Result<Option<TlsSettings>, String> {
    let read = |name: &str, file: &Path, private: bool| -> Result<Vec<u8>, String> {
        use std::os::unix::fs::PermissionsExt;
        let shown = file.display();
        if !file.is_absolute() {
            return Err(format!("{name} {shown:?} must be an absolute path"));
        }
        let meta = std::fs::metadata(file).map_err(|e| format!("{name} {shown}: {e}"))?;
        if private && meta.permissions().mode() & 0o004 != 0 {
            return Err(format!(
                "{name} {shown} is readable by every user; chmod o-r (or 600) it"
            ));
        }
        std::fs::read(file).map_err(|e| format!("{name} {shown}: {e}"))
    };
    let ca = spec
        .ca_file
        .as_deref()
        .map(|f| read("ca_file", f, false))
        .transpose()?;
    let client = match (&spec.client_cert, &spec.client_key) {
        (Some(cert), Some(key)) => Some((
            read("client_cert", cert, false)?,
            read("client_key", key, true)?,
        )),
        (None, None) => None,
        _ => return Err("client_cert and client_key go together".into()),
    };
    if let (Some((cert, key)), Some(cert_file), Some(key_file)) =
        (&client, &spec.client_cert, &spec.client_key)
    {
        if key_mismatch(cert, key) {
            return Err(format!(
                "client_cert {} and client_key {} do not match: the key is not the private key \
                 of the certificate (the first in client_cert)",
                cert_file.display(),
                key_file.display()
            ));
        }
    }
    if ca.is_none() && client.is_none() && spec.min_tls.is_none() {
        return Ok(None);
    }
    TlsSettings::from_pem(
        ca.as_deref(),
        client.as_ref().map(|(c, k)| (c.as_slice(), k.as_slice())),
        spec.min_tls.as_deref(),
    )
    .map(Some)
}

/// Whether a client certificate and key (PEM) are known not to belong together. Said here in
/// plain words: the TLS library refuses such a pair only as "builder error". Anything it
/// cannot tell (files that do not parse, a key type it does not know) is left to the TLS
/// settings' own checks.
fn key_mismatch(cert_pem: &[u8], key_pem: &[u8]) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let Ok(certs) = CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>() else {
        return false;
    };
    let Ok(key) = PrivateKeyDer::from_pem_slice(key_pem) else {
        return false;
    };
    let Ok(signer) = rustls::crypto::ring::default_provider()
        .key_provider
        .load_private_key(key)
    else {
        return false;
    };
    matches!(
        rustls::sign::CertifiedKey::new(certs, signer).keys_match(),
        Err(rustls::Error::InconsistentKeys(
            rustls::InconsistentKeys::KeyMismatch
        ))
    )
}

/// Whether `name` may name a `[secrets]` entry: what `sign.secretRef` accepts.
pub fn is_secret_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A secret file: an absolute path, not readable by every user, holding `whsec_…` keys.
fn read_secret(file: &Path) -> Result<Secret, String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = file.display();
    if !file.is_absolute() {
        return Err(format!("file {shown:?} must be an absolute path"));
    }
    let meta = std::fs::metadata(file).map_err(|e| format!("{shown}: {e}"))?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(format!(
            "{shown} is readable by every user; chmod o-r (or 600) it"
        ));
    }
    let text = std::fs::read_to_string(file).map_err(|e| format!("{shown}: {e}"))?;
    Secret::parse(&text).map_err(|e| format!("{shown}: {e}"))
}

/// A pattern is a URL with `*` wildcards: it must start with `http://` or `https://`.
fn check_pattern(pattern: &str) -> Result<(), String> {
    let lower = pattern.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(
            "match must be a URL starting with http:// or https:// (* for any run of characters)"
                .into(),
        );
    }
    Ok(())
}

/// Whether `text` fits `pattern`, where `*` matches any run of characters (none included) and
/// everything else matches itself; the scheme and host compare without regard to case.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    // Scheme and authority are case-insensitive: compare up to the first '/' after "://" in
    // lower case, the rest as written.
    let split = |s: &[u8]| -> usize {
        let start = s.windows(3).position(|w| w == b"://").map_or(0, |i| i + 3);
        s[start..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(s.len(), |i| start + i)
    };
    let (ps, ts) = (split(p), split(t));
    let lower = |s: &[u8], end: usize| {
        let mut v = s.to_vec();
        v[..end].make_ascii_lowercase();
        v
    };
    wildcard(&lower(p, ps), &lower(t, ts))
}

/// `*`-only wildcard matching, iterative with backtracking to the last star (linear in
/// practice, never exponential).
fn wildcard(p: &[u8], t: &[u8]) -> bool {
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

/// The rules a reload replaces while deliveries keep using the set they took.
#[derive(Debug)]
pub struct LiveRules(RwLock<Arc<TargetRules>>);

impl LiveRules {
    pub fn new(rules: Arc<TargetRules>) -> LiveRules {
        LiveRules(RwLock::new(rules))
    }

    pub fn now(&self) -> Arc<TargetRules> {
        match self.0.read() {
            Ok(rules) => Arc::clone(&rules),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn replace(&self, rules: Arc<TargetRules>) {
        match self.0.write() {
            Ok(mut current) => *current = rules,
            Err(poisoned) => *poisoned.into_inner() = rules,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let m = glob_match;
        assert!(m(
            "https://hooks.example.com/*",
            "https://hooks.example.com/a/b?c=1"
        ));
        assert!(m(
            "https://hooks.example.com/*",
            "https://hooks.example.com/"
        ));
        assert!(m(
            "HTTPS://Hooks.Example.com/*",
            "https://hooks.example.COM/x"
        ));
        assert!(
            !m(
                "https://hooks.example.com/A*",
                "https://hooks.example.com/a"
            ),
            "paths keep case"
        );
        assert!(!m(
            "https://hooks.example.com/*",
            "https://hooks.example.com.evil.test/"
        ));
        assert!(!m(
            "https://hooks.example.com/*",
            "http://hooks.example.com/"
        ));
        assert!(m("https://*.example.com/*", "https://a.b.example.com/x"));
        assert!(m("http://127.0.0.1:*/*", "http://127.0.0.1:9000/hook"));
        assert!(m("*", "anything"));
        assert!(m("https://a/x", "https://a/x"));
        assert!(!m("https://a/x", "https://a/xy"));
        // Many stars against a long text stay fast.
        let text = format!("https://a/{}", "a".repeat(10_000));
        assert!(!m("https://a/*a*a*a*a*a*b", &text));
    }

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    fn load(secrets: &str, targets: &str) -> Result<TargetRules, String> {
        #[derive(serde::Deserialize)]
        struct File {
            #[serde(default)]
            secrets: BTreeMap<String, SecretSpec>,
            #[serde(default)]
            targets: Vec<TargetSpec>,
        }
        let f: File =
            toml::from_str(&format!("{secrets}\n{targets}")).map_err(|e| e.to_string())?;
        TargetRules::load(Path::new("/etc/spoold.toml"), f.secrets, f.targets)
    }

    #[test]
    fn rules_sign_the_first_matching_target_with_a_declared_secret() {
        let dir = tempfile::tempdir().expect("dir");
        let key = file(
            dir.path(),
            "k",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
            0o600,
        );
        let secrets = format!("[secrets]\nbilling = {{ file = {:?} }}", key);
        let rules = load(
            &secrets,
            "[[targets]]\nmatch = \"https://hooks.example.com/unsigned/*\"\n\
             [[targets]]\nmatch = \"https://hooks.example.com/*\"\nsign = \"billing\"",
        )
        .expect("valid");
        assert_eq!(rules.len(), 2);
        let signer = rules.signer("https://hooks.example.com/x").expect("signed");
        assert_eq!(signer.name, "billing");
        assert!(rules
            .signer("https://hooks.example.com/unsigned/x")
            .is_none());
        assert!(rules.signer("https://other.example.com/").is_none());
        assert!(!format!("{rules:?}").contains("MfKQ"), "{rules:?}");
    }

    #[test]
    fn rates_parse_and_buckets_space_requests() {
        assert_eq!(
            Rate::parse("50/s", None),
            Ok(Rate {
                per_sec: 50.0,
                burst: 1.0
            })
        );
        assert_eq!(
            Rate::parse("120/m", Some(5)),
            Ok(Rate {
                per_sec: 2.0,
                burst: 5.0
            })
        );
        assert!(Rate::parse("0/s", None).is_err());
        assert!(Rate::parse("5 per s", None).is_err());
        assert!(Rate::parse("5/d", None).is_err());
        assert!(Rate::parse("5/s", Some(0)).is_err());

        let rules = load(
            "",
            "[[targets]]\nmatch = \"http://a/*\"\nrate = \"10/s\"\nburst = 2",
        )
        .expect("valid");
        let limiter = RateLimiter::new(Arc::new(LiveRules::new(Arc::new(rules))));
        let t0 = std::time::Instant::now();
        let ms = |n| t0 + std::time::Duration::from_millis(n);
        // Not limited: always, and no bucket.
        assert!(limiter.take("http://b", "http://b/x", t0));
        assert!(limiter.room(t0).is_empty());
        // A burst of two, then one every 100 ms.
        assert!(limiter.take("http://a", "http://a/x", t0));
        assert!(limiter.take("http://a", "http://a/x", t0));
        assert!(!limiter.take("http://a", "http://a/x", t0));
        let room = limiter.room(ms(20));
        assert_eq!(room.len(), 1);
        assert_eq!(room[0].tokens, 0);
        let next = room[0].next.expect("empty");
        // The half token kept beyond the burst: the next is due 50 ms later, then every
        // 100 ms.
        assert_eq!(next.duration_since(t0).as_millis(), 50);
        assert!(!limiter.take("http://a", "http://a/x", ms(49)));
        assert!(limiter.take("http://a", "http://a/x", ms(50)));
        assert!(!limiter.take("http://a", "http://a/x", ms(149)));
        assert!(limiter.take("http://a", "http://a/x", ms(150)));
        // Full again after a quiet spell: a burst is allowed again, and the bucket is kept
        // (the scheduler keeps counting its tokens) until it has been full for a minute.
        let room = limiter.room(ms(1000));
        assert_eq!((room[0].tokens, room[0].next), (2, None));
        assert!(limiter.take("http://a", "http://a/x", ms(1000)));
        assert!(limiter.take("http://a", "http://a/x", ms(1000)));
        assert!(!limiter.take("http://a", "http://a/x", ms(1000)));
        // Full again at 1,200 ms (2.5 tokens): kept for a minute after that.
        assert_eq!(limiter.room(ms(61_100)).len(), 1);
        assert!(limiter.room(ms(61_300)).is_empty());
    }

    /// Rates are per origin: a rule with a rate matches whole origins, and an origin's rate is
    /// that of the first rule for whole origins that matches it — whatever the path, and past
    /// a narrower rule (for signing or TLS) that comes first.
    #[test]
    fn a_rate_is_an_origins() {
        for (pattern, whole) in [
            ("https://hooks.example.com/*", true),
            ("https://*.example.com/*", true),
            ("http://127.0.0.1:*/*", true),
            ("http://127.0.0.1:*", true),
            ("https://hooks.example.com/slow/*", false),
            ("https://hooks.example.com/", false),
            ("https://hooks.example.com/hook", false),
            ("https://hooks.example.com*/x", false),
            ("https:///*", false),
        ] {
            assert_eq!(covers_whole_origins(pattern), whole, "{pattern}");
        }
        let err = load(
            "",
            "[[targets]]\nmatch = \"http://h/slow/*\"\nrate = \"8/s\"",
        )
        .expect_err("refused");
        assert!(
            err.contains(
                "[[targets]] #1 (match = \"http://h/slow/*\"): rate: rates are per origin"
            ),
            "{err}"
        );
        let rules = load(
            "",
            "[[targets]]\nmatch = \"http://h/tls/*\"\nmin_tls = \"1.3\"\n\
             [[targets]]\nmatch = \"http://*.example.com/*\"\nrate = \"8/s\"\n\
             [[targets]]\nmatch = \"http://h/*\"\nrate = \"2/s\"",
        )
        .expect("valid");
        let per_sec = |url: &str| rules.rate(url).map(|r| r.per_sec);
        assert_eq!(
            per_sec("http://h/tls/x"),
            Some(2.0),
            "past the narrower rule"
        );
        assert_eq!(per_sec("http://h/fast?x=/"), Some(2.0));
        assert_eq!(per_sec("http://a.example.com/x"), Some(8.0));
        // A path that the host's wildcard could swallow does not make another origin's rate.
        assert_eq!(per_sec("http://evil.test/a.example.com/x"), None);
        assert_eq!(per_sec("http://other/"), None);
        assert_eq!(origin_root("http://h:8080/a/b?c"), "http://h:8080/");
        assert_eq!(origin_root("http://h?c"), "http://h/");
    }

    #[test]
    fn a_rule_trusts_only_5xx_a_receiver_answers_before_any_work() {
        let rules = load(
            "",
            "[[targets]]\nmatch = \"http://h/*\"\nat_most_once_resend_on = [502, 503]",
        )
        .expect("valid");
        assert_eq!(rules.resend_on("http://h/x"), [502, 503]);
        assert!(rules.resend_on("http://other/x").is_empty());
        for bad in [404, 429, 501, 505, 200] {
            let err = load(
                "",
                &format!("[[targets]]\nmatch = \"http://h/*\"\nat_most_once_resend_on = [{bad}]"),
            )
            .expect_err("refused");
            assert!(
                err.contains(&format!("at_most_once_resend_on: {bad} is not a 5xx")),
                "{err}"
            );
        }
    }

    #[test]
    fn bad_rules_and_secrets_are_named() {
        let dir = tempfile::tempdir().expect("dir");
        let open = file(
            dir.path(),
            "open",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            0o644,
        );
        let bad = file(dir.path(), "bad", "not-a-key", 0o600);
        let err = |secrets: String, targets: &str| load(&secrets, targets).expect_err("refused");
        assert_eq!(
            err(
                String::new(),
                "[[targets]]\nmatch = \"https://a/*\"\nsign = \"nope\""
            ),
            "/etc/spoold.toml: [[targets]] #1 (match = \"https://a/*\"): sign = \"nope\" is not \
             declared in [secrets] (declared: none)"
        );
        assert_eq!(
            err(
                String::new(),
                "[[targets]]\nmatch = \"hooks.example.com/*\""
            ),
            "/etc/spoold.toml: [[targets]] #1 (match = \"hooks.example.com/*\"): match must be a \
             URL starting with http:// or https:// (* for any run of characters)"
        );
        assert_eq!(
            err(format!("[secrets]\ns = {{ file = {open:?} }}"), ""),
            format!(
                "/etc/spoold.toml: [secrets] s: {} is readable by every user; chmod o-r (or 600) it",
                open.display()
            )
        );
        assert_eq!(
            err(format!("[secrets]\ns = {{ file = {bad:?} }}"), ""),
            format!(
                "/etc/spoold.toml: [secrets] s: {}: key 1 does not start with whsec_",
                bad.display()
            )
        );
        assert_eq!(
            err("[secrets]\ns = { file = \"rel.key\" }".into(), ""),
            "/etc/spoold.toml: [secrets] s: file \"rel.key\" must be an absolute path"
        );
        assert!(err(
            String::new(),
            "[[targets]]\nmatch = \"https://a/*\"\nsing = \"x\""
        )
        .contains("unknown field `sing`"));
    }
}
