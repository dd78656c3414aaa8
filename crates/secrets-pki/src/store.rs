//! Every storage key of a pki mount and the JSON record stored under it, with the plain reads
//! and writes of each (the model below the handlers).
//!
//! Keys (relative to the mount's view):
//! - `config/issuers` ([`IssuersConfig`]), `config/keys` ([`KeysConfig`]), `config/urls`
//!   ([`UrlsConfig`]), `config/crl` ([`CrlConfig`]);
//! - `issuer/<id>` ([`IssuerRecord`]), `key/<id>` ([`KeyRecord`]);
//! - `role/<name>` (the role record, `roles.rs`);
//! - `certs/<serial>` ([`CertRecord`]) and `revoked/<serial>` ([`RevokedRecord`]), serials
//!   hyphenated (`17-67-...`), so `LIST certs` answers Vault's hyphenated keys;
//! - `crls/<issuer id>` ([`CrlRecord`]): one CRL per issuer, with its own entries, so a
//!   revocation rebuilds only its issuer's CRL.
//!
//! Invariants: issuer and key ids are UUIDs; issuer and key names are unique within the mount
//! and never `default`; every record is versioned JSON, unknown fields ignored. The issuer
//! name index ([`Store::issuer_named`]) is a hint, never a source: an entry is used only after
//! the stored record it points at was read and still carries the name, so a rename, delete,
//! import or restore by anyone cannot make a name resolve to the wrong issuer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use secrets_sdk::{EngineError, EngineStorage};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::cert::CertInfo;
use crate::keys::PrivateKey;
use crate::template::Urls;

pub(crate) const ISSUER_PREFIX: &str = "issuer/";
pub(crate) const KEY_PREFIX: &str = "key/";
pub(crate) const ROLE_PREFIX: &str = "role/";
pub(crate) const CERT_PREFIX: &str = "certs/";
pub(crate) const REVOKED_PREFIX: &str = "revoked/";
pub(crate) const CRL_PREFIX: &str = "crls/";
const ISSUERS_CONFIG: &str = "config/issuers";
const KEYS_CONFIG: &str = "config/keys";
const URLS_CONFIG: &str = "config/urls";
const CRL_CONFIG: &str = "config/crl";

/// The literal issuer (and key) reference meaning "the mount's default".
pub(crate) const DEFAULT_REF: &str = "default";

/// The mount's typed store.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    storage: Arc<dyn EngineStorage>,
    /// Issuer name to id, as last seen; checked against storage on every use.
    issuer_names: Arc<Mutex<HashMap<String, String>>>,
}

/// Decodes the record stored under `key`.
pub(crate) fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, EngineError> {
    serde_json::from_slice(bytes)
        .map_err(|err| EngineError::Internal(format!("corrupt record {key}: {err}")))
}

/// Only the name of an issuer record, to check the name index without decoding the rest.
#[derive(Deserialize)]
struct NameOnly {
    #[serde(default)]
    name: String,
}

impl Store {
    pub(crate) fn new(storage: Arc<dyn EngineStorage>) -> Store {
        Store {
            storage,
            issuer_names: Arc::default(),
        }
    }

    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, EngineError> {
        match self.storage.get(key).await? {
            None => Ok(None),
            Some(bytes) => decode(key, &bytes).map(Some),
        }
    }

    /// The stored bytes under `key`, undecoded (for caches that compare them).
    pub(crate) async fn raw(&self, key: &str) -> Result<Option<Vec<u8>>, EngineError> {
        Ok(self.storage.get(key).await?)
    }

