//! Watches the allocations the server placed on this node (a blocking query) and keeps one
//! alloc runner per allocation: starts runners for new allocations, resumes the ones the agent
//! ran before a restart (from their state files), forwards updates, and destroys allocations
//! the server garbage-collected.
//!
//! Invariants:
//! - nothing is started, resumed or destroyed before the first successful answer from the
//!   server, so a restarted agent never acts on stale local state alone;
//! - an allocation the server still lists is never destroyed, including one the agent could
//!   not decode;
//! - a terminal allocation the agent never ran is not started; a finished runner is not
//!   started again;
//! - every runner lives in this watcher's `JoinSet` and is joined before `run` returns;
//! - the server sends whole only the allocations changed since the highest `AllocModifyIndex`
//!   the watcher received whole (`since`), the others as stubs: a stub counts as listed, and a
//!   stub that differs from the allocation held (the server's state went back) makes the next
//!   query ask for every allocation whole, at once. A client holding n allocations thus reads
//!   one allocation, not n, when one changes (reading all n each time was quadratic).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use scheduler_structs::Allocation;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::Shared;
use crate::alloc_runner::{AllocCommand, AllocRunner, RunnerExit};
use crate::backoff::Backoff;
use crate::server_client::{NodeAllocations, ServerClient, ServerError};
use crate::state::is_safe_component;

/// How long runners may take to detach at shutdown before they are aborted.
const DETACH_TIMEOUT: Duration = Duration::from_secs(5);

/// A response that came back this fast without a newer index is not a real wait: slow down.
const MIN_QUERY_SPACING: Duration = Duration::from_millis(500);

type Fetch = Pin<Box<dyn Future<Output = Result<NodeAllocations, ServerError>> + Send>>;

/// Runs until `shared.shutdown`; `epoch` counts node registrations (0: not registered yet).
pub(crate) async fn run(
    shared: Arc<Shared>,
    client: Arc<ServerClient>,
    mut epoch: watch::Receiver<u64>,
    wait: Duration,
) {
    let shutdown = shared.shutdown.clone();
    tokio::select! {
        () = shutdown.cancelled() => return,
        registered = epoch.wait_for(|epoch| *epoch > 0) => if registered.is_err() { return },
    }
    epoch.borrow_and_update();

    let mut watcher = Watcher {
        shared,
        runners: JoinSet::new(),
        tasks: HashMap::new(),
        allocs: HashMap::new(),
        synced: false,
    };
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(10));
    let mut index = 0;
    // The highest `AllocModifyIndex` received whole (0: ask for every allocation whole).
    let mut since = 0;
    let mut asked_at = Instant::now();
    let mut fetch = fetch(
        &client,
        &watcher.shared.node.id,
        (index, since),
        wait,
        Duration::ZERO,
    );
    let mut epoch_open = true;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            Some(joined) = watcher.runners.join_next_with_id(), if !watcher.runners.is_empty() => {
                watcher.on_runner_exit(joined);
            }
            changed = epoch.changed(), if epoch_open => {
                if changed.is_err() {
                    epoch_open = false;
                    continue;
                }
                // Registered again (the server may have restarted): start over from index 0.
                index = 0;
                since = 0;
                asked_at = Instant::now();
                fetch = self::fetch(
                    &client,
                    &watcher.shared.node.id,
                    (index, since),
                    wait,
                    Duration::ZERO,
                );
            }
            result = &mut fetch => {
                let delay = match result {
                    Ok(answer) => {
                        backoff.reset();
                        let unchanged = answer.index <= index;
                        index = answer.index;
                        let newest = answer
                            .allocs
                            .iter()
                            .map(|alloc| alloc.alloc_modify_index)
                            .max()
                            .unwrap_or(0);
                        if watcher.reconcile(answer) {
                            since = since.max(newest);
                        } else {
                            // A stub differs from what is held: everything whole, now.
                            since = 0;
                            index = 0;
                        }
                        if unchanged && asked_at.elapsed() < MIN_QUERY_SPACING {
                            MIN_QUERY_SPACING
                        } else {
                            Duration::ZERO
                        }
                    }
                    Err(error) => {
                        let delay = backoff.next_delay();
                        tracing::warn!(%error, retry_in = ?delay, "cannot fetch this node's allocations");
                        delay
                    }
                };
                asked_at = Instant::now() + delay;
                fetch = self::fetch(&client, &watcher.shared.node.id, (index, since), wait, delay);
            }
        }
    }
    drop(fetch);
    watcher.detach().await;
}

