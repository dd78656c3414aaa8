//! A task's environment (Nomad's `client/taskenv`): the runtime variables (`NOMAD_ALLOC_ID`,
//! `NOMAD_TASK_DIR`, `NOMAD_META_*`, ports...), each also under this project's `CAIRN_` prefix,
//! the agent's own environment minus a deny list, and the task's `env` block on top; plus
//! `${...}` interpolation against those variables and the node (`${node.unique.id}`,
//! `${attr.kernel.name}`, `${meta.rack}`).
//!
//! Invariants: building is pure given its inputs (the host environment is passed in); a
//! `${...}` reference to an unknown name is left as written (upstream's `ReplaceEnv`); the
//! task's `env` overrides everything else, runtime variables override the host's.

use std::collections::BTreeMap;
use std::path::Path;

use scheduler_structs::{Allocation, Job, Node, Task, TaskGroup};

/// Host variables never passed to tasks (upstream's `env.denylist` default), besides every
/// `CAIRN_*` variable (the agent's own configuration, which may carry tokens).
const HOST_DENYLIST: &[&str] = &[
    "CONSUL_TOKEN",
    "CONSUL_HTTP_TOKEN",
    "CONSUL_HTTP_TOKEN_FILE",
    "NOMAD_TOKEN",
    "VAULT_TOKEN",
    "CONSUL_LICENSE",
    "NOMAD_LICENSE",
    "VAULT_LICENSE",
    "CONSUL_LICENSE_PATH",
    "NOMAD_LICENSE_PATH",
    "VAULT_LICENSE_PATH",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_METADATA_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GOOGLE_OAUTH_ACCESS_TOKEN",
];

/// The upstream prefix of runtime variables and this project's.
const UPSTREAM_PREFIX: &str = "NOMAD_";
const OWN_PREFIX: &str = "CAIRN_";

/// Everything a task's environment is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EnvInputs<'a> {
    pub(crate) alloc: &'a Allocation,
    pub(crate) job: &'a Job,
    pub(crate) group: &'a TaskGroup,
    pub(crate) task: &'a Task,
    pub(crate) node: &'a Node,
    /// The shared `alloc/` directory.
    pub(crate) alloc_dir: &'a Path,
    /// The task's `local/` directory.
    pub(crate) local_dir: &'a Path,
    pub(crate) secrets_dir: &'a Path,
    /// The agent's environment (`std::env::vars()` in production).
    pub(crate) host_env: &'a [(String, String)],
}

/// A built task environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TaskEnv {
    vars: BTreeMap<String, String>,
    node_attrs: BTreeMap<String, String>,
}

impl TaskEnv {
    pub(crate) fn build(inputs: &EnvInputs<'_>) -> TaskEnv {
        let node_attrs = node_attrs(inputs.node, &inputs.job.region);
        let mut runtime = runtime_vars(inputs);

        // Meta, interpolated against what is known so far.
        for (key, value) in combined_meta(inputs.job, inputs.group, inputs.task) {
            let value = replace(&value, &[&node_attrs, &runtime]);
            for name in [
                format!("NOMAD_META_{}", key.to_ascii_uppercase()),
                format!("NOMAD_META_{key}"),
            ] {
                runtime.insert(clean_env_name(&name), value.clone());
            }
        }

        // Every runtime variable under the project's prefix as well.
        let own: Vec<(String, String)> = runtime
            .iter()
            .filter_map(|(key, value)| {
                let rest = key.strip_prefix(UPSTREAM_PREFIX)?;
                Some((format!("{OWN_PREFIX}{rest}"), value.clone()))
            })
            .collect();
        runtime.extend(own);

        let mut vars = runtime;
        for (key, value) in inputs.host_env {
            if key.starts_with(OWN_PREFIX) || HOST_DENYLIST.contains(&key.as_str()) {
                continue;
            }
            if !vars.contains_key(key) {
                let value = replace(value, &[&node_attrs, &vars]);
                vars.insert(key.clone(), value);
            }
        }
        for (key, value) in &inputs.task.env {
            let value = replace(value, &[&node_attrs, &vars]);
            vars.insert(key.clone(), value);
        }
        TaskEnv { vars, node_attrs }
    }

    /// The variables as passed to the process.
    pub(crate) fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// Replaces `${name}` references to variables and node values; unknown ones stay as
    /// written.
    pub(crate) fn interpolate(&self, text: &str) -> String {
        replace(text, &[&self.vars, &self.node_attrs])
    }
}

