//! ACL in Nomad's shape: tokens, policies, namespace capabilities, and the [`Authz`] extractor
//! every handler starts with.
//!
//! Interface the handlers use (stable): `Authz` (extractor over `crate::State`),
//! `Authz::allow_namespace(ns, Capability) -> Result<(), Error>`,
//! `Authz::allows_namespace(ns, Capability) -> bool`, `Authz::is_management()`,
//! `Authz::allow_node_read()/allow_node_write()`. Also: `Authz::allows_any_in_namespace(ns)`
//! (whether a namespace may be seen at all), agent/operator/node-pool checks, and
//! `Authz::accessor_id()`.
//!
//! Where it sits: `policy.rs` parses rules (pure), `eval.rs` compiles a token's policies into an
//! `Acl` and answers questions (pure), `store.rs` keeps policies and tokens in storage,
//! `handlers.rs` serves `/v1/acl/*`, `body.rs` decodes request bodies as Go does (also used by
//! `namespaces.rs`); times and durations are formatted and parsed by `stdx`.
//!
//! Resolution, per request (nothing cached; a change is seen by the next request):
//! - ACLs disabled: everything is allowed.
//! - The token comes from `X-Scheduler-Token` (the alias layer copies `X-Nomad-Token` there),
//!   else `Authorization: Bearer`; an empty value counts as none.
//! - No token: the anonymous token, whose only policy is `anonymous` (if such a policy exists;
//!   otherwise it may do nothing).
//! - The dev root token (`Config::dev_root_token`): a management token, stored or not.
//! - Otherwise the stored token with that secret (two storage reads, plus one per policy); an
//!   unknown secret is a 403 `ACL token not found`, an expired token a 403
//!   `Permission denied` (upstream's RPC answer). A client token's policies that no longer
//!   exist grant nothing.
//!
//! Invariants: with ACLs enabled nothing is allowed that the token's policies do not grant;
//! a management token (or ACLs disabled) is allowed everything; no input makes resolution panic.

mod body;
mod eval;
mod handlers;
mod policy;
mod store;

use std::sync::Arc;

use axum::extract::FromRequestParts;
use http::request::Parts;

pub(crate) use body::{Fields, decode, null_as_default};
pub(crate) use handlers::*;

use self::eval::Acl;
use self::store::StoredToken;
use crate::{Error, State};

/// Namespace capabilities (Nomad's names, see [`Capability::name`]).
///
/// `PolicyOverride` is upstream's `sentinel-override` (the spec calls it
/// `policy-engine-override`; policies may use either name). The fine-grained job capabilities
/// (`RegisterJob` ... `DeleteServiceRegistration`) are also granted by `submit-job`.
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
    CsiRegisterPlugin,
    CsiWriteVolume,
    CsiReadVolume,
    CsiListVolume,
    CsiMountVolume,
    HostVolumeCreate,
    HostVolumeRegister,
    HostVolumeRead,
    HostVolumeWrite,
    HostVolumeDelete,
    ListScalingPolicies,
    ReadScalingPolicy,
    ReadJobScaling,
    ScaleJob,
    SubmitRecommendation,
    RegisterJob,
    RevertJob,
    DeregisterJob,
    PurgeJob,
    EvaluateJob,
    PlanJob,
    TagJobVersion,
    StableJob,
    FailDeployment,
    PauseDeployment,
    PromoteDeployment,
    UnblockDeployment,
    CancelDeployment,
    SetAllocHealthDeployment,
    GcAllocation,
    PauseAllocation,
    ForcePeriodicJob,
    DeleteServiceRegistration,
}

