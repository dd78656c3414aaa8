//! `PUT /v1/acl/bootstrap`: the one-time creation of the first management token, as Consul's
//! (what `consul acl bootstrap` and py-consul's `acl.bootstrap()` call).
//!
//! Where it sits: listed in `routes.rs` under `// Unauthenticated:` (no [`super::Authz`]: the
//! token a request presents is ignored, as Consul ignores it); decodes the optional body, calls
//! `domain::acl::bootstrap_token` and renders the token as `acl/token.rs` renders it, after
//! Consul's legacy `ID` field (the SecretID again).
//!
//! Invariants: 401 `ACL support disabled` when ACLs are off; allowed once per store (the
//! bootstrap API's token or a configured initial management token counts), afterwards 403
//! `Permission denied: ACL bootstrap no longer allowed (reset index: N)` with N fixed at the
//! index the bootstrap happened at; an optional `{"BootstrapSecret": "<uuid>"}` chooses the
//! SecretID, and a secret that is not a UUID, is reserved or already used is a 400 (Consul:
//! 500) in Consul's words. No bootstrap reset file: a lost management token is not recovered.

use axum::extract::State as AxumState;
use http_kit::Json;
use http_kit::RawBody;
use serde::{Deserialize, Serialize};

use super::{decode_body, ensure_enabled};
use crate::acl::token::TokenView;
use crate::domain::acl as domain;
use crate::{Error, State};

/// The optional request body (Consul's `api.BootstrapRequest`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BootstrapBody {
    bootstrap_secret: Option<String>,
}

/// The answer: Consul's legacy `ID` (the SecretID), then the token.
#[derive(Debug, Serialize)]
pub(crate) struct BootstrapView {
    #[serde(rename = "ID")]
    id: String,
    #[serde(flatten)]
    token: TokenView,
}

/// `PUT /v1/acl/bootstrap`: the first management token, once.
pub(crate) async fn create_bootstrap_token(
    AxumState(state): AxumState<State>,
    RawBody { bytes, .. }: RawBody<Error>,
) -> Result<Json<BootstrapView>, Error> {
    ensure_enabled(&state)?;
    let body: BootstrapBody = decode_body(&bytes, "Request", &["BootstrapSecret"], |_| {})?;
    let secret = body.bootstrap_secret.filter(|secret| !secret.is_empty());
    let stored = domain::bootstrap_token(
        state.storage(),
        &state.config().datacenter,
        secret.as_deref(),
        state.clock().now_ms(),
    )
    .await?;
    Ok(Json(BootstrapView {
        id: stored.record.secret_id.clone(),
        token: stored.into(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_bodies_are_optional_and_decode_case_insensitively() {
        let decode = |bytes: &[u8]| {
            decode_body::<BootstrapBody>(bytes, "Request", &["BootstrapSecret"], |_| {})
        };
        assert_eq!(decode(b"").unwrap().bootstrap_secret, None);
        assert_eq!(decode(b"{}").unwrap().bootstrap_secret, None);
        assert_eq!(
            decode(br#"{"bootstrapsecret": "s"}"#)
                .unwrap()
                .bootstrap_secret
                .as_deref(),
            Some("s")
        );
        let err = decode(br#"{"BootstrapSecret": 1}"#).unwrap_err();
        assert!(
            err.to_string().starts_with("Request decoding failed: "),
            "{err}"
        );
    }
}
