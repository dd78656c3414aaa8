//! Go's `strconv.ParseBool` for http-kit's callers: a re-export of `stdx::strconv::parse_bool`,
//! kept while the services move to stdx directly.

pub use stdx::strconv::parse_bool;
