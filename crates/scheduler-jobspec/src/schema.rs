//! The jobspec block schema: which arguments and blocks each block accepts and the API JSON key
//! each one becomes — the `hcl:"…"` tags of Nomad's `api` structs, as data.
//!
//! Read by the block decoder (`decode.rs`), which rejects anything not listed (Nomad's HCL2
//! decoding is strict) and converts values by [`Kind`].
//!
//! Invariants: every JSON key is the Go field name of the corresponding `api` struct field
//! (what `encoding/json` writes), so decoded output has the shape of Nomad's API `Job`; keys
//! starting with `__` are decoder-internal (job- and group-level `vault`, `secret` and job-level
//! `task` blocks, which `decode.rs` distributes to tasks) and never leave the decoder.

/// How an argument or block is decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// A string (numbers and bools convert, as cty does).
    Str,
    Bool,
    /// A whole number within the given bounds (Go's int, int8, uint8…).
    Int(i64, i64),
    /// A Go duration string or a number of nanoseconds.
    Duration,
    StrList,
    IntList(i64, i64),
    /// A `map(string)` argument.
    StrMap,
    /// One nested block.
    Block(&'static Spec),
    /// Repeated nested blocks, as an array.
    Blocks(&'static Spec),
    /// Repeated labeled blocks, as an object keyed by label.
    BlockMap(&'static Spec),
    /// A block whose arguments form a `map[string]string`.
    MapBlock,
    /// `meta`/`env` of jobs, groups and tasks: a block or a `map(string)` argument.
    MapAttrOrBlock,
    /// A block whose arguments form a `map[string][]string` (check headers).
    ListMapBlock,
    /// A free-form block (`config`, `policy`): arguments as JSON, nested blocks as arrays of
    /// objects, object literals wrapped in a one-element array, as `jobspec2` does.
    ConfigBlock,
    /// `constraint` blocks with their shorthand arguments.
    Constraints,
    /// `affinity` blocks with their shorthand arguments.
    Affinities,
    /// A task's `scaling "cpu"` / `scaling "mem"` blocks.
    TaskScaling,
}

impl Kind {
    /// Whether this kind is written as `name = value`.
    pub(crate) fn is_attribute(self) -> bool {
        matches!(
            self,
            Kind::Str
                | Kind::Bool
                | Kind::Int(..)
                | Kind::Duration
                | Kind::StrList
                | Kind::IntList(..)
                | Kind::StrMap
                | Kind::MapAttrOrBlock
        )
    }

    /// Whether this kind is written as `name { … }`.
    pub(crate) fn is_block(self) -> bool {
        !self.is_attribute() || matches!(self, Kind::MapAttrOrBlock)
    }
}

/// One argument or block type of a block.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) hcl: &'static str,
    pub(crate) json: &'static str,
    pub(crate) kind: Kind,
    pub(crate) required: bool,
}

/// A block type: the JSON key its label is stored under (if it takes one) and its fields.
#[derive(Debug)]
pub(crate) struct Spec {
    pub(crate) label: Option<&'static str>,
    pub(crate) fields: &'static [Field],
}

impl Spec {
    pub(crate) fn field(&self, hcl: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.hcl == hcl)
    }
}

const I64: Kind = Kind::Int(i64::MIN, i64::MAX);
const I8: Kind = Kind::Int(-128, 127);
const U8: Kind = Kind::Int(0, 255);
const U16: Kind = Kind::Int(0, 65535);
const U32: Kind = Kind::Int(0, 4_294_967_295);
const U64: Kind = Kind::Int(0, i64::MAX);

const fn f(hcl: &'static str, json: &'static str, kind: Kind) -> Field {
    Field {
        hcl,
        json,
        kind,
        required: false,
    }
}

const fn required(hcl: &'static str, json: &'static str, kind: Kind) -> Field {
    Field {
        hcl,
        json,
        kind,
        required: true,
    }
}

/// Internal keys for blocks the decoder redistributes.
pub(crate) const VAULT_KEY: &str = "__vault";
pub(crate) const SECRETS_KEY: &str = "__secrets";
pub(crate) const TASKS_KEY: &str = "__tasks";

