//! Nomad's structured job diff (`nomad/structs/diff.go`), as served by
//! `GET /v1/job/:id/versions?diffs=true`.
//!
//! Where it sits: a pure library below the `scheduler` service, one function over two Job
//! objects in the JSON form its API renders (PascalCase keys, durations as integer
//! nanoseconds, maps as JSON objects); the scheduler's versions handler calls [`job_diff`]
//! with `contextual = true` and serializes the [`JobDiff`] as is. Working on the JSON rather
//! than on `scheduler_structs::Job` keeps the blocks the scheduler only carries along
//! (services, templates, volumes...) diffable without typing them, and this crate free of
//! the scheduler's types.
//!
//! How it follows upstream:
//! - A struct's *primitive* fields (strings, numbers, booleans, and string maps flattened to
//!   `Meta[key]`) become [`FieldDiff`]s whose `Old`/`New` are Go's `fmt` rendering of the value
//!   (an absent value is `""`); nested structs become [`ObjectDiff`]s named after the struct;
//!   string lists diff as sets; lists of structs are matched by name, by Nomad's diff id, by
//!   whole value or by position, exactly where upstream does each.
//! - Which keys of a JSON object are maps (flattened) and which are nested structs (diffed on
//!   their own, or not at all) is fixed per type below (`Shape`), with the struct's value
//!   fields, so that a key missing from the JSON still reads as Go's zero value (`0`, `false`,
//!   `""`) as it would in the Go struct; pointer-valued scalars that upstream's flattener skips
//!   are skipped here too.
//! - Only what upstream diffs is diffed: spreads, task lifecycle, task restart policy, task
//!   CSI plugin config and scaling policies list nothing. A change there still makes its group
//!   or task Edited (those are compared whole, as upstream's `DeepEqual`), but a job-level
//!   spread change alone leaves the job diff None, as upstream.
//! - Numbers inside free-form maps (task `Config`, scaling `Policy`) are rendered as Go renders
//!   the `float64` that JSON decoding gives them (`1000000` → `1e+06`).
//! - The output order is upstream's: fields by name, task groups and tasks by name, each list
//!   of sibling objects by (name, type, size), with the per-struct object order unsorted (as
//!   appended upstream) where upstream leaves it so.
//!
//! Invariants: no I/O, no panics on any input (missing, null or ill-typed keys read as Go's
//! zero values), deterministic output for equal inputs.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

#[cfg(test)]
mod tests;

/// The kind of change a diff entry describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DiffType {
    Added,
    Deleted,
    Edited,
    None,
}

impl DiffType {
    /// Upstream's sort order among siblings of the same name: Edited, Added, Deleted, None.
    fn rank(self) -> u8 {
        match self {
            DiffType::Edited => 0,
            DiffType::Added => 1,
            DiffType::Deleted => 2,
            DiffType::None => 3,
        }
    }
}

/// The diff of two versions of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Fields", serialize_with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", serialize_with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "TaskGroups", serialize_with = "null_if_empty")]
    pub task_groups: Vec<TaskGroupDiff>,
}

/// The diff of one task group (matched by name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskGroupDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", serialize_with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", serialize_with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    #[serde(rename = "Tasks", serialize_with = "null_if_empty")]
    pub tasks: Vec<TaskDiff>,
    /// Placement counts by update kind; only plans fill it, so always `None` here.
    #[serde(rename = "Updates")]
    pub updates: Option<BTreeMap<String, u64>>,
}

/// The diff of one task (matched by name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", serialize_with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", serialize_with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
    /// Plan annotations; always `None` here.
    #[serde(rename = "Annotations")]
    pub annotations: Option<Vec<String>>,
}

/// The diff of a nested struct (`RestartPolicy`, `Config`, `Service`...).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Fields", serialize_with = "null_if_empty")]
    pub fields: Vec<FieldDiff>,
    #[serde(rename = "Objects", serialize_with = "null_if_empty")]
    pub objects: Vec<ObjectDiff>,
}

/// The diff of one primitive field; `Old`/`New` are `""` when absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldDiff {
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Old")]
    pub old: String,
    #[serde(rename = "New")]
    pub new: String,
    /// Plan annotations; always `None` here.
    #[serde(rename = "Annotations")]
    pub annotations: Option<Vec<String>>,
}

/// Go serializes an empty (nil) slice as `null`.
fn null_if_empty<T: Serialize, S: Serializer>(
    items: &[T],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    if items.is_empty() {
        serializer.serialize_none()
    } else {
        items.serialize(serializer)
    }
}

impl ObjectDiff {
    fn new(diff_type: DiffType, name: &str) -> ObjectDiff {
        ObjectDiff {
            diff_type,
            name: name.to_owned(),
            fields: Vec::new(),
            objects: Vec::new(),
        }
    }
}

/// The diff from `old` to `new` (both Job objects as our API renders them: PascalCase keys,
/// durations as integer nanoseconds, maps as JSON objects). `contextual` = Nomad's
/// Diff(new, true): unchanged fields inside changed objects are included with Type "None".
///
/// A null (or non-object) `old` is an added job, a null `new` a deleted one. Upstream refuses
/// to diff jobs with different IDs; here the diff is computed anyway, under the new ID.
pub fn job_diff(old: &Value, new: &Value, contextual: bool) -> JobDiff {
    let (o, n) = (old.as_object(), new.as_object());
    let mut diff = JobDiff {
        diff_type: DiffType::None,
        id: String::new(),
        fields: Vec::new(),
        objects: Vec::new(),
        task_groups: Vec::new(),
    };
    match (o, n) {
        (None, None) => return diff,
        (None, Some(_)) => {
            diff.diff_type = DiffType::Added;
            diff.id = get_str(n, "ID");
        }
        (Some(_), None) => {
            diff.diff_type = DiffType::Deleted;
            diff.id = get_str(o, "ID");
        }
        (Some(_), Some(_)) => diff.id = get_str(n, "ID"),
    }

    diff.fields = field_diffs(flat(o, &JOB).as_ref(), flat(n, &JOB).as_ref(), false);

    if let Some(dcs) = string_set_diff(
        &get_strs(o, "Datacenters"),
        &get_strs(n, "Datacenters"),
        "Datacenters",
        contextual,
    ) && dcs.diff_type != DiffType::None
    {
        diff.objects.push(dcs);
    }
    diff.objects.extend(constraint_diffs(o, n, contextual));
    diff.objects.extend(affinity_diffs(o, n, contextual));
    diff.task_groups = task_group_diffs(
        get_arr(o, "TaskGroups"),
        get_arr(n, "TaskGroups"),
        contextual,
    );
    diff.objects.extend(periodic_diff(
        get_obj(o, "Periodic"),
        get_obj(n, "Periodic"),
        contextual,
    ));
    diff.objects.extend(parameterized_diff(
        get_obj(o, "ParameterizedJob"),
        get_obj(n, "ParameterizedJob"),
        contextual,
    ));
    diff.objects.extend(multiregion_diff(
        get_obj(o, "Multiregion"),
        get_obj(n, "Multiregion"),
        contextual,
    ));
    diff.objects
        .extend(ui_diff(get_obj(o, "UI"), get_obj(n, "UI"), contextual));

    if diff.diff_type == DiffType::None
        && (diff.fields.iter().any(|f| f.diff_type != DiffType::None)
            || diff.objects.iter().any(|d| d.diff_type != DiffType::None)
            || diff
                .task_groups
                .iter()
                .any(|d| d.diff_type != DiffType::None))
    {
        diff.diff_type = DiffType::Edited;
    }
    diff
}

// ---------------------------------------------------------------------------------------------
// Shapes: how each upstream struct flattens.

type Obj = Map<String, Value>;
type Flat = BTreeMap<String, String>;

/// The Go zero value of a field missing from the JSON: `""`, `0`, `false`, or a nil pointer
/// (`"nil"`, only in full flattening).
#[derive(Clone, Copy)]
enum Zero {
    S,
    I,
    B,
    N,
}

use Zero::{B, I, N, S};

impl Zero {
    fn text(self) -> &'static str {
        match self {
            Zero::S => "",
            Zero::I => "0",
            Zero::B => "false",
            Zero::N => "nil",
        }
    }
}

/// How one struct flattens: `skip` names flattened keys to drop (upstream's filters, plus
/// pointer-valued scalars and secrets it never shows), `maps` names the string-map fields
/// that flatten to `Name[key]`, `zero` lists the struct's value fields so that a key missing
/// from the JSON still shows as Go's zero value, as it always exists in a Go struct. Every
/// other object or array value is a nested struct or list, diffed on its own (or not at all,
/// as upstream).
struct Shape {
    skip: &'static [&'static str],
    maps: &'static [&'static str],
    zero: &'static [(&'static str, Zero)],
}

