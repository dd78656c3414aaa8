//! Automated snapshot schedules (`sys/storage/raft/snapshot-auto/config/:name`) and their
//! status: parsing and validation of a write, the stored records, and the read answers.
//!
//! Names: the spec's storage types and fields are canonical (`cloud-a-object`,
//! `cloud_a_bucket`, ...), upstream's are accepted aliases (`aws-s3`, `aws_s3_bucket`, ...;
//! docs/design.md §D2). When a request carries both spellings of one field, the spec's wins.
//! A read answers in the spelling the last write used, so a Vault client reads back its own
//! names.
//!
//! Storage (through the barrier, so credentials are encrypted at rest):
//! `core/snapshot-auto/config/<name>` and `core/snapshot-auto/status/<name>`.
//!
//! Invariants: a stored schedule passed [`parse`]; credentials (secret keys, session tokens,
//! account keys, service account keys, and the access key id) are never in a read answer; an
//! update keeps every setting it does not name, credentials included.

use std::collections::BTreeMap;

use secrets_sdk::{Data, fields};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, State};

const CONFIG_PREFIX: &str = "core/snapshot-auto/config/";
const STATUS_PREFIX: &str = "core/snapshot-auto/status/";

/// The default start of snapshot names (the spec's; Vault's is `vault-snapshot`).
pub(crate) const DEFAULT_FILE_PREFIX: &str = "store-snapshot";

/// Where snapshots go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum StorageType {
    Local,
    /// S3 and S3-compatible stores.
    CloudA,
    /// Azure blob storage.
    CloudB,
    /// Google Cloud Storage.
    CloudC,
}

impl StorageType {
    fn parse(raw: &str) -> Option<(StorageType, bool)> {
        Some(match raw {
            "local" => (StorageType::Local, false),
            "cloud-a-object" => (StorageType::CloudA, false),
            "cloud-b-blob" => (StorageType::CloudB, false),
            "cloud-c-object" => (StorageType::CloudC, false),
            "aws-s3" => (StorageType::CloudA, true),
            "azure-blob" => (StorageType::CloudB, true),
            "google-gcs" => (StorageType::CloudC, true),
            _ => return None,
        })
    }