fn runtime_vars(inputs: &EnvInputs<'_>) -> BTreeMap<String, String> {
    let EnvInputs {
        alloc, job, task, ..
    } = *inputs;
    let mut vars = BTreeMap::new();
    let mut set = |key: &str, value: String| {
        vars.insert(format!("{UPSTREAM_PREFIX}{key}"), value);
    };
    set("ALLOC_DIR", inputs.alloc_dir.display().to_string());
    set("TASK_DIR", inputs.local_dir.display().to_string());
    set("SECRETS_DIR", inputs.secrets_dir.display().to_string());

    let allocated = alloc.allocated_resources.tasks.get(&task.name);
    let cpu = allocated.map_or(task.resources.cpu, |res| res.cpu.cpu_shares);
    let memory = allocated.map_or(task.resources.memory_mb, |res| res.memory.memory_mb);
    let memory_max = allocated.map_or(task.resources.memory_max_mb, |res| res.memory.memory_max_mb);
    if memory != 0 {
        set("MEMORY_LIMIT", memory.to_string());
    }
    if memory_max != 0 {
        set("MEMORY_MAX_LIMIT", memory_max.to_string());
    }
    if cpu != 0 {
        set("CPU_LIMIT", cpu.to_string());
    }
    if let Some(cores) = allocated.filter(|res| !res.cpu.reserved_cores.is_empty()) {
        let list: Vec<String> = cores
            .cpu
            .reserved_cores
            .iter()
            .map(i64::to_string)
            .collect();
        set("CPU_CORES", list.join(","));
    }

    if !alloc.id.is_empty() {
        set("ALLOC_ID", alloc.id.clone());
        set("SHORT_ALLOC_ID", alloc.id.chars().take(8).collect());
    }
    if !alloc.name.is_empty() {
        set("ALLOC_NAME", alloc.name.clone());
    }
    if !alloc.task_group.is_empty() {
        set("GROUP_NAME", alloc.task_group.clone());
    }
    if let Some(index) = alloc.index() {
        set("ALLOC_INDEX", index.to_string());
    }
    if !task.name.is_empty() {
        set("TASK_NAME", task.name.clone());
    }
    if !job.id.is_empty() {
        set("JOB_ID", job.id.clone());
    }
    if !job.name.is_empty() {
        set("JOB_NAME", job.name.clone());
    }
    if !job.parent_id.is_empty() {
        set("JOB_PARENT_ID", job.parent_id.clone());
    }
    if !inputs.node.datacenter.is_empty() {
        set("DC", inputs.node.datacenter.clone());
    }
    if !alloc.namespace.is_empty() {
        set("NAMESPACE", alloc.namespace.clone());
    }
    if !job.region.is_empty() {
        set("REGION", job.region.clone());
    }
    port_vars(inputs, &mut vars);
    vars
}

