//! The per-task template manager (Nomad's vault and template hooks over consul-template's
//! runner), one tokio task per task runner, talking to it through [`Notice`]s:
//!
//! 1. token: with a `vault` block, a child token of the job's `SecretsToken` (or
//!    `VaultToken`, else the agent's own token) with the block's policies, created through
//!    `auth/token/create`, kept in the agent's private state (to be reused after an agent
//!    restart) and, unless `disable_file`, written to `secrets/vault_token`; `VAULT_TOKEN` and
//!    `VAULT_ADDR` join the task's env unless `env = false`. Without a `vault` block, `secret`
//!    calls use the job's own token when it has one.
//! 2. first render: every template is evaluated; the secrets it needs that are not fetched yet
//!    are fetched, and it is evaluated again until none is missing. Fetch failures are retried
//!    with a doubling backoff, a `Template` event `Missing: vault.read(path)` is emitted while
//!    blocked, and after the configured attempts the task fails (`Template failed: ...`).
//!    Files are written atomically with their perms (and owner); `env` templates are read into
//!    the env sent with [`Notice::Ready`].
//! 3. watch: each secret is refreshed when due — a renewable lease is renewed at 2/3 of its
//!    duration (a new secret is fetched when the renewal no longer extends it), a
//!    non-renewable one is fetched again at 2/3 of its lease, one without a lease every
//!    `refresh_interval` — and the task token is renewed at 2/3 of its TTL. When a
//!    template's content changes it is rewritten and, after a random wait up to its `splay`,
//!    the runner gets [`Notice::Changed`] (restart, signals) unless every changed template is
//!    `noop`.
//!
//! Invariants: the manager never touches the task's process (the runner applies notices);
//! it stops when the runner cancels it; the token is revoked only when the task is finished
//! (not when the agent merely shuts down and leaves the task running).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use scheduler_structs::TaskEvent;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{Secret, SecretsClient};
use super::eval::{self, Host, Options};
use super::parse::{self, Delims, Node};
use super::{ChangeMode, TemplateSettings, TemplateSpec, VaultSpec, parse_env, resolve};
use crate::events;
use crate::state::TaskDirs;

/// The type of the events the template manager emits (`consulTemplateSourceName`).
pub(crate) const EVENT_TEMPLATE: &str = "Template";

/// How many missing dependencies an event names before `and N more`.
const MISSING_LIMIT: usize = 3;

/// What the manager tells its task runner.
#[derive(Debug)]
pub(crate) enum Notice {
    /// An event to append (e.g. `Template` / `Missing: ...`).
    Event(Box<TaskEvent>),
    /// Every template rendered: the variables they (and the token) add to the task's env, and
    /// the change modes of templates whose files changed on disk (relevant when the task is
    /// already running, after an agent restart).
    Ready {
        env: BTreeMap<String, String>,
        dirty: Vec<ChangeMode>,
    },
    /// Templates re-rendered with new content while the task runs.
    Changed {
        env: BTreeMap<String, String>,
        restart: bool,
        signals: Vec<String>,
    },
    /// The task must fail with this message.
    Failed(String),
}

/// What the manager works from.
#[derive(Debug, Clone)]
pub(crate) struct ManagerInputs {
    pub(crate) specs: Vec<TemplateSpec>,
    pub(crate) vault: Option<VaultSpec>,
    pub(crate) settings: Arc<TemplateSettings>,
    pub(crate) dirs: TaskDirs,
    /// The task's environment, for the `env` function.
    pub(crate) task_env: BTreeMap<String, String>,
    /// The job's `SecretsToken` (or `VaultToken`), when it carries one.
    pub(crate) job_token: Option<String>,
    /// Metadata of a derived token (`AllocationID`, `Task`, `NodeID`, `JobID`, `Namespace`).
    pub(crate) token_meta: Map<String, Value>,
    /// uid and gid that own the rendered files and the token file (an `exec` task's `user`).
    pub(crate) owner: Option<(u32, u32)>,
    /// The agent-private copy of a derived token (outside the task's directories).
    pub(crate) token_file: PathBuf,
}

/// The runner's handle on its manager.
#[derive(Debug)]
pub(crate) struct TemplateHandle {
    pub(crate) notices: mpsc::UnboundedReceiver<Notice>,
    stop: CancellationToken,
    revoke: Arc<AtomicBool>,
    join: JoinHandle<()>,
}

