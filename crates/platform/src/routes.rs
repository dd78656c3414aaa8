//! Every route of the platform, in one table: grep a URL here to find its handler. Handlers
//! live in the file named after their URL family; each starts with the `auth::Caller`
//! extractor, except those under an `// Unauthenticated:` comment (ping, and the signed
//! upload and download URLs) and the invitation acceptance, where the invitation token may
//! stand in for a bearer token (`auth::MaybeCaller`).
//!
//! Two groups:
//! - JSON:API routes: a POST, PATCH or DELETE without `Content-Type: application/vnd.api+json`
//!   is answered 415 before its handler runs (TFE's rule; GETs are never checked), and bodies
//!   are limited to [`JSONAPI_BODY_LIMIT`] (413 beyond).
//! - Upload and download routes: signed URLs used without a bearer token and without the
//!   JSON:API content type; an upload streams under the configured archive limit (`objects.rs`
//!   answers 422 beyond it), with no other body limit.
//!
//! Unknown paths answer a JSON:API 404 (a browser asking for HTML outside `/api/` gets the
//! customizable error page of `error_page.rs`) and wrong methods a JSON:API 405; every response gets
//! `TFP-API-Version`. Every request except ping and the signed URLs passes the per-caller rate
//! limiter first (`rate_limit.rs`).

use axum::Router;
use axum::routing::{delete, get, patch, post, put};

use crate::{
    Error, State, admin, configuration_versions, error_page, invitations, memberships, metrics,
    oauth_clients, objects, organizations, ping, policy_versions, public_registry, rate_limit,
    registry_modules, registry_protocol, runs, teams, tokens, users, workspaces,
};

/// The largest JSON:API request body (1 MiB); uploads have their own limits.
pub(crate) const JSONAPI_BODY_LIMIT: usize = 1024 * 1024;

/// The platform's router, with its state applied and its hooks (the rate limit and the
/// content-type rule before each handler, `TFP-API-Version` and `X-RateLimit-Limit` after),
/// without the shared request layer: what the platform's own tests call.
pub fn router(state: State) -> Router {
    let hooks = hooks(&state);
    http_kit::hooks(routes(state), hooks)
}

/// The platform's router inside the shared request layer (`http_kit::layers_with_hooks`), its
/// hooks in the same layer: what a server serves.
pub fn router_with(state: State, options: &http_kit::HttpOptions) -> Router {
    let hooks = hooks(&state);
    http_kit::layers_with_hooks(routes(state), options, hooks)
}

/// Per-caller rate limiting and the content-type rule (`rate_limit.rs`; ping and the signed
/// blob URLs are exempt from the limit), and the headers every answer carries.
fn hooks(state: &State) -> http_kit::Hooks {
    http_kit::Hooks {
        aliases: &[],
        admit: Some(rate_limit::admit(state.clone())),
        finish: Some(rate_limit::finish(state.clone())),
        fallback_route: None,
    }
}

