//! Engine errors and what they mean to a client.
//!
//! Invariant: only [`EngineError::Internal`] and [`EngineError::Storage`] become 5xx; every
//! other variant is the client's fault or a plain "no".

/// Why an engine refused or failed a request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    /// Bad input: 400 with this message, as Vault's `logical.ErrorResponse`.
    #[error("{0}")]
    BadRequest(String),
    /// The path is not one the engine serves: 404 `unsupported path`.
    #[error("unsupported path")]
    UnsupportedPath,
    /// The path exists but not for this operation: 405 `unsupported operation`.
    #[error("unsupported operation")]
    UnsupportedOperation,
    /// 403 `permission denied` (for checks an engine makes itself).
    #[error("permission denied")]
    PermissionDenied,
    /// A conflict, such as a check-out of a borrowed account: 409... or 400 per endpoint.
    #[error("{0}")]
    Conflict(String),
    /// A fault on the server side (a remote system failed): 500, message logged not shown.
    #[error("{0}")]
    Internal(String),
    /// Storage failed: 500.
    #[error("storage: {0}")]
    Storage(String),
    /// The store was sealed while the request ran: 503 `Vault is sealed`.
    #[error("Vault is sealed")]
    Sealed,
}

impl From<crate::StorageError> for EngineError {
    fn from(err: crate::StorageError) -> EngineError {
        match err {
            crate::StorageError::Sealed => EngineError::Sealed,
            crate::StorageError::Backend(message) => EngineError::Storage(message),
        }
    }
}
