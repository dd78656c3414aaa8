//! Wall-clock time as the scheduler records it (Unix nanoseconds, as Nomad's JSON carries):
//! `stdx::time::unix_now_nanos`, under the name the scheduler's call sites use.

pub(crate) use stdx::time::unix_now_nanos as now_nanos;
