//! Stored site settings: the singletons of the site administration API (see `store/mod.rs`
//! for the layout) and their defaults.
//!
//! ```text
//! platform/site-settings/general          GeneralSettings
//! platform/site-settings/cost-estimation  CostEstimationSettings
//! platform/site-settings/saml             SamlSettings
//! platform/site-settings/smtp             SmtpSettings (the password as sent: it is needed to log in)
//! platform/site-settings/sms              SmsSettings (the auth token as sent, likewise)
//! platform/site-settings/customization    CustomizationSettings
//! platform/site-settings/data-retention   DataRetentionPolicy (absent: keep everything)
//! ```
//!
//! Invariants: a missing record reads as its defaults (the spec's), so nothing is written
//! until an administrator changes a setting; every field has a serde default, so a record
//! written by an older release still decodes; a write compares the mod revision it read
//! (or `Missing`), so two concurrent updates never lose one another's fields.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use storage::{Compare, Storage, Txn};

use crate::Error;
use crate::store::{PREFIX, RECORD_VERSION, Stored, commit, load, put};

/// The key of setting `name` (`general`, `smtp`, ...).
pub(crate) fn setting_key(name: &str) -> Vec<u8> {
    format!("{PREFIX}site-settings/{name}").into_bytes()
}

/// A site setting record: its key name and its defaults.
pub(crate) trait SiteSetting: Serialize + DeserializeOwned + Default + Clone {
    /// The last key segment.
    const NAME: &'static str;
}

/// The setting and the revision it was read at (`None`: never written, defaults).
pub(crate) async fn load_setting<T: SiteSetting>(
    storage: &dyn Storage,
) -> Result<(T, Option<storage::Revision>), Error> {
    Ok(match load::<T>(storage, &setting_key(T::NAME)).await? {
        Some(Stored {
            record, revision, ..
        }) => (record, Some(revision)),
        None => (T::default(), None),
    })
}

/// Writes `record` if the setting is still at `read` (`None`: still missing); `false` when
/// another writer came first.
pub(crate) async fn save_setting<T: SiteSetting>(
    storage: &dyn Storage,
    record: &T,
    read: Option<storage::Revision>,
) -> Result<bool, Error> {
    let key = setting_key(T::NAME);
    let compare = match read {
        Some(revision) => Compare::ModRevision(key.clone(), revision),
        None => Compare::Missing(key.clone()),
    };
    commit(storage, Txn::new().when(compare).then(put(key, record)?)).await
}

/// Deletes the setting if it is still at `read`; `false` when another writer came first.
pub(crate) async fn delete_setting<T: SiteSetting>(
    storage: &dyn Storage,
    read: storage::Revision,
) -> Result<bool, Error> {
    let key = setting_key(T::NAME);
    commit(
        storage,
        Txn::new()
            .when(Compare::ModRevision(key.clone(), read))
            .then(crate::store::delete(key)),
    )
    .await
}

fn record_version() -> u32 {
    RECORD_VERSION
}

fn yes() -> bool {
    true
}

/// `general-settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GeneralSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default = "yes")]
    pub(crate) limit_user_organization_creation: bool,
    /// Written only by an update, which sets the live limiter too; `None` leaves the
    /// server's configured value in force.
    #[serde(default)]
    pub(crate) api_rate_limiting_enabled: Option<bool>,
    #[serde(default)]
    pub(crate) api_rate_limit: Option<u32>,
    #[serde(default)]
    pub(crate) send_passing_statuses_for_untriggered_speculative_plans: bool,
    #[serde(default)]
    pub(crate) allow_speculative_plans_on_pull_requests_from_forks: bool,
    #[serde(default = "yes")]
    pub(crate) default_remote_state_access: bool,
    /// Go durations (`2h`, `24h`), as TFE's documentation shows them.
    #[serde(default = "default_plan_timeout")]
    pub(crate) plan_timeout: String,
    #[serde(default = "default_apply_timeout")]
    pub(crate) apply_timeout: String,
}

fn default_plan_timeout() -> String {
    "2h".to_owned()
}

fn default_apply_timeout() -> String {
    "24h".to_owned()
}

impl Default for GeneralSettings {
    fn default() -> GeneralSettings {
        GeneralSettings {
            version: RECORD_VERSION,
            limit_user_organization_creation: true,
            api_rate_limiting_enabled: None,
            api_rate_limit: None,
            send_passing_statuses_for_untriggered_speculative_plans: false,
            allow_speculative_plans_on_pull_requests_from_forks: false,
            default_remote_state_access: true,
            plan_timeout: default_plan_timeout(),
            apply_timeout: default_apply_timeout(),
        }
    }
}

impl SiteSetting for GeneralSettings {
    const NAME: &'static str = "general";
}

/// `cost-estimation-settings`: the spec's names (`cloud-a-*`, `cloud-b-*`, `cloud-c-*`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct CostEstimationSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) cloud_a_access_key_id: Option<String>,
    #[serde(default)]
    pub(crate) cloud_a_secret_key: Option<String>,
    #[serde(default)]
    pub(crate) cloud_c_credentials: Option<String>,
    #[serde(default)]
    pub(crate) cloud_b_client_id: Option<String>,
    #[serde(default)]
    pub(crate) cloud_b_client_secret: Option<String>,
    #[serde(default)]
    pub(crate) cloud_b_subscription_id: Option<String>,
    #[serde(default)]
    pub(crate) cloud_b_tenant_id: Option<String>,
}

impl SiteSetting for CostEstimationSettings {
    const NAME: &'static str = "cost-estimation";
}

