//! Publishing modules from a git repository: `POST /api/v2/organizations/:org/registry-modules/vcs`
//! (and the deprecated `POST /api/v2/registry-modules` pytfe uses when it has an
//! `oauth-token-id` and no branch) and the module's webhook (`POST /webhooks/vcs/:id`), which
//! a push calls to publish new tags.
//!
//! How: the repository is `<oauth client's http-url>/<vcs-repo.identifier>.git`, fetched over
//! HTTP(S) by the system `git` with the OAuth token as the HTTPS password (`Authorization:
//! Basic`, passed through git's environment configuration so it is never on a command line).
//! Its tags are fetched into a fresh bare repository; every tag that is a semantic version
//! (optional `v` prefix) and not yet a version becomes one: `git archive --format=tar.gz <tag>`
//! is streamed into the blob store and published like an upload (`publish.rs`). The module's
//! name and provider come from the repository name `terraform-<provider>-<name>` unless the
//! request gives them.
//!
//! Where it sits: see `registry_modules/mod.rs`; reads OAuth tokens from
//! `store/oauth_clients.rs`.
//!
//! Invariants:
//! - git runs with only the `http` and `https` transports allowed, no prompts, no system or
//!   global configuration, a timeout ([`GIT_TIMEOUT`]) and `kill_on_drop`; its work directory
//!   is removed when the sync ends.
//! - Publishing is synchronous: the create and webhook answers come after every new tag was
//!   published (or failed: `clone_failed` when its archive could not be made,
//!   `reg_ingress_failed` when it is not a valid module). A repository that cannot be fetched
//!   leaves the module `setup_failed`; a module without semver tags is `no_version_tags`.
//! - A version is added to the module (compare-and-swap) before its archive is made, so two
//!   concurrent syncs never publish one tag twice.

use std::path::Path as FsPath;
use std::process::Stdio;
use std::time::Duration;

use axum::extract::{Path, State as AxumState};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, StatusCode, header};
use jsonapi::Document;
use tokio::process::Command;

use super::modules::insert;
use super::publish::{Outcome, discard, publish};
use super::{
    can_manage_modules, check_registry, nested_bool, nested_string, origin, valid_name,
    valid_provider,
};
use crate::auth::{Caller, OrgAccess};
use crate::render::JsonApi;
use crate::request::Body;
use crate::semver::Version;
use crate::store::oauth_clients::{load_client, load_token};
use crate::store::registry_modules::{
    ModuleRecord, ModuleStatus, ModuleVersionRecord, VcsRepoRecord, VersionStatus, blob_prefix,
    load_module, load_module_by_webhook, update_module,
};
use crate::store::{MAX_ATTEMPTS, RECORD_VERSION};
use crate::views::registry_modules::module_resource;
use crate::{Error, State, ids};

/// How long one git command may run.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// `POST /api/v2/organizations/:org/registry-modules/vcs`: 201 with the module after its tags
/// were published; 422 for a malformed `vcs-repo` or an unknown `oauth-token-id`.
pub(crate) async fn create_vcs_module(
    AxumState(state): AxumState<State>,
    caller: Caller,
    Path(organization): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    create(&state, &caller, Some(organization), &headers, &body).await
}

/// `POST /api/v2/registry-modules` (deprecated): as above, the organization from
/// `vcs-repo.organization-name` or else the OAuth token's.
pub(crate) async fn create_vcs_module_deprecated(
    AxumState(state): AxumState<State>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    create(&state, &caller, None, &headers, &body).await
}

