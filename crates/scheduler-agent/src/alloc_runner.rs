//! The alloc runner (Nomad's `allocrunner`): runs the task runners of one allocation, persists
//! the allocation's record after every task change, derives the allocation's `ClientStatus` and
//! queues it for the server, and reacts to the server (desired stop or evict, garbage
//! collection) and to its own tasks (a task that fails for good, or a dead leader, kills its
//! siblings).
//!
//! Invariants:
//! - it is the only writer of its allocation's state file (task runners publish to it);
//! - `ClientStatus` is upstream's `getClientStatus`: failed if any task failed, else running if
//!   any runs, else pending if any is pending, else complete; once terminal, every task has a
//!   `FinishedAt`;
//! - a status is queued only when it differs from the last one queued (the first one after a
//!   restart is always queued, so a status the server missed is sent again);
//! - on agent shutdown it returns without touching the tasks' processes;
//! - a stop waits out the group's `shutdown_delay` before any task is killed, and each task's
//!   own `shutdown_delay` is waited by its runner after `Killing`; a stop with
//!   `no_shutdown_delay` skips both (the tasks say so with `Skipping shutdown delay`);
//! - every copy of the allocation it holds has this node's dynamic ports (`ports.rs`), kept
//!   until it finishes; its services (`services.rs`) follow its tasks' states and are
//!   deregistered as soon as it is being stopped, before any delay or kill.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use scheduler_structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_PENDING, ALLOC_CLIENT_RUNNING,
    AllocClientUpdate, Allocation, Job, TASK_STATE_DEAD, TASK_STATE_PENDING, TASK_STATE_RUNNING,
    TaskEvent, TaskState,
};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::Shared;
use crate::events;
use crate::handles::TaskCommand;
use crate::schedule::ScheduleGate;
use crate::services::{AllocServices, node_address};
use crate::state::{AllocRecord, TaskRecord, is_safe_component};
use crate::task_runner::{TaskContext, TaskRunner, TaskUpdate};
use crate::time::{duration_of, now_rfc3339};

/// What the allocation watcher tells a runner.
#[derive(Debug)]
pub(crate) enum AllocCommand {
    /// The server's newer copy of the allocation.
    Update(Arc<Allocation>),
    /// The server garbage-collected the allocation: kill its tasks and remove its files.
    Destroy,
}

/// How a runner ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunnerExit {
    /// Every task is dead; the final status was queued.
    Finished,
    /// Destroyed on garbage collection; its files are gone.
    Destroyed,
    /// The agent is shutting down; tasks left as they are.
    Detached,
}

/// One task as the alloc runner tracks it.
#[derive(Debug)]
struct Slot {
    commands: mpsc::UnboundedSender<TaskCommand>,
    record: TaskRecord,
    leader: bool,
    kill_timeout: Duration,
    /// The task's `shutdown_delay`.
    shutdown_delay: Duration,
    kill_sent: bool,
}

impl Slot {
    /// Sends the task its kill, once: `first` (if any), then `Killing` unless the task has
    /// already finished, then its shutdown delay's event (waited, or skipped when
    /// `skip_delay`).
    fn kill(&mut self, first: Option<TaskEvent>, skip_delay: bool) {
        if self.kill_sent || self.record.state.state == TASK_STATE_DEAD {
            return;
        }
        let mut list = Vec::new();
        list.extend(first);
        let mut delay = Duration::ZERO;
        if self.record.state.finished_at.is_none() {
            list.push(events::killing(self.kill_timeout));
            if !self.shutdown_delay.is_zero() && self.record.state.state == TASK_STATE_RUNNING {
                if skip_delay {
                    list.push(events::skipping_shutdown_delay(self.shutdown_delay));
                } else {
                    list.push(events::waiting_shutdown_delay(self.shutdown_delay));
                    delay = self.shutdown_delay;
                }
            }
        }
        self.kill_sent = true;
        let _ = self.commands.send(TaskCommand::Kill {
            events: list,
            delay,
        });
    }
}

#[derive(Debug)]
pub(crate) struct AllocRunner {
    shared: Arc<Shared>,
    alloc: Arc<Allocation>,
    record: AllocRecord,
    slots: BTreeMap<String, Slot>,
    /// Tasks are being killed (stop, sibling failure or destroy); no new kill decisions.
    killing: bool,
    destroying: bool,
    /// A stop waiting out the group's `shutdown_delay`: when it ends, the tasks are killed.
    stop_at: Option<tokio::time::Instant>,
    last_sent: Option<AllocClientUpdate>,
    /// The allocation's provider-`nomad` services (once its job is known).
    services: Option<AllocServices>,
}