    pub(crate) async fn put<T: Serialize>(&self, key: &str, value: &T) -> Result<(), EngineError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|err| EngineError::Internal(format!("encoding {key}: {err}")))?;
        Ok(self.storage.put(key, &bytes).await?)
    }

    pub(crate) async fn delete(&self, key: &str) -> Result<(), EngineError> {
        Ok(self.storage.delete(key).await?)
    }

    pub(crate) async fn list(&self, prefix: &str) -> Result<Vec<String>, EngineError> {
        Ok(self.storage.list(prefix).await?)
    }

    pub(crate) async fn exists(&self, key: &str) -> Result<bool, EngineError> {
        Ok(self.storage.get(key).await?.is_some())
    }

    // Configuration.

    pub(crate) async fn issuers_config(&self) -> Result<IssuersConfig, EngineError> {
        Ok(self.get(ISSUERS_CONFIG).await?.unwrap_or_default())
    }

    pub(crate) async fn put_issuers_config(
        &self,
        config: &IssuersConfig,
    ) -> Result<(), EngineError> {
        self.put(ISSUERS_CONFIG, config).await
    }

    pub(crate) async fn keys_config(&self) -> Result<KeysConfig, EngineError> {
        Ok(self.get(KEYS_CONFIG).await?.unwrap_or_default())
    }

    pub(crate) async fn put_keys_config(&self, config: &KeysConfig) -> Result<(), EngineError> {
        self.put(KEYS_CONFIG, config).await
    }

    pub(crate) async fn urls_config(&self) -> Result<UrlsConfig, EngineError> {
        Ok(self.get(URLS_CONFIG).await?.unwrap_or_default())
    }

    pub(crate) async fn put_urls_config(&self, config: &UrlsConfig) -> Result<(), EngineError> {
        self.put(URLS_CONFIG, config).await
    }

    pub(crate) async fn crl_config(&self) -> Result<CrlConfig, EngineError> {
        Ok(self.get(CRL_CONFIG).await?.unwrap_or_default())
    }

    pub(crate) async fn put_crl_config(&self, config: &CrlConfig) -> Result<(), EngineError> {
        self.put(CRL_CONFIG, config).await
    }

    // Issuers and keys.

    pub(crate) async fn issuer_ids(&self) -> Result<Vec<String>, EngineError> {
        Ok(self
            .list(ISSUER_PREFIX)
            .await?
            .into_iter()
            .filter(|id| !id.ends_with('/'))
            .collect())
    }

    pub(crate) async fn issuer(&self, id: &str) -> Result<Option<IssuerRecord>, EngineError> {
        self.get(&issuer_key(id)).await
    }

    pub(crate) async fn issuers(&self) -> Result<Vec<IssuerRecord>, EngineError> {
        let mut out = Vec::new();
        for id in self.issuer_ids().await? {
            if let Some(issuer) = self.issuer(&id).await? {
                out.push(issuer);
            }
        }
        Ok(out)
    }

    pub(crate) async fn put_issuer(&self, issuer: &IssuerRecord) -> Result<(), EngineError> {
        self.put(&format!("{ISSUER_PREFIX}{}", issuer.id), issuer)
            .await
    }

    pub(crate) async fn delete_issuer(&self, id: &str) -> Result<(), EngineError> {
        self.delete(&format!("{ISSUER_PREFIX}{id}")).await?;
        self.delete(&format!("{CRL_PREFIX}{id}")).await
    }

    /// An issuer reference (`default`, an id or a name) to the issuer's id; the error is
    /// Vault's message.
    pub(crate) async fn resolve_issuer(
        &self,
        reference: &str,
    ) -> Result<Option<String>, EngineError> {
        if reference == DEFAULT_REF {
            let config = self.issuers_config().await?;
            if config.default.is_empty() {
                return Ok(None);
            }
            return Ok(Some(config.default));
        }
        if self.exists(&issuer_key(reference)).await? {
            return Ok(Some(reference.to_owned()));
        }
        Ok(self.issuer_named(reference).await?.map(|(id, _)| id))
    }

    /// The id and stored bytes of the issuer named `name`: through the name index when the
    /// record it points at still has that name, else by reading every issuer (which refreshes
    /// the index).
    pub(crate) async fn issuer_named(
        &self,
        name: &str,
    ) -> Result<Option<(String, Vec<u8>)>, EngineError> {
        let hint = self.names().get(name).cloned();
        if let Some(id) = hint {
            let key = issuer_key(&id);
            if let Some(bytes) = self.raw(&key).await?
                && decode::<NameOnly>(&key, &bytes)?.name == name
            {
                return Ok(Some((id, bytes)));
            }
        }
        let mut found = None;
        let mut index = HashMap::new();
        for id in self.issuer_ids().await? {
            let key = issuer_key(&id);
            let Some(bytes) = self.raw(&key).await? else {
                continue;
            };
            let record: NameOnly = decode(&key, &bytes)?;
            if record.name == name && found.is_none() {
                found = Some((id.clone(), bytes));
            }
            if !record.name.is_empty() {
                index.entry(record.name).or_insert(id);
            }
        }
        *self.names() = index;
        Ok(found)
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // The index is a hint: a panic elsewhere while holding it leaves nothing to repair.
        self.issuer_names
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// [`Store::resolve_issuer`], answering Vault's 400 when nothing matches.
    pub(crate) async fn require_issuer(
        &self,
        reference: &str,
    ) -> Result<IssuerRecord, EngineError> {
        let not_found = || {
            if reference == DEFAULT_REF {
                EngineError::BadRequest("no default issuer currently configured".to_owned())
            } else {
                EngineError::BadRequest(format!(
                    "unable to find PKI issuer for reference: {reference}"
                ))
            }
        };
        let id = self
            .resolve_issuer(reference)
            .await?
            .ok_or_else(not_found)?;
        self.issuer(&id).await?.ok_or_else(not_found)
    }

    pub(crate) async fn key_ids(&self) -> Result<Vec<String>, EngineError> {
        Ok(self
            .list(KEY_PREFIX)
            .await?
            .into_iter()
            .filter(|id| !id.ends_with('/'))
            .collect())
    }

    pub(crate) async fn key(&self, id: &str) -> Result<Option<KeyRecord>, EngineError> {
        self.get(&format!("{KEY_PREFIX}{id}")).await
    }

    pub(crate) async fn keys(&self) -> Result<Vec<KeyRecord>, EngineError> {
        let mut out = Vec::new();
        for id in self.key_ids().await? {
            if let Some(key) = self.key(&id).await? {
                out.push(key);
            }
        }
        Ok(out)
    }

    pub(crate) async fn put_key(&self, key: &KeyRecord) -> Result<(), EngineError> {
        self.put(&format!("{KEY_PREFIX}{}", key.id), key).await
    }

    /// A key reference (`default`, an id or a name) to the key's id.
    pub(crate) async fn resolve_key(&self, reference: &str) -> Result<Option<String>, EngineError> {
        if reference == DEFAULT_REF {
            let config = self.keys_config().await?;
            return Ok((!config.default.is_empty()).then_some(config.default));
        }
        if self.key(reference).await?.is_some() {
            return Ok(Some(reference.to_owned()));
        }
        Ok(self
            .keys()
            .await?
            .into_iter()
            .find(|key| key.name == reference)
            .map(|key| key.id))
    }

    // Certificates.

    pub(crate) async fn cert(&self, serial: &str) -> Result<Option<CertRecord>, EngineError> {
        self.get(&format!("{CERT_PREFIX}{serial}")).await
    }

    pub(crate) async fn put_cert(
        &self,
        serial: &str,
        record: &CertRecord,
    ) -> Result<(), EngineError> {
        self.put(&format!("{CERT_PREFIX}{serial}"), record).await
    }

    pub(crate) async fn revoked(&self, serial: &str) -> Result<Option<RevokedRecord>, EngineError> {
        self.get(&format!("{REVOKED_PREFIX}{serial}")).await
    }

    pub(crate) async fn crl(&self, issuer_id: &str) -> Result<Option<CrlRecord>, EngineError> {
        self.get(&format!("{CRL_PREFIX}{issuer_id}")).await
    }

    pub(crate) async fn put_crl(
        &self,
        issuer_id: &str,
        record: &CrlRecord,
    ) -> Result<(), EngineError> {
        self.put(&format!("{CRL_PREFIX}{issuer_id}"), record).await
    }
}

