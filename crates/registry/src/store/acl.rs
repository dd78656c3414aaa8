//! Stored records and keys of the registry's acl family (see `store/mod.rs` for the layout).