impl TemplateHandle {
    pub(crate) fn spawn(inputs: ManagerInputs) -> TemplateHandle {
        let (tx, notices) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let revoke = Arc::new(AtomicBool::new(false));
        let join = tokio::spawn(run(inputs, tx, stop.clone(), revoke.clone()));
        TemplateHandle {
            notices,
            stop,
            revoke,
            join,
        }
    }

    /// Stops the manager and waits for it; `revoke` (the task is finished) also revokes a
    /// derived token.
    pub(crate) async fn finish(self, revoke: bool) {
        self.revoke.store(revoke, Ordering::SeqCst);
        self.stop.cancel();
        if let Err(error) = self.join.await {
            tracing::error!(%error, "the template manager failed");
        }
    }
}

async fn run(
    inputs: ManagerInputs,
    tx: mpsc::UnboundedSender<Notice>,
    stop: CancellationToken,
    revoke: Arc<AtomicBool>,
) {
    let mut manager = match Manager::new(inputs) {
        Ok(manager) => manager,
        Err(message) => {
            let _ = tx.send(Notice::Failed(message));
            stop.cancelled().await;
            return;
        }
    };
    let work = async {
        if let Err(message) = manager.setup_token().await {
            let _ = tx.send(Notice::Failed(message));
            return;
        }
        match manager.first_render(&tx).await {
            Ok((env, dirty)) => {
                let _ = tx.send(Notice::Ready { env, dirty });
            }
            Err(message) => {
                let _ = tx.send(Notice::Failed(message));
                return;
            }
        }
        if let Err(message) = manager.watch(&tx).await {
            let _ = tx.send(Notice::Failed(message));
        }
    };
    tokio::select! {
        () = work => stop.cancelled().await,
        () = stop.cancelled() => {}
    }
    if revoke.load(Ordering::SeqCst) {
        manager.revoke().await;
    }
}

/// A secret the templates asked for: its path and, for a write, its parameters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct DepKey {
    path: String,
    params: Vec<String>,
}

impl DepKey {
    /// consul-template's dependency string: `vault.read(path)`, `vault.write(path -> hash)`.
    fn describe(&self) -> String {
        if self.params.is_empty() {
            format!("vault.read({})", self.path)
        } else {
            let hash = stdx::hash::fnv1a_64(self.params.join("\n").as_bytes());
            format!("vault.write({} -> {:08x})", self.path, hash & 0xffff_ffff)
        }
    }
}

#[derive(Debug, Clone)]
struct Dep {
    secret: Secret,
    value: Value,
    refresh_at: Instant,
    /// The lease duration as first granted (a renewal much shorter means the max TTL nears).
    granted: u64,
    failures: u32,
}

struct Manager {
    inputs: ManagerInputs,
    trees: Vec<Vec<Node>>,
    client: Option<SecretsClient>,
    /// The token `secret` calls use.
    token: Option<String>,
    /// Whether `token` was derived for the task (and must be renewed and revoked).
    derived: bool,
    token_renew_at: Option<Instant>,
    cache: BTreeMap<DepKey, Dep>,
    /// The content last written per template.
    written: Vec<Option<String>>,
    /// Variables from the token (`VAULT_TOKEN`, `VAULT_ADDR`).
    token_env: BTreeMap<String, String>,
}

struct Lookup<'a> {
    cache: &'a BTreeMap<DepKey, Dep>,
    env: &'a BTreeMap<String, String>,
    missing: &'a mut BTreeSet<DepKey>,
    /// Why `secret` cannot work at all (no store address or no token).
    unavailable: Option<&'a str>,
}

impl Host for Lookup<'_> {
    fn secret(&mut self, path: &str, params: &[String]) -> Result<Option<Value>, String> {
        if let Some(reason) = self.unavailable {
            return Err(reason.to_owned());
        }
        for param in params {
            if !param.contains('=') {
                return Err(format!("invalid parameter {param:?}: expected key=value"));
            }
        }
        let key = DepKey {
            path: path.trim_matches('/').to_owned(),
            params: params.to_vec(),
        };
        match self.cache.get(&key) {
            Some(dep) => Ok(Some(dep.value.clone())),
            None => {
                self.missing.insert(key);
                Ok(None)
            }
        }
    }

    fn env(&self, name: &str) -> String {
        self.env.get(name).cloned().unwrap_or_default()
    }
}

