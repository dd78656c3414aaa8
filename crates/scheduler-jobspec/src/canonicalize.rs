//! `api.Job.Canonicalize` on API Job JSON: fills every default Nomad's API client fills before
//! a job is registered or returned by `/v1/jobs/parse?Canonicalize=true` (api/jobs.go,
//! api/tasks.go, api/resources.go, api/services.go, api/consul.go, api/scaling.go).
//!
//! Called by the jobs handlers for parse (`canonicalize`) and for registration
//! (`canonicalize_for_register`, which skips the job-level members whose default is the typed
//! zero value); registration then deserializes the result into `scheduler_structs::Job`, which
//! relies on these defaults (e.g. `Count`, a group's `RestartPolicy`, a task's `Resources`).
//!
//! Invariants:
//! - Never panics: a value of an unexpected JSON type is left alone (deserialization reports it).
//! - `null` means unset, as a nil pointer does in Go: defaults replace it, and in the objects
//!   the typed structs read (job, group, task, resources, networks and ports, constraints,
//!   affinities, spreads, restart/reschedule policies, ephemeral disk) remaining `null`s are
//!   dropped so that they deserialize as their defaults.
//! - Idempotent: every rule fills only what is unset, and merges (job update into group update,
//!   group restart into task restart) are stable once both sides are filled.
//! - `Datacenters` is not filled (the server does that at registration).

use serde_json::{Map, Value as Json};

type Object = Map<String, Json>;

const SECOND: i64 = 1_000_000_000;
const MINUTE: i64 = 60 * SECOND;
const HOUR: i64 = 60 * MINUTE;

/// Fills every default upstream's api.Job.Canonicalize fills (§2.9), in place, on API Job JSON —
/// used both by /v1/jobs/parse?Canonicalize=true and by job registration (which then deserializes
/// the result into typed structs). Must never panic on wrongly typed input: leave values it doesn't
/// understand alone (type errors are reported later by deserialization).
pub fn canonicalize(job: &mut serde_json::Value) {
    canonicalize_job(job, false);
}

/// [`canonicalize`] for job registration, which deserializes the result into
/// `scheduler_structs::Job` right after and then sets `Namespace`, `Region` and an empty
/// `NodePool` itself: the job-level members whose default is the zero value the typed `Job`
/// takes for an absent field (`ParentID`, `Stop`, `AllAtOnce`, `ConsulNamespace`,
/// `VaultNamespace`, `NomadTokenID`, `Status`, `StatusDescription`, `Stable`, `Version`, the
/// indexes) and the three the caller overwrites are left out instead of inserted. Everything
/// else is exactly [`canonicalize`], so the typed job deserialized from either is the same.
pub fn canonicalize_for_register(job: &mut serde_json::Value) {
    canonicalize_job(job, true);
}