pub(crate) static JOB: Spec = Spec {
    label: None,
    fields: &[
        f("region", "Region", Kind::Str),
        f("namespace", "Namespace", Kind::Str),
        f("id", "ID", Kind::Str),
        f("name", "Name", Kind::Str),
        f("type", "Type", Kind::Str),
        f("priority", "Priority", I64),
        f("all_at_once", "AllAtOnce", Kind::Bool),
        f("datacenters", "Datacenters", Kind::StrList),
        f("node_pool", "NodePool", Kind::Str),
        f("constraint", "Constraints", Kind::Constraints),
        f("affinity", "Affinities", Kind::Affinities),
        f("group", "TaskGroups", Kind::Blocks(&GROUP)),
        f("update", "Update", Kind::Block(&UPDATE)),
        f("multiregion", "Multiregion", Kind::Block(&MULTIREGION)),
        f("spread", "Spreads", Kind::Blocks(&SPREAD)),
        f("periodic", "Periodic", Kind::Block(&PERIODIC)),
        f(
            "parameterized",
            "ParameterizedJob",
            Kind::Block(&PARAMETERIZED),
        ),
        f("reschedule", "Reschedule", Kind::Block(&RESCHEDULE)),
        f("migrate", "Migrate", Kind::Block(&MIGRATE)),
        f("meta", "Meta", Kind::MapAttrOrBlock),
        f("ui", "UI", Kind::Block(&UI)),
        f("vault", VAULT_KEY, Kind::Block(&VAULT)),
        f("secret", SECRETS_KEY, Kind::Blocks(&SECRET)),
        f("task", TASKS_KEY, Kind::Blocks(&TASK)),
    ],
};

static UPDATE: Spec = Spec {
    label: None,
    fields: &[
        f("stagger", "Stagger", Kind::Duration),
        f("max_parallel", "MaxParallel", I64),
        f("health_check", "HealthCheck", Kind::Str),
        f("min_healthy_time", "MinHealthyTime", Kind::Duration),
        f("healthy_deadline", "HealthyDeadline", Kind::Duration),
        f("progress_deadline", "ProgressDeadline", Kind::Duration),
        f("canary", "Canary", I64),
        f("auto_revert", "AutoRevert", Kind::Bool),
        f("auto_promote", "AutoPromote", Kind::Bool),
    ],
};

static MULTIREGION: Spec = Spec {
    label: None,
    fields: &[
        f("strategy", "Strategy", Kind::Block(&MULTIREGION_STRATEGY)),
        f("region", "Regions", Kind::Blocks(&MULTIREGION_REGION)),
    ],
};

static MULTIREGION_STRATEGY: Spec = Spec {
    label: None,
    fields: &[
        f("max_parallel", "MaxParallel", I64),
        f("on_failure", "OnFailure", Kind::Str),
    ],
};

static MULTIREGION_REGION: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("count", "Count", I64),
        f("datacenters", "Datacenters", Kind::StrList),
        f("node_pool", "NodePool", Kind::Str),
        f("meta", "Meta", Kind::MapBlock),
    ],
};

static PERIODIC: Spec = Spec {
    label: None,
    fields: &[
        f("enabled", "Enabled", Kind::Bool),
        f("cron", "Spec", Kind::Str),
        f("crons", "Specs", Kind::StrList),
        f("prohibit_overlap", "ProhibitOverlap", Kind::Bool),
        f("time_zone", "TimeZone", Kind::Str),
    ],
};

static PARAMETERIZED: Spec = Spec {
    label: None,
    fields: &[
        f("payload", "Payload", Kind::Str),
        f("meta_required", "MetaRequired", Kind::StrList),
        f("meta_optional", "MetaOptional", Kind::StrList),
    ],
};

static UI: Spec = Spec {
    label: None,
    fields: &[
        f("description", "Description", Kind::Str),
        f("link", "Links", Kind::Blocks(&UI_LINK)),
    ],
};

static UI_LINK: Spec = Spec {
    label: None,
    fields: &[f("label", "Label", Kind::Str), f("url", "URL", Kind::Str)],
};

static RESTART: Spec = Spec {
    label: None,
    fields: &[
        f("interval", "Interval", Kind::Duration),
        f("attempts", "Attempts", I64),
        f("delay", "Delay", Kind::Duration),
        f("mode", "Mode", Kind::Str),
        f("render_templates", "RenderTemplates", Kind::Bool),
    ],
};

static DISCONNECT: Spec = Spec {
    label: None,
    fields: &[
        f("lost_after", "LostAfter", Kind::Duration),
        f("stop_on_client_after", "StopOnClientAfter", Kind::Duration),
        f("replace", "Replace", Kind::Bool),
        f("reconcile", "Reconcile", Kind::Str),
    ],
};

