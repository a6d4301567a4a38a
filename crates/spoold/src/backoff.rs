//! Exponential backoff with deterministic jitter, shared by deliveries and tasks: the delay
//! after a failed attempt is a pure function of (id, attempt), so retries of many items spread
//! apart, yet one item's schedule can be reproduced from its id.

use std::time::Duration;

/// Exponential backoff with deterministic jitter.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// Delay after the `attempt`-th failed attempt (1-based): `base · 2^(attempt-1)`, times a
    /// jitter factor in [0.8, 1.2] that is a pure function of (id, attempt), capped at `cap`.
    /// Deterministic jitter spreads retries of many deliveries apart, yet a given delivery's
    /// schedule can be reproduced from its id.
    pub fn delay(&self, id: &str, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(40);
        let raw = self.base.as_secs_f64() * 2f64.powi(exp as i32);
        let jittered = raw.min(self.cap.as_secs_f64() * 2.0) * jitter(id, attempt);
        Duration::from_secs_f64(jittered.min(self.cap.as_secs_f64()))
    }
}

/// A factor in [0.8, 1.2] from FNV-1a of `"<id>:<attempt>"`.
fn jitter(id: &str, attempt: u32) -> f64 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in id
        .bytes()
        .chain(std::iter::once(b':'))
        .chain(attempt.to_string().into_bytes())
    {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    0.8 + f64::from(hash % 401) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_and_caps() {
        let b = Backoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(300),
        };
        for attempt in 1..=8u32 {
            let nominal = f64::from(1u32 << (attempt - 1));
            let d = b
                .delay("0190f3c2a1b27c4e9d0a5b6c7d8e9f01", attempt)
                .as_secs_f64();
            assert!(
                d >= nominal * 0.8 - 1e-9 && d <= nominal * 1.2 + 1e-9,
                "{attempt}: {d}"
            );
        }
        for attempt in [9, 12, 30, 100, u32::MAX] {
            let d = b.delay("x", attempt);
            assert!(d <= Duration::from_secs(300), "{attempt}: {d:?}");
            assert!(d >= Duration::from_secs(240), "{attempt}: {d:?}");
        }
        // Deterministic per (id, attempt), different across ids.
        assert_eq!(b.delay("a", 3), b.delay("a", 3));
        let spread: std::collections::HashSet<_> =
            (0..50).map(|i| b.delay(&format!("id{i}"), 3)).collect();
        assert!(spread.len() > 10);
    }
}
