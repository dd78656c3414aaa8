//! Nomad-native services (provider `nomad`) of an allocation: the group's and each task's
//! `service` blocks turned into registrations (Nomad's `ServiceRegistration`: ID
//! `_nomad-task-<alloc>-<task|group-<name>>-<service>-<port label>`, the address and port of
//! the port label in the allocation's networks, as `ports.rs` filled them) and their checks
//! into [`CheckSpec`](crate::checks::CheckSpec)s for `checks.rs`; and [`AllocServices`], the alloc runner's hook that
//! keeps them registered in the node's runtime (`runtime.rs`) exactly while they should be.
//!
//! Lifecycle (upstream's group and task service hooks): group services are registered while
//! the allocation runs and is not being stopped; a task's services while that task runs; a
//! stop deregisters them before any kill or shutdown delay, so traffic drains first. Services
//! of provider `consul` follow the same lifecycle but go to the Consul-compatible registry
//! the agent is configured with (`consul.rs`, which also carries their HTTP and TCP checks);
//! without one they are logged and ignored.
//!
//! Names, tags, port labels and the checks' paths, commands, arguments and headers are
//! interpolated with the task's environment (the group's runtime variables for a group
//! service), so `${NOMAD_JOB_NAME}-web` or `${NOMAD_ALLOC_INDEX}` work as upstream.
//!
//! Invariants: building is pure (the allocation and job in, specs out); a registration's ID
//! and a check's ID are stable for the same allocation and block, so a re-registration after
//! a task restart is the same service; every check loop lives in the hook's `JoinSet`, which
//! is aborted with the hook.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use scheduler_structs::{
    Allocation, CheckResult, Job, NetworkResource, Node, ServiceRegistration, TASK_STATE_RUNNING,
    Task, TaskState,
};
use serde::Deserialize;
use tokio::task::JoinSet;

use crate::Shared;
use crate::checks::{self, CheckKind, CheckSpec, ScriptContext};
use crate::env::{EnvInputs, TaskEnv};
use crate::time::duration_of;

/// The provider this client registers in the scheduler's own registry.
const PROVIDER_NOMAD: &str = "nomad";
/// The provider registered in a Consul-compatible registry (`consul.rs`).
const PROVIDER_CONSUL: &str = "consul";

/// Nomad's default check interval and timeout when a block leaves them out.
const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10);
const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// A `service` block as the job carries it (API JSON).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ServiceBlock {
    name: String,
    port_label: String,
    tags: Vec<String>,
    address: String,
    provider: String,
    checks: Vec<CheckBlock>,
}

/// A `check` block.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct CheckBlock {
    name: String,
    #[serde(rename = "Type")]
    kind: String,
    command: String,
    args: Vec<String>,
    path: String,
    protocol: String,
    port_label: String,
    method: String,
    interval: i64,
    timeout: i64,
    task_name: String,
    on_update: String,
    address_mode: String,
    header: BTreeMap<String, Vec<String>>,
}

/// One service to register, with its checks.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ServiceSpec {
    pub(crate) registration: ServiceRegistration,
    /// The task whose service it is (`None`: a group service).
    pub(crate) task: Option<String>,
    pub(crate) checks: Vec<CheckSpec>,
}

/// The provider-`nomad` services of `alloc`'s group and tasks.
#[cfg(test)]
pub(crate) fn specs(alloc: &Allocation, job: &Job, node: &Node) -> Vec<ServiceSpec> {
    specs_of(alloc, job, node, PROVIDER_NOMAD)
}