    /// The type's name in the spec's spelling or upstream's.
    pub(crate) fn name(self, upstream: bool) -> &'static str {
        match (self, upstream) {
            (StorageType::Local, _) => "local",
            (StorageType::CloudA, false) => "cloud-a-object",
            (StorageType::CloudB, false) => "cloud-b-blob",
            (StorageType::CloudC, false) => "cloud-c-object",
            (StorageType::CloudA, true) => "aws-s3",
            (StorageType::CloudB, true) => "azure-blob",
            (StorageType::CloudC, true) => "google-gcs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Bool,
}

/// One storage-type setting: its spec name (the key it is stored under), upstream's name,
/// its kind, whether it is a credential (never read back), whether it is required.
#[derive(Debug)]
struct Field {
    canon: &'static str,
    upstream: &'static str,
    kind: Kind,
    secret: bool,
    required: bool,
}

const fn field(
    canon: &'static str,
    upstream: &'static str,
    kind: Kind,
    secret: bool,
    required: bool,
) -> Field {
    Field {
        canon,
        upstream,
        kind,
        secret,
        required,
    }
}

const CLOUD_A: &[Field] = &[
    field("cloud_a_bucket", "aws_s3_bucket", Kind::Str, false, true),
    field("cloud_a_region", "aws_s3_region", Kind::Str, false, true),
    field(
        "cloud_a_access_key_id",
        "aws_access_key_id",
        Kind::Str,
        true,
        false,
    ),
    field(
        "cloud_a_secret_access_key",
        "aws_secret_access_key",
        Kind::Str,
        true,
        false,
    ),
    field(
        "cloud_a_session_token",
        "aws_session_token",
        Kind::Str,
        true,
        false,
    ),
    field(
        "cloud_a_endpoint",
        "aws_s3_endpoint",
        Kind::Str,
        false,
        false,
    ),
    field(
        "cloud_a_disable_tls",
        "aws_s3_disable_tls",
        Kind::Bool,
        false,
        false,
    ),
    field(
        "cloud_a_force_path_style",
        "aws_s3_force_path_style",
        Kind::Bool,
        false,
        false,
    ),
    field(
        "cloud_a_enable_kms",
        "aws_s3_enable_kms",
        Kind::Bool,
        false,
        false,
    ),
    field("cloud_a_kms_key", "aws_s3_kms_key", Kind::Str, false, false),
    field(
        "cloud_a_server_side_encryption",
        "aws_s3_server_side_encryption",
        Kind::Bool,
        false,
        false,
    ),
];

const CLOUD_B: &[Field] = &[
    field(
        "cloud_b_container_name",
        "azure_container_name",
        Kind::Str,
        false,
        true,
    ),
    field(
        "cloud_b_account_name",
        "azure_account_name",
        Kind::Str,
        false,
        false,
    ),
    field(
        "cloud_b_account_key",
        "azure_account_key",
        Kind::Str,
        true,
        false,
    ),
    field(
        "cloud_b_blob_environment",
        "azure_blob_environment",
        Kind::Str,
        false,
        false,
    ),
    field(
        "cloud_b_endpoint",
        "azure_endpoint",
        Kind::Str,
        false,
        false,
    ),
];

const CLOUD_C: &[Field] = &[
    field(
        "cloud_c_bucket",
        "google_gcs_bucket",
        Kind::Str,
        false,
        true,
    ),
    field(
        "cloud_c_service_account_key",
        "google_service_account_key",
        Kind::Str,
        true,
        false,
    ),
    field(
        "cloud_c_endpoint",
        "google_endpoint",
        Kind::Str,
        false,
        false,
    ),
    field(
        "cloud_c_disable_tls",
        "google_disable_tls",
        Kind::Bool,
        false,
        false,
    ),
];

fn fields_of(kind: StorageType) -> &'static [Field] {
    match kind {
        StorageType::Local => &[],
        StorageType::CloudA => CLOUD_A,
        StorageType::CloudB => CLOUD_B,
        StorageType::CloudC => CLOUD_C,
    }
}

/// One automated snapshot schedule, as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct AutoConfig {
    pub(crate) version: u32,
    pub(crate) name: String,
    pub(crate) storage_type: StorageType,
    /// The last write used upstream's names (reads answer in them).
    pub(crate) upstream_names: bool,
    pub(crate) interval_secs: u64,
    pub(crate) retain: u64,
    pub(crate) path_prefix: String,
    pub(crate) file_prefix: String,
    /// Bytes the `local` type may use for this schedule's snapshots (0 for the others).
    pub(crate) local_max_space: u64,
    /// The storage type's settings by spec name: strings and bools.
    pub(crate) settings: BTreeMap<String, Value>,
    /// When the schedule was last written (Unix nanoseconds): the first snapshot is due one
    /// interval after it.
    pub(crate) written_ns: i64,
}

