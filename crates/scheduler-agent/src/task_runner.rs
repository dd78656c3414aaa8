//! The task runner (Nomad's `taskrunner.TaskRunner`): runs one task of an allocation through
//! its life — pending → running → dead — restarting it per its restart policy, and publishes
//! its [`TaskRecord`] (state, events, process identity) to the alloc runner after every change.
//!
//! Commands arrive on a channel ([`TaskCommand`]): kill (alloc stopped, sibling failed, GC),
//! signal and user restart (the handle map in `handles.rs`). Agent shutdown detaches: the runner
//! returns at once, leaving the process running for the next agent to re-attach to.
//!
//! Event sequences (upstream's):
//! - start: `Received`, `Task Setup` (first time), `Started`;
//! - exit: `Terminated`, then `Restarting` (state pending, `Restarts`+1) or `Not Restarting`
//!   (dead, failed) or nothing more (batch success: dead);
//! - start failure: `Driver Failure` / `Failed Validation`, then `Not Restarting` ("Error was
//!   unrecoverable");
//! - kill: (`Sibling Task Failed`), `Killing` (both from the alloc runner), then with a
//!   `shutdown_delay` `Waiting for shutdown delay` and the wait (or `Skipping shutdown delay`
//!   when the stop asked for `no_shutdown_delay`), `Terminated`, `Killed`; a task killed while
//!   waiting to restart just goes dead;
//! - user restart: `Restart Signaled`, `Terminated`, `Restarting` (no delay), `Started`;
//! - signal: `Signaling`; exec sessions emit nothing (they only read how the task runs);
//! - schedule (a task with a `schedule` block, `schedule.rs`): `Pausing` when its gate says
//!   stop (the process is killed, `Terminated`, and the task waits pending, not counted as a
//!   restart), `Running` when it may run again, then `Started`;
//! - templates (`template/`): the task starts only once every template rendered (`Template`
//!   events `Missing: ...` while blocked; `Killing` "Template failed: ..." then `Killed` fails
//!   it); a re-render with `change_mode = "restart"` is `Restart Signaled` ("Template with
//!   change_mode restart re-rendered"), `Terminated`, `Restarting`, `Started` (not counted),
//!   with `"signal"` a `Signaling` ("Template re-rendered") and the signal.
//!
//! Invariants: at most one process per task; the pid and start time are published before the
//! runner waits on the process, and cleared once it is gone; `StartedAt` is set on each
//! transition to running, `FinishedAt` once on death.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use scheduler_structs::{
    Allocation, EVENT_RESTARTING, Job, Node, TASK_STATE_DEAD, TASK_STATE_PENDING,
    TASK_STATE_RUNNING, Task, TaskEvent,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::driver::raw_exec::{self, LaunchSpec};
use crate::driver::{self, EXEC, ExitResult, ProcessHandle, RAW_EXEC, parse_signal};
use crate::env::{EnvInputs, TaskEnv};
use crate::events;
use crate::handles::{ControlError, ExecTarget, TaskCommand};
use crate::restarts::{Decision, RestartTracker, RunOutcome, default_policy};
use crate::schedule::{self, ScheduleGate};
use crate::state::{TaskDirs, TaskRecord};
use crate::template::manager::{ManagerInputs, Notice, TemplateHandle};
use crate::template::{self, ChangeMode, TemplateSettings};
use crate::time::{duration_of, now_rfc3339};

/// A task's latest record, published after every change.
#[derive(Debug, Clone)]
pub(crate) struct TaskUpdate {
    pub(crate) task: String,
    pub(crate) record: TaskRecord,
}

/// Everything a task runner needs, fixed for its lifetime.
#[derive(Debug, Clone)]
pub(crate) struct TaskContext {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) job: Arc<Job>,
    pub(crate) task: Task,
    pub(crate) node: Arc<Node>,
    pub(crate) dirs: TaskDirs,
    pub(crate) host_env: Arc<Vec<(String, String)>>,
    pub(crate) max_kill_timeout: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) templates: Arc<TemplateSettings>,
    pub(crate) updates: mpsc::UnboundedSender<TaskUpdate>,
    pub(crate) shutdown: CancellationToken,
    /// The task's schedule, when it has one.
    pub(crate) schedule: Option<Arc<ScheduleGate>>,
}

impl TaskContext {
    /// The kill timeout applied: the task's, capped by the client's maximum.
    pub(crate) fn kill_timeout(&self) -> Duration {
        duration_of(self.task.kill_timeout).min(self.max_kill_timeout)
    }

    fn kill_signal(&self) -> Signal {
        parse_signal(&self.task.kill_signal).unwrap_or(Signal::SIGINT)
    }
}

/// How a run attempt ended.
enum Step {
    Outcome(RunOutcome),
    /// Killed before a process existed: go dead.
    Stop,
    /// The agent is shutting down: return, leaving any process running.
    Detach,
    /// Stopped by its schedule: wait pending until it may run again.
    Paused,
}

/// Where a restored task resumes.
enum Resume {
    Fresh,
    Dead,
    Pending,
    Attached(Box<ProcessHandle>),
    Vanished(ExitResult),
}