const fn fields(zero: &'static [(&'static str, Zero)]) -> Shape {
    Shape {
        skip: &[],
        maps: &[],
        zero,
    }
}

/// Blocks without primitive fields of their own (gateways, expose...).
const PLAIN: Shape = fields(&[]);

const JOB: Shape = Shape {
    skip: &[
        "ID",
        "Status",
        "StatusDescription",
        "Version",
        "Stable",
        "CreateIndex",
        "ModifyIndex",
        "JobModifyIndex",
        "Update",
        "SubmitTime",
        "NomadTokenID",
        "SchedulerTokenID",
        "VaultToken",
        "ConsulToken",
        "SecretsToken",
        "RegistryToken",
        // []byte upstream (skipped by the flattener); base64 text in JSON.
        "Payload",
    ],
    maps: &["Meta"],
    zero: &[],
};

const TASK_GROUP: Shape = Shape {
    // Pointer durations are skipped by upstream's flattener (ShutdownDelay is re-added when
    // both groups exist).
    skip: &[
        "Name",
        "ShutdownDelay",
        "MaxRunDuration",
        "StopAfterClientDisconnect",
        "MaxClientDisconnect",
    ],
    maps: &["Meta"],
    zero: &[],
};

const TASK: Shape = Shape {
    skip: &["Name", "Config"],
    maps: &["Env", "Meta"],
    zero: &[],
};

const CONSTRAINT: Shape = fields(&[("LTarget", S), ("RTarget", S), ("Operand", S)]);
const AFFINITY: Shape = fields(&[
    ("LTarget", S),
    ("RTarget", S),
    ("Operand", S),
    ("Weight", I),
]);
const RESTART: Shape = fields(&[
    ("Attempts", I),
    ("Interval", I),
    ("Delay", I),
    ("Mode", S),
    ("RenderTemplates", B),
]);
const RESCHEDULE: Shape = fields(&[
    ("Attempts", I),
    ("Interval", I),
    ("Delay", I),
    ("DelayFunction", S),
    ("MaxDelay", I),
    ("Unlimited", B),
]);
const MIGRATE: Shape = fields(&[
    ("MaxParallel", I),
    ("HealthCheck", S),
    ("MinHealthyTime", I),
    ("HealthyDeadline", I),
]);
const UPDATE: Shape = Shape {
    skip: &["Stagger"],
    maps: &[],
    zero: &[
        ("MaxParallel", I),
        ("HealthCheck", S),
        ("MinHealthyTime", I),
        ("HealthyDeadline", I),
        ("ProgressDeadline", I),
        ("AutoRevert", B),
        ("AutoPromote", B),
        ("Canary", I),
    ],
};
const EPHEMERAL_DISK: Shape = fields(&[("Sticky", B), ("SizeMB", I), ("Migrate", B)]);
const CONSUL: Shape = fields(&[("Namespace", S), ("Cluster", S), ("Partition", S)]);
const DISCONNECT: Shape = fields(&[
    ("LostAfter", I),
    ("StopOnClientAfter", N),
    ("Replace", N),
    ("Reconcile", S),
]);
const SCALING: Shape = Shape {
    skip: &[
        "CreateIndex",
        "ModifyIndex",
        "ID",
        "Type",
        "Target[Job]",
        "Target[Group]",
        "Target[Namespace]",
    ],
    maps: &["Target"],
    zero: &[("Min", I), ("Max", I), ("Enabled", B)],
};
const VOLUME: Shape = fields(&[
    ("Name", S),
    ("Type", S),
    ("Source", S),
    ("ReadOnly", B),
    ("Sticky", B),
    ("AccessMode", S),
    ("AttachmentMode", S),
    ("PerAlloc", B),
]);
const MOUNT_OPTIONS: Shape = fields(&[("FSType", S)]);
const NETWORK: Shape = Shape {
    skip: &["Device", "CIDR", "IP", "MBits"],
    maps: &[],
    zero: &[("Mode", S), ("Hostname", S)],
};
const STATIC_PORT: Shape = fields(&[
    ("Label", S),
    ("Value", I),
    ("To", I),
    ("HostNetwork", S),
    ("IgnoreCollision", B),
]);
const DYNAMIC_PORT: Shape = Shape {
    skip: &["Value", "IgnoreCollision"],
    maps: &[],
    zero: &[("Label", S), ("To", I), ("HostNetwork", S)],
};
const RESOURCES: Shape = fields(&[
    ("CPU", I),
    ("Cores", I),
    ("MemoryMB", I),
    ("MemoryMaxMB", I),
    ("DiskMB", I),
    ("IOPS", I),
    ("SecretsMB", I),
]);
const DEVICE: Shape = fields(&[("Name", S), ("Count", I)]);
const NUMA: Shape = fields(&[("Affinity", S)]);
const LOG_CONFIG: Shape = fields(&[("MaxFiles", I), ("MaxFileSizeMB", I), ("Disabled", B)]);
const DISPATCH_PAYLOAD: Shape = fields(&[("File", S)]);
const ARTIFACT: Shape = Shape {
    skip: &[],
    maps: &["GetterOptions", "GetterHeaders"],
    zero: &[
        ("GetterSource", S),
        ("GetterMode", S),
        ("GetterInsecure", B),
        ("RelativeDest", S),
        ("Chown", B),
    ],
};
const VAULT: Shape = fields(&[
    ("Role", S),
    ("Namespace", S),
    ("Cluster", S),
    ("Env", B),
    ("DisableFile", B),
    ("ChangeMode", S),
    ("ChangeSignal", S),
    ("AllowTokenExpiration", B),
]);
const SECRET: Shape = Shape {
    skip: &[],
    maps: &["Config", "Env"],
    zero: &[("Name", S), ("Provider", S), ("Path", S)],
};
const TEMPLATE: Shape = fields(&[
    ("SourcePath", S),
    ("DestPath", S),
    ("EmbeddedTmpl", S),
    ("ChangeMode", S),
    ("ChangeSignal", S),
    ("Once", B),
    ("Splay", I),
    ("Perms", S),
    ("LeftDelim", S),
    ("RightDelim", S),
    ("Envvars", B),
    ("VaultGrace", I),
    ("ErrMissingKey", B),
]);
const WAIT: Shape = fields(&[("Min", N), ("Max", N)]);
const CHANGE_SCRIPT: Shape = fields(&[
    ("Command", S),
    ("Timeout", I),
    ("FailOnError", B),
    ("RunOnFirstRender", B),
]);
const IDENTITY: Shape = fields(&[
    ("Name", S),
    ("ChangeMode", S),
    ("ChangeSignal", S),
    ("Env", B),
    ("File", B),
    ("Filepath", S),
    ("ServiceName", S),
    ("TTL", I),
]);
const ACTION: Shape = fields(&[("Name", S), ("Command", S)]);
const VOLUME_MOUNT: Shape = fields(&[
    ("Volume", S),
    ("Destination", S),
    ("ReadOnly", B),
    ("PropagationMode", S),
    ("SELinuxLabel", S),
]);
const SCHEDULE_CRON: Shape = fields(&[("Start", S), ("End", S), ("Timezone", S)]);
const PERIODIC: Shape = fields(&[
    ("Enabled", B),
    ("Spec", S),
    ("SpecType", S),
    ("ProhibitOverlap", B),
    ("TimeZone", S),
]);
const PARAMETERIZED: Shape = fields(&[("Payload", S)]);
const STRATEGY: Shape = fields(&[("MaxParallel", I), ("OnFailure", S)]);
const REGION: Shape = Shape {
    skip: &[],
    maps: &["Meta"],
    zero: &[("Name", S), ("Count", I), ("NodePool", S)],
};
const UI: Shape = fields(&[("Description", S)]);
const LINK: Shape = fields(&[("Label", S), ("Url", S)]);
const SERVICE: Shape = Shape {
    skip: &[],
    maps: &["Meta", "CanaryMeta", "TaggedAddresses"],
    zero: &[
        ("Name", S),
        ("TaskName", S),
        ("PortLabel", S),
        ("AddressMode", S),
        ("Address", S),
        ("EnableTagOverride", B),
        ("Namespace", S),
        ("OnUpdate", S),
        ("Provider", S),
        ("Cluster", S),
        ("Kind", S),
    ],
};
const CHECK: Shape = fields(&[
    ("Name", S),
    ("Type", S),
    ("Command", S),
    ("Path", S),
    ("Protocol", S),
    ("PortLabel", S),
    ("Expose", B),
    ("AddressMode", S),
    ("Interval", I),
    ("Timeout", I),
    ("InitialStatus", S),
    ("Notes", S),
    ("TLSServerName", S),
    ("TLSSkipVerify", B),
    ("Method", S),
    ("GRPCService", S),
    ("GRPCUseTLS", B),
    ("TaskName", S),
    ("SuccessBeforePassing", I),
    ("FailuresBeforeCritical", I),
    ("FailuresBeforeWarning", I),
    ("Body", S),
    ("OnUpdate", S),
]);
const CHECK_RESTART: Shape = fields(&[("Limit", I), ("Grace", I), ("IgnoreWarnings", B)]);
const CONNECT: Shape = fields(&[("Native", B)]);
const SIDECAR_SERVICE: Shape = Shape {
    skip: &[],
    maps: &["Meta"],
    zero: &[("Port", S), ("DisableDefaultTCPCheck", B)],
};
const SIDECAR_TASK: Shape = Shape {
    // Pointer durations, skipped by upstream's flattener.
    skip: &["KillTimeout", "ShutdownDelay"],
    maps: &["Env", "Meta"],
    zero: &[("Name", S), ("Driver", S), ("User", S), ("KillSignal", S)],
};
const PROXY: Shape = fields(&[("LocalServiceAddress", S), ("LocalServicePort", I)]);
const UPSTREAM: Shape = fields(&[
    ("DestinationName", S),
    ("DestinationNamespace", S),
    ("DestinationPartition", S),
    ("DestinationPeer", S),
    ("DestinationType", S),
    ("LocalBindPort", I),
    ("Datacenter", S),
    ("LocalBindAddress", S),
    ("LocalBindSocketPath", S),
    ("LocalBindSocketMode", S),
]);
const MESH_GATEWAY: Shape = fields(&[("Mode", S)]);
const EXPOSE_PATH: Shape = fields(&[
    ("Path", S),
    ("Protocol", S),
    ("LocalPathPort", I),
    ("ListenerPort", S),
]);
const TRANSPARENT_PROXY: Shape = fields(&[("UID", S), ("OutboundPort", I), ("NoDNS", B)]);
const GATEWAY_PROXY: Shape = Shape {
    skip: &["ConnectTimeout"],
    maps: &[],
    zero: &[
        ("EnvoyGatewayBindTaggedAddresses", B),
        ("EnvoyGatewayNoDefaultBind", B),
        ("EnvoyDNSDiscoveryType", S),
    ],
};
const TLS: Shape = fields(&[("Enabled", B), ("TLSMinVersion", S), ("TLSMaxVersion", S)]);
const SDS: Shape = fields(&[("ClusterName", S), ("CertResource", S)]);
const LISTENER: Shape = fields(&[("Port", I), ("Protocol", S)]);
const INGRESS_SERVICE: Shape = fields(&[("Name", S)]);
const HEADER_MODIFIERS: Shape = Shape {
    skip: &[],
    maps: &["Add", "Set"],
    zero: &[],
};
const LINKED_SERVICE: Shape = fields(&[
    ("Name", S),
    ("CAFile", S),
    ("CertFile", S),
    ("KeyFile", S),
    ("SNI", S),
]);

