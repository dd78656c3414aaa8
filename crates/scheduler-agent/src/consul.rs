//! Services with provider `consul`: registered in a Consul-compatible agent API over HTTP (the
//! agent config's `consul { address }`; `cairn dev` passes its own session registry), as
//! Nomad's client does: `PUT /v1/agent/service/register` with the service's HTTP and TCP
//! checks (run by the registry itself) and its script checks as TTL checks (TTL = interval +
//! 31 s, as upstream), whose results the client's check loops push with `PUT
//! /v1/agent/check/update/:id`; and `PUT /v1/agent/service/deregister/:id` when the service
//! should no longer be there.
//!
//! The hook (`services.rs`) only changes the wanted set ([`Consul::register`],
//! [`Consul::deregister`]); [`Consul::run`] reconciles the registry with it: at once on a
//! change, and every [`RESYNC`] from a listing of the registry's services, so registrations
//! the registry lost (a restart) come back and ones this client no longer wants (it stopped
//! while a deregistration was pending, or its allocation is gone) are removed.
//!
//! Invariants: only services whose ID starts with [`OWNED_PREFIX`] (Nomad's task service IDs)
//! and whose `Meta` names this node ([`NODE_META`]) are ever deregistered from the registry,
//! so clients sharing one registry never remove each other's services; a failed call is retried (backoff up to 5 s),
//! never dropped; with no address configured nothing is sent and consul services are logged
//! and ignored; a TTL result is pushed only after its service is registered, and again after
//! the registry lost it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::checks::{CheckKind, CheckSpec};
use crate::services::ServiceSpec;

/// The prefix of the service IDs this client owns in the registry.
pub(crate) const OWNED_PREFIX: &str = "_nomad-task-";

/// The registration `Meta` key naming the client node that registered the service.
pub(crate) const NODE_META: &str = "cairn-node-id";

/// How often the registry is listed and brought in line even without a change.
const RESYNC: Duration = Duration::from_secs(30);

/// Upstream's `ttlCheckBuffer`: a script check's TTL is its interval plus this.
const TTL_BUFFER: Duration = Duration::from_secs(31);

/// Where consul services are registered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsulSettings {
    /// The registry's base URL, e.g. `http://127.0.0.1:8500` (a bare `host:port` is HTTP).
    pub address: String,
    /// An ACL token sent as `X-Consul-Token`, if the registry needs one.
    pub token: Option<String>,
}

#[derive(Debug)]
struct Inner {
    base: String,
    node_id: String,
    token: Option<String>,
    http: reqwest::Client,
    /// Service ID → its registration body.
    wanted: Mutex<BTreeMap<String, Value>>,
    /// TTL check ID → (its service ID, the update body: `Status`, `Output`).
    ttl: Mutex<BTreeMap<String, (String, Value)>>,
    changed: Notify,
}

/// The client's consul registrations (a no-op without an address).
#[derive(Debug, Clone, Default)]
pub(crate) struct Consul {
    inner: Option<Arc<Inner>>,
}

impl Consul {
    pub(crate) fn new(settings: Option<&ConsulSettings>, node_id: &str) -> Consul {
        let Some(settings) = settings.filter(|s| !s.address.trim().is_empty()) else {
            return Consul::default();
        };
        let address = settings.address.trim().trim_end_matches('/');
        let base = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Consul {
            inner: Some(Arc::new(Inner {
                base,
                node_id: node_id.to_owned(),
                token: settings.token.clone(),
                http,
                wanted: Mutex::new(BTreeMap::new()),
                ttl: Mutex::new(BTreeMap::new()),
                changed: Notify::new(),
            })),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Wants `spec` registered.
    pub(crate) fn register(&self, spec: &ServiceSpec) {
        let Some(inner) = &self.inner else { return };
        let body = registration(spec, &inner.node_id);
        inner
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(spec.registration.id.clone(), body);
        inner.changed.notify_one();
    }

    /// Wants the service `id` gone (with its TTL results).
    pub(crate) fn deregister(&self, id: &str) {
        let Some(inner) = &self.inner else { return };
        inner
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        inner
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|_, (service, _)| service != id);
        inner.changed.notify_one();
    }

    /// Records a script check's latest result for its TTL check in the registry.
    pub(crate) fn set_ttl(&self, service_id: &str, check_id: &str, passing: bool, output: &str) {
        let Some(inner) = &self.inner else { return };
        let body = json!({
            "Status": if passing { "passing" } else { "critical" },
            "Output": output,
        });
        let mut ttl = inner.ttl.lock().unwrap_or_else(PoisonError::into_inner);
        if ttl.get(check_id).is_some_and(|(_, old)| *old == body) {
            return;
        }
        ttl.insert(check_id.to_owned(), (service_id.to_owned(), body));
        drop(ttl);
        inner.changed.notify_one();
    }

    /// Reconciles the registry with the wanted set until `shutdown`.
    pub(crate) async fn run(&self, shutdown: CancellationToken) {
        let Some(inner) = &self.inner else { return };
        // What the registry holds of ours, as far as this loop knows.
        let mut pushed: BTreeMap<String, Value> = BTreeMap::new();
        let mut pushed_ttl: BTreeMap<String, Value> = BTreeMap::new();
        let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(5));
        // The first listing waits a whole period, so that after an agent restart the restored
        // runners want their services again before anything of this node is removed.
        let mut next_listing = tokio::time::Instant::now() + RESYNC;
        loop {
            let listing_due = tokio::time::Instant::now() >= next_listing;
            match inner
                .reconcile(&mut pushed, &mut pushed_ttl, listing_due)
                .await
            {
                Ok(()) => {
                    backoff.reset();
                    if listing_due {
                        next_listing = tokio::time::Instant::now() + RESYNC;
                    }
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = inner.changed.notified() => {}
                        () = tokio::time::sleep_until(next_listing) => {}
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, registry = %inner.base, "cannot sync consul services; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                    }
                }
            }
        }
    }
}

