//! This host's estimate of the database's clock, for what a host decides without a round trip
//! (how long to sleep until the next due time, whether an observation window has closed).
//! Decisions written to the database are made on the database's clock itself.
//!
//! Every transaction reads the database clock (`clock_timestamp()`); the estimate is that
//! reading's offset from this host's steady clock ([`Clock::steady_micros`], never stepped), so
//! a step of this host's wall clock changes nothing. A step of the database's clock is followed
//! at the next transaction.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use crate::clock::Clock;
use crate::model::Millis;

/// How long (µs) the shortest round trip seen is kept as the bar a new reading must meet.
const SAMPLE_TTL: i64 = 60_000_000;

/// How far (µs) beyond its round trip a reading must be from the offset in force to count as a
/// step of the database's clock, taken at once.
const STEP: i64 = 500_000;

#[derive(Debug)]
pub(super) struct DbClock {
    clock: Clock,
    /// Database clock minus the steady clock (µs); `i64::MIN` until the first reading.
    offset: AtomicI64,
    best: Mutex<Best>,
}

/// The reading the offset in force came from.
#[derive(Debug, Clone, Copy)]
struct Best {
    /// Its round trip (µs).
    round_trip: i64,
    /// When it was taken (steady µs); `None` before the first.
    at: Option<i64>,
}

/// What a new reading does to the estimate.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Keep,
    /// Better than the one in force (a shorter round trip), or that one is stale.
    Take,
    /// The offset in force cannot explain it: the database's clock moved by this much (µs).
    Stepped(i64),
}

impl DbClock {
    pub(super) fn new(clock: Clock) -> DbClock {
        DbClock {
            clock,
            offset: AtomicI64::new(i64::MIN),
            best: Mutex::new(Best {
                round_trip: i64::MAX,
                at: None,
            }),
        }
    }

    /// The steady clock a reading's `sent` and `received` are taken on.
    pub(super) fn steady_micros(&self) -> i64 {
        self.clock.steady_micros()
    }

    /// The database's clock now, as this host estimates it (the steady clock before the first
    /// reading).
    pub(super) fn now_ms(&self) -> Millis {
        let offset = match self.offset.load(Ordering::Relaxed) {
            i64::MIN => 0,
            known => known,
        };
        (self.steady_micros() + offset).div_euclid(1000)
    }

    /// A reading `db` (µs since the epoch) of the database's clock, asked at `sent` and
    /// answered at `received` (steady µs).
    pub(super) fn sample(&self, sent: i64, db: i64, received: i64) {
        let round_trip = received - sent;
        let offset = db - (sent + round_trip / 2);
        let Ok(mut best) = self.best.lock() else {
            return;
        };
        let known = match self.offset.load(Ordering::Relaxed) {
            i64::MIN => None,
            known => Some(known),
        };
        match judge(known, *best, offset, round_trip, received) {
            Verdict::Keep => return,
            Verdict::Take => {}
            Verdict::Stepped(by) => tracing::warn!(
                "the database's clock moved by {:+.3} s; following it",
                by as f64 / 1e6
            ),
        }
        *best = Best {
            round_trip,
            at: Some(received),
        };
        self.offset.store(offset, Ordering::Relaxed);
    }
}

/// The midpoint of a reading's round trip stands for the moment the database read its clock,
/// so its offset is off by at most half the round trip: the shortest round trip seen bounds
/// that best (as NTP filters its samples), and is forgotten after [`SAMPLE_TTL`] so that the
/// estimate follows a clock that drifts. A reading further from the offset in force than its
/// whole round trip and [`STEP`] besides can only be a step of the database's clock.
fn judge(known: Option<i64>, best: Best, offset: i64, round_trip: i64, now: i64) -> Verdict {
    let Some(known) = known else {
        return Verdict::Take;
    };
    if (offset - known).abs() > round_trip + STEP {
        return Verdict::Stepped(offset - known);
    }
    let stale = best.at.is_none_or(|at| now - at > SAMPLE_TTL);
    if stale || round_trip <= best.round_trip {
        Verdict::Take
    } else {
        Verdict::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_are_filtered_by_round_trip_and_a_step_is_followed_at_once() {
        let best = Best {
            round_trip: 200,
            at: Some(1_000_000),
        };
        let now = 2_000_000;
        assert_eq!(judge(None, best, 5, 9_999, now), Verdict::Take);
        // Noise: a slower reading is not taken, a quicker one is.
        assert_eq!(judge(Some(0), best, 300, 900, now), Verdict::Keep);
        assert_eq!(judge(Some(0), best, 40, 150, now), Verdict::Take);
        // The best is forgotten after a minute.
        assert_eq!(
            judge(Some(0), best, 300, 900, 1_000_000 + SAMPLE_TTL + 1),
            Verdict::Take
        );
        // The database's clock stepped an hour back: taken however slow the reading.
        let hour = 3_600_000_000;
        assert_eq!(
            judge(Some(0), best, -hour, 900, now),
            Verdict::Stepped(-hour)
        );
        // A slow reading explains a large difference: not a step.
        assert_eq!(judge(Some(0), best, 600_000, 2_000_000, now), Verdict::Keep);
    }

    #[test]
    fn the_estimate_follows_readings_on_the_steady_clock() {
        let clock = DbClock::new(Clock::system());
        let hour_ahead = 3_600_000_000;
        let sent = clock.steady_micros();
        clock.sample(sent, sent + hour_ahead + 50, sent + 100);
        let estimate = clock.now_ms() * 1000 - clock.steady_micros();
        assert!((hour_ahead - 1_000..=hour_ahead + 1_000).contains(&estimate));
        // The database's clock is stepped back to the steady clock: followed at once.
        let sent = clock.steady_micros();
        clock.sample(sent, sent + 50, sent + 5_000);
        assert!((clock.now_ms() * 1000 - clock.steady_micros()).abs() < 10_000);
    }
}