// ---------------------------------------------------------------------------------------------
// JSON access with Go's zero-value semantics: absent, null and ill-typed read as empty.

fn get<'a>(o: Option<&'a Obj>, key: &str) -> Option<&'a Value> {
    o?.get(key).filter(|v| !v.is_null())
}

fn get_obj<'a>(o: Option<&'a Obj>, key: &str) -> Option<&'a Obj> {
    get(o, key)?.as_object()
}

fn get_arr<'a>(o: Option<&'a Obj>, key: &str) -> &'a [Value] {
    get(o, key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn get_str(o: Option<&Obj>, key: &str) -> String {
    get(o, key).and_then(typed).unwrap_or_default()
}

fn get_strs(o: Option<&Obj>, key: &str) -> Vec<String> {
    get_arr(o, key).iter().filter_map(typed).collect()
}

fn objects_of(items: &[Value]) -> Vec<&Obj> {
    items.iter().filter_map(Value::as_object).collect()
}

/// A typed scalar as Go's `fmt` renders it (ints in decimal, bools, strings raw).
fn typed(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(if let Some(i) = n.as_i64() {
            i.to_string()
        } else if let Some(u) = n.as_u64() {
            u.to_string()
        } else {
            go_float(n.as_f64().unwrap_or_default())
        }),
        _ => None,
    }
}

/// A scalar held in an `interface{}` decoded from JSON: every number is a `float64`.
fn loose(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) => Some(go_float(n.as_f64().unwrap_or_default())),
        other => typed(other),
    }
}

/// Go's `%v` of a `float64`: shortest digits, exponent form below 1e-4 and from 1e6 on
/// (`strconv.FormatFloat(f, 'g', -1, 64)`).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let sci = format!("{f:e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return f.to_string();
    };
    let Ok(exp) = exp.parse::<i64>() else {
        return f.to_string();
    };
    let negative = mantissa.starts_with('-');
    let digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push(char::from(digits.first().copied().unwrap_or(b'0')));
        if digits.len() > 1 {
            out.push('.');
            out.extend(digits.iter().skip(1).map(|&d| char::from(d)));
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let magnitude = exp.unsigned_abs();
        if magnitude < 10 {
            out.push('0');
        }
        out.push_str(&magnitude.to_string());
        return out;
    }
    // `point` digits before the decimal point (none or leading zeros when it is <= 0).
    let point = exp + 1;
    let text: String = digits.iter().map(|&d| char::from(d)).collect();
    let len = i64::try_from(text.len()).unwrap_or(i64::MAX);
    if point <= 0 {
        out.push_str("0.");
        for _ in point..0 {
            out.push('0');
        }
        out.push_str(&text);
    } else if point >= len {
        out.push_str(&text);
        for _ in len..point {
            out.push('0');
        }
    } else {
        let at = usize::try_from(point).unwrap_or(0);
        out.push_str(text.get(..at).unwrap_or_default());
        out.push('.');
        out.push_str(text.get(at..).unwrap_or_default());
    }
    out
}