#[derive(Debug)]
pub(crate) struct TaskRunner {
    ctx: TaskContext,
    record: TaskRecord,
    restored: bool,
    tracker: RestartTracker,
    kill_error: Option<String>,
    /// The environment the current process was started with (exec sessions get it too).
    exec_env: Option<Arc<BTreeMap<String, String>>>,
    /// The task is paused by its schedule (`Pausing` emitted, `Running` not yet).
    paused: bool,
    /// The template manager, once started (it lives as long as the runner).
    templates: Option<TemplateHandle>,
    /// Whether every template has rendered once.
    templates_ready: bool,
    /// Variables from `env` templates and the task's token, added over the task's env.
    template_env: BTreeMap<String, String>,
}

impl TaskRunner {
    /// A runner for a new task, or resuming `restored` after an agent restart.
    pub(crate) fn new(ctx: TaskContext, restored: Option<TaskRecord>) -> TaskRunner {
        let group = ctx.job.task_group(&ctx.alloc.task_group);
        let policy = ctx
            .task
            .restart_policy
            .clone()
            .or_else(|| group.and_then(|group| group.restart_policy.clone()))
            .unwrap_or_else(|| default_policy(&ctx.job.job_type));
        let tracker = RestartTracker::new(&policy, &ctx.job.job_type, Instant::now());
        TaskRunner {
            restored: restored.is_some(),
            record: restored.unwrap_or_default(),
            tracker,
            kill_error: None,
            exec_env: None,
            paused: false,
            templates: None,
            templates_ready: false,
            template_env: BTreeMap::new(),
            ctx,
        }
    }