/// `NOMAD_{IP,PORT,ADDR,HOST_PORT,...}_<label>` for the task's and the group's ports.
fn port_vars(inputs: &EnvInputs<'_>, vars: &mut BTreeMap<String, String>) {
    let mut add = |label: &str, ip: &str, value: i64, to: i64| {
        let label = label.to_owned();
        let port = if to > 0 { to } else { value };
        let addr = if ip.contains(':') {
            format!("[{ip}]:{value}")
        } else {
            format!("{ip}:{value}")
        };
        for (key, val) in [
            (format!("NOMAD_IP_{label}"), ip.to_owned()),
            (format!("NOMAD_HOST_IP_{label}"), ip.to_owned()),
            (format!("NOMAD_ADDR_{label}"), addr.clone()),
            (format!("NOMAD_HOST_ADDR_{label}"), addr),
            (format!("NOMAD_PORT_{label}"), port.to_string()),
            (format!("NOMAD_ALLOC_PORT_{label}"), port.to_string()),
            (format!("NOMAD_HOST_PORT_{label}"), value.to_string()),
        ] {
            vars.insert(clean_env_name(&key), val);
        }
    };
    let resources = &inputs.alloc.allocated_resources;
    let task_networks = resources
        .tasks
        .get(&inputs.task.name)
        .map(|res| res.networks.as_slice())
        .unwrap_or_default();
    for network in task_networks.iter().chain(&resources.shared.networks) {
        for port in network.reserved_ports.iter().chain(&network.dynamic_ports) {
            add(&port.label, &network.ip, port.value, port.to);
        }
    }
    for port in &resources.shared.ports {
        let text = |key: &str| {
            port.get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let number = |key: &str| {
            port.get(key)
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
        };
        let label = text("Label");
        if !label.is_empty() {
            add(&label, &text("HostIP"), number("Value"), number("To"));
        }
    }
}

/// `node.*`, `attr.*` and `meta.*` values for interpolation.
fn node_attrs(node: &Node, region: &str) -> BTreeMap<String, String> {
    let mut attrs = BTreeMap::new();
    if !region.is_empty() {
        attrs.insert("node.region".to_owned(), region.to_owned());
    }
    attrs.insert("node.unique.id".to_owned(), node.id.clone());
    attrs.insert("node.unique.name".to_owned(), node.name.clone());
    attrs.insert("node.class".to_owned(), node.node_class.clone());
    attrs.insert("node.datacenter".to_owned(), node.datacenter.clone());
    attrs.insert("node.pool".to_owned(), node.node_pool.clone());
    for (key, value) in &node.attributes {
        attrs.insert(format!("attr.{key}"), value.clone());
    }
    for (key, value) in &node.meta {
        attrs.insert(format!("meta.{key}"), value.clone());
    }
    attrs
}

/// Job, then group, then task meta, the later overriding (upstream's `CombinedTaskMeta`).
fn combined_meta(job: &Job, group: &TaskGroup, task: &Task) -> BTreeMap<String, String> {
    let mut meta = job.meta.clone();
    meta.extend(group.meta.clone());
    meta.extend(task.meta.clone());
    meta
}

/// Upstream's `helper.CleanEnvVar(name, '_')`: characters other than letters, `_`, `.` and
/// (not first) digits become `_`.
fn clean_env_name(name: &str) -> String {
    name.char_indices()
        .map(|(index, c)| {
            if c == '_' || c == '.' || c.is_ascii_alphabetic() || (index > 0 && c.is_ascii_digit())
            {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Replaces every `${name}` (name of `[A-Za-z0-9_.-]+`) found in one of `maps`, first wins.
fn replace(text: &str, maps: &[&BTreeMap<String, String>]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        let closed = after[name_len..].starts_with('}');
        if closed && !name.is_empty() {
            match maps.iter().find_map(|map| map.get(name)) {
                Some(value) => out.push_str(value),
                None => out.push_str(&rest[start..start + 3 + name_len]),
            }
            rest = &after[name_len + 1..];
        } else {
            out.push_str("${");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use scheduler_structs::{AllocatedTaskResources, NetworkResource, Port};

    use super::*;

    struct World {
        alloc: Allocation,
        job: Job,
        node: Node,
        host: Vec<(String, String)>,
    }

    fn world() -> World {
        let mut task = Task {
            name: "web".to_owned(),
            driver: "raw_exec".to_owned(),
            ..Task::default()
        };
        task.resources.cpu = 100;
        task.resources.memory_mb = 300;
        task.env.insert(
            "GREETING".to_owned(),
            "hi ${NOMAD_ALLOC_INDEX} from ${node.unique.name}".to_owned(),
        );
        task.env.insert(
            "RACK".to_owned(),
            "${meta.rack}/${attr.kernel.name}/${unknown.thing}".to_owned(),
        );
        task.env.insert("HOME".to_owned(), "/task-home".to_owned());
        task.meta.insert("owner".to_owned(), "team-a".to_owned());
        let group = TaskGroup {
            name: "frontend".to_owned(),
            tasks: vec![task],
            meta: BTreeMap::from([("tier".to_owned(), "web".to_owned())]),
            ..TaskGroup::default()
        };
        let job = Job {
            id: "example".to_owned(),
            name: "example".to_owned(),
            region: "global".to_owned(),
            namespace: "default".to_owned(),
            task_groups: vec![group],
            meta: BTreeMap::from([("owner".to_owned(), "job-level".to_owned())]),
            ..Job::default()
        };
        let mut alloc = Allocation {
            id: "0123456789abcdef-0000-0000-0000-000000000000".to_owned(),
            name: "example.frontend[2]".to_owned(),
            namespace: "default".to_owned(),
            task_group: "frontend".to_owned(),
            ..Allocation::default()
        };
        let mut allocated = AllocatedTaskResources::default();
        allocated.cpu.cpu_shares = 250;
        allocated.memory.memory_mb = 128;
        allocated.networks.push(NetworkResource {
            ip: "10.0.0.5".to_owned(),
            dynamic_ports: vec![Port {
                label: "http".to_owned(),
                value: 23456,
                to: 0,
                host_network: String::new(),
            }],
            ..NetworkResource::default()
        });
        alloc
            .allocated_resources
            .tasks
            .insert("web".to_owned(), allocated);
        let node = Node {
            id: "node-1".to_owned(),
            name: "box".to_owned(),
            datacenter: "dc1".to_owned(),
            node_pool: "default".to_owned(),
            attributes: BTreeMap::from([("kernel.name".to_owned(), "linux".to_owned())]),
            meta: BTreeMap::from([("rack".to_owned(), "r1".to_owned())]),
            ..Node::default()
        };
        let host = vec![
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("HOME".to_owned(), "/root".to_owned()),
            ("VAULT_TOKEN".to_owned(), "secret".to_owned()),
            ("CAIRN_ROOT_TOKEN".to_owned(), "secret".to_owned()),
            ("NOMAD_ALLOC_ID".to_owned(), "from-host".to_owned()),
        ];
        World {
            alloc,
            job,
            node,
            host,
        }
    }

    fn build(world: &World) -> TaskEnv {
        let group = &world.job.task_groups[0];
        let alloc_dir = PathBuf::from("/data/alloc/a1/alloc");
        let local = PathBuf::from("/data/alloc/a1/web/local");
        let secrets = PathBuf::from("/data/alloc/a1/web/secrets");
        TaskEnv::build(&EnvInputs {
            alloc: &world.alloc,
            job: &world.job,
            group,
            task: &group.tasks[0],
            node: &world.node,
            alloc_dir: &alloc_dir,
            local_dir: &local,
            secrets_dir: &secrets,
            host_env: &world.host,
        })
    }

    #[test]
    fn runtime_variables_come_under_both_prefixes() {
        let world = world();
        let env = build(&world);
        let vars = env.vars();
        for prefix in ["NOMAD_", "CAIRN_"] {
            let get = |key: &str| {
                vars.get(&format!("{prefix}{key}"))
                    .cloned()
                    .unwrap_or_default()
            };
            assert_eq!(get("ALLOC_ID"), world.alloc.id);
            assert_eq!(get("SHORT_ALLOC_ID"), "01234567");
            assert_eq!(get("ALLOC_NAME"), "example.frontend[2]");
            assert_eq!(get("ALLOC_INDEX"), "2");
            assert_eq!(get("ALLOC_DIR"), "/data/alloc/a1/alloc");
            assert_eq!(get("TASK_DIR"), "/data/alloc/a1/web/local");
            assert_eq!(get("SECRETS_DIR"), "/data/alloc/a1/web/secrets");
            assert_eq!(get("JOB_ID"), "example");
            assert_eq!(get("JOB_NAME"), "example");
            assert_eq!(get("GROUP_NAME"), "frontend");
            assert_eq!(get("TASK_NAME"), "web");
            assert_eq!(get("NAMESPACE"), "default");
            assert_eq!(get("REGION"), "global");
            assert_eq!(get("DC"), "dc1");
            assert_eq!(get("CPU_LIMIT"), "250");
            assert_eq!(get("MEMORY_LIMIT"), "128");
            assert_eq!(get("META_owner"), "team-a");
            assert_eq!(get("META_OWNER"), "team-a");
            assert_eq!(get("META_tier"), "web");
            assert_eq!(get("PORT_http"), "23456");
            assert_eq!(get("ADDR_http"), "10.0.0.5:23456");
        }
    }

    #[test]
    fn task_env_overrides_and_interpolates_and_host_env_is_filtered() {
        let world = world();
        let env = build(&world);
        let vars = env.vars();
        assert_eq!(vars["GREETING"], "hi 2 from box");
        assert_eq!(vars["RACK"], "r1/linux/${unknown.thing}");
        assert_eq!(vars["HOME"], "/task-home");
        assert_eq!(vars["PATH"], "/usr/bin:/bin");
        assert!(!vars.contains_key("VAULT_TOKEN"));
        assert!(!vars.contains_key("CAIRN_ROOT_TOKEN"));
        // Runtime variables win over the host's.
        assert_eq!(vars["NOMAD_ALLOC_ID"], world.alloc.id);
        assert_eq!(
            env.interpolate(
                "${NOMAD_TASK_DIR}/run --node ${node.unique.id} ${CAIRN_JOB_ID} $${x} ${"
            ),
            "/data/alloc/a1/web/local/run --node node-1 example $${x} ${"
        );
        assert_eq!(
            env.interpolate("${attr.kernel.name}-${meta.rack}-${node.datacenter}"),
            "linux-r1-dc1"
        );
    }

    #[test]
    fn env_names_are_cleaned_like_upstream() {
        assert_eq!(clean_env_name("NOMAD_META_my-key"), "NOMAD_META_my_key");
        assert_eq!(clean_env_name("NOMAD_META_a.b"), "NOMAD_META_a.b");
        assert_eq!(clean_env_name("9lives"), "_lives");
    }
}
