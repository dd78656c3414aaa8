//! The handle map through which the client's allocation endpoints (signal, restart, exec) reach
//! running tasks: allocation ID → task name → the task runner's command channel.
//!
//! Invariants: an allocation is present exactly while its alloc runner runs; every operation is
//! answered by the task runner itself (which emits the task event and acts on its process), so
//! a caller never races the runner's own state machine. Error texts are upstream's
//! (`Unknown allocation "<id>"`, `Task not found`, `Task not running`); a signal name that
//! names no signal is refused before any task sees it (`invalid signal`, a 400, where
//! upstream's raw_exec would send SIGINT).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use scheduler_structs::TaskEvent;

use crate::events;

/// `RestartReason` of a user restart of one task.
pub const REASON_RESTART_TASK: &str = "User requested task to restart";
/// `RestartReason` of a user restart of every running task.
pub const REASON_RESTART_RUNNING: &str = "User requested running tasks to restart";
/// `RestartReason` of a user restart with `AllTasks`.
pub const REASON_RESTART_ALL: &str = "User requested all tasks to restart";

/// What an exec session needs of a running task: how its process was started.
#[derive(Debug, Clone)]
pub(crate) struct ExecTarget {
    /// The task's driver (`raw_exec` or `exec`).
    pub(crate) driver: String,
    /// The task's environment.
    pub(crate) env: Vec<(String, String)>,
    /// The task directory (the process's working directory under raw_exec).
    pub(crate) task_dir: std::path::PathBuf,
    /// The task's process (its namespaces are entered under `exec`).
    pub(crate) pid: i32,
}

/// What the alloc runner (or a control endpoint) asks of a task runner.
#[derive(Debug)]
pub(crate) enum TaskCommand {
    /// Kill the task for good, first emitting `events` (e.g. `Sibling Task Failed`, `Killing`,
    /// `Waiting for shutdown delay`) and then waiting `delay` (the task's `shutdown_delay`)
    /// unless the process ends first.
    Kill {
        events: Vec<TaskEvent>,
        delay: std::time::Duration,
    },
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
    /// Describe the running process for an exec session.
    Exec {
        reply: oneshot::Sender<Result<ExecTarget, ControlError>>,
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
    /// A signal name that names no signal (a 400).
    #[error("invalid signal: {0}")]
    InvalidSignal(String),
    #[error("{0}")]
    Failed(String),
}

impl ControlError {
    /// The HTTP status the client endpoints answer with. Upstream answers an unknown
    /// allocation 404 and every other client error 500; here only a failure to act on a
    /// process is a 500: an unknown task is a 404, an invalid signal or a task that is not
    /// running a 400.
    pub fn status(&self) -> u16 {
        match self {
            ControlError::UnknownAllocation(_) | ControlError::UnknownTask => 404,
            ControlError::InvalidSignal(_) | ControlError::NotRunning => 400,
            ControlError::Failed(_) => 500,
        }
    }
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

    /// Sends `signal` (a name like `SIGHUP` or `HUP`; a name that is no signal is refused) to
    /// one task, or to every task when `task` is `None`.
    pub async fn signal(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), ControlError> {
        let targets = self.targets(alloc_id, task)?;
        if crate::driver::parse_signal(signal).is_none() {
            return Err(ControlError::InvalidSignal(signal.to_owned()));
        }
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
        self.restart_tasks(alloc_id, task, false).await
    }

    /// [`AllocControls::restart`], with `AllTasks`: `all` only changes the reason, as this
    /// client runs no lifecycle tasks that would have finished and be run again.
    pub async fn restart_tasks(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        all: bool,
    ) -> Result<(), ControlError> {
        let targets = self.targets(alloc_id, task)?;
        let reason = match (task, all) {
            (Some(_), _) => REASON_RESTART_TASK,
            (None, true) => REASON_RESTART_ALL,
            (None, false) => REASON_RESTART_RUNNING,
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

    /// Whether the allocation's runner runs (its tasks may still write logs).
    pub(crate) fn is_live(&self, alloc_id: &str) -> bool {
        self.lock().contains_key(alloc_id)
    }

    /// How a running task's process was started, for an exec session.
    pub(crate) async fn exec_target(
        &self,
        alloc_id: &str,
        task: &str,
    ) -> Result<ExecTarget, ControlError> {
        let targets = self.targets(alloc_id, Some(task))?;
        let Some((_, sender)) = targets.into_iter().next() else {
            return Err(ControlError::UnknownTask);
        };
        let (reply, answer) = oneshot::channel();
        if sender.send(TaskCommand::Exec { reply }).is_err() {
            return Err(ControlError::NotRunning);
        }
        answer.await.unwrap_or(Err(ControlError::NotRunning))
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
