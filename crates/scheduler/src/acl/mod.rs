//! ACL in Nomad's shape (being written): tokens, policies, namespace capabilities, and the
//! [`Authz`] extractor every handler starts with.
//!
//! Interface the handlers use (stable): `Authz` (extractor over `crate::State`),
//! `Authz::allow_namespace(ns, Capability) -> Result<(), Error>`,
//! `Authz::allows_namespace(ns, Capability) -> bool`, `Authz::is_management()`,
//! `Authz::allow_node_read()/allow_node_write()`.

use axum::extract::FromRequestParts;
use http::request::Parts;

mod handlers;

pub(crate) use handlers::*;

use crate::{Error, State};

/// Namespace capabilities (Nomad's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Capability {
    ListJobs,
    ReadJob,
    SubmitJob,
    ParseJob,
    DispatchJob,
    ReadLogs,
    ReadFs,
    AllocLifecycle,
    AllocExec,
    AllocNodeExec,
    PolicyOverride,
}

/// Who is asking, resolved from `X-Scheduler-Token` / `X-Nomad-Token` / `Authorization: Bearer`.
#[derive(Debug, Clone)]
pub struct Authz {
    management: bool,
}

impl FromRequestParts<State> for Authz {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Authz, Error> {
        if !state.config().acl_enabled {
            return Ok(Authz { management: true });
        }
        let token = parts
            .headers
            .get("x-scheduler-token")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .or_else(|| http_kit::bearer_token(&parts.headers).map(str::to_owned));
        let management = token.is_some() && token == state.config().dev_root_token;
        Ok(Authz { management })
    }
}

impl Authz {
    pub fn is_management(&self) -> bool {
        self.management
    }

    pub fn allows_namespace(&self, _namespace: &str, _capability: Capability) -> bool {
        self.management
    }

    pub fn allow_namespace(&self, namespace: &str, capability: Capability) -> Result<(), Error> {
        if self.allows_namespace(namespace, capability) {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }

    pub fn allow_node_read(&self) -> Result<(), Error> {
        if self.management { Ok(()) } else { Err(Error::PermissionDenied) }
    }

    pub fn allow_node_write(&self) -> Result<(), Error> {
        self.allow_node_read()
    }
}
