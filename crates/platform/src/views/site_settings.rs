//! The site settings resources: `general-settings`, `cost-estimation-settings`,
//! `saml-settings`, `smtp-settings`, `sms-settings` (or upstream's `twilio-settings`),
//! `customization-settings` and `data-retention-policy-delete-olders`.
//!
//! Where it sits: rendered by `admin/`, from `store/site_settings.rs` records.
//!
//! Invariants: each singleton has its fixed id; write-only secrets (the SMTP password, the
//! SMS auth token) are never rendered; a setting never written renders its defaults.

use jsonapi::{Relationship, Resource};

use crate::ids;
use crate::store::site_settings::{
    CostEstimationSettings, CustomizationSettings, DataRetentionPolicy, GeneralSettings,
    SamlSettings, SmsSettings, SmtpSettings,
};

/// The JSON:API type of the site data retention policy.
pub(crate) const DATA_RETENTION_TYPE: &str = "data-retention-policy-delete-olders";

/// `general-settings`; `rate_limit` and `rate_limiting` are the live limiter's values.
pub(crate) fn general_resource(
    settings: &GeneralSettings,
    rate_limit: u32,
    rate_limiting: bool,
) -> Resource {
    Resource::new("general-settings", "general")
        .attribute(
            "limit-user-organization-creation",
            settings.limit_user_organization_creation,
        )
        .attribute("api-rate-limiting-enabled", rate_limiting)
        .attribute("api-rate-limit", rate_limit)
        .attribute(
            "send-passing-statuses-for-untriggered-speculative-plans",
            settings.send_passing_statuses_for_untriggered_speculative_plans,
        )
        .attribute(
            "allow-speculative-plans-on-pull-requests-from-forks",
            settings.allow_speculative_plans_on_pull_requests_from_forks,
        )
        .attribute(
            "default-remote-state-access",
            settings.default_remote_state_access,
        )
        .attribute("plan-timeout", &settings.plan_timeout)
        .attribute("apply-timeout", &settings.apply_timeout)
}

/// `cost-estimation-settings`, credentials as stored (the spec's rule).
pub(crate) fn cost_estimation_resource(settings: &CostEstimationSettings) -> Resource {
    Resource::new("cost-estimation-settings", "cost-estimation")
        .attribute("enabled", settings.enabled)
        .attribute("cloud-a-access-key-id", &settings.cloud_a_access_key_id)
        .attribute("cloud-a-secret-key", &settings.cloud_a_secret_key)
        .attribute("cloud-c-credentials", &settings.cloud_c_credentials)
        .attribute("cloud-b-client-id", &settings.cloud_b_client_id)
        .attribute("cloud-b-client-secret", &settings.cloud_b_client_secret)
        .attribute("cloud-b-subscription-id", &settings.cloud_b_subscription_id)
        .attribute("cloud-b-tenant-id", &settings.cloud_b_tenant_id)
}

/// `saml-settings`; `base_url` is this server's address (for the response-only URLs).
pub(crate) fn saml_resource(settings: &SamlSettings, base_url: &str) -> Resource {
    Resource::new("saml-settings", "saml")
        .attribute("enabled", settings.enabled)
        .attribute("debug", settings.debug)
        .attribute("idp-cert", &settings.idp_cert)
        .attribute("old-idp-cert", &settings.old_idp_cert)
        .attribute("slo-endpoint-url", &settings.slo_endpoint_url)
        .attribute("sso-endpoint-url", &settings.sso_endpoint_url)
        .attribute("attr-username", &settings.attr_username)
        .attribute("attr-groups", &settings.attr_groups)
        .attribute("attr-site-admin", &settings.attr_site_admin)
        .attribute("site-admin-role", &settings.site_admin_role)
        .attribute(
            "sso-api-token-session-timeout",
            settings.sso_api_token_session_timeout,
        )
        .attribute("acs-consumer-url", format!("{base_url}/users/saml/auth"))
        .attribute("metadata-url", format!("{base_url}/users/saml/metadata"))
}

/// `smtp-settings`, without the password.
pub(crate) fn smtp_resource(settings: &SmtpSettings) -> Resource {
    Resource::new("smtp-settings", "smtp")
        .attribute("enabled", settings.enabled)
        .attribute("host", &settings.host)
        .attribute("port", settings.port)
        .attribute("sender", &settings.sender)
        .attribute("auth", &settings.auth)
        .attribute("username", &settings.username)
}

/// `sms-settings` (id `sms`) or, at upstream's path, `twilio-settings` (id `twilio`); without
/// the auth token.
pub(crate) fn sms_resource(settings: &SmsSettings, twilio: bool) -> Resource {
    let (kind, id) = if twilio {
        ("twilio-settings", "twilio")
    } else {
        ("sms-settings", "sms")
    };
    Resource::new(kind, id)
        .attribute("enabled", settings.enabled)
        .attribute("account-sid", &settings.account_sid)
        .attribute("from-number", &settings.from_number)
        .attribute("base-url", &settings.base_url)
}

/// `customization-settings`.
pub(crate) fn customization_resource(settings: &CustomizationSettings) -> Resource {
    Resource::new("customization-settings", "customization")
        .attribute("support-email-address", &settings.support_email_address)
        .attribute("login-help", &settings.login_help)
        .attribute("footer", &settings.footer)
        .attribute("error", &settings.error)
        .attribute("new-user", &settings.new_user)
}

/// The site data retention policy; its `target` is null (site level).
pub(crate) fn data_retention_resource(policy: &DataRetentionPolicy) -> Resource {
    Resource::new(DATA_RETENTION_TYPE, &policy.id)
        .attribute("delete-older-than-n-days", policy.delete_older_than_n_days)
        .attribute("created-at", ids::format_time(policy.created_at_ms))
        .relationship(
            "target",
            Relationship::optional("organizations", None::<String>),
        )
}
