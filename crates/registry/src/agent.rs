//! `/v1/agent/*` endpoints: this server as a Consul agent. Services and checks registered here
//! belong to this server's own node (`Config::node_name`) and go straight to the catalog
//! (there is no separate agent state to sync); HTTP and TCP checks are run, and TTL checks
//! timed, by `tasks/check_runner.rs`.
//!
//! Where it sits: handlers validate and translate Consul's agent bodies (case-insensitive, as
//! in `catalog.rs`) into catalog writes through `catalog::apply_registration`,
//! `catalog::deregister` and `catalog::update_check_status`.
//!
//! Invariants: the agent views hide what a Consul agent does not own: the leader-managed
//! `serfHealth` check and the server's own `consul` service; a check's initial status is
//! critical unless the request gives one (as in Consul); an HTTP/TCP interval below 1 s is
//! raised to 1 s; script, Docker, gRPC, H2PING, UDP, alias and OS-service checks are refused
//! with a 400 (this server does not run them).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::{Path, State as AxumState};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::acl::{Access, Authz, Resource};
use crate::catalog::{
    self, CONSUL_SERVICE, CONSUL_VERSION, Field, GoDuration, Registration, Removal, Shape,
    TtlUpdate, decode_body, parse_status, validate_id, validate_meta,
};
use crate::meta::QueryParams;
use crate::store::catalog::{
    CheckDefinition, CheckKind, CheckRecord, CheckStatus, RECORD_VERSION, ServiceRecord, Stored,
    load_check, load_node, node_checks_range, node_services_range, scan_records, service_key,
};
use crate::store::decode;
use crate::{Error, SERF_HEALTH_CHECK, State};

