//! Wall-clock time as the scheduler records it (Unix nanoseconds, as Nomad's JSON carries).

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix nanoseconds.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX)
        })
}
