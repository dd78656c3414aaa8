//! The scheduler's own service registry (provider `nomad`) and the client-reported runtime of
//! allocations: `GET /v1/services`, `GET /v1/service/:name`, `GET /v1/allocation/:id/services`,
//! `GET /v1/allocation/:id/checks`, and the cairn-internal client calls that feed them
//! (`PUT /v1/internal/node/:id/runtime`, a node's whole report; `GET
//! /v1/internal/node/:id/overrides`, the blocking pull of pause overrides, served here for
//! `pause.rs`).
//!
//! Where it sits: clients run the checks and decide the registrations (addresses and ports come
//! from the allocations they run), then report them; this module keeps the latest report of
//! each node in memory ([`Runtime`]), as Nomad's servers keep service registrations while its
//! clients keep check results. A restarted server is whole again at each client's next report
//! (clients report on change and at least every 10 s); registrations of a node that stops
//! reporting are dropped with its report when the node re-registers empty.
//!
//! Invariants: a report replaces everything its node reported before (registrations keep their
//! `CreateIndex` while unchanged); every change bumps one index, which the blocking reads wait
//! on; a node may only report for itself (its SecretID, as every internal call).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{Path, State};
use http::HeaderMap;
use http_kit::RawBody;
use serde::Serialize;
use tokio::sync::watch;

use crate::Error;
use crate::acl::{Authz, Capability};
use crate::meta::{Indexed, QueryParams};
use crate::structs::{CheckResult, NodeRuntimeReport, ScheduleOverride, ServiceRegistration};

/// What the clients reported, and the pause overrides waiting for them.
#[derive(Debug)]
pub(crate) struct Runtime {
    inner: Mutex<RuntimeState>,
    index: watch::Sender<u64>,
}

#[derive(Debug, Default)]
pub(crate) struct RuntimeState {
    /// Node ID → its latest report.
    pub(crate) reports: HashMap<String, NodeRuntimeReport>,
    /// (allocation ID, task) → the latest override asked.
    pub(crate) overrides: BTreeMap<(String, String), ScheduleOverride>,
}

impl Default for Runtime {
    fn default() -> Runtime {
        Runtime {
            inner: Mutex::new(RuntimeState::default()),
            index: watch::Sender::new(1),
        }
    }
}

impl Runtime {
    /// Runs `change` under the lock and bumps the index; returns the new index.
    pub(crate) fn update<T>(&self, change: impl FnOnce(&mut RuntimeState, u64) -> T) -> (T, u64) {
        let mut state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let next = *self.index.borrow() + 1;
        let out = change(&mut state, next);
        self.index.send_replace(next);
        (out, next)
    }

    /// Reads under the lock, with the current index.
    pub(crate) fn read<T>(&self, read: impl FnOnce(&RuntimeState) -> T) -> (T, u64) {
        let state = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (read(&state), *self.index.borrow())
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.index.subscribe()
    }

    /// Every registration, in (namespace, name, ID) order.
    fn registrations(state: &RuntimeState) -> Vec<ServiceRegistration> {
        let mut all: Vec<ServiceRegistration> = state
            .reports
            .values()
            .flat_map(|report| report.services.iter().cloned())
            .collect();
        all.sort_by(|a, b| {
            (&a.namespace, &a.service_name, &a.id).cmp(&(&b.namespace, &b.service_name, &b.id))
        });
        all
    }
}