/// Go's `net.JoinHostPort`.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A canonical text of a value (object keys sorted), standing in for upstream's struct hash.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (key, value) in entries {
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(value, out);
                out.push(',');
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for item in items {
                canonical(item, out);
                out.push(',');
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn hash_key(o: &Obj) -> String {
    let mut out = String::from("\u{0}");
    for (key, value) in o.iter().collect::<BTreeMap<_, _>>() {
        out.push_str(key);
        out.push('=');
        canonical(value, &mut out);
        out.push(';');
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Flattening (upstream's helper/flatmap).

/// Primitive-only flattening of one struct; `None` for a nil struct.
fn flat(o: Option<&Obj>, shape: &Shape) -> Option<Flat> {
    let o = o?;
    let mut out = Flat::new();
    for (key, value) in o {
        if let Some(text) = typed(value) {
            out.insert(key.clone(), text);
        } else if shape.maps.contains(&key.as_str())
            && let Some(map) = value.as_object()
        {
            for (map_key, map_value) in map {
                if let Some(text) = typed(map_value) {
                    out.insert(format!("{key}[{map_key}]"), text);
                }
            }
        }
    }
    finish(&mut out, shape);
    Some(out)
}

/// Fills the zero values of missing fields, then drops the skipped keys.
fn finish(out: &mut Flat, shape: &Shape) {
    for (key, zero) in shape.zero {
        if !out.contains_key(*key) {
            out.insert((*key).to_owned(), zero.text().to_owned());
        }
    }
    for skip in shape.skip {
        out.remove(*skip);
    }
}

/// Full flattening of one struct (upstream's `Flatten(x, nil, false)`): nested values become
/// `Key[sub]` / `Key[0]`, nil pointers and slices `"nil"`; nil maps (`shape.maps`) nothing.
fn deep_flat(o: Option<&Obj>, shape: &Shape) -> Option<Flat> {
    let o = o?;
    let mut out = Flat::new();
    for (key, value) in o {
        if value.is_null() {
            // A nil map flattens to nothing, a nil pointer or slice to "nil"; a null where
            // Go has a plain value reads as that value's zero.
            if !shape.maps.contains(&key.as_str()) {
                let zero = shape
                    .zero
                    .iter()
                    .find(|(k, _)| k == key)
                    .map_or(N, |(_, z)| *z);
                out.insert(key.clone(), zero.text().to_owned());
            }
            continue;
        }
        deep_value(key, value, false, &mut out);
    }
    finish(&mut out, shape);
    Some(out)
}

/// Full flattening of a free-form map (`map[string]interface{}`), keys at the top level.
fn deep_map(o: Option<&Obj>) -> Flat {
    let mut out = Flat::new();
    for (key, value) in o.into_iter().flatten() {
        deep_value(key, value, true, &mut out);
    }
    out
}

fn deep_value(prefix: &str, value: &Value, interface: bool, out: &mut Flat) {
    match value {
        Value::Null => {
            out.insert(prefix.to_owned(), "nil".to_owned());
        }
        Value::Object(map) => {
            for (key, inner) in map {
                let sub = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}[{key}]")
                };
                deep_value(&sub, inner, true, out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                deep_value(&format!("{prefix}[{i}]"), inner, interface, out);
            }
        }
        scalar => {
            let text = if interface {
                loose(scalar)
            } else {
                typed(scalar)
            };
            if let Some(text) = text {
                out.insert(prefix.to_owned(), text);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generic diff building blocks.

fn field_diff(old: &str, new: &str, name: &str, contextual: bool) -> Option<FieldDiff> {
    let (diff_type, old, new) = if old == new {
        if !contextual {
            return None;
        }
        (DiffType::None, old, new)
    } else if old.is_empty() {
        (DiffType::Added, "", new)
    } else if new.is_empty() {
        (DiffType::Deleted, old, "")
    } else {
        (DiffType::Edited, old, new)
    };
    Some(FieldDiff {
        diff_type,
        name: name.to_owned(),
        old: old.to_owned(),
        new: new.to_owned(),
        annotations: None,
    })
}

fn field_diffs(old: Option<&Flat>, new: Option<&Flat>, contextual: bool) -> Vec<FieldDiff> {
    let empty = Flat::new();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let mut diffs: Vec<FieldDiff> = Vec::new();
    for (name, old_value) in old {
        let new_value = new.get(name).map_or("", String::as_str);
        diffs.extend(field_diff(old_value, new_value, name, contextual));
    }
    for (name, new_value) in new {
        if !old.contains_key(name) {
            diffs.extend(field_diff("", new_value, name, contextual));
        }
    }
    sort_fields(&mut diffs);
    diffs
}

fn sort_fields(fields: &mut [FieldDiff]) {
    fields.sort_by(cmp_fields);
}

fn cmp_fields(a: &FieldDiff, b: &FieldDiff) -> Ordering {
    (&a.name, &a.old, &a.new).cmp(&(&b.name, &b.old, &b.new))
}

/// Upstream's object order: name, type (Edited, Added, Deleted, None), number of fields and
/// of objects, then the fields and objects themselves.
fn cmp_objects(a: &ObjectDiff, b: &ObjectDiff) -> Ordering {
    a.name
        .cmp(&b.name)
        .then_with(|| a.diff_type.rank().cmp(&b.diff_type.rank()))
        .then_with(|| a.fields.len().cmp(&b.fields.len()))
        .then_with(|| a.objects.len().cmp(&b.objects.len()))
        .then_with(|| {
            a.fields
                .iter()
                .zip(&b.fields)
                .map(|(x, y)| cmp_fields(x, y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
        .then_with(|| {
            a.objects
                .iter()
                .zip(&b.objects)
                .map(|(x, y)| cmp_objects(x, y))
                .find(|o| o.is_ne())
                .unwrap_or(Ordering::Equal)
        })
}

fn sort_objects(objects: &mut [ObjectDiff]) {
    objects.sort_by(cmp_objects);
}

/// The type of a diff between two possibly-nil structs; `None` when they are equal.
fn nil_type(old: Option<&Obj>, new: Option<&Obj>) -> Option<DiffType> {
    match (old, new) {
        _ if old == new => None,
        (None, _) => Some(DiffType::Added),
        (_, None) => Some(DiffType::Deleted),
        _ => Some(DiffType::Edited),
    }
}

/// The common shape of upstream's per-struct diffs: typed by nil-ness, fields from the
/// primitive flattening.
fn struct_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    name: &str,
    shape: &Shape,
    contextual: bool,
) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let mut diff = ObjectDiff::new(diff_type, name);
    diff.fields = field_diffs(
        flat(old, shape).as_ref(),
        flat(new, shape).as_ref(),
        contextual,
    );
    Some(diff)
}

/// The type upstream derives from a diff's fields (`primitiveObjectDiff`); `None` when no
/// field changed.
fn type_from_fields(fields: &[FieldDiff]) -> Option<DiffType> {
    let (mut added, mut deleted) = (false, false);
    for field in fields {
        match field.diff_type {
            DiffType::Edited => return Some(DiffType::Edited),
            DiffType::Added => added = true,
            DiffType::Deleted => deleted = true,
            DiffType::None => {}
        }
    }
    match (added, deleted) {
        (true, true) => Some(DiffType::Edited),
        (true, false) => Some(DiffType::Added),
        (false, true) => Some(DiffType::Deleted),
        (false, false) => None,
    }
}

/// Upstream's `primitiveObjectDiff`: the primitive fields only, typed by what changed.
fn primitive_object_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    shape: &Shape,
    name: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    let fields = field_diffs(
        flat(old, shape).as_ref(),
        flat(new, shape).as_ref(),
        contextual,
    );
    let diff_type = type_from_fields(&fields)?;
    let mut diff = ObjectDiff::new(diff_type, name);
    diff.fields = fields;
    Some(diff)
}

/// Upstream's `primitiveObjectSetDiff`: set members keyed by `id` (Nomad's `DiffID`) or, when
/// that is empty, by their whole value; same-key pairs are diffed, the rest added or deleted.
fn object_set_diff(
    old: &[Value],
    new: &[Value],
    shape: &Shape,
    name: &str,
    contextual: bool,
    id: fn(&Obj) -> String,
) -> Vec<ObjectDiff> {
    let key = |o: &Obj| {
        let key = id(o);
        if key.is_empty() { hash_key(o) } else { key }
    };
    let old_set: BTreeMap<String, &Obj> =
        objects_of(old).into_iter().map(|o| (key(o), o)).collect();
    let new_set: BTreeMap<String, &Obj> =
        objects_of(new).into_iter().map(|o| (key(o), o)).collect();
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for (k, o) in &old_set {
        diffs.extend(primitive_object_diff(
            Some(o),
            new_set.get(k).copied(),
            shape,
            name,
            contextual,
        ));
    }
    for (k, n) in &new_set {
        if !old_set.contains_key(k) {
            diffs.extend(primitive_object_diff(
                None,
                Some(n),
                shape,
                name,
                contextual,
            ));
        }
    }
    sort_objects(&mut diffs);
    diffs
}

fn no_id(_: &Obj) -> String {
    String::new()
}

fn constraint_id(o: &Obj) -> String {
    let s = Some(o);
    format!(
        "{} {} {}",
        get_str(s, "LTarget"),
        get_str(s, "Operand"),
        get_str(s, "RTarget")
    )
}

fn affinity_id(o: &Obj) -> String {
    let s = Some(o);
    format!(
        "{} {} {} {}",
        get_str(s, "LTarget"),
        get_str(s, "Operand"),
        get_str(s, "RTarget"),
        get(s, "Weight")
            .and_then(typed)
            .unwrap_or_else(|| "0".to_owned())
    )
}

fn artifact_id(o: &Obj) -> String {
    get_str(Some(o), "RelativeDest")
}

fn constraint_diffs(o: Option<&Obj>, n: Option<&Obj>, contextual: bool) -> Vec<ObjectDiff> {
    object_set_diff(
        get_arr(o, "Constraints"),
        get_arr(n, "Constraints"),
        &CONSTRAINT,
        "Constraint",
        contextual,
        constraint_id,
    )
}

fn affinity_diffs(o: Option<&Obj>, n: Option<&Obj>, contextual: bool) -> Vec<ObjectDiff> {
    object_set_diff(
        get_arr(o, "Affinities"),
        get_arr(n, "Affinities"),
        &AFFINITY,
        "Affinity",
        contextual,
        affinity_id,
    )
}

/// Upstream's `stringSetDiff`: a list diffed as a set, each member a field named `name`.
fn string_set_diff(
    old: &[String],
    new: &[String],
    name: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    let old: BTreeSet<&str> = old.iter().map(String::as_str).collect();
    let new: BTreeSet<&str> = new.iter().map(String::as_str).collect();
    if old == new && !contextual {
        return None;
    }
    let (mut added, mut removed) = (false, false);
    let mut fields: Vec<FieldDiff> = Vec::new();
    for item in &old {
        if !new.contains(item) {
            fields.extend(field_diff(item, "", name, contextual));
            removed = true;
        } else if contextual {
            fields.extend(field_diff(item, item, name, contextual));
        }
    }
    for item in &new {
        if !old.contains(item) {
            fields.extend(field_diff("", item, name, contextual));
            added = true;
        }
    }
    sort_fields(&mut fields);
    let diff_type = match (added, removed) {
        (true, true) => DiffType::Edited,
        (true, false) => DiffType::Added,
        (false, true) => DiffType::Deleted,
        (false, false) if fields.is_empty() => return None,
        (false, false) => DiffType::None,
    };
    let mut diff = ObjectDiff::new(diff_type, name);
    diff.fields = fields;
    Some(diff)
}

fn set_diff_of(
    o: Option<&Obj>,
    n: Option<&Obj>,
    key: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    string_set_diff(&get_strs(o, key), &get_strs(n, key), key, contextual)
}

/// Lists matched by a key (later duplicates win, as in upstream's maps): pairs and deletions
/// in key order, then additions; sorted.
fn keyed_diffs(
    old: &[Value],
    new: &[Value],
    key: impl Fn(&Obj) -> String,
    diff: impl Fn(Option<&Obj>, Option<&Obj>) -> Option<ObjectDiff>,
) -> Vec<ObjectDiff> {
    let old_map: BTreeMap<String, &Obj> =
        objects_of(old).into_iter().map(|o| (key(o), o)).collect();
    let new_map: BTreeMap<String, &Obj> =
        objects_of(new).into_iter().map(|o| (key(o), o)).collect();
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for (k, o) in &old_map {
        diffs.extend(diff(Some(o), new_map.get(k).copied()));
    }
    for (k, n) in &new_map {
        if !old_map.contains_key(k) {
            diffs.extend(diff(None, Some(n)));
        }
    }
    sort_objects(&mut diffs);
    diffs
}

fn by_name(o: &Obj) -> String {
    get_str(Some(o), "Name")
}

/// Lists matched by position; sorted.
fn positional_diffs(
    old: &[Value],
    new: &[Value],
    diff: impl Fn(Option<&Obj>, Option<&Obj>) -> Option<ObjectDiff>,
) -> Vec<ObjectDiff> {
    let (old, new) = (objects_of(old), objects_of(new));
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for i in 0..old.len().max(new.len()) {
        diffs.extend(diff(old.get(i).copied(), new.get(i).copied()));
    }
    sort_objects(&mut diffs);
    diffs
}

/// A free-form map (`Config`, `Policy`, check `Header`) diffed as an object: typed by
/// emptiness, every nested value a field.
fn map_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    name: &str,
    contextual: bool,
) -> Option<ObjectDiff> {
    let old_len = old.map_or(0, Map::len);
    let new_len = new.map_or(0, Map::len);
    if (old_len == 0 && new_len == 0) || old == new {
        return None;
    }
    let diff_type = if old_len == 0 {
        DiffType::Added
    } else if new_len == 0 {
        DiffType::Deleted
    } else {
        DiffType::Edited
    };
    let mut diff = ObjectDiff::new(diff_type, name);
    diff.fields = field_diffs(Some(&deep_map(old)), Some(&deep_map(new)), contextual);
    Some(diff)
}

// ---------------------------------------------------------------------------------------------
// Job-level blocks.

fn periodic_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Periodic", &PERIODIC, contextual)?;
    if let Some(specs) = set_diff_of(old, new, "Specs", contextual)
        && specs.diff_type != DiffType::None
    {
        diff.objects.push(specs);
    }
    Some(diff)
}

fn parameterized_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "ParameterizedJob", &PARAMETERIZED, contextual)?;
    diff.objects
        .extend(set_diff_of(old, new, "MetaOptional", contextual));
    diff.objects
        .extend(set_diff_of(old, new, "MetaRequired", contextual));
    Some(diff)
}

fn multiregion_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let mut diff = ObjectDiff::new(diff_type, "Multiregion");
    // Upstream canonicalizes a missing old block, giving it a zero strategy.
    let zero_strategy = Obj::new();
    let old_strategy = if old.is_none() {
        Some(&zero_strategy)
    } else {
        get_obj(old, "Strategy")
    };
    diff.objects.extend(primitive_object_diff(
        old_strategy,
        get_obj(new, "Strategy"),
        &STRATEGY,
        "Strategy",
        contextual,
    ));
    diff.objects.extend(keyed_diffs(
        get_arr(old, "Regions"),
        get_arr(new, "Regions"),
        by_name,
        |o, n| multiregion_region_diff(o, n, contextual),
    ));
    sort_objects(&mut diff.objects);
    Some(diff)
}

fn multiregion_region_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Region", &REGION, contextual)?;
    if let Some(dcs) = set_diff_of(old, new, "Datacenters", contextual)
        && dcs.diff_type != DiffType::None
    {
        diff.objects.push(dcs);
    }
    // Upstream re-types a region by its fields alone (a datacenter-only change is dropped).
    diff.diff_type = type_from_fields(&diff.fields)?;
    Some(diff)
}

fn ui_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "UI", &UI, contextual)?;
    diff.objects = positional_diffs(get_arr(old, "Links"), get_arr(new, "Links"), |o, n| {
        link_diff(o, n, contextual)
    });
    sort_objects(&mut diff.objects);
    Some(diff)
}

