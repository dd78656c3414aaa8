//! The agent's persistent state under its data dir, so that a restarted agent is the same node
//! and re-attaches to the tasks it left running.
//!
//! Layout:
//! - `client/node.json`: the node's ID and SecretID, generated once;
//! - `client/allocs/<alloc_id>/state.json`: an [`AllocRecord`] (the allocation as last received,
//!   the task states as last reported, and per task the pid and start time of its process);
//! - `client/allocs/<alloc_id>/<task>.exit`: the exit file of the task's current process (see
//!   `driver::raw_exec`);
//! - `client/schedule_overrides.json`: the pause overrides in force, as `[alloc, task,
//!   "pause" | "run"]` triples (see `runtime.rs`);
//! - `alloc/<alloc_id>/`: the allocation directory tasks see (`alloc/{logs,tmp,data}`,
//!   `<task>/{local,secrets,tmp}`).
//!
//! Invariants: every file is written whole or not at all (write a temporary file, fsync,
//! rename); alloc IDs and task names are checked to be plain path components before they name
//! anything on disk, so bad server data cannot escape the data dir.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use scheduler_structs::{Allocation, TaskState};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The node's identity, stable across agent restarts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NodeIdentity {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    #[serde(rename = "SecretID")]
    pub(crate) secret_id: String,
}

/// What the agent keeps about one allocation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct AllocRecord {
    /// The allocation (with its job) as last received from the server.
    pub(crate) alloc: Allocation,
    pub(crate) client_status: String,
    pub(crate) client_description: String,
    pub(crate) tasks: BTreeMap<String, TaskRecord>,
}

/// One task's reported state and the agent-local facts needed to re-attach.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TaskRecord {
    pub(crate) state: TaskState,
    pub(crate) local: TaskLocal,
}

/// Agent-local task facts (never reported).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TaskLocal {
    /// The running process: the wrapper's pid and `/proc` start time.
    pub(crate) pid: Option<i32>,
    pub(crate) start_time: Option<u64>,
    /// Whether the task directory was built (the `Task Setup` event was emitted).
    pub(crate) dir_built: bool,
}

/// Paths of one task's directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskDirs {
    /// `alloc/<id>/<task>`: the process's cwd.
    pub(crate) task_dir: PathBuf,
    pub(crate) local: PathBuf,
    pub(crate) secrets: PathBuf,
    pub(crate) tmp: PathBuf,
    /// `alloc/<id>/alloc`, shared by the group's tasks.
    pub(crate) shared: PathBuf,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) exit_file: PathBuf,
}

/// The data dir.
#[derive(Debug, Clone)]
pub(crate) struct StateDir {
    root: PathBuf,
}

impl StateDir {
    pub(crate) fn new(root: PathBuf) -> StateDir {
        StateDir { root }
    }

    fn client_dir(&self) -> PathBuf {
        self.root.join("client")
    }

    fn allocs_state_dir(&self) -> PathBuf {
        self.client_dir().join("allocs")
    }

    fn alloc_state_dir(&self, alloc_id: &str) -> PathBuf {
        self.allocs_state_dir().join(alloc_id)
    }

    /// `alloc/<id>`.
    pub(crate) fn alloc_dir(&self, alloc_id: &str) -> PathBuf {
        self.root.join("alloc").join(alloc_id)
    }

    /// Creates the data dir's skeleton.
    pub(crate) fn init(&self) -> std::io::Result<()> {
        fs::create_dir_all(self.allocs_state_dir())?;
        fs::create_dir_all(self.root.join("alloc"))
    }

    /// Loads the node identity, creating (and persisting) a fresh one the first time.
    pub(crate) fn node_identity(&self) -> std::io::Result<NodeIdentity> {
        let path = self.client_dir().join("node.json");
        if let Some(identity) = read_json::<NodeIdentity>(&path)?
            && !identity.id.is_empty()
            && !identity.secret_id.is_empty()
        {
            return Ok(identity);
        }
        let identity = NodeIdentity {
            id: uuid::Uuid::new_v4().to_string(),
            secret_id: uuid::Uuid::new_v4().to_string(),
        };
        write_json(&path, &identity)?;
        Ok(identity)
    }

