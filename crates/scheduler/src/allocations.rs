//! (placeholder: being written)

pub(crate) async fn list() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn stop() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn list_evaluations() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_evaluation() -> crate::Error {
    crate::Error::NoRoute
}