    /// Runs the task until it is dead (returns its final record) or the agent shuts down
    /// (returns the record as it stands, the process left running).
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<TaskCommand>,
    ) -> TaskRecord {
        self.run_until_done(&mut commands).await;
        if let Some(templates) = self.templates.take() {
            // A finished task's token is revoked; a detached one keeps it (the task runs on).
            let finished = self.record.state.state == TASK_STATE_DEAD;
            templates.finish(finished).await;
        }
        self.record
    }

    async fn run_until_done(&mut self, commands: &mut mpsc::UnboundedReceiver<TaskCommand>) {
        let mut handle = None;
        let mut vanished = None;
        match self.resume() {
            Resume::Fresh => {
                self.record.state.state = TASK_STATE_PENDING.to_owned();
                self.emit(events::received());
            }
            Resume::Dead => {
                self.publish();
                return;
            }
            Resume::Pending => self.publish(),
            Resume::Attached(process) => {
                tracing::info!(task = %self.ctx.task.name, pid = process.pid(), "re-attached to a running task");
                handle = Some(*process);
                self.publish();
                // Templates render again; a change while the agent was away applies its mode.
                self.start_templates();
            }
            Resume::Vanished(result) => {
                tracing::info!(task = %self.ctx.task.name, ?result, "a task ended while the agent was away");
                self.record.local.pid = None;
                self.record.local.start_time = None;
                self.emit(events::terminated(&result));
                vanished = Some(result);
            }
        }

        let mut killed = false;
        loop {
            // With a process, commands are handled while waiting on it (in `run_once`).
            if handle.is_none() {
                self.drain_commands(commands, &mut killed);
                if killed {
                    break;
                }
            }
            let outcome = match vanished.take() {
                Some(result) => RunOutcome::Exited {
                    successful: result.successful(),
                },
                None => match self.run_once(&mut handle, commands, &mut killed).await {
                    Step::Outcome(outcome) => outcome,
                    Step::Stop => break,
                    Step::Detach => return,
                    Step::Paused => {
                        self.update_state(TASK_STATE_PENDING, None);
                        continue;
                    }
                },
            };
            match self
                .tracker
                .decide(outcome, Instant::now(), rand::random::<f64>())
            {
                Decision::Killed => {
                    let error = self.kill_error.take();
                    self.emit(events::killed(error.as_deref()));
                    break;
                }
                Decision::NotRestarting { reason } => {
                    tracing::info!(task = %self.ctx.task.name, %reason, "not restarting task");
                    self.update_state(TASK_STATE_DEAD, Some(events::not_restarting(&reason)));
                    break;
                }
                Decision::Terminated { reason } => {
                    tracing::info!(task = %self.ctx.task.name, %reason, "task terminated");
                    break;
                }
                Decision::Restart { delay, reason } => {
                    tracing::info!(task = %self.ctx.task.name, %reason, ?delay, "restarting task");
                    self.update_state(TASK_STATE_PENDING, Some(events::restarting(delay, &reason)));
                    if self.restart_delay(delay, commands, &mut killed).await {
                        return;
                    }
                }
            }
        }
        self.update_state(TASK_STATE_DEAD, None);
    }

    fn resume(&mut self) -> Resume {
        if !self.restored {
            return Resume::Fresh;
        }
        match self.record.state.state.as_str() {
            TASK_STATE_DEAD => Resume::Dead,
            TASK_STATE_RUNNING => {
                let exit_file = self.ctx.dirs.exit_file.clone();
                match (self.record.local.pid, self.record.local.start_time) {
                    (Some(pid), Some(start_time)) => {
                        match ProcessHandle::adopt(
                            pid,
                            start_time,
                            exit_file.clone(),
                            self.ctx.poll_interval,
                        ) {
                            Some(process) => Resume::Attached(Box::new(process)),
                            None => Resume::Vanished(raw_exec::exit_of_vanished(&exit_file)),
                        }
                    }
                    _ => Resume::Vanished(ExitResult::unknown(
                        "the agent restarted before recording the task's process",
                    )),
                }
            }
            _ => Resume::Pending,
        }
    }

    /// Handles commands that arrived while no process runs.
    fn drain_commands(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<TaskCommand>,
        killed: &mut bool,
    ) {
        while let Ok(command) = commands.try_recv() {
            self.not_running(command, killed);
        }
    }

    fn not_running(&mut self, command: TaskCommand, killed: &mut bool) {
        match command {
            TaskCommand::Kill { events, .. } => {
                for event in events {
                    self.emit(event);
                }
                *killed = true;
            }
            TaskCommand::Signal { reply, .. } | TaskCommand::Restart { reply, .. } => {
                let _ = reply.send(Err(ControlError::NotRunning));
            }
            TaskCommand::Exec { reply } => {
                let _ = reply.send(Err(ControlError::NotRunning));
            }
        }
    }

    /// Starts the task if needed, then waits for its process to end or to be killed.
    async fn run_once(
        &mut self,
        handle: &mut Option<ProcessHandle>,
        commands: &mut mpsc::UnboundedReceiver<TaskCommand>,
        killed: &mut bool,
    ) -> Step {
        if handle.is_none() {
            if *killed {
                return Step::Stop;
            }
            if let Some(gate) = self.ctx.schedule.clone()
                && let Some(step) = self.wait_for_window(&gate, commands, killed).await
            {
                return step;
            }
            if let Some(step) = self.wait_for_templates(commands, killed).await {
                return step;
            }
            match self.start() {
                Ok(process) => *handle = Some(process),
                Err(recoverable) => return Step::Outcome(RunOutcome::StartFailed { recoverable }),
            }
        }
        let Some(process) = handle.as_mut() else {
            return Step::Stop;
        };
        let mut user_restart = false;
        let mut paused = false;
        let result = loop {
            tokio::select! {
                result = process.wait() => break result,
                notice = next_notice(self.templates.as_mut()) => {
                    match self.on_running_notice(notice, process).await {
                        RunningChange::None => {}
                        RunningChange::Restarted(result) => {
                            user_restart = true;
                            break result;
                        }
                        RunningChange::Failed(result) => {
                            *killed = true;
                            break result;
                        }
                    }
                }
                () = self.ctx.shutdown.cancelled() => return Step::Detach,
                reason = schedule::until_paused(self.ctx.schedule.as_deref()) => {
                    self.emit(schedule::pausing(reason));
                    self.paused = true;
                    paused = true;
                    let (result, _) = process.kill(self.ctx.kill_signal(), self.ctx.kill_timeout()).await;
                    break result;
                }
                command = commands.recv() => match command {
                    None => return Step::Detach,
                    Some(TaskCommand::Kill { events, delay }) => {
                        for event in events {
                            self.emit(event);
                        }
                        *killed = true;
                        if !delay.is_zero() {
                            // The shutdown delay: the process may still end on its own.
                            if let Ok(result) = tokio::time::timeout(delay, process.wait()).await {
                                break result;
                            }
                        }
                        let (result, error) = process.kill(self.ctx.kill_signal(), self.ctx.kill_timeout()).await;
                        self.kill_error = error;
                        break result;
                    }
                    Some(TaskCommand::Exec { reply }) => {
                        let _ = reply.send(Ok(self.exec_target(process)));
                    }
                    Some(TaskCommand::Signal { signal, reply }) => {
                        let _ = reply.send(self.signal(process, &signal));
                    }
                    Some(TaskCommand::Restart { event, reply }) => {
                        self.emit(*event);
                        user_restart = true;
                        let (result, _) = process.kill(self.ctx.kill_signal(), self.ctx.kill_timeout()).await;
                        let _ = reply.send(Ok(()));
                        break result;
                    }
                },
            }
        };
        *handle = None;
        self.record.local.pid = None;
        self.record.local.start_time = None;
        self.emit(events::terminated(&result));
        if paused && !*killed {
            return Step::Paused;
        }
        Step::Outcome(if *killed {
            RunOutcome::Killed
        } else if user_restart {
            RunOutcome::UserRestart
        } else {
            RunOutcome::Exited {
                successful: result.successful(),
            }
        })
    }

    /// Waits until the task's schedule lets it run (`Pausing` first when it does not, then
    /// `Running`); `Some` when a kill or the agent's shutdown ends the wait instead.
    async fn wait_for_window(
        &mut self,
        gate: &ScheduleGate,
        commands: &mut mpsc::UnboundedReceiver<TaskCommand>,
        killed: &mut bool,
    ) -> Option<Step> {
        loop {
            let decision = gate.decide();
            if decision.run {
                if std::mem::take(&mut self.paused) {
                    self.emit(schedule::running(decision.reason));
                }
                return None;
            }
            if !self.paused {
                self.paused = true;
                self.update_state(TASK_STATE_PENDING, Some(schedule::pausing(decision.reason)));
            }
            tokio::select! {
                () = gate.changed(decision.recheck) => {}
                () = self.ctx.shutdown.cancelled() => return Some(Step::Detach),
                command = commands.recv() => match command {
                    None => return Some(Step::Detach),
                    Some(command) => {
                        let kill = matches!(command, TaskCommand::Kill { .. });
                        self.not_running(command, killed);
                        if kill {
                            return Some(Step::Stop);
                        }
                    }
                },
            }
        }
    }

    /// Waits out a restart delay; true when the agent is shutting down.
    async fn restart_delay(
        &mut self,
        delay: Duration,
        commands: &mut mpsc::UnboundedReceiver<TaskCommand>,
        killed: &mut bool,
    ) -> bool {
        let sleep = tokio::time::sleep(delay);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = &mut sleep => return false,
                () = self.ctx.shutdown.cancelled() => return true,
                command = commands.recv() => match command {
                    None => return true,
                    Some(command) => {
                        let kill = matches!(command, TaskCommand::Kill { .. });
                        self.not_running(command, killed);
                        if kill {
                            return false;
                        }
                    }
                },
            }
        }
    }

    /// How the running process was started, for an exec session. A task re-attached after an
    /// agent restart gets the environment its allocation implies, built anew.
    fn exec_target(&self, process: &ProcessHandle) -> ExecTarget {
        let env = self.exec_env.clone().unwrap_or_else(|| {
            let vars = self
                .ctx
                .job
                .task_group(&self.ctx.alloc.task_group)
                .map(|group| {
                    TaskEnv::build(&EnvInputs {
                        alloc: &self.ctx.alloc,
                        job: &self.ctx.job,
                        group,
                        task: &self.ctx.task,
                        node: &self.ctx.node,
                        alloc_dir: &self.ctx.dirs.shared,
                        local_dir: &self.ctx.dirs.local,
                        secrets_dir: &self.ctx.dirs.secrets,
                        host_env: &self.ctx.host_env,
                    })
                    .vars()
                    .clone()
                });
            Arc::new(vars.unwrap_or_default())
        });
        ExecTarget {
            driver: self.ctx.task.driver.clone(),
            env: env
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
            task_dir: self.ctx.dirs.task_dir.clone(),
            pid: process.pid(),
        }
    }

    fn signal(&mut self, process: &ProcessHandle, name: &str) -> Result<(), ControlError> {
        if process.has_exited() {
            return Err(ControlError::NotRunning);
        }
        self.emit(events::signaling(name));
        let signal = parse_signal(name).unwrap_or_else(|| {
            tracing::warn!(
                signal = name,
                "unknown signal to send to task, using SIGINT instead"
            );
            Signal::SIGINT
        });
        process.signal(signal).map_err(ControlError::Failed)
    }

    /// Builds the task directory, validates the config and launches the process. The error is
    /// whether the failure is recoverable (an event has been emitted).
    fn start(&mut self) -> Result<ProcessHandle, bool> {
        if !self.setup_dirs() {
            return Err(true);
        }

        if !driver::is_known(&self.ctx.task.driver) {
            let message = format!(
                "failed to find driver {:?}: this client runs {RAW_EXEC} and {EXEC}",
                self.ctx.task.driver
            );
            self.emit(events::driver_failure(&message));
            return Err(false);
        }
        let config = match driver::parse_config(&self.ctx.task) {
            Ok(config) => config,
            Err(error) => {
                self.emit(events::failed_validation(&error));
                return Err(false);
            }
        };
        let Some(group) = self.ctx.job.task_group(&self.ctx.alloc.task_group) else {
            let message = format!(
                "task group {:?} not found in the job",
                self.ctx.alloc.task_group
            );
            self.emit(events::failed_validation(&message));
            return Err(false);
        };
        let (alloc_dir, local_dir, secrets_dir) =
            driver::task_paths(&self.ctx.task.driver, &self.ctx.dirs);
        let env = TaskEnv::build(&EnvInputs {
            alloc: &self.ctx.alloc,
            job: &self.ctx.job,
            group,
            task: &self.ctx.task,
            node: &self.ctx.node,
            alloc_dir: &alloc_dir,
            local_dir: &local_dir,
            secrets_dir: &secrets_dir,
            host_env: &self.ctx.host_env,
        });
        let mut vars = env.vars().clone();
        // Template variables override the task's (upstream's `SetTemplateEnv`).
        vars.extend(self.template_env.clone());
        let spec = LaunchSpec {
            command: env.interpolate(&config.command),
            args: config.args.iter().map(|arg| env.interpolate(arg)).collect(),
            work_dir: config
                .work_dir
                .as_deref()
                .map(|dir| PathBuf::from(env.interpolate(dir))),
            env: vars,
            task_dir: self.ctx.dirs.task_dir.clone(),
            stdout: self.ctx.dirs.stdout.clone(),
            stderr: self.ctx.dirs.stderr.clone(),
            exit_file: self.ctx.dirs.exit_file.clone(),
        };
        match driver::start(
            &self.ctx.task,
            &self.ctx.alloc.id,
            &self.ctx.dirs,
            &spec,
            self.ctx.poll_interval,
        ) {
            Ok(process) => {
                self.exec_env = Some(Arc::new(spec.env.clone()));
                self.record.local.pid = Some(process.pid());
                self.record.local.start_time = Some(process.start_time());
                self.update_state(TASK_STATE_RUNNING, Some(events::started()));
                Ok(process)
            }
            Err(error) => {
                self.emit(events::driver_failure(&error));
                Err(false)
            }
        }
    }

    /// Builds the task directory (`Task Setup` the first time); false after a `Setup Failure`.
    fn setup_dirs(&mut self) -> bool {
        if !self.record.local.dir_built {
            self.emit(events::task_setup(events::BUILDING_TASK_DIR));
        }
        if let Err(error) = self.ctx.dirs.build().and_then(|()| self.own_secrets_dir()) {
            let message = format!(
                "failed to build task directory for {:?}: {error}",
                self.ctx.task.name
            );
            self.emit(events::setup_failure(&message));
            return false;
        }
        self.record.local.dir_built = true;
        true
    }

    /// The uid and gid an `exec` task with a `user` runs as (they own its `secrets/`).
    fn task_owner(&self) -> Option<(u32, u32)> {
        if self.ctx.task.driver != EXEC || self.ctx.task.user.is_empty() {
            return None;
        }
        template::lookup_user(&self.ctx.task.user)
    }

    fn own_secrets_dir(&self) -> std::io::Result<()> {
        match self.task_owner() {
            Some((uid, gid)) => {
                std::os::unix::fs::chown(&self.ctx.dirs.secrets, Some(uid), Some(gid))
            }
            None => Ok(()),
        }
    }

    /// The task's environment as its process gets it (without template variables).
    fn base_env(&self) -> Option<BTreeMap<String, String>> {
        let group = self.ctx.job.task_group(&self.ctx.alloc.task_group)?;
        let (alloc_dir, local_dir, secrets_dir) =
            driver::task_paths(&self.ctx.task.driver, &self.ctx.dirs);
        Some(
            TaskEnv::build(&EnvInputs {
                alloc: &self.ctx.alloc,
                job: &self.ctx.job,
                group,
                task: &self.ctx.task,
                node: &self.ctx.node,
                alloc_dir: &alloc_dir,
                local_dir: &local_dir,
                secrets_dir: &secrets_dir,
                host_env: &self.ctx.host_env,
            })
            .vars()
            .clone(),
        )
    }

    /// Starts the template manager when the task has templates or a `vault` block (once).
    /// `false` when its blocks are invalid (the task has been failed).
    fn start_templates(&mut self) -> bool {
        if self.templates.is_some() {
            return true;
        }
        let (specs, vault) = match template::task_specs(&self.ctx.task) {
            None => {
                self.templates_ready = true;
                return true;
            }
            Some(Ok(found)) => found,
            Some(Err(error)) => {
                self.fail_by_template(&format!("Template failed: {error}"));
                return false;
            }
        };
        let job = &self.ctx.job;
        let job_token = [&job.secrets_token, &job.vault_token]
            .into_iter()
            .find(|token| !token.is_empty())
            .cloned();
        let mut meta = serde_json::Map::new();
        for (key, value) in [
            ("AllocationID", &self.ctx.alloc.id),
            ("Task", &self.ctx.task.name),
            ("NodeID", &self.ctx.node.id),
            ("JobID", &job.id),
            ("Namespace", &self.ctx.alloc.namespace),
        ] {
            meta.insert(key.to_owned(), serde_json::Value::from(value.clone()));
        }
        let token_file = self
            .ctx
            .dirs
            .exit_file
            .with_file_name(format!("{}.vault_token", self.ctx.task.name));
        self.templates = Some(TemplateHandle::spawn(ManagerInputs {
            specs,
            vault,
            settings: self.ctx.templates.clone(),
            dirs: self.ctx.dirs.clone(),
            task_env: self.base_env().unwrap_or_default(),
            job_token,
            token_meta: meta,
            owner: self.task_owner(),
            token_file,
        }));
        true
    }

    /// `Killing` (failing the task) with a template's message.
    fn fail_by_template(&mut self, message: &str) {
        let mut event = events::new_event(scheduler_structs::EVENT_KILLING);
        event.fails_task = true;
        event.kill_reason = message.to_owned();
        event.display_message = message.to_owned();
        event
            .details
            .insert("fails_task".to_owned(), "true".to_owned());
        event
            .details
            .insert("kill_reason".to_owned(), message.to_owned());
        self.emit(event);
    }

    /// Before a start: renders the templates (the first time) while handling commands;
    /// `Some` when the task must not start (failed, killed or detached).
    async fn wait_for_templates(
        &mut self,
        commands: &mut mpsc::UnboundedReceiver<TaskCommand>,
        killed: &mut bool,
    ) -> Option<Step> {
        if self.templates_ready {
            return None;
        }
        if !self.setup_dirs() {
            return Some(Step::Outcome(RunOutcome::StartFailed { recoverable: true }));
        }
        if !self.start_templates() {
            self.emit(events::killed(None));
            return Some(Step::Stop);
        }
        while !self.templates_ready {
            tokio::select! {
                notice = next_notice(self.templates.as_mut()) => match notice {
                    Notice::Event(event) => self.emit(*event),
                    Notice::Ready { env, .. } => {
                        self.template_env = env;
                        self.templates_ready = true;
                    }
                    Notice::Changed { env, .. } => self.template_env = env,
                    Notice::Failed(message) => {
                        self.fail_by_template(&message);
                        self.emit(events::killed(None));
                        return Some(Step::Stop);
                    }
                },
                () = self.ctx.shutdown.cancelled() => return Some(Step::Detach),
                command = commands.recv() => match command {
                    None => return Some(Step::Detach),
                    Some(command) => {
                        let kill = matches!(command, TaskCommand::Kill { .. });
                        self.not_running(command, killed);
                        if kill {
                            return Some(Step::Stop);
                        }
                    }
                },
            }
        }
        None
    }

    /// Applies a template notice while the process runs.
    async fn on_running_notice(
        &mut self,
        notice: Notice,
        process: &mut ProcessHandle,
    ) -> RunningChange {
        let (restart, signals) = match notice {
            Notice::Event(event) => {
                self.emit(*event);
                return RunningChange::None;
            }
            Notice::Failed(message) => {
                self.fail_by_template(&message);
                let (result, error) = process
                    .kill(self.ctx.kill_signal(), self.ctx.kill_timeout())
                    .await;
                self.kill_error = error;
                return RunningChange::Failed(result);
            }
            Notice::Ready { env, dirty } => {
                self.template_env = env;
                self.templates_ready = true;
                let restart = dirty.contains(&ChangeMode::Restart);
                let signals = dirty
                    .into_iter()
                    .filter_map(|mode| match mode {
                        ChangeMode::Signal(signal) => Some(signal),
                        _ => None,
                    })
                    .collect();
                (restart, signals)
            }
            Notice::Changed {
                env,
                restart,
                signals,
            } => {
                self.template_env = env;
                (restart, signals)
            }
        };
        if restart {
            let mut event = events::new_event(scheduler_structs::EVENT_RESTART_SIGNAL);
            event.display_message = "Template with change_mode restart re-rendered".to_owned();
            self.emit(event);
            let (result, _) = process
                .kill(self.ctx.kill_signal(), self.ctx.kill_timeout())
                .await;
            return RunningChange::Restarted(result);
        }
        let mut failures = Vec::new();
        for name in signals {
            let mut event = events::new_event(scheduler_structs::EVENT_SIGNALING);
            event.task_signal = name.clone();
            event.display_message = "Template re-rendered".to_owned();
            event.details.insert("signal".to_owned(), name.clone());
            self.emit(event);
            match parse_signal(&name) {
                Some(signal) => {
                    if let Err(error) = process.signal(signal) {
                        failures.push(format!("{name}: {error}"));
                    }
                }
                None => failures.push(format!("{name}: unknown signal")),
            }
        }
        if !failures.is_empty() {
            self.fail_by_template(&format!(
                "Template failed to send signals: {}",
                failures.join(", ")
            ));
            let (result, error) = process
                .kill(self.ctx.kill_signal(), self.ctx.kill_timeout())
                .await;
            self.kill_error = error;
            return RunningChange::Failed(result);
        }
        RunningChange::None
    }

    /// Appends an event (without changing the state) and publishes.
    fn emit(&mut self, event: TaskEvent) {
        self.append(event);
        self.publish();
    }

    /// Moves to `state` (after appending `event`) and publishes.
    fn update_state(&mut self, state: &str, event: Option<TaskEvent>) {
        if let Some(event) = event {
            self.append(event);
        }
        let task_state = &mut self.record.state;
        let previous = std::mem::replace(&mut task_state.state, state.to_owned());
        if state == TASK_STATE_RUNNING && previous != TASK_STATE_RUNNING {
            task_state.started_at = Some(now_rfc3339());
        }
        if state == TASK_STATE_DEAD && task_state.finished_at.is_none() {
            task_state.finished_at = Some(now_rfc3339());
        }
        self.publish();
    }

    fn append(&mut self, mut event: TaskEvent) {
        event.display_message = events::display_message(&event);
        let state = &mut self.record.state;
        if event.fails_task {
            state.failed = true;
        }
        if event.event_type == EVENT_RESTARTING {
            state.restarts += 1;
            state.last_restart = Some(stdx::time::format_rfc3339_nanos(event.time));
        }
        tracing::info!(task = %self.ctx.task.name, alloc_id = %self.ctx.alloc.id, r#type = %event.event_type, msg = %event.display_message, "task event");
        state.push_event(event);
    }

    fn publish(&self) {
        let _ = self.ctx.updates.send(TaskUpdate {
            task: self.ctx.task.name.clone(),
            record: self.record.clone(),
        });
    }
}