/// The shortest interval an HTTP or TCP check runs at (Consul's `MinInterval`).
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The timeout of an HTTP or TCP check that names none (Consul's default).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

const NODE_MAINTENANCE_CHECK: &str = "_node_maintenance";
const SERVICE_MAINTENANCE_PREFIX: &str = "_service_maintenance:";

// ---------------------------------------------------------------------------------------------
// Reads.

fn node_name(state: &State) -> &str {
    &state.config().node_name
}

async fn self_node_id(state: &State) -> Result<String, Error> {
    Ok(load_node(state.storage(), node_name(state))
        .await?
        .map(|node| node.record.id)
        .unwrap_or_default())
}

fn member_json(state: &State, node_id: &str, wan: bool) -> Value {
    let config = state.config();
    let name = if wan {
        format!("{}.{}", config.node_name, config.datacenter)
    } else {
        config.node_name.clone()
    };
    json!({
        "Name": name,
        "Addr": config.advertise_addr.ip().to_string(),
        "Port": if wan { 8302 } else { 8301 },
        "Tags": {
            "acls": if config.acl.enabled { "1" } else { "0" },
            "build": format!("{CONSUL_VERSION}:cairn"),
            "dc": config.datacenter,
            "id": node_id,
            "port": config.advertise_addr.port().to_string(),
            "raft_vsn": "3",
            "role": "consul",
            "segment": "",
            "vsn": "2",
            "vsn_max": "3",
            "vsn_min": "2",
        },
        "Status": 1,
        "ProtocolMin": 1,
        "ProtocolMax": 5,
        "ProtocolCur": 2,
        "DelegateMin": 2,
        "DelegateMax": 5,
        "DelegateCur": 4,
    })
}

/// `GET /v1/agent/self`: this agent's configuration and member record (agent:read).
pub(crate) async fn read_self(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<axum::Json<Value>, Error> {
    query.options(&state)?;
    authz.check(Resource::Agent, node_name(&state), Access::Read)?;
    let config = state.config();
    let node_id = self_node_id(&state).await?;
    Ok(axum::Json(json!({
        "Config": {
            "Datacenter": config.datacenter,
            "PrimaryDatacenter": config.datacenter,
            "NodeName": config.node_name,
            "NodeID": node_id,
            "Partition": "",
            "Revision": "cairn",
            "Server": true,
            "Version": CONSUL_VERSION,
            "BuildDate": "2023-11-01T00:00:00Z",
        },
        "DebugConfig": {
            "Datacenter": config.datacenter,
            "NodeName": config.node_name,
            "NodeID": node_id,
            "ServerMode": true,
            "ACLsEnabled": config.acl.enabled,
            "SessionTTLMin": catalog::go_duration_string(
                u64::try_from(config.session_ttl_min.as_millis()).unwrap_or(u64::MAX),
            ),
        },
        "Coord": {
            "Vec": [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            "Error": 1.5,
            "Adjustment": 0.0,
            "Height": 1.0e-5,
        },
        "Member": member_json(&state, &node_id, false),
        "Stats": {
            "agent": {"check_monitors": "0", "check_ttls": "0", "checks": "0", "services": "0"},
            "consul": {
                "bootstrap": "true",
                "known_datacenters": "1",
                "leader": "true",
                "leader_addr": config.advertise_addr.to_string(),
                "server": "true",
            },
        },
        "Meta": {"consul-network-segment": ""},
        "xDS": {
            "SupportedProxies": {"envoy": []},
            "Port": -1,
            "Ports": {"Plaintext": -1, "TLS": -1},
        },
    })))
}

/// `GET /v1/agent/members`: this server, the only member (`?wan` names it `<node>.<dc>`).
pub(crate) async fn list_members(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<axum::Json<Vec<Value>>, Error> {
    query.options(&state)?;
    if !authz.allows(Resource::Node, node_name(&state), Access::Read) {
        return Ok(axum::Json(Vec::new()));
    }
    let node_id = self_node_id(&state).await?;
    let wan = query
        .get("wan")
        .is_some_and(|raw| raw.is_empty() || http_kit::parse_bool(raw).unwrap_or(false));
    Ok(axum::Json(vec![member_json(&state, &node_id, wan)]))
}

/// Whether the token may read a check: service:read on its service, or node:read on the node.
fn may_read_check(authz: &Authz, check: &CheckRecord) -> bool {
    if check.service_id.is_empty() {
        authz.allows(Resource::Node, &check.node, Access::Read)
    } else {
        authz.allows(Resource::Service, &check.service_name, Access::Read)
    }
}

/// `GET /v1/agent/checks`: this agent's checks by ID (those the token may read).
pub(crate) async fn list_checks(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<axum::Json<Map<String, Value>>, Error> {
    query.options(&state)?;
    let filter = crate::health::filter_param(&query)?;
    let checks: Vec<Stored<CheckRecord>> =
        scan_records(state.storage(), node_checks_range(node_name(&state))).await?;
    let mut out = Map::new();
    for check in &checks {
        if check.record.check_id == SERF_HEALTH_CHECK || !may_read_check(&authz, &check.record) {
            continue;
        }
        let view = catalog::check_json(check);
        if filter.as_ref().is_none_or(|filter| filter.matches(&view)) {
            out.insert(check.record.check_id.clone(), view);
        }
    }
    Ok(axum::Json(out))
}

fn agent_service_json(state: &State, service: &Stored<ServiceRecord>) -> Value {
    let record = &service.record;
    json!({
        "ID": record.id,
        "Service": record.service,
        "Tags": record.tags,
        "Meta": record.meta,
        "Port": record.port,
        "Address": record.address,
        "Weights": {"Passing": 1, "Warning": 1},
        "EnableTagOverride": record.enable_tag_override,
        "Datacenter": state.config().datacenter,
    })
}

/// `GET /v1/agent/services`: this agent's services by ID (those the token may read).
pub(crate) async fn list_services(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<axum::Json<Map<String, Value>>, Error> {
    query.options(&state)?;
    let filter = crate::health::filter_param(&query)?;
    let services: Vec<Stored<ServiceRecord>> =
        scan_records(state.storage(), node_services_range(node_name(&state))).await?;
    let mut out = Map::new();
    for service in &services {
        if service.record.id == CONSUL_SERVICE
            || !authz.allows(Resource::Service, &service.record.service, Access::Read)
        {
            continue;
        }
        let view = agent_service_json(&state, service);
        if filter.as_ref().is_none_or(|filter| filter.matches(&view)) {
            out.insert(service.record.id.clone(), view);
        }
    }
    Ok(axum::Json(out))
}

async fn load_agent_service(
    state: &State,
    service_id: &str,
) -> Result<Option<Stored<ServiceRecord>>, Error> {
    if service_id == CONSUL_SERVICE {
        return Ok(None);
    }
    match state
        .storage()
        .get(&service_key(node_name(state), service_id))
        .await?
    {
        Some(kv) => Ok(Some(Stored::from_kv(&kv)?)),
        None => Ok(None),
    }
}

fn unknown_service(service_id: &str) -> Error {
    Error::NotFound(format!(
        "Unknown service ID {service_id:?}. Ensure that the service ID is passed, not the service name."
    ))
}

/// `GET /v1/agent/service/:id`: one service of this agent, with a `ContentHash`.
pub(crate) async fn read_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<axum::Json<Value>, Error> {
    query.options(&state)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Read)?;
    let mut body = agent_service_json(&state, &service);
    let hash = format!("{:016x}", fnv1a(body.to_string().as_bytes()));
    body["ContentHash"] = Value::String(hash);
    Ok(axum::Json(body))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

// ---------------------------------------------------------------------------------------------
// Check bodies.

const AGENT_CHECK_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("CheckID", Shape::Leaf),
    Field("Name", Shape::Leaf),
    Field("Notes", Shape::Leaf),
    Field("ServiceID", Shape::Leaf),
    Field("Status", Shape::Leaf),
    Field("TTL", Shape::Leaf),
    Field("HTTP", Shape::Leaf),
    Field("Method", Shape::Leaf),
    Field("Header", Shape::Leaf),
    Field("Body", Shape::Leaf),
    Field("TCP", Shape::Leaf),
    Field("Interval", Shape::Leaf),
    Field("Timeout", Shape::Leaf),
    Field("DeregisterCriticalServiceAfter", Shape::Leaf),
    Field("TLSSkipVerify", Shape::Leaf),
    Field("TLSServerName", Shape::Leaf),
    // Kinds this server does not run: accepted by the decoder, refused by validation.
    Field("Args", Shape::Leaf),
    Field("ScriptArgs", Shape::Leaf),
    Field("Script", Shape::Leaf),
    Field("DockerContainerID", Shape::Leaf),
    Field("Shell", Shape::Leaf),
    Field("GRPC", Shape::Leaf),
    Field("H2PING", Shape::Leaf),
    Field("UDP", Shape::Leaf),
    Field("AliasNode", Shape::Leaf),
    Field("AliasService", Shape::Leaf),
    Field("OSService", Shape::Leaf),
    // Accepted and ignored.
    Field("GRPCUseTLS", Shape::Ignored),
    Field("H2PingUseTLS", Shape::Ignored),
    Field("TCPUseTLS", Shape::Ignored),
    Field("DisableRedirects", Shape::Ignored),
    Field("OutputMaxSize", Shape::Ignored),
    Field("SuccessBeforePassing", Shape::Ignored),
    Field("FailuresBeforeWarning", Shape::Ignored),
    Field("FailuresBeforeCritical", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Type", Shape::Ignored),
];

const AGENT_SERVICE_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("Name", Shape::Leaf),
    Field("Tags", Shape::Leaf),
    Field("Address", Shape::Leaf),
    Field("Port", Shape::Leaf),
    Field("Meta", Shape::Leaf),
    Field("EnableTagOverride", Shape::Leaf),
    Field("Check", Shape::Object(AGENT_CHECK_FIELDS)),
    Field("Checks", Shape::List(AGENT_CHECK_FIELDS)),
    Field("TaggedAddresses", Shape::Ignored),
    Field("Weights", Shape::Ignored),
    Field("Kind", Shape::Ignored),
    Field("Proxy", Shape::Ignored),
    Field("Connect", Shape::Ignored),
    Field("SocketPath", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Locality", Shape::Ignored),
];

const CHECK_UPDATE_FIELDS: &[Field] = &[Field("Status", Shape::Leaf), Field("Output", Shape::Leaf)];

#[derive(Debug, Default, Deserialize)]
struct AgentCheckBody {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(rename = "CheckID", default)]
    check_id: Option<String>,
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Notes", default)]
    notes: Option<String>,
    #[serde(rename = "ServiceID", default)]
    service_id: Option<String>,
    #[serde(rename = "Status", default)]
    status: Option<String>,
    #[serde(rename = "TTL", default)]
    ttl: Option<GoDuration>,
    #[serde(rename = "HTTP", default)]
    http: Option<String>,
    #[serde(rename = "Method", default)]
    method: Option<String>,
    #[serde(rename = "Header", default)]
    header: Option<BTreeMap<String, Vec<String>>>,
    #[serde(rename = "Body", default)]
    body: Option<String>,
    #[serde(rename = "TCP", default)]
    tcp: Option<String>,
    #[serde(rename = "Interval", default)]
    interval: Option<GoDuration>,
    #[serde(rename = "Timeout", default)]
    timeout: Option<GoDuration>,
    #[serde(rename = "DeregisterCriticalServiceAfter", default)]
    deregister_critical_service_after: Option<GoDuration>,
    #[serde(rename = "TLSSkipVerify", default)]
    tls_skip_verify: Option<bool>,
    #[serde(rename = "TLSServerName", default)]
    tls_server_name: Option<String>,
    #[serde(rename = "Args", default)]
    args: Option<Value>,
    #[serde(rename = "ScriptArgs", default)]
    script_args: Option<Value>,
    #[serde(rename = "Script", default)]
    script: Option<Value>,
    #[serde(rename = "DockerContainerID", default)]
    docker_container_id: Option<Value>,
    #[serde(rename = "Shell", default)]
    shell: Option<Value>,
    #[serde(rename = "GRPC", default)]
    grpc: Option<Value>,
    #[serde(rename = "H2PING", default)]
    h2ping: Option<Value>,
    #[serde(rename = "UDP", default)]
    udp: Option<Value>,
    #[serde(rename = "AliasNode", default)]
    alias_node: Option<Value>,
    #[serde(rename = "AliasService", default)]
    alias_service: Option<Value>,
    #[serde(rename = "OSService", default)]
    os_service: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct ServiceBody {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(rename = "Name", default)]
    name: Option<String>,
    #[serde(rename = "Tags", default)]
    tags: Option<Vec<String>>,
    #[serde(rename = "Address", default)]
    address: Option<String>,
    #[serde(rename = "Port", default)]
    port: Option<u16>,
    #[serde(rename = "Meta", default)]
    meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "EnableTagOverride", default)]
    enable_tag_override: Option<bool>,
    #[serde(rename = "Check", default)]
    check: Option<AgentCheckBody>,
    #[serde(rename = "Checks", default)]
    checks: Option<Vec<AgentCheckBody>>,
}

#[derive(Debug, Default, Deserialize)]
struct CheckUpdateBody {
    #[serde(rename = "Status", default)]
    status: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

fn present(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(text)) => !text.is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(_) => true,
    }
}

const INVALID_CHECK: &str = "Must provide TTL or Script/DockerContainerID/HTTP/TCP/GRPC/H2PING/UDP/AliasService/OSService and Interval!";

impl AgentCheckBody {
    /// Whether the body defines any check at all (a service's `"Check": {}` does not).
    fn is_empty(&self) -> bool {
        self.ttl.is_none_or(|ttl| ttl.0.is_zero())
            && self.http.as_deref().is_none_or(str::is_empty)
            && self.tcp.as_deref().is_none_or(str::is_empty)
            && !self.unsupported_kind_present()
    }

    fn unsupported_kind_present(&self) -> bool {
        [
            &self.args,
            &self.script_args,
            &self.script,
            &self.docker_container_id,
            &self.shell,
            &self.grpc,
            &self.h2ping,
            &self.udp,
            &self.alias_node,
            &self.alias_service,
            &self.os_service,
        ]
        .iter()
        .any(|value| present(value.as_ref()))
    }

    /// Validates the body into a check of this agent's node.
    fn into_record(
        self,
        node: &str,
        default_id: String,
        default_name: String,
        service_id: String,
    ) -> Result<CheckRecord, Error> {
        if present(self.args.as_ref())
            || present(self.script_args.as_ref())
            || present(self.script.as_ref())
        {
            return Err(Error::Invalid(
                "Scripts are disabled on this agent; to enable, configure 'enable_script_checks' or 'enable_local_script_checks' to true".to_owned(),
            ));
        }
        for (value, kind) in [
            (&self.docker_container_id, "Docker"),
            (&self.shell, "Docker"),
            (&self.grpc, "gRPC"),
            (&self.h2ping, "H2PING"),
            (&self.udp, "UDP"),
            (&self.alias_node, "alias"),
            (&self.alias_service, "alias"),
            (&self.os_service, "OS service"),
        ] {
            if present(value.as_ref()) {
                return Err(Error::Invalid(format!(
                    "{kind} checks are not supported by this server; use TTL, HTTP or TCP"
                )));
            }
        }
        let ttl = self.ttl.unwrap_or_default();
        let http = self.http.unwrap_or_default();
        let tcp = self.tcp.unwrap_or_default();
        let kinds = usize::from(!ttl.0.is_zero())
            + usize::from(!http.is_empty())
            + usize::from(!tcp.is_empty());
        if kinds > 1 {
            return Err(Error::Invalid(
                "A check must have exactly one of TTL, HTTP or TCP".to_owned(),
            ));
        }
        let interval = self.interval.unwrap_or_default().0;
        let kind = if !ttl.0.is_zero() {
            CheckKind::Ttl
        } else if !http.is_empty() {
            let url = reqwest::Url::parse(&http)
                .map_err(|err| Error::Invalid(format!("Invalid HTTP check URL {http:?}: {err}")))?;
            if !matches!(url.scheme(), "http" | "https") {
                return Err(Error::Invalid(format!(
                    "Invalid HTTP check URL {http:?}: the scheme must be http or https"
                )));
            }
            CheckKind::Http
        } else if !tcp.is_empty() {
            let valid = tcp
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(Error::Invalid(format!(
                    "Invalid TCP check address {tcp:?}: expected host:port"
                )));
            }
            CheckKind::Tcp
        } else {
            return Err(Error::Invalid(INVALID_CHECK.to_owned()));
        };
        if matches!(kind, CheckKind::Http | CheckKind::Tcp) && interval.is_zero() {
            return Err(Error::Invalid(INVALID_CHECK.to_owned()));
        }
        let method = self.method.unwrap_or_default().to_uppercase();
        if !method.is_empty() && http::Method::from_bytes(method.as_bytes()).is_err() {
            return Err(Error::Invalid(format!("Invalid HTTP method {method:?}")));
        }
        let check_id = self
            .id
            .filter(|id| !id.is_empty())
            .or(self.check_id.filter(|id| !id.is_empty()))
            .unwrap_or(default_id);
        validate_id(&check_id, "check ID")?;
        let name = self
            .name
            .filter(|name| !name.is_empty())
            .unwrap_or(default_name);
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (interval_ms, timeout_ms) = match kind {
            CheckKind::Http | CheckKind::Tcp => {
                let timeout = self
                    .timeout
                    .map(|t| t.0)
                    .filter(|t| !t.is_zero())
                    .unwrap_or(DEFAULT_TIMEOUT);
                (millis(interval.max(MIN_INTERVAL)), millis(timeout))
            }
            CheckKind::Ttl | CheckKind::None => (0, 0),
        };
        Ok(CheckRecord {
            version: RECORD_VERSION,
            node: node.to_owned(),
            check_id,
            name,
            status: parse_status(self.status.as_deref())?,
            notes: self.notes.unwrap_or_default(),
            output: String::new(),
            service_id,
            service_name: String::new(),
            service_tags: Vec::new(),
            kind,
            definition: CheckDefinition {
                interval_ms,
                timeout_ms,
                http,
                method,
                header: self.header.unwrap_or_default(),
                body: self.body.unwrap_or_default(),
                tls_skip_verify: self.tls_skip_verify.unwrap_or(false),
                tls_server_name: self.tls_server_name.unwrap_or_default(),
                tcp,
                ttl_ms: ttl.millis(),
                deregister_critical_service_after_ms: self
                    .deregister_critical_service_after
                    .unwrap_or_default()
                    .millis(),
            },
        })
    }
}

fn agent_missing_service(service_id: &str) -> String {
    format!("ServiceID {service_id:?} does not exist")
}

fn agent_registration(state: &State) -> Registration {
    let mut reg = Registration::new(catalog::self_node(state));
    reg.skip_node_update = true;
    reg.missing_service = agent_missing_service;
    reg
}

/// The permission a check needs: service:<access> on its service, else node:<access>.
async fn authorize_check(
    state: &State,
    authz: &Authz,
    check: &CheckRecord,
    access: Access,
) -> Result<(), Error> {
    if check.service_id.is_empty() {
        return authz.check(Resource::Node, &check.node, access);
    }
    let name = if check.service_name.is_empty() {
        match state
            .storage()
            .get(&service_key(&check.node, &check.service_id))
            .await?
        {
            Some(kv) => decode::<ServiceRecord>(&kv.key, &kv.value)?.service,
            None => {
                return Err(Error::Invalid(agent_missing_service(&check.service_id)));
            }
        }
    } else {
        check.service_name.clone()
    };
    authz.check(Resource::Service, &name, access)
}

// ---------------------------------------------------------------------------------------------
// Check writes.

/// `PUT /v1/agent/check/register`: adds (or replaces) a TTL, HTTP or TCP check of this node.
pub(crate) async fn create_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: AgentCheckBody = decode_body(&bytes, AGENT_CHECK_FIELDS)?;
    let name = body.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Invalid("Missing check name".to_owned()));
    }
    let service_id = body.service_id.clone().unwrap_or_default();
    let node = node_name(&state).to_owned();
    let check = body.into_record(&node, name.clone(), name, service_id)?;
    if check.check_id == SERF_HEALTH_CHECK {
        return Err(Error::Invalid(format!(
            "Check ID {SERF_HEALTH_CHECK:?} is reserved"
        )));
    }
    authorize_check(&state, &authz, &check, Access::Write).await?;
    let mut reg = agent_registration(&state);
    reg.checks.push(check);
    catalog::apply_registration(&state, reg).await
}