impl Inner {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.header("X-Consul-Token", token),
            None => request,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
        let response = request.send().await.map_err(|error| error.to_string())?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        Err(format!("{status}: {}", body.trim()))
    }

    /// One pass: (with `list`) forgets what the registry no longer has and removes what it has
    /// of ours that is not wanted; then registers what is wanted and not there, and
    /// deregisters what was pushed and is no longer wanted.
    async fn reconcile(
        &self,
        pushed: &mut BTreeMap<String, Value>,
        pushed_ttl: &mut BTreeMap<String, Value>,
        list: bool,
    ) -> Result<(), String> {
        let wanted = self
            .wanted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if list {
            let response = self
                .send(self.request(reqwest::Method::GET, "/v1/agent/services"))
                .await?;
            let services: BTreeMap<String, Value> =
                response.json().await.map_err(|error| error.to_string())?;
            pushed.retain(|id, _| services.contains_key(id));
            for (id, service) in &services {
                let mine = service["Meta"][NODE_META] == self.node_id.as_str();
                if mine && id.starts_with(OWNED_PREFIX) && !wanted.contains_key(id) {
                    pushed.insert(id.clone(), Value::Null);
                }
            }
        }
        for (id, body) in &wanted {
            if pushed.get(id) == Some(body) {
                continue;
            }
            tracing::info!(id, "registering consul service");
            self.send(
                self.request(reqwest::Method::PUT, "/v1/agent/service/register")
                    .json(body),
            )
            .await?;
            pushed.insert(id.clone(), body.clone());
            // A (re-)registered service's TTL checks start critical: push their results again.
            pushed_ttl.clear();
        }
        let unwanted: Vec<String> = pushed
            .keys()
            .filter(|id| !wanted.contains_key(*id))
            .cloned()
            .collect();
        for id in unwanted {
            tracing::info!(id, "deregistering consul service");
            let path = format!("/v1/agent/service/deregister/{id}");
            match self.send(self.request(reqwest::Method::PUT, &path)).await {
                Ok(_) => {}
                // Already gone.
                Err(error) if error.starts_with("404") => {}
                Err(error) => return Err(error),
            }
            pushed.remove(&id);
        }
        let ttl = self
            .ttl
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        pushed_ttl.retain(|id, _| ttl.contains_key(id));
        for (check_id, (service_id, body)) in &ttl {
            if !pushed.contains_key(service_id) || pushed_ttl.get(check_id) == Some(body) {
                continue;
            }
            let path = format!("/v1/agent/check/update/{check_id}");
            self.send(self.request(reqwest::Method::PUT, &path).json(body))
                .await?;
            pushed_ttl.insert(check_id.clone(), body.clone());
        }
        Ok(())
    }
}

/// A Go duration the registry parses.
fn go_duration(duration: Duration) -> String {
    format!("{}ms", duration.as_millis().max(1))
}

fn host_port(address: &str, port: i64) -> String {
    if address.contains(':') {
        format!("[{address}]:{port}")
    } else {
        format!("{address}:{port}")
    }
}

