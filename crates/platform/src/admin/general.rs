//! `GET|PATCH /api/v2/admin/general-settings`: TFE's general settings.
//!
//! Where it sits: a handler of `admin/`; the live rate limiter is in `rate_limit.rs` (set
//! here, and from the stored record when the state opens: [`apply_stored`]); organization
//! creation (`organizations.rs`) and workspace creation (`workspaces/`) read the stored
//! record.
//!
//! Invariants: `api-rate-limit` below 30 is a 422 (the spec's minimum), never silently
//! raised; `api-rate-limit` and `api-rate-limiting-enabled` render the limiter's live values,
//! so the document never claims a limit that is not enforced; `plan-timeout` and
//! `apply-timeout` are positive Go durations.

use axum::extract::State as AxumState;
use jsonapi::Document;

use crate::admin::{SiteAdmin, boolean, update};
use crate::rate_limit::MIN_RATE_LIMIT;
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::site_settings::{GeneralSettings, load_setting};
use crate::views::site_settings::general_resource;
use crate::{Error, State};

/// `GET /api/v2/admin/general-settings`.
pub(crate) async fn read_general(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<GeneralSettings>(state.storage()).await?;
    Ok(render(&state, &settings))
}

/// `PATCH /api/v2/admin/general-settings`.
pub(crate) async fn update_general(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["general-settings"])?;
    let limit_creation = boolean(&body, "limit-user-organization-creation")?;
    let rate_limiting = boolean(&body, "api-rate-limiting-enabled")?;
    let rate_limit = match body.integer("api-rate-limit")? {
        None => None,
        Some(limit) if limit < i64::from(MIN_RATE_LIMIT) => {
            return Err(Error::invalid_attribute(
                "api-rate-limit",
                format!("api-rate-limit cannot be less than {MIN_RATE_LIMIT}"),
            ));
        }
        Some(limit) => Some(u32::try_from(limit).map_err(|_| {
            Error::invalid_attribute("api-rate-limit", "api-rate-limit is too large")
        })?),
    };
    let passing = boolean(
        &body,
        "send-passing-statuses-for-untriggered-speculative-plans",
    )?;
    let forks = boolean(&body, "allow-speculative-plans-on-pull-requests-from-forks")?;
    let remote_state = boolean(&body, "default-remote-state-access")?;
    let plan_timeout = timeout(&body, "plan-timeout")?;
    let apply_timeout = timeout(&body, "apply-timeout")?;
    let settings = update::<GeneralSettings>(&state, |settings| {
        if let Some(value) = limit_creation {
            settings.limit_user_organization_creation = value;
        }
        if let Some(value) = rate_limiting {
            settings.api_rate_limiting_enabled = Some(value);
        }
        if let Some(value) = rate_limit {
            settings.api_rate_limit = Some(value);
        }
        if let Some(value) = passing {
            settings.send_passing_statuses_for_untriggered_speculative_plans = value;
        }
        if let Some(value) = forks {
            settings.allow_speculative_plans_on_pull_requests_from_forks = value;
        }
        if let Some(value) = remote_state {
            settings.default_remote_state_access = value;
        }
        if let Some(value) = &plan_timeout {
            settings.plan_timeout.clone_from(value);
        }
        if let Some(value) = &apply_timeout {
            settings.apply_timeout.clone_from(value);
        }
        Ok(())
    })
    .await?;
    apply(&state, &settings);
    Ok(render(&state, &settings))
}

/// Sets the rate limiter from the stored general settings, if an administrator ever set
/// them (called when the state opens).
pub(crate) async fn apply_stored(state: &State) -> Result<(), Error> {
    let (settings, _) = load_setting::<GeneralSettings>(state.storage()).await?;
    apply(state, &settings);
    Ok(())
}

fn apply(state: &State, settings: &GeneralSettings) {
    if let Some(limit) = settings.api_rate_limit {
        state.set_api_rate_limit(limit);
    }
    if let Some(enabled) = settings.api_rate_limiting_enabled {
        state.set_api_rate_limiting_enabled(enabled);
    }
}

fn render(state: &State, settings: &GeneralSettings) -> JsonApi {
    JsonApi::ok(Document::one(general_resource(
        settings,
        state.api_rate_limit(),
        state.api_rate_limiting_enabled(),
    )))
}

/// A positive Go duration attribute, as sent.
fn timeout(body: &Body, name: &str) -> Result<Option<String>, Error> {
    let Some(value) = body.string(name)? else {
        return Ok(None);
    };
    match stdx::duration::parse_go(value.trim()) {
        Ok(duration) if !duration.is_zero() => Ok(Some(value.trim().to_owned())),
        _ => Err(Error::invalid_attribute(
            name,
            format!("{name} must be a positive duration such as 2h or 90m"),
        )),
    }
}
