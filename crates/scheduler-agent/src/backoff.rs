//! Retry delays for talking to the servers: doubling from a base up to a cap, reset on success.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub(crate) fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            base,
            cap,
            next: base,
        }
    }

    /// The delay before the next retry; each call doubles the following one, up to the cap.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.cap);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(300));
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
        assert_eq!(backoff.next_delay(), Duration::from_millis(200));
        assert_eq!(backoff.next_delay(), Duration::from_millis(300));
        assert_eq!(backoff.next_delay(), Duration::from_millis(300));
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_millis(100));
    }
}