    /// The IDs of allocations with a state file.
    pub(crate) fn alloc_ids(&self) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.allocs_state_dir()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .filter(|name| is_safe_component(name))
            .collect()
    }

    pub(crate) fn load_alloc(&self, alloc_id: &str) -> Option<AllocRecord> {
        if !is_safe_component(alloc_id) {
            return None;
        }
        let path = self.alloc_state_dir(alloc_id).join("state.json");
        match read_json(&path) {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(alloc_id, %error, "unreadable allocation state; ignoring it");
                None
            }
        }
    }

    pub(crate) fn save_alloc(&self, record: &AllocRecord) -> std::io::Result<()> {
        let id = &record.alloc.id;
        if !is_safe_component(id) {
            return Err(std::io::Error::other(format!(
                "unsafe allocation id {id:?}"
            )));
        }
        write_json(&self.alloc_state_dir(id).join("state.json"), record)
    }

    /// Removes an allocation's state and its allocation directory.
    pub(crate) fn remove_alloc(&self, alloc_id: &str) {
        if !is_safe_component(alloc_id) {
            return;
        }
        for dir in [self.alloc_state_dir(alloc_id), self.alloc_dir(alloc_id)] {
            if let Err(error) = fs::remove_dir_all(&dir)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %dir.display(), %error, "cannot remove allocation files");
            }
        }
    }

    /// The schedule pause overrides in force (`[alloc, task, "pause" | "run"]`); none when
    /// the file is missing or unreadable.
    pub(crate) fn load_overrides(&self) -> Vec<(String, String, String)> {
        let path = self.client_dir().join("schedule_overrides.json");
        read_json(&path).ok().flatten().unwrap_or_default()
    }

    pub(crate) fn save_overrides(
        &self,
        overrides: &[(String, String, String)],
    ) -> std::io::Result<()> {
        write_json(
            &self.client_dir().join("schedule_overrides.json"),
            &overrides,
        )
    }

    /// The directories of `task` in `alloc_id` (not created).
    pub(crate) fn task_dirs(&self, alloc_id: &str, task: &str) -> TaskDirs {
        let alloc_dir = self.alloc_dir(alloc_id);
        let task_dir = alloc_dir.join(task);
        let shared = alloc_dir.join("alloc");
        let logs = shared.join("logs");
        TaskDirs {
            local: task_dir.join("local"),
            secrets: task_dir.join("secrets"),
            tmp: task_dir.join("tmp"),
            stdout: logs.join(format!("{task}.stdout.0")),
            stderr: logs.join(format!("{task}.stderr.0")),
            exit_file: self.alloc_state_dir(alloc_id).join(format!("{task}.exit")),
            task_dir,
            shared,
        }
    }
}

impl TaskDirs {
    /// Creates the shared and the task's directories (`secrets/` mode 0700).
    pub(crate) fn build(&self) -> std::io::Result<()> {
        for dir in ["logs", "tmp", "data"] {
            fs::create_dir_all(self.shared.join(dir))?;
        }
        fs::create_dir_all(&self.local)?;
        fs::create_dir_all(&self.tmp)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.secrets)?;
        fs::set_permissions(&self.secrets, fs::Permissions::from_mode(0o700))?;
        if let Some(parent) = self.exit_file.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(())
    }
}

/// Whether `name` can name a file or directory: non-empty, not `.`/`..`, no `/` or NUL.
pub(crate) fn is_safe_component(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\0'])
        && name.len() <= 200
}

fn read_json<T: DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|error| std::io::Error::other(format!("{}: {error}", path.display()))),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Writes `value` as JSON to `path` atomically: temporary file, fsync, rename.
fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let parent = path
        .parent()
        .ok_or_else(|| std::io::Error::other("state path without a parent"))?;
    fs::create_dir_all(parent)?;
    let tmp = path.with_extension("json.tmp");
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_identity_is_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        state.init().unwrap();
        let first = state.node_identity().unwrap();
        let second = StateDir::new(dir.path().to_path_buf())
            .node_identity()
            .unwrap();
        assert_eq!(first, second);
        assert_ne!(first.id, first.secret_id);
    }

    #[test]
    fn alloc_records_round_trip_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        state.init().unwrap();
        let mut record = AllocRecord::default();
        record.alloc.id = "a1".to_owned();
        record.client_status = "running".to_owned();
        record.tasks.insert(
            "web".to_owned(),
            TaskRecord {
                state: TaskState {
                    state: "running".to_owned(),
                    ..TaskState::default()
                },
                local: TaskLocal {
                    pid: Some(42),
                    start_time: Some(7),
                    dir_built: true,
                },
            },
        );
        state.save_alloc(&record).unwrap();
        assert_eq!(state.alloc_ids(), vec!["a1".to_owned()]);
        assert_eq!(state.load_alloc("a1"), Some(record));
        let dirs = state.task_dirs("a1", "web");
        dirs.build().unwrap();
        let mode = fs::metadata(&dirs.secrets).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(dirs.shared.join("logs").is_dir());
        state.remove_alloc("a1");
        assert!(state.alloc_ids().is_empty());
        assert!(!state.alloc_dir("a1").exists());
    }

    #[test]
    fn unsafe_names_are_refused() {
        assert!(!is_safe_component(".."));
        assert!(!is_safe_component("a/b"));
        assert!(!is_safe_component(""));
        assert!(is_safe_component("5f1c9a2e-0000-4000-8000-000000000000"));
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        assert_eq!(state.load_alloc("../x"), None);
        let mut record = AllocRecord::default();
        record.alloc.id = "../../etc".to_owned();
        assert!(state.save_alloc(&record).is_err());
    }

    #[test]
    fn a_corrupt_state_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        state.init().unwrap();
        let path = dir.path().join("client/allocs/bad");
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("state.json"), b"{not json").unwrap();
        assert_eq!(state.load_alloc("bad"), None);
    }
}