fn routes(state: State) -> Router {
    let jsonapi = Router::new()
        // Unauthenticated:
        .route("/api/v2/ping", get(ping::ping))
        // invitations.rs: the invitation token authenticates (or the invited user's bearer).
        .route(
            "/api/v2/organization-memberships/{id}/actions/accept",
            post(invitations::accept_membership),
        )
        // metrics.rs (site administrators)
        .route("/api/v2/metrics", get(metrics::read_metrics))
        // users.rs
        .route("/api/v2/account/details", get(users::read_account))
        .route("/api/v2/account/update", patch(users::update_account))
        .route("/api/v2/users/{id}", get(users::read_user))
        // organizations.rs
        .route(
            "/api/v2/organizations",
            get(organizations::list_organizations).post(organizations::create_organization),
        )
        .route(
            "/api/v2/organizations/{name}",
            get(organizations::read_organization)
                .patch(organizations::update_organization)
                .delete(organizations::delete_organization),
        )
        .route(
            "/api/v2/organizations/{name}/entitlement-set",
            get(organizations::read_entitlements),
        )
        // teams.rs
        .route(
            "/api/v2/organizations/{name}/teams",
            get(teams::list_teams).post(teams::create_team),
        )
        .route(
            "/api/v2/teams/{id}",
            get(teams::read_team)
                .patch(teams::update_team)
                .delete(teams::delete_team),
        )
        .route(
            "/api/v2/teams/{id}/relationships/users",
            post(teams::add_team_users).delete(teams::remove_team_users),
        )
        .route(
            "/api/v2/teams/{id}/relationships/organization-memberships",
            post(teams::add_team_memberships).delete(teams::remove_team_memberships),
        )
        // tokens.rs
        .route(
            "/api/v2/users/{id}/authentication-tokens",
            get(tokens::list_user_tokens).post(tokens::create_user_token),
        )
        .route(
            "/api/v2/authentication-tokens/{id}",
            get(tokens::read_user_token).delete(tokens::delete_user_token),
        )
        .route(
            "/api/v2/teams/{id}/authentication-token",
            get(tokens::read_team_token)
                .post(tokens::create_team_token)
                .delete(tokens::delete_team_token),
        )
        .route(
            "/api/v2/organizations/{name}/authentication-token",
            get(tokens::read_organization_token)
                .post(tokens::create_organization_token)
                .delete(tokens::delete_organization_token),
        )
        // memberships.rs
        .route(
            "/api/v2/organizations/{name}/organization-memberships",
            get(memberships::list_memberships).post(memberships::create_membership),
        )
        .route(
            "/api/v2/organization-memberships",
            get(memberships::list_own_memberships),
        )
        .route(
            "/api/v2/organization-memberships/{id}",
            get(memberships::read_membership).delete(memberships::delete_membership),
        )
        // workspaces/
        .route(
            "/api/v2/organizations/{name}/workspaces",
            get(workspaces::list_workspaces).post(workspaces::create_workspace),
        )
        .route(
            "/api/v2/organizations/{name}/workspaces/{workspace}",
            get(workspaces::read_workspace)
                .patch(workspaces::update_workspace)
                .delete(workspaces::delete_workspace),
        )
        .route(
            "/api/v2/organizations/{name}/workspaces/{workspace}/actions/safe-delete",
            post(workspaces::safe_delete_workspace),
        )
        .route(
            "/api/v2/workspaces/{id}",
            get(workspaces::read_workspace_by_id)
                .patch(workspaces::update_workspace_by_id)
                .delete(workspaces::delete_workspace_by_id),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/safe-delete",
            post(workspaces::safe_delete_workspace_by_id),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/lock",
            post(workspaces::lock_workspace),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/unlock",
            post(workspaces::unlock_workspace),
        )
        .route(
            "/api/v2/workspaces/{id}/actions/force-unlock",
            post(workspaces::force_unlock_workspace),
        )
        // configuration_versions.rs
        .route(
            "/api/v2/workspaces/{id}/configuration-versions",
            get(configuration_versions::list_configuration_versions)
                .post(configuration_versions::create_configuration_version),
        )
        .route(
            "/api/v2/workspaces/{id}/current-configuration-version",
            get(configuration_versions::read_current_configuration_version),
        )
        .route(
            "/api/v2/configuration-versions/{id}",
            get(configuration_versions::read_configuration_version),
        )
        .route(
            "/api/v2/configuration-versions/{id}/ingress-attributes",
            get(configuration_versions::read_ingress_attributes),
        )
        .route(
            "/api/v2/configuration-versions/{id}/actions/archive",
            post(configuration_versions::archive_configuration_version),
        )
        .route(
            "/api/v2/configuration-versions/{id}/download",
            get(configuration_versions::download_configuration_version),
        )
        .route(
            "/api/v2/runs/{id}/configuration-version/download",
            get(configuration_versions::download_run_configuration_version),
        )
        // runs.rs
        .route("/api/v2/runs", post(runs::create_run))
        .route("/api/v2/runs/{id}", get(runs::read_run))
        .route("/api/v2/workspaces/{id}/runs", get(runs::list_runs))
        .route("/api/v2/runs/{id}/actions/apply", post(runs::apply_run))
        .route("/api/v2/runs/{id}/actions/discard", post(runs::discard_run))
        .route("/api/v2/runs/{id}/actions/cancel", post(runs::cancel_run))
        .route(
            "/api/v2/runs/{id}/actions/force-cancel",
            post(runs::force_cancel_run),
        )
        // oauth_clients.rs
        .route(
            "/api/v2/organizations/{name}/oauth-clients",
            get(oauth_clients::list_clients).post(oauth_clients::create),
        )
        .route(
            "/api/v2/oauth-clients/{id}",
            get(oauth_clients::read)
                .patch(oauth_clients::update)
                .delete(oauth_clients::delete),
        )
        .route(
            "/api/v2/oauth-clients/{id}/oauth-tokens",
            get(oauth_clients::list_client_tokens),
        )
        .route(
            "/api/v2/organizations/{name}/oauth-tokens",
            get(oauth_clients::list_org_tokens),
        )
        .route(
            "/api/v2/oauth-tokens/{id}",
            get(oauth_clients::read_token)
                .patch(oauth_clients::update_oauth_token)
                .delete(oauth_clients::delete_oauth_token),
        )
        // registry_modules/
        .route(
            "/api/v2/organizations/{name}/registry-modules",
            get(registry_modules::list_modules).post(registry_modules::create_module),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/vcs",
            post(registry_modules::create_vcs_module),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}",
            delete(registry_modules::delete_by_path),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}/{provider}",
            get(registry_modules::read_module)
                .patch(registry_modules::update_module)
                .delete(registry_modules::delete_provider_by_path),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}/{provider}/",
            patch(registry_modules::update_module),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}/{provider}/versions",
            get(registry_modules::list_versions).post(registry_modules::create_version),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}/{provider}/version",
            get(registry_modules::read_version),
        )
        .route(
            "/api/v2/organizations/{name}/registry-modules/{registry}/{namespace}/{module}/{provider}/{version}",
            delete(registry_modules::delete_version_by_path),
        )
        .route(
            "/api/v2/registry-modules",
            post(registry_modules::create_vcs_module_deprecated),
        )
        .route(
            "/api/v2/registry-modules/{id}",
            get(registry_modules::read_module_by_id),
        )
        .route(
            "/api/v2/registry-modules/{id}/versions",
            get(registry_modules::list_versions_by_id),
        )
        .route(
            "/api/v2/registry-modules/show/{organization}/{module}/{provider}",
            get(registry_modules::read_module_deprecated),
        )
        .route(
            "/api/v2/registry-modules/{id}/{module}/{provider}/versions",
            post(registry_modules::create_version_deprecated),
        )
        .route(
            "/api/v2/registry-modules/actions/delete/{organization}/{module}",
            post(registry_modules::delete_deprecated),
        )
        .route(
            "/api/v2/registry-modules/actions/delete/{organization}/{module}/{provider}",
            post(registry_modules::delete_deprecated),
        )
        .route(
            "/api/v2/registry-modules/actions/delete/{organization}/{module}/{provider}/{version}",
            post(registry_modules::delete_deprecated),
        )
        // admin/ (site administrators only; 404 for anyone else)
        .route(
            "/api/v2/admin/general-settings",
            get(admin::general::read_general).patch(admin::general::update_general),
        )
        .route(
            "/api/v2/admin/cost-estimation-settings",
            get(admin::cost_estimation::read_cost_estimation)
                .patch(admin::cost_estimation::update_cost_estimation),
        )
        .route(
            "/api/v2/admin/saml-settings",
            get(admin::saml::read_saml).patch(admin::saml::update_saml),
        )
        .route(
            "/api/v2/admin/saml-settings/actions/revoke-old-certificate",
            post(admin::saml::revoke_old_certificate).put(admin::saml::revoke_old_certificate),
        )
        .route(
            "/api/v2/admin/smtp-settings",
            get(admin::smtp::read_smtp).patch(admin::smtp::update_smtp),
        )
        .route(
            "/api/v2/admin/sms-settings",
            get(admin::sms::read_sms).patch(admin::sms::update_sms),
        )
        .route(
            "/api/v2/admin/sms-settings/verify",
            post(admin::sms::verify_sms).patch(admin::sms::verify_sms),
        )
        .route(
            "/api/v2/admin/twilio-settings",
            get(admin::sms::read_sms).patch(admin::sms::update_sms),
        )
        .route(
            "/api/v2/admin/twilio-settings/verify",
            post(admin::sms::verify_sms).patch(admin::sms::verify_sms),
        )
        .route(
            "/api/v2/admin/customization-settings",
            get(admin::customization::read_customization)
                .patch(admin::customization::update_customization),
        )
        .route(
            "/api/v2/admin/data-retention-policy-settings",
            get(admin::data_retention::read_data_retention)
                .post(admin::data_retention::set_data_retention)
                .delete(admin::data_retention::delete_data_retention),
        )
        // policy_versions.rs (site administrators only), at the spec's path and upstream's
        .route(
            "/api/v2/admin/policy-engine-versions",
            get(policy_versions::list_versions).post(policy_versions::create_policy_version),
        )
        .route(
            "/api/v2/admin/policy-engine-versions/{id}",
            get(policy_versions::read_policy_version)
                .patch(policy_versions::update_policy_version)
                .delete(policy_versions::delete_policy_version),
        )
        .route(
            "/api/v2/admin/sentinel-versions",
            get(policy_versions::list_versions).post(policy_versions::create_policy_version),
        )
        .route(
            "/api/v2/admin/sentinel-versions/{id}",
            get(policy_versions::read_policy_version)
                .patch(policy_versions::update_policy_version)
                .delete(policy_versions::delete_policy_version),
        );
    let jsonapi = http_kit::with_body_limit(jsonapi, JSONAPI_BODY_LIMIT);

    // Upload and download routes (no bearer, no JSON:API content type).
    // Unauthenticated: the signature in the path is the credential (objects.rs).
    let blobs: Router<State> = Router::new()
        .route(
            "/_archivist/v1/object/{signature}/configuration-versions/{object}",
            put(objects::upload_configuration_archive).get(objects::download_configuration_archive),
        )
        // registry_modules/ (the version upload) and registry_protocol.rs (the download).
        .route(
            "/_archivist/v1/object/{signature}/registry-module-versions/{object}",
            put(registry_modules::upload_version_archive).get(registry_protocol::download_archive),
        );

    // The module registry protocol and discovery: plain JSON, GETs only (registry_protocol.rs),
    // and the VCS webhooks (registry_modules/: the unguessable id is the credential; hosts post
    // their own JSON, not JSON:API).
    let registry: Router<State> = http_kit::with_body_limit(
        Router::new()
            .route(
                "/.well-known/terraform.json",
                get(registry_protocol::discovery),
            )
            .route("/api/registry/v1/modules", get(registry_protocol::list_all))
            .route(
                "/api/registry/v1/modules/",
                get(registry_protocol::list_all),
            )
            .route(
                "/api/registry/v1/modules/search",
                get(registry_protocol::search),
            )
            .route(
                "/api/registry/v1/modules/{namespace}",
                get(registry_protocol::list_namespace),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}",
                get(registry_protocol::latest_per_provider),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}/{provider}",
                get(registry_protocol::latest),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}/{provider}/versions",
                get(registry_protocol::list_versions),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}/{provider}/download",
                get(registry_protocol::download_latest),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}/{provider}/{version}",
                get(registry_protocol::read_version),
            )
            .route(
                "/api/registry/v1/modules/{namespace}/{module}/{provider}/{version}/download",
                get(registry_protocol::download),
            )
            // public_registry.rs: the public registry proxy.
            .route(
                "/api/registry/public/v1/modules/{namespace}/{module}",
                get(public_registry::latest_per_provider),
            )
            .route(
                "/api/registry/public/v1/modules/{namespace}/{module}/{provider}",
                get(public_registry::latest),
            )
            .route(
                "/api/registry/public/v1/modules/{namespace}/{module}/{provider}/versions",
                get(public_registry::list_versions),
            )
            .route(
                "/api/registry/public/v1/modules/{namespace}/{module}/{provider}/{version}",
                get(public_registry::read_version),
            )
            .route(
                "/webhooks/vcs/{id}",
                post(registry_modules::receive_webhook),
            ),
        JSONAPI_BODY_LIMIT,
    );

    jsonapi
        .merge(blobs)
        .merge(registry)
        .fallback(error_page::not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn method_not_allowed() -> Error {
    Error::MethodNotAllowed
}
