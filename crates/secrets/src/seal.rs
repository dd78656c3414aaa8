//! The seal: `sys/init` creates a root key and splits it into Shamir shares, `sys/unseal`
//! collects shares until the threshold and opens the barrier with the reconstructed key,
//! `sys/seal` forgets every key. Also the unauthenticated HTTP handlers of `sys/seal-status`,
//! `sys/init` and `sys/unseal` (routed in `routes.rs`, they work while sealed); the
//! authenticated `sys/seal`, `sys/rotate` and `sys/key-status` are in `sys/seal.rs`.
//!
//! Storage (physical keys, outside the barrier): [`SEAL_CONFIG_KEY`] holds the seal
//! configuration in clear (type, shares, threshold: not secret); the encrypted keyring is at
//! `barrier::KEYRING_KEY`. Both are written in one create-if-missing transaction at init, so
//! concurrent inits agree on one root key.
//!
//! Shares: a 1-of-1 seal's key is the root key itself (as Vault); otherwise each share is
//! blahaj's 33 bytes (x, then 32 y bytes). Keys are returned hex (`keys`) and base64
//! (`keys_base64`); unseal accepts either.
//!
//! Invariants:
//! - The root key is never stored (only in `cairn dev`, in the dev unseal key file, mode
//!   0600, which sits next to the data and is for development only).
//! - Unseal progress lives in memory only; reaching the threshold always resets it, whether
//!   the reconstructed key opens the barrier or not (a wrong share restarts the round).
//! - init, unseal and seal are serialized by one lock; the barrier opens only after the
//!   reconstructed key decrypts the keyring, and `State::post_unseal` runs before the unseal
//!   answers.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use axum::extract::State as AxumState;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http_kit::RawBody;
use secrets_sdk::{Data, fields};
use serde::{Deserialize, Serialize};
use stdx::hex;
use storage::{Compare, KeyRange, Op, Storage, Txn};
use zeroize::Zeroizing;

use crate::barrier::{self, Barrier, KEY_LEN};
use crate::{Error, REPORTED_VERSION, State};

/// The seal configuration (physical key, in clear).
pub(crate) const SEAL_CONFIG_KEY: &str = "secrets/core/seal-config";

/// Vault's message for a reconstructed key that does not open the barrier.
const INVALID_KEY: &str = "Unseal failed, invalid key";
const NOT_INITIALIZED: &str = "Vault is not initialized";

/// Stored seal configuration.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SealConfig {
    pub(crate) version: u32,
    pub(crate) secret_shares: u8,
    pub(crate) secret_threshold: u8,
}

/// Shares collected so far in this unseal round.
struct Progress {
    nonce: String,
    parts: Vec<Zeroizing<Vec<u8>>>,
}

pub(crate) struct Seal {
    storage: Arc<dyn Storage>,
    barrier: Arc<Barrier>,
    /// The seal configuration once seen (it never changes after init).
    config: RwLock<Option<SealConfig>>,
    progress: Mutex<Option<Progress>>,
    /// Serializes init, unseal and seal.
    op: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("unsealed", &self.is_unsealed())
            .finish_non_exhaustive()
    }
}

/// `sys/seal-status` and the answer of `sys/unseal`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct SealStatus {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    pub(crate) initialized: bool,
    pub(crate) sealed: bool,
    pub(crate) t: u8,
    pub(crate) n: u8,
    pub(crate) progress: usize,
    pub(crate) nonce: String,
    pub(crate) version: &'static str,
    pub(crate) build_date: &'static str,
    pub(crate) migration: bool,
    pub(crate) cluster_name: String,
    pub(crate) cluster_id: String,
    pub(crate) recovery_seal: bool,
    pub(crate) storage_type: &'static str,
}

/// What `sys/init` returns.
#[derive(Debug, Serialize)]
pub(crate) struct InitResponse {
    pub(crate) keys: Vec<String>,
    pub(crate) keys_base64: Vec<String>,
    pub(crate) root_token: String,
}

/// The result of [`Seal::initialize`]: the shares and the root key (held only in memory).
struct Initialized {
    shares: Vec<Zeroizing<Vec<u8>>>,
    root_key: Zeroizing<Vec<u8>>,
}

