//! (placeholder: being written)

pub(crate) async fn list() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn allocations() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn list_pools() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_pool() -> crate::Error {
    crate::Error::NoRoute
}