/// `saml-settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SamlSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) debug: bool,
    #[serde(default)]
    pub(crate) idp_cert: Option<String>,
    /// The certificate `idp_cert` replaced, kept until revoked.
    #[serde(default)]
    pub(crate) old_idp_cert: Option<String>,
    #[serde(default)]
    pub(crate) slo_endpoint_url: Option<String>,
    #[serde(default)]
    pub(crate) sso_endpoint_url: Option<String>,
    #[serde(default = "default_attr_username")]
    pub(crate) attr_username: String,
    #[serde(default = "default_attr_groups")]
    pub(crate) attr_groups: String,
    #[serde(default = "default_attr_site_admin")]
    pub(crate) attr_site_admin: String,
    #[serde(default = "default_site_admin_role")]
    pub(crate) site_admin_role: String,
    #[serde(default = "default_session_timeout")]
    pub(crate) sso_api_token_session_timeout: u64,
}

fn default_attr_username() -> String {
    "Username".to_owned()
}

fn default_attr_groups() -> String {
    "MemberOf".to_owned()
}

fn default_attr_site_admin() -> String {
    "SiteAdmin".to_owned()
}

fn default_site_admin_role() -> String {
    "site-admins".to_owned()
}

/// 14 days, in seconds.
pub(crate) const DEFAULT_SSO_SESSION_TIMEOUT: u64 = 1_209_600;

fn default_session_timeout() -> u64 {
    DEFAULT_SSO_SESSION_TIMEOUT
}

impl Default for SamlSettings {
    fn default() -> SamlSettings {
        SamlSettings {
            version: RECORD_VERSION,
            enabled: false,
            debug: false,
            idp_cert: None,
            old_idp_cert: None,
            slo_endpoint_url: None,
            sso_endpoint_url: None,
            attr_username: default_attr_username(),
            attr_groups: default_attr_groups(),
            attr_site_admin: default_attr_site_admin(),
            site_admin_role: default_site_admin_role(),
            sso_api_token_session_timeout: DEFAULT_SSO_SESSION_TIMEOUT,
        }
    }
}

impl SiteSetting for SamlSettings {
    const NAME: &'static str = "saml";
}

/// `smtp-settings`. `auth` is `none`, `plain` or `login`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SmtpSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) host: Option<String>,
    #[serde(default)]
    pub(crate) port: Option<u16>,
    #[serde(default)]
    pub(crate) sender: Option<String>,
    #[serde(default = "default_smtp_auth")]
    pub(crate) auth: String,
    #[serde(default)]
    pub(crate) username: Option<String>,
    /// Never rendered.
    #[serde(default)]
    pub(crate) password: Option<String>,
}

fn default_smtp_auth() -> String {
    "none".to_owned()
}

impl Default for SmtpSettings {
    fn default() -> SmtpSettings {
        SmtpSettings {
            version: RECORD_VERSION,
            enabled: false,
            host: None,
            port: None,
            sender: None,
            auth: default_smtp_auth(),
            username: None,
            password: None,
        }
    }
}

impl SiteSetting for SmtpSettings {
    const NAME: &'static str = "smtp";
}

/// The provider base URL when none is set (Twilio's API).
pub(crate) const DEFAULT_SMS_BASE_URL: &str = "https://api.twilio.com";

/// `sms-settings` (upstream's `twilio-settings`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SmsSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) enabled: bool,
    #[serde(default)]
    pub(crate) account_sid: Option<String>,
    /// Never rendered.
    #[serde(default)]
    pub(crate) auth_token: Option<String>,
    #[serde(default)]
    pub(crate) from_number: Option<String>,
    #[serde(default = "default_sms_base_url")]
    pub(crate) base_url: String,
}

fn default_sms_base_url() -> String {
    DEFAULT_SMS_BASE_URL.to_owned()
}

impl Default for SmsSettings {
    fn default() -> SmsSettings {
        SmsSettings {
            version: RECORD_VERSION,
            enabled: false,
            account_sid: None,
            auth_token: None,
            from_number: None,
            base_url: default_sms_base_url(),
        }
    }
}

impl SiteSetting for SmsSettings {
    const NAME: &'static str = "sms";
}

/// The support address when none is set.
pub(crate) const DEFAULT_SUPPORT_EMAIL: &str = "support@cairn.localhost";

/// `customization-settings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CustomizationSettings {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default = "default_support_email")]
    pub(crate) support_email_address: String,
    #[serde(default)]
    pub(crate) login_help: String,
    #[serde(default)]
    pub(crate) footer: String,
    #[serde(default)]
    pub(crate) error: String,
    #[serde(default)]
    pub(crate) new_user: String,
}

fn default_support_email() -> String {
    DEFAULT_SUPPORT_EMAIL.to_owned()
}

impl Default for CustomizationSettings {
    fn default() -> CustomizationSettings {
        CustomizationSettings {
            version: RECORD_VERSION,
            support_email_address: default_support_email(),
            login_help: String::new(),
            footer: String::new(),
            error: String::new(),
            new_user: String::new(),
        }
    }
}

impl SiteSetting for CustomizationSettings {
    const NAME: &'static str = "customization";
}

/// The site-wide data retention policy (`data-retention-policy-delete-olders`); the record's
/// absence means "keep everything". `id` is empty only in the never-written default.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct DataRetentionPolicy {
    #[serde(default = "record_version")]
    pub(crate) version: u32,
    #[serde(default)]
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) delete_older_than_n_days: u32,
    #[serde(default)]
    pub(crate) created_at_ms: u64,
}

impl SiteSetting for DataRetentionPolicy {
    const NAME: &'static str = "data-retention";
}
