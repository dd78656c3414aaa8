//! `GET|HEAD /v1/sys/health`: unauthenticated node health, with Vault's status-code knobs.
//!
//! Called from `routes.rs`. Vault answers 200 when active, 429 standby, 472 DR secondary,
//! 473 performance standby, 501 uninitialized and 503 sealed, each overridable with a
//! `*code` query parameter; `standbyok`/`perfstandbyok` turn standby answers into the active
//! code. The answer is the uninitialized or sealed code from the seal's real state
//! (`seal.rs`), else the standby code on an HA standby (`ha.rs`: on etcd, a server that does
//! not lead), else the active code. cairn has no performance standbys or DR secondaries, so
//! `perfstandbyok` and their codes are only validated.
//!
//! Invariant: a malformed code or boolean is a 400 in Vault's error shape, never ignored.

use std::collections::HashMap;

use axum::extract::State;
use axum::response::Response;
use http::StatusCode;
use serde::Serialize;

use crate::{Error, Query, REPORTED_VERSION};

#[derive(Debug, Serialize)]
struct HealthResponse {
    initialized: bool,
    sealed: bool,
    standby: bool,
    performance_standby: bool,
    replication_performance_mode: &'static str,
    replication_dr_mode: &'static str,
    server_time_utc: u64,
    version: &'static str,
    cluster_name: String,
    cluster_id: String,
}

pub(crate) async fn read_health(
    State(state): State<crate::State>,
    Query { value: query, .. }: Query<HashMap<String, String>>,
) -> Result<Response, Error> {
    let codes = HealthCodes::parse(&query)?;
    let initialized = state.seal().is_initialized().await?;
    let sealed = !state.seal().is_unsealed();
    let standby = initialized && !sealed && super::ha::is_standby(&state);
    let status = if !initialized {
        codes.uninit
    } else if sealed {
        codes.sealed
    } else if standby {
        codes.standby
    } else {
        codes.active
    };
    let cluster = state.cluster();
    let body = HealthResponse {
        initialized,
        sealed,
        standby,
        performance_standby: false,
        replication_performance_mode: "disabled",
        replication_dr_mode: "disabled",
        server_time_utc: u64::try_from(state.now_ms().div_euclid(1000)).unwrap_or(0),
        version: REPORTED_VERSION,
        cluster_name: cluster.name.clone(),
        cluster_id: cluster.id.clone(),
    };
    Ok(crate::dispatch::json_bytes_response(
        status,
        body.to_bytes(),
    ))
}

impl HealthResponse {
    /// The answer's JSON text, written by hand: the same bytes as `serde_json::to_vec` of the
    /// derived `Serialize` (tested). Load balancers poll this endpoint; the serializer wrote
    /// its ten keys and four strings one escape scan at a time (~4k instructions, ~15 % of a
    /// health request).
    fn to_bytes(&self) -> Vec<u8> {
        use http_kit::json::{write_str, write_u64};
        let flag = |value: bool| -> &'static [u8] { if value { b"true" } else { b"false" } };
        let mut out = Vec::with_capacity(384);
        out.extend_from_slice(b"{\"initialized\":");
        out.extend_from_slice(flag(self.initialized));
        out.extend_from_slice(b",\"sealed\":");
        out.extend_from_slice(flag(self.sealed));
        out.extend_from_slice(b",\"standby\":");
        out.extend_from_slice(flag(self.standby));
        out.extend_from_slice(b",\"performance_standby\":");
        out.extend_from_slice(flag(self.performance_standby));
        out.extend_from_slice(b",\"replication_performance_mode\":");
        write_str(&mut out, self.replication_performance_mode);
        out.extend_from_slice(b",\"replication_dr_mode\":");
        write_str(&mut out, self.replication_dr_mode);
        out.extend_from_slice(b",\"server_time_utc\":");
        write_u64(&mut out, self.server_time_utc);
        out.extend_from_slice(b",\"version\":");
        write_str(&mut out, self.version);
        out.extend_from_slice(b",\"cluster_name\":");
        write_str(&mut out, &self.cluster_name);
        out.extend_from_slice(b",\"cluster_id\":");
        write_str(&mut out, &self.cluster_id);
        out.push(b'}');
        out
    }
}

