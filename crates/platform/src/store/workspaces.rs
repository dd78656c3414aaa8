//! Stored workspaces (see `store/mod.rs` for the layout).
//!
//! ```text
//! platform/workspaces/<ws-id>                          WorkspaceRecord
//! platform/workspace-names/<org>/<name lowercased>     IdRef → workspace (unique per organization)
//! ```
//!
//! Invariants: the name index and the record are written and removed in one transaction; a
//! name is unique in its organization ignoring case; the record carries the queue state the
//! run state machine needs (`active_run_id`: the run holding the workspace) so creating a run
//! reads one record; every write that depends on a read compares the record's mod revision.
//! Deleting a workspace removes its configuration versions and runs too
//! ([`delete_workspace_ops`]); their blobs are removed afterwards by the caller.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use storage::{Compare, KeyRange, Op, Storage};

use crate::Error;
use crate::store::{IdRef, PREFIX, Stored, configuration_versions, load, runs};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WorkspaceRecord {
    pub(crate) version: u32,
    pub(crate) id: String,
    pub(crate) organization: String,
    pub(crate) name: String,
    /// The settable attributes by wire name (`auto-apply`, `description`, ...); the table of
    /// names, types and defaults is `views::workspaces::SETTINGS`.
    pub(crate) settings: BTreeMap<String, Value>,
    #[serde(default)]
    pub(crate) lock: Option<LockRecord>,
    #[serde(default)]
    pub(crate) current_configuration_version_id: Option<String>,
    /// The newest run that left `pending` (TFE's "current run").
    #[serde(default)]
    pub(crate) current_run_id: Option<String>,
    /// The newest run created.
    #[serde(default)]
    pub(crate) latest_run_id: Option<String>,
    /// The non-speculative run past `pending` and not final, if any: it holds the workspace.
    #[serde(default)]
    pub(crate) active_run_id: Option<String>,
    pub(crate) created_at_ms: u64,
    pub(crate) updated_at_ms: u64,
}

/// Who locked a workspace, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LockRecord {
    pub(crate) holder: LockHolder,
    pub(crate) reason: String,
    pub(crate) locked_at_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum LockHolder {
    User { id: String, name: String },
    Team { id: String, name: String },
    Organization { name: String },
}

pub(crate) fn workspace_key(id: &str) -> Vec<u8> {
    format!("{PREFIX}workspaces/{id}").into_bytes()
}

/// Every workspace record (the metrics endpoint counts them).
pub(crate) fn workspaces_prefix() -> String {
    format!("{PREFIX}workspaces/")
}

pub(crate) fn names_prefix(organization: &str) -> String {
    format!("{PREFIX}workspace-names/{organization}/")
}

pub(crate) fn name_key(organization: &str, name: &str) -> Vec<u8> {
    format!("{}{}", names_prefix(organization), name.to_lowercase()).into_bytes()
}

pub(crate) async fn load_workspace(
    storage: &dyn Storage,
    id: &str,
) -> Result<Option<Stored<WorkspaceRecord>>, Error> {
    load(storage, &workspace_key(id)).await
}

pub(crate) async fn load_workspace_by_name(
    storage: &dyn Storage,
    organization: &str,
    name: &str,
) -> Result<Option<Stored<WorkspaceRecord>>, Error> {
    match load::<IdRef>(storage, &name_key(organization, name)).await? {
        Some(index) => Ok(load_workspace(storage, &index.record.id)
            .await?
            .filter(|stored| stored.record.organization == organization)),
        None => Ok(None),
    }
}

/// The ids of an organization's workspaces, in name order (case-insensitive).
pub(crate) async fn load_workspace_ids(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<(String, String)>, Error> {
    let prefix = names_prefix(organization);
    let scan = storage
        .scan(KeyRange::prefix(prefix.as_str()), None)
        .await?;
    scan.kvs
        .iter()
        .map(|kv| {
            let index: IdRef = super::decode(&kv.key, &kv.value)?;
            let name = String::from_utf8_lossy(&kv.key[prefix.len()..]).into_owned();
            Ok((name, index.id))
        })
        .collect()
}

/// The compares and ops that create `workspace` with its name index.
pub(crate) fn create_workspace_ops(
    workspace: &WorkspaceRecord,
) -> Result<(Vec<Compare>, Vec<Op>), Error> {
    let name_key = name_key(&workspace.organization, &workspace.name);
    Ok((
        vec![
            Compare::Missing(workspace_key(&workspace.id)),
            Compare::Missing(name_key.clone()),
        ],
        vec![
            super::put(workspace_key(&workspace.id), workspace)?,
            super::put(name_key, &IdRef::new(&workspace.id))?,
        ],
    ))
}

/// The compares and ops that replace `before` (read at `revision`) with `after`, moving the
/// name index when the name changed.
pub(crate) fn update_workspace_ops(
    before: &Stored<WorkspaceRecord>,
    after: &WorkspaceRecord,
) -> Result<(Vec<Compare>, Vec<Op>), Error> {
    let mut compares = vec![Compare::ModRevision(
        workspace_key(&after.id),
        before.revision,
    )];
    let mut ops = vec![super::put(workspace_key(&after.id), after)?];
    let old_name = name_key(&before.record.organization, &before.record.name);
    let new_name = name_key(&after.organization, &after.name);
    if old_name != new_name {
        compares.push(Compare::Missing(new_name.clone()));
        ops.push(super::delete(old_name));
        ops.push(super::put(new_name, &IdRef::new(&after.id))?);
    }
    Ok((compares, ops))
}

/// Every delete that removing `workspace` needs: the record, its name index, and its
/// configuration versions and runs with their indexes.
pub(crate) async fn delete_workspace_ops(
    storage: &dyn Storage,
    workspace: &WorkspaceRecord,
) -> Result<Vec<Op>, Error> {
    let mut ops = vec![
        super::delete(workspace_key(&workspace.id)),
        super::delete(name_key(&workspace.organization, &workspace.name)),
    ];
    ops.extend(configuration_versions::delete_workspace_cvs_ops(storage, &workspace.id).await?);
    ops.extend(runs::delete_workspace_runs_ops(storage, &workspace.id).await?);
    Ok(ops)
}

/// Every delete that removing organization `organization` needs for its workspaces.
pub(crate) async fn delete_organization_workspaces_ops(
    storage: &dyn Storage,
    organization: &str,
) -> Result<Vec<Op>, Error> {
    let mut ops = Vec::new();
    for (_, id) in load_workspace_ids(storage, organization).await? {
        if let Some(workspace) = load_workspace(storage, &id).await? {
            ops.extend(delete_workspace_ops(storage, &workspace.record).await?);
        }
    }
    ops.push(Op::DeleteRange(KeyRange::prefix(
        names_prefix(organization).as_str(),
    )));
    Ok(ops)
}