/// Loads an agent check for a write, or Consul's 404.
async fn agent_check_for_write(
    state: &State,
    authz: &Authz,
    check_id: &str,
) -> Result<CheckRecord, Error> {
    if check_id == SERF_HEALTH_CHECK {
        return Err(catalog::unknown_check(check_id));
    }
    let Some(check) = load_check(state.storage(), node_name(state), check_id).await? else {
        return Err(catalog::unknown_check(check_id));
    };
    authorize_check(state, authz, &check.record, Access::Write).await?;
    Ok(check.record)
}

/// `PUT /v1/agent/check/deregister/:id`: removes a check (its sessions are invalidated).
pub(crate) async fn delete_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    agent_check_for_write(&state, &authz, &check_id).await?;
    let node = node_name(&state).to_owned();
    if !catalog::deregister(&state, &node, Removal::Check(check_id.clone())).await? {
        return Err(catalog::unknown_check(&check_id));
    }
    Ok(())
}

async fn heartbeat(
    state: &State,
    authz: &Authz,
    check_id: &str,
    status: CheckStatus,
    output: &str,
) -> Result<(), Error> {
    agent_check_for_write(state, authz, check_id).await?;
    let node = node_name(state).to_owned();
    catalog::update_check_status(state, &node, check_id, status, output, TtlUpdate::Heartbeat)
        .await?;
    Ok(())
}