/// The services of `alloc`'s group and tasks with `provider` (an empty block provider is
/// `consul`, upstream's default).
fn specs_of(alloc: &Allocation, job: &Job, node: &Node, provider: &str) -> Vec<ServiceSpec> {
    let Some(group) = job.task_group(&alloc.task_group) else {
        return Vec::new();
    };
    let node_ip = node_address(node);
    let no_task = Task::default();
    let mut specs = Vec::new();
    let mut add = |value: &serde_json::Value, task: Option<&Task>| {
        let Ok(mut block) = serde_json::from_value::<ServiceBlock>(value.clone()) else {
            tracing::warn!(alloc_id = %alloc.id, "ignoring a malformed service block");
            return;
        };
        let block_provider = if block.provider.is_empty() {
            PROVIDER_CONSUL
        } else {
            block.provider.as_str()
        };
        if block_provider != provider {
            return;
        }
        let env = TaskEnv::build(&EnvInputs {
            alloc,
            job,
            group,
            task: task.unwrap_or(&no_task),
            node,
            alloc_dir: std::path::Path::new(""),
            local_dir: std::path::Path::new(""),
            secrets_dir: std::path::Path::new(""),
            host_env: &[],
        });
        interpolate(&mut block, &env);
        let task = task.map(|task| task.name.as_str());
        let mut spec = service_spec(alloc, job, task, &block, &node_ip);
        spec.registration.node_id.clone_from(&node.id);
        spec.registration.datacenter.clone_from(&node.datacenter);
        specs.push(spec);
    };
    for service in &group.services {
        add(service, None);
    }
    for task in &group.tasks {
        for service in &task.services {
            add(service, Some(task));
        }
    }
    specs
}

/// Interpolates a service block's runtime fields with `env`.
fn interpolate(block: &mut ServiceBlock, env: &TaskEnv) {
    let apply = |text: &mut String| *text = env.interpolate(text);
    apply(&mut block.name);
    apply(&mut block.port_label);
    apply(&mut block.address);
    block.tags.iter_mut().for_each(apply);
    for check in &mut block.checks {
        apply(&mut check.name);
        apply(&mut check.port_label);
        apply(&mut check.path);
        apply(&mut check.command);
        check.args.iter_mut().for_each(apply);
        for values in check.header.values_mut() {
            values.iter_mut().for_each(apply);
        }
    }
}

/// The address services fall back to: the node's advertised IP, else loopback.
pub(crate) fn node_address(node: &Node) -> String {
    node.attributes
        .get("unique.network.ip-address")
        .filter(|ip| !ip.is_empty())
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".to_owned())
}

fn service_spec(
    alloc: &Allocation,
    job: &Job,
    task: Option<&str>,
    block: &ServiceBlock,
    node_ip: &str,
) -> ServiceSpec {
    let (ip, port) = resolve_port(alloc, task, &block.port_label, node_ip);
    let address = if block.address.is_empty() {
        ip
    } else {
        block.address.clone()
    };
    let owner = match task {
        Some(task) => task.to_owned(),
        None => format!("group-{}", alloc.task_group),
    };
    let mut id = format!("_nomad-task-{}-{owner}-{}", alloc.id, block.name);
    if !block.port_label.is_empty() {
        id.push('-');
        id.push_str(&block.port_label);
    }
    let registration = ServiceRegistration {
        id,
        service_name: block.name.clone(),
        namespace: non_empty(&alloc.namespace, "default"),
        node_id: alloc.node_id.clone(),
        datacenter: String::new(),
        job_id: job.id.clone(),
        alloc_id: alloc.id.clone(),
        tags: block.tags.clone(),
        address: address.clone(),
        port,
        create_index: 0,
        modify_index: 0,
    };
    let checks = block
        .checks
        .iter()
        .map(|check| {
            let (check_address, check_port) = if check.port_label.is_empty() {
                (address.clone(), port)
            } else {
                resolve_port(alloc, task, &check.port_label, node_ip)
            };
            let kind = match check.kind.as_str() {
                "http" => CheckKind::Http {
                    protocol: non_empty(&check.protocol, "http"),
                    method: non_empty(&check.method, "GET"),
                    path: check.path.clone(),
                    headers: check.header.clone(),
                },
                "tcp" => CheckKind::Tcp,
                "script" => CheckKind::Script {
                    command: check.command.clone(),
                    args: check.args.clone(),
                },
                other => CheckKind::Unsupported(other.to_owned()),
            };
            let check_task = Some(check.task_name.as_str())
                .filter(|name| !name.is_empty())
                .or(task)
                .map(str::to_owned);
            CheckSpec {
                id: check_id(&alloc.id, &alloc.task_group, task, check),
                name: check.name.clone(),
                service: block.name.clone(),
                group: alloc.name.clone(),
                mode: if check.on_update == "ignore" {
                    "readiness".to_owned()
                } else {
                    "healthiness".to_owned()
                },
                kind,
                address: check_address,
                port: check_port,
                interval: positive_or(check.interval, DEFAULT_CHECK_INTERVAL),
                timeout: positive_or(check.timeout, DEFAULT_CHECK_TIMEOUT),
                task: check_task,
            }
        })
        .collect();
    ServiceSpec {
        registration,
        task: task.map(str::to_owned),
        checks,
    }
}