static RESCHEDULE: Spec = Spec {
    label: None,
    fields: &[
        f("attempts", "Attempts", I64),
        f("interval", "Interval", Kind::Duration),
        f("delay", "Delay", Kind::Duration),
        f("delay_function", "DelayFunction", Kind::Str),
        f("max_delay", "MaxDelay", Kind::Duration),
        f("unlimited", "Unlimited", Kind::Bool),
    ],
};

static SPREAD: Spec = Spec {
    label: None,
    fields: &[
        f("attribute", "Attribute", Kind::Str),
        f("weight", "Weight", I8),
        f("target", "SpreadTarget", Kind::Blocks(&SPREAD_TARGET)),
    ],
};

static SPREAD_TARGET: Spec = Spec {
    label: Some("Value"),
    fields: &[f("percent", "Percent", U8)],
};

static EPHEMERAL_DISK: Spec = Spec {
    label: None,
    fields: &[
        f("sticky", "Sticky", Kind::Bool),
        f("migrate", "Migrate", Kind::Bool),
        f("size", "SizeMB", I64),
    ],
};

static MIGRATE: Spec = Spec {
    label: None,
    fields: &[
        f("max_parallel", "MaxParallel", I64),
        f("health_check", "HealthCheck", Kind::Str),
        f("min_healthy_time", "MinHealthyTime", Kind::Duration),
        f("healthy_deadline", "HealthyDeadline", Kind::Duration),
    ],
};

static VOLUME: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("type", "Type", Kind::Str),
        f("source", "Source", Kind::Str),
        f("read_only", "ReadOnly", Kind::Bool),
        f("sticky", "Sticky", Kind::Bool),
        f("access_mode", "AccessMode", Kind::Str),
        f("attachment_mode", "AttachmentMode", Kind::Str),
        f(
            "mount_options",
            "MountOptions",
            Kind::Block(&CSI_MOUNT_OPTIONS),
        ),
        f("per_alloc", "PerAlloc", Kind::Bool),
    ],
};

static CSI_MOUNT_OPTIONS: Spec = Spec {
    label: None,
    fields: &[
        f("fs_type", "FSType", Kind::Str),
        f("mount_flags", "MountFlags", Kind::StrList),
    ],
};

static VOLUME_MOUNT: Spec = Spec {
    label: None,
    fields: &[
        f("volume", "Volume", Kind::Str),
        f("destination", "Destination", Kind::Str),
        f("read_only", "ReadOnly", Kind::Bool),
        f("propagation_mode", "PropagationMode", Kind::Str),
        f("selinux_label", "SELinuxLabel", Kind::Str),
    ],
};

pub(crate) static GROUP: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("count", "Count", I64),
        f("constraint", "Constraints", Kind::Constraints),
        f("affinity", "Affinities", Kind::Affinities),
        f("task", "Tasks", Kind::Blocks(&TASK)),
        f("spread", "Spreads", Kind::Blocks(&SPREAD)),
        f("volume", "Volumes", Kind::BlockMap(&VOLUME)),
        f("restart", "RestartPolicy", Kind::Block(&RESTART)),
        f("disconnect", "Disconnect", Kind::Block(&DISCONNECT)),
        f("reschedule", "ReschedulePolicy", Kind::Block(&RESCHEDULE)),
        f(
            "ephemeral_disk",
            "EphemeralDisk",
            Kind::Block(&EPHEMERAL_DISK),
        ),
        f("update", "Update", Kind::Block(&UPDATE)),
        f("migrate", "Migrate", Kind::Block(&MIGRATE)),
        f("network", "Networks", Kind::Blocks(&NETWORK)),
        f("meta", "Meta", Kind::MapAttrOrBlock),
        f("service", "Services", Kind::Blocks(&SERVICE)),
        f("shutdown_delay", "ShutdownDelay", Kind::Duration),
        f("max_run_duration", "MaxRunDuration", Kind::Duration),
        f(
            "stop_after_client_disconnect",
            "StopAfterClientDisconnect",
            Kind::Duration,
        ),
        f(
            "max_client_disconnect",
            "MaxClientDisconnect",
            Kind::Duration,
        ),
        f("scaling", "Scaling", Kind::Block(&GROUP_SCALING)),
        f("consul", "Consul", Kind::Block(&CONSUL)),
        f(
            "prevent_reschedule_on_lost",
            "PreventRescheduleOnLost",
            Kind::Bool,
        ),
        f("vault", VAULT_KEY, Kind::Block(&VAULT)),
        f("secret", SECRETS_KEY, Kind::Blocks(&SECRET)),
    ],
};

