//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): spoold signs what it
//! sends, and `spoolctl verify` / `spoolctl receive --secret-file` check what arrived.
//!
//! A request carries `webhook-id` (the delivery id, the same on every attempt),
//! `webhook-timestamp` (Unix seconds, set per attempt) and `webhook-signature`: one
//! `v1,<base64 HMAC-SHA256>` per key, separated by spaces, of `{id}.{timestamp}.{body}` — the
//! body's raw bytes, so a binary body is signed as it is sent. A secret is written
//! `whsec_<base64 of 24 to 64 random bytes>`; during a rotation a secret holds several keys and
//! each of them signs, so a receiver that knows any one accepts the request.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

/// The delivery id header.
pub const ID_HEADER: &str = "webhook-id";
/// The attempt's time, Unix seconds.
pub const TIMESTAMP_HEADER: &str = "webhook-timestamp";
/// Space-separated `v1,<base64>` signatures, one per key.
pub const SIGNATURE_HEADER: &str = "webhook-signature";

/// The prefix of a secret as written in a file or a receiver's settings.
const PREFIX: &str = "whsec_";
/// Shortest and longest key the specification allows, in bytes.
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// One or more keys (several during a rotation: every key signs). Its `Debug` shows how many
/// keys it holds, never a key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} keys)", self.keys.len())
    }
}

/// Why a secret's text was refused. Never holds key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("no key (a key is written whsec_<base64>)")]
    Empty,
    #[error("key {0} does not start with whsec_")]
    Prefix(usize),
    #[error("key {0} is not valid base64 after whsec_")]
    Base64(usize),
    #[error("key {0} is {1} bytes; a key is 24 to 64 bytes")]
    Length(usize, usize),
}

impl Secret {
    /// Keys separated by whitespace or lines (a file may hold one per line; blank lines and
    /// lines starting with `#` are skipped), each `whsec_<base64>`. Keys are numbered from 1
    /// in errors.
    pub fn parse(text: &str) -> Result<Secret, SecretError> {
        let mut keys = Vec::new();
        let words = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(str::split_whitespace);
        for (i, word) in words.enumerate() {
            let n = i + 1;
            let encoded = word.strip_prefix(PREFIX).ok_or(SecretError::Prefix(n))?;
            let key = STANDARD
                .decode(encoded)
                .map_err(|_| SecretError::Base64(n))?;
            if !KEY_BYTES.contains(&key.len()) {
                return Err(SecretError::Length(n, key.len()));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(SecretError::Empty);
        }
        Ok(Secret { keys })
    }

    /// How many keys sign.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never true: a secret has at least one key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The `webhook-signature` value: `v1,<base64>` for each key, separated by spaces.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut out = String::new();
        for key in &self.keys {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str("v1,");
            out.push_str(&STANDARD.encode(mac(key, id, timestamp, body)));
        }
        out
    }

    /// Checks a received request: its three headers' values and its body, at `now` (Unix
    /// seconds), accepting timestamps within `tolerance` seconds either side (`None`: any).
    /// On success, the number (from 1) of the key that matched.
    pub fn verify(
        &self,
        id: &str,
        timestamp: &str,
        signatures: &str,
        body: &[u8],
        now: i64,
        tolerance: Option<i64>,
    ) -> Result<usize, VerifyError> {
        let ts: i64 = timestamp
            .trim()
            .parse()
            .map_err(|_| VerifyError::BadTimestamp)?;
        if let Some(tolerance) = tolerance {
            if ts < now - tolerance {
                return Err(VerifyError::TooOld(now - ts));
            }
            if ts > now + tolerance {
                return Err(VerifyError::TooNew(ts - now));
            }
        }
        let given: Vec<Vec<u8>> = signatures
            .split_whitespace()
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|s| STANDARD.decode(s).ok())
            .collect();
        if given.is_empty() {
            return Err(VerifyError::NoSignature);
        }
        for (i, key) in self.keys.iter().enumerate() {
            let mut expected = keyed(key);
            feed(&mut expected, id, ts, body);
            for sig in &given {
                // verify_slice compares in constant time.
                if expected.clone().verify_slice(sig).is_ok() {
                    return Ok(i + 1);
                }
            }
        }
        Err(VerifyError::Mismatch)
    }
}

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("webhook-timestamp is not a number of seconds")]
    BadTimestamp,
    #[error("too old: signed {0} s ago")]
    TooOld(i64),
    #[error("signed {0} s in the future")]
    TooNew(i64),
    #[error("no v1 signature in webhook-signature")]
    NoSignature,
    #[error("no signature matches a key (wrong secret, or the id, timestamp or body changed)")]
    Mismatch,
}

