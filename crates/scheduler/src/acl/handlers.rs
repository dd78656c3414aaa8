//! (placeholder: being written)

pub(crate) async fn bootstrap() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn list_policies() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_policy() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn write_policy() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn delete_policy() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn list_tokens() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn create_token() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_self_token() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn read_token() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn update_token() -> crate::Error {
    crate::Error::NoRoute
}

pub(crate) async fn delete_token() -> crate::Error {
    crate::Error::NoRoute
}