impl Manager {
    fn new(inputs: ManagerInputs) -> Result<Manager, String> {
        let mut trees = Vec::with_capacity(inputs.specs.len());
        for (index, spec) in inputs.specs.iter().enumerate() {
            let text = if spec.data.is_empty() {
                let path = resolve(&inputs.dirs, &spec.source)
                    .map_err(|error| format!("Template failed: source {error}"))?;
                std::fs::read_to_string(&path).map_err(|error| {
                    format!("Template failed: reading source {:?}: {error}", spec.source)
                })?
            } else {
                spec.data.clone()
            };
            let delims = Delims {
                left: &spec.left_delim,
                right: &spec.right_delim,
            };
            let tree = parse::parse(&template_name(spec, index), &text, delims)
                .map_err(|error| format!("Template failed: {error}"))?;
            trees.push(tree);
        }
        let client = match &inputs.settings.secrets_url {
            Some(url) => {
                Some(SecretsClient::new(url).map_err(|error| format!("Template failed: {error}"))?)
            }
            None => None,
        };
        Ok(Manager {
            written: vec![None; inputs.specs.len()],
            inputs,
            trees,
            client,
            token: None,
            derived: false,
            token_renew_at: None,
            cache: BTreeMap::new(),
            token_env: BTreeMap::new(),
        })
    }

