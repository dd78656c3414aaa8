//! `GET|PATCH /api/v2/admin/smtp-settings`: the mail server cairn sends through (the test
//! message here, membership invitations in `memberships.rs`).
//!
//! Where it sits: a handler of `admin/`; sending is `mail.rs`.
//!
//! Invariants:
//! - `password` is never rendered; `test-email-address` is never stored.
//! - When `enabled` ends up true, or a `test-email-address` is sent, `host`, `port`
//!   (1–65535) and a valid `sender` are required, and `username` and `password` too when
//!   `auth` is `plain` or `login` (422 otherwise).
//! - With a `test-email-address`, a real test message is sent with the resulting settings
//!   before anything is stored; if it fails nothing is stored and the answer is the spec's:
//!   401 when the server refused the credentials, 500 for any other SMTP error reply, 504
//!   when it did not answer within the timeout (`Config::smtp_timeout`).

use axum::extract::State as AxumState;
use jsonapi::Document;

use crate::admin::{SiteAdmin, boolean, is_email, need, optional_string, update};
use crate::mail::{Mail, send};
use crate::render::JsonApi;
use crate::request::Body;
use crate::store::site_settings::{CustomizationSettings, SmtpSettings, load_setting};
use crate::views::site_settings::smtp_resource;
use crate::{Error, State};

/// `GET /api/v2/admin/smtp-settings`.
pub(crate) async fn read_smtp(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<SmtpSettings>(state.storage()).await?;
    Ok(JsonApi::ok(Document::one(smtp_resource(&settings))))
}

/// What a PATCH sent.
struct Change {
    enabled: Option<bool>,
    host: Option<Option<String>>,
    port: Option<Option<u16>>,
    sender: Option<Option<String>>,
    auth: Option<String>,
    username: Option<Option<String>>,
    password: Option<Option<String>>,
}

impl Change {
    fn read(body: &Body) -> Result<Change, Error> {
        let port = if body.has_attribute("port")? {
            Some(match body.integer("port")? {
                None => None,
                Some(port) => Some(
                    u16::try_from(port)
                        .ok()
                        .filter(|port| *port > 0)
                        .ok_or_else(|| {
                            Error::invalid_attribute("port", "port must be between 1 and 65535")
                        })?,
                ),
            })
        } else {
            None
        };
        let sender = optional_string(body, "sender")?;
        if let Some(Some(sender)) = &sender
            && !is_email(sender)
        {
            return Err(Error::invalid_attribute(
                "sender",
                "sender is not a valid email address",
            ));
        }
        let auth = match body.string("auth")?.as_deref().map(str::trim) {
            None => None,
            Some(auth @ ("none" | "plain" | "login")) => Some(auth.to_owned()),
            Some(_) => {
                return Err(Error::invalid_attribute(
                    "auth",
                    "auth must be one of none, plain, login",
                ));
            }
        };
        // A password is taken as sent (spaces may be part of it).
        let password = if body.has_attribute("password")? {
            Some(body.string("password")?.filter(|value| !value.is_empty()))
        } else {
            None
        };
        Ok(Change {
            enabled: boolean(body, "enabled")?,
            host: optional_string(body, "host")?,
            port,
            sender,
            auth,
            username: optional_string(body, "username")?,
            password,
        })
    }

    fn apply(&self, settings: &mut SmtpSettings) {
        if let Some(value) = self.enabled {
            settings.enabled = value;
        }
        if let Some(value) = &self.host {
            settings.host.clone_from(value);
        }
        if let Some(value) = self.port {
            settings.port = value;
        }
        if let Some(value) = &self.sender {
            settings.sender.clone_from(value);
        }
        if let Some(value) = &self.auth {
            settings.auth.clone_from(value);
        }
        if let Some(value) = &self.username {
            settings.username.clone_from(value);
        }
        if let Some(value) = &self.password {
            settings.password.clone_from(value);
        }
    }
}

/// 422 unless `settings` can send mail.
fn check_complete(settings: &SmtpSettings) -> Result<(), Error> {
    need(&settings.host, "host")?;
    if settings.port.is_none() {
        return Err(super::required_when_enabled("port"));
    }
    need(&settings.sender, "sender")?;
    if settings.auth != "none" {
        need(&settings.username, "username")?;
        need(&settings.password, "password")?;
    }
    Ok(())
}

/// `PATCH /api/v2/admin/smtp-settings`.
pub(crate) async fn update_smtp(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["smtp-settings"])?;
    let change = Change::read(&body)?;
    let test_address = optional_string(&body, "test-email-address")?.flatten();
    if let Some(address) = &test_address {
        if !is_email(address) {
            return Err(Error::invalid_attribute(
                "test-email-address",
                "test-email-address is not a valid email address",
            ));
        }
        let (mut settings, _) = load_setting::<SmtpSettings>(state.storage()).await?;
        change.apply(&mut settings);
        check_complete(&settings)?;
        let (customization, _) = load_setting::<CustomizationSettings>(state.storage()).await?;
        let mail = Mail {
            to: address.clone(),
            subject: "Test email from the platform".to_owned(),
            body: "This is a test message sent to check the platform's SMTP settings.\n\
                   If you received it, the platform can send mail."
                .to_owned(),
        };
        send(
            &settings,
            &customization,
            &mail,
            "test-email-address",
            state.config().smtp_timeout,
        )
        .await?;
    }
    let settings = update::<SmtpSettings>(&state, |settings| {
        change.apply(settings);
        if settings.enabled {
            check_complete(settings)?;
        }
        Ok(())
    })
    .await?;
    Ok(JsonApi::ok(Document::one(smtp_resource(&settings))))
}