/// Nomad's `NomadCheckID`: an MD5 over the allocation, group and the check's identity.
fn check_id(alloc_id: &str, group: &str, task: Option<&str>, check: &CheckBlock) -> String {
    let mut sum = Md5::new();
    let task_name = if check.task_name.is_empty() {
        task.unwrap_or_default()
    } else {
        &check.task_name
    };
    for part in [
        alloc_id,
        group,
        task_name,
        &check.name,
        &check.kind,
        &check.port_label,
        &check.on_update,
        &check.address_mode,
    ] {
        sum.update(part.as_bytes());
    }
    sum.update(check.interval.to_le_bytes());
    sum.update(check.timeout.to_le_bytes());
    for part in [&check.protocol, &check.path, &check.method] {
        sum.update(part.as_bytes());
    }
    sum.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The (IP, port) of a port label: the task's networks first, then the group's; a numeric
/// label is that port on the node's address; an unknown label is port 0 there.
fn resolve_port(
    alloc: &Allocation,
    task: Option<&str>,
    label: &str,
    node_ip: &str,
) -> (String, i64) {
    if label.is_empty() {
        return (node_ip.to_owned(), 0);
    }
    let resources = &alloc.allocated_resources;
    let task_networks = task
        .and_then(|task| resources.tasks.get(task))
        .map(|res| res.networks.as_slice())
        .unwrap_or_default();
    let found = task_networks
        .iter()
        .chain(&resources.shared.networks)
        .find_map(|network: &NetworkResource| {
            network
                .dynamic_ports
                .iter()
                .chain(&network.reserved_ports)
                .find(|port| port.label == label)
                .map(|port| (non_empty(&network.ip, node_ip), port.value))
        });
    if let Some(found) = found {
        return found;
    }
    match label.parse::<i64>() {
        Ok(port) => (node_ip.to_owned(), port),
        Err(_) => (node_ip.to_owned(), 0),
    }
}

fn non_empty(value: &str, default: &str) -> String {
    if value.is_empty() { default } else { value }.to_owned()
}

fn positive_or(nanos: i64, default: Duration) -> Duration {
    if nanos > 0 {
        duration_of(nanos)
    } else {
        default
    }
}

/// The alloc runner's services hook: registers each service while it should be, runs its
/// checks meanwhile, and deregisters everything when dropped or stopped.
#[derive(Debug)]
pub(crate) struct AllocServices {
    shared: Arc<Shared>,
    alloc_id: String,
    specs: Vec<ServiceSpec>,
    /// The provider-`consul` services, and those registered now with their script checks'
    /// loops (their HTTP and TCP checks run in the registry).
    consul_specs: Vec<ServiceSpec>,
    consul_active: BTreeMap<String, JoinSet<()>>,
    /// Task → where its script checks run.
    scripts: BTreeMap<String, ScriptContext>,
    /// Service ID → the check loops running for it.
    active: BTreeMap<String, JoinSet<()>>,
}

impl AllocServices {
    pub(crate) fn new(shared: Arc<Shared>, alloc: &Allocation, job: &Job) -> AllocServices {
        let specs = specs_of(alloc, job, &shared.node, PROVIDER_NOMAD);
        let consul_specs = specs_of(alloc, job, &shared.node, PROVIDER_CONSUL);
        if !consul_specs.is_empty() && !shared.consul.enabled() {
            tracing::warn!(alloc_id = %alloc.id, "consul services are ignored: no consul address is configured");
        }
        let scripts = specs
            .iter()
            .chain(&consul_specs)
            .flat_map(|spec| &spec.checks)
            .filter(|check| matches!(check.kind, CheckKind::Script { .. }))
            .filter_map(|check| check.task.clone())
            .collect::<BTreeSet<String>>()
            .into_iter()
            .map(|task| {
                let context = ScriptContext::of_task(&shared, alloc, job, &task);
                (task, context)
            })
            .collect();
        AllocServices {
            shared,
            alloc_id: alloc.id.clone(),
            specs,
            consul_specs,
            consul_active: BTreeMap::new(),
            scripts,
            active: BTreeMap::new(),
        }
    }

    /// Brings registrations in line with the tasks' states: group services while some task
    /// is not dead and the allocation is not `stopping`, task services while their task runs.
    pub(crate) fn sync(&mut self, tasks: &BTreeMap<String, TaskState>, stopping: bool) {
        let alloc_live = tasks.values().any(|state| state.state != "dead");
        let wants = |spec: &&ServiceSpec| {
            !stopping
                && match &spec.task {
                    None => alloc_live,
                    Some(task) => tasks
                        .get(task)
                        .is_some_and(|state| state.state == TASK_STATE_RUNNING),
                }
        };
        let consul_wanted: BTreeSet<String> = self
            .consul_specs
            .iter()
            .filter(wants)
            .map(|spec| spec.registration.id.clone())
            .collect();
        for spec in &self.consul_specs {
            let id = &spec.registration.id;
            match (
                consul_wanted.contains(id),
                self.consul_active.contains_key(id),
            ) {
                (true, false) => {
                    tracing::info!(alloc_id = %self.alloc_id, service = %spec.registration.service_name, id = %id, "registering consul service");
                    self.shared.consul.register(spec);
                    let mut loops = JoinSet::new();
                    for check in &spec.checks {
                        if !matches!(check.kind, CheckKind::Script { .. }) {
                            continue;
                        }
                        let script = check
                            .task
                            .as_ref()
                            .and_then(|task| self.scripts.get(task))
                            .cloned();
                        loops.spawn(consul_script_check(
                            self.shared.clone(),
                            id.clone(),
                            check.clone(),
                            script,
                        ));
                    }
                    self.consul_active.insert(id.clone(), loops);
                }
                (false, true) => {
                    if let Some(mut loops) = self.consul_active.remove(id) {
                        loops.abort_all();
                    }
                    self.shared.consul.deregister(id);
                }
                _ => {}
            }
        }
        let wanted: BTreeSet<String> = self
            .specs
            .iter()
            .filter(wants)
            .map(|spec| spec.registration.id.clone())
            .collect();
        let gone: Vec<String> = self
            .active
            .keys()
            .filter(|id| !wanted.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            self.deregister(&id);
        }
        for spec in &self.specs {
            let id = &spec.registration.id;
            if !wanted.contains(id) || self.active.contains_key(id) {
                continue;
            }
            tracing::info!(alloc_id = %self.alloc_id, service = %spec.registration.service_name, id = %id, "registering service");
            self.shared.runtime.register(spec.registration.clone());
            let mut loops = JoinSet::new();
            for check in &spec.checks {
                self.shared.runtime.set_check(
                    &self.alloc_id,
                    CheckResult {
                        id: check.id.clone(),
                        check: check.name.clone(),
                        group: check.group.clone(),
                        mode: check.mode.clone(),
                        output: String::new(),
                        service: check.service.clone(),
                        status: "pending".to_owned(),
                        status_code: 0,
                        timestamp: stdx::time::unix_now_nanos() / 1_000_000_000,
                    },
                );
                let script = check
                    .task
                    .as_ref()
                    .and_then(|task| self.scripts.get(task))
                    .cloned();
                loops.spawn(checks::run(
                    self.shared.clone(),
                    self.alloc_id.clone(),
                    check.clone(),
                    script,
                ));
            }
            self.active.insert(id.clone(), loops);
        }
    }

    fn deregister(&mut self, id: &str) {
        let Some(mut loops) = self.active.remove(id) else {
            return;
        };
        loops.abort_all();
        let check_ids: Vec<String> = self
            .specs
            .iter()
            .filter(|spec| spec.registration.id == id)
            .flat_map(|spec| spec.checks.iter().map(|check| check.id.clone()))
            .collect();
        tracing::info!(alloc_id = %self.alloc_id, id, "deregistering service");
        self.shared
            .runtime
            .deregister(&self.alloc_id, id, &check_ids);
    }

    /// Deregisters every service (the allocation ended or is gone).
    pub(crate) fn stop(&mut self) {
        let ids: Vec<String> = self.active.keys().cloned().collect();
        for id in ids {
            self.deregister(&id);
        }
        for (id, mut loops) in std::mem::take(&mut self.consul_active) {
            loops.abort_all();
            self.shared.consul.deregister(&id);
        }
    }
}

impl Drop for AllocServices {
    fn drop(&mut self) {
        for loops in self
            .active
            .values_mut()
            .chain(self.consul_active.values_mut())
        {
            loops.abort_all();
        }
    }
}

/// Runs a consul service's script check at its interval, pushing each result to its TTL
/// check in the registry (`consul.rs`).
async fn consul_script_check(
    shared: Arc<Shared>,
    service_id: String,
    check: CheckSpec,
    script: Option<ScriptContext>,
) {
    loop {
        let result = checks::execute(&check, script.as_ref()).await;
        shared.consul.set_ttl(
            &service_id,
            &check.id,
            result.status == "success",
            &result.output,
        );
        tokio::time::sleep(check.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use scheduler_structs::{Port, Task, TaskGroup};
    use serde_json::json;

    use super::*;

    fn fixture() -> (Allocation, Job, Node) {
        let task = Task {
            name: "web".to_owned(),
            services: vec![json!({
                "Name": "web", "PortLabel": "http", "Tags": ["v1", "${NOMAD_JOB_ID}-${NOMAD_ALLOC_INDEX}"],
                "Provider": "nomad",
                "Checks": [{"Name": "alive", "Type": "tcp", "Interval": 1_000_000_000u64,
                            "Timeout": 500_000_000u64}]
            })],
            ..Task::default()
        };
        let group = TaskGroup {
            name: "g".to_owned(),
            services: vec![
                json!({"Name": "api", "PortLabel": "8080", "Provider": "nomad"}),
                json!({"Name": "elsewhere", "PortLabel": "http", "Provider": "consul"}),
            ],
            tasks: vec![task],
            ..TaskGroup::default()
        };
        let job = Job {
            id: "j".to_owned(),
            task_groups: vec![group],
            ..Job::default()
        };
        let mut alloc = Allocation {
            id: "a1".to_owned(),
            name: "j.g[0]".to_owned(),
            task_group: "g".to_owned(),
            namespace: "default".to_owned(),
            ..Allocation::default()
        };
        alloc.allocated_resources.shared.networks = vec![NetworkResource {
            ip: "10.1.2.3".to_owned(),
            dynamic_ports: vec![Port {
                label: "http".to_owned(),
                value: 23456,
                ..Port::default()
            }],
            ..NetworkResource::default()
        }];
        let mut node = Node::default();
        node.attributes.insert(
            "unique.network.ip-address".to_owned(),
            "192.168.1.9".to_owned(),
        );
        (alloc, job, node)
    }

    #[test]
    fn nomad_services_get_upstream_ids_and_the_allocation_ports() {
        let (alloc, job, node) = fixture();
        let specs = specs(&alloc, &job, &node);
        assert_eq!(specs.len(), 2, "the consul service is not ours");
        let api = &specs[0];
        assert_eq!(api.registration.id, "_nomad-task-a1-group-g-api-8080");
        assert_eq!(api.registration.address, "192.168.1.9");
        assert_eq!(api.registration.port, 8080);
        assert_eq!(api.task, None);
        let web = &specs[1];
        assert_eq!(web.registration.id, "_nomad-task-a1-web-web-http");
        assert_eq!(
            (web.registration.address.as_str(), web.registration.port),
            ("10.1.2.3", 23456)
        );
        assert_eq!(web.registration.tags, ["v1", "j-0"]);
        let check = &web.checks[0];
        assert_eq!(check.kind, CheckKind::Tcp);
        assert_eq!(check.interval, Duration::from_secs(1));
        assert_eq!(check.mode, "healthiness");
        assert_eq!(check.group, "j.g[0]");
        assert_eq!(check.id.len(), 32);
        assert_eq!(check.id, super::specs(&alloc, &job, &node)[1].checks[0].id);
    }
}