fn canonicalize_job(job: &mut serde_json::Value, sparse: bool) {
    let Json::Object(job) = job else { return };
    strip_nulls(job);
    default(job, "ID", Json::from(""));
    if !is_set(job, "Name") {
        let id = job.get("ID").cloned().unwrap_or_else(|| Json::from(""));
        job.insert("Name".to_owned(), id);
    }
    default(job, "Priority", Json::from(50));
    default(job, "Type", Json::from("service"));
    if !sparse {
        default(job, "ParentID", Json::from(""));
        default(job, "Namespace", Json::from("default"));
        default(job, "Stop", Json::Bool(false));
        default(job, "Region", Json::from("global"));
        default(job, "NodePool", Json::from(""));
        default(job, "AllAtOnce", Json::Bool(false));
        default(job, "ConsulNamespace", Json::from(""));
        default(job, "VaultNamespace", Json::from(""));
        default(job, "NomadTokenID", Json::from(""));
        default(job, "Status", Json::from(""));
        default(job, "StatusDescription", Json::from(""));
        default(job, "Stable", Json::Bool(false));
        default(job, "Version", Json::from(0));
        default(job, "CreateIndex", Json::from(0));
        default(job, "ModifyIndex", Json::from(0));
        default(job, "JobModifyIndex", Json::from(0));
    }

    let job_type = str_of(job, "Type").unwrap_or_default().to_owned();
    if let Some(periodic) = object_mut(job, "Periodic") {
        canonicalize_periodic(periodic);
    }
    match job.get_mut("Update") {
        Some(Json::Object(update)) => canonicalize_update(update),
        None if job_type == "service" || job_type == "system" => {
            job.insert("Update".to_owned(), Json::Object(default_update()));
        }
        _ => {}
    }
    if let Some(multiregion) = object_mut(job, "Multiregion") {
        canonicalize_multiregion(multiregion);
    }

    let context = JobContext {
        name: str_of(job, "Name").unwrap_or_default().to_owned(),
        job_type,
        // Moved out while the groups are canonicalized (they read them from the context, and
        // nothing reads them from the job meanwhile), then put back unchanged.
        update: take_object(job, "Update"),
        reschedule: take_object(job, "Reschedule"),
        migrate: take_object(job, "Migrate"),
        // An absent `ConsulNamespace` (only possible when `sparse`) reads as the `""` the full
        // pass would have filled.
        consul_namespace: match job.get("ConsulNamespace") {
            None => Some(String::new()),
            Some(namespace) => namespace.as_str().map(str::to_owned),
        },
    };
    for group in objects_mut(job, "TaskGroups") {
        canonicalize_group(group, &context);
    }
    let JobContext {
        update,
        reschedule,
        migrate,
        ..
    } = context;
    for (key, policy) in [
        ("Update", update),
        ("Reschedule", reschedule),
        ("Migrate", migrate),
    ] {
        if let Some(policy) = policy {
            job.insert(key.to_owned(), Json::Object(policy));
        }
    }
    for spread in objects_mut(job, "Spreads") {
        canonicalize_spread(spread);
    }
    for affinity in objects_mut(job, "Affinities") {
        canonicalize_affinity(affinity);
    }
    for constraint in objects_mut(job, "Constraints") {
        strip_nulls(constraint);
    }
    if let Some(ui) = object_mut(job, "UI")
        && ui.get("Links").is_some_and(is_empty)
    {
        ui.remove("Links");
    }
}

/// What a group's canonicalization needs from its job.
struct JobContext {
    name: String,
    job_type: String,
    update: Option<Object>,
    reschedule: Option<Object>,
    migrate: Option<Object>,
    consul_namespace: Option<String>,
}

