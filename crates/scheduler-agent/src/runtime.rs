//! The node's runtime report (cairn's internal client protocol, `PUT
//! /v1/internal/node/:id/runtime`): the services this client registered for its allocations
//! (provider `nomad`), the latest result of each of their checks, and each scheduled task's
//! `ScheduleState`; plus the pause overrides pulled from the server (`GET
//! /v1/internal/node/:id/overrides`, blocking) that the schedule gates (`schedule.rs`) apply.
//!
//! Where it sits: `services.rs` and `checks.rs` write registrations and results here,
//! `schedule.rs` writes schedule states and reads overrides; [`run_reporter`] sends the whole
//! report whenever it changed (coalesced over [`REPORT_COALESCE`]) and at least every
//! [`REPORT_INTERVAL`], so a restarted server is whole again within that interval;
//! [`run_override_puller`] keeps the overrides current. Both loops run in `Agent::run`.
//!
//! Invariants: a report is always the node's whole runtime (the server replaces the previous
//! one), so an allocation removed here is deregistered by the next report; every change bumps
//! one counter the reporter waits on; an override is applied at most once per server index
//! (re-applying one is harmless anyway: it sets the same state); the overrides in force are
//! persisted in the data dir on every change and restored before any task runs, so a forced
//! pause or run survives an agent restart (the server forgets an override once applied).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use scheduler_structs::{CheckResult, NodeRuntimeReport, ServiceRegistration};
use tokio::sync::watch;

use crate::Shared;
use crate::backoff::Backoff;
use crate::server_client::ServerClient;
use crate::state::StateDir;

/// How long changes are coalesced before a report is sent.
pub(crate) const REPORT_COALESCE: Duration = Duration::from_millis(100);

/// A report is sent at least this often, changed or not.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// A pause override as the client applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Override {
    /// `pause`: the task stays stopped whatever its schedule says (`force_pause`).
    Pause,
    /// `run`: the task runs whatever its schedule says (`force_run`).
    Run,
}

/// What the node knows about one allocation's runtime.
#[derive(Debug, Clone, Default)]
struct AllocRuntime {
    /// Service ID → registration.
    services: BTreeMap<String, ServiceRegistration>,
    /// Check ID → latest result.
    checks: BTreeMap<String, CheckResult>,
    /// Task → `ScheduleState` (tasks with a schedule only).
    schedules: BTreeMap<String, String>,
}

#[derive(Debug, Default)]
struct RuntimeState {
    allocs: BTreeMap<String, AllocRuntime>,
    /// (allocation, task) → the override in force.
    overrides: BTreeMap<(String, String), Override>,
}

/// The node's runtime facts, shared by the alloc runners, their hooks and the reporter.
#[derive(Debug)]
pub(crate) struct Runtime {
    state: Mutex<RuntimeState>,
    /// Bumped on every change of what is reported.
    changed: watch::Sender<u64>,
    /// Bumped on every change of the overrides (schedule gates wait on it).
    overrides_changed: watch::Sender<u64>,
    /// Where the overrides are persisted (none in unit tests).
    store: Option<StateDir>,
}

impl Default for Runtime {
    fn default() -> Runtime {
        Runtime {
            state: Mutex::new(RuntimeState::default()),
            changed: watch::Sender::new(0),
            overrides_changed: watch::Sender::new(0),
            store: None,
        }
    }
}

impl Runtime {
    /// A runtime with the overrides persisted in `store` (restored from it now).
    pub(crate) fn restored(store: StateDir) -> Runtime {
        let mut state = RuntimeState::default();
        for (alloc, task, wanted) in store.load_overrides() {
            let wanted = match wanted.as_str() {
                "pause" => Override::Pause,
                "run" => Override::Run,
                _ => continue,
            };
            state.overrides.insert((alloc, task), wanted);
        }
        Runtime {
            state: Mutex::new(state),
            store: Some(store),
            ..Runtime::default()
        }
    }

    /// Writes the overrides in force to the data dir.
    fn persist_overrides(&self, state: &RuntimeState) {
        let Some(store) = &self.store else {
            return;
        };
        let list: Vec<(String, String, String)> = state
            .overrides
            .iter()
            .map(|((alloc, task), wanted)| {
                let wanted = match wanted {
                    Override::Pause => "pause",
                    Override::Run => "run",
                };
                (alloc.clone(), task.clone(), wanted.to_owned())
            })
            .collect();
        if let Err(error) = store.save_overrides(&list) {
            tracing::error!(%error, "cannot persist schedule overrides");
        }
    }

