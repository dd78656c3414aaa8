//! Pure helpers every cairn crate may use (the role `stdx` plays in rust-analyzer).
//!
//! Most of cairn's upstreams are written in Go, and their wire formats carry Go's spellings:
//! durations as `time.Duration.String()` writes them, booleans as `strconv.ParseBool` reads
//! them, timestamps as `time.Time` marshals them. Each lives here once:
//!
//! - [`duration`]: Go duration strings, parsed and formatted.
//! - [`time`]: civil dates, RFC 3339 formatting and parsing, the system time.
//! - [`clock`]: the injectable clock (system or manual) for stored deadlines.
//! - [`strconv`]: Go's `strconv.ParseBool`.
//! - [`hex`]: lowercase hex encoding and decoding.
//! - [`glob`]: `*` globs as ryanuber/go-glob matches them.
//! - [`hash`]: FNV-1a 64, stable across processes.
//! - [`multierror`]: several errors in one message, as go-multierror renders them.
//! - [`keyed_lock`]: async locks per key, for read-then-compare-and-swap writers of one process.
//!
//! Where it sits: below every other crate; it depends on nothing of ours and on no HTTP crate.
//!
//! Invariants: every function is total (no panic on any input); formatting and parsing match
//! Go's byte for byte, and each module's tests pin the Go outputs they follow.

pub mod clock;
pub mod duration;
pub mod glob;
pub mod hash;
pub mod hex;
pub mod keyed_lock;
pub mod multierror;
pub mod strconv;
pub mod time;