/// `PUT /v1/agent/check/pass/:id?note=`: a TTL check is passing (the note is its output).
pub(crate) async fn update_check_pass(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Passing, note).await
}

/// `PUT /v1/agent/check/warn/:id?note=`.
pub(crate) async fn update_check_warn(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Warning, note).await
}

/// `PUT /v1/agent/check/fail/:id?note=`: critical; sessions bound to it are invalidated.
pub(crate) async fn update_check_fail(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let note = query.get("note").unwrap_or("");
    heartbeat(&state, &authz, &check_id, CheckStatus::Critical, note).await
}

/// `PUT /v1/agent/check/update/:id` `{Status, Output}`.
pub(crate) async fn update_check(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(check_id): Path<String>,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: CheckUpdateBody = decode_body(&bytes, CHECK_UPDATE_FIELDS)?;
    let raw = body.status.unwrap_or_default();
    let status = CheckStatus::parse(&raw)
        .ok_or_else(|| Error::BadRequest(format!("Invalid check status: '{raw}'")))?;
    let output = body.output.unwrap_or_default();
    heartbeat(&state, &authz, &check_id, status, &output).await
}

// ---------------------------------------------------------------------------------------------
// Service writes.

/// `PUT /v1/agent/service/register[?replace-existing-checks]`: adds or replaces a service of
/// this node, with its checks (`service:<id>`, or `service:<id>:<n>` when there are several).
pub(crate) async fn create_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
    http_kit::RawBody { bytes, .. }: http_kit::RawBody<Error>,
) -> Result<(), Error> {
    query.options(&state)?;
    let body: ServiceBody = decode_body(&bytes, AGENT_SERVICE_FIELDS)?;
    let name = body.name.unwrap_or_default();
    if name.is_empty() {
        return Err(Error::Invalid("Missing service name".to_owned()));
    }
    let id = body
        .id
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| name.clone());
    validate_id(&id, "service ID")?;
    if id == CONSUL_SERVICE {
        return Err(Error::Invalid(format!(
            "Service ID {CONSUL_SERVICE:?} is reserved for this server"
        )));
    }
    let meta = body.meta.unwrap_or_default();
    validate_meta(&meta, "Service", false)?;
    authz.check(Resource::Service, &name, Access::Write)?;
    let replace = query
        .get("replace-existing-checks")
        .is_some_and(|raw| raw.is_empty() || http_kit::parse_bool(raw).unwrap_or(false));

    let node = node_name(&state).to_owned();
    let bodies: Vec<AgentCheckBody> = body
        .check
        .into_iter()
        .chain(body.checks.unwrap_or_default())
        .filter(|check| !check.is_empty())
        .collect();
    let several = bodies.len() > 1;
    let mut reg = agent_registration(&state);
    for (n, check) in bodies.into_iter().enumerate() {
        let default_id = if several {
            format!("service:{id}:{}", n + 1)
        } else {
            format!("service:{id}")
        };
        let record = check.into_record(
            &node,
            default_id,
            format!("Service '{name}' check"),
            id.clone(),
        )?;
        if reg.checks.iter().any(|c| c.check_id == record.check_id) {
            return Err(Error::Invalid(format!(
                "Duplicate check ID {:?}",
                record.check_id
            )));
        }
        reg.checks.push(record);
    }
    reg.services.push(ServiceRecord {
        version: RECORD_VERSION,
        id: id.clone(),
        service: name,
        tags: body.tags.unwrap_or_default(),
        address: body.address.unwrap_or_default(),
        port: body.port.unwrap_or_default(),
        meta,
        enable_tag_override: body.enable_tag_override.unwrap_or(false),
    });
    if replace {
        reg.replace_checks_of = Some(id);
    }
    catalog::apply_registration(&state, reg).await
}

