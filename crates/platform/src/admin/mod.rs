//! Site administration (TFE's self-hosted admin API under `/api/v2/admin`): one file per
//! settings resource: `general.rs`, `cost_estimation.rs`, `saml.rs`, `smtp.rs`, `sms.rs`
//! (also upstream's `twilio-settings`), `customization.rs` and `data_retention.rs`.
//!
//! Where it sits: handlers called from `routes.rs`; each starts with the `auth::SiteAdmin`
//! extractor, reads and writes its singleton through `store/site_settings.rs` ([`update`]
//! retries the compare-and-swap) and renders through `views/site_settings.rs`.
//!
//! Invariants:
//! - Anyone but a site administrator gets 404, before the body is read (TFE hides the admin
//!   API).
//! - A PATCH changes only the attributes it sends (`null` restores a default or clears a
//!   value); when the result is enabled, every attribute it needs must hold a valid value,
//!   else 422 pointing at the first that does not, and nothing is stored.
//! - A setting takes effect when its update returns: the rate limiter's values are set in
//!   the same request, the data retention loop is woken, and everything else (organization
//!   and workspace creation, invitation mail) reads the stored setting when it acts.

pub(crate) mod cost_estimation;
pub(crate) mod customization;
pub(crate) mod data_retention;
pub(crate) mod general;
pub(crate) mod saml;
pub(crate) mod sms;
pub(crate) mod smtp;

use serde_json::Value;

pub(crate) use crate::auth::SiteAdmin;
use crate::request::Body;
use crate::store::MAX_ATTEMPTS;
use crate::store::site_settings::{SiteSetting, load_setting, save_setting};
use crate::{Error, State};

/// Reads setting `T`, applies `change` and stores the result, retrying when another writer
/// came first; returns what was stored. `change` must be pure: it may run more than once.
pub(crate) async fn update<T: SiteSetting>(
    state: &State,
    mut change: impl FnMut(&mut T) -> Result<(), Error>,
) -> Result<T, Error> {
    for _ in 0..MAX_ATTEMPTS {
        let (mut record, read) = load_setting::<T>(state.storage()).await?;
        change(&mut record)?;
        if save_setting(state.storage(), &record, read).await? {
            return Ok(record);
        }
    }
    Err(Error::Contention)
}

/// A string attribute that may be cleared: `None` when not sent, `Some(None)` for `null` or a
/// blank string, `Some(Some(value))` otherwise (trimmed).
pub(crate) fn optional_string(body: &Body, name: &str) -> Result<Option<Option<String>>, Error> {
    if !body.has_attribute(name)? {
        return Ok(None);
    }
    Ok(Some(
        body.string(name)?
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty()),
    ))
}

/// [`optional_string`] under the spec's `name` or, when that is not sent, upstream's `alias`.
pub(crate) fn optional_string_or(
    body: &Body,
    name: &str,
    alias: &str,
) -> Result<Option<Option<String>>, Error> {
    match optional_string(body, name)? {
        Some(value) => Ok(Some(value)),
        None => optional_string(body, alias),
    }
}

/// A boolean attribute; `null` is not sent.
pub(crate) fn boolean(body: &Body, name: &str) -> Result<Option<bool>, Error> {
    body.bool(name)
}

/// Whether `value` is an absolute `https` URL with a host.
pub(crate) fn is_https_url(value: &str) -> bool {
    reqwest::Url::parse(value)
        .is_ok_and(|url| url.scheme() == "https" && url.host_str().is_some_and(|h| !h.is_empty()))
}

/// Whether `value` is an email address (what an SMTP envelope accepts).
pub(crate) fn is_email(value: &str) -> bool {
    value.parse::<lettre::Address>().is_ok()
}

/// A 422 at `/data/attributes/<name>` saying it is needed while enabled.
pub(crate) fn required_when_enabled(name: &str) -> Error {
    Error::invalid_attribute(name, format!("{name} is required when enabled is true"))
}

/// `value` or a 422 at `name` saying it is needed while enabled.
pub(crate) fn need<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, Error> {
    value
        .as_deref()
        .filter(|value| !value.trim().is_empty())
        .ok_or_else(|| required_when_enabled(name))
}

/// The `data.attributes` object as sent (for attributes with odd spellings).
pub(crate) fn raw_attribute<'a>(body: &'a Body, name: &str) -> Result<Option<&'a Value>, Error> {
    Ok(body
        .attributes()?
        .and_then(|attributes| attributes.get(name))
        .filter(|value| !value.is_null()))
}
