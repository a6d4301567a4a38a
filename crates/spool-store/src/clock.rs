//! The store's clock. Due times, leases and timestamps are all decided on this one clock, read
//! where the decision is made (for SQLite: on the writer thread, inside the write). For SQLite
//! it is this host's wall clock; tests can shift it, to check that nothing depends on the wall
//! clock standing still.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::Millis;

/// The wall clock, optionally moved by a shift that can change while the store runs.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    shift_ms: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The host's wall clock.
    pub fn system() -> Clock {
        Clock::default()
    }

    /// The wall clock plus whatever `shift_ms` holds at each reading: a test steps time by
    /// storing into it.
    pub fn shifted(shift_ms: Arc<AtomicI64>) -> Clock {
        Clock {
            shift_ms: Some(shift_ms),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> Millis {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Millis);
        wall + self
            .shift_ms
            .as_ref()
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }
}