fn canonicalize_group(group: &mut Object, job: &JobContext) {
    strip_nulls(group);
    default(group, "Name", Json::from(""));
    if !is_set(group, "Count") {
        let count = object_mut(group, "Scaling")
            .and_then(|scaling| scaling.get("Min").cloned())
            .filter(Json::is_number)
            .unwrap_or_else(|| Json::from(1));
        group.insert("Count".to_owned(), count);
    }
    let count = group.get("Count").cloned().unwrap_or_else(|| Json::from(1));
    if let Some(scaling) = object_mut(group, "Scaling") {
        default(scaling, "Enabled", Json::Bool(true));
        default(scaling, "Min", count);
        if str_of(scaling, "Type").is_none_or(str::is_empty) {
            scaling.insert("Type".to_owned(), Json::from("horizontal"));
        }
    }
    match group.get_mut("EphemeralDisk") {
        Some(Json::Object(disk)) => canonicalize_ephemeral_disk(disk),
        None => {
            let mut disk = Object::new();
            canonicalize_ephemeral_disk(&mut disk);
            group.insert("EphemeralDisk".to_owned(), Json::Object(disk));
        }
        Some(_) => {}
    }
    if let Some(consul) = object_mut(group, "Consul") {
        if str_of(consul, "Namespace").is_none_or(str::is_empty)
            && let Some(namespace) = &job.consul_namespace
        {
            consul.insert("Namespace".to_owned(), Json::from(namespace.clone()));
        }
        canonicalize_consul(consul);
    }

    // Update: the job's strategy, overridden field by field by the group's.
    let group_update = object_of(group, "Update");
    let merged_update = match (&job.update, group_update) {
        (Some(job_update), Some(group_update)) => Some(merge(job_update, &group_update)),
        (Some(job_update), None) if !update_is_empty(job_update) => Some(job_update.clone()),
        (_, group_update) => group_update,
    };
    if let Some(mut update) = merged_update {
        canonicalize_update(&mut update);
        group.insert("Update".to_owned(), Json::Object(update));
    }

    // Reschedule: job ⊕ group, else the type's default (none for system and sysbatch).
    let group_reschedule = object_of(group, "ReschedulePolicy");
    let reschedule = match (&job.reschedule, group_reschedule) {
        (Some(job_policy), Some(group_policy)) => Some(merge(job_policy, &group_policy)),
        (Some(job_policy), None) => Some(job_policy.clone()),
        (None, group_policy) => group_policy,
    };
    if let Some(mut policy) = reschedule {
        fill(&mut policy, &default_reschedule(&job.job_type));
        strip_nulls(&mut policy);
        group.insert("ReschedulePolicy".to_owned(), Json::Object(policy));
    } else if job.job_type != "system" && job.job_type != "sysbatch" {
        // The type's default is already complete: nothing to fill.
        let policy = default_reschedule(&job.job_type);
        group.insert("ReschedulePolicy".to_owned(), Json::Object(policy));
    }

    // Migrate: job ⊕ group; service groups always get one.
    let group_migrate = object_of(group, "Migrate");
    let migrate = match (&job.migrate, group_migrate) {
        (Some(job_migrate), Some(group_migrate)) => Some(merge(job_migrate, &group_migrate)),
        (Some(job_migrate), None) => Some(job_migrate.clone()),
        (None, group_migrate) => group_migrate,
    };
    if let Some(mut migrate) = migrate {
        fill(&mut migrate, &default_migrate());
        group.insert("Migrate".to_owned(), Json::Object(migrate));
    } else if job.job_type == "service" {
        // An empty migrate filled with the defaults is the defaults.
        group.insert("Migrate".to_owned(), Json::Object(default_migrate()));
    }

    // Restart: the type's default, overridden by the group's fields.
    let restart_default = match job.job_type.as_str() {
        "service" | "system" => restart_policy(2, 30 * MINUTE),
        _ => restart_policy(3, 24 * HOUR),
    };
    let restart = match object_of(group, "RestartPolicy") {
        Some(group_restart) => merge(&restart_default, &group_restart),
        None => restart_default,
    };
    let group_name = str_of(group, "Name").unwrap_or_default().to_owned();
    for task in objects_mut(group, "Tasks") {
        canonicalize_task(task, &restart, &job.name, &group_name);
    }
    group.insert("RestartPolicy".to_owned(), Json::Object(restart));
    for spread in objects_mut(group, "Spreads") {
        canonicalize_spread(spread);
    }
    for affinity in objects_mut(group, "Affinities") {
        canonicalize_affinity(affinity);
    }
    for constraint in objects_mut(group, "Constraints") {
        strip_nulls(constraint);
    }
    for network in objects_mut(group, "Networks") {
        canonicalize_network(network);
    }
    for service in objects_mut(group, "Services") {
        canonicalize_service(service, &job.name, &group_name, None);
    }
    if let Some(disconnect) = object_mut(group, "Disconnect") {
        default(disconnect, "Replace", Json::Bool(true));
        default(disconnect, "Reconcile", Json::from("best_score"));
    }
}