static GROUP_SCALING: Spec = Spec {
    label: None,
    fields: &[
        f("min", "Min", I64),
        f("max", "Max", I64),
        f("policy", "Policy", Kind::ConfigBlock),
        f("enabled", "Enabled", Kind::Bool),
        f("type", "Type", Kind::Str),
    ],
};

/// A task's `scaling "cpu"` / `scaling "mem"` block (the label is checked by the decoder).
pub(crate) static TASK_SCALING: Spec = Spec {
    label: None,
    fields: &[
        f("min", "Min", I64),
        f("max", "Max", I64),
        f("policy", "Policy", Kind::ConfigBlock),
        f("enabled", "Enabled", Kind::Bool),
        f("type", "Type", Kind::Str),
    ],
};

static CONSUL: Spec = Spec {
    label: None,
    fields: &[
        f("namespace", "Namespace", Kind::Str),
        f("cluster", "Cluster", Kind::Str),
        f("partition", "Partition", Kind::Str),
    ],
};

static LOGS: Spec = Spec {
    label: None,
    fields: &[
        f("max_files", "MaxFiles", I64),
        f("max_file_size", "MaxFileSizeMB", I64),
        f("enabled", "Enabled", Kind::Bool),
        f("disabled", "Disabled", Kind::Bool),
    ],
};

static DISPATCH_PAYLOAD: Spec = Spec {
    label: None,
    fields: &[f("file", "File", Kind::Str)],
};

static LIFECYCLE: Spec = Spec {
    label: None,
    fields: &[
        required("hook", "Hook", Kind::Str),
        f("sidecar", "Sidecar", Kind::Bool),
    ],
};

pub(crate) static TASK: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("driver", "Driver", Kind::Str),
        f("user", "User", Kind::Str),
        f("lifecycle", "Lifecycle", Kind::Block(&LIFECYCLE)),
        f("config", "Config", Kind::ConfigBlock),
        f("constraint", "Constraints", Kind::Constraints),
        f("affinity", "Affinities", Kind::Affinities),
        f("env", "Env", Kind::MapAttrOrBlock),
        f("service", "Services", Kind::Blocks(&SERVICE)),
        f("resources", "Resources", Kind::Block(&RESOURCES)),
        f("restart", "RestartPolicy", Kind::Block(&RESTART)),
        f("meta", "Meta", Kind::MapAttrOrBlock),
        f("kill_timeout", "KillTimeout", Kind::Duration),
        f("logs", "LogConfig", Kind::Block(&LOGS)),
        f("artifact", "Artifacts", Kind::Blocks(&ARTIFACT)),
        f("vault", "Vault", Kind::Block(&VAULT)),
        f("consul", "Consul", Kind::Block(&CONSUL)),
        f("template", "Templates", Kind::Blocks(&TEMPLATE)),
        f(
            "dispatch_payload",
            "DispatchPayload",
            Kind::Block(&DISPATCH_PAYLOAD),
        ),
        f("volume_mount", "VolumeMounts", Kind::Blocks(&VOLUME_MOUNT)),
        f("csi_plugin", "CSIPluginConfig", Kind::Block(&CSI_PLUGIN)),
        f("leader", "Leader", Kind::Bool),
        f("shutdown_delay", "ShutdownDelay", Kind::Duration),
        f("kill_signal", "KillSignal", Kind::Str),
        f("kind", "Kind", Kind::Str),
        f("scaling", "ScalingPolicies", Kind::TaskScaling),
        f("secret", "Secrets", Kind::Blocks(&SECRET)),
        f("identity", "Identities", Kind::Blocks(&IDENTITY)),
        f("action", "Actions", Kind::Blocks(&ACTION)),
        f("schedule", "Schedule", Kind::Block(&SCHEDULE)),
    ],
};

static ARTIFACT: Spec = Spec {
    label: None,
    fields: &[
        f("source", "GetterSource", Kind::Str),
        f("options", "GetterOptions", Kind::MapBlock),
        f("headers", "GetterHeaders", Kind::MapBlock),
        f("mode", "GetterMode", Kind::Str),
        f("insecure", "GetterInsecure", Kind::Bool),
        f("destination", "RelativeDest", Kind::Str),
        f("chown", "Chown", Kind::Bool),
    ],
};

static WAIT: Spec = Spec {
    label: None,
    fields: &[
        required("min", "Min", Kind::Duration),
        required("max", "Max", Kind::Duration),
    ],
};