/// A check as Consul's agent API takes it; `None` for kinds the registry cannot run.
fn check(spec: &CheckSpec) -> Option<Value> {
    let mut body = json!({
        "CheckID": spec.id,
        "Name": spec.name,
        "Interval": go_duration(spec.interval),
        "Timeout": go_duration(spec.timeout),
    });
    match &spec.kind {
        CheckKind::Http {
            protocol,
            method,
            path,
            headers,
        } => {
            let path = if path.starts_with('/') || path.is_empty() {
                path.clone()
            } else {
                format!("/{path}")
            };
            body["HTTP"] = json!(format!(
                "{protocol}://{}{path}",
                host_port(&spec.address, spec.port)
            ));
            body["Method"] = json!(method);
            if !headers.is_empty() {
                body["Header"] = json!(headers);
            }
        }
        CheckKind::Tcp => body["TCP"] = json!(host_port(&spec.address, spec.port)),
        CheckKind::Script { .. } => {
            return Some(json!({
                "CheckID": spec.id,
                "Name": spec.name,
                "TTL": go_duration(spec.interval + TTL_BUFFER),
            }));
        }
        CheckKind::Unsupported(_) => return None,
    }
    Some(body)
}

/// The agent API's registration body of a service (Nomad's, with `external-source: nomad`, and
/// the registering node under [`NODE_META`]).
pub(crate) fn registration(spec: &ServiceSpec, node_id: &str) -> Value {
    let service = &spec.registration;
    let checks: Vec<Value> = spec.checks.iter().filter_map(check).collect();
    json!({
        "ID": service.id,
        "Name": service.service_name,
        "Tags": service.tags,
        "Address": service.address,
        "Port": service.port,
        "Meta": { "external-source": "nomad", NODE_META: node_id },
        "Checks": checks,
    })
}

#[cfg(test)]
mod tests {
    use scheduler_structs::ServiceRegistration;

    use super::*;

    fn spec() -> ServiceSpec {
        ServiceSpec {
            registration: ServiceRegistration {
                id: format!("{OWNED_PREFIX}a1-web-api-http"),
                service_name: "api".to_owned(),
                tags: vec!["v1".to_owned()],
                address: "10.0.0.2".to_owned(),
                port: 25_000,
                ..ServiceRegistration::default()
            },
            task: Some("web".to_owned()),
            checks: vec![
                CheckSpec {
                    id: "c1".to_owned(),
                    name: "alive".to_owned(),
                    service: "api".to_owned(),
                    group: "j.g[0]".to_owned(),
                    mode: "healthiness".to_owned(),
                    kind: CheckKind::Http {
                        protocol: "http".to_owned(),
                        method: "GET".to_owned(),
                        path: "health".to_owned(),
                        headers: BTreeMap::new(),
                    },
                    address: "10.0.0.2".to_owned(),
                    port: 25_000,
                    interval: Duration::from_secs(10),
                    timeout: Duration::from_secs(2),
                    task: None,
                },
                CheckSpec {
                    id: "c2".to_owned(),
                    name: "script".to_owned(),
                    service: "api".to_owned(),
                    group: "j.g[0]".to_owned(),
                    mode: "healthiness".to_owned(),
                    kind: CheckKind::Script {
                        command: "true".to_owned(),
                        args: Vec::new(),
                    },
                    address: String::new(),
                    port: 0,
                    interval: Duration::from_secs(10),
                    timeout: Duration::from_secs(2),
                    task: None,
                },
            ],
        }
    }

    #[test]
    fn a_registration_carries_the_service_and_its_http_check() {
        let body = registration(&spec(), "node-1");
        assert_eq!(body["Name"], "api");
        assert_eq!(body["Port"], 25_000);
        assert_eq!(body["Meta"]["external-source"], "nomad");
        assert_eq!(body["Meta"][NODE_META], "node-1");
        let checks = body["Checks"].as_array().unwrap();
        assert_eq!(checks.len(), 2, "{body}");
        assert_eq!(checks[0]["HTTP"], "http://10.0.0.2:25000/health");
        assert_eq!(checks[0]["Interval"], "10000ms");
        assert_eq!(checks[0]["CheckID"], "c1");
        assert_eq!(checks[1]["TTL"], "41000ms", "a script check is a TTL check");
        assert!(checks[1].get("Interval").is_none());
    }

    #[test]
    fn without_an_address_nothing_is_wanted() {
        let consul = Consul::new(None, "node-1");
        assert!(!consul.enabled());
        consul.register(&spec());
        consul.set_ttl("x", "c2", true, "ok");
        consul.deregister("x");
    }
}