fn canonicalize_task(task: &mut Object, group_restart: &Object, job_name: &str, group_name: &str) {
    strip_nulls(task);
    match task.get_mut("Resources") {
        Some(Json::Object(resources)) => canonicalize_resources(resources),
        None => {
            let mut resources = Object::new();
            canonicalize_resources(&mut resources);
            task.insert("Resources".to_owned(), Json::Object(resources));
        }
        Some(_) => {}
    }
    default(task, "KillTimeout", Json::from(5 * SECOND));
    match task.get_mut("LogConfig") {
        Some(Json::Object(logs)) => canonicalize_logs(logs),
        None => {
            let mut logs = Object::new();
            canonicalize_logs(&mut logs);
            task.insert("LogConfig".to_owned(), Json::Object(logs));
        }
        Some(_) => {}
    }
    for artifact in objects_mut(task, "Artifacts") {
        canonicalize_artifact(artifact);
    }
    if let Some(vault) = object_mut(task, "Vault") {
        canonicalize_vault(vault);
    }
    if let Some(consul) = object_mut(task, "Consul") {
        canonicalize_consul(consul);
    }
    for template in objects_mut(task, "Templates") {
        canonicalize_template(template);
    }
    for secret in objects_mut(task, "Secrets") {
        for key in ["Config", "Env"] {
            if secret.get(key).is_some_and(is_empty) {
                secret.remove(key);
            }
        }
    }
    let task_name = str_of(task, "Name").unwrap_or_default().to_owned();
    for service in objects_mut(task, "Services") {
        canonicalize_service(service, job_name, group_name, Some(&task_name));
    }
    for affinity in objects_mut(task, "Affinities") {
        canonicalize_affinity(affinity);
    }
    for constraint in objects_mut(task, "Constraints") {
        strip_nulls(constraint);
    }
    for mount in objects_mut(task, "VolumeMounts") {
        canonicalize_volume_mount(mount);
    }
    // A lifecycle without a hook is no lifecycle.
    let empty_lifecycle = match task.get("Lifecycle") {
        Some(Json::Object(lifecycle)) => str_of(lifecycle, "Hook").is_none_or(str::is_empty),
        _ => false,
    };
    if empty_lifecycle {
        task.remove("Lifecycle");
    }
    if let Some(plugin) = object_mut(task, "CSIPluginConfig") {
        if str_of(plugin, "MountDir").is_none_or(str::is_empty) {
            plugin.insert("MountDir".to_owned(), Json::from("/csi"));
        }
        if str_of(plugin, "StagePublishBaseDir").is_none_or(str::is_empty) {
            plugin.insert("StagePublishBaseDir".to_owned(), Json::from("/local/csi"));
        }
        if plugin
            .get("HealthTimeout")
            .and_then(Json::as_i64)
            .is_none_or(|t| t == 0)
        {
            plugin.insert("HealthTimeout".to_owned(), Json::from(30 * SECOND));
        }
    }
    let restart = match object_of(task, "RestartPolicy") {
        Some(task_restart) => merge(group_restart, &task_restart),
        None => group_restart.clone(),
    };
    task.insert("RestartPolicy".to_owned(), Json::Object(restart));
}

fn canonicalize_resources(resources: &mut Object) {
    strip_nulls(resources);
    if !is_set(resources, "Cores") {
        resources.insert("Cores".to_owned(), Json::from(0));
        default(resources, "CPU", Json::from(100));
    }
    default(resources, "CPU", Json::from(0));
    default(resources, "MemoryMB", Json::from(300));
    for device in objects_mut(resources, "Devices") {
        default(device, "Count", Json::from(1));
        for affinity in objects_mut(device, "Affinities") {
            canonicalize_affinity(affinity);
        }
    }
    if let Some(numa) = object_mut(resources, "NUMA") {
        if str_of(numa, "Affinity").is_none_or(str::is_empty) {
            numa.insert("Affinity".to_owned(), Json::from("none"));
        }
        if numa.get("Devices").is_some_and(is_empty) {
            numa.remove("Devices");
        }
    }
    for network in objects_mut(resources, "Networks") {
        canonicalize_network(network);
    }
}

fn canonicalize_network(network: &mut Object) {
    strip_nulls(network);
    for key in ["ReservedPorts", "DynamicPorts"] {
        for port in objects_mut(network, key) {
            strip_nulls(port);
        }
    }
}

fn canonicalize_logs(logs: &mut Object) {
    default(logs, "MaxFiles", Json::from(10));
    default(logs, "MaxFileSizeMB", Json::from(10));
    default(logs, "Disabled", Json::Bool(false));
}

fn canonicalize_ephemeral_disk(disk: &mut Object) {
    strip_nulls(disk);
    default(disk, "Sticky", Json::Bool(false));
    default(disk, "Migrate", Json::Bool(false));
    default(disk, "SizeMB", Json::from(300));
}