impl AutoConfig {
    /// A string setting by spec name (`None` when unset or empty).
    pub(crate) fn text(&self, canon: &str) -> Option<&str> {
        self.settings
            .get(canon)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// A bool setting by spec name (false when unset).
    /// `canon`'s name as the writer spelled the schedule's fields (upstream's names when it
    /// used them).
    pub(crate) fn spelled(&self, canon: &str) -> String {
        if !self.upstream_names {
            return canon.to_owned();
        }
        fields_of(self.storage_type)
            .iter()
            .find(|f| f.canon == canon)
            .map_or_else(|| canon.to_owned(), |f| f.upstream.to_owned())
    }

    pub(crate) fn flag(&self, canon: &str) -> bool {
        self.settings
            .get(canon)
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The read answer: the common fields and the type's settings that are not credentials.
    pub(crate) fn to_data(&self) -> Data {
        let mut data = Data::new();
        data.insert(
            "storage_type".to_owned(),
            Value::from(self.storage_type.name(self.upstream_names)),
        );
        data.insert("interval".to_owned(), Value::from(self.interval_secs));
        data.insert("retain".to_owned(), Value::from(self.retain));
        data.insert(
            "path_prefix".to_owned(),
            Value::from(self.path_prefix.clone()),
        );
        data.insert(
            "file_prefix".to_owned(),
            Value::from(self.file_prefix.clone()),
        );
        data.insert(
            "local_max_space".to_owned(),
            Value::from(self.local_max_space),
        );
        for field in fields_of(self.storage_type) {
            if field.secret {
                continue;
            }
            let name = if self.upstream_names {
                field.upstream
            } else {
                field.canon
            };
            let value = self
                .settings
                .get(field.canon)
                .cloned()
                .unwrap_or(match field.kind {
                    Kind::Str => Value::from(""),
                    Kind::Bool => Value::Bool(false),
                });
            data.insert(name.to_owned(), value);
        }
        data
    }
}

/// A schedule's last and current runs, as stored (times in Unix nanoseconds, 0 for never).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Status {
    pub(crate) version: u32,
    pub(crate) last_start_ns: i64,
    pub(crate) last_end_ns: i64,
    pub(crate) last_error: String,
    pub(crate) last_url: String,
    pub(crate) current_start_ns: i64,
    pub(crate) current_url: String,
}

impl Status {
    pub(crate) fn to_data(&self) -> Data {
        let mut data = Data::new();
        let time = |ns: i64| Value::from(format_time(ns));
        data.insert("last_snapshot_start".to_owned(), time(self.last_start_ns));
        data.insert("last_snapshot_end".to_owned(), time(self.last_end_ns));
        data.insert(
            "last_snapshot_error".to_owned(),
            Value::from(self.last_error.clone()),
        );
        data.insert(
            "last_snapshot_url".to_owned(),
            Value::from(self.last_url.clone()),
        );
        data.insert("snapshot_start".to_owned(), time(self.current_start_ns));
        data.insert(
            "snapshot_url".to_owned(),
            Value::from(self.current_url.clone()),
        );
        data
    }
}

/// RFC 3339 with offset; never is Go's zero time, as Vault renders an unset `time.Time`.
fn format_time(ns: i64) -> String {
    if ns <= 0 {
        "0001-01-01T00:00:00Z".to_owned()
    } else {
        stdx::time::format_rfc3339_nanos(ns)
    }
}

fn bad(message: impl Into<String>) -> Error {
    Error::InvalidParameter(message.into())
}

/// Checks a schedule's name (one path segment).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.contains('/') {
        return Err(bad("invalid snapshot configuration name"));
    }
    Ok(())
}

