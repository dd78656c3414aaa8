//! Go duration strings for http-kit's callers: a shim over `stdx::duration::parse_go`, kept
//! while the services move to stdx directly.
//!
//! Invariant: the error text is `stdx`'s (`invalid duration "x": reason`).

use std::time::Duration;

/// Parses a non-negative Go duration (see `stdx::duration::parse_go`).
pub fn parse_go_duration(input: &str) -> Result<Duration, String> {
    stdx::duration::parse_go(input).map_err(|err| err.to_string())
}
