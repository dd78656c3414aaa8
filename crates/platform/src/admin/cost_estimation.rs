//! `GET|PATCH /api/v2/admin/cost-estimation-settings`.
//!
//! Where it sits: a handler of `admin/`; nothing else in cairn estimates costs, so the
//! setting is stored and served for clients and the organizations' opt-in.
//!
//! Invariants: the spec's attribute names (`cloud-a-*`, `cloud-b-*`, `cloud-c-*`) are
//! canonical, upstream's (`aws-*`, `azure-*`, `gcp-credentials`) accepted aliases;
//! `enabled: true` needs one complete credential set (both `cloud-a-` values, the
//! `cloud-c-credentials`, or all four `cloud-b-` values), else 422 at `enabled`;
//! `cloud-c-credentials` must be a JSON object (a service-account key) when set; the answer
//! returns the credentials as stored (the spec's rule).

use axum::extract::State as AxumState;
use jsonapi::Document;
use serde_json::Value;

use crate::admin::{SiteAdmin, boolean, optional_string_or, update};
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::site_settings::{CostEstimationSettings, load_setting};
use crate::views::site_settings::cost_estimation_resource;
use crate::{Error, State};

/// `GET /api/v2/admin/cost-estimation-settings`.
pub(crate) async fn read_cost_estimation(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<CostEstimationSettings>(state.storage()).await?;
    Ok(JsonApi::ok(Document::one(cost_estimation_resource(
        &settings,
    ))))
}

/// `PATCH /api/v2/admin/cost-estimation-settings`.
pub(crate) async fn update_cost_estimation(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["cost-estimation-settings"])?;
    let enabled = boolean(&body, "enabled")?;
    let a_key = optional_string_or(&body, "cloud-a-access-key-id", "aws-access-key-id")?;
    let a_secret = optional_string_or(&body, "cloud-a-secret-key", "aws-secret-key")?;
    let c_credentials = optional_string_or(&body, "cloud-c-credentials", "gcp-credentials")?;
    let b_client = optional_string_or(&body, "cloud-b-client-id", "azure-client-id")?;
    let b_secret = optional_string_or(&body, "cloud-b-client-secret", "azure-client-secret")?;
    let b_subscription =
        optional_string_or(&body, "cloud-b-subscription-id", "azure-subscription-id")?;
    let b_tenant = optional_string_or(&body, "cloud-b-tenant-id", "azure-tenant-id")?;
    if let Some(Some(credentials)) = &c_credentials
        && !serde_json::from_str::<Value>(credentials).is_ok_and(|value| value.is_object())
    {
        return Err(Error::invalid_attribute(
            "cloud-c-credentials",
            "cloud-c-credentials must be the JSON of a service-account key",
        ));
    }
    let settings = update::<CostEstimationSettings>(&state, |settings| {
        if let Some(value) = enabled {
            settings.enabled = value;
        }
        let fields = [
            (&a_key, &mut settings.cloud_a_access_key_id),
            (&a_secret, &mut settings.cloud_a_secret_key),
            (&c_credentials, &mut settings.cloud_c_credentials),
            (&b_client, &mut settings.cloud_b_client_id),
            (&b_secret, &mut settings.cloud_b_client_secret),
            (&b_subscription, &mut settings.cloud_b_subscription_id),
            (&b_tenant, &mut settings.cloud_b_tenant_id),
        ];
        for (sent, stored) in fields {
            if let Some(value) = sent {
                stored.clone_from(value);
            }
        }
        if settings.enabled && !has_credential_set(settings) {
            return Err(Error::invalid_attribute(
                "enabled",
                "cost estimation needs one complete credential set: cloud-a-access-key-id and \
                 cloud-a-secret-key, cloud-c-credentials, or the four cloud-b- values",
            ));
        }
        Ok(())
    })
    .await?;
    Ok(JsonApi::ok(Document::one(cost_estimation_resource(
        &settings,
    ))))
}

/// The spec's rule: one complete credential set.
fn has_credential_set(settings: &CostEstimationSettings) -> bool {
    let set = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.is_empty());
    (set(&settings.cloud_a_access_key_id) && set(&settings.cloud_a_secret_key))
        || set(&settings.cloud_c_credentials)
        || (set(&settings.cloud_b_client_id)
            && set(&settings.cloud_b_client_secret)
            && set(&settings.cloud_b_subscription_id)
            && set(&settings.cloud_b_tenant_id))
}