fn link_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let zero = |o: Option<&Obj>| flat(o, &LINK).is_none_or(|f| f.values().all(String::is_empty));
    let diff_type = match (old, new) {
        (Some(_), None) if zero(old) => return None,
        (Some(_), None) => DiffType::Deleted,
        (None, Some(_)) if zero(new) => return None,
        (None, Some(_)) => DiffType::Added,
        _ if old == new => return None,
        _ => DiffType::Edited,
    };
    let mut diff = ObjectDiff::new(diff_type, "Link");
    diff.fields = field_diffs(
        flat(old, &LINK).as_ref(),
        flat(new, &LINK).as_ref(),
        contextual,
    );
    Some(diff)
}

// ---------------------------------------------------------------------------------------------
// Task groups.

fn task_group_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<TaskGroupDiff> {
    let old_map: BTreeMap<String, &Obj> = objects_of(old)
        .into_iter()
        .map(|o| (by_name(o), o))
        .collect();
    let new_map: BTreeMap<String, &Obj> = objects_of(new)
        .into_iter()
        .map(|o| (by_name(o), o))
        .collect();
    let mut diffs: Vec<TaskGroupDiff> = Vec::new();
    for (name, o) in &old_map {
        diffs.push(task_group_diff(
            Some(o),
            new_map.get(name).copied(),
            contextual,
        ));
    }
    for (name, n) in &new_map {
        if !old_map.contains_key(name) {
            diffs.push(task_group_diff(None, Some(n), contextual));
        }
    }
    diffs.sort_by(|a, b| a.name.cmp(&b.name));
    diffs
}

fn task_group_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> TaskGroupDiff {
    let (diff_type, name) = match (old, new) {
        (None, _) => (DiffType::Added, get_str(new, "Name")),
        (_, None) => (DiffType::Deleted, get_str(old, "Name")),
        _ if old == new => (DiffType::None, get_str(new, "Name")),
        _ => (DiffType::Edited, get_str(new, "Name")),
    };
    let mut old_flat = flat(old, &TASK_GROUP);
    let mut new_flat = flat(new, &TASK_GROUP);
    if let (Some(of), Some(nf)) = (old_flat.as_mut(), new_flat.as_mut()) {
        of.insert("ShutdownDelay".to_owned(), get_str(old, "ShutdownDelay"));
        nf.insert("ShutdownDelay".to_owned(), get_str(new, "ShutdownDelay"));
    }
    let fields = field_diffs(old_flat.as_ref(), new_flat.as_ref(), false);

    let mut objects: Vec<ObjectDiff> = Vec::new();
    objects.extend(constraint_diffs(old, new, contextual));
    objects.extend(affinity_diffs(old, new, contextual));
    for (key, shape) in [
        ("RestartPolicy", &RESTART),
        ("Migrate", &MIGRATE),
        ("ReschedulePolicy", &RESCHEDULE),
        ("EphemeralDisk", &EPHEMERAL_DISK),
        ("Consul", &CONSUL),
        ("Update", &UPDATE),
    ] {
        objects.extend(primitive_object_diff(
            get_obj(old, key),
            get_obj(new, key),
            shape,
            key,
            contextual,
        ));
    }
    objects.extend(disconnect_diff(
        get_obj(old, "Disconnect"),
        get_obj(new, "Disconnect"),
        contextual,
    ));
    objects.extend(network_diffs(
        get_arr(old, "Networks"),
        get_arr(new, "Networks"),
        contextual,
    ));
    objects.extend(scaling_diff(
        get_obj(old, "Scaling"),
        get_obj(new, "Scaling"),
    ));
    objects.extend(service_diffs(
        get_arr(old, "Services"),
        get_arr(new, "Services"),
        contextual,
    ));
    objects.extend(volume_diffs(
        get_obj(old, "Volumes"),
        get_obj(new, "Volumes"),
        contextual,
    ));

    TaskGroupDiff {
        diff_type,
        name,
        fields,
        objects,
        tasks: task_diffs(get_arr(old, "Tasks"), get_arr(new, "Tasks"), contextual),
        updates: None,
    }
}

