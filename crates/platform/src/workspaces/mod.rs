//! Workspaces: create, list, read, update, delete (by organization and name, and by id),
//! safe-delete, and the lock, unlock and force-unlock actions.
//!
//! Where it sits: handlers called from `routes.rs` live in `handlers.rs` (CRUD) and `lock.rs`
//! (lock actions); the `workspaces` resource and the settable-attribute table are
//! `views/workspaces.rs`; access through `auth.rs` (read: `read-workspaces`, also
//! [`crate::auth::load_visible_workspace`] for every workspace-scoped family; write and lock:
//! `manage-workspaces`); records in `store/workspaces.rs`.
//!
//! Invariants:
//! - Names are `[A-Za-z0-9_-]`, at most 90 characters, unique per organization ignoring case;
//!   a rename moves the name index in the same transaction.
//! - Settable attributes are exactly the `views::workspaces::SETTINGS` table: each has a type and a
//!   default, a wrongly typed value is a 422 pointing at it, unknown attributes are ignored
//!   (pytfe sends `type` and `setting-overwrites` among the attributes); a non-empty
//!   `vcs-repo` is a 422 (no VCS integration).
//! - The representation is the same in create, read, list and update answers.
//! - A lock has one holder (a user, a team, or the organization token); only the holder
//!   unlocks; force-unlock needs `manage-workspaces`; conflicts are 409 with TFE's wording,
//!   which go-tfe matches ("is locked by User", ...).

mod handlers;
mod lock;

pub(crate) use handlers::{
    create_workspace, delete_workspace, delete_workspace_by_id, list_workspaces, read_workspace,
    read_workspace_by_id, safe_delete_workspace, safe_delete_workspace_by_id, update_workspace,
    update_workspace_by_id,
};
pub(crate) use lock::{force_unlock_workspace, lock_workspace, unlock_workspace};
