//! The bodies of `/v1/agent/check/register`, `/v1/agent/service/register` and
//! `/v1/agent/check/update`, decoded case-insensitively (`body.rs`) and validated into check
//! records of this agent's node.
//!
//! Invariants: a check's initial status is critical unless the request gives one (as in
//! Consul); an HTTP/TCP interval below 1 s is raised to 1 s; a check has exactly one of TTL,
//! HTTP or TCP; script, Docker, gRPC, H2PING, UDP, alias and OS-service checks are refused with a
//! 400 (this server does not run them).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::Error;
use crate::body::{Field, GoDuration, Shape};
use crate::domain::catalog::validate_id;
use crate::domain::checks::{DEFAULT_TIMEOUT, MIN_INTERVAL, parse_status};
use crate::store::catalog::{CheckDefinition, CheckKind, CheckRecord, RECORD_VERSION};

pub(crate) const AGENT_CHECK_FIELDS: &[Field] = &[
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

pub(crate) const AGENT_SERVICE_FIELDS: &[Field] = &[
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

pub(crate) const CHECK_UPDATE_FIELDS: &[Field] =
    &[Field("Status", Shape::Leaf), Field("Output", Shape::Leaf)];

#[derive(Debug, Default, Deserialize)]
pub(crate) struct AgentCheckBody {
    #[serde(rename = "ID", default)]
    pub(crate) id: Option<String>,
    #[serde(rename = "CheckID", default)]
    pub(crate) check_id: Option<String>,
    #[serde(rename = "Name", default)]
    pub(crate) name: Option<String>,
    #[serde(rename = "Notes", default)]
    pub(crate) notes: Option<String>,
    #[serde(rename = "ServiceID", default)]
    pub(crate) service_id: Option<String>,
    #[serde(rename = "Status", default)]
    pub(crate) status: Option<String>,
    #[serde(rename = "TTL", default)]
    pub(crate) ttl: Option<GoDuration>,
    #[serde(rename = "HTTP", default)]
    pub(crate) http: Option<String>,
    #[serde(rename = "Method", default)]
    pub(crate) method: Option<String>,
    #[serde(rename = "Header", default)]
    pub(crate) header: Option<BTreeMap<String, Vec<String>>>,
    #[serde(rename = "Body", default)]
    pub(crate) body: Option<String>,
    #[serde(rename = "TCP", default)]
    pub(crate) tcp: Option<String>,
    #[serde(rename = "Interval", default)]
    pub(crate) interval: Option<GoDuration>,
    #[serde(rename = "Timeout", default)]
    pub(crate) timeout: Option<GoDuration>,
    #[serde(rename = "DeregisterCriticalServiceAfter", default)]
    pub(crate) deregister_critical_service_after: Option<GoDuration>,
    #[serde(rename = "TLSSkipVerify", default)]
    pub(crate) tls_skip_verify: Option<bool>,
    #[serde(rename = "TLSServerName", default)]
    pub(crate) tls_server_name: Option<String>,
    #[serde(rename = "Args", default)]
    pub(crate) args: Option<Value>,
    #[serde(rename = "ScriptArgs", default)]
    pub(crate) script_args: Option<Value>,
    #[serde(rename = "Script", default)]
    pub(crate) script: Option<Value>,
    #[serde(rename = "DockerContainerID", default)]
    pub(crate) docker_container_id: Option<Value>,
    #[serde(rename = "Shell", default)]
    pub(crate) shell: Option<Value>,
    #[serde(rename = "GRPC", default)]
    pub(crate) grpc: Option<Value>,
    #[serde(rename = "H2PING", default)]
    pub(crate) h2ping: Option<Value>,
    #[serde(rename = "UDP", default)]
    pub(crate) udp: Option<Value>,
    #[serde(rename = "AliasNode", default)]
    pub(crate) alias_node: Option<Value>,
    #[serde(rename = "AliasService", default)]
    pub(crate) alias_service: Option<Value>,
    #[serde(rename = "OSService", default)]
    pub(crate) os_service: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ServiceBody {
    #[serde(rename = "ID", default)]
    pub(crate) id: Option<String>,
    #[serde(rename = "Name", default)]
    pub(crate) name: Option<String>,
    #[serde(rename = "Tags", default)]
    pub(crate) tags: Option<Vec<String>>,
    #[serde(rename = "Address", default)]
    pub(crate) address: Option<String>,
    #[serde(rename = "Port", default)]
    pub(crate) port: Option<u16>,
    #[serde(rename = "Meta", default)]
    pub(crate) meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "EnableTagOverride", default)]
    pub(crate) enable_tag_override: Option<bool>,
    #[serde(rename = "Check", default)]
    pub(crate) check: Option<AgentCheckBody>,
    #[serde(rename = "Checks", default)]
    pub(crate) checks: Option<Vec<AgentCheckBody>>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CheckUpdateBody {
    #[serde(rename = "Status", default)]
    pub(crate) status: Option<String>,
    #[serde(rename = "Output", default)]
    pub(crate) output: Option<String>,
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
    pub(crate) fn is_empty(&self) -> bool {
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
    pub(crate) fn into_record(
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