async fn create(
    state: &State,
    caller: &Caller,
    organization: Option<String>,
    headers: &HeaderMap,
    body: &Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["registry-modules"])?;
    let repo = body
        .object("vcs-repo")?
        .cloned()
        .ok_or_else(|| Error::invalid_attribute("vcs-repo", "vcs-repo is required"))?;
    let string = |name: &str| nested_string(&repo, "vcs-repo", name);
    if string("github-app-installation-id")?.is_some() {
        return Err(Error::invalid_attribute(
            "vcs-repo",
            "GitHub App installations are not supported; connect through an OAuth client's oauth-token-id",
        ));
    }
    let identifier = string("identifier")?
        .filter(|identifier| !identifier.trim().is_empty())
        .ok_or_else(|| Error::invalid_attribute("vcs-repo", "vcs-repo.identifier is required"))?;
    let valid_identifier = identifier.split('/').count() >= 2
        && identifier.split('/').all(|part| {
            !part.is_empty()
                && part != ".."
                && part != "."
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
    if !valid_identifier {
        return Err(Error::invalid_attribute(
            "vcs-repo",
            "vcs-repo.identifier must look like :org/:repo",
        ));
    }
    let token_id = string("oauth-token-id")?
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            Error::invalid_attribute("vcs-repo", "vcs-repo.oauth-token-id is required")
        })?;
    let branch = string("branch")?.unwrap_or_default();
    let tags = nested_bool(&repo, "vcs-repo", "tags")?;
    if !branch.is_empty() && tags == Some(true) {
        return Err(Error::invalid_attribute(
            "vcs-repo",
            "vcs-repo.branch and vcs-repo.tags cannot both be set",
        ));
    }
    let token = load_token(state.storage(), &token_id).await?;
    let organization = organization
        .or(string("organization-name")?)
        .or_else(|| {
            token
                .as_ref()
                .map(|token| token.record.organization.clone())
        })
        .ok_or(Error::NotFound)?;
    let access = caller.organization(state, &organization).await?;
    OrgAccess::check(can_manage_modules(&access))?;
    let token = token
        .filter(|token| token.record.organization == organization)
        .ok_or_else(|| {
            Error::invalid_attribute("vcs-repo", format!("oauth token {token_id} was not found"))
        })?;
    let client = load_client(state.storage(), &token.record.client_id)
        .await?
        .ok_or_else(|| {
            Error::invalid_attribute("vcs-repo", format!("oauth token {token_id} was not found"))
        })?;

    let repository = identifier.rsplit('/').next().unwrap_or_default();
    let derived = repository
        .strip_prefix("terraform-")
        .and_then(|rest| rest.split_once('-'));
    let provider = match body.string("provider")? {
        Some(provider) => provider,
        None => derived
            .map(|(provider, _)| provider.to_owned())
            .unwrap_or_default(),
    };
    let name = match body.string("name")? {
        Some(name) => name,
        None => derived.map(|(_, name)| name.to_owned()).unwrap_or_default(),
    };
    if !valid_name(&name) || !valid_provider(&provider) {
        return Err(Error::invalid_attribute(
            "vcs-repo",
            format!(
                "the repository name {repository:?} must be terraform-<provider>-<name> (or name and provider given), with a lowercase alphanumeric provider"
            ),
        ));
    }
    let registry_name = body
        .string("registry-name")?
        .unwrap_or_else(|| "private".to_owned());
    if registry_name != "private" {
        check_registry(state, &registry_name)?;
        return Err(Error::invalid_attribute(
            "registry-name",
            "modules published from VCS are private",
        ));
    }
    let display_identifier = string("display-identifier")?.unwrap_or_else(|| identifier.clone());
    let now = state.now_ms();
    let module = ModuleRecord {
        version: RECORD_VERSION,
        id: ids::new_id("mod"),
        organization: organization.clone(),
        registry_name,
        namespace: organization.clone(),
        name,
        provider,
        no_code: body.bool("no-code")?.unwrap_or(false),
        tests_enabled: match body.object("test-config")? {
            Some(config) => nested_bool(config, "test-config", "tests-enabled")?.unwrap_or(false),
            None => false,
        },
        status: ModuleStatus::Pending,
        vcs: Some(VcsRepoRecord {
            repository_http_url: format!("{}/{identifier}.git", client.record.http_url),
            identifier,
            display_identifier,
            oauth_token_id: token_id,
            tags: branch.is_empty(),
            branch,
            ingress_submodules: nested_bool(&repo, "vcs-repo", "ingress-submodules")?
                .unwrap_or(true),
            webhook_id: ids::new_id("wh"),
            service_provider: client.record.service_provider.clone(),
        }),
        versions: Vec::new(),
        created_at_ms: now,
        updated_at_ms: now,
    };
    insert(state, &module).await?;
    sync(state, &module.id).await?;
    let module = load_module(state.storage(), &module.id)
        .await?
        .ok_or(Error::NotFound)?;
    Ok(JsonApi::created(Document::one(module_resource(
        &module.record,
        &access,
        &origin(headers),
    ))))
}

