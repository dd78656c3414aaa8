//! The `registry-modules` and `registry-module-versions` resources.
//!
//! Where it sits: rendered by `registry_modules/` (create, read, list, update, versions).
//!
//! Invariants: a module renders the same in create, read, update and list (go-tfe compares
//! them); `version-statuses` lists every version, highest precedence first, with `error` for a
//! failed one; `permissions` are what the caller's [`OrgAccess`] allows; `vcs-repo` appears
//! only for modules published from a repository, and its `webhook-url` is absolute (built from
//! `origin`, the request's scheme and host). A version's `links.upload` is added by the create
//! response alone.

use jsonapi::{Relationship, Resource};
use serde_json::{Map, Value, json};

use crate::auth::OrgAccess;
use crate::ids;
use crate::store::registry_modules::{ModuleRecord, ModuleVersionRecord};

/// The module's path under `/api/v2/organizations/:org/registry-modules/`.
pub(crate) fn module_path(module: &ModuleRecord) -> String {
    format!(
        "/api/v2/organizations/{}/registry-modules/{}/{}/{}/{}",
        module.organization, module.registry_name, module.namespace, module.name, module.provider
    )
}

/// The path of the webhook a VCS module's repository host calls on pushes.
pub(crate) fn webhook_path(webhook_id: &str) -> String {
    format!("/webhooks/vcs/{webhook_id}")
}

/// The `registry-modules` resource.
pub(crate) fn module_resource(module: &ModuleRecord, access: &OrgAccess, origin: &str) -> Resource {
    let statuses: Vec<Value> = module
        .versions_descending()
        .into_iter()
        .map(|version| {
            let mut status = Map::new();
            status.insert("version".to_owned(), json!(version.version));
            status.insert("status".to_owned(), json!(version.status.as_str()));
            if let Some(error) = &version.error {
                status.insert("error".to_owned(), json!(error));
            }
            Value::Object(status)
        })
        .collect();
    let mechanism = match &module.vcs {
        None => "non_vcs",
        Some(vcs) if vcs.branch.is_empty() => "git_tag",
        Some(_) => "branch",
    };
    let owner = access.is_owner();
    let mut resource = Resource::new("registry-modules", &module.id)
        .attribute("name", &module.name)
        .attribute("namespace", &module.namespace)
        .attribute("provider", &module.provider)
        .attribute("registry-name", &module.registry_name)
        .attribute("status", module.status.as_str())
        .attribute("version-statuses", statuses)
        .attribute("no-code", module.no_code)
        .attribute("publishing-mechanism", mechanism)
        .attribute(
            "test-config",
            json!({"tests-enabled": module.tests_enabled, "agent-execution-mode": "remote"}),
        )
        .attribute("created-at", ids::format_time(module.created_at_ms))
        .attribute("updated-at", ids::format_time(module.updated_at_ms))
        .attribute(
            "permissions",
            json!({
                "can-delete": owner,
                "can-resync": owner && module.vcs.is_some(),
                "can-retry": owner,
            }),
        )
        .relationship(
            "organization",
            Relationship::one("organizations", &module.organization),
        )
        .self_link(module_path(module));
    if let Some(vcs) = &module.vcs {
        resource = resource.attribute(
            "vcs-repo",
            json!({
                "branch": vcs.branch,
                "tags": vcs.tags,
                "ingress-submodules": vcs.ingress_submodules,
                "identifier": vcs.identifier,
                "display-identifier": vcs.display_identifier,
                "oauth-token-id": vcs.oauth_token_id,
                "webhook-url": format!("{origin}{}", webhook_path(&vcs.webhook_id)),
                "repository-http-url": vcs.repository_http_url,
                "service-provider": vcs.service_provider,
            }),
        );
    }
    resource
}

/// The `registry-module-versions` resource (without `links.upload`).
pub(crate) fn version_resource(module: &ModuleRecord, version: &ModuleVersionRecord) -> Resource {
    let mut resource = Resource::new("registry-module-versions", &version.id)
        .attribute("source", &version.source)
        .attribute("status", version.status.as_str())
        .attribute("version", &version.version)
        .attribute("commit-sha", &version.commit_sha)
        .attribute("created-at", ids::format_time(version.created_at_ms))
        .attribute("updated-at", ids::format_time(version.updated_at_ms))
        .relationship(
            "registry-module",
            Relationship::one("registry-modules", &module.id),
        );
    if let Some(error) = &version.error {
        resource = resource.attribute("error", error);
    }
    resource
}