/// The schedule a write asks for, on top of `existing` (same name) when there is one; every
/// check of the module docs. `now_ns` stamps it.
pub(crate) fn parse(
    name: &str,
    data: &Data,
    existing: Option<&AutoConfig>,
    now_ns: i64,
) -> Result<AutoConfig, Error> {
    check_name(name)?;
    let storage_type = match fields::string(data, "storage_type")? {
        Some(raw) if !raw.is_empty() => Some(
            StorageType::parse(&raw).ok_or_else(|| bad(format!("unknown storage_type {raw:?}")))?,
        ),
        _ => None,
    };
    let (storage_type, upstream_names) = match (storage_type, existing) {
        (Some(parsed), _) => parsed,
        (None, Some(old)) => (old.storage_type, old.upstream_names),
        (None, None) => return Err(bad("storage_type is required")),
    };
    // Settings carry over only within one storage type.
    let base = existing.filter(|old| old.storage_type == storage_type);

    let interval_secs = match fields::duration(data, "interval")? {
        Some(interval) => interval.as_secs(),
        None => base.map_or(0, |old| old.interval_secs),
    };
    if interval_secs == 0 {
        return Err(bad("interval is required and must be at least one second"));
    }
    let retain = match fields::int(data, "retain")? {
        Some(retain) if retain < 1 => return Err(bad("retain must be at least 1")),
        Some(retain) => retain as u64,
        None => base.map_or(1, |old| old.retain),
    };
    let path_prefix = match fields::string(data, "path_prefix")? {
        Some(prefix) => prefix,
        None => base.map(|old| old.path_prefix.clone()).unwrap_or_default(),
    };
    if path_prefix.trim().is_empty() {
        return Err(bad("path_prefix is required"));
    }
    if matches!(storage_type, StorageType::CloudB | StorageType::CloudC)
        && !path_prefix.ends_with('/')
    {
        return Err(bad(format!(
            "path_prefix must end with a slash for storage_type {}",
            storage_type.name(upstream_names)
        )));
    }
    let file_prefix = match fields::string(data, "file_prefix")? {
        Some(prefix) if !prefix.is_empty() => prefix,
        _ => base.map_or_else(
            || DEFAULT_FILE_PREFIX.to_owned(),
            |old| old.file_prefix.clone(),
        ),
    };
    if file_prefix.contains('/') {
        return Err(bad("file_prefix must not contain a slash"));
    }
    let local_max_space = if storage_type == StorageType::Local {
        let space = match fields::int(data, "local_max_space")? {
            Some(space) => space,
            None => base.map_or(0, |old| old.local_max_space as i64),
        };
        if space <= 0 {
            return Err(bad(
                "local_max_space is required for storage_type local and must be above zero",
            ));
        }
        space as u64
    } else {
        0
    };

    let mut settings = base.map(|old| old.settings.clone()).unwrap_or_default();
    for field in fields_of(storage_type) {
        let value = match field.kind {
            Kind::Str => {
                let canon = fields::string(data, field.canon)?;
                let value = match canon {
                    Some(value) => Some(value),
                    None => fields::string(data, field.upstream)?,
                };
                value.map(Value::from)
            }
            Kind::Bool => {
                let canon = fields::bool(data, field.canon)?;
                let value = match canon {
                    Some(value) => Some(value),
                    None => fields::bool(data, field.upstream)?,
                };
                value.map(Value::Bool)
            }
        };
        if let Some(value) = value {
            settings.insert(field.canon.to_owned(), value);
        }
        let present = settings
            .get(field.canon)
            .is_some_and(|v| v.as_str().is_none_or(|s| !s.is_empty()));
        if field.required && !present {
            let name = if upstream_names {
                field.upstream
            } else {
                field.canon
            };
            return Err(bad(format!(
                "{name} is required for storage_type {}",
                storage_type.name(upstream_names)
            )));
        }
    }
    let config = AutoConfig {
        version: 1,
        name: name.to_owned(),
        storage_type,
        upstream_names,
        interval_secs,
        retain,
        path_prefix,
        file_prefix,
        local_max_space,
        settings,
        written_ns: now_ns,
    };
    check_type_settings(&config)?;
    Ok(config)
}

/// The per-type rules beyond required fields.
fn check_type_settings(config: &AutoConfig) -> Result<(), Error> {
    let spelled = |canon: &str| config.spelled(canon);
    match config.storage_type {
        StorageType::CloudA => {
            if config.flag("cloud_a_enable_kms") && config.flag("cloud_a_server_side_encryption") {
                return Err(bad(format!(
                    "{} cannot be used with {}",
                    spelled("cloud_a_server_side_encryption"),
                    spelled("cloud_a_enable_kms")
                )));
            }
            if config.text("cloud_a_access_key_id").is_some()
                != config.text("cloud_a_secret_access_key").is_some()
            {
                return Err(bad(format!(
                    "{} and {} must be given together",
                    spelled("cloud_a_access_key_id"),
                    spelled("cloud_a_secret_access_key")
                )));
            }
        }
        StorageType::CloudC => {
            if let Some(key) = config.text("cloud_c_service_account_key")
                && serde_json::from_str::<serde_json::Map<String, Value>>(key).is_err()
            {
                return Err(bad(format!(
                    "{} is not a JSON key document",
                    spelled("cloud_c_service_account_key")
                )));
            }
        }
        // The blob environment and whether the target can be set up at all are checked by
        // `targets::check`, which knows the stores.
        StorageType::CloudB | StorageType::Local => {}
    }
    Ok(())
}