/// `POST /webhooks/vcs/:id`: a push to the module's repository (any provider's payload; the
/// body is not read): fetches the tags and publishes the new ones. 200 with
/// `{"published": [versions]}`; 404 for an unknown webhook. The unguessable id is the
/// credential, as for the hosts' webhooks.
pub(crate) async fn receive_webhook(
    AxumState(state): AxumState<State>,
    Path(webhook_id): Path<String>,
) -> Result<Response, Error> {
    let module = load_module_by_webhook(state.storage(), &webhook_id)
        .await?
        .ok_or(Error::NotFound)?;
    let published = sync(&state, &module.record.id).await?;
    let body = serde_json::json!({"published": published}).to_string();
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response())
}

/// A tag of the repository: its name, the version it names and its commit.
#[derive(Debug, Clone)]
struct Tag {
    name: String,
    version: String,
    commit: String,
}

/// Fetches the module's repository and publishes every semver tag that is not a version yet;
/// returns the versions added (published or failed). Tag-based modules only.
async fn sync(state: &State, module_id: &str) -> Result<Vec<String>, Error> {
    let module = load_module(state.storage(), module_id)
        .await?
        .ok_or(Error::NotFound)?;
    let Some(vcs) = module.record.vcs.clone() else {
        return Ok(Vec::new());
    };
    if !vcs.branch.is_empty() {
        return Ok(Vec::new());
    }
    let password = load_token(state.storage(), &vcs.oauth_token_id)
        .await?
        .map(|token| token.record.token)
        .unwrap_or_default();
    let work = tempfile::Builder::new()
        .prefix("cairn-module-")
        .tempdir()
        .map_err(|err| Error::Internal(format!("creating a git work directory failed: {err}")))?;
    let git = Git {
        dir: work.path(),
        authorization: basic_authorization(&vcs.service_provider, &password),
    };
    let tags = match git.fetch_tags(&vcs.repository_http_url).await {
        Ok(tags) => tags,
        Err(reason) => {
            tracing::warn!(message = "Fetching a module repository failed.", module_id, repository = %vcs.repository_http_url, reason = %reason);
            mark_setup_failed(state, module_id).await?;
            return Ok(Vec::new());
        }
    };
    let mut added = Vec::new();
    for tag in tags {
        let Some(version_id) = add_version(state, module_id, &tag, &vcs.service_provider).await?
        else {
            continue;
        };
        added.push(tag.version.clone());
        let blob_key = format!(
            "{}/{version_id}/{}.tar.gz",
            blob_prefix(module_id),
            ids::new_id("tag")
        );
        match git.archive(state, &tag.name, &blob_key).await {
            Ok(size) => match publish(state, module_id, &version_id, &blob_key, size).await {
                Ok(Outcome::Published | Outcome::Refused(_)) | Err(Error::NotFound) => {}
                Err(err) => return Err(err),
            },
            Err(reason) => {
                discard(state, &blob_key).await;
                clone_failed(state, module_id, &version_id, &reason).await?;
            }
        }
    }
    finish_sync(state, module_id).await?;
    Ok(added)
}