    fn change<T>(&self, apply: impl FnOnce(&mut RuntimeState) -> T) -> T {
        let out = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            apply(&mut state)
        };
        self.changed.send_modify(|count| *count += 1);
        out
    }

    /// Registers (or updates) a service of `alloc_id`.
    pub(crate) fn register(&self, registration: ServiceRegistration) {
        self.change(|state| {
            state
                .allocs
                .entry(registration.alloc_id.clone())
                .or_default()
                .services
                .insert(registration.id.clone(), registration);
        });
    }

    /// Deregisters a service and drops its checks' results.
    pub(crate) fn deregister(&self, alloc_id: &str, service_id: &str, check_ids: &[String]) {
        self.change(|state| {
            if let Some(alloc) = state.allocs.get_mut(alloc_id) {
                alloc.services.remove(service_id);
                for id in check_ids {
                    alloc.checks.remove(id);
                }
            }
        });
    }

    /// Records a check's latest result.
    pub(crate) fn set_check(&self, alloc_id: &str, result: CheckResult) {
        self.change(|state| {
            state
                .allocs
                .entry(alloc_id.to_owned())
                .or_default()
                .checks
                .insert(result.id.clone(), result);
        });
    }

    /// Records a scheduled task's `ScheduleState` (a no-op when unchanged).
    pub(crate) fn set_schedule(&self, alloc_id: &str, task: &str, schedule_state: &str) {
        let same = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state
                .allocs
                .get(alloc_id)
                .and_then(|alloc| alloc.schedules.get(task))
                .is_some_and(|current| current == schedule_state)
        };
        if same {
            return;
        }
        self.change(|state| {
            state
                .allocs
                .entry(alloc_id.to_owned())
                .or_default()
                .schedules
                .insert(task.to_owned(), schedule_state.to_owned());
        });
    }

    /// Forgets everything about an allocation (its services are deregistered by the next
    /// report) and its overrides.
    pub(crate) fn remove_alloc(&self, alloc_id: &str) {
        self.change(|state| {
            state.allocs.remove(alloc_id);
            let before = state.overrides.len();
            state.overrides.retain(|(alloc, _), _| alloc != alloc_id);
            if state.overrides.len() != before {
                self.persist_overrides(state);
            }
        });
    }

    /// The override in force for a task.
    pub(crate) fn override_of(&self, alloc_id: &str, task: &str) -> Option<Override> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .overrides
            .get(&(alloc_id.to_owned(), task.to_owned()))
            .copied()
    }

    /// Sets (`Some`) or removes (`None`, `scheduled`) a task's override.
    pub(crate) fn set_override(&self, alloc_id: &str, task: &str, wanted: Option<Override>) {
        {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            let key = (alloc_id.to_owned(), task.to_owned());
            match wanted {
                Some(wanted) => state.overrides.insert(key, wanted),
                None => state.overrides.remove(&key),
            };
            self.persist_overrides(&state);
        }
        self.overrides_changed.send_modify(|count| *count += 1);
    }

    /// A receiver that sees every change of the overrides.
    pub(crate) fn watch_overrides(&self) -> watch::Receiver<u64> {
        self.overrides_changed.subscribe()
    }

    /// The whole report as the server takes it.
    pub(crate) fn report(&self) -> NodeRuntimeReport {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut report = NodeRuntimeReport::default();
        for (alloc_id, alloc) in &state.allocs {
            report.services.extend(alloc.services.values().cloned());
            if !alloc.checks.is_empty() {
                report.checks.insert(alloc_id.clone(), alloc.checks.clone());
            }
            if !alloc.schedules.is_empty() {
                report
                    .schedules
                    .insert(alloc_id.clone(), alloc.schedules.clone());
            }
        }
        report
    }
}

/// Sends the node's runtime report on change and every [`REPORT_INTERVAL`] until shutdown;
/// starts once the node is registered (`epoch` > 0) and reports again after each
/// re-registration.
pub(crate) async fn run_reporter(
    shared: Arc<Shared>,
    client: Arc<ServerClient>,
    mut epoch: watch::Receiver<u64>,
) {
    let shutdown = shared.shutdown.clone();
    tokio::select! {
        () = shutdown.cancelled() => return,
        registered = epoch.wait_for(|epoch| *epoch > 0) => if registered.is_err() { return },
    }
    let mut changed = shared.runtime.changed.subscribe();
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        changed.borrow_and_update();
        let report = shared.runtime.report();
        let sent = tokio::select! {
            () = shutdown.cancelled() => return,
            sent = client.report_runtime(&shared.node.id, &report) => sent,
        };
        let wait = match sent {
            Ok(()) => {
                backoff.reset();
                REPORT_INTERVAL
            }
            Err(error) => {
                tracing::debug!(%error, "cannot send the runtime report");
                backoff.next_delay()
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
            Ok(()) = changed.changed() => tokio::time::sleep(REPORT_COALESCE).await,
            Ok(()) = epoch.changed() => {}
        }
    }
}

