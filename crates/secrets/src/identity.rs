//! Placeholder for `identity`; its engineer writes it.