impl Seal {
    pub(crate) fn new(storage: Arc<dyn Storage>, barrier: Arc<Barrier>) -> Seal {
        Seal {
            storage,
            barrier,
            config: RwLock::new(None),
            progress: Mutex::new(None),
            op: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn is_unsealed(&self) -> bool {
        !self.barrier.is_sealed()
    }

    /// The seal configuration, `None` before init.
    pub(crate) async fn config(&self) -> Result<Option<SealConfig>, Error> {
        if let Some(config) = *self.config.read().unwrap_or_else(PoisonError::into_inner) {
            return Ok(Some(config));
        }
        let Some(kv) = self.storage.get(SEAL_CONFIG_KEY.as_bytes()).await? else {
            return Ok(None);
        };
        let config: SealConfig =
            serde_json::from_slice(&kv.value).map_err(|err| Error::CorruptRecord {
                key: SEAL_CONFIG_KEY.to_owned(),
                reason: err.to_string(),
            })?;
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Some(config);
        Ok(Some(config))
    }

    pub(crate) async fn is_initialized(&self) -> Result<bool, Error> {
        Ok(self.config().await?.is_some())
    }

    fn lock_progress(&self) -> std::sync::MutexGuard<'_, Option<Progress>> {
        self.progress.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The seal status as `sys/seal-status` reports it.
    pub(crate) async fn status(&self, state: &State) -> Result<SealStatus, Error> {
        let config = self.config().await?;
        let (progress, nonce) = match self.lock_progress().as_ref() {
            Some(p) => (p.parts.len(), p.nonce.clone()),
            None => (0, String::new()),
        };
        let cluster = state.cluster();
        Ok(SealStatus {
            kind: "shamir",
            initialized: config.is_some(),
            sealed: !self.is_unsealed(),
            t: config.map_or(0, |c| c.secret_threshold),
            n: config.map_or(0, |c| c.secret_shares),
            progress,
            nonce,
            version: REPORTED_VERSION,
            build_date: BUILD_DATE,
            migration: false,
            cluster_name: cluster.name.clone(),
            cluster_id: cluster.id.clone(),
            recovery_seal: false,
            storage_type: "cairn",
        })
    }

    /// Creates the root key and keyring and stores the configuration; the barrier stays
    /// sealed. Fails with `Vault is already initialized` when a configuration exists.
    async fn initialize(&self, shares: u8, threshold: u8) -> Result<Initialized, Error> {
        if self.is_initialized().await? {
            return Err(already_initialized());
        }
        let root_key = self.barrier.random_key()?;
        let keyring = self.barrier.fresh_keyring(&root_key)?;
        let config = SealConfig {
            version: 1,
            secret_shares: shares,
            secret_threshold: threshold,
        };
        let encoded = serde_json::to_vec(&config).map_err(|err| Error::CorruptRecord {
            key: SEAL_CONFIG_KEY.to_owned(),
            reason: err.to_string(),
        })?;
        let txn = Txn::new()
            .when(Compare::Missing(SEAL_CONFIG_KEY.as_bytes().to_vec()))
            .when(Compare::Missing(barrier::KEYRING_KEY.as_bytes().to_vec()))
            .then(Op::Put {
                key: SEAL_CONFIG_KEY.as_bytes().to_vec(),
                value: encoded,
            })
            .then(Op::Put {
                key: barrier::KEYRING_KEY.as_bytes().to_vec(),
                value: keyring,
            });
        if !self.storage.txn(txn).await?.succeeded {
            return Err(already_initialized());
        }
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = Some(config);
        let shares = if shares == 1 {
            vec![Zeroizing::new(root_key.to_vec())]
        } else {
            blahaj::Sharks(threshold)
                .dealer(&root_key)
                .take(usize::from(shares))
                .map(|share| Zeroizing::new(Vec::from(&share)))
                .collect()
        };
        Ok(Initialized { shares, root_key })
    }

    /// Removes what a failed `sys/init` wrote (seal configuration, keyring, barrier data).
    async fn undo_initialize(&self) {
        let txn = Txn::new()
            .then(Op::Delete {
                key: SEAL_CONFIG_KEY.as_bytes().to_vec(),
            })
            .then(Op::Delete {
                key: barrier::KEYRING_KEY.as_bytes().to_vec(),
            })
            .then(Op::DeleteRange(KeyRange::prefix(
                barrier::DATA_PREFIX.as_bytes(),
            )));
        if let Err(err) = self.storage.txn(txn).await {
            tracing::error!(message = "Undoing a failed sys/init failed.", error = %err);
        }
        self.barrier.forget_reads();
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// Opens the barrier with `root_key` and runs `post_unseal`; a wrong key is a 400
    /// `Unseal failed, invalid key` and leaves the barrier sealed.
    /// With `serve`, the store then answers requests; without (inside `sys/init`), it stays
    /// refusing them while the caller uses it.
    async fn open(&self, state: &State, root_key: &[u8], serve: bool) -> Result<(), Error> {
        if !self.barrier.unseal(root_key).await? {
            return Err(Error::InvalidParameter(INVALID_KEY.to_owned()));
        }
        if let Err(err) = state.post_unseal().await {
            state.pre_seal().await;
            self.barrier.seal();
            return Err(err);
        }
        self.barrier.set_serving(serve);
        state.report_fitness();
        Ok(())
    }

    /// `sys/init`: initializes, then unseals internally to create the root token, then seals
    /// again (as Vault: the operator unseals with the returned shares).
    pub(crate) async fn init(
        &self,
        state: &State,
        shares: u8,
        threshold: u8,
    ) -> Result<InitResponse, Error> {
        let _op = self.op.lock().await;
        let initialized = self.initialize(shares, threshold).await?;
        // Not serving: nothing but this init sees the store open.
        let root = match self.open(state, &initialized.root_key, false).await {
            Ok(()) => {
                let root = state.tokens().create_root(state, None).await;
                state.pre_seal().await;
                self.barrier.seal();
                root
            }
            Err(err) => Err(err),
        };
        let root = match root {
            Ok(root) => root,
            Err(err) => {
                // Nobody has the shares yet: undo the init rather than leave a store that no
                // one can ever unseal.
                self.undo_initialize().await;
                return Err(err);
            }
        };
        Ok(InitResponse {
            keys: initialized.shares.iter().map(|s| hex::encode(s)).collect(),
            keys_base64: initialized
                .shares
                .iter()
                .map(|s| base64::engine::general_purpose::STANDARD.encode(s.as_slice()))
                .collect(),
            root_token: root.id.clone(),
        })
    }

    /// `sys/unseal` with a reset: forgets the shares collected so far.
    pub(crate) fn reset_progress(&self) {
        *self.lock_progress() = None;
    }

    /// `sys/unseal`: adds one share (already decoded); at the threshold, reconstructs the root
    /// key and opens the barrier. Resubmitting a share already given is ignored.
    pub(crate) async fn submit_share(&self, state: &State, share: &[u8]) -> Result<(), Error> {
        let _op = self.op.lock().await;
        let Some(config) = self.config().await? else {
            return Err(Error::InvalidParameter(NOT_INITIALIZED.to_owned()));
        };
        if self.is_unsealed() {
            return Ok(());
        }
        let parts = {
            let mut progress = self.lock_progress();
            let round = progress.get_or_insert_with(|| Progress {
                nonce: uuid::Uuid::new_v4().to_string(),
                parts: Vec::new(),
            });
            if round.parts.iter().any(|p| p.as_slice() == share) {
                return Ok(());
            }
            round.parts.push(Zeroizing::new(share.to_vec()));
            if round.parts.len() < usize::from(config.secret_threshold) {
                return Ok(());
            }
            // Threshold reached: this round ends whatever the outcome.
            progress.take().map(|p| p.parts).unwrap_or_default()
        };
        let root_key = combine(config, &parts)?;
        self.open(state, &root_key, true).await
    }

    /// A snapshot restore (`snapshots::restore`): with requests refused and the in-memory
    /// state dropped (`pre_seal`), runs `replace`, which rewrites the service's keys. Then,
    /// with `keep_keys` (the new keyring opens with the root key in memory), the keyring and
    /// everything else is reloaded as an unseal does (`post_unseal`) and the store serves
    /// again; without, the store is left sealed, to be unsealed with the snapshot's keys. A
    /// failed `replace` changed nothing (one transaction): the old state is reloaded.
    pub(crate) async fn replace_contents(
        &self,
        state: &State,
        keep_keys: bool,
        replace: impl std::future::Future<Output = Result<(), Error>>,
    ) -> Result<(), Error> {
        let _op = self.op.lock().await;
        self.barrier.set_serving(false);
        state.pre_seal().await;
        let replaced = replace.await;
        if replaced.is_ok() && !keep_keys {
            self.barrier.seal();
            *self.config.write().unwrap_or_else(PoisonError::into_inner) = None;
            self.reset_progress();
            state.report_fitness();
            return Ok(());
        }
        let reloaded = async {
            self.barrier.reload_keyring_from_storage().await?;
            state.post_unseal().await
        }
        .await;
        if let Err(err) = reloaded {
            state.pre_seal().await;
            self.barrier.seal();
            state.report_fitness();
            return Err(err);
        }
        self.barrier.set_serving(true);
        replaced
    }

    /// `sys/seal`: runs `pre_seal` and forgets every key.
    pub(crate) async fn seal(&self, state: &State) {
        let _op = self.op.lock().await;
        // Refuse requests first, so none sees a half-cleared state.
        self.barrier.set_serving(false);
        state.pre_seal().await;
        self.barrier.seal();
        self.reset_progress();
        state.report_fitness();
    }
}

/// The root key from `parts` (at least the threshold, distinct).
fn combine(config: SealConfig, parts: &[Zeroizing<Vec<u8>>]) -> Result<Zeroizing<Vec<u8>>, Error> {
    let invalid = || Error::InvalidParameter(INVALID_KEY.to_owned());
    if config.secret_threshold <= 1 {
        let key = parts.first().ok_or_else(invalid)?;
        return if key.len() == KEY_LEN {
            Ok(Zeroizing::new(key.to_vec()))
        } else {
            Err(invalid())
        };
    }
    let mut shares = Vec::with_capacity(parts.len());
    for part in parts {
        if part.len() != KEY_LEN + 1 || part[0] == 0 {
            return Err(invalid());
        }
        shares.push(blahaj::Share::try_from(part.as_slice()).map_err(|_| invalid())?);
    }
    // blahaj counts distinct x coordinates; duplicates of one x would corrupt the
    // interpolation, so refuse them as a wrong key.
    let mut xs: Vec<u8> = parts.iter().map(|p| p[0]).collect();
    xs.sort_unstable();
    xs.dedup();
    if xs.len() != parts.len() {
        return Err(invalid());
    }
    blahaj::Sharks(config.secret_threshold)
        .recover(&shares)
        .map(Zeroizing::new)
        .map_err(|_| invalid())
}

/// `cairn dev`: initialises with one share if needed (keeping the key in
/// `config.dev_unseal_key_file` when set, mode 0600, and reading it back on restart), unseals,
/// runs `post_unseal` and creates the root token with the configured id.
pub(crate) async fn dev_init_and_unseal(state: &State) -> Result<(), Error> {
    let seal = state.seal();
    let key_file = state.config().dev_unseal_key_file.clone();
    {
        let _op = seal.op.lock().await;
        if seal.is_unsealed() {
            // Already open (a second call): only make sure the root token exists.
        } else if seal.is_initialized().await? {
            let Some(path) = key_file.as_deref() else {
                return Err(Error::InitState(
                    "dev mode: the store is initialized but no dev unseal key file is configured"
                        .to_owned(),
                ));
            };
            let key = read_key_file(path).await?;
            seal.open(state, &key, true)
                .await
                .map_err(|err| match err {
                    Error::InvalidParameter(_) => Error::InitState(format!(
                        "dev mode: the key in {} does not unseal this store",
                        path.display()
                    )),
                    other => other,
                })?;
        } else {
            let initialized = seal.initialize(1, 1).await?;
            if let Some(path) = key_file.as_deref() {
                write_key_file(path, &initialized.root_key).await?;
            }
            seal.open(state, &initialized.root_key, true).await?;
        }
    }
    let root_token = state.config().dev_root_token.clone();
    state.tokens().create_root(state, root_token).await?;
    Ok(())
}

async fn read_key_file(path: &std::path::Path) -> Result<Zeroizing<Vec<u8>>, Error> {
    let text = Zeroizing::new(tokio::fs::read_to_string(path).await.map_err(|err| {
        Error::InitState(format!(
            "dev mode: cannot read the unseal key file {}: {err}",
            path.display()
        ))
    })?);
    hex::decode(text.trim()).map(Zeroizing::new).ok_or_else(|| {
        Error::InitState(format!(
            "dev mode: the unseal key file {} is not hex",
            path.display()
        ))
    })
}

/// Writes the key (hex) with mode 0600 through a temporary file and a rename, so a crash never
/// leaves a partial key file.
async fn write_key_file(path: &std::path::Path, key: &[u8]) -> Result<(), Error> {
    use tokio::io::AsyncWriteExt;
    let io_err = |err: std::io::Error| {
        Error::InitState(format!(
            "dev mode: cannot write the unseal key file {}: {err}",
            path.display()
        ))
    };
    let tmp = path.with_extension("tmp");
    let mut options = tokio::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    options.mode(0o600);
    let mut file = options.open(&tmp).await.map_err(io_err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // A pre-existing temporary file keeps its mode through `open`; tighten it.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .await
            .map_err(io_err)?;
    }
    let text = Zeroizing::new(format!("{}\n", hex::encode(key)));
    file.write_all(text.as_bytes()).await.map_err(io_err)?;
    file.sync_all().await.map_err(io_err)?;
    drop(file);
    tokio::fs::rename(&tmp, path).await.map_err(io_err)?;
    Ok(())
}

fn already_initialized() -> Error {
    Error::InitState("Vault is already initialized".to_owned())
}

/// Reported as `build_date` (no build timestamp is embedded, so builds stay reproducible).
const BUILD_DATE: &str = "1970-01-01T00:00:00Z";

/// A share as clients send it: hex, or base64 when it is not hex of a plausible length
/// (Vault's rule, so a base64 string that happens to be valid hex still works).
fn decode_share(text: &str) -> Result<Zeroizing<Vec<u8>>, Error> {
    if let Some(bytes) = hex::decode(text)
        && (16..=KEY_LEN + 1).contains(&bytes.len())
    {
        return Ok(Zeroizing::new(bytes));
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()
        .filter(|bytes| !bytes.is_empty())
        .map(Zeroizing::new)
        .ok_or_else(|| {
            Error::InvalidParameter("'key' must be a valid hex or base64 string".to_owned())
        })
}

// ---- HTTP (unauthenticated; routed in routes.rs) -------------------------------------------

type Body = RawBody<Error>;

/// A JSON object body; empty means `{}`. Nulls read as absent (via `fields`).
fn body_data(body: &[u8]) -> Result<Data, Error> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Data::new());
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::InvalidParameter(
            "failed to parse JSON input: expected a JSON object".to_owned(),
        )),
        Err(err) => Err(Error::InvalidParameter(format!(
            "failed to parse JSON input: {err}"
        ))),
    }
}