/// The storage key of issuer `id`.
pub(crate) fn issuer_key(id: &str) -> String {
    format!("{ISSUER_PREFIX}{id}")
}

/// The storage key of key `id`.
pub(crate) fn key_key(id: &str) -> String {
    format!("{KEY_PREFIX}{id}")
}

fn version_one() -> u32 {
    1
}

/// `config/issuers`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct IssuersConfig {
    #[serde(default = "version_one")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) default: String,
    #[serde(default)]
    pub(crate) default_follows_latest_issuer: bool,
}

/// `config/keys`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct KeysConfig {
    #[serde(default)]
    pub(crate) default: String,
}

/// `config/urls` (also an issuer's own AIA override).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UrlsConfig {
    #[serde(default)]
    pub(crate) issuing_certificates: Vec<String>,
    #[serde(default)]
    pub(crate) crl_distribution_points: Vec<String>,
    #[serde(default)]
    pub(crate) ocsp_servers: Vec<String>,
    #[serde(default)]
    pub(crate) enable_templating: bool,
}

impl UrlsConfig {
    /// The URLs to embed for `issuer_id`, with `{{issuer_id}}` filled in when templating.
    pub(crate) fn urls_for(&self, issuer_id: &str) -> Urls {
        let fill = |list: &[String]| -> Vec<String> {
            list.iter()
                .map(|url| {
                    if self.enable_templating {
                        url.replace("{{issuer_id}}", issuer_id)
                    } else {
                        url.clone()
                    }
                })
                .collect()
        };
        Urls {
            issuing_certificates: fill(&self.issuing_certificates),
            crl_distribution_points: fill(&self.crl_distribution_points),
            ocsp_servers: fill(&self.ocsp_servers),
        }
    }
}

