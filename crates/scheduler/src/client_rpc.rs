//! (placeholder: being written)

pub(crate) async fn register() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn heartbeat() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn allocations() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn update_allocations() -> crate::Error {
    crate::Error::NoRoute
}