fn json(value: &impl Serialize) -> Response {
    http_kit::ApiJson::<_, Error>::new(value).into_response()
}

/// `GET /v1/sys/seal-status`.
pub(crate) async fn read_seal_status(
    AxumState(state): AxumState<State>,
) -> Result<Response, Error> {
    Ok(json(&state.seal().status(&state).await?))
}

/// `GET /v1/sys/init`: `{"initialized": bool}`.
pub(crate) async fn read_init(AxumState(state): AxumState<State>) -> Result<Response, Error> {
    let initialized = state.seal().is_initialized().await?;
    Ok(json(&serde_json::json!({ "initialized": initialized })))
}

/// Fields of `sys/init` that only make sense for PGP-wrapped keys or auto seals.
const UNSUPPORTED_INIT_FIELDS: &[&str] = &["pgp_keys", "root_token_pgp_key", "recovery_pgp_keys"];

/// `PUT|POST /v1/sys/init` `{secret_shares, secret_threshold}`.
pub(crate) async fn write_init(
    AxumState(state): AxumState<State>,
    body: Body,
) -> Result<Response, Error> {
    let data = body_data(&body.bytes)?;
    for name in UNSUPPORTED_INIT_FIELDS {
        let given = match data.get(*name) {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::String(s)) => !s.is_empty(),
            Some(serde_json::Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if given {
            return Err(Error::InvalidParameter(format!(
                "{name} is not supported: PGP-encrypted keys are not available"
            )));
        }
    }
    let recovery_shares = fields::int(&data, "recovery_shares")?.unwrap_or(0);
    let recovery_threshold = fields::int(&data, "recovery_threshold")?.unwrap_or(0);
    if recovery_shares != 0 || recovery_threshold != 0 {
        return Err(Error::InvalidParameter(
            "parameters recovery_shares,recovery_threshold not applicable to seal type shamir"
                .to_owned(),
        ));
    }
    if fields::int(&data, "stored_shares")?.unwrap_or(0) != 0 {
        return Err(Error::InvalidParameter(
            "invalid seal configuration: stored keys are not supported by the shamir seal"
                .to_owned(),
        ));
    }
    let shares = fields::int(&data, "secret_shares")?.unwrap_or(0);
    let threshold = fields::int(&data, "secret_threshold")?.unwrap_or(0);
    let (shares, threshold) = validate_config(shares, threshold)?;
    if state.seal().is_initialized().await? {
        return Err(already_initialized());
    }
    Ok(json(&state.seal().init(&state, shares, threshold).await?))
}

/// Vault's `SealConfig.Validate`, with its messages.
fn validate_config(shares: i64, threshold: i64) -> Result<(u8, u8), Error> {
    let invalid = |why: &str| {
        Err(Error::InvalidParameter(format!(
            "invalid seal configuration: {why}"
        )))
    };
    if shares < 1 {
        return invalid("shares must be at least one");
    }
    if threshold < 1 {
        return invalid("threshold must be at least one");
    }
    if shares > 1 && threshold == 1 {
        return invalid("threshold must be greater than one for multiple shares");
    }
    if shares > 255 {
        return invalid("shares must be less than 256");
    }
    if threshold > 255 {
        return invalid("threshold must be less than 256");
    }
    if threshold > shares {
        return invalid("threshold cannot be larger than shares");
    }
    match (u8::try_from(shares), u8::try_from(threshold)) {
        (Ok(s), Ok(t)) => Ok((s, t)),
        _ => invalid("shares must be less than 256"),
    }
}

/// `PUT|POST /v1/sys/unseal` `{key, reset, migrate}` → the seal status.
pub(crate) async fn write_unseal(
    AxumState(state): AxumState<State>,
    body: Body,
) -> Result<Response, Error> {
    let data = body_data(&body.bytes)?;
    let reset = fields::bool(&data, "reset")?.unwrap_or(false);
    let migrate = fields::bool(&data, "migrate")?.unwrap_or(false);
    let key = fields::string(&data, "key")?.unwrap_or_default();
    let seal = state.seal();
    if reset {
        seal.reset_progress();
        return Ok(json(&seal.status(&state).await?));
    }
    if migrate {
        return Err(Error::InvalidParameter(
            "Can not perform a seal migration when Vault is not in migration mode".to_owned(),
        ));
    }
    if key.is_empty() {
        return Err(Error::InvalidParameter(
            "'key' must be specified in request body as JSON, or 'reset' set to true".to_owned(),
        ));
    }
    let share = decode_share(key.trim())?;
    seal.submit_share(&state, &share).await?;
    Ok(json(&seal.status(&state).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_decode_from_hex_or_base64() {
        let raw: Vec<u8> = (1..=33).collect();
        assert_eq!(
            decode_share(&hex::encode(&raw)).unwrap().as_slice(),
            raw.as_slice()
        );
        let b64 = base64::engine::general_purpose::STANDARD.encode(&raw);
        assert_eq!(decode_share(&b64).unwrap().as_slice(), raw.as_slice());
        assert!(decode_share("!!!").is_err());
    }

    #[test]
    fn seal_config_validation_uses_vaults_messages() {
        assert!(validate_config(5, 3).is_ok());
        assert!(validate_config(1, 1).is_ok());
        let msg = |s, t| validate_config(s, t).unwrap_err().to_string();
        assert_eq!(
            msg(0, 0),
            "invalid seal configuration: shares must be at least one"
        );
        assert_eq!(
            msg(3, 1),
            "invalid seal configuration: threshold must be greater than one for multiple shares"
        );
        assert_eq!(
            msg(3, 4),
            "invalid seal configuration: threshold cannot be larger than shares"
        );
        assert_eq!(
            msg(300, 3),
            "invalid seal configuration: shares must be less than 256"
        );
    }

    #[test]
    fn any_threshold_of_shares_recombines_and_fewer_or_wrong_do_not() {
        let secret: Vec<u8> = (0..32).collect();
        let shares: Vec<Zeroizing<Vec<u8>>> = blahaj::Sharks(3)
            .dealer(&secret)
            .take(5)
            .map(|s| Zeroizing::new(Vec::from(&s)))
            .collect();
        let config = SealConfig {
            version: 1,
            secret_shares: 5,
            secret_threshold: 3,
        };
        for pick in [[0, 1, 2], [0, 3, 4], [4, 2, 1]] {
            let parts: Vec<_> = pick.iter().map(|&i| shares[i].clone()).collect();
            assert_eq!(
                combine(config, &parts).unwrap().as_slice(),
                secret.as_slice()
            );
        }
        assert!(combine(config, &shares[..2]).is_err());
        let dup = vec![shares[0].clone(), shares[0].clone(), shares[1].clone()];
        assert!(combine(config, &dup).is_err());
        let short = vec![Zeroizing::new(vec![1_u8; 5]); 3];
        assert!(combine(config, &short).is_err());
    }
}
