//! The store's clock. Due times, leases, observation windows and timestamps are all decided on
//! one clock, read where the decision is made (for SQLite: on the writer thread, inside the
//! write).
//!
//! For SQLite that clock is the wall clock as it read when the store's [`Clock`] was made, moved
//! on by the time elapsed since on `CLOCK_BOOTTIME` (which, unlike the wall clock, is never
//! stepped, and, unlike `CLOCK_MONOTONIC`, keeps counting while the machine is suspended). A
//! step of the wall clock while the daemon runs (NTP correcting a clock that was far off, an
//! operator's `date -s`) therefore neither closes a window early nor stretches a lease: the
//! store keeps its pace, logs the step once, and adopts the new wall time at its next start.
//! PostgreSQL decides on the database's clock; its backend uses [`Clock::steady_micros`] to
//! carry its estimate of that clock between readings.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, UTC. Every timestamp in the store contract is one of these,
/// so that backends agree without sharing a date type.
pub type Millis = i64;

/// How far the wall clock may move away from the store's clock before the step is logged.
const STEP_LOGGED_MS: Millis = 2_000;

/// The store's clock; clones share it. See the module documentation.
#[derive(Debug, Clone)]
pub struct Clock {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The wall clock (µs since the epoch) when the clock was made...
    wall_at_start: i64,
    /// ... and `CLOCK_BOOTTIME` (µs) at the same moment.
    steady_at_start: i64,
    /// Added to every wall-clock reading: a test steps "the host's wall clock" by storing into it.
    shift_ms: Option<Arc<AtomicI64>>,
    /// Wall clock minus store clock (ms) when a step was last logged.
    step_logged: AtomicI64,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The host's clocks.
    pub fn system() -> Clock {
        Clock::new(None)
    }

    /// The host's clocks, with the wall clock moved by whatever `shift_ms` holds at each
    /// reading: a test steps the wall clock by storing into it, and checks that nothing the
    /// store decides follows the step.
    pub fn shifted(shift_ms: Arc<AtomicI64>) -> Clock {
        Clock::new(Some(shift_ms))
    }

    fn new(shift_ms: Option<Arc<AtomicI64>>) -> Clock {
        let mut clock = Clock {
            inner: Arc::new(Inner {
                wall_at_start: 0,
                steady_at_start: steady_micros(),
                shift_ms,
                step_logged: AtomicI64::new(0),
            }),
        };
        let wall_at_start = clock.wall_ms() * 1000;
        if let Some(inner) = Arc::get_mut(&mut clock.inner) {
            inner.wall_at_start = wall_at_start;
        }
        clock
    }

    /// The store's time, in milliseconds since the Unix epoch: the wall clock at the start plus
    /// the time elapsed since (see the module documentation). Logs a step of the wall clock
    /// away from it, once per step.
    pub fn now_ms(&self) -> Millis {
        let elapsed = self.steady_micros() - self.inner.steady_at_start;
        let now = (self.inner.wall_at_start + elapsed).div_euclid(1000);
        let apart = self.wall_ms() - now;
        let logged = self.inner.step_logged.load(Ordering::Relaxed);
        if (apart - logged).abs() > STEP_LOGGED_MS {
            self.inner.step_logged.store(apart, Ordering::Relaxed);
            tracing::warn!(
                wall_minus_store_ms = apart,
                "the wall clock was stepped by {:+.1} s while the daemon runs; due times, leases \
                 and observation windows keep the time elapsed since the start (timestamps shown \
                 stay that far from the wall clock until the next start, which adopts it)",
                (apart - logged) as f64 / 1000.0
            );
        }
        now
    }

    /// The wall clock, milliseconds since the Unix epoch (moved by a test's shift).
    pub fn wall_ms(&self) -> Millis {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Millis);
        wall + self
            .inner
            .shift_ms
            .as_ref()
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    /// A clock that only moves forward at the pace of time, suspended time included
    /// (`CLOCK_BOOTTIME`), in microseconds from an arbitrary origin.
    pub fn steady_micros(&self) -> i64 {
        steady_micros()
    }
}

#[allow(
    clippy::useless_conversion,
    reason = "tv_nsec is a c_long: i64 here, i32 on 32-bit targets"
)]
pub(crate) fn steady_micros() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    t.tv_sec * 1_000_000 + i64::from(t.tv_nsec) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_clock_step_moves_the_wall_reading_but_not_the_store_clock() {
        let shift = Arc::new(AtomicI64::new(0));
        let clock = Clock::shifted(Arc::clone(&shift));
        let before = clock.now_ms();
        assert!(
            (clock.wall_ms() - before).abs() < 50,
            "starts on the wall clock"
        );
        shift.store(3_600_000, Ordering::Relaxed);
        let after = clock.now_ms();
        assert!((0..1_000).contains(&(after - before)), "{before} → {after}");
        assert!(
            clock.wall_ms() - after > 3_599_000,
            "the wall reading moved"
        );
        shift.store(-3_600_000, Ordering::Relaxed);
        assert!(clock.now_ms() >= after, "never backwards");
    }

    #[test]
    fn the_store_clock_keeps_pace_with_time() {
        let clock = Clock::system();
        let (t0, s0) = (clock.now_ms(), clock.steady_micros());
        std::thread::sleep(std::time::Duration::from_millis(120));
        let (t1, s1) = (clock.now_ms(), clock.steady_micros());
        assert!((115..1_000).contains(&(t1 - t0)), "{}", t1 - t0);
        assert!((115_000..1_000_000).contains(&(s1 - s0)), "{}", s1 - s0);
    }
}