fn disconnect_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let mut diff = ObjectDiff::new(diff_type, "Disconnect");
    diff.fields = field_diffs(
        deep_flat(old, &DISCONNECT).as_ref(),
        deep_flat(new, &DISCONNECT).as_ref(),
        contextual,
    );
    Some(diff)
}

/// Upstream's scaling diff ignores `contextual` throughout.
fn scaling_diff(old: Option<&Obj>, new: Option<&Obj>) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Scaling", &SCALING, false)?;
    diff.objects.extend(map_diff(
        get_obj(old, "Policy"),
        get_obj(new, "Policy"),
        "Policy",
        false,
    ));
    sort_objects(&mut diff.objects);
    Some(diff)
}

fn volume_diffs(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Vec<ObjectDiff> {
    if old == new {
        return Vec::new();
    }
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for (name, o) in old.into_iter().flatten() {
        let n = new.and_then(|n| n.get(name)).and_then(Value::as_object);
        diffs.extend(volume_diff(o.as_object(), n, contextual));
    }
    for (name, n) in new.into_iter().flatten() {
        if old.is_none_or(|o| !o.contains_key(name)) {
            diffs.extend(volume_diff(None, n.as_object(), contextual));
        }
    }
    diffs
}

fn volume_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Volume", &VOLUME, contextual)?;
    let (om, nm) = (get_obj(old, "MountOptions"), get_obj(new, "MountOptions"));
    if let Some(mut mount) = struct_diff(om, nm, "MountOptions", &MOUNT_OPTIONS, contextual) {
        mount
            .objects
            .extend(set_diff_of(om, nm, "MountFlags", contextual));
        diff.objects.push(mount);
    }
    Some(diff)
}

// ---------------------------------------------------------------------------------------------
// Networks and resources.

/// Networks have no identity: they are a set by whole value, so a change is a deletion plus
/// an addition, never an edit.
fn network_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let old_set: BTreeMap<String, &Obj> = objects_of(old)
        .into_iter()
        .map(|o| (hash_key(o), o))
        .collect();
    let new_set: BTreeMap<String, &Obj> = objects_of(new)
        .into_iter()
        .map(|o| (hash_key(o), o))
        .collect();
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for (k, o) in &old_set {
        if !new_set.contains_key(k) {
            diffs.extend(network_diff(Some(o), None, contextual));
        }
    }
    for (k, n) in &new_set {
        if !old_set.contains_key(k) {
            diffs.extend(network_diff(None, Some(n), contextual));
        }
    }
    sort_objects(&mut diffs);
    diffs
}

fn network_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Network", &NETWORK, contextual)?;
    diff.objects.extend(port_diffs(
        get_arr(old, "ReservedPorts"),
        get_arr(new, "ReservedPorts"),
        false,
        contextual,
    ));
    diff.objects.extend(port_diffs(
        get_arr(old, "DynamicPorts"),
        get_arr(new, "DynamicPorts"),
        true,
        contextual,
    ));
    diff.objects.extend(dns_diff(
        get_obj(old, "DNS"),
        get_obj(new, "DNS"),
        contextual,
    ));
    diff.objects.extend(cni_diff(
        get_obj(old, "CNI"),
        get_obj(new, "CNI"),
        contextual,
    ));
    Some(diff)
}

fn port_diffs(old: &[Value], new: &[Value], dynamic: bool, contextual: bool) -> Vec<ObjectDiff> {
    let (name, shape) = if dynamic {
        ("Dynamic Port", &DYNAMIC_PORT)
    } else {
        ("Static Port", &STATIC_PORT)
    };
    keyed_diffs(
        old,
        new,
        |o| get_str(Some(o), "Label"),
        |o, n| primitive_object_diff(o, n, shape, name, contextual),
    )
}

fn dns_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let flatten = |o: Option<&Obj>| {
        o.map(|_| {
            let mut out = Flat::new();
            for key in ["Servers", "Searches", "Options"] {
                let items = get_strs(o, key);
                if !items.is_empty() {
                    out.insert(key.to_owned(), items.join(","));
                }
            }
            out
        })
    };
    let mut diff = ObjectDiff::new(diff_type, "DNS");
    diff.fields = field_diffs(flatten(old).as_ref(), flatten(new).as_ref(), contextual);
    Some(diff)
}

fn cni_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let (old_args, new_args) = (get_obj(old, "Args"), get_obj(new, "Args"));
    let old_flat = string_map(old_args);
    let new_flat = string_map(new_args);
    if old_flat == new_flat {
        return None;
    }
    let fields = field_diffs(Some(&old_flat), Some(&new_flat), contextual);
    let mut diff = ObjectDiff::new(type_from_fields(&fields)?, "CNIConfig");
    diff.fields = fields;
    Some(diff)
}

/// A string map flattened at the top level (`key` → value).
fn string_map(o: Option<&Obj>) -> Flat {
    o.into_iter()
        .flatten()
        .filter_map(|(k, v)| typed(v).map(|v| (k.clone(), v)))
        .collect()
}

fn resources_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Resources", &RESOURCES, contextual)?;
    diff.objects.extend(network_diffs(
        get_arr(old, "Networks"),
        get_arr(new, "Networks"),
        contextual,
    ));
    diff.objects.extend(keyed_diffs(
        get_arr(old, "Devices"),
        get_arr(new, "Devices"),
        by_name,
        |o, n| struct_diff(o, n, "Device", &DEVICE, contextual),
    ));
    diff.objects.extend(struct_diff(
        get_obj(old, "NUMA"),
        get_obj(new, "NUMA"),
        "NUMA",
        &NUMA,
        contextual,
    ));
    Some(diff)
}

// ---------------------------------------------------------------------------------------------
// Tasks.

fn task_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<TaskDiff> {
    let old_map: BTreeMap<String, &Obj> = objects_of(old)
        .into_iter()
        .map(|o| (by_name(o), o))
        .collect();
    let new_map: BTreeMap<String, &Obj> = objects_of(new)
        .into_iter()
        .map(|o| (by_name(o), o))
        .collect();
    let mut diffs: Vec<TaskDiff> = Vec::new();
    for (name, o) in &old_map {
        diffs.push(task_diff(Some(o), new_map.get(name).copied(), contextual));
    }
    for (name, n) in &new_map {
        if !old_map.contains_key(name) {
            diffs.push(task_diff(None, Some(n), contextual));
        }
    }
    diffs.sort_by(|a, b| a.name.cmp(&b.name));
    diffs
}

fn task_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> TaskDiff {
    let (diff_type, name) = match (old, new) {
        (None, _) => (DiffType::Added, get_str(new, "Name")),
        (_, None) => (DiffType::Deleted, get_str(old, "Name")),
        _ if old == new => (DiffType::None, get_str(new, "Name")),
        _ => (DiffType::Edited, get_str(new, "Name")),
    };
    let fields = field_diffs(flat(old, &TASK).as_ref(), flat(new, &TASK).as_ref(), false);

    let mut objects: Vec<ObjectDiff> = Vec::new();
    objects.extend(constraint_diffs(old, new, contextual));
    objects.extend(affinity_diffs(old, new, contextual));
    objects.extend(map_diff(
        get_obj(old, "Config"),
        get_obj(new, "Config"),
        "Config",
        contextual,
    ));
    objects.extend(resources_diff(
        get_obj(old, "Resources"),
        get_obj(new, "Resources"),
        contextual,
    ));
    for (key, shape) in [
        ("LogConfig", &LOG_CONFIG),
        ("DispatchPayload", &DISPATCH_PAYLOAD),
    ] {
        objects.extend(primitive_object_diff(
            get_obj(old, key),
            get_obj(new, key),
            shape,
            key,
            contextual,
        ));
    }
    objects.extend(object_set_diff(
        get_arr(old, "Artifacts"),
        get_arr(new, "Artifacts"),
        &ARTIFACT,
        "Artifact",
        contextual,
        artifact_id,
    ));
    objects.extend(service_diffs(
        get_arr(old, "Services"),
        get_arr(new, "Services"),
        contextual,
    ));
    objects.extend(struct_diff(
        get_obj(old, "Vault"),
        get_obj(new, "Vault"),
        "Vault",
        &VAULT,
        contextual,
    ));
    objects.extend(keyed_diffs(
        get_arr(old, "Secrets"),
        get_arr(new, "Secrets"),
        by_name,
        |o, n| {
            let diff_type = nil_type(o, n)?;
            let mut diff = ObjectDiff::new(diff_type, "Secret");
            diff.fields = field_diffs(
                deep_flat(o, &SECRET).as_ref(),
                deep_flat(n, &SECRET).as_ref(),
                contextual,
            );
            Some(diff)
        },
    ));
    objects.extend(primitive_object_diff(
        get_obj(old, "Consul"),
        get_obj(new, "Consul"),
        &CONSUL,
        "Consul",
        contextual,
    ));
    objects.extend(template_diffs(
        get_arr(old, "Templates"),
        get_arr(new, "Templates"),
        contextual,
    ));
    objects.extend(identity_diff(
        get_obj(old, "Identity"),
        get_obj(new, "Identity"),
        contextual,
    ));
    objects.extend(identity_diffs(
        get_arr(old, "Identities"),
        get_arr(new, "Identities"),
        contextual,
    ));
    objects.extend(positional_diffs(
        get_arr(old, "Actions"),
        get_arr(new, "Actions"),
        |o, n| {
            let mut diff = struct_diff(o, n, "Action", &ACTION, contextual)?;
            diff.objects.extend(set_diff_of(o, n, "Args", contextual));
            Some(diff)
        },
    ));
    objects.extend(volume_mount_diffs(old, new, contextual));
    let (old_schedule, new_schedule) = (get_obj(old, "Schedule"), get_obj(new, "Schedule"));
    if old_schedule != new_schedule {
        objects.extend(primitive_object_diff(
            get_obj(old_schedule, "Cron"),
            get_obj(new_schedule, "Cron"),
            &SCHEDULE_CRON,
            "Schedule",
            contextual,
        ));
    }

    TaskDiff {
        diff_type,
        name,
        fields,
        objects,
        annotations: None,
    }
}