impl AllocRunner {
    /// A runner for `alloc` (the server's copy), resuming `restored` when the agent had it.
    pub(crate) fn new(
        shared: Arc<Shared>,
        mut alloc: Allocation,
        restored: Option<AllocRecord>,
    ) -> AllocRunner {
        let previous = restored.as_ref().map(|record| &record.alloc);
        shared
            .ports
            .fill(&mut alloc, previous, &node_address(&shared.node));
        let record = match restored {
            Some(mut record) => {
                if alloc.job.is_none() {
                    alloc.job = record.alloc.job.take();
                }
                record.alloc = alloc.clone();
                record
            }
            None => AllocRecord {
                alloc: alloc.clone(),
                ..AllocRecord::default()
            },
        };
        AllocRunner {
            shared,
            alloc: Arc::new(alloc),
            record,
            slots: BTreeMap::new(),
            killing: false,
            destroying: false,
            stop_at: None,
            last_sent: None,
            services: None,
        }
    }

    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<AllocCommand>,
    ) -> RunnerExit {
        // Commands queued before the start (e.g. destroying an orphan) apply before any task.
        while let Ok(command) = commands.try_recv() {
            self.apply_command(command);
        }
        let job = match self.validate() {
            Ok(job) => job,
            Err(description) => return self.fail_alloc(&description),
        };
        let (updates_tx, mut updates) = mpsc::unbounded_channel();
        let mut runners = JoinSet::new();
        self.services = Some(AllocServices::new(self.shared.clone(), &self.alloc, &job));
        self.spawn_tasks(&job, &updates_tx, &mut runners);
        self.sync_services();
        drop(updates_tx);
        self.shared.controls.insert(
            &self.alloc.id,
            self.slots
                .iter()
                .map(|(name, slot)| (name.clone(), slot.commands.clone()))
                .collect(),
        );
        self.persist();
        self.report();

        let shutdown = self.shared.shutdown.clone();
        let mut detached = false;
        loop {
            let stop_at = self.stop_at;
            tokio::select! {
                () = shutdown.cancelled(), if !detached => detached = true,
                () = sleep_until(stop_at), if stop_at.is_some() => {
                    self.stop_at = None;
                    self.kill_live(None);
                }
                Some(update) = updates.recv() => self.on_task_update(update),
                Some(command) = commands.recv() => self.apply_command(command),
                joined = runners.join_next() => match joined {
                    Some(Ok(())) => {}
                    Some(Err(error)) => tracing::error!(alloc_id = %self.alloc.id, %error, "a task runner failed"),
                    None => break,
                },
            }
        }
        while let Ok(update) = updates.try_recv() {
            self.on_task_update(update);
        }
        self.shared.controls.remove(&self.alloc.id);
        if detached || shutdown.is_cancelled() {
            self.persist();
            return RunnerExit::Detached;
        }
        if let Some(services) = self.services.as_mut() {
            services.stop();
        }
        self.shared.runtime.remove_alloc(&self.alloc.id);
        self.shared.ports.release(&self.alloc.id);
        if self.destroying {
            self.shared.state.remove_alloc(&self.alloc.id);
            return RunnerExit::Destroyed;
        }
        self.refresh_status();
        self.persist();
        self.report();
        RunnerExit::Finished
    }

    /// The job and task group to run, or why the allocation cannot run.
    fn validate(&self) -> Result<Arc<Job>, String> {
        let Some(job) = self.alloc.job.as_deref() else {
            return Err("allocation has no job".to_owned());
        };
        let Some(group) = job.task_group(&self.alloc.task_group) else {
            return Err(format!(
                "task group {:?} not found in job {:?}",
                self.alloc.task_group, job.id
            ));
        };
        if group.tasks.is_empty() {
            return Err(format!("task group {:?} has no tasks", group.name));
        }
        if let Some(task) = group
            .tasks
            .iter()
            .find(|task| !is_safe_component(&task.name) || task.name == "alloc")
        {
            return Err(format!("invalid task name {:?}", task.name));
        }
        Ok(Arc::new(job.clone()))
    }

    fn spawn_tasks(
        &mut self,
        job: &Arc<Job>,
        updates: &mpsc::UnboundedSender<TaskUpdate>,
        runners: &mut JoinSet<()>,
    ) {
        let Some(group) = job.task_group(&self.alloc.task_group) else {
            return;
        };
        // An allocation stopped before it started: each task gets its kill before it runs,
        // so a task not yet started never starts.
        let stop = self.alloc.server_terminal() || self.destroying;
        self.killing |= stop;
        for task in &group.tasks {
            let (commands, receiver) = mpsc::unbounded_channel();
            let restored = self.record.tasks.get(&task.name).cloned();
            let ctx = TaskContext {
                alloc: self.alloc.clone(),
                job: job.clone(),
                task: task.clone(),
                node: self.shared.node.clone(),
                dirs: self.shared.state.task_dirs(&self.alloc.id, &task.name),
                host_env: self.shared.host_env.clone(),
                max_kill_timeout: self.shared.max_kill_timeout,
                poll_interval: self.shared.poll_interval,
                templates: self.shared.templates.clone(),
                updates: updates.clone(),
                shutdown: self.shared.shutdown.clone(),
                schedule: ScheduleGate::for_task(&self.shared, &self.alloc.id, task),
            };
            let record = restored.clone().unwrap_or_else(|| TaskRecord {
                state: TaskState {
                    state: TASK_STATE_PENDING.to_owned(),
                    ..TaskState::default()
                },
                ..TaskRecord::default()
            });
            let mut slot = Slot {
                commands,
                record,
                leader: task.leader,
                kill_timeout: ctx.kill_timeout(),
                shutdown_delay: duration_of(task.shutdown_delay),
                kill_sent: false,
            };
            if stop {
                slot.kill(None, true);
            }
            self.slots.insert(task.name.clone(), slot);
            let runner = TaskRunner::new(ctx, restored);
            runners.spawn(async move {
                runner.run(receiver).await;
            });
        }
    }

    fn apply_command(&mut self, command: AllocCommand) {
        match command {
            AllocCommand::Update(alloc) => {
                let mut alloc = (*alloc).clone();
                if alloc.job.is_none() {
                    alloc.job = self.alloc.job.clone();
                }
                let node_ip = node_address(&self.shared.node);
                self.shared
                    .ports
                    .fill(&mut alloc, Some(&self.alloc), &node_ip);
                let stop = alloc.server_terminal();
                self.record.alloc = alloc.clone();
                self.alloc = Arc::new(alloc);
                self.persist();
                if stop && !self.killing {
                    tracing::info!(alloc_id = %self.alloc.id, desired = %self.alloc.desired_status, "stopping allocation");
                    self.killing = true;
                    let delay = self.group_shutdown_delay();
                    if !delay.is_zero() && !self.skip_shutdown_delay() {
                        self.stop_at = Some(tokio::time::Instant::now() + delay);
                    } else {
                        self.kill_live(None);
                    }
                }
            }
            AllocCommand::Destroy => {
                tracing::info!(alloc_id = %self.alloc.id, "allocation garbage-collected; destroying it");
                self.destroying = true;
                self.killing = true;
                self.stop_at = None;
                self.kill_live(None);
            }
        }
        self.sync_services();
    }

    /// Registers or deregisters the allocation's services to match its tasks.
    fn sync_services(&mut self) {
        let Some(services) = self.services.as_mut() else {
            return;
        };
        let states: BTreeMap<String, TaskState> = self
            .slots
            .iter()
            .map(|(name, slot)| (name.clone(), slot.record.state.clone()))
            .collect();
        services.sync(&states, self.killing);
    }

    fn on_task_update(&mut self, update: TaskUpdate) {
        if let Some(slot) = self.slots.get_mut(&update.task) {
            slot.record = update.record;
        }
        if !self.killing
            && let Some(event) = self.sibling_kill_event()
        {
            self.killing = true;
            self.kill_live(Some(event));
        }
        self.refresh_status();
        self.sync_services();
        self.persist();
        self.report();
    }

    /// Upstream: a dead leader, or else the first failed task, kills the others.
    fn sibling_kill_event(&self) -> Option<TaskEvent> {
        let mut event = None;
        let mut live = false;
        for (name, slot) in &self.slots {
            let state = &slot.record.state;
            if state.state != TASK_STATE_DEAD {
                live = true;
                continue;
            }
            if state.failed {
                if event.is_none() {
                    event = Some(events::sibling_failed(name));
                }
            } else if slot.leader {
                event = Some(events::leader_dead());
            }
        }
        if live { event } else { None }
    }

    /// Sends a kill to every task not yet dead (see [`Slot::kill`]).
    fn kill_live(&mut self, first: Option<TaskEvent>) {
        let skip_delay = self.skip_shutdown_delay() || self.destroying;
        for slot in self.slots.values_mut() {
            slot.kill(first.clone(), skip_delay);
        }
    }

    /// The group's `shutdown_delay`.
    fn group_shutdown_delay(&self) -> Duration {
        self.alloc
            .job
            .as_deref()
            .and_then(|job| job.task_group(&self.alloc.task_group))
            .and_then(|group| group.shutdown_delay)
            .map_or(Duration::ZERO, duration_of)
    }

    /// Whether the stop asked to skip shutdown delays (`no_shutdown_delay`).
    fn skip_shutdown_delay(&self) -> bool {
        self.alloc.desired_transition.no_shutdown_delay == Some(true)
    }

    fn refresh_status(&mut self) {
        let states: BTreeMap<String, TaskState> = self
            .slots
            .iter()
            .map(|(name, slot)| (name.clone(), slot.record.state.clone()))
            .collect();
        let (status, description) = client_status(&states);
        self.record.client_status = status.to_owned();
        self.record.client_description = description.to_owned();
        for (name, slot) in &self.slots {
            self.record.tasks.insert(name.clone(), slot.record.clone());
        }
    }

    /// The update for the server; terminal allocations get a `FinishedAt` on every task.
    fn client_update(&self) -> AllocClientUpdate {
        let mut task_states: BTreeMap<String, TaskState> = self
            .record
            .tasks
            .iter()
            .map(|(name, task)| (name.clone(), task.state.clone()))
            .collect();
        if matches!(
            self.record.client_status.as_str(),
            ALLOC_CLIENT_COMPLETE | ALLOC_CLIENT_FAILED
        ) {
            for state in task_states.values_mut() {
                if state.finished_at.is_none() {
                    state.finished_at = Some(now_rfc3339());
                }
            }
        }
        AllocClientUpdate {
            id: self.alloc.id.clone(),
            node_id: self.shared.node.id.clone(),
            client_status: self.record.client_status.clone(),
            client_description: self.record.client_description.clone(),
            task_states,
        }
    }

    fn report(&mut self) {
        if self.destroying || self.record.client_status.is_empty() {
            return;
        }
        let update = self.client_update();
        if self.last_sent.as_ref() == Some(&update) {
            return;
        }
        let _ = self.shared.updates.send(update.clone());
        self.last_sent = Some(update);
    }

    fn persist(&self) {
        if self.destroying {
            return;
        }
        if let Err(error) = self.shared.state.save_alloc(&self.record) {
            tracing::error!(alloc_id = %self.alloc.id, %error, "cannot persist allocation state");
        }
    }

    /// An allocation that cannot run at all: failed, with `description`.
    fn fail_alloc(mut self, description: &str) -> RunnerExit {
        tracing::warn!(alloc_id = %self.alloc.id, description, "allocation cannot run");
        if self.destroying {
            self.shared.state.remove_alloc(&self.alloc.id);
            return RunnerExit::Destroyed;
        }
        self.record.client_status = ALLOC_CLIENT_FAILED.to_owned();
        self.record.client_description = description.to_owned();
        self.persist();
        self.report();
        RunnerExit::Finished
    }
}