static CHANGE_SCRIPT: Spec = Spec {
    label: None,
    fields: &[
        required("command", "Command", Kind::Str),
        f("args", "Args", Kind::StrList),
        f("timeout", "Timeout", Kind::Duration),
        required("fail_on_error", "FailOnError", Kind::Bool),
        f("run_on_first_render", "RunOnFirstRender", Kind::Bool),
    ],
};

static TEMPLATE: Spec = Spec {
    label: None,
    fields: &[
        f("source", "SourcePath", Kind::Str),
        f("destination", "DestPath", Kind::Str),
        f("data", "EmbeddedTmpl", Kind::Str),
        f("change_mode", "ChangeMode", Kind::Str),
        f("change_script", "ChangeScript", Kind::Block(&CHANGE_SCRIPT)),
        f("change_signal", "ChangeSignal", Kind::Str),
        f("once", "Once", Kind::Bool),
        f("splay", "Splay", Kind::Duration),
        f("perms", "Perms", Kind::Str),
        f("uid", "Uid", I64),
        f("gid", "Gid", I64),
        f("left_delimiter", "LeftDelim", Kind::Str),
        f("right_delimiter", "RightDelim", Kind::Str),
        f("env", "Envvars", Kind::Bool),
        f("vault_grace", "VaultGrace", Kind::Duration),
        f("wait", "Wait", Kind::Block(&WAIT)),
        f("error_on_missing_key", "ErrMissingKey", Kind::Bool),
    ],
};

static VAULT: Spec = Spec {
    label: None,
    fields: &[
        f("policies", "Policies", Kind::StrList),
        f("role", "Role", Kind::Str),
        f("namespace", "Namespace", Kind::Str),
        f("cluster", "Cluster", Kind::Str),
        f("env", "Env", Kind::Bool),
        f("disable_file", "DisableFile", Kind::Bool),
        f("change_mode", "ChangeMode", Kind::Str),
        f("change_signal", "ChangeSignal", Kind::Str),
        f("allow_token_expiration", "AllowTokenExpiration", Kind::Bool),
    ],
};

static SECRET: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("provider", "Provider", Kind::Str),
        f("path", "Path", Kind::Str),
        f("config", "Config", Kind::ConfigBlock),
        f("env", "Env", Kind::MapBlock),
    ],
};

static CSI_PLUGIN: Spec = Spec {
    label: None,
    fields: &[
        f("id", "ID", Kind::Str),
        f("type", "Type", Kind::Str),
        f("mount_dir", "MountDir", Kind::Str),
        f("stage_publish_base_dir", "StagePublishBaseDir", Kind::Str),
        f("health_timeout", "HealthTimeout", Kind::Duration),
    ],
};

static IDENTITY: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("aud", "Audience", Kind::StrList),
        f("change_mode", "ChangeMode", Kind::Str),
        f("change_signal", "ChangeSignal", Kind::Str),
        f("env", "Env", Kind::Bool),
        f("file", "File", Kind::Bool),
        f("filepath", "Filepath", Kind::Str),
        f("service_name", "ServiceName", Kind::Str),
        f("ttl", "TTL", Kind::Duration),
        f("extra_claims", "ExtraClaims", Kind::StrList),
    ],
};

static ACTION: Spec = Spec {
    label: Some("Name"),
    fields: &[
        required("command", "Command", Kind::Str),
        f("args", "Args", Kind::StrList),
    ],
};

static SCHEDULE: Spec = Spec {
    label: None,
    fields: &[f("cron", "Cron", Kind::Block(&SCHEDULE_CRON))],
};

static SCHEDULE_CRON: Spec = Spec {
    label: None,
    fields: &[
        f("start", "Start", Kind::Str),
        f("end", "End", Kind::Str),
        f("timezone", "Timezone", Kind::Str),
    ],
};

static RESOURCES: Spec = Spec {
    label: None,
    fields: &[
        f("cpu", "CPU", I64),
        f("cores", "Cores", I64),
        f("memory", "MemoryMB", I64),
        f("memory_max", "MemoryMaxMB", I64),
        f("disk", "DiskMB", I64),
        f("network", "Networks", Kind::Blocks(&NETWORK)),
        f("device", "Devices", Kind::Blocks(&DEVICE)),
        f("numa", "NUMA", Kind::Block(&NUMA)),
        f("secrets", "SecretsMB", I64),
        f("iops", "IOPS", I64),
    ],
};

