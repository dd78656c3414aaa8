//! The record of a mount's last tidy run, which `tidy-status` answers: kept in memory by the
//! mount (`mount.rs`) as Vault keeps it, written by `tidy.rs`.
//!
//! Where it sits: a leaf, so the mount can hold it without depending on the tidy handler.
//!
//! Invariant: plain data; `tidy.rs` alone decides what it says.

/// The last tidy run, kept in memory as Vault keeps it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TidyStatus {
    pub(crate) state: String,
    pub(crate) error: Option<String>,
    pub(crate) safety_buffer: u64,
    pub(crate) tidy_cert_store: bool,
    pub(crate) tidy_revoked_certs: bool,
    pub(crate) time_started: Option<i64>,
    pub(crate) time_finished: Option<i64>,
    pub(crate) cert_store_deleted_count: u64,
    pub(crate) revoked_cert_deleted_count: u64,
    pub(crate) current_cert_store_count: u64,
    pub(crate) current_revoked_cert_count: u64,
}
