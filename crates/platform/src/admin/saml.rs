//! `GET|PATCH /api/v2/admin/saml-settings` and
//! `POST /api/v2/admin/saml-settings/actions/revoke-old-certificate`.
//!
//! Where it sits: a handler of `admin/`; cairn has no SAML login flow, so the settings are
//! stored, validated and served (`acs-consumer-url` and `metadata-url` are where this server
//! would take them, from the request's host).
//!
//! Invariants: `idp-cert` is one PEM X.509 certificate that parses, and the endpoint URLs are
//! absolute `https` URLs, whenever they are sent (and required once `enabled` is true); a new
//! `idp-cert` moves the previous one to `old-idp-cert` (rotation), which stays until
//! revoke-old-certificate sets it to null; the attribute names are never blank; the session
//! timeout is a positive number of seconds.

use axum::extract::State as AxumState;
use http::HeaderMap;
use jsonapi::Document;

use crate::admin::{SiteAdmin, boolean, need, optional_string, update};
use crate::render::JsonApi;
use crate::request::Body;
use crate::signed_url::absolute_url;
use crate::store::site_settings::{SamlSettings, load_setting};
use crate::views::site_settings::saml_resource;
use crate::{Error, State};

/// `GET /api/v2/admin/saml-settings`.
pub(crate) async fn read_saml(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    headers: HeaderMap,
) -> Result<JsonApi, Error> {
    let (settings, _) = load_setting::<SamlSettings>(state.storage()).await?;
    Ok(render(&settings, &headers))
}

/// `PATCH /api/v2/admin/saml-settings`.
pub(crate) async fn update_saml(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    headers: HeaderMap,
    body: Body,
) -> Result<JsonApi, Error> {
    body.expect_type(&["saml-settings"])?;
    let enabled = boolean(&body, "enabled")?;
    let debug = boolean(&body, "debug")?;
    let idp_cert = optional_string(&body, "idp-cert")?;
    if let Some(Some(pem)) = &idp_cert {
        check_certificate(pem)?;
    }
    let slo = optional_string(&body, "slo-endpoint-url")?;
    let sso = optional_string(&body, "sso-endpoint-url")?;
    for (name, value) in [("slo-endpoint-url", &slo), ("sso-endpoint-url", &sso)] {
        if let Some(Some(url)) = value
            && !super::is_https_url(url)
        {
            return Err(Error::invalid_attribute(
                name,
                format!("{name} must be an https URL"),
            ));
        }
    }
    let mut names = Vec::new();
    for name in [
        "attr-username",
        "attr-groups",
        "attr-site-admin",
        "site-admin-role",
    ] {
        match optional_string(&body, name)? {
            Some(None) if body.attribute(name)?.is_some() => {
                return Err(Error::invalid_attribute(
                    name,
                    format!("{name} can't be blank"),
                ));
            }
            sent => names.push(sent),
        }
    }
    let timeout = match body.integer("sso-api-token-session-timeout")? {
        None => None,
        Some(seconds) if seconds > 0 => Some(seconds.unsigned_abs()),
        Some(_) => {
            return Err(Error::invalid_attribute(
                "sso-api-token-session-timeout",
                "sso-api-token-session-timeout must be a positive number of seconds",
            ));
        }
    };
    let settings = update::<SamlSettings>(&state, |settings| {
        if let Some(value) = enabled {
            settings.enabled = value;
        }
        if let Some(value) = debug {
            settings.debug = value;
        }
        if let Some(new) = &idp_cert {
            let changed = normalized(new.as_deref()) != normalized(settings.idp_cert.as_deref());
            if changed && normalized(settings.idp_cert.as_deref()).is_some() {
                settings.old_idp_cert = settings.idp_cert.take();
            }
            settings.idp_cert.clone_from(new);
        }
        if let Some(value) = &slo {
            settings.slo_endpoint_url.clone_from(value);
        }
        if let Some(value) = &sso {
            settings.sso_endpoint_url.clone_from(value);
        }
        let defaults = SamlSettings::default();
        let fields = [
            (&mut settings.attr_username, defaults.attr_username),
            (&mut settings.attr_groups, defaults.attr_groups),
            (&mut settings.attr_site_admin, defaults.attr_site_admin),
            (&mut settings.site_admin_role, defaults.site_admin_role),
        ];
        for ((stored, default), sent) in fields.into_iter().zip(&names) {
            match sent {
                Some(Some(value)) => stored.clone_from(value),
                // `null` restores the default.
                Some(None) => *stored = default,
                None => {}
            }
        }
        if let Some(seconds) = timeout {
            settings.sso_api_token_session_timeout = seconds;
        }
        if settings.enabled {
            need(&settings.idp_cert, "idp-cert")?;
            need(&settings.sso_endpoint_url, "sso-endpoint-url")?;
            need(&settings.slo_endpoint_url, "slo-endpoint-url")?;
        }
        Ok(())
    })
    .await?;
    Ok(render(&settings, &headers))
}

/// `POST /api/v2/admin/saml-settings/actions/revoke-old-certificate`: forgets `old-idp-cert`
/// and answers the settings.
pub(crate) async fn revoke_old_certificate(
    AxumState(state): AxumState<State>,
    _admin: SiteAdmin,
    headers: HeaderMap,
) -> Result<JsonApi, Error> {
    let settings = update::<SamlSettings>(&state, |settings| {
        settings.old_idp_cert = None;
        Ok(())
    })
    .await?;
    Ok(render(&settings, &headers))
}

fn render(settings: &SamlSettings, headers: &HeaderMap) -> JsonApi {
    JsonApi::ok(Document::one(saml_resource(
        settings,
        &absolute_url(headers, ""),
    )))
}

/// A certificate compared without surrounding whitespace; blank is none.
fn normalized(pem: Option<&str>) -> Option<&str> {
    pem.map(str::trim).filter(|pem| !pem.is_empty())
}

/// 422 at `idp-cert` unless `pem` is one PEM `CERTIFICATE` block holding an X.509
/// certificate.
fn check_certificate(pem: &str) -> Result<(), Error> {
    let invalid = |why: &str| {
        Error::invalid_attribute(
            "idp-cert",
            format!("idp-cert is not a PEM X.509 certificate: {why}"),
        )
    };
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.trim().as_bytes())
        .map_err(|err| invalid(&err.to_string()))?;
    if block.label != "CERTIFICATE" {
        return Err(invalid(&format!("the PEM block is {:?}", block.label)));
    }
    block
        .parse_x509()
        .map_err(|err| invalid(&err.to_string()))?;
    Ok(())
}
