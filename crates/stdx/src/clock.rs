//! The injectable clock: wall-clock time for deadlines that are stored (session TTLs,
//! lock-delays, token and lease expiry, heartbeats).
//!
//! Stored deadlines are Unix time, so they mean the same after a restart. Services hold a
//! [`SharedClock`]; tests inject a [`ManualClock`] to move time without sleeping. Waiting itself
//! still uses tokio timers, so loops that wait on a deadline also wait on [`Clock::jumped`] and
//! re-check when a manual clock is moved.
//!
//! Invariant: a clock never goes backwards unless a test sets it back ([`ManualClock::set_ms`]).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// A source of the current time.
pub trait Clock: Send + Sync + Debug + 'static {
    /// Now, in Unix nanoseconds.
    fn now_nanos(&self) -> i64;

    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64 {
        self.now_nanos().div_euclid(1_000_000)
    }

    /// Notified whenever time jumps (only a manual clock does); loops waiting on deadlines
    /// re-check when it fires.
    fn jumped(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// A clock shared by a service's handlers and loops.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_nanos(&self) -> i64 {
        crate::time::unix_now_nanos()
    }
}

/// A clock tests move by hand; clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now_nanos: Arc<AtomicI64>,
    jumped: Arc<Notify>,
}

impl ManualClock {
    /// A clock standing at `start_ms` Unix milliseconds.
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            now_nanos: Arc::new(AtomicI64::new(start_ms.saturating_mul(1_000_000))),
            jumped: Arc::new(Notify::new()),
        }
    }

    /// A clock standing at the system time now.
    pub fn at_system_time() -> ManualClock {
        ManualClock::new(crate::time::unix_now_ms())
    }

    /// Moves time forward and wakes every loop waiting on a deadline.
    pub fn advance(&self, by: Duration) {
        let nanos = i64::try_from(by.as_nanos()).unwrap_or(i64::MAX);
        self.add_nanos(nanos);
    }

    /// Moves time forward by `ms` milliseconds and wakes every loop waiting on a deadline.
    pub fn advance_ms(&self, ms: u64) {
        self.advance(Duration::from_millis(ms));
    }

    /// Sets the time (Unix milliseconds), forwards or back, and wakes every waiting loop.
    pub fn set_ms(&self, unix_ms: i64) {
        self.now_nanos
            .store(unix_ms.saturating_mul(1_000_000), Ordering::SeqCst);
        self.jumped.notify_waiters();
    }

    fn add_nanos(&self, nanos: i64) {
        let _ = self
            .now_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(nanos))
            });
        self.jumped.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> i64 {
        self.now_nanos.load(Ordering::SeqCst)
    }

    fn jumped(&self) -> Option<Arc<Notify>> {
        Some(self.jumped.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::new(1_000);
        let twin = clock.clone();
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance_ms(500);
        assert_eq!(twin.now_ms(), 1_500);
        twin.advance(Duration::from_nanos(1));
        assert_eq!(clock.now_nanos(), 1_500_000_001);
        clock.set_ms(10);
        assert_eq!(twin.now_ms(), 10);
    }

    #[tokio::test]
    async fn advancing_wakes_a_waiting_loop() {
        let clock = ManualClock::new(0);
        let jumped = clock.jumped().expect("a manual clock reports jumps");
        let waiting = jumped.notified();
        tokio::pin!(waiting);
        waiting.as_mut().enable();
        clock.advance_ms(1);
        waiting.await;
    }

    #[test]
    fn the_system_clock_is_after_2020_and_has_no_jumps() {
        let clock: SharedClock = Arc::new(SystemClock);
        assert!(clock.now_ms() > 1_577_836_800_000);
        assert!(clock.jumped().is_none());
    }
}
