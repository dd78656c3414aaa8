//! Stored records and keys of the registry's sessions family (see `store/mod.rs` for the layout).
