//! The handle map through which the client's allocation endpoints (signal, restart, and later
//! exec) reach running tasks: allocation ID → task name → the task runner's command channel.
//!
//! Invariants: an allocation is present exactly while its alloc runner runs; every operation is
//! answered by the task runner itself (which emits the task event and acts on its process), so
//! a caller never races the runner's own state machine. Error texts are upstream's
//! (`Unknown allocation "<id>"`, `Task not found`, `Task not running`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use scheduler_structs::TaskEvent;

use crate::events;

/// `RestartReason` of a user restart of one task.
pub const REASON_RESTART_TASK: &str = "User requested task to restart";
/// `RestartReason` of a user restart of every running task.
pub const REASON_RESTART_RUNNING: &str = "User requested running tasks to restart";

/// What the alloc runner (or a control endpoint) asks of a task runner.
#[derive(Debug)]
pub(crate) enum TaskCommand {
    /// Kill the task for good, first emitting `events` (e.g. `Sibling Task Failed`, `Killing`).
    Kill { events: Vec<TaskEvent> },
    /// Send a signal to the running process.
    Signal {
        signal: String,
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
    /// Restart the running process in place, emitting `event` first.
    Restart {
        event: Box<TaskEvent>,
        reply: oneshot::Sender<Result<(), ControlError>>,
    },
}

/// Why a control operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// No such allocation runs on this client (the endpoint's 404).
    #[error("Unknown allocation {0:?}")]
    UnknownAllocation(String),
    #[error("Task not found")]
    UnknownTask,
    #[error("Task not running")]
    NotRunning,
    #[error("{0}")]
    Failed(String),
}

/// Cloneable access to the running allocations' tasks.
#[derive(Debug, Clone, Default)]
pub struct AllocControls {
    inner: Arc<Mutex<HashMap<String, AllocTasks>>>,
}

type AllocTasks = BTreeMap<String, mpsc::UnboundedSender<TaskCommand>>;

impl AllocControls {
    /// IDs of the allocations with a live runner.
    pub fn allocations(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Sends `signal` (a name like `SIGHUP`; unknown names become SIGINT, as upstream's
    /// raw_exec does) to one task, or to every task when `task` is `None`.
    pub async fn signal(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), ControlError> {
        let targets = self.targets(alloc_id, task)?;
        let mut first_error = None;
        for (name, sender) in targets {
            let (reply, answer) = oneshot::channel();
            let command = TaskCommand::Signal {
                signal: signal.to_owned(),
                reply,
            };
            let result = ask(&sender, command, answer).await;
            if let Err(error) = result {
                if task.is_some() {
                    return Err(error);
                }
                first_error.get_or_insert(ControlError::Failed(format!(
                    "Failed to signal task: {name}, err: {error}"
                )));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Restarts one running task in place, or every running task when `task` is `None`
    /// (tasks not running are skipped). Not counted against the restart policy. Returns once
    /// the old process is gone.
    pub async fn restart(&self, alloc_id: &str, task: Option<&str>) -> Result<(), ControlError> {
        let targets = self.targets(alloc_id, task)?;
        let reason = if task.is_some() {
            REASON_RESTART_TASK
        } else {
            REASON_RESTART_RUNNING
        };
        for (name, sender) in targets {
            let (reply, answer) = oneshot::channel();
            let command = TaskCommand::Restart {
                event: Box::new(events::restart_signaled(reason)),
                reply,
            };
            match ask(&sender, command, answer).await {
                Ok(()) => {}
                Err(ControlError::NotRunning) if task.is_none() => {}
                Err(error) if task.is_none() => {
                    return Err(ControlError::Failed(format!(
                        "failed to restart task {name}: {error}"
                    )));
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    pub(crate) fn insert(&self, alloc_id: &str, tasks: AllocTasks) {
        self.lock().insert(alloc_id.to_owned(), tasks);
    }

    pub(crate) fn remove(&self, alloc_id: &str) {
        self.lock().remove(alloc_id);
    }

    fn targets(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Result<Vec<(String, mpsc::UnboundedSender<TaskCommand>)>, ControlError> {
        let guard = self.lock();
        let tasks = guard
            .get(alloc_id)
            .ok_or_else(|| ControlError::UnknownAllocation(alloc_id.to_owned()))?;
        match task {
            Some(name) => tasks
                .get(name)
                .map(|sender| vec![(name.to_owned(), sender.clone())])
                .ok_or(ControlError::UnknownTask),
            None => Ok(tasks
                .iter()
                .map(|(name, sender)| (name.clone(), sender.clone()))
                .collect()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, AllocTasks>> {
        // The map holds plain data; a panic elsewhere cannot leave it half-updated.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

async fn ask(
    sender: &mpsc::UnboundedSender<TaskCommand>,
    command: TaskCommand,
    answer: oneshot::Receiver<Result<(), ControlError>>,
) -> Result<(), ControlError> {
    if sender.send(command).is_err() {
        return Err(ControlError::NotRunning);
    }
    answer.await.unwrap_or(Err(ControlError::NotRunning))
}