fn canonicalize_artifact(artifact: &mut Object) {
    default(artifact, "GetterMode", Json::from("any"));
    default(artifact, "GetterInsecure", Json::Bool(false));
    default(artifact, "GetterSource", Json::from(""));
    for key in ["GetterOptions", "GetterHeaders"] {
        if artifact.get(key).is_some_and(is_empty) {
            artifact.remove(key);
        }
    }
    if !is_set(artifact, "RelativeDest") {
        // File mode defaults to local/<file name>, like Go's filepath.Join("local",
        // path.Base(source)); anything else to the local/ directory.
        let dest = if str_of(artifact, "GetterMode") == Some("file") {
            let source = str_of(artifact, "GetterSource").unwrap_or_default();
            match source.trim_end_matches('/').rsplit('/').next() {
                Some(base) if !base.is_empty() && base != "." => format!("local/{base}"),
                _ => "local".to_owned(),
            }
        } else {
            "local/".to_owned()
        };
        artifact.insert("RelativeDest".to_owned(), Json::from(dest));
    }
}

fn canonicalize_vault(vault: &mut Object) {
    default(vault, "Env", Json::Bool(true));
    default(vault, "DisableFile", Json::Bool(false));
    default(vault, "Namespace", Json::from(""));
    if str_of(vault, "Cluster").is_none_or(str::is_empty) {
        vault.insert("Cluster".to_owned(), Json::from("default"));
    }
    default(vault, "ChangeMode", Json::from("restart"));
    default(vault, "ChangeSignal", Json::from("SIGHUP"));
    default(vault, "AllowTokenExpiration", Json::Bool(false));
}

fn canonicalize_consul(consul: &mut Object) {
    if str_of(consul, "Cluster").is_none_or(str::is_empty) {
        consul.insert("Cluster".to_owned(), Json::from("default"));
    }
}

fn canonicalize_template(template: &mut Object) {
    default(template, "SourcePath", Json::from(""));
    default(template, "DestPath", Json::from(""));
    default(template, "EmbeddedTmpl", Json::from(""));
    default(template, "ChangeMode", Json::from("restart"));
    match template.get("ChangeSignal") {
        Some(Json::String(signal)) => {
            let upper = signal.to_uppercase();
            template.insert("ChangeSignal".to_owned(), Json::from(upper));
        }
        None | Some(Json::Null) => {
            let signal = if str_of(template, "ChangeMode") == Some("signal") {
                "SIGHUP"
            } else {
                ""
            };
            template.insert("ChangeSignal".to_owned(), Json::from(signal));
        }
        Some(_) => {}
    }
    if let Some(script) = object_mut(template, "ChangeScript") {
        default(script, "Command", Json::from(""));
        default(script, "Args", Json::Array(Vec::new()));
        default(script, "Timeout", Json::from(5 * SECOND));
        default(script, "FailOnError", Json::Bool(false));
        default(script, "RunOnFirstRender", Json::Bool(false));
    }
    default(template, "Once", Json::Bool(false));
    default(template, "Splay", Json::from(5 * SECOND));
    default(template, "Perms", Json::from("0644"));
    default(template, "LeftDelim", Json::from("{{"));
    default(template, "RightDelim", Json::from("}}"));
    default(template, "Envvars", Json::Bool(false));
    default(template, "ErrMissingKey", Json::Bool(false));
    default(template, "VaultGrace", Json::from(0));
}

fn canonicalize_volume_mount(mount: &mut Object) {
    default(mount, "PropagationMode", Json::from("private"));
    default(mount, "ReadOnly", Json::Bool(false));
    default(mount, "SELinuxLabel", Json::from(""));
}