impl Capability {
    /// Every capability.
    pub const ALL: &'static [Capability] = &[
        Capability::ListJobs,
        Capability::ReadJob,
        Capability::SubmitJob,
        Capability::ParseJob,
        Capability::DispatchJob,
        Capability::ReadLogs,
        Capability::ReadFs,
        Capability::AllocLifecycle,
        Capability::AllocExec,
        Capability::AllocNodeExec,
        Capability::PolicyOverride,
        Capability::CsiRegisterPlugin,
        Capability::CsiWriteVolume,
        Capability::CsiReadVolume,
        Capability::CsiListVolume,
        Capability::CsiMountVolume,
        Capability::HostVolumeCreate,
        Capability::HostVolumeRegister,
        Capability::HostVolumeRead,
        Capability::HostVolumeWrite,
        Capability::HostVolumeDelete,
        Capability::ListScalingPolicies,
        Capability::ReadScalingPolicy,
        Capability::ReadJobScaling,
        Capability::ScaleJob,
        Capability::SubmitRecommendation,
        Capability::RegisterJob,
        Capability::RevertJob,
        Capability::DeregisterJob,
        Capability::PurgeJob,
        Capability::EvaluateJob,
        Capability::PlanJob,
        Capability::TagJobVersion,
        Capability::StableJob,
        Capability::FailDeployment,
        Capability::PauseDeployment,
        Capability::PromoteDeployment,
        Capability::UnblockDeployment,
        Capability::CancelDeployment,
        Capability::SetAllocHealthDeployment,
        Capability::GcAllocation,
        Capability::PauseAllocation,
        Capability::ForcePeriodicJob,
        Capability::DeleteServiceRegistration,
    ];

    /// Nomad's name for the capability, as policies write it.
    pub fn name(self) -> &'static str {
        match self {
            Capability::ListJobs => "list-jobs",
            Capability::ReadJob => "read-job",
            Capability::SubmitJob => "submit-job",
            Capability::ParseJob => "parse-job",
            Capability::DispatchJob => "dispatch-job",
            Capability::ReadLogs => "read-logs",
            Capability::ReadFs => "read-fs",
            Capability::AllocLifecycle => "alloc-lifecycle",
            Capability::AllocExec => "alloc-exec",
            Capability::AllocNodeExec => "alloc-node-exec",
            Capability::PolicyOverride => "sentinel-override",
            Capability::CsiRegisterPlugin => "csi-register-plugin",
            Capability::CsiWriteVolume => "csi-write-volume",
            Capability::CsiReadVolume => "csi-read-volume",
            Capability::CsiListVolume => "csi-list-volume",
            Capability::CsiMountVolume => "csi-mount-volume",
            Capability::HostVolumeCreate => "host-volume-create",
            Capability::HostVolumeRegister => "host-volume-register",
            Capability::HostVolumeRead => "host-volume-read",
            Capability::HostVolumeWrite => "host-volume-write",
            Capability::HostVolumeDelete => "host-volume-delete",
            Capability::ListScalingPolicies => "list-scaling-policies",
            Capability::ReadScalingPolicy => "read-scaling-policy",
            Capability::ReadJobScaling => "read-job-scaling",
            Capability::ScaleJob => "scale-job",
            Capability::SubmitRecommendation => "submit-recommendation",
            Capability::RegisterJob => "register-job",
            Capability::RevertJob => "revert-job",
            Capability::DeregisterJob => "deregister-job",
            Capability::PurgeJob => "purge-job",
            Capability::EvaluateJob => "evaluate-job",
            Capability::PlanJob => "plan-job",
            Capability::TagJobVersion => "tag-job-version",
            Capability::StableJob => "stable-job",
            Capability::FailDeployment => "fail-deployment",
            Capability::PauseDeployment => "pause-deployment",
            Capability::PromoteDeployment => "promote-deployment",
            Capability::UnblockDeployment => "unblock-deployment",
            Capability::CancelDeployment => "cancel-deployment",
            Capability::SetAllocHealthDeployment => "set-alloc-health-deployment",
            Capability::GcAllocation => "gc-allocation",
            Capability::PauseAllocation => "pause-allocation",
            Capability::ForcePeriodicJob => "force-periodic-job",
            Capability::DeleteServiceRegistration => "delete-service-registration",
        }
    }

    /// The capability a policy name stands for (upstream names and the spec's
    /// `policy-engine-override`).
    pub fn from_name(name: &str) -> Option<Capability> {
        if name == "policy-engine-override" {
            return Some(Capability::PolicyOverride);
        }
        Capability::ALL
            .iter()
            .copied()
            .find(|capability| capability.name() == name)
    }

    /// The capabilities upstream split out of `submit-job`, which still grants them.
    fn is_fine_grained_job(self) -> bool {
        matches!(
            self,
            Capability::RegisterJob
                | Capability::RevertJob
                | Capability::DeregisterJob
                | Capability::PurgeJob
                | Capability::EvaluateJob
                | Capability::PlanJob
                | Capability::TagJobVersion
                | Capability::StableJob
                | Capability::FailDeployment
                | Capability::PauseDeployment
                | Capability::PromoteDeployment
                | Capability::UnblockDeployment
                | Capability::CancelDeployment
                | Capability::SetAllocHealthDeployment
                | Capability::GcAllocation
                | Capability::PauseAllocation
                | Capability::ForcePeriodicJob
                | Capability::DeleteServiceRegistration
        )
    }
}

