//! Wall-clock time for deadlines that are stored (session TTLs, lock-delays, TTL checks).
//!
//! Stored deadlines are Unix milliseconds, so they mean the same after a restart. Tests inject
//! a [`ManualClock`] to move time without sleeping; waiting itself still uses tokio timers,
//! which the background loops re-arm whenever the clock is advanced (see `tasks/`).
//!
//! Invariant: `now_ms` never goes backwards for a given clock.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// A source of the current time in Unix milliseconds.
pub trait Clock: Send + Sync + Debug + 'static {
    fn now_ms(&self) -> u64;

    /// Notified whenever time jumps (only a manual clock does); loops waiting on deadlines
    /// re-check when it fires.
    fn jumped(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock tests move by hand.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
    jumped: Arc<Notify>,
}

impl ManualClock {
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock {
            now: Arc::new(AtomicU64::new(start_ms)),
            jumped: Arc::new(Notify::new()),
        }
    }

    /// Moves time forward and wakes every loop waiting on a deadline.
    pub fn advance_ms(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
        self.jumped.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn jumped(&self) -> Option<Arc<Notify>> {
        Some(self.jumped.clone())
    }
}
