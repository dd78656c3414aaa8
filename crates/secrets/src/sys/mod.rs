//! System endpoints (`/v1/sys/*`), one file per URL family.

pub(crate) mod health;