/// Adds a `pending` version for `tag` unless the module has that version; its id when added.
async fn add_version(
    state: &State,
    module_id: &str,
    tag: &Tag,
    source: &str,
) -> Result<Option<String>, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(module) = load_module(state.storage(), module_id).await? else {
            return Ok(None);
        };
        if module.record.find_version(&tag.version).is_some() {
            return Ok(None);
        }
        let now = state.now_ms();
        let version = ModuleVersionRecord {
            id: ids::new_id("modver"),
            version: tag.version.clone(),
            status: VersionStatus::Pending,
            error: None,
            source: source.to_owned(),
            commit_sha: Some(tag.commit.clone()),
            tag: Some(tag.name.clone()),
            blob_key: None,
            size: 0,
            created_at_ms: now,
            updated_at_ms: now,
        };
        let mut next = module.record.clone();
        next.versions.push(version.clone());
        next.updated_at_ms = now;
        if update_module(state.storage(), &module, &next, Vec::new()).await? {
            return Ok(Some(version.id));
        }
    }
    Err(Error::Contention)
}

/// Changes the module with `change`, retrying on concurrent writes.
async fn change_module(
    state: &State,
    module_id: &str,
    change: impl Fn(&mut ModuleRecord),
) -> Result<(), Error> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(module) = load_module(state.storage(), module_id).await? else {
            return Ok(());
        };
        let mut next = module.record.clone();
        change(&mut next);
        if next == module.record {
            return Ok(());
        }
        next.updated_at_ms = state.now_ms();
        if update_module(state.storage(), &module, &next, Vec::new()).await? {
            return Ok(());
        }
    }
    Err(Error::Contention)
}

async fn clone_failed(
    state: &State,
    module_id: &str,
    version_id: &str,
    reason: &str,
) -> Result<(), Error> {
    change_module(state, module_id, |module| {
        if let Some(version) = module.versions.iter_mut().find(|v| v.id == version_id) {
            version.status = VersionStatus::CloneFailed;
            version.error = Some(reason.to_owned());
        }
    })
    .await
}

async fn mark_setup_failed(state: &State, module_id: &str) -> Result<(), Error> {
    change_module(state, module_id, |module| {
        if !module
            .versions
            .iter()
            .any(|v| v.status == VersionStatus::Ok)
        {
            module.status = ModuleStatus::SetupFailed;
        }
    })
    .await
}

async fn finish_sync(state: &State, module_id: &str) -> Result<(), Error> {
    change_module(state, module_id, |module| {
        module.status = module.derived_status()
    })
    .await
}

/// `Authorization: Basic` with the user name the provider expects for token authentication
/// over HTTPS, and the token as the password; `None` without a token.
fn basic_authorization(service_provider: &str, token: &str) -> Option<String> {
    if token.is_empty() {
        return None;
    }
    let user = if service_provider.starts_with("github") {
        "x-access-token"
    } else if service_provider.starts_with("bitbucket") {
        "x-token-auth"
    } else {
        "oauth2"
    };
    Some(format!(
        "Authorization: Basic {}",
        STANDARD.encode(format!("{user}:{token}"))
    ))
}

/// The system git, confined to one work directory.
struct Git<'a> {
    dir: &'a FsPath,
    /// The `http.extraHeader` value carrying the token, if any.
    authorization: Option<String>,
}