/// `config/crl`, with Vault's defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CrlConfig {
    pub(crate) expiry: String,
    pub(crate) disable: bool,
    pub(crate) ocsp_disable: bool,
    pub(crate) auto_rebuild: bool,
    pub(crate) auto_rebuild_grace_period: String,
    pub(crate) ocsp_expiry: String,
    pub(crate) enable_delta: bool,
    pub(crate) delta_rebuild_interval: String,
}

impl Default for CrlConfig {
    fn default() -> CrlConfig {
        CrlConfig {
            expiry: "72h".to_owned(),
            disable: false,
            ocsp_disable: false,
            auto_rebuild: false,
            auto_rebuild_grace_period: "12h".to_owned(),
            ocsp_expiry: "12h".to_owned(),
            enable_delta: false,
            delta_rebuild_interval: "15m".to_owned(),
        }
    }
}

/// `issuer/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct IssuerRecord {
    #[serde(default = "version_one")]
    pub(crate) version: u32,
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) name: String,
    /// Empty when the mount holds no key for this certificate.
    #[serde(default)]
    pub(crate) key_id: String,
    /// PEM, without the final newline.
    pub(crate) certificate: String,
    /// PEMs: this certificate first, then its issuers as far as the mount knows them.
    #[serde(default)]
    pub(crate) ca_chain: Vec<String>,
    #[serde(default)]
    pub(crate) manual_chain: Vec<String>,
    pub(crate) leaf_not_after_behavior: String,
    /// Vault's usage names, sorted: `crl-signing`, `issuing-certificates`, `ocsp-signing`,
    /// `read-only`.
    pub(crate) usage: Vec<String>,
    #[serde(default)]
    pub(crate) revocation_signature_algorithm: String,
    #[serde(default)]
    pub(crate) revoked: bool,
    #[serde(default)]
    pub(crate) revocation_time: i64,
    pub(crate) serial_number: String,
    /// This issuer's own AIA URLs, overriding `config/urls` when set.
    #[serde(default)]
    pub(crate) urls: Option<UrlsConfig>,
}

/// Every usage an issuer gets by default.
pub(crate) fn all_usages() -> Vec<String> {
    [
        "crl-signing",
        "issuing-certificates",
        "ocsp-signing",
        "read-only",
    ]
    .map(String::from)
    .to_vec()
}

impl IssuerRecord {
    pub(crate) fn cert(&self) -> Result<CertInfo, EngineError> {
        CertInfo::from_pem(&self.certificate)
            .map_err(|err| EngineError::Internal(format!("stored issuer {}: {err}", self.id)))
    }

    pub(crate) fn has_usage(&self, usage: &str) -> bool {
        self.usage.iter().any(|u| u == usage)
    }
}

/// `key/<id>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct KeyRecord {
    #[serde(default = "version_one")]
    pub(crate) version: u32,
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) name: String,
    pub(crate) key_type: String,
    #[serde(default)]
    pub(crate) key_bits: u32,
    /// PKCS#8 PEM.
    pub(crate) private_key: String,
}

impl KeyRecord {
    pub(crate) fn private_key(&self) -> Result<PrivateKey, EngineError> {
        PrivateKey::from_pem(&self.private_key)
            .map_err(|err| EngineError::Internal(format!("stored key {}: {err}", self.id)))
    }
}

/// `certs/<serial>`: an issued certificate (PEM), who issued it and when it expires.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CertRecord {
    pub(crate) certificate: String,
    #[serde(default)]
    pub(crate) issuer_id: String,
    /// Unix seconds.
    pub(crate) not_after: i64,
}

/// `revoked/<serial>`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RevokedRecord {
    pub(crate) serial_number: String,
    pub(crate) certificate: String,
    pub(crate) issuer_id: String,
    /// Unix seconds.
    pub(crate) revocation_time: i64,
    pub(crate) revocation_time_rfc3339: String,
    pub(crate) not_after: i64,
}

/// One entry of a stored CRL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CrlEntry {
    /// Hyphenated.
    pub(crate) serial: String,
    pub(crate) revocation_time: i64,
    /// When the revoked certificate expires (tidy drops the entry after that).
    pub(crate) not_after: i64,
}

/// `crls/<issuer id>`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct CrlRecord {
    pub(crate) number: u64,
    /// Base64 DER of the current CRL (empty until first built).
    #[serde(default)]
    pub(crate) der: String,
    #[serde(default)]
    pub(crate) entries: Vec<CrlEntry>,
}