/// The node named `node_id`, checked against the request's secret (the client protocol's rule).
pub(crate) fn authenticate(
    state: &crate::State,
    headers: &HeaderMap,
    node_id: &str,
) -> Result<(), Error> {
    let snapshot = state.store().snapshot();
    let node = snapshot
        .node(node_id)
        .ok_or_else(|| Error::NotFound("node not found".to_owned()))?;
    let token = headers
        .get("x-scheduler-token")
        .and_then(|value| value.to_str().ok())
        .filter(|token| !token.is_empty())
        .or_else(|| http_kit::bearer_token(headers));
    if token != Some(node.secret_id.as_str()) {
        return Err(Error::PermissionDenied);
    }
    Ok(())
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RuntimeAnswer {
    index: u64,
}

/// `PUT /v1/internal/node/:node_id/runtime`: the node's whole runtime report.
pub(crate) async fn report(
    State(state): State<crate::State>,
    headers: HeaderMap,
    Path(node_id): Path<String>,
    RawBody { bytes: body, .. }: RawBody<Error>,
) -> Result<http_kit::Json<RuntimeAnswer>, Error> {
    authenticate(&state, &headers, &node_id)?;
    let mut report: NodeRuntimeReport = serde_json::from_slice(&body)
        .map_err(|error| Error::BadRequest(format!("invalid runtime report: {error}")))?;
    let ((), index) = state.runtime().update(|runtime, next| {
        let previous = runtime.reports.remove(&node_id).unwrap_or_default();
        for service in &mut report.services {
            service.node_id.clone_from(&node_id);
            let kept = previous.services.iter().find(|old| {
                old.id == service.id
                    && ServiceRegistration {
                        create_index: 0,
                        modify_index: 0,
                        ..(*old).clone()
                    } == ServiceRegistration {
                        create_index: 0,
                        modify_index: 0,
                        ..service.clone()
                    }
            });
            match kept {
                Some(old) => {
                    service.create_index = old.create_index;
                    service.modify_index = old.modify_index;
                }
                None => {
                    service.create_index = previous
                        .services
                        .iter()
                        .find(|old| old.id == service.id)
                        .map_or(next, |old| old.create_index);
                    service.modify_index = next;
                }
            }
        }
        // An override the client has applied (its reported state matches) is done with.
        runtime.overrides.retain(|(alloc, task), wanted| {
            let reported = report
                .schedules
                .get(alloc)
                .and_then(|tasks| tasks.get(task))
                .map(String::as_str);
            !matches!(
                (wanted.schedule_state.as_str(), reported),
                ("pause", Some("force_pause"))
                    | ("run", Some("force_run"))
                    | ("scheduled", Some("" | "scheduled_pause"))
            )
        });
        runtime.reports.insert(node_id.clone(), report);
    });
    Ok(http_kit::Json(RuntimeAnswer { index }))
}

/// `GET /v1/services` entry.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct NamespaceServices {
    namespace: String,
    services: Vec<ServiceStub>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct ServiceStub {
    service_name: String,
    tags: Vec<String>,
}

/// `GET /v1/services`: names and tags per namespace (`namespace=*` for all the caller may read).
pub(crate) async fn list(
    authz: Authz,
    State(state): State<crate::State>,
    query: QueryParams,
) -> Result<Indexed<Vec<NamespaceServices>>, Error> {
    let namespace = query.namespace().to_owned();
    let (all, index) = wait(&state, &query, Runtime::registrations).await?;
    let mut grouped: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for service in all {
        if namespace != "*" && service.namespace != namespace {
            continue;
        }
        if authz
            .allow_namespace(&service.namespace, Capability::ReadJob)
            .is_err()
        {
            continue;
        }
        let tags = grouped
            .entry(service.namespace.clone())
            .or_default()
            .entry(service.service_name.clone())
            .or_default();
        for tag in service.tags {
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
    }
    if namespace != "*" && grouped.is_empty() {
        authz.allow_namespace(&namespace, Capability::ReadJob)?;
    }
    let body = grouped
        .into_iter()
        .map(|(namespace, services)| NamespaceServices {
            namespace,
            services: services
                .into_iter()
                .map(|(service_name, mut tags)| {
                    tags.sort();
                    ServiceStub { service_name, tags }
                })
                .collect(),
        })
        .collect();
    Ok(Indexed::new(index, body))
}

/// `GET /v1/service/:name`: the registrations of one service in the namespace.
pub(crate) async fn read(
    authz: Authz,
    State(state): State<crate::State>,
    Path(name): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<ServiceRegistration>>, Error> {
    let namespace = query.namespace().to_owned();
    authz.allow_namespace(&namespace, Capability::ReadJob)?;
    let tag = query.get("tag").map(str::to_owned);
    let (services, index) = wait(&state, &query, |runtime| {
        Runtime::registrations(runtime)
            .into_iter()
            .filter(|service| service.namespace == namespace && service.service_name == name)
            .filter(|service| tag.as_ref().is_none_or(|tag| service.tags.contains(tag)))
            .collect::<Vec<_>>()
    })
    .await?;
    Ok(Indexed::new(index, services))
}

/// `GET /v1/allocation/:alloc_id/services`.
pub(crate) async fn for_alloc(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
    query: QueryParams,
) -> Result<Indexed<Vec<ServiceRegistration>>, Error> {
    let namespace = alloc_namespace(&state, &alloc_id)?;
    authz.allow_namespace(&namespace, Capability::ReadJob)?;
    let (services, index) = wait(&state, &query, |runtime| {
        Runtime::registrations(runtime)
            .into_iter()
            .filter(|service| service.alloc_id == alloc_id)
            .collect::<Vec<_>>()
    })
    .await?;
    Ok(Indexed::new(index, services))
}

/// `GET /v1/allocation/:alloc_id/checks`: check ID → the latest result (not blocking).
pub(crate) async fn checks(
    authz: Authz,
    State(state): State<crate::State>,
    Path(alloc_id): Path<String>,
) -> Result<http_kit::Json<BTreeMap<String, CheckResult>>, Error> {
    let namespace = alloc_namespace(&state, &alloc_id)?;
    authz.allow_namespace(&namespace, Capability::ReadJob)?;
    let (checks, _) = state.runtime().read(|runtime| {
        runtime
            .reports
            .values()
            .find_map(|report| report.checks.get(&alloc_id).cloned())
            .unwrap_or_default()
    });
    Ok(http_kit::Json(checks))
}

/// The namespace of a known allocation, or Nomad's 404.
pub(crate) fn alloc_namespace(state: &crate::State, alloc_id: &str) -> Result<String, Error> {
    state
        .store()
        .snapshot()
        .alloc(alloc_id)
        .map(|alloc| alloc.namespace.clone())
        .ok_or_else(|| Error::NotFound("allocation not found".to_owned()))
}

/// A blocking read of the runtime (`?index=&wait=`).
async fn wait<T>(
    state: &crate::State,
    query: &QueryParams,
    mut read: impl FnMut(&RuntimeState) -> T,
) -> Result<(T, u64), Error> {
    let runtime = Arc::clone(state.runtime_arc());
    http_kit::blocking::block_watch(
        runtime.subscribe(),
        &query.blocking()?,
        Some(state.shutdown_token()),
        |_| Ok(runtime.read(&mut read)),
    )
    .await
}
