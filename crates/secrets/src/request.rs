//! Placeholder for `request`; its engineer writes it.