    fn unavailable(&self) -> Option<&'static str> {
        if self.client.is_none() {
            Some("this client has no secrets store address")
        } else if self.token.is_none() {
            Some("the task has no vault block and the job no secrets token")
        } else {
            None
        }
    }

    async fn setup_token(&mut self) -> Result<(), String> {
        let Some(vault) = self.inputs.vault.clone() else {
            self.token.clone_from(&self.inputs.job_token);
            return Ok(());
        };
        let Some(client) = self.client.clone() else {
            return Err(
                "failed to derive vault token: this client has no secrets store address".to_owned(),
            );
        };
        // A token kept from before an agent restart is reused while it works.
        if let Ok(kept) = std::fs::read_to_string(&self.inputs.token_file) {
            let kept = kept.trim().to_owned();
            if !kept.is_empty()
                && let Ok(ttl) = client.lookup_self(&kept).await
            {
                self.token = Some(kept);
                self.token_renew_at = renew_at(ttl);
            }
        }
        if self.token.is_none() {
            let Some(parent) = self
                .inputs
                .job_token
                .clone()
                .or_else(|| self.inputs.settings.secrets_token.clone())
            else {
                return Err("failed to derive vault token: the job has no secrets token and this client none".to_owned());
            };
            let mut attempt = 0;
            let created = loop {
                match client
                    .create_token(&parent, &vault.policies, &self.inputs.token_meta)
                    .await
                {
                    Ok(created) => break created,
                    Err(error) => {
                        attempt += 1;
                        if attempt >= self.inputs.settings.retry_attempts.max(1) {
                            return Err(format!("failed to derive vault token: {error}"));
                        }
                        tokio::time::sleep(self.backoff(attempt)).await;
                    }
                }
            };
            write_private(&self.inputs.token_file, &created.token, None)
                .map_err(|error| format!("failed to keep the vault token: {error}"))?;
            self.token_renew_at = if created.renewable {
                renew_at(created.ttl)
            } else {
                None
            };
            self.token = Some(created.token);
        }
        self.derived = true;
        let token = self.token.clone().unwrap_or_default();
        if !vault.disable_file {
            write_private(
                &self.inputs.dirs.secrets.join("vault_token"),
                &token,
                self.inputs.owner,
            )
            .map_err(|error| format!("failed to write the vault token: {error}"))?;
        }
        if vault.env {
            self.token_env.insert("VAULT_TOKEN".to_owned(), token);
            if let Some(url) = &self.inputs.settings.secrets_url {
                self.token_env.insert("VAULT_ADDR".to_owned(), url.clone());
            }
        }
        Ok(())
    }

    fn backoff(&self, attempt: u32) -> Duration {
        let settings = &self.inputs.settings;
        let factor = 1_u32 << attempt.saturating_sub(1).min(20);
        settings
            .retry_backoff
            .saturating_mul(factor)
            .min(settings.retry_max_backoff)
    }

    /// Evaluates every template against the cache: the outputs, or the missing secrets.
    fn evaluate(&self) -> Result<Result<Vec<String>, BTreeSet<DepKey>>, String> {
        let mut missing = BTreeSet::new();
        let mut outputs = Vec::with_capacity(self.trees.len());
        let unavailable = self.unavailable();
        for (index, (spec, tree)) in self.inputs.specs.iter().zip(&self.trees).enumerate() {
            let mut lookup = Lookup {
                cache: &self.cache,
                env: &self.inputs.task_env,
                missing: &mut missing,
                unavailable,
            };
            let options = Options {
                error_on_missing_key: spec.error_on_missing_key,
            };
            let output = eval::render(&template_name(spec, index), tree, &mut lookup, options)
                .map_err(|error| format!("Template failed: {error}"))?;
            outputs.push(output);
        }
        Ok(if missing.is_empty() {
            Ok(outputs)
        } else {
            Err(missing)
        })
    }

    async fn fetch(&self, key: &DepKey) -> Result<Secret, String> {
        let (Some(client), Some(token)) = (&self.client, &self.token) else {
            return Err(self.unavailable().unwrap_or_default().to_owned());
        };
        if key.params.is_empty() {
            client.read(&key.path, token).await
        } else {
            let mut data = Map::new();
            for param in &key.params {
                let (name, value) = param.split_once('=').unwrap_or((param, ""));
                data.insert(name.to_owned(), Value::from(value));
            }
            client.write(&key.path, token, data).await
        }
    }

    fn store(&mut self, key: DepKey, secret: Secret) {
        let now = Instant::now();
        let refresh = if secret.lease_duration > 0 {
            two_thirds(secret.lease_duration)
        } else {
            self.inputs.settings.refresh_interval
        };
        let dep = Dep {
            value: secret.template_value(),
            granted: secret.lease_duration,
            secret,
            refresh_at: now + refresh,
            failures: 0,
        };
        self.cache.insert(key, dep);
    }

    /// Fetches what the templates miss until they all evaluate; the outputs.
    async fn resolve(&mut self, tx: &mpsc::UnboundedSender<Notice>) -> Result<Vec<String>, String> {
        let mut failures: BTreeMap<DepKey, (u32, String)> = BTreeMap::new();
        let mut reported: Vec<String> = Vec::new();
        loop {
            let missing = match self.evaluate()? {
                Ok(outputs) => return Ok(outputs),
                Err(missing) => missing,
            };
            for key in missing {
                match self.fetch(&key).await {
                    Ok(secret) => {
                        failures.remove(&key);
                        self.store(key, secret);
                    }
                    Err(error) => {
                        let entry = failures.entry(key.clone()).or_insert((0, String::new()));
                        entry.0 += 1;
                        entry.1 = error;
                        if entry.0 >= self.inputs.settings.retry_attempts.max(1) {
                            return Err(format!(
                                "Template failed: {}: {}",
                                key.describe(),
                                entry.1
                            ));
                        }
                    }
                }
            }
            if failures.is_empty() {
                continue;
            }
            let mut names: Vec<String> = failures.keys().map(DepKey::describe).collect();
            names.sort();
            if names != reported {
                reported.clone_from(&names);
                if names.len() > MISSING_LIMIT {
                    let more = names.len() - MISSING_LIMIT;
                    names.truncate(MISSING_LIMIT);
                    names.push(format!("and {more} more"));
                }
                let event = template_event(&format!("Missing: {}", names.join(", ")));
                let _ = tx.send(Notice::Event(Box::new(event)));
            }
            let attempts = failures.values().map(|(n, _)| *n).max().unwrap_or(1);
            tokio::time::sleep(self.backoff(attempts)).await;
        }
    }

    /// Writes the templates whose content differs from the file (or the last write); the
    /// indexes written.
    fn write_outputs(
        &mut self,
        outputs: &[String],
        compare_disk: bool,
    ) -> Result<Vec<usize>, String> {
        let mut changed = Vec::new();
        for (index, output) in outputs.iter().enumerate() {
            let spec = &self.inputs.specs[index];
            if self.written[index].as_deref() == Some(output.as_str()) {
                continue;
            }
            if self.written[index].is_some() && spec.once {
                continue;
            }
            let path = resolve(&self.inputs.dirs, &spec.dest)
                .map_err(|error| format!("Template failed: destination {error}"))?;
            let on_disk = compare_disk.then(|| std::fs::read(&path).ok()).flatten();
            let same_on_disk = on_disk.as_deref() == Some(output.as_bytes());
            if !same_on_disk {
                let owner = match (spec.uid, spec.gid, self.inputs.owner) {
                    (None, None, owner) => owner,
                    (uid, gid, owner) => Some((
                        uid.or(owner.map(|o| o.0)).unwrap_or(0),
                        gid.or(owner.map(|o| o.1)).unwrap_or(0),
                    )),
                };
                write_file(&path, output.as_bytes(), spec.perms, owner).map_err(|error| {
                    format!("Template failed: writing {:?}: {error}", spec.dest)
                })?;
                changed.push(index);
            }
            self.written[index] = Some(output.clone());
        }
        Ok(changed)
    }

    fn env(&self, outputs: &[String]) -> Result<BTreeMap<String, String>, String> {
        let mut env = self.token_env.clone();
        for (spec, output) in self.inputs.specs.iter().zip(outputs) {
            if spec.env {
                let vars = parse_env(output).map_err(|error| {
                    format!(
                        "Template failed to read environment variables: {}: {error}",
                        spec.dest
                    )
                })?;
                env.extend(vars);
            }
        }
        Ok(env)
    }

    async fn first_render(
        &mut self,
        tx: &mpsc::UnboundedSender<Notice>,
    ) -> Result<(BTreeMap<String, String>, Vec<ChangeMode>), String> {
        let outputs = self.resolve(tx).await?;
        let changed = self.write_outputs(&outputs, true)?;
        let env = self.env(&outputs)?;
        let dirty = changed
            .into_iter()
            .map(|index| self.inputs.specs[index].change_mode.clone())
            .collect();
        Ok((env, dirty))
    }

    async fn watch(&mut self, tx: &mpsc::UnboundedSender<Notice>) -> Result<(), String> {
        loop {
            let next = self
                .cache
                .values()
                .map(|dep| dep.refresh_at)
                .chain(self.token_renew_at)
                .min();
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending::<()>().await,
            }
            self.renew_token().await;
            let now = Instant::now();
            let due: Vec<DepKey> = self
                .cache
                .iter()
                .filter(|(_, dep)| dep.refresh_at <= now)
                .map(|(key, _)| key.clone())
                .collect();
            let mut refetched = false;
            for key in due {
                if self.refresh(&key).await? {
                    refetched = true;
                }
            }
            if !refetched {
                continue;
            }
            let outputs = self.resolve(tx).await?;
            let changed = self.write_outputs(&outputs, false)?;
            if changed.is_empty() {
                continue;
            }
            let env = self.env(&outputs)?;
            let mut restart = false;
            let mut signals = BTreeSet::new();
            let mut splay = Duration::ZERO;
            for index in changed {
                let spec = &self.inputs.specs[index];
                match &spec.change_mode {
                    ChangeMode::Restart => restart = true,
                    ChangeMode::Signal(signal) => {
                        signals.insert(signal.clone());
                    }
                    ChangeMode::Noop => continue,
                }
                splay = splay.max(spec.splay);
            }
            if restart || !signals.is_empty() {
                if !splay.is_zero() {
                    let wait = splay.mul_f64(rand::random::<f64>());
                    tokio::time::sleep(wait).await;
                }
                let _ = tx.send(Notice::Changed {
                    env,
                    restart,
                    signals: signals.into_iter().collect(),
                });
            } else {
                let _ = tx.send(Notice::Changed {
                    env,
                    restart: false,
                    signals: Vec::new(),
                });
            }
        }
    }

    /// Renews or re-fetches one due secret; true when it was fetched anew.
    async fn refresh(&mut self, key: &DepKey) -> Result<bool, String> {
        let Some(dep) = self.cache.get(key).cloned() else {
            return Ok(false);
        };
        let now = Instant::now();
        if dep.secret.renewable
            && !dep.secret.lease_id.is_empty()
            && let (Some(client), Some(token)) = (&self.client, &self.token)
        {
            match client
                .renew_lease(&dep.secret.lease_id, dep.granted, token)
                .await
            {
                Ok(duration) if duration > 0 && duration.saturating_mul(2) >= dep.granted => {
                    if let Some(entry) = self.cache.get_mut(key) {
                        entry.refresh_at = now + two_thirds(duration);
                        entry.failures = 0;
                    }
                    tracing::debug!(lease = %dep.secret.lease_id, duration, "renewed a template secret's lease");
                    return Ok(false);
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(dependency = %key.describe(), %error, "cannot renew a template secret's lease; fetching it again");
                }
            }
        }
        match self.fetch(key).await {
            Ok(secret) => {
                let same = secret.data == dep.secret.data;
                self.store(key.clone(), secret);
                Ok(!same)
            }
            Err(error) => {
                let failures = dep.failures + 1;
                if failures >= self.inputs.settings.retry_attempts.max(1) {
                    return Err(format!("Template failed: {}: {error}", key.describe()));
                }
                tracing::warn!(dependency = %key.describe(), %error, failures, "cannot refresh a template secret; retrying");
                let backoff = self.backoff(failures);
                if let Some(entry) = self.cache.get_mut(key) {
                    entry.failures = failures;
                    entry.refresh_at = now + backoff;
                }
                Ok(false)
            }
        }
    }

    async fn renew_token(&mut self) {
        let Some(at) = self.token_renew_at else {
            return;
        };
        if at > Instant::now() {
            return;
        }
        let (Some(client), Some(token)) = (&self.client, &self.token) else {
            self.token_renew_at = None;
            return;
        };
        match client.renew_self(token).await {
            Ok(ttl) => self.token_renew_at = renew_at(ttl),
            Err(error) => {
                tracing::warn!(%error, "cannot renew the task's secrets token; retrying");
                self.token_renew_at = Some(Instant::now() + self.backoff(3));
            }
        }
    }

    async fn revoke(&mut self) {
        if !self.derived {
            return;
        }
        if let (Some(client), Some(token)) = (&self.client, &self.token) {
            match tokio::time::timeout(Duration::from_secs(10), client.revoke_self(token)).await {
                Ok(Ok(())) => tracing::debug!("revoked the task's secrets token"),
                Ok(Err(error)) => tracing::warn!(%error, "cannot revoke the task's secrets token"),
                Err(_) => tracing::warn!("revoking the task's secrets token timed out"),
            }
        }
        let _ = std::fs::remove_file(&self.inputs.token_file);
    }
}

