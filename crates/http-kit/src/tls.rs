//! TLS server configuration from PEM files, for [`serve_tls`](crate::serve_tls).
//!
//! `cairn` calls [`load_tls_config`] once at start with the paths from its configuration; the
//! resulting config is shared by every connection.
//!
//! Invariants: the crypto provider is always aws-lc-rs, passed explicitly (never the
//! process-wide default, so the result does not depend on what else is linked in); ALPN offers
//! only `http/1.1`; every error names the file it is about.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid PEM in {}: {message}", path.display())]
    InvalidPem { path: PathBuf, message: String },
    #[error("no certificate (BEGIN CERTIFICATE) found in {}", path.display())]
    NoCertificate { path: PathBuf },
    #[error(
        "no private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY) found in {}",
        path.display()
    )]
    NoPrivateKey { path: PathBuf },
    #[error(
        "cannot use certificate {} with key {}: {source}",
        cert_path.display(),
        key_path.display()
    )]
    Config {
        cert_path: PathBuf,
        key_path: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// Builds a server config from a PEM certificate chain (leaf first) and a PEM private key
/// (PKCS#8, PKCS#1 or SEC1). ALPN is `http/1.1`; no client certificates are requested.
pub fn load_tls_config(
    cert_pem_path: &Path,
    key_pem_path: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let cert_pem = read(cert_pem_path)?;
    let key_pem = read(key_pem_path)?;
    let certs = parse_certificates(cert_pem_path, &cert_pem)?;
    let key = parse_private_key(key_pem_path, &key_pem)?;
    let config_error = |source| TlsError::Config {
        cert_path: cert_pem_path.to_path_buf(),
        key_path: key_pem_path.to_path_buf(),
        source,
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(config_error)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(config_error)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_certificates(
    path: &Path,
    pem_bytes: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem_bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| invalid_pem(path, err))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn parse_private_key(path: &Path, pem_bytes: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem_bytes).map_err(|err| match err {
        pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            path: path.to_path_buf(),
        },
        other => invalid_pem(path, other),
    })
}

fn invalid_pem(path: &Path, err: pem::Error) -> TlsError {
    TlsError::InvalidPem {
        path: path.to_path_buf(),
        message: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_temp(dir: &Path, name: &str, contents: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn load_tls_config_accepts_matching_cert_and_key_with_http11_alpn() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let (cert, key) = self_signed();
        let cert_path = write_temp(dir, "cert.pem", &cert);
        let key_path = write_temp(dir, "key.pem", &key);
        let config = load_tls_config(&cert_path, &key_path).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn load_tls_config_missing_file_names_the_file() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let (_, key) = self_signed();
        let key_path = write_temp(dir, "key.pem", &key);
        let cert_path = dir.join("nope.pem");
        let err = load_tls_config(&cert_path, &key_path).unwrap_err();
        assert!(matches!(err, TlsError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("nope.pem"), "{err}");
    }

    #[test]
    fn load_tls_config_key_file_without_key_is_no_private_key() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let (cert, _) = self_signed();
        let cert_path = write_temp(dir, "cert.pem", &cert);
        let key_path = write_temp(dir, "key.pem", &cert);
        let err = load_tls_config(&cert_path, &key_path).unwrap_err();
        assert!(matches!(err, TlsError::NoPrivateKey { .. }), "{err:?}");
        assert!(err.to_string().contains("key.pem"), "{err}");
    }

    #[test]
    fn load_tls_config_cert_file_without_cert_is_no_certificate() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let (_, key) = self_signed();
        let cert_path = write_temp(dir, "cert.pem", &key);
        let key_path = write_temp(dir, "key.pem", &key);
        let err = load_tls_config(&cert_path, &key_path).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
        assert!(err.to_string().contains("cert.pem"), "{err}");
    }

    #[test]
    fn load_tls_config_mismatched_key_is_a_config_error() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let (cert, _) = self_signed();
        let (_, other_key) = self_signed();
        let cert_path = write_temp(dir, "cert.pem", &cert);
        let key_path = write_temp(dir, "key.pem", &other_key);
        let err = load_tls_config(&cert_path, &key_path).unwrap_err();
        assert!(matches!(err, TlsError::Config { .. }), "{err:?}");
    }
}