static NUMA: Spec = Spec {
    label: None,
    fields: &[
        f("affinity", "Affinity", Kind::Str),
        f("devices", "Devices", Kind::StrList),
    ],
};

static DEVICE: Spec = Spec {
    label: Some("Name"),
    fields: &[
        f("count", "Count", U64),
        f("constraint", "Constraints", Kind::Constraints),
        f("affinity", "Affinities", Kind::Affinities),
    ],
};

static PORT: Spec = Spec {
    label: Some("Label"),
    fields: &[
        f("static", "Value", I64),
        f("to", "To", I64),
        f("host_network", "HostNetwork", Kind::Str),
        f("ignore_collision", "IgnoreCollision", Kind::Bool),
    ],
};

static DNS: Spec = Spec {
    label: None,
    fields: &[
        f("servers", "Servers", Kind::StrList),
        f("searches", "Searches", Kind::StrList),
        f("options", "Options", Kind::StrList),
    ],
};

static CNI: Spec = Spec {
    label: None,
    fields: &[f("args", "Args", Kind::StrMap)],
};

static NETWORK: Spec = Spec {
    label: None,
    fields: &[
        f("mode", "Mode", Kind::Str),
        f("device", "Device", Kind::Str),
        f("cidr", "CIDR", Kind::Str),
        f("ip", "IP", Kind::Str),
        f("dns", "DNS", Kind::Block(&DNS)),
        f("reserved_ports", "ReservedPorts", Kind::Blocks(&PORT)),
        f("port", "DynamicPorts", Kind::Blocks(&PORT)),
        f("hostname", "Hostname", Kind::Str),
        f("mbits", "MBits", I64),
        f("cni", "CNI", Kind::Block(&CNI)),
    ],
};

static SERVICE: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("tags", "Tags", Kind::StrList),
        f("canary_tags", "CanaryTags", Kind::StrList),
        f("enable_tag_override", "EnableTagOverride", Kind::Bool),
        f("port", "PortLabel", Kind::Str),
        f("address_mode", "AddressMode", Kind::Str),
        f("address", "Address", Kind::Str),
        f("check", "Checks", Kind::Blocks(&CHECK)),
        f("check_restart", "CheckRestart", Kind::Block(&CHECK_RESTART)),
        f("connect", "Connect", Kind::Block(&CONNECT)),
        f("meta", "Meta", Kind::MapBlock),
        f("canary_meta", "CanaryMeta", Kind::MapBlock),
        f("tagged_addresses", "TaggedAddresses", Kind::MapBlock),
        f("task", "TaskName", Kind::Str),
        f("on_update", "OnUpdate", Kind::Str),
        f("identity", "Identity", Kind::Block(&IDENTITY)),
        f("weights", "Weights", Kind::Block(&SERVICE_WEIGHTS)),
        f("provider", "Provider", Kind::Str),
        f("cluster", "Cluster", Kind::Str),
        f("kind", "Kind", Kind::Str),
    ],
};

static SERVICE_WEIGHTS: Spec = Spec {
    label: None,
    fields: &[f("passing", "Passing", I64), f("warning", "Warning", I64)],
};

static CHECK_RESTART: Spec = Spec {
    label: None,
    fields: &[
        f("limit", "Limit", I64),
        f("grace", "Grace", Kind::Duration),
        f("ignore_warnings", "IgnoreWarnings", Kind::Bool),
    ],
};

static CHECK: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("type", "Type", Kind::Str),
        f("command", "Command", Kind::Str),
        f("args", "Args", Kind::StrList),
        f("path", "Path", Kind::Str),
        f("protocol", "Protocol", Kind::Str),
        f("port", "PortLabel", Kind::Str),
        f("expose", "Expose", Kind::Bool),
        f("address_mode", "AddressMode", Kind::Str),
        f("advertise", "Advertise", Kind::Str),
        f("interval", "Interval", Kind::Duration),
        f("timeout", "Timeout", Kind::Duration),
        f("initial_status", "InitialStatus", Kind::Str),
        f("notes", "Notes", Kind::Str),
        f("tls_server_name", "TLSServerName", Kind::Str),
        f("tls_skip_verify", "TLSSkipVerify", Kind::Bool),
        f("header", "Header", Kind::ListMapBlock),
        f("method", "Method", Kind::Str),
        f("check_restart", "CheckRestart", Kind::Block(&CHECK_RESTART)),
        f("grpc_service", "GRPCService", Kind::Str),
        f("grpc_use_tls", "GRPCUseTLS", Kind::Bool),
        f("task", "TaskName", Kind::Str),
        f("success_before_passing", "SuccessBeforePassing", I64),
        f("failures_before_critical", "FailuresBeforeCritical", I64),
        f("failures_before_warning", "FailuresBeforeWarning", I64),
        f("body", "Body", Kind::Str),
        f("on_update", "OnUpdate", Kind::Str),
    ],
};