/// What a template notice did to the running process.
enum RunningChange {
    None,
    /// Restarted by a template (in place, not counted): the process's end.
    Restarted(ExitResult),
    /// Killed because a template failed: the process's end.
    Failed(ExitResult),
}

/// The manager's next notice; never resolves without a manager (or once it has stopped).
async fn next_notice(templates: Option<&mut TemplateHandle>) -> Notice {
    match templates {
        Some(handle) => match handle.notices.recv().await {
            Some(notice) => notice,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use scheduler_structs::{RestartPolicy, TaskGroup, TaskState};
    use serde_json::json;
    use tokio::sync::oneshot;

    use super::*;
    use crate::state::StateDir;

    struct Harness {
        _dir: tempfile::TempDir,
        ctx: TaskContext,
        updates: mpsc::UnboundedReceiver<TaskUpdate>,
        shutdown: CancellationToken,
    }

    fn harness(job_type: &str, script: &str, policy: RestartPolicy) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        let task = Task {
            name: "main".to_owned(),
            driver: RAW_EXEC.to_owned(),
            config: BTreeMap::from([
                ("command".to_owned(), json!("/bin/sh")),
                ("args".to_owned(), json!(["-c", script])),
            ]),
            kill_timeout: 2_000_000_000,
            restart_policy: Some(policy),
            ..Task::default()
        };
        let job = Job {
            id: "job".to_owned(),
            name: "job".to_owned(),
            job_type: job_type.to_owned(),
            task_groups: vec![TaskGroup {
                name: "group".to_owned(),
                tasks: vec![task.clone()],
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        let alloc = Allocation {
            id: "a1".to_owned(),
            name: "job.group[0]".to_owned(),
            task_group: "group".to_owned(),
            ..Allocation::default()
        };
        let (tx, updates) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let ctx = TaskContext {
            alloc: Arc::new(alloc),
            job: Arc::new(job),
            task,
            node: Arc::new(Node::default()),
            dirs: state.task_dirs("a1", "main"),
            host_env: Arc::new(vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            max_kill_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_millis(20),
            templates: Arc::new(TemplateSettings::default()),
            updates: tx,
            shutdown: shutdown.clone(),
            schedule: None,
        };
        Harness {
            _dir: dir,
            ctx,
            updates,
            shutdown,
        }
    }

    fn policy(attempts: i64, delay_ms: i64) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: 60_000_000_000,
            delay: delay_ms * 1_000_000,
            mode: "fail".to_owned(),
            render_templates: false,
        }
    }

    fn types(state: &TaskState) -> Vec<&str> {
        state
            .events
            .iter()
            .map(|event| event.event_type.as_str())
            .collect()
    }

    #[tokio::test]
    async fn a_failing_task_is_restarted_per_policy_then_fails() {
        let harness = harness(
            "service",
            "echo run >> \"$NOMAD_TASK_DIR/runs\"; exit 2",
            policy(1, 100),
        );
        let (_tx, rx) = mpsc::unbounded_channel();
        let started = Instant::now();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        let elapsed = started.elapsed();
        let state = &record.state;
        assert_eq!(
            types(state),
            vec![
                "Received",
                "Task Setup",
                "Started",
                "Terminated",
                "Restarting",
                "Started",
                "Terminated",
                "Not Restarting"
            ]
        );
        assert_eq!(state.state, "dead");
        assert!(state.failed);
        assert_eq!(state.restarts, 1);
        assert!(state.last_restart.is_some());
        assert!(state.started_at.is_some() && state.finished_at.is_some());
        let terminated = &state.events[3];
        assert_eq!(terminated.exit_code, 2);
        assert_eq!(terminated.details["exit_code"], "2");
        assert_eq!(terminated.display_message, "Exit Code: 2");
        let restarting = &state.events[4];
        assert!(restarting.start_delay >= 100_000_000 && restarting.start_delay < 125_000_000);
        assert_eq!(restarting.restart_reason, "Restart within policy");
        assert!(
            restarting
                .display_message
                .starts_with("Task restarting in 1")
        );
        let not_restarting = state.events.last().unwrap();
        assert_eq!(
            not_restarting.display_message,
            "Exceeded allowed attempts 1 in interval 1m0s and mode is \"fail\""
        );
        assert!(not_restarting.fails_task);
        let runs = std::fs::read_to_string(harness.ctx.dirs.local.join("runs")).unwrap();
        assert_eq!(runs, "run\nrun\n");
        assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
        assert_eq!(record.local.pid, None);
    }

    #[tokio::test]
    async fn a_successful_batch_task_is_not_restarted() {
        let harness = harness("batch", "exit 0", policy(3, 100));
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        assert_eq!(
            types(&record.state),
            vec!["Received", "Task Setup", "Started", "Terminated"]
        );
        assert_eq!(record.state.state, "dead");
        assert!(!record.state.failed);
    }

    #[tokio::test]
    async fn zero_attempts_fail_at_the_first_exit() {
        let harness = harness("service", "exit 0", policy(0, 100));
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        assert_eq!(
            record.state.events.last().unwrap().display_message,
            "Policy allows no restarts"
        );
        assert!(record.state.failed);
    }

    #[tokio::test]
    async fn a_start_failure_is_unrecoverable() {
        let mut harness = harness("service", "", policy(3, 100));
        harness.ctx.task.config =
            BTreeMap::from([("command".to_owned(), json!("/no/such/binary"))]);
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        assert_eq!(
            types(&record.state),
            vec!["Received", "Task Setup", "Driver Failure", "Not Restarting"]
        );
        assert_eq!(
            record.state.events[3].restart_reason,
            "Error was unrecoverable"
        );
        assert!(record.state.failed);

        harness.ctx.task.driver = "docker".to_owned();
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        assert!(record.state.events[2].driver_error.contains("\"docker\""));

        harness.ctx.task.driver = RAW_EXEC.to_owned();
        harness.ctx.task.config = BTreeMap::new();
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), None).run(rx).await;
        assert_eq!(types(&record.state)[2], "Failed Validation");
    }

    #[tokio::test]
    async fn a_killed_task_emits_killing_terminated_killed() {
        let mut harness = harness("service", "echo up; sleep 10", policy(3, 100));
        harness.ctx.task.kill_signal = "SIGTERM".to_owned();
        let (tx, rx) = mpsc::unbounded_channel();
        let runner = tokio::spawn(TaskRunner::new(harness.ctx.clone(), None).run(rx));
        wait_running(&mut harness.updates).await;
        // A signal that lands between the wrapper's fork and exec is lost (see raw_exec).
        let stdout = harness.ctx.dirs.stdout.clone();
        wait_for(|| std::fs::read_to_string(&stdout).unwrap_or_default() == "up\n").await;
        tx.send(TaskCommand::Kill {
            delay: Duration::ZERO,
            events: vec![events::killing(harness.ctx.kill_timeout())],
        })
        .unwrap();
        let record = runner.await.unwrap();
        assert_eq!(
            types(&record.state),
            vec![
                "Received",
                "Task Setup",
                "Started",
                "Killing",
                "Terminated",
                "Killed"
            ]
        );
        assert_eq!(record.state.events[4].exit_code, 143);
        assert_eq!(record.state.events[4].signal, 15);
        assert_eq!(record.state.state, "dead");
        assert!(!record.state.failed);
    }

    #[tokio::test]
    async fn signal_and_user_restart_reach_the_process() {
        let harness = harness(
            "service",
            "trap 'echo usr1 >> \"$NOMAD_TASK_DIR/log\"' USR1; echo start >> \"$NOMAD_TASK_DIR/log\"; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done",
            policy(0, 100),
        );
        let mut harness = harness;
        let (tx, rx) = mpsc::unbounded_channel();
        let runner = tokio::spawn(TaskRunner::new(harness.ctx.clone(), None).run(rx));
        wait_running(&mut harness.updates).await;
        let log = harness.ctx.dirs.local.join("log");
        wait_for(|| {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("start")
        })
        .await;

        let (reply, answer) = oneshot::channel();
        tx.send(TaskCommand::Signal {
            signal: "SIGUSR1".to_owned(),
            reply,
        })
        .unwrap();
        answer.await.unwrap().unwrap();
        wait_for(|| {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("usr1")
        })
        .await;

        // A user restart is not counted: attempts = 0 still restarts.
        let (reply, answer) = oneshot::channel();
        tx.send(TaskCommand::Restart {
            event: Box::new(events::restart_signaled("User requested task to restart")),
            reply,
        })
        .unwrap();
        answer.await.unwrap().unwrap();
        wait_for(|| {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("start")
                .count()
                == 2
        })
        .await;

        tx.send(TaskCommand::Kill {
            events: Vec::new(),
            delay: Duration::ZERO,
        })
        .unwrap();
        let record = runner.await.unwrap();
        let types = types(&record.state);
        assert_eq!(
            types[..],
            [
                "Received",
                "Task Setup",
                "Started",
                "Signaling",
                "Restart Signaled",
                "Terminated",
                "Restarting",
                "Started",
                "Terminated",
                "Killed"
            ]
        );
        assert_eq!(record.state.restarts, 1);
        assert_eq!(
            record.state.events[6].display_message,
            "Task restarting in 0s"
        );
    }

    #[tokio::test]
    async fn shutdown_detaches_and_a_new_runner_re_attaches() {
        let mut harness = harness(
            "batch",
            "n=0; while [ ! -e \"$NOMAD_TASK_DIR/go\" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; exit 5",
            policy(0, 100),
        );
        let (_tx, rx) = mpsc::unbounded_channel();
        let runner = tokio::spawn(TaskRunner::new(harness.ctx.clone(), None).run(rx));
        wait_running(&mut harness.updates).await;
        harness.shutdown.cancel();
        let record = runner.await.unwrap();
        assert_eq!(record.state.state, "running");
        let pid = record.local.pid.unwrap();
        let start_time = record.local.start_time.unwrap();
        assert!(raw_exec::is_alive(pid, start_time));

        // The "restarted agent".
        let shutdown = CancellationToken::new();
        harness.ctx.shutdown = shutdown;
        let (_tx, rx) = mpsc::unbounded_channel();
        let runner = tokio::spawn(TaskRunner::new(harness.ctx.clone(), Some(record)).run(rx));
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(harness.ctx.dirs.local.join("go"), "").unwrap();
        let record = runner.await.unwrap();
        assert_eq!(
            types(&record.state),
            vec![
                "Received",
                "Task Setup",
                "Started",
                "Terminated",
                "Not Restarting"
            ]
        );
        assert_eq!(record.state.events[3].exit_code, 5);
        assert!(record.state.failed);
    }

    #[tokio::test]
    async fn a_task_that_ended_while_the_agent_was_away_is_accounted_for() {
        let mut harness = harness(
            "batch",
            "n=0; while [ ! -e \"$NOMAD_TASK_DIR/go\" ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; exit 0",
            policy(2, 100),
        );
        let (_tx, rx) = mpsc::unbounded_channel();
        let runner = tokio::spawn(TaskRunner::new(harness.ctx.clone(), None).run(rx));
        wait_running(&mut harness.updates).await;
        harness.shutdown.cancel();
        let record = runner.await.unwrap();
        let (pid, start_time) = (record.local.pid.unwrap(), record.local.start_time.unwrap());
        std::fs::write(harness.ctx.dirs.local.join("go"), "").unwrap();
        wait_for(|| !raw_exec::is_alive(pid, start_time)).await;

        harness.ctx.shutdown = CancellationToken::new();
        let (_tx, rx) = mpsc::unbounded_channel();
        let record = TaskRunner::new(harness.ctx.clone(), Some(record))
            .run(rx)
            .await;
        assert_eq!(
            types(&record.state),
            vec!["Received", "Task Setup", "Started", "Terminated"]
        );
        assert_eq!(record.state.events[3].exit_code, 0);
        assert_eq!(record.state.state, "dead");
        assert!(!record.state.failed);
    }

    async fn wait_running(updates: &mut mpsc::UnboundedReceiver<TaskUpdate>) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(update) = updates.recv().await {
                if update.record.state.state == "running" {
                    return;
                }
            }
        })
        .await
        .unwrap();
    }

    async fn wait_for(mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "condition not met in time");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