/// The node's allocations once its index passes `index`, those changed since `since` whole.
fn fetch(
    client: &Arc<ServerClient>,
    node_id: &str,
    (index, since): (u64, u64),
    wait: Duration,
    delay: Duration,
) -> Fetch {
    let client = client.clone();
    let node_id = node_id.to_owned();
    Box::pin(async move {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        client.allocations(&node_id, index, since, wait).await
    })
}

#[derive(Debug)]
struct Entry {
    /// The runner's command channel; `None` once it finished (or never ran).
    commands: Option<mpsc::UnboundedSender<AllocCommand>>,
    alloc_modify_index: u64,
    desired_status: String,
}

#[derive(Debug)]
struct Watcher {
    shared: Arc<Shared>,
    runners: JoinSet<RunnerExit>,
    /// Runner task id → allocation id.
    tasks: HashMap<tokio::task::Id, String>,
    allocs: HashMap<String, Entry>,
    synced: bool,
}

impl Watcher {
    /// Acts on an answer; false if a stub differs from the allocation held (the answer is
    /// then incomplete: the caller asks again for every allocation whole).
    fn reconcile(&mut self, answer: NodeAllocations) -> bool {
        let mut listed: HashSet<String> = answer.undecodable.into_iter().collect();
        let mut consistent = true;
        for stub in answer.unchanged {
            // A stub of an allocation not held (one never decoded, or skipped below) is kept
            // listed as it was; one held with another version needs the whole allocation.
            if let Some(entry) = self.allocs.get(&stub.id)
                && (entry.alloc_modify_index != stub.alloc_modify_index
                    || entry.desired_status != stub.desired_status)
            {
                consistent = false;
            }
            listed.insert(stub.id);
        }
        for alloc in answer.allocs {
            if !is_safe_component(&alloc.id) {
                tracing::warn!(alloc_id = %alloc.id, "ignoring an allocation with an unusable id");
                continue;
            }
            listed.insert(alloc.id.clone());
            match self.allocs.get_mut(&alloc.id) {
                Some(entry) => {
                    // Client updates bump `ModifyIndex` only; the server's changes bump
                    // `AllocModifyIndex`.
                    let changed = entry.alloc_modify_index != alloc.alloc_modify_index
                        || entry.desired_status != alloc.desired_status;
                    if !changed {
                        continue;
                    }
                    entry.alloc_modify_index = alloc.alloc_modify_index;
                    entry.desired_status.clone_from(&alloc.desired_status);
                    if let Some(commands) = &entry.commands {
                        let _ = commands.send(AllocCommand::Update(Arc::new(alloc)));
                    }
                }
                None => {
                    let restored = self.shared.state.load_alloc(&alloc.id);
                    if restored.is_none() && alloc.terminal() {
                        // Stopped before this client ever ran it: it ends complete, its
                        // tasks dead, as upstream's runner would leave it (never pending).
                        if !alloc.client_terminal() {
                            let _ = self.shared.updates.send(never_ran(&alloc));
                        }
                        self.allocs.insert(alloc.id.clone(), entry_of(&alloc, None));
                        continue;
                    }
                    self.start(alloc, restored, false);
                }
            }
        }

        // Garbage-collected by the server.
        let gone: Vec<String> = self
            .allocs
            .keys()
            .filter(|id| !listed.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            let Some(entry) = self.allocs.get_mut(&id) else {
                continue;
            };
            match &entry.commands {
                Some(commands) => {
                    let _ = commands.send(AllocCommand::Destroy);
                }
                None => {
                    self.shared.state.remove_alloc(&id);
                    self.allocs.remove(&id);
                }
            }
        }

        // Once: allocations known only from local state are gone from the server too.
        if !self.synced {
            self.synced = true;
            for id in self.shared.state.alloc_ids() {
                if listed.contains(&id) || self.allocs.contains_key(&id) {
                    continue;
                }
                match self.shared.state.load_alloc(&id) {
                    Some(record) => {
                        let alloc = record.alloc.clone();
                        self.start(alloc, Some(record), true);
                    }
                    None => self.shared.state.remove_alloc(&id),
                }
            }
        }
        consistent
    }