static CONNECT: Spec = Spec {
    label: None,
    fields: &[
        f("native", "Native", Kind::Bool),
        f("gateway", "Gateway", Kind::Block(&GATEWAY)),
        f(
            "sidecar_service",
            "SidecarService",
            Kind::Block(&SIDECAR_SERVICE),
        ),
        f("sidecar_task", "SidecarTask", Kind::Block(&SIDECAR_TASK)),
    ],
};

static SIDECAR_SERVICE: Spec = Spec {
    label: None,
    fields: &[
        f("tags", "Tags", Kind::StrList),
        f("port", "Port", Kind::Str),
        f("proxy", "Proxy", Kind::Block(&PROXY)),
        f(
            "disable_default_tcp_check",
            "DisableDefaultTCPCheck",
            Kind::Bool,
        ),
        f("meta", "Meta", Kind::MapBlock),
    ],
};

static SIDECAR_TASK: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("driver", "Driver", Kind::Str),
        f("user", "User", Kind::Str),
        f("config", "Config", Kind::ConfigBlock),
        f("env", "Env", Kind::MapBlock),
        f("resources", "Resources", Kind::Block(&RESOURCES)),
        f("meta", "Meta", Kind::MapBlock),
        f("kill_timeout", "KillTimeout", Kind::Duration),
        f("logs", "LogConfig", Kind::Block(&LOGS)),
        f("shutdown_delay", "ShutdownDelay", Kind::Duration),
        f("kill_signal", "KillSignal", Kind::Str),
        f("volume_mount", "VolumeMounts", Kind::Blocks(&VOLUME_MOUNT)),
        f("identity", "Identities", Kind::Blocks(&IDENTITY)),
    ],
};

static PROXY: Spec = Spec {
    label: None,
    fields: &[
        f("local_service_address", "LocalServiceAddress", Kind::Str),
        f("local_service_port", "LocalServicePort", I64),
        f("expose", "Expose", Kind::Block(&EXPOSE)),
        f("upstreams", "Upstreams", Kind::Blocks(&UPSTREAM)),
        f(
            "transparent_proxy",
            "TransparentProxy",
            Kind::Block(&TRANSPARENT_PROXY),
        ),
        f("config", "Config", Kind::ConfigBlock),
    ],
};

static MESH_GATEWAY: Spec = Spec {
    label: None,
    fields: &[f("mode", "Mode", Kind::Str)],
};

static UPSTREAM: Spec = Spec {
    label: None,
    fields: &[
        f("destination_name", "DestinationName", Kind::Str),
        f("destination_namespace", "DestinationNamespace", Kind::Str),
        f("destination_peer", "DestinationPeer", Kind::Str),
        f("destination_partition", "DestinationPartition", Kind::Str),
        f("destination_type", "DestinationType", Kind::Str),
        f("local_bind_port", "LocalBindPort", I64),
        f("datacenter", "Datacenter", Kind::Str),
        f("local_bind_address", "LocalBindAddress", Kind::Str),
        f("local_bind_socket_path", "LocalBindSocketPath", Kind::Str),
        f("local_bind_socket_mode", "LocalBindSocketMode", Kind::Str),
        f("mesh_gateway", "MeshGateway", Kind::Block(&MESH_GATEWAY)),
        f("config", "Config", Kind::ConfigBlock),
    ],
};

static TRANSPARENT_PROXY: Spec = Spec {
    label: None,
    fields: &[
        f("uid", "UID", Kind::Str),
        f("outbound_port", "OutboundPort", U16),
        f(
            "exclude_inbound_ports",
            "ExcludeInboundPorts",
            Kind::StrList,
        ),
        f(
            "exclude_outbound_ports",
            "ExcludeOutboundPorts",
            Kind::IntList(0, 65535),
        ),
        f(
            "exclude_outbound_cidrs",
            "ExcludeOutboundCIDRs",
            Kind::StrList,
        ),
        f("exclude_uids", "ExcludeUIDs", Kind::StrList),
        f("no_dns", "NoDNS", Kind::Bool),
    ],
};

static EXPOSE: Spec = Spec {
    label: None,
    fields: &[f("path", "Paths", Kind::Blocks(&EXPOSE_PATH))],
};

