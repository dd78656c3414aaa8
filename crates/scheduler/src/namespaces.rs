//! (placeholder: being written)

pub(crate) async fn list() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn write() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn write_named() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn delete() -> crate::Error {
    crate::Error::NoRoute
}