/// The status codes a health answer may use, after query overrides.
#[derive(Debug, PartialEq, Eq)]
struct HealthCodes {
    active: StatusCode,
    standby: StatusCode,
    sealed: StatusCode,
    uninit: StatusCode,
}

impl HealthCodes {
    fn parse(query: &HashMap<String, String>) -> Result<HealthCodes, Error> {
        let code = |name: &str, default: StatusCode| -> Result<StatusCode, Error> {
            match query.get(name) {
                None => Ok(default),
                Some(raw) => raw
                    .parse::<u16>()
                    .ok()
                    .and_then(|n| StatusCode::from_u16(n).ok())
                    .ok_or_else(|| Error::InvalidParameter(format!("bad code: {raw}"))),
            }
        };
        let flag = |name: &str| -> Result<bool, Error> {
            match query.get(name) {
                None => Ok(false),
                // Vault treats a bare `?standbyok` as true.
                Some(raw) if raw.is_empty() => Ok(true),
                Some(raw) => stdx::strconv::parse_bool(raw)
                    .ok_or_else(|| Error::InvalidParameter(format!("bad value for {name}: {raw}"))),
            }
        };
        let active = code("activecode", StatusCode::OK)?;
        let standby = if flag("standbyok")? {
            active
        } else {
            code("standbycode", StatusCode::TOO_MANY_REQUESTS)?
        };
        let _perf_standby_ok = flag("perfstandbyok")?;
        let _perf_standby = code(
            "performancestandbycode",
            StatusCode::from_u16(473).unwrap_or(StatusCode::OK),
        )?;
        let _dr_secondary = code(
            "drsecondarycode",
            StatusCode::from_u16(472).unwrap_or(StatusCode::OK),
        )?;
        Ok(HealthCodes {
            active,
            standby,
            sealed: code("sealedcode", StatusCode::SERVICE_UNAVAILABLE)?,
            uninit: code("uninitcode", StatusCode::NOT_IMPLEMENTED)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<HealthCodes, Error> {
        HealthCodes::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn the_hand_written_health_answer_is_the_serialised_one() {
        for (initialized, sealed, standby, name, time) in [
            (true, false, false, "vault-cluster-30f3a4c7", 1_795_881_898),
            (true, true, false, "", 0),
            (false, true, true, "odd \"name\" \\ é\n\u{1}", u64::MAX),
        ] {
            let body = HealthResponse {
                initialized,
                sealed,
                standby,
                performance_standby: false,
                replication_performance_mode: "disabled",
                replication_dr_mode: "disabled",
                server_time_utc: time,
                version: REPORTED_VERSION,
                cluster_name: name.to_owned(),
                cluster_id: "30f3a4c7-7c87-4513-88f9-ada6d02ee2f1".to_owned(),
            };
            assert_eq!(
                String::from_utf8(body.to_bytes()).unwrap(),
                serde_json::to_string(&body).unwrap()
            );
        }
    }

    #[test]
    fn health_codes_default_to_vaults() {
        let codes = parse(&[]).unwrap();
        assert_eq!(codes.active, StatusCode::OK);
        assert_eq!(codes.standby, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(codes.sealed, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(codes.uninit, StatusCode::NOT_IMPLEMENTED);
    }

    #[test]
    fn health_standbyok_uses_active_code() {
        assert_eq!(
            parse(&[("standbyok", "true"), ("activecode", "204")])
                .unwrap()
                .standby,
            StatusCode::NO_CONTENT
        );
        assert_eq!(parse(&[("standbyok", "")]).unwrap().standby, StatusCode::OK);
    }

    #[test]
    fn health_rejects_malformed_code() {
        let err = parse(&[("activecode", "abc")]).unwrap_err();
        assert_eq!(err.to_string(), "bad code: abc");
        assert!(parse(&[("sealedcode", "99")]).is_err());
        assert!(parse(&[("standbyok", "maybe")]).is_err());
    }
}