    fn start(
        &mut self,
        alloc: Allocation,
        restored: Option<crate::state::AllocRecord>,
        destroy: bool,
    ) {
        let (commands, receiver) = mpsc::unbounded_channel();
        if destroy {
            let _ = commands.send(AllocCommand::Destroy);
        }
        let id = alloc.id.clone();
        tracing::info!(alloc_id = %id, resumed = restored.is_some(), destroy, "starting allocation runner");
        let entry = entry_of(&alloc, Some(commands));
        let runner = AllocRunner::new(self.shared.clone(), alloc, restored);
        let handle = self.runners.spawn(runner.run(receiver));
        self.tasks.insert(handle.id(), id.clone());
        self.allocs.insert(id, entry);
    }

    fn on_runner_exit(
        &mut self,
        joined: Result<(tokio::task::Id, RunnerExit), tokio::task::JoinError>,
    ) {
        let (task_id, exit) = match joined {
            Ok((task_id, exit)) => (task_id, Some(exit)),
            Err(error) => {
                tracing::error!(%error, "an allocation runner failed");
                (error.id(), None)
            }
        };
        let Some(alloc_id) = self.tasks.remove(&task_id) else {
            return;
        };
        match exit {
            Some(RunnerExit::Destroyed) => {
                self.allocs.remove(&alloc_id);
            }
            Some(RunnerExit::Finished | RunnerExit::Detached) | None => {
                if let Some(entry) = self.allocs.get_mut(&alloc_id) {
                    entry.commands = None;
                }
            }
        }
    }

    /// Waits for every runner to detach (they watch the shutdown token), aborting stragglers.
    async fn detach(mut self) {
        let joined = tokio::time::timeout(DETACH_TIMEOUT, async {
            while self.runners.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            tracing::warn!("allocation runners did not detach in time; aborting them");
            self.runners.shutdown().await;
        }
    }
}

fn entry_of(alloc: &Allocation, commands: Option<mpsc::UnboundedSender<AllocCommand>>) -> Entry {
    Entry {
        commands,
        alloc_modify_index: alloc.alloc_modify_index,
        desired_status: alloc.desired_status.clone(),
    }
}

/// The final report of an allocation stopped before it was started here.
fn never_ran(alloc: &Allocation) -> scheduler_structs::AllocClientUpdate {
    use scheduler_structs::{ALLOC_CLIENT_COMPLETE, TASK_STATE_DEAD, TaskState};
    let tasks: Vec<String> = alloc
        .job
        .as_deref()
        .and_then(|job| job.task_group(&alloc.task_group))
        .map(|group| group.tasks.iter().map(|task| task.name.clone()).collect())
        .unwrap_or_default();
    scheduler_structs::AllocClientUpdate {
        id: alloc.id.clone(),
        node_id: alloc.node_id.clone(),
        client_status: ALLOC_CLIENT_COMPLETE.to_owned(),
        client_description: "Allocation stopped before it ran".to_owned(),
        task_states: tasks
            .into_iter()
            .map(|name| {
                let state = TaskState {
                    state: TASK_STATE_DEAD.to_owned(),
                    ..TaskState::default()
                };
                (name, state)
            })
            .collect(),
    }
}