impl Git<'_> {
    fn command(&self) -> Command {
        let mut command = Command::new("git");
        command
            .arg("-C")
            .arg(self.dir)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ALLOW_PROTOCOL", "http:https")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env_remove("GIT_DIR")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match &self.authorization {
            Some(header) => command
                .env("GIT_CONFIG_COUNT", "1")
                .env("GIT_CONFIG_KEY_0", "http.extraHeader")
                .env("GIT_CONFIG_VALUE_0", header),
            None => command.env("GIT_CONFIG_COUNT", "0"),
        };
        command
    }

    /// Runs `args` to completion; its stdout, or why it failed.
    async fn run(&self, args: &[&str]) -> Result<Vec<u8>, String> {
        let mut command = self.command();
        command
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
            .await
            .map_err(|_| format!("git {} timed out", args[0]))?
            .map_err(|err| format!("running git failed: {err}"))?;
        if output.status.success() {
            Ok(output.stdout)
        } else {
            Err(format!(
                "git {} failed: {}",
                args[0],
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    }

    /// Fetches every tag of `url` into a fresh bare repository; the semver tags, lowest
    /// precedence first, one per version (the first tag naming it in name order).
    async fn fetch_tags(&self, url: &str) -> Result<Vec<Tag>, String> {
        self.run(&["init", "--bare", "--quiet", "."]).await?;
        self.run(&[
            "fetch",
            "--quiet",
            "--no-write-fetch-head",
            url,
            "+refs/tags/*:refs/tags/*",
        ])
        .await?;
        let listing = self
            .run(&[
                "for-each-ref",
                "--format=%(refname:short) %(objectname) %(*objectname)",
                "refs/tags",
            ])
            .await?;
        let mut tags: Vec<(Version, Tag)> = Vec::new();
        for line in String::from_utf8_lossy(&listing).lines() {
            let mut fields = line.split_whitespace();
            let (Some(name), Some(object)) = (fields.next(), fields.next()) else {
                continue;
            };
            let commit = fields.next().unwrap_or(object);
            let Some(version) = Version::from_tag(name) else {
                continue;
            };
            if tags.iter().any(|(_, tag)| tag.version == version.as_str()) {
                continue;
            }
            tags.push((
                version.clone(),
                Tag {
                    name: name.to_owned(),
                    version: version.as_str().to_owned(),
                    commit: commit.to_owned(),
                },
            ));
        }
        tags.sort_by(|(a, _), (b, _)| a.cmp(b));
        Ok(tags.into_iter().map(|(_, tag)| tag).collect())
    }

    /// Streams `git archive --format=tar.gz <tag>` into blob `blob_key`; its size.
    async fn archive(&self, state: &State, tag: &str, blob_key: &str) -> Result<u64, String> {
        let mut command = self.command();
        command
            .args(["archive", "--format=tar.gz"])
            .arg(format!("refs/tags/{tag}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(|err| format!("running git failed: {err}"))?;
        let stdout = child.stdout.take().ok_or("git archive has no output")?;
        let mut stderr = child
            .stderr
            .take()
            .ok_or("git archive has no error output")?;
        let work = async {
            let stored = state
                .blobs()
                .put_stream(blob_key, tokio_util::io::ReaderStream::new(stdout), None)
                .await
                .map_err(|err| format!("storing the archive failed: {err}"));
            let mut errors = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut stderr, &mut errors).await;
            let status = child
                .wait()
                .await
                .map_err(|err| format!("running git failed: {err}"))?;
            if !status.success() {
                return Err(format!(
                    "git archive failed: {}",
                    String::from_utf8_lossy(&errors).trim()
                ));
            }
            stored.map(|stored| stored.size)
        };
        tokio::time::timeout(GIT_TIMEOUT, work)
            .await
            .map_err(|_| "git archive timed out".to_owned())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authorization_uses_the_providers_token_user() {
        let decode = |header: String| {
            let encoded = header
                .strip_prefix("Authorization: Basic ")
                .unwrap()
                .to_owned();
            String::from_utf8(STANDARD.decode(encoded).unwrap()).unwrap()
        };
        assert_eq!(
            decode(basic_authorization("github", "t").unwrap()),
            "x-access-token:t"
        );
        assert_eq!(
            decode(basic_authorization("gitlab_hosted", "t").unwrap()),
            "oauth2:t"
        );
        assert_eq!(
            decode(basic_authorization("bitbucket_hosted", "t").unwrap()),
            "x-token-auth:t"
        );
        assert_eq!(basic_authorization("github", ""), None);
    }
}
