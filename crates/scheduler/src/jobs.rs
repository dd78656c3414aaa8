//! (placeholder: being written)

pub(crate) async fn list() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn register() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn parse() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn register_at() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn deregister() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn submission() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn versions() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn allocations() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn evaluations() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn summary() -> crate::Error {
    crate::Error::NoRoute
}

