//! Short-lived signed URLs for blobs: the `upload-url` of a configuration version (PUT) and the
//! target of download redirects (GET), both usable without a bearer token.
//!
//! Shape: `/_archivist/v1/object/<expires>.<signature>/<object>`, where `<object>` names what
//! the URL reaches (`configuration-versions/cv-…` for an upload,
//! `configuration-versions/cv-….tar.gz` for a download), `<expires>` is a Unix time in seconds
//! and `<signature>` is the unpadded base64url HMAC-SHA256 of `METHOD \n object \n expires`
//! under a per-server key (kept in the store, see `store::signing_key`). go-tfe's tests expect
//! `/object/` in upload URLs; TFE's own are `…/_archivist/v1/object/<secret>`.
//!
//! Where it sits: handlers call [`Signer::sign`] when they hand a URL out and
//! [`Signer::verify`] first thing in the unauthenticated object routes of `routes.rs`.
//!
//! Invariants:
//! - Verification is constant-time (`aws_lc_rs::hmac::verify`) and checks the method: a
//!   download URL never authorises an upload, nor the reverse, nor another object.
//! - Expiry is checked against the caller's clock value, so tests need no sleeps.
//! - Nothing else about the request is looked at: `Authorization`, `Accept` and cookies that
//!   clients carry over after a redirect are ignored.

use aws_lc_rs::hmac;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::HeaderMap;

/// Where every signed object URL starts.
pub(crate) const OBJECT_PREFIX: &str = "/_archivist/v1/object";

/// How long an upload URL stays valid: Terraform and the SDKs upload right after create, and
/// retry for a while; OTF uses the same hour.
pub(crate) const UPLOAD_TTL_SECS: u64 = 60 * 60;

/// How long a download redirect target stays valid: clients follow it at once.
pub(crate) const DOWNLOAD_TTL_SECS: u64 = 5 * 60;

/// What a URL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// `PUT` the object.
    Upload,
    /// `GET` the object.
    Download,
}

impl Access {
    fn method(self) -> &'static str {
        match self {
            Access::Upload => "PUT",
            Access::Download => "GET",
        }
    }
}

/// Why a signed URL was refused. Both answer 404 (pytfe reports "Upload URL not found or
/// expired").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SignatureError {
    #[error("the URL has expired")]
    Expired,
    #[error("the URL signature is not valid")]
    Invalid,
}

/// Signs and verifies object URLs with the server's key.
pub(crate) struct Signer {
    key: hmac::Key,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

/// A fresh random 32-byte signing key.
pub(crate) fn generate_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    aws_lc_rs::rand::fill(&mut key).expect("the system random generator works");
    key
}

impl Signer {
    pub(crate) fn new(key: &[u8]) -> Signer {
        Signer {
            key: hmac::Key::new(hmac::HMAC_SHA256, key),
        }
    }

    /// The signed path (no scheme or host) giving `access` to `object` until `expires_at`.
    pub(crate) fn sign(&self, access: Access, object: &str, expires_at: u64) -> String {
        let tag = hmac::sign(&self.key, message(access, object, expires_at).as_bytes());
        format!(
            "{OBJECT_PREFIX}/{expires_at}.{}/{object}",
            URL_SAFE_NO_PAD.encode(tag.as_ref())
        )
    }

    /// Checks the `<expires>.<signature>` path segment of a request for `access` to `object`
    /// at Unix time `now`.
    pub(crate) fn verify(
        &self,
        access: Access,
        object: &str,
        segment: &str,
        now: u64,
    ) -> Result<(), SignatureError> {
        let (expires, signature) = segment.split_once('.').ok_or(SignatureError::Invalid)?;
        let expires_at: u64 = expires.parse().map_err(|_| SignatureError::Invalid)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| SignatureError::Invalid)?;
        hmac::verify(
            &self.key,
            message(access, object, expires_at).as_bytes(),
            &signature,
        )
        .map_err(|_| SignatureError::Invalid)?;
        if now > expires_at {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }
}

