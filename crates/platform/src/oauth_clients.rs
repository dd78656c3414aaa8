//! VCS connections through TFE's OAuth clients API (`/api/v2/organizations/:org/oauth-clients`,
//! `/api/v2/oauth-clients/:id`, `/api/v2/oauth-clients/:id/oauth-tokens`,
//! `/api/v2/organizations/:org/oauth-tokens`, `/api/v2/oauth-tokens/:id`): a client names a
//! git host (`http-url`, `api-url`, `service-provider`) and, created with
//! `oauth-token-string`, owns one OAuth token whose id a module's `vcs-repo.oauth-token-id`
//! names.
//!
//! Where it sits: handlers called from `routes.rs`; records in `store/oauth_clients.rs`,
//! rendered by `views/oauth_clients.rs`; `registry_modules/vcs.rs` reads the token to clone.
//!
//! Invariants:
//! - Every operation needs `manage-vcs-settings` (owners, the organization token, or a team
//!   with it); anyone else gets 404, as for a missing client.
//! - `http-url` and `api-url` must be absolute `http` or `https` URLs (plain HTTP is accepted
//!   for hosts on a private network or loopback, as self-hosted git servers often are).
//! - The VCS token is write-only: stored, used as the HTTPS password when cloning, never
//!   rendered.

use axum::extract::{Path, State as AxumState};
use axum::response::Response;
use jsonapi::Document;

use crate::auth::{Caller, OrgAccess};
use crate::render::{JsonApi, no_content, paged};
use crate::request::{Body, Query};
use crate::store::oauth_clients::{
    OAuthClientRecord, OAuthTokenRecord, create_client, delete_client, delete_token, load_client,
    load_org_clients, load_org_tokens, load_token, update_client, update_token,
};
use crate::store::organizations::organization_key;
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION};
use crate::views::oauth_clients::{client_resource, token_resource};
use crate::{Error, State, ids};

/// The service providers TFE (and pytfe's enum) know.
const SERVICE_PROVIDERS: &[&str] = &[
    "ado_server",
    "ado_services",
    "bitbucket_data_center",
    "bitbucket_hosted",
    "bitbucket_server",
    "bitbucket_server_legacy",
    "github",
    "github_enterprise",
    "gitlab_hosted",
    "gitlab_community_edition",
    "gitlab_enterprise_edition",
];

/// The caller's access to `organization` when it may manage VCS settings; 404 otherwise.
async fn vcs_access(
    state: &State,
    caller: &Caller,
    organization: &str,
) -> Result<OrgAccess, Error> {
    let access = caller.organization(state, organization).await?;
    OrgAccess::check(
        access.is_owner()
            || access.is_organization_token()
            || access.permissions.manage_vcs_settings,
    )?;
    Ok(access)
}

