//! `GET|PATCH /api/v2/admin/customization-settings`.
//!
//! Where it sits: a handler of `admin/`; `mail.rs` signs every message with the footer and
//! the support address (also its `Reply-To`).
//!
//! Invariants: `null` restores an attribute's default (the built-in support address, or the
//! empty string); `support-email-address` must be an email address.

use axum::extract::State as AxumState;
use jsonapi::Document;

use crate::admin::{SiteAdmin, is_email, update};
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::site_settings::{CustomizationSettings, DEFAULT_SUPPORT_EMAIL, load_setting};
use crate::views::site_settings::customization_resource;
use crate::{Error, State};

/// `GET /api/v2/admin/customization-settings`.
pub(crate) async fn read_customization(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<CustomizationSettings>(state.storage()).await?;
    Ok(JsonApi::ok(Document::one(customization_resource(
        &settings,
    ))))
}

/// `PATCH /api/v2/admin/customization-settings`.
pub(crate) async fn update_customization(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["customization-settings"])?;
    let mut sent = Vec::new();
    for name in [
        "support-email-address",
        "login-help",
        "footer",
        "error",
        "new-user",
    ] {
        sent.push(if body.has_attribute(name)? {
            Some(body.string(name)?)
        } else {
            None
        });
    }
    if let Some(Some(address)) = &sent[0]
        && !is_email(address.trim())
    {
        return Err(Error::invalid_attribute(
            "support-email-address",
            "support-email-address is not a valid email address",
        ));
    }
    let settings = update::<CustomizationSettings>(&state, |settings| {
        let fields = [
            &mut settings.support_email_address,
            &mut settings.login_help,
            &mut settings.footer,
            &mut settings.error,
            &mut settings.new_user,
        ];
        for (index, (stored, value)) in fields.into_iter().zip(&sent).enumerate() {
            match value {
                None => {}
                Some(Some(value)) if index == 0 => *stored = value.trim().to_owned(),
                Some(Some(value)) => stored.clone_from(value),
                Some(None) if index == 0 => *stored = DEFAULT_SUPPORT_EMAIL.to_owned(),
                Some(None) => stored.clear(),
            }
        }
        Ok(())
    })
    .await?;
    Ok(JsonApi::ok(Document::one(customization_resource(
        &settings,
    ))))
}