impl crate::State {
    /// The server's URL signer; the key is loaded from the store, or created there, on first
    /// use (`store::configuration_versions::load_or_create_signing_key`).
    pub(crate) async fn signer(&self) -> Result<&Signer, crate::Error> {
        self.inner
            .signer
            .get_or_try_init(|| async {
                let key = crate::store::configuration_versions::load_or_create_signing_key(
                    self.storage(),
                    generate_key(),
                )
                .await?;
                Ok::<Signer, crate::Error>(Signer::new(&key))
            })
            .await
    }
}

fn message(access: Access, object: &str, expires_at: u64) -> String {
    format!("{}\n{object}\n{expires_at}", access.method())
}

/// `path` made absolute from the request's `Host` (Terraform needs an absolute upload URL),
/// with the scheme from `X-Forwarded-Proto` when a proxy set it, else `http`.
pub(crate) fn absolute_url(headers: &HeaderMap, path: &str) -> String {
    let host = headers
        .get(http::header::HOST)
        .and_then(|value| value.to_str().ok())
        .filter(|host| !host.is_empty() && host.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or("127.0.0.1");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|value| value.to_str().ok())
        .filter(|scheme| matches!(*scheme, "http" | "https"))
        .unwrap_or("http");
    format!("{scheme}://{host}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &str = "configuration-versions/cv-abc";

    fn segment(path: &str) -> &str {
        path.strip_prefix(OBJECT_PREFIX)
            .unwrap()
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap()
    }

    #[test]
    fn sign_then_verify_accepts_until_expiry_inclusive() {
        let signer = Signer::new(&[1; 32]);
        let path = signer.sign(Access::Upload, OBJECT, 1000);
        assert!(path.starts_with("/_archivist/v1/object/1000."), "{path}");
        assert!(path.ends_with("/configuration-versions/cv-abc"), "{path}");
        let seg = segment(&path);
        assert_eq!(signer.verify(Access::Upload, OBJECT, seg, 999), Ok(()));
        assert_eq!(signer.verify(Access::Upload, OBJECT, seg, 1000), Ok(()));
        assert_eq!(
            signer.verify(Access::Upload, OBJECT, seg, 1001),
            Err(SignatureError::Expired)
        );
    }

    #[test]
    fn verify_rejects_other_method_object_key_or_expiry() {
        let signer = Signer::new(&[1; 32]);
        let path = signer.sign(Access::Download, OBJECT, 1000);
        let seg = segment(&path);
        let invalid = Err(SignatureError::Invalid);
        assert_eq!(signer.verify(Access::Upload, OBJECT, seg, 0), invalid);
        assert_eq!(
            signer.verify(Access::Download, "configuration-versions/cv-abd", seg, 0),
            invalid
        );
        assert_eq!(
            Signer::new(&[2; 32]).verify(Access::Download, OBJECT, seg, 0),
            invalid
        );
        let later = seg.replacen("1000.", "9000.", 1);
        assert_eq!(signer.verify(Access::Download, OBJECT, &later, 0), invalid);
    }

    #[test]
    fn verify_rejects_malformed_segments() {
        let signer = Signer::new(&[1; 32]);
        for seg in ["", "1000", "x.y", "1000.", "1000.!!!", ".abc", "-1.abc"] {
            assert_eq!(
                signer.verify(Access::Upload, OBJECT, seg, 0),
                Err(SignatureError::Invalid),
                "{seg:?}"
            );
        }
    }

    #[test]
    fn generated_keys_differ() {
        assert_ne!(generate_key(), generate_key());
    }

    #[test]
    fn absolute_url_uses_host_and_forwarded_proto() {
        let mut headers = HeaderMap::new();
        assert_eq!(absolute_url(&headers, "/x"), "http://127.0.0.1/x");
        headers.insert(http::header::HOST, "tfe.example:8080".parse().unwrap());
        assert_eq!(absolute_url(&headers, "/x"), "http://tfe.example:8080/x");
        headers.insert("x-forwarded-proto", "https".parse().unwrap());
        assert_eq!(absolute_url(&headers, "/x"), "https://tfe.example:8080/x");
        headers.insert("x-forwarded-proto", "gopher".parse().unwrap());
        assert_eq!(absolute_url(&headers, "/x"), "http://tfe.example:8080/x");
    }
}
