//! The pki engine: every path it serves, in one table ([`route`]), and the dispatch of each
//! (path, operation) to its family's handler.
//!
//! Routes (relative to the mount):
//! - roles: `roles` (list), `roles/<name>` (`roles.rs`);
//! - CA creation: `root/generate/<type>`, `root/rotate/<type>`, `issuers/generate/root/<type>`,
//!   `root` (delete), `root/sign-intermediate`, `root/sign-self-issued` (`root.rs`);
//!   `intermediate/generate/<type>`, `issuers/generate/intermediate/<type>`,
//!   `intermediate/set-signed`, `issuers/import/cert`, `issuers/import/bundle`, `config/ca`
//!   (`intermediate.rs`);
//! - issuers and keys: `issuers` (list), `issuer/<ref>`, `issuer/<ref>/json|pem|der`,
//!   `config/issuers`, `keys` (list), `key/<ref>`, `config/keys`, `config/urls`
//!   (`issuers.rs`);
//! - issuance: `issue/<role>`, `sign/<role>`, `sign-verbatim[/<role>]` and the same under
//!   `issuer/<ref>/`, plus `issuer/<ref>/sign-intermediate` and
//!   `issuer/<ref>/sign-self-issued` (`issue.rs`, `root.rs`);
//! - fetch: `ca`, `ca/pem`, `ca_chain`, `cert/ca`, `cert/ca_chain`, `cert/crl`,
//!   `cert/<serial>[/raw[/pem]]`, `certs` and `certs/revoked` (lists) (`fetch.rs`);
//! - revocation: `revoke` (`revoke.rs`), `crl`, `crl/pem`, `crl/rotate`, `config/crl`,
//!   `issuer/<ref>/crl[/der|/pem]` (`crl.rs`), `tidy`, `tidy-status` (`tidy.rs`).
//!
//! Special paths: the fetch endpoints are unauthenticated, as upstream's; `root` and
//! `root/sign-self-issued` need `sudo`.
//!
//! Invariants: a path outside the table is `unsupported path` (404); a known path asked for an
//! operation it does not serve is `unsupported operation` (405); handlers get the mount's
//! shared state, never the engine.

use async_trait::async_trait;
use secrets_sdk::{Engine, EngineError, Lease, Operation, Request, Response, SpecialPaths};

use crate::crl::CrlForm;
use crate::fetch::CertForm;
use crate::intermediate::ImportPath;
use crate::issuers::RawForm;
use crate::mount::Mount;
use crate::{crl, fetch, intermediate, issue, issuers, revoke, roles, root, tidy};

/// One pki mount.
#[derive(Debug)]
pub struct PkiEngine {
    mount: Mount,
}

impl PkiEngine {
    pub(crate) fn new(mount: Mount) -> PkiEngine {
        PkiEngine { mount }
    }
}