fn canonicalize_service(service: &mut Object, job: &str, group: &str, task: Option<&str>) {
    if str_of(service, "Name").is_none_or(str::is_empty) {
        let name = match task {
            Some(task) => format!("{job}-{group}-{task}"),
            None => format!("{job}-{group}"),
        };
        service.insert("Name".to_owned(), Json::from(name));
    }
    for (key, value) in [
        ("AddressMode", "auto"),
        ("OnUpdate", "require_healthy"),
        ("Provider", "consul"),
        ("Cluster", "default"),
    ] {
        if str_of(service, key).is_none_or(str::is_empty) {
            service.insert(key.to_owned(), Json::from(value));
        }
    }
    for key in ["Meta", "CanaryMeta", "TaggedAddresses"] {
        if service.get(key).is_some_and(is_empty) {
            service.remove(key);
        }
    }
    if let Some(connect) = object_mut(service, "Connect") {
        canonicalize_connect(connect);
    }
    if let Some(weights) = object_mut(service, "Weights") {
        for key in ["Passing", "Warning"] {
            if weights
                .get(key)
                .and_then(Json::as_i64)
                .is_none_or(|w| w <= 0)
            {
                weights.insert(key.to_owned(), Json::from(1));
            }
        }
    }
    let service_restart = object_of(service, "CheckRestart");
    let on_update = str_of(service, "OnUpdate").unwrap_or_default().to_owned();
    for check in objects_mut(service, "Checks") {
        let check_restart = object_of(check, "CheckRestart");
        let merged = match (&service_restart, check_restart) {
            (None, other) => other,
            (Some(base), None) => Some(base.clone()),
            (Some(base), Some(over)) => {
                let mut merged = base.clone();
                if over
                    .get("Limit")
                    .and_then(Json::as_i64)
                    .is_some_and(|l| l > 0)
                {
                    merged.insert(
                        "Limit".to_owned(),
                        over.get("Limit").cloned().unwrap_or_default(),
                    );
                }
                if is_set(&over, "Grace") {
                    merged.insert(
                        "Grace".to_owned(),
                        over.get("Grace").cloned().unwrap_or_default(),
                    );
                }
                if over.get("IgnoreWarnings").and_then(Json::as_bool) == Some(true) {
                    merged.insert("IgnoreWarnings".to_owned(), Json::Bool(true));
                }
                Some(merged)
            }
        };
        if let Some(mut restart) = merged {
            default(&mut restart, "Grace", Json::from(SECOND));
            check.insert("CheckRestart".to_owned(), Json::Object(restart));
        }
        for key in [
            "SuccessBeforePassing",
            "FailuresBeforeCritical",
            "FailuresBeforeWarning",
        ] {
            if check.get(key).and_then(Json::as_i64).is_some_and(|n| n < 0) {
                check.insert(key.to_owned(), Json::from(0));
            }
        }
        if str_of(check, "OnUpdate").is_none_or(str::is_empty) {
            check.insert("OnUpdate".to_owned(), Json::from(on_update.clone()));
        }
    }
}

fn canonicalize_connect(connect: &mut Object) {
    if let Some(sidecar) = object_mut(connect, "SidecarService") {
        for key in ["Tags", "Meta"] {
            if sidecar.get(key).is_some_and(is_empty) {
                sidecar.remove(key);
            }
        }
        if let Some(proxy) = object_mut(sidecar, "Proxy") {
            canonicalize_proxy(proxy);
        }
    }
    if let Some(task) = object_mut(connect, "SidecarTask") {
        for key in ["Config", "Env", "Meta"] {
            if task.get(key).is_some_and(is_empty) {
                task.remove(key);
            }
        }
        match task.get_mut("Resources") {
            Some(Json::Object(resources)) => canonicalize_resources(resources),
            None => {
                let mut resources = Object::new();
                canonicalize_resources(&mut resources);
                task.insert("Resources".to_owned(), Json::Object(resources));
            }
            Some(_) => {}
        }
        match task.get_mut("LogConfig") {
            Some(Json::Object(logs)) => canonicalize_logs(logs),
            None => {
                let mut logs = Object::new();
                canonicalize_logs(&mut logs);
                task.insert("LogConfig".to_owned(), Json::Object(logs));
            }
            Some(_) => {}
        }
        default(task, "KillTimeout", Json::from(5 * SECOND));
        default(task, "ShutdownDelay", Json::from(0));
        for mount in objects_mut(task, "VolumeMounts") {
            canonicalize_volume_mount(mount);
        }
    }
    if let Some(gateway) = object_mut(connect, "Gateway") {
        if let Some(proxy) = object_mut(gateway, "Proxy") {
            default(proxy, "ConnectTimeout", Json::from(5 * SECOND));
            for key in ["EnvoyGatewayBindAddresses", "Config"] {
                if proxy.get(key).is_some_and(is_empty) {
                    proxy.remove(key);
                }
            }
        }
        if let Some(ingress) = object_mut(gateway, "Ingress") {
            if ingress.get("Listeners").is_some_and(is_empty) {
                ingress.remove("Listeners");
            }
            for listener in objects_mut(ingress, "Listeners") {
                if str_of(listener, "Protocol").is_none_or(str::is_empty) {
                    listener.insert("Protocol".to_owned(), Json::from("tcp"));
                }
                if listener.get("Services").is_some_and(is_empty) {
                    listener.remove("Services");
                }
            }
        }
        if let Some(terminating) = object_mut(gateway, "Terminating")
            && terminating.get("Services").is_some_and(is_empty)
        {
            terminating.remove("Services");
        }
    }
}