fn volume_mount_diffs(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Vec<ObjectDiff> {
    positional_diffs(
        get_arr(old, "VolumeMounts"),
        get_arr(new, "VolumeMounts"),
        |o, n| struct_diff(o, n, "VolumeMount", &VOLUME_MOUNT, contextual),
    )
}

fn identity_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Identity", &IDENTITY, contextual)?;
    diff.objects
        .extend(set_diff_of(old, new, "Audience", contextual));
    Some(diff)
}

fn identity_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    keyed_diffs(old, new, by_name, |o, n| identity_diff(o, n, contextual))
}

/// Templates pair by destination (upstream's `DiffID`); a lone template on each side is
/// always paired.
fn template_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let (old, new) = (objects_of(old), objects_of(new));
    if let ([o], [n]) = (old.as_slice(), new.as_slice()) {
        return template_diff(Some(o), Some(n), contextual)
            .into_iter()
            .collect();
    }
    let mut matched = vec![false; new.len()];
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for o in &old {
        let dest = get_str(Some(o), "DestPath");
        let found = new.iter().enumerate().position(|(i, n)| {
            !matched.get(i).copied().unwrap_or(true) && get_str(Some(n), "DestPath") == dest
        });
        match found {
            Some(i) => {
                if let Some(slot) = matched.get_mut(i) {
                    *slot = true;
                }
                diffs.extend(template_diff(Some(o), new.get(i).copied(), contextual));
            }
            None => diffs.extend(template_diff(Some(o), None, contextual)),
        }
    }
    for (i, n) in new.iter().enumerate() {
        if !matched.get(i).copied().unwrap_or(true) {
            diffs.extend(template_diff(None, Some(n), contextual));
        }
    }
    sort_objects(&mut diffs);
    diffs
}

fn template_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Template", &TEMPLATE, contextual)?;
    let (ow, nw) = (get_obj(old, "Wait"), get_obj(new, "Wait"));
    if let Some(wait_type) = nil_type(ow, nw) {
        // Upstream names the wait block's diff "Template" too.
        let mut wait = ObjectDiff::new(wait_type, "Template");
        wait.fields = field_diffs(
            deep_flat(ow, &WAIT).as_ref(),
            deep_flat(nw, &WAIT).as_ref(),
            contextual,
        );
        diff.objects.push(wait);
    }
    let (oc, nc) = (get_obj(old, "ChangeScript"), get_obj(new, "ChangeScript"));
    if let Some(mut script) = struct_diff(oc, nc, "ChangeScript", &CHANGE_SCRIPT, contextual) {
        script
            .objects
            .extend(set_diff_of(oc, nc, "Args", contextual));
        diff.objects.push(script);
    }
    Some(diff)
}

// ---------------------------------------------------------------------------------------------
// Services and checks.

/// Services have no identity either: each old service is paired with the best-scoring new
/// one (same name 3, same port label 2, same position 1; more than 2 needed).
fn service_diffs(old: &[Value], new: &[Value], contextual: bool) -> Vec<ObjectDiff> {
    let (old, new) = (objects_of(old), objects_of(new));
    if let ([o], [n]) = (old.as_slice(), new.as_slice()) {
        return service_diff(Some(o), Some(n), contextual)
            .into_iter()
            .collect();
    }
    let mut matched = vec![false; new.len()];
    let mut diffs: Vec<ObjectDiff> = Vec::new();
    for (old_index, o) in old.iter().enumerate() {
        let (name, label) = (get_str(Some(o), "Name"), get_str(Some(o), "PortLabel"));
        let mut best: Option<(usize, u32)> = None;
        for (i, n) in new.iter().enumerate() {
            if matched.get(i).copied().unwrap_or(true) {
                continue;
            }
            let mut score = 0;
            if i == old_index {
                score += 1;
            }
            if get_str(Some(n), "PortLabel") == label {
                score += 2;
            }
            if get_str(Some(n), "Name") == name {
                score += 3;
            }
            if score > 2 && best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        match best {
            Some((i, _)) => {
                if let Some(slot) = matched.get_mut(i) {
                    *slot = true;
                }
                diffs.extend(service_diff(Some(o), new.get(i).copied(), contextual));
            }
            None => diffs.extend(service_diff(Some(o), None, contextual)),
        }
    }
    for (i, n) in new.iter().enumerate() {
        if !matched.get(i).copied().unwrap_or(true) {
            diffs.extend(service_diff(None, Some(n), contextual));
        }
    }
    sort_objects(&mut diffs);
    diffs
}

fn service_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Service", &SERVICE, contextual)?;
    diff.objects
        .extend(set_diff_of(old, new, "CanaryTags", contextual));
    diff.objects
        .extend(set_diff_of(old, new, "Tags", contextual));
    diff.objects.extend(keyed_diffs(
        get_arr(old, "Checks"),
        get_arr(new, "Checks"),
        by_name,
        |o, n| check_diff(o, n, contextual),
    ));
    diff.objects.extend(connect_diff(
        get_obj(old, "Connect"),
        get_obj(new, "Connect"),
        contextual,
    ));
    diff.objects.extend(identity_diff(
        get_obj(old, "Identity"),
        get_obj(new, "Identity"),
        contextual,
    ));
    diff.objects.extend(weights_diff(
        get_obj(old, "Weights"),
        get_obj(new, "Weights"),
        contextual,
    ));
    Some(diff)
}

fn weights_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let flatten = |o: Option<&Obj>| {
        o.map(|_| {
            let mut out = Flat::new();
            for key in ["Passing", "Warning"] {
                if let Some(n) = get(o, key).and_then(Value::as_i64)
                    && n > 0
                {
                    out.insert(key.to_owned(), n.to_string());
                }
            }
            out
        })
    };
    let mut diff = ObjectDiff::new(diff_type, "Weights");
    diff.fields = field_diffs(flatten(old).as_ref(), flatten(new).as_ref(), contextual);
    Some(diff)
}

fn check_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Check", &CHECK, contextual)?;
    diff.objects.extend(map_diff(
        get_obj(old, "Header"),
        get_obj(new, "Header"),
        "Header",
        contextual,
    ));
    diff.objects.extend(struct_diff(
        get_obj(old, "CheckRestart"),
        get_obj(new, "CheckRestart"),
        "CheckRestart",
        &CHECK_RESTART,
        contextual,
    ));
    Some(diff)
}

fn connect_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "ConsulConnect", &CONNECT, contextual)?;
    let (os, ns) = (
        get_obj(old, "SidecarService"),
        get_obj(new, "SidecarService"),
    );
    if let Some(mut sidecar) = struct_diff(os, ns, "SidecarService", &SIDECAR_SERVICE, contextual) {
        sidecar.objects.extend(proxy_diff(
            get_obj(os, "Proxy"),
            get_obj(ns, "Proxy"),
            contextual,
        ));
        diff.objects.push(sidecar);
    }
    diff.objects.extend(sidecar_task_diff(
        get_obj(old, "SidecarTask"),
        get_obj(new, "SidecarTask"),
        contextual,
    ));
    diff.objects.extend(gateway_diff(
        get_obj(old, "Gateway"),
        get_obj(new, "Gateway"),
        contextual,
    ));
    Some(diff)
}

