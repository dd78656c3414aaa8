//! Placeholder for `userpass`; its engineer writes it.