fn template_name(spec: &TemplateSpec, index: usize) -> String {
    if spec.dest.is_empty() {
        format!("template-{index}")
    } else {
        spec.dest.clone()
    }
}

fn two_thirds(seconds: u64) -> Duration {
    Duration::from_millis(seconds.saturating_mul(2000) / 3).max(Duration::from_millis(500))
}

fn renew_at(ttl: u64) -> Option<Instant> {
    (ttl > 0).then(|| Instant::now() + two_thirds(ttl))
}

fn template_event(message: &str) -> TaskEvent {
    let mut event = events::new_event(EVENT_TEMPLATE);
    event.display_message = message.to_owned();
    event.message = message.to_owned();
    event
}

/// Writes `bytes` to `path` whole (temporary file, fsync, rename) with `perms` and `owner`.
fn write_file(
    path: &Path,
    bytes: &[u8],
    perms: u32,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let name = path
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&temp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&temp, Some(uid), Some(gid))?;
    }
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(perms))?;
    std::fs::rename(&temp, path)
}

/// A token file: mode 0600, owned by `owner` when given.
fn write_private(path: &Path, token: &str, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    write_file(path, token.as_bytes(), 0o600, owner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateDir;

    fn inputs(dir: &Path, specs: Vec<TemplateSpec>) -> ManagerInputs {
        let dirs = StateDir::new(dir.to_path_buf()).task_dirs("a1", "web");
        dirs.build().unwrap();
        ManagerInputs {
            specs,
            vault: None,
            settings: Arc::new(TemplateSettings {
                retry_attempts: 2,
                retry_backoff: Duration::from_millis(10),
                ..TemplateSettings::default()
            }),
            token_file: dir.join("token"),
            dirs,
            task_env: BTreeMap::from([("NOMAD_TASK_NAME".to_owned(), "web".to_owned())]),
            job_token: None,
            token_meta: Map::new(),
            owner: None,
        }
    }

    fn spec(data: &str, dest: &str, env: bool) -> TemplateSpec {
        TemplateSpec {
            data: data.to_owned(),
            source: String::new(),
            dest: dest.to_owned(),
            change_mode: ChangeMode::Restart,
            env,
            perms: 0o640,
            uid: None,
            gid: None,
            left_delim: String::new(),
            right_delim: String::new(),
            splay: Duration::ZERO,
            error_on_missing_key: false,
            once: false,
        }
    }

    async fn first(
        inputs: ManagerInputs,
    ) -> (Result<BTreeMap<String, String>, String>, Vec<Notice>) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(run(
            inputs,
            tx,
            CancellationToken::new(),
            Arc::new(AtomicBool::new(false)),
        ));
        let mut seen = Vec::new();
        let result = loop {
            match tokio::time::timeout(Duration::from_secs(20), rx.recv())
                .await
                .unwrap()
            {
                Some(Notice::Ready { env, .. }) => break Ok(env),
                Some(Notice::Failed(message)) => break Err(message),
                Some(other) => seen.push(other),
                None => break Err("closed".to_owned()),
            }
        };
        handle.abort();
        (result, seen)
    }

    #[tokio::test]
    async fn templates_without_secrets_render_files_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = inputs(
            dir.path(),
            vec![
                spec(
                    "name={{ env \"NOMAD_TASK_NAME\" | toUpper }}\n",
                    "local/app.conf",
                    false,
                ),
                spec(
                    "GREETING=\"hi {{ env \"NOMAD_TASK_NAME\" }}\"\n",
                    "secrets/app.env",
                    true,
                ),
            ],
        );
        let dirs = inputs.dirs.clone();
        let (result, _) = first(inputs).await;
        let env = result.unwrap();
        assert_eq!(env["GREETING"], "hi web");
        assert_eq!(
            std::fs::read_to_string(dirs.local.join("app.conf")).unwrap(),
            "name=WEB\n"
        );
        let mode = std::fs::metadata(dirs.secrets.join("app.env"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[tokio::test]
    async fn a_secret_without_a_store_or_token_fails_the_template() {
        let dir = tempfile::tempdir().unwrap();
        let (result, _) = first(inputs(
            dir.path(),
            vec![spec(
                "{{ with secret \"secret/data/x\" }}{{ end }}",
                "local/x",
                false,
            )],
        ))
        .await;
        let message = result.unwrap_err();
        assert!(
            message.starts_with("Template failed: template: local/x:1:"),
            "{message}"
        );
        assert!(message.contains("no secrets store address"), "{message}");
    }

    #[tokio::test]
    async fn an_unreachable_store_reports_missing_then_fails_after_the_retries() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let mut inputs = inputs(
            dir.path(),
            vec![spec(
                "{{ with secret \"secret/data/x\" }}{{ .Data.data.a }}{{ end }}",
                "local/x",
                false,
            )],
        );
        inputs.job_token = Some("t".to_owned());
        inputs.settings = Arc::new(TemplateSettings {
            secrets_url: Some(format!("http://127.0.0.1:{port}")),
            retry_attempts: 2,
            retry_backoff: Duration::from_millis(10),
            ..TemplateSettings::default()
        });
        let (result, seen) = first(inputs).await;
        let message = result.unwrap_err();
        assert!(
            message.starts_with("Template failed: vault.read(secret/data/x): "),
            "{message}"
        );
        let Some(Notice::Event(event)) = seen.first() else {
            panic!("{seen:?}")
        };
        assert_eq!(event.event_type, "Template");
        assert_eq!(event.display_message, "Missing: vault.read(secret/data/x)");
    }

    #[tokio::test]
    async fn a_destination_outside_the_task_fails_and_a_parse_error_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let (result, _) = first(inputs(dir.path(), vec![spec("x", "../../escape", false)])).await;
        assert!(result.unwrap_err().contains("escapes the task directory"));
        let (result, _) = first(inputs(
            dir.path(),
            vec![spec("a\n{{ if }}", "local/x", false)],
        ))
        .await;
        assert_eq!(
            result.unwrap_err(),
            "Template failed: template: local/x:2: missing value for if"
        );
    }
}
