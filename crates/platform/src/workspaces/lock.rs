//! The lock actions: `POST /api/v2/workspaces/:id/actions/{lock,unlock,force-unlock}`.
//!
//! Where it sits: called from `routes.rs`; writes the workspace record through
//! `store/workspaces.rs`; unlocking may start the oldest pending run (`run_queue.rs`) in
//! the same transaction.
//!
//! Invariants: one holder; only the holder unlocks (409 "... is locked by User alice.");
//! force-unlock needs `manage-workspaces`; a lock on a locked workspace and an unlock of an
//! unlocked one are 409 with TFE's wording.

use axum::extract::{Path, State as AxumState};
use jsonapi::Document;
use serde_json::Value;
use storage::Txn;

use crate::auth::{Caller, OrgAccess, Subject, load_visible_workspace};
use crate::render::JsonApi;
use crate::run_queue::promote_ops;
use crate::store::workspaces::{LockHolder, LockRecord, load_workspace, update_workspace_ops};
use crate::store::{MAX_ATTEMPTS, commit};
use crate::views::workspaces::workspace_resource;
use crate::{Error, State};

/// Who the caller is, as a lock holder.
fn holder(caller: &Caller) -> LockHolder {
    match &caller.subject {
        Subject::User(user) => LockHolder::User {
            id: user.id.clone(),
            name: user.username.clone().unwrap_or_else(|| user.email.clone()),
        },
        Subject::Team(team) => LockHolder::Team {
            id: team.id.clone(),
            name: team.name.clone(),
        },
        Subject::Organization(name) => LockHolder::Organization { name: name.clone() },
    }
}

fn describe(holder: &LockHolder) -> String {
    match holder {
        LockHolder::User { name, .. } => format!("User {name}"),
        LockHolder::Team { name, .. } => format!("Team {name}"),
        LockHolder::Organization { name } => format!("Organization {name}"),
    }
}

/// The three lock actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockAction {
    Lock,
    Unlock,
    ForceUnlock,
}

/// `POST /api/v2/workspaces/:id/actions/lock` with `{"reason": "..."}`: 200 with the
/// workspace; 409 "Unable to lock workspace. The workspace is already locked."
pub(crate) async fn lock_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    http_kit::ApiJson { value: body, .. }: http_kit::ApiJson<Value, Error>,
) -> Result<JsonApi, Error> {
    let reason = match body.get("reason") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(reason)) => reason.clone(),
        Some(_) => return Err(Error::invalid("/reason", "reason must be a string")),
    };
    change_lock(&state, &caller, &id, LockAction::Lock, reason).await
}

/// `POST /api/v2/workspaces/:id/actions/unlock`: 200; 409 when not locked or locked by
/// someone else ("... is locked by User alice.").
pub(crate) async fn unlock_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    change_lock(&state, &caller, &id, LockAction::Unlock, String::new()).await
}

/// `POST /api/v2/workspaces/:id/actions/force-unlock`: 200; 409 when not locked.
pub(crate) async fn force_unlock_workspace(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    change_lock(&state, &caller, &id, LockAction::ForceUnlock, String::new()).await
}

async fn change_lock(
    state: &State,
    caller: &Caller,
    id: &str,
    action: LockAction,
    reason: String,
) -> Result<JsonApi, Error> {
    let (_, access) = load_visible_workspace(state, caller, id).await?;
    OrgAccess::check(access.can_manage_workspaces())?;
    let me = holder(caller);
    for _ in 0..MAX_ATTEMPTS {
        let before = load_workspace(state.storage(), id)
            .await?
            .ok_or(Error::NotFound)?;
        let mut after = before.record.clone();
        match (action, &before.record.lock) {
            (LockAction::Lock, Some(_)) => {
                return Err(Error::Conflict(
                    "Unable to lock workspace. The workspace is already locked.".to_owned(),
                ));
            }
            (LockAction::Lock, None) => {
                after.lock = Some(LockRecord {
                    holder: me.clone(),
                    reason: reason.clone(),
                    locked_at_ms: state.now_ms(),
                });
            }
            (LockAction::Unlock | LockAction::ForceUnlock, None) => {
                return Err(Error::Conflict(
                    "Unable to unlock workspace. The workspace is not locked.".to_owned(),
                ));
            }
            (LockAction::Unlock, Some(lock)) if lock.holder != me => {
                return Err(Error::Conflict(format!(
                    "Unable to unlock workspace. The workspace is locked by {}.",
                    describe(&lock.holder)
                )));
            }
            (LockAction::Unlock | LockAction::ForceUnlock, Some(_)) => after.lock = None,
        }
        after.updated_at_ms = state.now_ms();
        // Unlocking may let the oldest pending run start.
        let run_ops = if after.lock.is_none() {
            promote_ops(state, &mut after, None).await?
        } else {
            Vec::new()
        };
        let (compares, mut ops) = update_workspace_ops(&before, &after)?;
        ops.extend(run_ops);
        let txn = Txn {
            compares,
            success: ops,
            failure: Vec::new(),
        };
        if commit(state.storage(), txn).await? {
            return Ok(JsonApi::ok(Document::one(workspace_resource(
                &after, caller, &access,
            ))));
        }
    }
    Err(Error::Contention)
}