static EXPOSE_PATH: Spec = Spec {
    label: None,
    fields: &[
        f("path", "Path", Kind::Str),
        f("protocol", "Protocol", Kind::Str),
        f("local_path_port", "LocalPathPort", I64),
        f("listener_port", "ListenerPort", Kind::Str),
    ],
};

static GATEWAY: Spec = Spec {
    label: None,
    fields: &[
        f("proxy", "Proxy", Kind::Block(&GATEWAY_PROXY)),
        f("ingress", "Ingress", Kind::Block(&INGRESS)),
        f("terminating", "Terminating", Kind::Block(&TERMINATING)),
        f("mesh", "Mesh", Kind::Block(&MESH)),
    ],
};

static GATEWAY_BIND_ADDRESS: Spec = Spec {
    label: Some("Name"),
    fields: &[f("address", "Address", Kind::Str), f("port", "Port", I64)],
};

static GATEWAY_PROXY: Spec = Spec {
    label: None,
    fields: &[
        f("connect_timeout", "ConnectTimeout", Kind::Duration),
        f(
            "envoy_gateway_bind_tagged_addresses",
            "EnvoyGatewayBindTaggedAddresses",
            Kind::Bool,
        ),
        f(
            "envoy_gateway_bind_addresses",
            "EnvoyGatewayBindAddresses",
            Kind::BlockMap(&GATEWAY_BIND_ADDRESS),
        ),
        f(
            "envoy_gateway_no_default_bind",
            "EnvoyGatewayNoDefaultBind",
            Kind::Bool,
        ),
        f(
            "envoy_dns_discovery_type",
            "EnvoyDNSDiscoveryType",
            Kind::Str,
        ),
        f("config", "Config", Kind::ConfigBlock),
    ],
};

static GATEWAY_TLS_SDS: Spec = Spec {
    label: None,
    fields: &[
        f("cluster_name", "ClusterName", Kind::Str),
        f("cert_resource", "CertResource", Kind::Str),
    ],
};

static GATEWAY_TLS: Spec = Spec {
    label: None,
    fields: &[
        f("enabled", "Enabled", Kind::Bool),
        f("tls_min_version", "TLSMinVersion", Kind::Str),
        f("tls_max_version", "TLSMaxVersion", Kind::Str),
        f("cipher_suites", "CipherSuites", Kind::StrList),
        f("sds", "SDS", Kind::Block(&GATEWAY_TLS_SDS)),
    ],
};

static HEADER_MODIFIERS: Spec = Spec {
    label: None,
    fields: &[
        f("add", "Add", Kind::MapBlock),
        f("set", "Set", Kind::MapBlock),
        f("remove", "Remove", Kind::StrList),
    ],
};

static INGRESS_SERVICE: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("hosts", "Hosts", Kind::StrList),
        f("tls", "TLS", Kind::Block(&GATEWAY_TLS)),
        f(
            "request_headers",
            "RequestHeaders",
            Kind::Block(&HEADER_MODIFIERS),
        ),
        f(
            "response_headers",
            "ResponseHeaders",
            Kind::Block(&HEADER_MODIFIERS),
        ),
        f("max_connections", "MaxConnections", U32),
        f("max_pending_requests", "MaxPendingRequests", U32),
        f("max_concurrent_requests", "MaxConcurrentRequests", U32),
    ],
};

static INGRESS_LISTENER: Spec = Spec {
    label: None,
    fields: &[
        f("port", "Port", I64),
        f("protocol", "Protocol", Kind::Str),
        f("service", "Services", Kind::Blocks(&INGRESS_SERVICE)),
    ],
};

static INGRESS: Spec = Spec {
    label: None,
    fields: &[
        f("tls", "TLS", Kind::Block(&GATEWAY_TLS)),
        f("listener", "Listeners", Kind::Blocks(&INGRESS_LISTENER)),
    ],
};

static LINKED_SERVICE: Spec = Spec {
    label: None,
    fields: &[
        f("name", "Name", Kind::Str),
        f("ca_file", "CAFile", Kind::Str),
        f("cert_file", "CertFile", Kind::Str),
        f("key_file", "KeyFile", Kind::Str),
        f("sni", "SNI", Kind::Str),
    ],
};

static TERMINATING: Spec = Spec {
    label: None,
    fields: &[f("service", "Services", Kind::Blocks(&LINKED_SERVICE))],
};

static MESH: Spec = Spec {
    label: None,
    fields: &[],
};
