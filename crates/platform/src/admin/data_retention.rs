//! `GET|POST|DELETE /api/v2/admin/data-retention-policy-settings`: the site-wide data
//! retention policy, of the one type the site level supports,
//! `data-retention-policy-delete-olders`.
//!
//! Where it sits: a handler of `admin/`; the policy is applied by the retention loop
//! (`retention.rs`), which this wakes on every change.
//!
//! Invariants: GET answers the policy, or `{"data": null}` when none is set (organizations
//! then keep everything); POST creates (201) or updates (200, same id) it with
//! `delete-older-than-n-days` (also upstream's `deleteOlderThanNDays`), a whole number of days
//! of at least 1; any other type is a 422; DELETE removes it (204, also when there was none).

use axum::extract::State as AxumState;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use jsonapi::Document;
use serde_json::Value;

use crate::admin::{SiteAdmin, raw_attribute};
use crate::render::{JsonApi, no_content};
use crate::request::Body;
use crate::store::MAX_ATTEMPTS;
use crate::store::site_settings::{
    DataRetentionPolicy, delete_setting, load_setting, save_setting,
};
use crate::views::site_settings::{DATA_RETENTION_TYPE, data_retention_resource};
use crate::{Error, State, ids};

/// The largest retention accepted, in days (about 100 years).
const MAX_DAYS: i64 = 36_500;

/// `GET /api/v2/admin/data-retention-policy-settings`.
pub(crate) async fn read_data_retention(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<Response, Error> {
    let (policy, read) = load_setting::<DataRetentionPolicy>(state.storage()).await?;
    if read.is_none() {
        let mut response = (StatusCode::OK, r#"{"data":null}"#).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(jsonapi::MEDIA_TYPE),
        );
        return Ok(response);
    }
    Ok(JsonApi::ok(Document::one(data_retention_resource(&policy))).into_response())
}

/// `POST /api/v2/admin/data-retention-policy-settings`.
pub(crate) async fn set_data_retention(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&[DATA_RETENTION_TYPE])?;
    let days = match body.integer("delete-older-than-n-days")? {
        Some(days) => Some(days),
        None => match raw_attribute(&body, "deleteOlderThanNDays")? {
            None => None,
            Some(Value::Number(number)) => number.as_i64().or(Some(0)),
            Some(_) => Some(0),
        },
    };
    let days = match days {
        None => {
            return Err(Error::invalid_attribute(
                "delete-older-than-n-days",
                "delete-older-than-n-days is required",
            ));
        }
        Some(days) if (1..=MAX_DAYS).contains(&days) => u32::try_from(days).unwrap_or(1),
        Some(_) => {
            return Err(Error::invalid_attribute(
                "delete-older-than-n-days",
                format!(
                    "delete-older-than-n-days must be a whole number of days from 1 to {MAX_DAYS}"
                ),
            ));
        }
    };
    for _ in 0..MAX_ATTEMPTS {
        let (mut policy, read) = load_setting::<DataRetentionPolicy>(state.storage()).await?;
        let created = read.is_none();
        if created {
            policy.id = ids::new_id("drp");
            policy.created_at_ms = state.now_ms();
        }
        policy.delete_older_than_n_days = days;
        if save_setting(state.storage(), &policy, read).await? {
            state.wake_retention();
            let document = Document::one(data_retention_resource(&policy));
            return Ok(if created {
                JsonApi::created(document)
            } else {
                JsonApi::ok(document)
            });
        }
    }
    Err(Error::Contention)
}

/// `DELETE /api/v2/admin/data-retention-policy-settings`.
pub(crate) async fn delete_data_retention(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<Response, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let (_, read) = load_setting::<DataRetentionPolicy>(state.storage()).await?;
        let Some(read) = read else {
            return Ok(no_content());
        };
        if delete_setting::<DataRetentionPolicy>(state.storage(), read).await? {
            state.wake_retention();
            return Ok(no_content());
        }
    }
    Err(Error::Contention)
}