/// The path families, with what each path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route<'a> {
    Roles,
    Role(&'a str),
    GenerateRoot(&'a str),
    Root,
    SignIntermediate(&'a str),
    SignSelfIssued(&'a str, bool),
    GenerateIntermediate(&'a str),
    Import(ImportPath),
    ConfigIssuers,
    ConfigKeys,
    ConfigUrls,
    ConfigCrl,
    Issuers,
    Issuer(&'a str),
    IssuerRaw(&'a str, RawForm),
    IssuerCrl(&'a str, CrlForm),
    Keys,
    Key(&'a str),
    Issue(&'a str, Option<&'a str>),
    Sign(&'a str, Option<&'a str>),
    SignVerbatim(Option<&'a str>, Option<&'a str>),
    Ca(bool),
    CaChain,
    CertCa(bool),
    CertCrl,
    Cert(&'a str, CertForm),
    Certs,
    CertsRevoked,
    Crl(bool),
    CrlRotate,
    Revoke,
    Tidy,
    TidyStatus,
}

/// Vault's `GenericNameRegex`: word characters, with `-` and `.` inside.
fn name(segment: &str) -> Option<&str> {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let chars: Vec<char> = segment.chars().collect();
    let ok = match chars.as_slice() {
        [] => false,
        [one] => word(*one),
        [first, middle @ .., last] => {
            word(*first) && word(*last) && middle.iter().all(|c| word(*c) || *c == '-' || *c == '.')
        }
    };
    ok.then_some(segment)
}

fn route(path: &str) -> Option<Route<'_>> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let parts: Vec<&str> = path.split('/').collect();
    Some(match parts.as_slice() {
        ["roles"] => Route::Roles,
        ["roles", role] => Route::Role(name(role)?),
        ["root"] => Route::Root,
        ["root", "generate", kind] | ["root", "rotate", kind] => Route::GenerateRoot(kind),
        ["issuers", "generate", "root", kind] => Route::GenerateRoot(kind),
        ["root", "sign-intermediate"] => Route::SignIntermediate("default"),
        ["root", "sign-self-issued"] => Route::SignSelfIssued("default", true),
        ["intermediate", "generate", kind] => Route::GenerateIntermediate(kind),
        ["issuers", "generate", "intermediate", kind] => Route::GenerateIntermediate(kind),
        ["intermediate", "set-signed"] | ["issuers", "import", "cert"] => {
            Route::Import(ImportPath::Certificates)
        }
        ["issuers", "import", "bundle"] | ["config", "ca"] => Route::Import(ImportPath::Bundle),
        ["config", "issuers"] => Route::ConfigIssuers,
        ["config", "keys"] => Route::ConfigKeys,
        ["config", "urls"] => Route::ConfigUrls,
        ["config", "crl"] => Route::ConfigCrl,
        ["issuers"] => Route::Issuers,
        ["issuer", reference] => Route::Issuer(name(reference)?),
        ["issuer", reference, "json"] => Route::IssuerRaw(name(reference)?, RawForm::Json),
        ["issuer", reference, "pem"] => Route::IssuerRaw(name(reference)?, RawForm::Pem),
        ["issuer", reference, "der"] => Route::IssuerRaw(name(reference)?, RawForm::Der),
        ["issuer", reference, "crl"] => Route::IssuerCrl(name(reference)?, CrlForm::Json),
        ["issuer", reference, "crl", "der"] => Route::IssuerCrl(name(reference)?, CrlForm::Der),
        ["issuer", reference, "crl", "pem"] => Route::IssuerCrl(name(reference)?, CrlForm::Pem),
        ["issuer", reference, "issue", role] => Route::Issue(name(role)?, Some(name(reference)?)),
        ["issuer", reference, "sign", role] => Route::Sign(name(role)?, Some(name(reference)?)),
        ["issuer", reference, "sign-verbatim"] => Route::SignVerbatim(None, Some(name(reference)?)),
        ["issuer", reference, "sign-verbatim", role] => {
            Route::SignVerbatim(Some(name(role)?), Some(name(reference)?))
        }
        ["issuer", reference, "sign-intermediate"] => Route::SignIntermediate(name(reference)?),
        ["issuer", reference, "sign-self-issued"] => Route::SignSelfIssued(name(reference)?, false),
        ["keys"] => Route::Keys,
        ["key", reference] => Route::Key(name(reference)?),
        ["issue", role] => Route::Issue(name(role)?, None),
        ["sign", role] => Route::Sign(name(role)?, None),
        ["sign-verbatim"] => Route::SignVerbatim(None, None),
        ["sign-verbatim", role] => Route::SignVerbatim(Some(name(role)?), None),
        ["ca"] => Route::Ca(false),
        ["ca", "pem"] => Route::Ca(true),
        ["ca_chain"] => Route::CaChain,
        ["cert", "ca_chain"] => Route::CertCa(true),
        ["cert", "ca"] => Route::CertCa(false),
        ["cert", "crl"] => Route::CertCrl,
        ["cert", serial] => Route::Cert(serial, CertForm::Json),
        ["cert", serial, "raw"] => Route::Cert(serial, CertForm::Der),
        ["cert", serial, "raw", "pem"] => Route::Cert(serial, CertForm::Pem),
        ["certs"] => Route::Certs,
        ["certs", "revoked"] => Route::CertsRevoked,
        ["crl"] => Route::Crl(false),
        ["crl", "pem"] => Route::Crl(true),
        ["crl", "rotate"] => Route::CrlRotate,
        ["revoke"] => Route::Revoke,
        ["tidy"] => Route::Tidy,
        ["tidy-status"] => Route::TidyStatus,
        _ => return None,
    })
}

impl PkiEngine {
    async fn dispatch(
        &self,
        route: Route<'_>,
        request: &Request,
    ) -> Result<Option<Response>, EngineError> {
        use Operation::{Create, Delete, List, Patch, Read, Update};
        let mount = &self.mount;
        let data = &request.data;
        match (route, request.operation) {
            (Route::Roles, List) => roles::list(mount).await,
            (Route::Role(name), Read) => roles::read(mount, name).await,
            (Route::Role(name), Create | Update) => roles::write(mount, name, data).await,
            (Route::Role(name), Patch) => roles::patch(mount, name, data).await,
            (Route::Role(name), Delete) => roles::delete(mount, name).await,
            (Route::GenerateRoot(kind), Create | Update) => {
                root::generate(mount, request, kind).await
            }
            (Route::Root, Delete) => root::delete_all(mount).await,
            (Route::SignIntermediate(reference), Create | Update) => {
                root::sign_intermediate(mount, request, reference).await
            }
            (Route::SignSelfIssued(reference, _), Create | Update) => {
                root::sign_self_issued(mount, request, reference).await
            }
            (Route::GenerateIntermediate(kind), Create | Update) => {
                intermediate::generate(mount, request, kind).await
            }
            (Route::Import(path), Create | Update) => {
                intermediate::import(mount, request, path).await
            }
            (Route::ConfigIssuers, Read) => issuers::read_config(mount).await,
            (Route::ConfigIssuers, Create | Update) => issuers::write_config(mount, request).await,
            (Route::ConfigKeys, Read) => issuers::read_keys_config(mount).await,
            (Route::ConfigKeys, Create | Update) => {
                issuers::write_keys_config(mount, request).await
            }
            (Route::ConfigUrls, Read) => issuers::read_urls(mount).await,
            (Route::ConfigUrls, Create | Update) => issuers::write_urls(mount, request).await,
            (Route::ConfigCrl, Read) => crl::read_config(mount).await,
            (Route::ConfigCrl, Create | Update) => crl::write_config(mount, request).await,
            (Route::Issuers, List) => issuers::list(mount).await,
            (Route::Issuer(reference), Read) => issuers::read(mount, reference).await,
            (Route::Issuer(reference), Create | Update | Patch) => {
                issuers::update(mount, request, reference).await
            }
            (Route::Issuer(reference), Delete) => issuers::delete(mount, reference).await,
            (Route::IssuerRaw(reference, form), Read) => {
                issuers::read_raw(mount, reference, form).await
            }
            (Route::IssuerCrl(reference, form), Read) => {
                crl::fetch_issuer(mount, reference, form).await
            }
            (Route::Keys, List) => issuers::list_keys(mount).await,
            (Route::Key(reference), Read) => issuers::read_key(mount, reference).await,
            (Route::Key(reference), Create | Update) => {
                issuers::update_key(mount, request, reference).await
            }
            (Route::Key(reference), Delete) => issuers::delete_key(mount, reference).await,
            (Route::Issue(role, issuer), Create | Update) => {
                issue::issue(mount, request, role, issuer).await
            }
            (Route::Sign(role, issuer), Create | Update) => {
                issue::sign(mount, request, role, issuer).await
            }
            (Route::SignVerbatim(role, issuer), Create | Update) => {
                issue::sign_verbatim(mount, request, role, issuer).await
            }
            (Route::Ca(pem), Read) => fetch::ca(mount, pem).await,
            (Route::CaChain, Read) => fetch::ca_chain(mount).await,
            (Route::CertCa(chain), Read) => fetch::cert_ca(mount, chain).await,
            (Route::CertCrl, Read) => crl::fetch_default_json(mount).await,
            (Route::Cert(serial, form), Read) => fetch::cert(mount, serial, form).await,
            (Route::Certs, List) => fetch::list(mount).await,
            (Route::CertsRevoked, List) => fetch::list_revoked(mount).await,
            (Route::Crl(pem), Read) => crl::fetch_default(mount, pem).await,
            (Route::CrlRotate, Read) => crl::rotate(mount).await,
            (Route::Revoke, Create | Update) => revoke::revoke(mount, request).await,
            (Route::Tidy, Create | Update) => tidy::tidy(mount, request).await,
            (Route::TidyStatus, Read) => tidy::status(mount).await,
            _ => Err(EngineError::UnsupportedOperation),
        }
    }
}

#[async_trait]
impl Engine for PkiEngine {
    async fn handle(&self, request: Request) -> Result<Option<Response>, EngineError> {
        let route = route(&request.path).ok_or(EngineError::UnsupportedPath)?;
        self.dispatch(route, &request).await
    }

    async fn revoke(&self, lease: &Lease) -> Result<(), EngineError> {
        revoke::revoke_leased(&self.mount, &lease.internal).await
    }

    fn special_paths(&self) -> SpecialPaths {
        SpecialPaths {
            unauthenticated: [
                "cert/*",
                "ca/pem",
                "ca_chain",
                "ca",
                "crl/pem",
                "crl",
                "issuer/+/crl/der",
                "issuer/+/crl/pem",
                "issuer/+/crl",
                "issuer/+/pem",
                "issuer/+/der",
                "issuer/+/json",
                "issuers/",
            ]
            .map(String::from)
            .to_vec(),
            root: ["root", "root/sign-self-issued"].map(String::from).to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_cover_upstreams_paths_and_refuse_bad_names() {
        assert_eq!(route("roles/"), Some(Route::Roles));
        assert_eq!(route("roles/web"), Some(Route::Role("web")));
        assert_eq!(route("roles/-bad"), None);
        assert_eq!(
            route("root/generate/internal"),
            Some(Route::GenerateRoot("internal"))
        );
        assert_eq!(
            route("issuer/default/issue/web"),
            Some(Route::Issue("web", Some("default")))
        );
        assert_eq!(
            route("issuer/x/crl/pem"),
            Some(Route::IssuerCrl("x", CrlForm::Pem))
        );
        assert_eq!(
            route("cert/17-aa"),
            Some(Route::Cert("17-aa", CertForm::Json))
        );
        assert_eq!(route("cert/ca_chain"), Some(Route::CertCa(true)));
        assert_eq!(
            route("sign-verbatim"),
            Some(Route::SignVerbatim(None, None))
        );
        assert_eq!(route("certs/"), Some(Route::Certs));
        assert_eq!(route("nope"), None);
    }
}