fn canonicalize_proxy(proxy: &mut Object) {
    if let Some(expose) = object_mut(proxy, "Expose")
        && expose.get("Paths").is_some_and(is_empty)
    {
        expose.remove("Paths");
    }
    for key in ["Upstreams", "Config"] {
        if proxy.get(key).is_some_and(is_empty) {
            proxy.remove(key);
        }
    }
    if let Some(tproxy) = object_mut(proxy, "TransparentProxy") {
        for key in [
            "ExcludeInboundPorts",
            "ExcludeOutboundCIDRs",
            "ExcludeOutboundPorts",
            "ExcludeUIDs",
        ] {
            if tproxy.get(key).is_some_and(is_empty) {
                tproxy.remove(key);
            }
        }
    }
    for upstream in objects_mut(proxy, "Upstreams") {
        if upstream.get("Config").is_some_and(is_empty) {
            upstream.remove("Config");
        }
    }
}

fn canonicalize_periodic(periodic: &mut Object) {
    default(periodic, "Enabled", Json::Bool(true));
    default(periodic, "Spec", Json::from(""));
    default(periodic, "Specs", Json::Array(Vec::new()));
    default(periodic, "SpecType", Json::from("cron"));
    default(periodic, "ProhibitOverlap", Json::Bool(false));
    if str_of(periodic, "TimeZone").is_none_or(str::is_empty) {
        periodic.insert("TimeZone".to_owned(), Json::from("UTC"));
    }
}

fn canonicalize_multiregion(multiregion: &mut Object) {
    match multiregion.get_mut("Strategy") {
        Some(Json::Object(strategy)) => {
            default(strategy, "MaxParallel", Json::from(0));
            default(strategy, "OnFailure", Json::from(""));
        }
        None | Some(Json::Null) => {
            let mut strategy = Object::new();
            strategy.insert("MaxParallel".to_owned(), Json::from(0));
            strategy.insert("OnFailure".to_owned(), Json::from(""));
            multiregion.insert("Strategy".to_owned(), Json::Object(strategy));
        }
        Some(_) => {}
    }
    default(multiregion, "Regions", Json::Array(Vec::new()));
    for region in objects_mut(multiregion, "Regions") {
        default(region, "Count", Json::from(1));
        default(region, "Datacenters", Json::Array(Vec::new()));
        default(region, "Meta", Json::Object(Object::new()));
    }
}

fn canonicalize_spread(spread: &mut Object) {
    strip_nulls(spread);
    default(spread, "Weight", Json::from(50));
    for target in objects_mut(spread, "SpreadTarget") {
        strip_nulls(target);
    }
}

fn canonicalize_affinity(affinity: &mut Object) {
    strip_nulls(affinity);
    default(affinity, "Weight", Json::from(50));
}

fn default_update() -> Object {
    let mut update = Object::new();
    canonicalize_update(&mut update);
    update
}

fn canonicalize_update(update: &mut Object) {
    default(update, "Stagger", Json::from(30 * SECOND));
    default(update, "MaxParallel", Json::from(1));
    default(update, "HealthCheck", Json::from("checks"));
    default(update, "MinHealthyTime", Json::from(10 * SECOND));
    default(update, "HealthyDeadline", Json::from(5 * MINUTE));
    default(update, "ProgressDeadline", Json::from(10 * MINUTE));
    default(update, "AutoRevert", Json::Bool(false));
    default(update, "Canary", Json::from(0));
    default(update, "AutoPromote", Json::Bool(false));
}

/// `UpdateStrategy.Empty`: every field unset or zero.
fn update_is_empty(update: &Object) -> bool {
    update.values().all(|value| match value {
        Json::Null => true,
        Json::Bool(b) => !b,
        Json::Number(n) => n.as_f64() == Some(0.0),
        Json::String(s) => s.is_empty(),
        _ => false,
    })
}

