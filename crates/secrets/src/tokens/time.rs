//! Time for the token store and identity: wall-clock milliseconds plus an offset tests can
//! advance (the injectable `now()`), and RFC 3339 rendering for Vault's time fields.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A clock: the system time plus an offset (zero outside tests).
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: AtomicI64,
}

impl Clock {
    /// Milliseconds since the Unix epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        system_now_ms() + self.offset_ms.load(Ordering::Relaxed)
    }

    /// Moves this clock forward (tests).
    #[cfg(test)]
    pub(crate) fn advance(&self, by: std::time::Duration) {
        self.offset_ms
            .fetch_add(by.as_millis() as i64, Ordering::Relaxed);
    }
}

pub(crate) fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// `2024-05-01T12:00:00.123Z` (RFC 3339 with milliseconds, UTC), as Go renders `time.Time`.
pub(crate) fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days → (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_renders_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_700_000_000_000), "2023-11-14T22:13:20.000Z");
    }

    #[test]
    fn clock_advances_by_the_injected_offset() {
        let clock = Clock::default();
        let before = clock.now_ms();
        clock.advance(std::time::Duration::from_secs(10));
        assert!(clock.now_ms() - before >= 10_000);
    }
}