/// `PUT /v1/agent/service/deregister/:id`: removes a service and its checks.
pub(crate) async fn delete_service(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Write)?;
    let node = node_name(&state).to_owned();
    if !catalog::deregister(&state, &node, Removal::Service(service_id.clone())).await? {
        return Err(unknown_service(&service_id));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Maintenance mode.

fn enable_param(query: &QueryParams) -> Result<bool, Error> {
    match query.get("enable") {
        None | Some("") => Err(Error::BadRequest("Missing value for enable".to_owned())),
        Some(raw) => http_kit::parse_bool(raw)
            .ok_or_else(|| Error::BadRequest(format!("Invalid value for enable: {raw:?}"))),
    }
}

fn maintenance_check(
    node: &str,
    check_id: String,
    name: &str,
    reason: &str,
    service_id: String,
) -> CheckRecord {
    CheckRecord {
        version: RECORD_VERSION,
        node: node.to_owned(),
        check_id,
        name: name.to_owned(),
        status: CheckStatus::Critical,
        notes: reason.to_owned(),
        output: String::new(),
        service_id,
        service_name: String::new(),
        service_tags: Vec::new(),
        kind: CheckKind::None,
        definition: CheckDefinition::default(),
    }
}

/// `PUT /v1/agent/maintenance?enable=&reason=`: puts the node in maintenance (a critical
/// `_node_maintenance` check) or takes it out.
pub(crate) async fn update_node_maintenance(
    AxumState(state): AxumState<State>,
    authz: Authz,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let enable = enable_param(&query)?;
    let node = node_name(&state).to_owned();
    authz.check(Resource::Node, &node, Access::Write)?;
    if enable {
        let reason = query.get("reason").filter(|r| !r.is_empty()).unwrap_or(
            "Maintenance mode is enabled for this node, but no reason was provided. This is a default message.",
        );
        let mut reg = agent_registration(&state);
        reg.checks.push(maintenance_check(
            &node,
            NODE_MAINTENANCE_CHECK.to_owned(),
            "Node Maintenance Mode",
            reason,
            String::new(),
        ));
        catalog::apply_registration(&state, reg).await
    } else {
        catalog::deregister(
            &state,
            &node,
            Removal::Check(NODE_MAINTENANCE_CHECK.to_owned()),
        )
        .await
        .map(drop)
    }
}

/// `PUT /v1/agent/service/maintenance/:id?enable=&reason=`.
pub(crate) async fn update_service_maintenance(
    AxumState(state): AxumState<State>,
    authz: Authz,
    Path(service_id): Path<String>,
    query: QueryParams,
) -> Result<(), Error> {
    query.options(&state)?;
    let enable = enable_param(&query)?;
    let Some(service) = load_agent_service(&state, &service_id).await? else {
        return Err(unknown_service(&service_id));
    };
    authz.check(Resource::Service, &service.record.service, Access::Write)?;
    let node = node_name(&state).to_owned();
    let check_id = format!("{SERVICE_MAINTENANCE_PREFIX}{service_id}");
    if enable {
        let reason = query.get("reason").filter(|r| !r.is_empty()).unwrap_or(
            "Maintenance mode is enabled for this service, but no reason was provided. This is a default message.",
        );
        let mut reg = agent_registration(&state);
        reg.checks.push(maintenance_check(
            &node,
            check_id,
            "Service Maintenance Mode",
            reason,
            service_id,
        ));
        catalog::apply_registration(&state, reg).await
    } else {
        catalog::deregister(&state, &node, Removal::Check(check_id))
            .await
            .map(drop)
    }
}
