//! `/v1/catalog/*` endpoints: register and deregister nodes, services and checks
//! (`writes.rs`, with its bodies in `body.rs`); list and read nodes, services and the instances
//! of a service (`reads.rs`).

mod body;
pub(crate) mod reads;
pub(crate) mod writes;