fn default_reschedule(job_type: &str) -> Object {
    let (attempts, interval, delay, function, max_delay, unlimited) = match job_type {
        "service" => (0, 0, 30 * SECOND, "exponential", HOUR, true),
        "batch" => (1, 24 * HOUR, 5 * SECOND, "constant", 0, false),
        _ => (0, 0, 0, "", 0, false),
    };
    let mut policy = Object::new();
    policy.insert("Attempts".to_owned(), Json::from(attempts));
    policy.insert("Interval".to_owned(), Json::from(interval));
    policy.insert("Delay".to_owned(), Json::from(delay));
    policy.insert("DelayFunction".to_owned(), Json::from(function));
    policy.insert("MaxDelay".to_owned(), Json::from(max_delay));
    policy.insert("Unlimited".to_owned(), Json::Bool(unlimited));
    policy
}

fn default_migrate() -> Object {
    let mut migrate = Object::new();
    migrate.insert("MaxParallel".to_owned(), Json::from(1));
    migrate.insert("HealthCheck".to_owned(), Json::from("checks"));
    migrate.insert("MinHealthyTime".to_owned(), Json::from(10 * SECOND));
    migrate.insert("HealthyDeadline".to_owned(), Json::from(5 * MINUTE));
    migrate
}

fn restart_policy(attempts: i64, interval: i64) -> Object {
    let mut policy = Object::new();
    policy.insert("Attempts".to_owned(), Json::from(attempts));
    policy.insert("Interval".to_owned(), Json::from(interval));
    policy.insert("Delay".to_owned(), Json::from(15 * SECOND));
    policy.insert("Mode".to_owned(), Json::from("fail"));
    policy.insert("RenderTemplates".to_owned(), Json::Bool(false));
    policy
}

/// `base` with every field `over` sets replacing base's.
fn merge(base: &Object, over: &Object) -> Object {
    let mut merged = base.clone();
    for (key, value) in over {
        if !value.is_null() {
            merged.insert(key.clone(), value.clone());
        }
    }
    merged
}

/// Fills every field of `defaults` that `object` leaves unset.
fn fill(object: &mut Object, defaults: &Object) {
    for (key, value) in defaults {
        default(object, key, value.clone());
    }
}

fn is_set(object: &Object, key: &str) -> bool {
    object.get(key).is_some_and(|v| !v.is_null())
}

fn default(object: &mut Object, key: &str, value: Json) {
    if !is_set(object, key) {
        object.insert(key.to_owned(), value);
    }
}

fn str_of<'a>(object: &'a Object, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Json::as_str)
}

fn object_of(object: &Object, key: &str) -> Option<Object> {
    match object.get(key) {
        Some(Json::Object(inner)) => Some(inner.clone()),
        _ => None,
    }
}

/// Removes and returns the object under `key`; anything else stays where it is.
fn take_object(object: &mut Object, key: &str) -> Option<Object> {
    if !matches!(object.get(key), Some(Json::Object(_))) {
        return None;
    }
    match object.remove(key) {
        Some(Json::Object(inner)) => Some(inner),
        _ => None,
    }
}

fn object_mut<'a>(object: &'a mut Object, key: &str) -> Option<&'a mut Object> {
    match object.get_mut(key) {
        Some(Json::Object(inner)) => Some(inner),
        _ => None,
    }
}

/// The objects in the array under `key` (non-objects skipped).
fn objects_mut<'a>(object: &'a mut Object, key: &str) -> impl Iterator<Item = &'a mut Object> {
    let items = match object.get_mut(key) {
        Some(Json::Array(items)) => items.as_mut_slice(),
        _ => &mut [],
    };
    items.iter_mut().filter_map(|item| match item {
        Json::Object(inner) => Some(inner),
        _ => None,
    })
}

fn is_empty(value: &Json) -> bool {
    match value {
        Json::Null => true,
        Json::Array(items) => items.is_empty(),
        Json::Object(map) => map.is_empty(),
        _ => false,
    }
}

fn strip_nulls(object: &mut Object) {
    object.retain(|_, value| !value.is_null());
}