impl VerifyError {
    /// The timestamp is outside the tolerance (the signature was not checked).
    pub fn is_time(&self) -> bool {
        matches!(self, VerifyError::TooOld(_) | VerifyError::TooNew(_))
    }
}

fn keyed(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    Hmac::<Sha256>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key"))
}

fn feed(mac: &mut Hmac<Sha256>, id: &str, timestamp: i64, body: &[u8]) {
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
}

fn mac(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut m = keyed(key);
    feed(&mut m, id, timestamp, body);
    m.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's published example.
    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TS: i64 = 1_614_265_330;
    const BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn the_specifications_example() {
        let secret = Secret::parse(SECRET).expect("valid secret");
        assert_eq!(secret.sign(ID, TS, BODY), SIGNATURE);
        assert_eq!(
            secret.verify(ID, "1614265330", SIGNATURE, BODY, TS + 10, Some(300)),
            Ok(1)
        );
    }

    #[test]
    fn every_key_of_a_rotation_signs_and_any_one_verifies() {
        let new = format!("whsec_{}", STANDARD.encode([7u8; 32]));
        let both = Secret::parse(&format!("# rotating\n{new}\n\n{SECRET}\n")).expect("two keys");
        assert_eq!(both.len(), 2);
        let header = both.sign(ID, TS, BODY);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert_eq!(parts[1], SIGNATURE);
        // A receiver that has only the old key, or only the new one, accepts it.
        let old = Secret::parse(SECRET).expect("old");
        assert_eq!(old.verify(ID, "1614265330", &header, BODY, TS, None), Ok(1));
        let only_new = Secret::parse(&new).expect("new");
        assert_eq!(
            only_new.verify(ID, "1614265330", &header, BODY, TS, None),
            Ok(1)
        );
        assert_eq!(
            both.verify(ID, "1614265330", SIGNATURE, BODY, TS, None),
            Ok(2)
        );
    }

    #[test]
    fn a_changed_body_id_or_time_or_a_late_request_fails() {
        let secret = Secret::parse(SECRET).expect("valid");
        let check = |id: &str, ts: &str, sig: &str, body: &[u8], now: i64| {
            secret.verify(id, ts, sig, body, now, Some(300))
        };
        let ts = "1614265330";
        assert_eq!(
            check(ID, ts, SIGNATURE, b"{\"test\": 2432232315}", TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check("msg_other", ts, SIGNATURE, BODY, TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(ID, "1614265331", SIGNATURE, BODY, TS),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            check(ID, ts, SIGNATURE, BODY, TS + 301),
            Err(VerifyError::TooOld(301))
        );
        assert_eq!(
            check(ID, ts, SIGNATURE, BODY, TS - 301),
            Err(VerifyError::TooNew(301))
        );
        assert_eq!(
            check(ID, "soon", SIGNATURE, BODY, TS),
            Err(VerifyError::BadTimestamp)
        );
        assert_eq!(
            check(ID, ts, "v2,abc", BODY, TS),
            Err(VerifyError::NoSignature)
        );
    }

    #[test]
    fn binary_bodies_are_signed_as_bytes() {
        let secret = Secret::parse(SECRET).expect("valid");
        let body = [0u8, 159, 146, 150, 255];
        let sig = secret.sign(ID, TS, &body);
        assert_eq!(
            secret.verify(ID, "1614265330", &sig, &body, TS, None),
            Ok(1)
        );
        assert!(secret
            .verify(ID, "1614265330", &sig, &body[..4], TS, None)
            .is_err());
    }

    #[test]
    fn bad_secrets_are_named_without_their_value() {
        assert_eq!(Secret::parse(" \n# none\n"), Err(SecretError::Empty));
        assert_eq!(Secret::parse("MfKQ9r8G"), Err(SecretError::Prefix(1)));
        assert_eq!(
            Secret::parse(&format!("{SECRET} whsec_***")),
            Err(SecretError::Base64(2))
        );
        assert_eq!(
            Secret::parse(&format!("whsec_{}", STANDARD.encode([1u8; 8]))),
            Err(SecretError::Length(1, 8))
        );
        let shown = format!("{:?}", Secret::parse(SECRET).expect("valid"));
        assert_eq!(shown, "Secret(1 keys)");
    }
}
