//! `GET|PATCH /api/v2/admin/sms-settings` and `POST /api/v2/admin/sms-settings/verify`, also
//! at upstream's `/api/v2/admin/twilio-settings` (type `twilio-settings`, id `twilio`; verify
//! by PATCH too, as go-tfe sends it).
//!
//! Where it sits: a handler of `admin/`; the provider is any service speaking Twilio's
//! Messages API at `base-url` (default `https://api.twilio.com`):
//! `POST <base-url>/2010-04-01/Accounts/<account-sid>/Messages.json`, HTTP basic auth with the
//! account SID and auth token, form fields `To`, `From` and `Body`.
//!
//! Invariants: `auth-token` is never rendered; `enabled: true` needs `account-sid`,
//! `auth-token` and `from-number` (422); `base-url` is an absolute http(s) URL, rendered in
//! every answer. Verify: 400 when SMS is disabled or `test-number` is missing (the spec's),
//! else one real request to the provider, whose refusal (a 4xx) is a 400 carrying its
//! message, and whose failure or silence is a 502; 200 with no body when it accepted.

use std::time::Duration;

use axum::extract::{MatchedPath, State as AxumState};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use jsonapi::Document;
use serde_json::Value;

use crate::admin::{SiteAdmin, boolean, need, optional_string, update};
use crate::error::DeliveryFailure;
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::site_settings::{DEFAULT_SMS_BASE_URL, SmsSettings, load_setting};
use crate::views::site_settings::sms_resource;
use crate::{Error, State};

/// How long the provider may take to answer a verification.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the route is upstream's `twilio-settings` spelling.
fn is_twilio(path: &MatchedPath) -> bool {
    path.as_str().contains("/twilio-settings")
}

/// `GET /api/v2/admin/sms-settings` (and `twilio-settings`).
pub(crate) async fn read_sms(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<SmsSettings>(state.storage()).await?;
    Ok(JsonApi::ok(Document::one(sms_resource(
        &settings,
        is_twilio(&path),
    ))))
}

/// `PATCH /api/v2/admin/sms-settings` (and `twilio-settings`).
pub(crate) async fn update_sms(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    path: MatchedPath,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["sms-settings", "twilio-settings"])?;
    let enabled = boolean(&body, "enabled")?;
    let account_sid = optional_string(&body, "account-sid")?;
    let auth_token = if body.has_attribute("auth-token")? {
        Some(body.string("auth-token")?.filter(|value| !value.is_empty()))
    } else {
        None
    };
    let from_number = optional_string(&body, "from-number")?;
    let base_url = match optional_string(&body, "base-url")? {
        None => None,
        Some(None) => Some(DEFAULT_SMS_BASE_URL.to_owned()),
        Some(Some(url)) => {
            let parsed = reqwest::Url::parse(&url).ok().filter(|parsed| {
                matches!(parsed.scheme(), "http" | "https") && parsed.host_str().is_some()
            });
            if parsed.is_none() {
                return Err(Error::invalid_attribute(
                    "base-url",
                    "base-url must be an absolute http or https URL",
                ));
            }
            Some(url.trim_end_matches('/').to_owned())
        }
    };
    let settings = update::<SmsSettings>(&state, |settings| {
        if let Some(value) = enabled {
            settings.enabled = value;
        }
        if let Some(value) = &account_sid {
            settings.account_sid.clone_from(value);
        }
        if let Some(value) = &auth_token {
            settings.auth_token.clone_from(value);
        }
        if let Some(value) = &from_number {
            settings.from_number.clone_from(value);
        }
        if let Some(value) = &base_url {
            settings.base_url.clone_from(value);
        }
        if settings.enabled {
            check_complete(settings)?;
        }
        Ok(())
    })
    .await?;
    Ok(JsonApi::ok(Document::one(sms_resource(
        &settings,
        is_twilio(&path),
    ))))
}

fn check_complete(settings: &SmsSettings) -> Result<(), Error> {
    need(&settings.account_sid, "account-sid")?;
    need(&settings.auth_token, "auth-token")?;
    need(&settings.from_number, "from-number")?;
    Ok(())
}

fn bad_request(detail: impl Into<String>) -> Error {
    Error::BadRequest {
        parameter: None,
        detail: detail.into(),
    }
}

/// `POST /api/v2/admin/sms-settings/verify` (and `twilio-settings/verify`, POST or PATCH):
/// sends a test SMS to `test-number`.
pub(crate) async fn verify_sms(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<Response, Error> {
    let number = body
        .string("test-number")?
        .map(|number| number.trim().to_owned())
        .filter(|number| !number.is_empty())
        .ok_or_else(|| bad_request("test-number is required"))?;
    let (settings, _) = load_setting::<SmsSettings>(state.storage()).await?;
    if !settings.enabled {
        return Err(bad_request("SMS is not enabled"));
    }
    check_complete(&settings).map_err(|err| bad_request(err.to_string()))?;
    send_test_message(&settings, &number).await?;
    Ok(StatusCode::OK.into_response())
}

/// One request to the provider's Messages API.
async fn send_test_message(settings: &SmsSettings, to: &str) -> Result<(), Error> {
    let sid = settings.account_sid.as_deref().unwrap_or_default();
    let url = format!(
        "{}/2010-04-01/Accounts/{}/Messages.json",
        settings.base_url.trim_end_matches('/'),
        percent_encode_segment(sid)
    );
    let form = serde_urlencoded::to_string([
        ("To", to),
        ("From", settings.from_number.as_deref().unwrap_or_default()),
        (
            "Body",
            "This is a test message from the platform's SMS settings.",
        ),
    ])
    .map_err(|err| Error::Internal(format!("encoding the SMS form: {err}")))?;
    let client = reqwest::Client::builder()
        .timeout(PROVIDER_TIMEOUT)
        .build()
        .map_err(|err| Error::Internal(format!("building the HTTP client: {err}")))?;
    let unreachable = |detail: String| Error::Delivery {
        failure: DeliveryFailure::Unreachable,
        detail,
    };
    let response = client
        .post(&url)
        .basic_auth(sid, settings.auth_token.as_deref())
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(form)
        .send()
        .await
        .map_err(|err| unreachable(format!("the SMS provider could not be reached: {err}")))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|value| {
            value
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.chars().take(200).collect());
    if status.is_client_error() {
        Err(bad_request(format!(
            "the SMS provider refused the message ({}): {message}",
            status.as_u16()
        )))
    } else {
        Err(unreachable(format!(
            "the SMS provider failed ({}): {message}",
            status.as_u16()
        )))
    }
}

/// `segment` with everything but unreserved characters percent-encoded.
fn percent_encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
