//! Placeholder for `engines`; its engineer writes it.
