//! The page a browser gets for a path the platform does not serve: TFE's error page, with the
//! site administrators' customization (`error` instructions, `footer`, `support-email-address`;
//! `admin/customization.rs`).
//!
//! Where it sits: the router's fallback (`routes.rs`). Only a request that asks for HTML
//! (`Accept` naming `text/html`) outside `/api/` gets the page; every API client keeps the
//! JSON:API 404 document.
//!
//! Invariants: the answer is a 404 whatever the settings; the `error` and `footer` texts are
//! put in as HTML, as TFE shows them (only a site administrator can set them), and the support
//! address is escaped; a store that cannot be read still gets the page, without customization.

use axum::extract::Request;
use axum::response::{Html, IntoResponse, Response};
use http::{StatusCode, header};

use crate::store::site_settings::{CustomizationSettings, load_setting};
use crate::{Error, State};

/// The router's fallback: the error page for a browser, a JSON:API 404 for anyone else.
pub(crate) async fn not_found(
    axum::extract::State(state): axum::extract::State<State>,
    request: Request,
) -> Response {
    if !wants_html(&request) {
        return Error::NotFound.into_response();
    }
    let customization = load_setting::<CustomizationSettings>(state.storage())
        .await
        .map(|(settings, _)| settings)
        .unwrap_or_default();
    (StatusCode::NOT_FOUND, Html(page(&customization))).into_response()
}

/// Whether the caller is a browser asking for a page rather than an API client.
fn wants_html(request: &Request) -> bool {
    if request.uri().path().starts_with("/api/") {
        return false;
    }
    request
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.to_ascii_lowercase().contains("text/html"))
}

fn page(customization: &CustomizationSettings) -> String {
    let mut html = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">\
         <title>Page not found</title></head>\n<body>\n<h1>Page not found</h1>\n\
         <p>The page you were looking for doesn't exist. You may have mistyped the address or \
         the page may have moved.</p>\n",
    );
    if !customization.error.trim().is_empty() {
        html.push_str("<div class=\"error-instructions\">");
        html.push_str(customization.error.trim());
        html.push_str("</div>\n");
    }
    if !customization.support_email_address.is_empty() {
        let address = escape(&customization.support_email_address);
        html.push_str(&format!(
            "<p>Need help? Contact <a href=\"mailto:{address}\">{address}</a>.</p>\n"
        ));
    }
    if !customization.footer.trim().is_empty() {
        html.push_str("<footer>");
        html.push_str(customization.footer.trim());
        html.push_str("</footer>\n");
    }
    html.push_str("</body>\n</html>\n");
    html
}

/// Escapes text for an HTML attribute or element.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_carries_the_customization_and_escapes_the_address() {
        let customization = CustomizationSettings {
            error: "<p>Call the <b>platform team</b>.</p>".to_owned(),
            footer: "ACME Corp".to_owned(),
            support_email_address: "help+\"x\"@acme.test".to_owned(),
            ..CustomizationSettings::default()
        };
        let html = page(&customization);
        assert!(
            html.contains("<p>Call the <b>platform team</b>.</p>"),
            "{html}"
        );
        assert!(html.contains("<footer>ACME Corp</footer>"), "{html}");
        assert!(
            html.contains("mailto:help+&quot;x&quot;@acme.test"),
            "{html}"
        );
        let plain = page(&CustomizationSettings {
            support_email_address: String::new(),
            ..CustomizationSettings::default()
        });
        assert!(!plain.contains("error-instructions") && !plain.contains("<footer>"));
    }
}