// ---- storage ---------------------------------------------------------------------------

fn corrupt(key: &str, err: impl std::fmt::Display) -> Error {
    Error::CorruptRecord {
        key: key.to_owned(),
        reason: err.to_string(),
    }
}

async fn load_json<T: serde::de::DeserializeOwned>(
    state: &State,
    key: &str,
) -> Result<Option<T>, Error> {
    match state.barrier().get(key).await? {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|err| corrupt(key, err)),
    }
}

async fn save_json<T: Serialize>(state: &State, key: &str, value: &T) -> Result<(), Error> {
    let bytes = serde_json::to_vec(value).map_err(|err| corrupt(key, err))?;
    state.barrier().put(key, &bytes).await
}

pub(crate) async fn load(state: &State, name: &str) -> Result<Option<AutoConfig>, Error> {
    load_json(state, &format!("{CONFIG_PREFIX}{name}")).await
}

pub(crate) async fn save(state: &State, config: &AutoConfig) -> Result<(), Error> {
    save_json(state, &format!("{CONFIG_PREFIX}{}", config.name), config).await
}

/// Deletes a schedule and its status (its snapshots stay where they are).
pub(crate) async fn delete(state: &State, name: &str) -> Result<(), Error> {
    state
        .barrier()
        .delete(&format!("{CONFIG_PREFIX}{name}"))
        .await?;
    state
        .barrier()
        .delete(&format!("{STATUS_PREFIX}{name}"))
        .await
}

pub(crate) async fn names(state: &State) -> Result<Vec<String>, Error> {
    state.barrier().list(CONFIG_PREFIX).await
}

pub(crate) async fn load_status(state: &State, name: &str) -> Result<Option<Status>, Error> {
    load_json(state, &format!("{STATUS_PREFIX}{name}")).await
}

