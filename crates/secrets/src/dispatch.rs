//! Placeholder for `dispatch`; its engineer writes it.
