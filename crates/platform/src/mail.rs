//! Outgoing mail over SMTP: the SMTP settings' test message and membership invitations.
//!
//! Where it sits: below the handlers (`admin/smtp.rs`, `memberships.rs`), above `store/`
//! (it takes the stored SMTP and customization settings as arguments and reads nothing
//! itself). One connection per message (lettre's transport without a pool), STARTTLS when the
//! server offers it (implicit TLS on port 465), then `AUTH PLAIN` or `AUTH LOGIN` when the
//! settings ask for it.
//!
//! Invariants: a send never waits longer than the configured timeout (each SMTP command has
//! it, and the whole exchange is bounded by it plus a second); its failure is classified by
//! the server's reply code, never by text: 530/534/535 (credentials refused or required) are
//! [`DeliveryFailure::Credentials`], any other error reply [`DeliveryFailure::Reply`], silence
//! or no connection [`DeliveryFailure::Timeout`]. The password is never logged.

use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::Error;
use crate::error::DeliveryFailure;
use crate::store::site_settings::{CustomizationSettings, SmtpSettings};

/// The SMTP port when the settings name none.
pub(crate) const DEFAULT_SMTP_PORT: u16 = 25;

/// One message to send.
#[derive(Debug, Clone)]
pub(crate) struct Mail {
    pub(crate) to: String,
    pub(crate) subject: String,
    pub(crate) body: String,
}

/// Sends `mail` with `smtp`, signed with the customization's footer and support address
/// (also its `Reply-To`). A bad sender is a 422 at `sender`, a bad recipient a 422 at
/// `recipient_attribute`; delivery failures are [`Error::Delivery`].
pub(crate) async fn send(
    smtp: &SmtpSettings,
    customization: &CustomizationSettings,
    mail: &Mail,
    recipient_attribute: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let host = smtp
        .host
        .as_deref()
        .map(str::trim)
        .filter(|host| !host.is_empty())
        .ok_or_else(|| Error::invalid_attribute("host", "host can't be blank"))?;
    let port = smtp.port.unwrap_or(DEFAULT_SMTP_PORT);
    let sender: Mailbox = smtp
        .sender
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|_| Error::invalid_attribute("sender", "sender is not a valid email address"))?;
    let to: Mailbox = mail.to.parse().map_err(|_| {
        Error::invalid_attribute(
            recipient_attribute,
            format!("{recipient_attribute} is not a valid email address"),
        )
    })?;
    let mut message = Message::builder()
        .from(sender)
        .to(to)
        .subject(mail.subject.clone())
        .header(ContentType::TEXT_PLAIN);
    if let Ok(support) = customization.support_email_address.parse::<Mailbox>() {
        message = message.reply_to(support);
    }
    let message = message
        .body(signed_body(customization, &mail.body))
        .map_err(|err| Error::Internal(format!("building a mail: {err}")))?;

    let tls = TlsParameters::new(host.to_owned())
        .map_err(|err| Error::invalid_attribute("host", format!("host: {err}")))?;
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(port)
        .timeout(Some(timeout))
        .tls(if port == 465 {
            Tls::Wrapper(tls)
        } else {
            Tls::Opportunistic(tls)
        });
    let mechanism = match smtp.auth.as_str() {
        "plain" => Some(Mechanism::Plain),
        "login" => Some(Mechanism::Login),
        _ => None,
    };
    if let Some(mechanism) = mechanism {
        builder = builder
            .credentials(Credentials::new(
                smtp.username.clone().unwrap_or_default(),
                smtp.password.clone().unwrap_or_default(),
            ))
            .authentication(vec![mechanism]);
    }
    let transport = builder.build();
    match tokio::time::timeout(timeout + Duration::from_secs(1), transport.send(message)).await {
        Err(_) => Err(delivery(
            DeliveryFailure::Timeout,
            format!("the SMTP server {host}:{port} did not answer in time"),
        )),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(classify(&err, host, port)),
    }
}

fn delivery(failure: DeliveryFailure, detail: String) -> Error {
    Error::Delivery { failure, detail }
}

/// The failure of a send, by what the server did.
fn classify(err: &lettre::transport::smtp::Error, host: &str, port: u16) -> Error {
    if err.is_timeout() {
        return delivery(
            DeliveryFailure::Timeout,
            format!("the SMTP server {host}:{port} did not answer in time"),
        );
    }
    if let Some(code) = err.status() {
        let code = u16::from(code);
        let failure = if matches!(code, 530 | 534 | 535) {
            DeliveryFailure::Credentials
        } else {
            DeliveryFailure::Reply
        };
        return delivery(failure, format!("the SMTP server answered: {err}"));
    }
    if err.is_response() || err.is_client() || err.is_tls() {
        return delivery(
            DeliveryFailure::Reply,
            format!("the SMTP exchange failed: {err}"),
        );
    }
    // No reply at all: the connection could not be made or was dropped.
    delivery(
        DeliveryFailure::Timeout,
        format!("the SMTP server {host}:{port} could not be reached: {err}"),
    )
}

/// `body`, then the customization's footer and the support address.
fn signed_body(customization: &CustomizationSettings, body: &str) -> String {
    let mut text = body.trim_end().to_owned();
    text.push_str("\n\n-- \n");
    if !customization.footer.trim().is_empty() {
        text.push_str(customization.footer.trim());
        text.push('\n');
    }
    text.push_str("Support: ");
    text.push_str(&customization.support_email_address);
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_carries_the_footer_and_the_support_address() {
        let mut customization = CustomizationSettings::default();
        let plain = signed_body(&customization, "Hello\n\n");
        assert!(plain.starts_with("Hello\n\n-- \nSupport: "), "{plain}");
        customization.footer = "ACME platform team".to_owned();
        customization.support_email_address = "help@acme.test".to_owned();
        let signed = signed_body(&customization, "Hello");
        assert_eq!(
            signed,
            "Hello\n\n-- \nACME platform team\nSupport: help@acme.test\n"
        );
    }
}