pub(crate) async fn save_status(state: &State, name: &str, status: &Status) -> Result<(), Error> {
    save_json(state, &format!("{STATUS_PREFIX}{name}"), status).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: Value) -> Data {
        value.as_object().cloned().unwrap()
    }

    fn message(err: Error) -> String {
        err.to_string()
    }

    #[test]
    fn interval_reads_as_seconds_or_a_duration_and_retain_defaults_to_one() {
        let config = parse(
            "daily",
            &data(
                json!({"storage_type": "local", "interval": "24h", "path_prefix": "/tmp/s",
                         "local_max_space": 1000}),
            ),
            None,
            1,
        )
        .unwrap();
        assert_eq!(config.interval_secs, 86_400);
        assert_eq!(config.retain, 1);
        assert_eq!(config.file_prefix, DEFAULT_FILE_PREFIX);
        let config = parse(
            "n",
            &data(
                json!({"storage_type": "local", "interval": 90, "path_prefix": "/tmp/s",
                         "local_max_space": "1000", "retain": "3"}),
            ),
            None,
            1,
        )
        .unwrap();
        assert_eq!((config.interval_secs, config.retain), (90, 3));
    }

    #[test]
    fn required_fields_and_type_rules_are_400s_naming_the_field() {
        let cases = [
            (
                json!({"interval": 60, "path_prefix": "/x"}),
                "storage_type is required",
            ),
            (
                json!({"storage_type": "tape", "interval": 60, "path_prefix": "/x"}),
                "unknown storage_type",
            ),
            (
                json!({"storage_type": "local", "path_prefix": "/x", "local_max_space": 1}),
                "interval is required",
            ),
            (
                json!({"storage_type": "local", "interval": 60, "path_prefix": "/x"}),
                "local_max_space is required",
            ),
            (
                json!({"storage_type": "local", "interval": 60, "local_max_space": 1}),
                "path_prefix is required",
            ),
            (
                json!({"storage_type": "cloud-c-object", "interval": 60, "path_prefix": "p",
                       "cloud_c_bucket": "b"}),
                "must end with a slash",
            ),
            (
                json!({"storage_type": "aws-s3", "interval": 60, "path_prefix": "p",
                       "aws_s3_bucket": "b"}),
                "aws_s3_region is required for storage_type aws-s3",
            ),
            (
                json!({"storage_type": "cloud-a-object", "interval": 60, "path_prefix": "p",
                       "cloud_a_bucket": "b", "cloud_a_region": "r",
                       "cloud_a_enable_kms": true, "cloud_a_server_side_encryption": true}),
                "cannot be used with cloud_a_enable_kms",
            ),
            (
                json!({"storage_type": "azure-blob", "interval": 60, "path_prefix": "p/"}),
                "azure_container_name is required",
            ),
            (
                json!({"storage_type": "local", "interval": 60, "path_prefix": "/x",
                       "local_max_space": 1, "retain": 0}),
                "retain must be at least 1",
            ),
        ];
        for (body, want) in cases {
            let err = parse("n", &data(body.clone()), None, 1).unwrap_err();
            assert!(matches!(err, Error::InvalidParameter(_)), "{body}");
            assert!(message(err).contains(want), "{body}: want {want}");
        }
    }

    #[test]
    fn upstream_names_are_aliases_and_reads_answer_in_the_writers_spelling_without_credentials() {
        let body = json!({"storage_type": "aws-s3", "interval": "1h", "path_prefix": "snaps",
                          "aws_s3_bucket": "b", "aws_s3_region": "us-east-1",
                          "aws_access_key_id": "AKIA", "aws_secret_access_key": "s3cr3t",
                          "aws_s3_endpoint": "http://127.0.0.1:9", "aws_s3_force_path_style": true});
        let config = parse("n", &data(body), None, 1).unwrap();
        assert_eq!(config.storage_type, StorageType::CloudA);
        assert_eq!(config.text("cloud_a_bucket"), Some("b"));
        let read = Value::Object(config.to_data());
        assert_eq!(read["storage_type"], "aws-s3");
        assert_eq!(read["aws_s3_bucket"], "b");
        assert_eq!(read["aws_s3_force_path_style"], true);
        assert_eq!(read["interval"], 3600);
        let text = read.to_string();
        assert!(!text.contains("s3cr3t") && !text.contains("AKIA"), "{text}");

        // The spec's spelling wins over upstream's; an update keeps the credentials.
        let update = json!({"storage_type": "cloud-a-object", "cloud_a_bucket": "spec",
                            "aws_s3_bucket": "upstream"});
        let updated = parse("n", &data(update), Some(&config), 2).unwrap();
        assert_eq!(updated.text("cloud_a_bucket"), Some("spec"));
        assert_eq!(updated.text("cloud_a_secret_access_key"), Some("s3cr3t"));
        assert_eq!(updated.interval_secs, 3600);
        assert_eq!(
            Value::Object(updated.to_data())["storage_type"],
            "cloud-a-object"
        );
    }

    #[test]
    fn never_is_gos_zero_time_and_times_are_rfc3339() {
        let status = Status {
            last_start_ns: 1_603_898_241_699_731_000,
            ..Status::default()
        };
        let data = Value::Object(status.to_data());
        assert_eq!(data["snapshot_start"], "0001-01-01T00:00:00Z");
        assert!(
            data["last_snapshot_start"]
                .as_str()
                .unwrap()
                .starts_with("2020-10-28T15:17:21")
        );
    }
}