/// The client `id` when the caller may manage its organization's VCS settings.
async fn visible_client(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<crate::store::Stored<OAuthClientRecord>, Error> {
    let client = load_client(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    vcs_access(state, caller, &client.record.organization).await?;
    Ok(client)
}

/// Checks an `http-url`/`api-url` attribute: an absolute http(s) URL with a host.
fn url_attribute(body: &Body, name: &str) -> Result<String, Error> {
    let value = body.required_string(name)?;
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    match rest {
        Some(rest)
            if !rest.is_empty()
                && !rest.starts_with('/')
                && !value.contains(char::is_whitespace) =>
        {
            Ok(value.trim_end_matches('/').to_owned())
        }
        _ => Err(Error::invalid_attribute(
            name,
            format!("{name} must be an absolute http or https URL"),
        )),
    }
}

/// `GET /api/v2/organizations/:org/oauth-clients` (paged).
pub(crate) async fn list_clients(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    vcs_access(&state, &caller, &organization).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let clients = load_org_clients(state.storage(), &organization).await?;
    let path = format!("/api/v2/organizations/{organization}/oauth-clients");
    Ok(JsonApi::ok(paged(
        &clients,
        page,
        &path,
        &query,
        client_resource,
    )))
}

/// `POST /api/v2/organizations/:org/oauth-clients`: 201; 422 for a missing or unknown
/// `service-provider`, or a bad URL.
pub(crate) async fn create(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    let access = vcs_access(&state, &caller, &organization).await?;
    body.expect_type(&["oauth-clients"])?;
    let service_provider = body.required_string("service-provider")?;
    if !SERVICE_PROVIDERS.contains(&service_provider.as_str()) {
        return Err(Error::invalid_attribute(
            "service-provider",
            format!(
                "service-provider must be one of {}",
                SERVICE_PROVIDERS.join(", ")
            ),
        ));
    }
    let http_url = url_attribute(&body, "http-url")?;
    let api_url = url_attribute(&body, "api-url")?;
    let now = state.now_ms();
    let client_id = ids::new_id("oc");
    let token = body
        .string("oauth-token-string")?
        .filter(|token| !token.is_empty())
        .map(|token| OAuthTokenRecord {
            version: RECORD_VERSION,
            id: ids::new_id("ot"),
            client_id: client_id.clone(),
            organization: organization.clone(),
            token,
            ssh_key: None,
            service_provider_user: String::new(),
            created_at_ms: now,
        });
    let client = OAuthClientRecord {
        version: RECORD_VERSION,
        id: client_id,
        organization: organization.clone(),
        name: body.string("name")?,
        service_provider,
        http_url,
        api_url,
        key: body.string("key")?,
        rsa_public_key: body.string("rsa-public-key")?,
        organization_scoped: body.bool("organization-scoped")?.unwrap_or(true),
        token_id: token.as_ref().map(|token| token.id.clone()),
        created_at_ms: now,
    };
    let created = create_client(
        state.storage(),
        organization_key(&organization),
        access.revision,
        &client,
        token.as_ref(),
    )
    .await?;
    if !created {
        return Err(Error::NotFound);
    }
    Ok(JsonApi::created(Document::one(client_resource(&client))))
}

/// `GET /api/v2/oauth-clients/:id`.
pub(crate) async fn read(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    let client = visible_client(&state, &caller, &id).await?;
    Ok(JsonApi::ok(Document::one(client_resource(&client.record))))
}

/// `PATCH /api/v2/oauth-clients/:id`: `name`, `key`, `rsa-public-key`, `organization-scoped`,
/// and `oauth-token-string` (replaces the client's token).
pub(crate) async fn update(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["oauth-clients"])?;
    for _ in 0..MAX_ATTEMPTS {
        let client = visible_client(&state, &caller, &id).await?;
        let mut next = client.record.clone();
        if body.has_attribute("name")? {
            next.name = body.string("name")?;
        }
        if let Some(key) = body.string("key")? {
            next.key = Some(key);
        }
        if let Some(rsa) = body.string("rsa-public-key")? {
            next.rsa_public_key = Some(rsa);
        }
        if let Some(scoped) = body.bool("organization-scoped")? {
            next.organization_scoped = scoped;
        }
        let token = body
            .string("oauth-token-string")?
            .filter(|token| !token.is_empty())
            .map(|token| OAuthTokenRecord {
                version: RECORD_VERSION,
                id: ids::new_id("ot"),
                client_id: id.clone(),
                organization: next.organization.clone(),
                token,
                ssh_key: None,
                service_provider_user: String::new(),
                created_at_ms: state.now_ms(),
            });
        let replaced = token.as_ref().and(client.record.token_id.clone());
        if let Some(token) = &token {
            next.token_id = Some(token.id.clone());
        }
        if update_client(
            state.storage(),
            &client,
            &next,
            token.as_ref(),
            replaced.as_deref(),
        )
        .await?
        {
            return Ok(JsonApi::ok(Document::one(client_resource(&next))));
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/oauth-clients/:id`: 204; its token goes with it.
pub(crate) async fn delete(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let client = visible_client(&state, &caller, &id).await?;
        if delete_client(state.storage(), &client).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}

/// `GET /api/v2/oauth-clients/:id/oauth-tokens`.
pub(crate) async fn list_client_tokens(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    let client = visible_client(&state, &caller, &id).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let mut tokens = Vec::new();
    if let Some(token_id) = &client.record.token_id
        && let Some(token) = load_token(state.storage(), token_id).await?
    {
        tokens.push(token.record);
    }
    let path = format!("/api/v2/oauth-clients/{id}/oauth-tokens");
    Ok(JsonApi::ok(paged(
        &tokens,
        page,
        &path,
        &query,
        token_resource,
    )))
}

/// `GET /api/v2/organizations/:org/oauth-tokens`.
pub(crate) async fn list_org_tokens(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    query: Query,
) -> Result<JsonApi, Error> {
    vcs_access(&state, &caller, &organization).await?;
    let page = query.page(jsonapi::DEFAULT_PAGE_SIZE)?;
    let tokens = load_org_tokens(state.storage(), &organization).await?;
    let path = format!("/api/v2/organizations/{organization}/oauth-tokens");
    Ok(JsonApi::ok(paged(
        &tokens,
        page,
        &path,
        &query,
        token_resource,
    )))
}

/// The token `id` when the caller may manage its organization's VCS settings.
async fn visible_token(
    state: &State,
    caller: &Caller,
    id: &str,
) -> Result<crate::store::Stored<OAuthTokenRecord>, Error> {
    let token = load_token(state.storage(), id)
        .await?
        .ok_or(Error::NotFound)?;
    vcs_access(state, caller, &token.record.organization).await?;
    Ok(token)
}

/// `GET /api/v2/oauth-tokens/:id`.
pub(crate) async fn read_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<JsonApi, Error> {
    let token = visible_token(&state, &caller, &id).await?;
    Ok(JsonApi::ok(Document::one(token_resource(&token.record))))
}

/// `PATCH /api/v2/oauth-tokens/:id`: `ssh-key` (write-only).
pub(crate) async fn update_oauth_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["oauth-tokens"])?;
    for _ in 0..MAX_ATTEMPTS {
        let token = visible_token(&state, &caller, &id).await?;
        let mut next = token.record.clone();
        if body.has_attribute("ssh-key")? {
            next.ssh_key = body.string("ssh-key")?.filter(|key| !key.is_empty());
        }
        if update_token(state.storage(), &token, &next).await? {
            return Ok(JsonApi::ok(Document::one(token_resource(&next))));
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/oauth-tokens/:id`: 204; the client keeps no token.
pub(crate) async fn delete_oauth_token(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let token = visible_token(&state, &caller, &id).await?;
        let client = load_client(state.storage(), &token.record.client_id).await?;
        let next = client.as_ref().map(|client| {
            let mut next = client.record.clone();
            next.token_id = None;
            next
        });
        let pair = client.as_ref().zip(next.as_ref());
        if delete_token(state.storage(), &token, pair).await? {
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}