fn sidecar_task_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "SidecarTask", &SIDECAR_TASK, false)?;
    diff.objects.extend(map_diff(
        get_obj(old, "Config"),
        get_obj(new, "Config"),
        "Config",
        contextual,
    ));
    diff.objects.extend(resources_diff(
        get_obj(old, "Resources"),
        get_obj(new, "Resources"),
        contextual,
    ));
    diff.objects.extend(identity_diffs(
        get_arr(old, "Identities"),
        get_arr(new, "Identities"),
        contextual,
    ));
    diff.objects.extend(primitive_object_diff(
        get_obj(old, "LogConfig"),
        get_obj(new, "LogConfig"),
        &LOG_CONFIG,
        "LogConfig",
        contextual,
    ));
    diff.objects
        .extend(volume_mount_diffs(old, new, contextual));
    Some(diff)
}

fn proxy_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "ConsulProxy", &PROXY, contextual)?;
    diff.objects.extend(keyed_diffs(
        get_arr(old, "Upstreams"),
        get_arr(new, "Upstreams"),
        |o| {
            format!(
                "{}/{}",
                get_str(Some(o), "Datacenter"),
                get_str(Some(o), "DestinationName")
            )
        },
        |o, n| {
            let mut up = struct_diff(o, n, "ConsulUpstreams", &UPSTREAM, contextual)?;
            up.objects.extend(primitive_object_diff(
                get_obj(o, "MeshGateway"),
                get_obj(n, "MeshGateway"),
                &MESH_GATEWAY,
                "MeshGateway",
                contextual,
            ));
            Some(up)
        },
    ));
    diff.objects.extend(expose_diff(
        get_obj(old, "Expose"),
        get_obj(new, "Expose"),
        contextual,
    ));
    diff.objects.push(transparent_proxy_diff(
        get_obj(old, "TransparentProxy"),
        get_obj(new, "TransparentProxy"),
        contextual,
    ));
    diff.objects.extend(map_diff(
        get_obj(old, "Config"),
        get_obj(new, "Config"),
        "Config",
        contextual,
    ));
    Some(diff)
}

fn expose_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    if old == new {
        return None;
    }
    let diff_type = if get_arr(old, "Paths").is_empty() {
        DiffType::Added
    } else if get_arr(new, "Paths").is_empty() {
        DiffType::Deleted
    } else {
        DiffType::Edited
    };
    let mut diff = ObjectDiff::new(diff_type, "Expose");
    diff.objects = object_set_diff(
        get_arr(old, "Paths"),
        get_arr(new, "Paths"),
        &EXPOSE_PATH,
        "Paths",
        contextual,
        no_id,
    );
    Some(diff)
}

/// Upstream always reports this block once the proxy differs: Type None when unchanged.
fn transparent_proxy_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> ObjectDiff {
    let Some(mut diff) = struct_diff(old, new, "TransparentProxy", &TRANSPARENT_PROXY, contextual)
    else {
        return ObjectDiff::new(DiffType::None, "TransparentProxy");
    };
    for key in [
        "ExcludeInboundPorts",
        "ExcludeOutboundPorts",
        "ExcludeOutboundCIDRs",
        "ExcludeUIDs",
    ] {
        if let Some(set) = set_diff_of(old, new, key, contextual)
            && set.diff_type != DiffType::None
        {
            diff.objects.push(set);
        }
    }
    diff
}

fn gateway_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Gateway", &PLAIN, contextual)?;
    diff.objects.extend(gateway_proxy_diff(
        get_obj(old, "Proxy"),
        get_obj(new, "Proxy"),
        contextual,
    ));
    let (oi, ni) = (get_obj(old, "Ingress"), get_obj(new, "Ingress"));
    if let Some(mut ingress) = struct_diff(oi, ni, "Ingress", &PLAIN, contextual) {
        ingress
            .objects
            .extend(tls_diff(get_obj(oi, "TLS"), get_obj(ni, "TLS"), contextual));
        ingress.objects.extend(keyed_diffs(
            get_arr(oi, "Listeners"),
            get_arr(ni, "Listeners"),
            |o| {
                format!(
                    "{}/{}",
                    get_str(Some(o), "Protocol"),
                    get_str(Some(o), "Port")
                )
            },
            |o, n| listener_diff(o, n, contextual),
        ));
        diff.objects.push(ingress);
    }
    let (ot, nt) = (get_obj(old, "Terminating"), get_obj(new, "Terminating"));
    if let Some(mut terminating) = struct_diff(ot, nt, "Terminating", &PLAIN, contextual) {
        terminating.objects.extend(keyed_diffs(
            get_arr(ot, "Services"),
            get_arr(nt, "Services"),
            by_name,
            |o, n| struct_diff(o, n, "Service", &LINKED_SERVICE, contextual),
        ));
        diff.objects.push(terminating);
    }
    if let Some(mesh_type) = nil_type(get_obj(old, "Mesh"), get_obj(new, "Mesh")) {
        diff.objects.push(ObjectDiff::new(mesh_type, "Mesh"));
    }
    Some(diff)
}

fn gateway_proxy_diff(
    old: Option<&Obj>,
    new: Option<&Obj>,
    contextual: bool,
) -> Option<ObjectDiff> {
    let diff_type = nil_type(old, new)?;
    let mut old_flat = flat(old, &GATEWAY_PROXY);
    let mut new_flat = flat(new, &GATEWAY_PROXY);
    if let (Some(of), Some(nf)) = (old_flat.as_mut(), new_flat.as_mut()) {
        let timeout = |o: Option<&Obj>| {
            get(o, "ConnectTimeout")
                .and_then(Value::as_i64)
                .map(stdx::duration::format_go)
                .unwrap_or_default()
        };
        of.insert("ConnectTimeout".to_owned(), timeout(old));
        nf.insert("ConnectTimeout".to_owned(), timeout(new));
    }
    let mut diff = ObjectDiff::new(diff_type, "Proxy");
    diff.fields = field_diffs(old_flat.as_ref(), new_flat.as_ref(), contextual);
    let (ob, nb) = (
        get_obj(old, "EnvoyGatewayBindAddresses"),
        get_obj(new, "EnvoyGatewayBindAddresses"),
    );
    let binds = |o: Option<&Obj>| -> Flat {
        o.into_iter()
            .flatten()
            .map(|(k, v)| {
                let a = v.as_object();
                (
                    k.clone(),
                    join_host_port(&get_str(a, "Address"), &get_str(a, "Port")),
                )
            })
            .collect()
    };
    let (old_binds, new_binds) = (binds(ob), binds(nb));
    if ob != nb && !(old_binds.is_empty() && new_binds.is_empty()) {
        let bind_type = if old_binds.is_empty() {
            DiffType::Added
        } else if new_binds.is_empty() {
            DiffType::Deleted
        } else {
            DiffType::Edited
        };
        let mut bind = ObjectDiff::new(bind_type, "EnvoyGatewayBindAddresses");
        bind.fields = field_diffs(Some(&old_binds), Some(&new_binds), contextual);
        diff.objects.push(bind);
    }
    diff.objects.extend(map_diff(
        get_obj(old, "Config"),
        get_obj(new, "Config"),
        "Config",
        contextual,
    ));
    Some(diff)
}

fn tls_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "TLS", &TLS, contextual)?;
    diff.objects
        .extend(set_diff_of(old, new, "CipherSuites", contextual));
    diff.objects.extend(primitive_object_diff(
        get_obj(old, "SDS"),
        get_obj(new, "SDS"),
        &SDS,
        "SDS",
        contextual,
    ));
    Some(diff)
}

fn listener_diff(old: Option<&Obj>, new: Option<&Obj>, contextual: bool) -> Option<ObjectDiff> {
    let mut diff = struct_diff(old, new, "Listener", &LISTENER, contextual)?;
    diff.objects.extend(keyed_diffs(
        get_arr(old, "Services"),
        get_arr(new, "Services"),
        by_name,
        |o, n| {
            let mut service =
                struct_diff(o, n, "ConsulIngressService", &INGRESS_SERVICE, contextual)?;
            service
                .objects
                .extend(set_diff_of(o, n, "Hosts", contextual));
            service
                .objects
                .extend(tls_diff(get_obj(o, "TLS"), get_obj(n, "TLS"), contextual));
            for key in ["RequestHeaders", "ResponseHeaders"] {
                let (oh, nh) = (get_obj(o, key), get_obj(n, key));
                if let Some(mut headers) = struct_diff(oh, nh, key, &HEADER_MODIFIERS, contextual) {
                    headers
                        .objects
                        .extend(set_diff_of(oh, nh, "Remove", contextual));
                    service.objects.push(headers);
                }
            }
            Some(service)
        },
    ));
    Some(diff)
}