/// Who is asking, resolved from `X-Scheduler-Token` / `X-Nomad-Token` / `Authorization: Bearer`.
#[derive(Debug, Clone)]
pub struct Authz {
    acl: Arc<Acl>,
    identity: Identity,
}

/// The token behind a request.
#[derive(Debug, Clone)]
enum Identity {
    /// ACLs are disabled.
    Disabled,
    /// The dev root token (its stored record, if any, is read on demand).
    Root,
    /// No token presented.
    Anonymous,
    /// A stored token.
    Token(Arc<StoredToken>),
}

impl FromRequestParts<State> for Authz {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &State) -> Result<Authz, Error> {
        resolve(state, request_token(parts).as_deref()).await
    }
}

/// The token a request presents: `X-Scheduler-Token` (or `X-Nomad-Token`, copied there by the
/// alias layer), then `Authorization: Bearer`. Empty values count as absent.
fn request_token(parts: &Parts) -> Option<String> {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
            .filter(|value| !value.is_empty())
            .map(str::to_owned)
    };
    header("x-scheduler-token")
        .or_else(|| header("x-nomad-token"))
        .or_else(|| http_kit::bearer_token(&parts.headers).map(str::to_owned))
}

/// Compares secrets in time independent of where they differ.
fn secrets_equal(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// Resolves a presented secret (or none) into the request's authority.
pub(crate) async fn resolve(state: &State, secret: Option<&str>) -> Result<Authz, Error> {
    if !state.config().acl_enabled {
        return Ok(Authz {
            acl: Arc::new(Acl::management()),
            identity: Identity::Disabled,
        });
    }
    let root = state.config().dev_root_token.as_deref();
    let Some(secret) = secret else {
        let acl = match store::policy(state.storage().as_ref(), ANONYMOUS_POLICY).await? {
            Some(policy) => compile(std::slice::from_ref(&policy.record.rules)),
            None => Acl::deny_all(),
        };
        return Ok(Authz {
            acl: Arc::new(acl),
            identity: Identity::Anonymous,
        });
    };
    if root.is_some_and(|root| secrets_equal(root, secret)) {
        return Ok(Authz {
            acl: Arc::new(Acl::management()),
            identity: Identity::Root,
        });
    }
    let token = store::token_by_secret(state.storage().as_ref(), secret)
        .await?
        // A stored root token of an earlier run (another secret) is dead.
        .filter(|token| !token.record.dev_root)
        .ok_or(Error::TokenNotFound)?;
    if token.record.is_expired(crate::now_nanos()) {
        return Err(Error::PermissionDenied);
    }
    let acl = if token.record.is_management() {
        Acl::management()
    } else {
        let mut rules = Vec::with_capacity(token.record.policies.len());
        for name in &token.record.policies {
            if let Some(policy) = store::policy(state.storage().as_ref(), name).await? {
                rules.push(policy.record.rules);
            }
        }
        compile(&rules)
    };
    Ok(Authz {
        acl: Arc::new(acl),
        identity: Identity::Token(Arc::new(token)),
    })
}

/// The policy the anonymous token holds.
const ANONYMOUS_POLICY: &str = "anonymous";

/// Compiles stored rules; a policy that no longer parses (validated when written, so only
/// after a parser change) grants nothing rather than failing every request.
fn compile(rules: &[String]) -> Acl {
    let parsed: Vec<policy::PolicyRules> = rules
        .iter()
        .filter_map(|rules| match policy::parse(rules) {
            Ok(parsed) => Some(parsed),
            Err(err) => {
                tracing::warn!(error = %err, "ignoring a stored ACL policy that no longer parses");
                None
            }
        })
        .collect();
    Acl::compile(&parsed)
}

impl Authz {
    /// Full authority (ACLs disabled); for internal callers and tests.
    pub fn unrestricted() -> Authz {
        Authz {
            acl: Arc::new(Acl::management()),
            identity: Identity::Disabled,
        }
    }

    /// Whether this is a management token (or ACLs are disabled).
    pub fn is_management(&self) -> bool {
        self.acl.is_management()
    }

    /// Whether `capability` is allowed in `namespace`; `*` asks whether some namespace allows
    /// it (list endpoints then filter each item by its own namespace).
    pub fn allows_namespace(&self, namespace: &str, capability: Capability) -> bool {
        self.acl.allows_namespace_op(namespace, capability)
    }

    /// Like [`Authz::allows_namespace`], as a 403 `Permission denied`.
    pub fn allow_namespace(&self, namespace: &str, capability: Capability) -> Result<(), Error> {
        if self.allows_namespace(namespace, capability) {
            Ok(())
        } else {
            Err(Error::PermissionDenied)
        }
    }

    /// Whether anything at all is allowed in `namespace` (upstream's `AllowNamespace`): what
    /// decides whether a namespace is listed or may be read.
    pub fn allows_any_in_namespace(&self, namespace: &str) -> bool {
        self.acl.allows_namespace(namespace)
    }

    pub fn allow_node_read(&self) -> Result<(), Error> {
        check(self.acl.allows_node_read())
    }

    pub fn allow_node_write(&self) -> Result<(), Error> {
        check(self.acl.allows_node_write())
    }

    pub fn allow_agent_read(&self) -> Result<(), Error> {
        check(self.acl.allows_agent_read())
    }

    pub fn allow_agent_write(&self) -> Result<(), Error> {
        check(self.acl.allows_agent_write())
    }

    pub fn allow_operator_read(&self) -> Result<(), Error> {
        check(self.acl.allows_operator_read())
    }

    pub fn allow_operator_write(&self) -> Result<(), Error> {
        check(self.acl.allows_operator_write())
    }

    pub fn allows_quota_read(&self) -> bool {
        self.acl.allows_quota_read()
    }

    pub fn allows_plugin_list(&self) -> bool {
        self.acl.allows_plugin_list()
    }

    /// Whether node pool `pool` may be read (`node_pool` rules: `read`).
    pub fn allows_node_pool_read(&self, pool: &str) -> bool {
        self.acl.allows_node_pool_op(pool, "read")
    }

    /// Whether node pool `pool` may be written (`node_pool` rules: `write`).
    pub fn allows_node_pool_write(&self, pool: &str) -> bool {
        self.acl.allows_node_pool_op(pool, "write")
    }

    /// Whether host volume `volume` may be mounted (`read_write` for a writable mount).
    pub fn allows_host_volume_mount(&self, volume: &str, read_write: bool) -> bool {
        let capability = if read_write {
            "mount-readwrite"
        } else {
            "mount-readonly"
        };
        self.acl.allows_host_volume_op(volume, capability)
    }

    /// The AccessorID of the stored token behind the request (`None` for the anonymous and
    /// dev root tokens and with ACLs disabled).
    pub fn accessor_id(&self) -> Option<&str> {
        match &self.identity {
            Identity::Token(token) => Some(&token.record.accessor_id),
            Identity::Disabled | Identity::Root | Identity::Anonymous => None,
        }
    }

    /// A 403 unless this is a management token.
    pub(crate) fn require_management(&self) -> Result<(), Error> {
        check(self.is_management())
    }
}

fn check(allowed: bool) -> Result<(), Error> {
    if allowed {
        Ok(())
    } else {
        Err(Error::PermissionDenied)
    }
}