/// Pulls the pause overrides of this node's allocations (a blocking query) and applies each
/// once, until shutdown.
pub(crate) async fn run_override_puller(
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
    let mut index = 0;
    let mut applied: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
    loop {
        let pulled = tokio::select! {
            () = shutdown.cancelled() => return,
            pulled = client.overrides(&shared.node.id, index, wait) => pulled,
        };
        match pulled {
            Ok((overrides, new_index)) => {
                backoff.reset();
                if new_index < index {
                    // The server restarted: its indexes start again.
                    applied.clear();
                }
                index = new_index;
                for wanted in overrides {
                    let key = (wanted.alloc_id.clone(), wanted.task.clone());
                    if applied.get(&key) == Some(&wanted.index) {
                        continue;
                    }
                    let state = match wanted.schedule_state.as_str() {
                        "pause" => Some(Override::Pause),
                        "run" => Some(Override::Run),
                        _ => None,
                    };
                    tracing::info!(alloc_id = %wanted.alloc_id, task = %wanted.task, schedule_state = %wanted.schedule_state, "applying a schedule override");
                    shared
                        .runtime
                        .set_override(&wanted.alloc_id, &wanted.task, state);
                    applied.insert(key, wanted.index);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "cannot pull schedule overrides");
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(backoff.next_delay()) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(alloc: &str, id: &str) -> ServiceRegistration {
        ServiceRegistration {
            id: id.to_owned(),
            alloc_id: alloc.to_owned(),
            service_name: "web".to_owned(),
            ..ServiceRegistration::default()
        }
    }

    #[test]
    fn the_report_is_the_whole_runtime_and_a_removed_allocation_leaves_it() {
        let runtime = Runtime::default();
        runtime.register(registration("a1", "s1"));
        runtime.register(registration("a2", "s2"));
        runtime.set_check(
            "a1",
            CheckResult {
                id: "c1".to_owned(),
                status: "pending".to_owned(),
                ..CheckResult::default()
            },
        );
        runtime.set_schedule("a2", "main", "scheduled_pause");
        let report = runtime.report();
        assert_eq!(report.services.len(), 2);
        assert_eq!(report.checks["a1"]["c1"].status, "pending");
        assert_eq!(report.schedules["a2"]["main"], "scheduled_pause");

        runtime.deregister("a1", "s1", &["c1".to_owned()]);
        runtime.remove_alloc("a2");
        let report = runtime.report();
        assert!(report.services.is_empty());
        assert!(report.checks.is_empty() && report.schedules.is_empty());
    }

    #[test]
    fn overrides_in_force_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateDir::new(dir.path().to_path_buf());
        store.init().unwrap();
        let runtime = Runtime::restored(store.clone());
        runtime.set_override("a1", "main", Some(Override::Pause));
        runtime.set_override("a2", "main", Some(Override::Run));
        runtime.set_override("a2", "other", Some(Override::Run));
        runtime.set_override("a2", "other", None);
        let again = Runtime::restored(store.clone());
        assert_eq!(again.override_of("a1", "main"), Some(Override::Pause));
        assert_eq!(again.override_of("a2", "main"), Some(Override::Run));
        assert_eq!(again.override_of("a2", "other"), None);
        again.remove_alloc("a1");
        assert_eq!(Runtime::restored(store).override_of("a1", "main"), None);
    }

    #[test]
    fn overrides_are_set_and_removed_per_task() {
        let runtime = Runtime::default();
        let mut watch = runtime.watch_overrides();
        runtime.set_override("a1", "main", Some(Override::Pause));
        assert!(watch.has_changed().unwrap());
        watch.borrow_and_update();
        assert_eq!(runtime.override_of("a1", "main"), Some(Override::Pause));
        assert_eq!(runtime.override_of("a1", "other"), None);
        runtime.set_override("a1", "main", None);
        assert_eq!(runtime.override_of("a1", "main"), None);
        runtime.set_override("a1", "main", Some(Override::Run));
        runtime.remove_alloc("a1");
        assert_eq!(runtime.override_of("a1", "main"), None);
    }
}
