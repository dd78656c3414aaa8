//! Time on the scheduler's wire as the agent writes it: durations are integer nanoseconds
//! (saturating both ways), timestamps Go's RFC 3339 JSON. Formatting itself is `stdx`'s
//! (`stdx::time`, `stdx::duration`); this file only adapts the wire's `i64` to `Duration`.
//!
//! Invariant: pure functions of their arguments, except [`now_rfc3339`], which reads the
//! system clock.

use std::time::Duration;

/// Now as Go renders a UTC `time.Time` in JSON (RFC 3339, fraction trimmed).
pub(crate) fn now_rfc3339() -> String {
    stdx::time::format_rfc3339_nanos(stdx::time::unix_now_nanos())
}

/// A `Duration` as wire nanoseconds, saturating.
pub(crate) fn nanos_of(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Wire nanoseconds as a `Duration` (negative is zero).
pub(crate) fn duration_of(nanos: i64) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_nanos_saturate_and_clamp_negatives_to_zero() {
        assert_eq!(nanos_of(Duration::from_millis(1500)), 1_500_000_000);
        assert_eq!(nanos_of(Duration::MAX), i64::MAX);
        assert_eq!(duration_of(-5), Duration::ZERO);
        assert_eq!(duration_of(2_000_000_000), Duration::from_secs(2));
    }
}
