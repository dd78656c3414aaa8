//! How one server reaches a service on another server of the cluster: a connector for
//! hyper-util's client that speaks plain HTTP to `http://` URLs and HTTPS (rustls on aws-lc-rs)
//! to `https://` URLs, verifying the other server's certificate against the CA its service's
//! configuration names (`tls { ca_file = "..." }`, as Nomad's `tls` block).
//!
//! Where it sits: `cairn`'s wiring builds one [`PeerTls`] per service whose listener has a
//! `ca_file` ([`PeerTls::from_ca_file`]) and attaches them to the leadership
//! ([`with_peer_tls`]); a server that forwards to the leader (the scheduler's writes and client
//! protocol, the secrets store's `sys/step-down` on a standby) asks
//! [`Leadership::peer_tls`](crate::Leadership::peer_tls) for its service and builds its client
//! on [`connector`].
//!
//! Invariants:
//! - the crypto provider is aws-lc-rs, passed explicitly (never the process-wide default);
//!   ALPN offers only `http/1.1` (set by the connector).
//! - the roots are exactly the CA file's certificates: no system or built-in roots, so an
//!   `https://` peer is trusted only through a configured `ca_file` (without one every
//!   handshake fails with an unknown-issuer error, which [`hint`] explains).
//! - errors name the file they are about.
//! - [`with_peer_tls`] changes nothing of the leadership it wraps: every other method is the
//!   inner one's.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;
use tokio::sync::watch;

use crate::{Leadership, ServerInfo};

/// The TLS client settings for reaching one service on the other servers: the roots from its
/// `ca_file`. Cheap to clone.
#[derive(Clone)]
pub struct PeerTls {
    config: Arc<ClientConfig>,
}

impl fmt::Debug for PeerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerTls").finish_non_exhaustive()
    }
}

impl PeerTls {
    /// Trusts the certificates of the PEM file at `path` (one CA, or several).
    pub fn from_ca_file(path: &Path) -> Result<PeerTls, String> {
        let pem = std::fs::read(path)
            .map_err(|err| format!("cannot read the CA file {}: {err}", path.display()))?;
        PeerTls::from_ca_pem(&pem)
            .map_err(|message| format!("the CA file {}: {message}", path.display()))
    }

    /// Trusts the certificates in `pem`.
    pub fn from_ca_pem(pem: &[u8]) -> Result<PeerTls, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| format!("invalid PEM: {err}"))?;
        if certs.is_empty() {
            return Err("no certificate (BEGIN CERTIFICATE) found".to_owned());
        }
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|err| format!("not a usable CA certificate: {err}"))?;
        }
        Ok(PeerTls::with_roots(roots))
    }

    /// No roots: every HTTPS peer is refused (a service without `ca_file`).
    fn untrusting() -> PeerTls {
        PeerTls::with_roots(RootCertStore::empty())
    }

    fn with_roots(roots: RootCertStore) -> PeerTls {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        // ALPN is left empty: the connector offers `http/1.1` itself (and refuses a
        // configuration that names protocols already).
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs supports the safe default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        PeerTls {
            config: Arc::new(config),
        }
    }

    /// The rustls client configuration.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

/// The connector type a peer client is built on.
pub type PeerConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// A connector for hyper-util's client: `http://` URLs in the clear, `https://` URLs through
/// TLS verified against `tls` (none: no HTTPS peer is trusted). TCP_NODELAY; connecting may
/// take at most `connect_timeout`.
pub fn connector(tls: Option<&PeerTls>, connect_timeout: Duration) -> PeerConnector {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http.enforce_http(false);
    let tls = tls.cloned().unwrap_or_else(PeerTls::untrusting);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls.config).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

/// A short explanation to add to an error reaching `url` over HTTPS as `service`: where the
/// trusted CA comes from. Empty for `http://` URLs.
pub fn hint(service: &str, url: &str) -> String {
    if url.starts_with("https://") {
        format!(
            " (the other server's certificate is verified against the CA in this server's \
             {service} tls block's ca_file)"
        )
    } else {
        String::new()
    }
}

/// `inner`, answering [`Leadership::peer_tls`] from `tls` (by service name).
pub fn with_peer_tls(
    inner: Arc<dyn Leadership>,
    tls: BTreeMap<String, PeerTls>,
) -> Arc<dyn Leadership> {
    if tls.is_empty() {
        return inner;
    }
    Arc::new(WithPeerTls { inner, tls })
}

struct WithPeerTls {
    inner: Arc<dyn Leadership>,
    tls: BTreeMap<String, PeerTls>,
}

impl fmt::Debug for WithPeerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithPeerTls")
            .field("inner", &self.inner)
            .field("services", &self.tls.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Leadership for WithPeerTls {
    fn watch(&self) -> watch::Receiver<bool> {
        self.inner.watch()
    }

    fn is_leader(&self) -> bool {
        self.inner.is_leader()
    }

    fn is_elected(&self) -> bool {
        self.inner.is_elected()
    }

    fn this_server(&self) -> ServerInfo {
        self.inner.this_server()
    }

    fn leader(&self) -> Option<ServerInfo> {
        self.inner.leader()
    }

    fn leader_addr(&self, service: &str) -> Option<String> {
        self.inner.leader_addr(service)
    }

    fn knows_leader(&self) -> bool {
        self.inner.knows_leader()
    }

    fn peers(&self) -> Vec<ServerInfo> {
        self.inner.peers()
    }

    fn active_since(&self) -> Option<std::time::SystemTime> {
        self.inner.active_since()
    }

    fn step_down(&self) {
        self.inner.step_down();
    }

    fn set_fit(&self, fit: bool) {
        self.inner.set_fit(fit);
    }

    fn peer_tls(&self, service: &str) -> Option<PeerTls> {
        self.tls
            .get(service)
            .cloned()
            .or_else(|| self.inner.peer_tls(service))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualLeadership;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn a_ca_file_is_read_and_bad_ones_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, ca_pem()).unwrap();
        let tls = PeerTls::from_ca_file(&good).unwrap();
        // The connector accepts it (it panics on a configuration with ALPN protocols).
        let _ = connector(Some(&tls), Duration::from_secs(1));
        let _ = connector(None, Duration::from_secs(1));

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = PeerTls::from_ca_file(&empty).unwrap_err();
        assert!(
            err.contains("empty.pem") && err.contains("no certificate"),
            "{err}"
        );

        let err = PeerTls::from_ca_file(&dir.path().join("missing.pem")).unwrap_err();
        assert!(
            err.contains("missing.pem") && err.contains("cannot read"),
            "{err}"
        );
    }

    #[test]
    fn the_wrapper_answers_peer_tls_by_service_and_delegates_the_rest() {
        let inner = Arc::new(ManualLeadership::new(false));
        let tls = PeerTls::from_ca_pem(ca_pem().as_bytes()).unwrap();
        let wrapped = with_peer_tls(
            inner.clone(),
            BTreeMap::from([("scheduler".to_owned(), tls)]),
        );
        assert!(wrapped.peer_tls("scheduler").is_some());
        assert!(wrapped.peer_tls("secrets").is_none());
        assert!(!wrapped.is_leader());
        inner.set(true);
        assert!(wrapped.is_leader(), "leadership is the inner one's");
        assert!(
            with_peer_tls(inner, BTreeMap::new())
                .peer_tls("scheduler")
                .is_none()
        );
    }

    #[test]
    fn hints_only_for_https() {
        assert!(hint("scheduler", "https://10.0.0.1:4646").contains("ca_file"));
        assert_eq!(hint("scheduler", "http://10.0.0.1:4646"), "");
    }
}