/// Upstream's `getClientStatus`.
pub(crate) fn client_status(states: &BTreeMap<String, TaskState>) -> (&'static str, &'static str) {
    let (mut pending, mut running, mut dead, mut failed) = (false, false, false, false);
    for state in states.values() {
        match state.state.as_str() {
            TASK_STATE_RUNNING => running = true,
            TASK_STATE_DEAD if state.failed => failed = true,
            TASK_STATE_DEAD => dead = true,
            _ => pending = true,
        }
    }
    if failed {
        (ALLOC_CLIENT_FAILED, "Failed tasks")
    } else if running {
        (ALLOC_CLIENT_RUNNING, "Tasks are running")
    } else if pending {
        (ALLOC_CLIENT_PENDING, "No tasks have started")
    } else if dead {
        (ALLOC_CLIENT_COMPLETE, "All tasks have completed")
    } else {
        (ALLOC_CLIENT_PENDING, "No tasks have started")
    }
}

/// Sleeps until `at`, or forever when there is no deadline.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(state: &str, failed: bool) -> TaskState {
        TaskState {
            state: state.to_owned(),
            failed,
            ..TaskState::default()
        }
    }

    #[test]
    fn client_status_follows_upstream() {
        let of = |list: &[(&str, bool)]| {
            let states = list
                .iter()
                .enumerate()
                .map(|(i, (s, f))| (format!("t{i}"), state(s, *f)))
                .collect();
            client_status(&states).0
        };
        assert_eq!(of(&[("pending", false)]), "pending");
        assert_eq!(of(&[("running", false), ("pending", false)]), "running");
        assert_eq!(of(&[("dead", false), ("dead", false)]), "complete");
        assert_eq!(of(&[("dead", true), ("running", false)]), "failed");
        assert_eq!(of(&[("dead", false), ("running", false)]), "running");
    }
}
