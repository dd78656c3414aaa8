//! The bodies of `/v1/catalog/register` and `/v1/catalog/deregister`: Consul's field tables
//! (matched case-insensitively by `body.rs`) and the serde structs they fill.
//!
//! Invariant: every field Consul's `RegisterRequest` and `DeregisterRequest` carry is listed,
//! either read or explicitly ignored, so an unknown field is a 400 naming it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::body::{Field, GoDuration, Shape};
use crate::store::catalog::CheckDefinition;

const NODE_DEFINITION_FIELDS: &[Field] = &[
    Field("Interval", Shape::Leaf),
    Field("Timeout", Shape::Leaf),
    Field("HTTP", Shape::Leaf),
    Field("Method", Shape::Leaf),
    Field("Header", Shape::Leaf),
    Field("Body", Shape::Leaf),
    Field("TLSServerName", Shape::Leaf),
    Field("TLSSkipVerify", Shape::Leaf),
    Field("TCP", Shape::Leaf),
    Field("TTL", Shape::Leaf),
    Field("DeregisterCriticalServiceAfter", Shape::Leaf),
    Field("DisableRedirects", Shape::Ignored),
    Field("TCPUseTLS", Shape::Ignored),
    Field("UDP", Shape::Ignored),
    Field("H2PING", Shape::Ignored),
    Field("H2PingUseTLS", Shape::Ignored),
    Field("OSService", Shape::Ignored),
    Field("OutputMaxSize", Shape::Ignored),
    Field("ScriptArgs", Shape::Ignored),
    Field("DockerContainerID", Shape::Ignored),
    Field("Shell", Shape::Ignored),
    Field("GRPC", Shape::Ignored),
    Field("GRPCUseTLS", Shape::Ignored),
    Field("AliasNode", Shape::Ignored),
    Field("AliasService", Shape::Ignored),
];

