//! Stored records and keys of the registry's kv family (see `store/mod.rs` for the layout).
