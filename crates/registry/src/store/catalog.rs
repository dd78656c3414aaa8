//! Stored records and keys of the registry's catalog family (see `store/mod.rs` for the layout).