const CATALOG_CHECK_FIELDS: &[Field] = &[
    Field("Node", Shape::Leaf),
    Field("CheckID", Shape::Leaf),
    Field("Name", Shape::Leaf),
    Field("Status", Shape::Leaf),
    Field("Notes", Shape::Leaf),
    Field("Output", Shape::Leaf),
    Field("ServiceID", Shape::Leaf),
    Field("Definition", Shape::Object(NODE_DEFINITION_FIELDS)),
    Field("ServiceName", Shape::Ignored),
    Field("ServiceTags", Shape::Ignored),
    Field("Type", Shape::Ignored),
    Field("Interval", Shape::Ignored),
    Field("Timeout", Shape::Ignored),
    Field("ExposedPort", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("CreateIndex", Shape::Ignored),
    Field("ModifyIndex", Shape::Ignored),
];

const CATALOG_SERVICE_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("Service", Shape::Leaf),
    Field("Tags", Shape::Leaf),
    Field("Address", Shape::Leaf),
    Field("Port", Shape::Leaf),
    Field("Meta", Shape::Leaf),
    Field("EnableTagOverride", Shape::Leaf),
    Field("Kind", Shape::Ignored),
    Field("TaggedAddresses", Shape::Ignored),
    Field("Weights", Shape::Ignored),
    Field("SocketPath", Shape::Ignored),
    Field("Proxy", Shape::Ignored),
    Field("Connect", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Datacenter", Shape::Ignored),
    Field("Locality", Shape::Ignored),
    Field("ContentHash", Shape::Ignored),
    Field("CreateIndex", Shape::Ignored),
    Field("ModifyIndex", Shape::Ignored),
];

pub(crate) const REGISTER_FIELDS: &[Field] = &[
    Field("ID", Shape::Leaf),
    Field("Node", Shape::Leaf),
    Field("Address", Shape::Leaf),
    Field("Datacenter", Shape::Leaf),
    Field("TaggedAddresses", Shape::Leaf),
    Field("NodeMeta", Shape::Leaf),
    Field("Service", Shape::Object(CATALOG_SERVICE_FIELDS)),
    Field("Check", Shape::Object(CATALOG_CHECK_FIELDS)),
    Field("Checks", Shape::List(CATALOG_CHECK_FIELDS)),
    Field("SkipNodeUpdate", Shape::Leaf),
    Field("WriteRequest", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
    Field("Locality", Shape::Ignored),
];

pub(crate) const DEREGISTER_FIELDS: &[Field] = &[
    Field("Node", Shape::Leaf),
    Field("Datacenter", Shape::Leaf),
    Field("ServiceID", Shape::Leaf),
    Field("CheckID", Shape::Leaf),
    Field("WriteRequest", Shape::Ignored),
    Field("Token", Shape::Ignored),
    Field("Partition", Shape::Ignored),
    Field("Namespace", Shape::Ignored),
    Field("PeerName", Shape::Ignored),
];

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DefinitionBody {
    #[serde(rename = "Interval", default)]
    pub(crate) interval: Option<GoDuration>,
    #[serde(rename = "Timeout", default)]
    pub(crate) timeout: Option<GoDuration>,
    #[serde(rename = "HTTP", default)]
    pub(crate) http: Option<String>,
    #[serde(rename = "Method", default)]
    pub(crate) method: Option<String>,
    #[serde(rename = "Header", default)]
    pub(crate) header: Option<BTreeMap<String, Vec<String>>>,
    #[serde(rename = "Body", default)]
    pub(crate) body: Option<String>,
    #[serde(rename = "TLSServerName", default)]
    pub(crate) tls_server_name: Option<String>,
    #[serde(rename = "TLSSkipVerify", default)]
    pub(crate) tls_skip_verify: Option<bool>,
    #[serde(rename = "TCP", default)]
    pub(crate) tcp: Option<String>,
    #[serde(rename = "TTL", default)]
    pub(crate) ttl: Option<GoDuration>,
    #[serde(rename = "DeregisterCriticalServiceAfter", default)]
    pub(crate) deregister_critical_service_after: Option<GoDuration>,
}

impl DefinitionBody {
    pub(crate) fn into_definition(self) -> CheckDefinition {
        CheckDefinition {
            interval_ms: self.interval.unwrap_or_default().millis(),
            timeout_ms: self.timeout.unwrap_or_default().millis(),
            http: self.http.unwrap_or_default(),
            method: self.method.unwrap_or_default(),
            header: self.header.unwrap_or_default(),
            body: self.body.unwrap_or_default(),
            tls_skip_verify: self.tls_skip_verify.unwrap_or_default(),
            tls_server_name: self.tls_server_name.unwrap_or_default(),
            tcp: self.tcp.unwrap_or_default(),
            ttl_ms: self.ttl.unwrap_or_default().millis(),
            deregister_critical_service_after_ms: self
                .deregister_critical_service_after
                .unwrap_or_default()
                .millis(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CatalogCheckBody {
    #[serde(rename = "Node", default)]
    pub(crate) node: Option<String>,
    #[serde(rename = "CheckID", default)]
    pub(crate) check_id: Option<String>,
    #[serde(rename = "Name", default)]
    pub(crate) name: Option<String>,
    #[serde(rename = "Status", default)]
    pub(crate) status: Option<String>,
    #[serde(rename = "Notes", default)]
    pub(crate) notes: Option<String>,
    #[serde(rename = "Output", default)]
    pub(crate) output: Option<String>,
    #[serde(rename = "ServiceID", default)]
    pub(crate) service_id: Option<String>,
    #[serde(rename = "Definition", default)]
    pub(crate) definition: Option<DefinitionBody>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CatalogServiceBody {
    #[serde(rename = "ID", default)]
    pub(crate) id: Option<String>,
    #[serde(rename = "Service", default)]
    pub(crate) service: Option<String>,
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
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RegisterBody {
    #[serde(rename = "ID", default)]
    pub(crate) id: Option<String>,
    #[serde(rename = "Node", default)]
    pub(crate) node: Option<String>,
    #[serde(rename = "Address", default)]
    pub(crate) address: Option<String>,
    #[serde(rename = "Datacenter", default)]
    pub(crate) datacenter: Option<String>,
    #[serde(rename = "TaggedAddresses", default)]
    pub(crate) tagged_addresses: Option<BTreeMap<String, String>>,
    #[serde(rename = "NodeMeta", default)]
    pub(crate) node_meta: Option<BTreeMap<String, String>>,
    #[serde(rename = "Service", default)]
    pub(crate) service: Option<CatalogServiceBody>,
    #[serde(rename = "Check", default)]
    pub(crate) check: Option<CatalogCheckBody>,
    #[serde(rename = "Checks", default)]
    pub(crate) checks: Option<Vec<CatalogCheckBody>>,
    #[serde(rename = "SkipNodeUpdate", default)]
    pub(crate) skip_node_update: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeregisterBody {
    #[serde(rename = "Node", default)]
    pub(crate) node: Option<String>,
    #[serde(rename = "Datacenter", default)]
    pub(crate) datacenter: Option<String>,
    #[serde(rename = "ServiceID", default)]
    pub(crate) service_id: Option<String>,
    #[serde(rename = "CheckID", default)]
    pub(crate) check_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::decode_body;

    #[test]
    fn body_fields_match_case_insensitively() {
        let body: RegisterBody = decode_body(
            br#"{"node":"n1","address":"10.0.0.1","tagged_addresses":{"Lan":"x"},
                 "service":{"service":"web","enabletagoverride":true},
                 "WriteRequest":{"Token":"t"}}"#,
            REGISTER_FIELDS,
        )
        .unwrap();
        assert_eq!(body.node.as_deref(), Some("n1"));
        assert_eq!(body.tagged_addresses.unwrap()["Lan"], "x");
        let service = body.service.unwrap();
        assert_eq!(service.service.as_deref(), Some("web"));
        assert_eq!(service.enable_tag_override, Some(true));
    }

    #[test]
    fn unknown_body_fields_are_rejected() {
        let err =
            decode_body::<RegisterBody>(br#"{"Node":"n","Bogus":1}"#, REGISTER_FIELDS).unwrap_err();
        assert!(err.to_string().contains("unknown field \"Bogus\""), "{err}");
        let err = decode_body::<RegisterBody>(b"  ", REGISTER_FIELDS).unwrap_err();
        assert_eq!(err.to_string(), "Request decode failed: EOF");
    }
}
