//! Per-target rules from the configuration file: which deliveries are signed, and with which
//! secret. Rules are `[[targets]]` tables, tried in the order written, the first whose `match`
//! fits a delivery's URL applying; secrets are `[secrets]` entries read from files at start and
//! at each reload (SIGHUP), kept in memory only — never in the database, the API or a log.
//!
//! ```toml
//! [secrets]
//! billing = { file = "/etc/spoold/billing.key" }   # whsec_… (several keys during a rotation)
//!
//! [[targets]]
//! match = "https://hooks.example.com/*"
//! sign = "billing"
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use spool_proto::signing::Secret;

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
}

/// The rules in force. Their `Debug` names secrets, never their keys.
#[derive(Debug, Default)]
pub struct TargetRules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    pattern: String,
    sign: Option<Signer>,
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
            let secret =
                read_secret(&spec.file).map_err(|e| at(format!("[secrets] {name}: {e}")))?;
            read.insert(name.clone(), Arc::new(secret));
        }
        let mut rules = Vec::with_capacity(targets.len());
        for (i, spec) in targets.into_iter().enumerate() {
            let table = format!("[[targets]] #{} (match = {:?})", i + 1, spec.pattern);
            check_pattern(&spec.pattern).map_err(|e| at(format!("{table}: {e}")))?;
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
            rules.push(Rule {
                pattern: spec.pattern,
                sign,
            });
        }
        Ok(TargetRules { rules })
    }

    /// How many `[[targets]]` rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The signer of the first rule matching `url`, if that rule signs.
    pub fn signer(&self, url: &str) -> Option<&Signer> {
        self.rules
            .iter()
            .find(|r| glob_match(&r.pattern, url))
            .and_then(|r| r.sign.as_ref())
    }
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
