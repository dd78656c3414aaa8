//! Building certificates, CSRs and CRLs with rcgen from what the engine decided: the subject,
//! the names, the validity window, CA constraints, usages, authority information access, CRL
//! distribution points, name constraints and policies.
//!
//! Certificates follow the shape Vault's Go code gives them: subject attributes in Go's order
//! (C, ST, L, STREET, POSTALCODE, O, OU, CN, SERIALNUMBER) as PrintableString when they can be;
//! a SHA-1 subject key identifier on every certificate; an authority key identifier equal to
//! the issuer's (roots carry their own); basic constraints only on CAs (or when a role asks for
//! them on leaves); CA key usage `keyCertSign, cRLSign`.
//!
//! Invariants: every function returns an error string instead of panicking; a subject
//! attribute takes one value (rcgen writes no multi-valued RDNs), and more is refused with a
//! 400 by the callers' checks.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, CrlDistributionPoint,
    CustomExtension, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, GeneralSubtree,
    IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose, NameConstraints, OtherNameValue,
    RevocationReason, RevokedCertParams, SanType, SerialNumber,
};
use time::OffsetDateTime;
use x509_parser::prelude::FromDer;
use x509_parser::x509::X509Name;

use crate::cert::{CertInfo, San};
use crate::der;
use crate::keys::PrivateKey;

/// The subject of a certificate, field by field (Vault's `pkix.Name` subset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Subject {
    pub(crate) common_name: String,
    pub(crate) serial_number: String,
    pub(crate) country: Vec<String>,
    pub(crate) province: Vec<String>,
    pub(crate) locality: Vec<String>,
    pub(crate) street_address: Vec<String>,
    pub(crate) postal_code: Vec<String>,
    pub(crate) organization: Vec<String>,
    pub(crate) ou: Vec<String>,
}

const OID_STREET: &[u64] = &[2, 5, 4, 9];
const OID_POSTAL_CODE: &[u64] = &[2, 5, 4, 17];
const OID_SERIAL_NUMBER: &[u64] = &[2, 5, 4, 5];

impl Subject {
    /// The DN in Go's order. More than one value for an attribute is refused.
    pub(crate) fn to_dn(&self) -> Result<DistinguishedName, String> {
        let mut dn = DistinguishedName::new();
        let mut put = |ty: DnType, values: &[String], name: &str| -> Result<(), String> {
            let values = dedup(values);
            match values.as_slice() {
                [] => Ok(()),
                [one] => {
                    dn.push(ty, dn_value(one));
                    Ok(())
                }
                _ => Err(format!(
                    "only one value is supported for the subject's {name}, got {}",
                    values.len()
                )),
            }
        };
        put(DnType::CountryName, &self.country, "country")?;
        put(DnType::StateOrProvinceName, &self.province, "province")?;
        put(DnType::LocalityName, &self.locality, "locality")?;
        put(
            DnType::CustomDnType(OID_STREET.to_vec()),
            &self.street_address,
            "street_address",
        )?;
        put(
            DnType::CustomDnType(OID_POSTAL_CODE.to_vec()),
            &self.postal_code,
            "postal_code",
        )?;
        put(DnType::OrganizationName, &self.organization, "organization")?;
        put(DnType::OrganizationalUnitName, &self.ou, "ou")?;
        if !self.common_name.is_empty() {
            put(
                DnType::CommonName,
                std::slice::from_ref(&self.common_name),
                "common_name",
            )?;
        }
        if !self.serial_number.is_empty() {
            put(
                DnType::CustomDnType(OID_SERIAL_NUMBER.to_vec()),
                std::slice::from_ref(&self.serial_number),
                "serial_number",
            )?;
        }
        Ok(dn)
    }
}

fn dedup(values: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for value in values {
        if !out.contains(value) {
            out.push(value.clone());
        }
    }
    out
}

/// PrintableString when every character allows it (as Go's asn1 marshals strings), else
/// UTF8String.
fn dn_value(value: &str) -> DnValue {
    match rcgen::string::PrintableString::try_from(value) {
        Ok(printable) => DnValue::PrintableString(printable),
        Err(_) => DnValue::Utf8String(value.to_owned()),
    }
}

/// A DER name (a CSR's or certificate's subject) as an rcgen DN, keeping each attribute's
/// string type. Multi-valued RDNs and repeated attribute types are refused.
pub(crate) fn dn_from_raw(raw: &[u8]) -> Result<DistinguishedName, String> {
    let bad = || "unsupported subject: repeated or multi-valued attributes".to_owned();
    let (_, name) = X509Name::from_der(raw).map_err(|_| "unable to parse subject".to_owned())?;
    let mut dn = DistinguishedName::new();
    for rdn in name.iter() {
        let attrs: Vec<_> = rdn.iter().collect();
        let [attr] = attrs.as_slice() else {
            return Err(bad());
        };
        let arcs: Vec<u64> = attr
            .attr_type()
            .iter()
            .ok_or_else(|| "unsupported subject attribute".to_owned())?
            .collect();
        let ty = DnType::from_oid(&arcs);
        if dn.get(&ty).is_some() {
            return Err(bad());
        }
        let value = attr.attr_value();
        let text = std::str::from_utf8(value.data)
            .map_err(|_| "unsupported subject attribute encoding".to_owned())?;
        let dn_value = match value.header.tag().0 {
            19 => dn_value(text),
            22 => rcgen::string::Ia5String::try_from(text)
                .map(DnValue::Ia5String)
                .unwrap_or_else(|_| DnValue::Utf8String(text.to_owned())),
            _ => DnValue::Utf8String(text.to_owned()),
        };
        dn.push(ty, dn_value);
    }
    Ok(dn)
}

/// Authority information access and CRL distribution URLs embedded in issued certificates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Urls {
    pub(crate) issuing_certificates: Vec<String>,
    pub(crate) crl_distribution_points: Vec<String>,
    pub(crate) ocsp_servers: Vec<String>,
}

impl Urls {
    pub(crate) fn is_empty(&self) -> bool {
        self.issuing_certificates.is_empty()
            && self.crl_distribution_points.is_empty()
            && self.ocsp_servers.is_empty()
    }
}

/// Everything a certificate will say.
#[derive(Debug, Clone, Default)]
pub(crate) struct Template {
    pub(crate) subject: Subject,
    /// Overrides `subject` with a DER name copied from a CSR (`use_csr_values`).
    pub(crate) raw_subject: Option<Vec<u8>>,
    pub(crate) sans: Vec<San>,
    pub(crate) serial: Vec<u8>,
    /// Unix seconds.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    pub(crate) is_ca: bool,
    /// -1: unlimited.
    pub(crate) max_path_len: i64,
    pub(crate) basic_constraints_for_leaf: bool,
    pub(crate) key_usage: Vec<String>,
    pub(crate) ext_key_usage: Vec<ExtendedKeyUsagePurpose>,
    pub(crate) permitted_dns_domains: Vec<String>,
    pub(crate) urls: Urls,
    /// A subject key identifier to use instead of the computed one.
    pub(crate) skid: Option<Vec<u8>>,
    pub(crate) policy_identifiers: Vec<String>,
    /// Extensions copied verbatim: `(oid, critical, DER value)`.
    pub(crate) extra_extensions: Vec<(String, bool, Vec<u8>)>,
}

/// Vault's key usage names (`DigitalSignature`, ...; case-insensitive) as rcgen's; unknown
/// names are ignored, as Vault does.
pub(crate) fn key_usages(names: &[String]) -> Vec<KeyUsagePurpose> {
    let mut out = Vec::new();
    for name in names {
        let usage = match name.trim().to_ascii_lowercase().as_str() {
            "digitalsignature" => KeyUsagePurpose::DigitalSignature,
            "contentcommitment" => KeyUsagePurpose::ContentCommitment,
            "keyencipherment" => KeyUsagePurpose::KeyEncipherment,
            "dataencipherment" => KeyUsagePurpose::DataEncipherment,
            "keyagreement" => KeyUsagePurpose::KeyAgreement,
            "certsign" => KeyUsagePurpose::KeyCertSign,
            "crlsign" => KeyUsagePurpose::CrlSign,
            "encipheronly" => KeyUsagePurpose::EncipherOnly,
            "decipheronly" => KeyUsagePurpose::DecipherOnly,
            _ => continue,
        };
        if !out.contains(&usage) {
            out.push(usage);
        }
    }
    out
}

/// Vault's extended key usage names as rcgen's; unknown names are ignored.
pub(crate) fn ext_key_usage(name: &str) -> Option<ExtendedKeyUsagePurpose> {
    let other = |arcs: &[u64]| Some(ExtendedKeyUsagePurpose::Other(arcs.to_vec()));
    match name.trim().to_ascii_lowercase().as_str() {
        "any" => Some(ExtendedKeyUsagePurpose::Any),
        "serverauth" => Some(ExtendedKeyUsagePurpose::ServerAuth),
        "clientauth" => Some(ExtendedKeyUsagePurpose::ClientAuth),
        "codesigning" => Some(ExtendedKeyUsagePurpose::CodeSigning),
        "emailprotection" => Some(ExtendedKeyUsagePurpose::EmailProtection),
        "timestamping" => Some(ExtendedKeyUsagePurpose::TimeStamping),
        "ocspsigning" => Some(ExtendedKeyUsagePurpose::OcspSigning),
        "ipsecendsystem" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 5]),
        "ipsectunnel" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 6]),
        "ipsecuser" => other(&[1, 3, 6, 1, 5, 5, 7, 3, 7]),
        "microsoftservergatedcrypto" => other(&[1, 3, 6, 1, 4, 1, 311, 10, 3, 3]),
        "netscapeservergatedcrypto" => other(&[2, 16, 840, 1, 113730, 4, 1]),
        _ => None,
    }
}

/// Who signs: the certificate's own key (a root), or an issuer made ready by [`rcgen_issuer`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Signer<'a> {
    SelfSigned(&'a PrivateKey),
    Issuer(&'a Issuer<'static, KeyPair>),
}

/// The key a certificate certifies: one we hold, or a public key from a CSR.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SubjectKey<'a> {
    Private(&'a PrivateKey),
    Public(&'a [u8]),
}

fn datetime(unix: i64) -> Result<OffsetDateTime, String> {
    OffsetDateTime::from_unix_timestamp(unix).map_err(|_| format!("invalid time {unix}"))
}

/// Go's subject key identifier: SHA-1 over the SubjectPublicKeyInfo's key bits.
pub(crate) fn key_id(spki: &[u8]) -> Vec<u8> {
    let bits = der::expect(spki, der::SEQUENCE)
        .and_then(|outer| der::children(outer.content))
        .and_then(|parts| {
            parts
                .get(1)
                .map(|bits| bits.content.get(1..).unwrap_or(&[]).to_vec())
        })
        .unwrap_or_default();
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, &bits)
        .as_ref()
        .to_vec()
}

fn custom(oid: &str, critical: bool, value: Vec<u8>) -> Result<CustomExtension, String> {
    let arcs = der::parse_oid(oid).ok_or_else(|| format!("invalid OID {oid:?}"))?;
    let mut ext = CustomExtension::from_oid_content(&arcs, value);
    ext.set_criticality(critical);
    Ok(ext)
}

/// The authority information access extension's value.
fn aia_value(urls: &Urls) -> Option<Vec<u8>> {
    let mut parts = Vec::new();
    for (method, list) in [
        ("1.3.6.1.5.5.7.48.1", &urls.ocsp_servers),
        ("1.3.6.1.5.5.7.48.2", &urls.issuing_certificates),
    ] {
        for url in list {
            parts.push(der::sequence(&[
                der::oid(method)?,
                der::tlv(0x86, url.as_bytes()),
            ]));
        }
    }
    (!parts.is_empty()).then(|| der::sequence(&parts))
}

/// The certificate policies extension's value for Vault's `policy_identifiers`: OIDs, or JSON
/// objects `{"oid", "cps", "notice"}`.
pub(crate) fn policies_value(entries: &[String]) -> Result<Vec<u8>, String> {
    let mut policies = Vec::new();
    for entry in entries {
        let (oid, cps, notice) = match serde_json::from_str::<serde_json::Value>(entry) {
            Ok(serde_json::Value::Object(map)) => {
                let get = |k: &str| map.get(k).and_then(|v| v.as_str()).map(str::to_owned);
                (get("oid").unwrap_or_default(), get("cps"), get("notice"))
            }
            _ => (entry.clone(), None, None),
        };
        let oid = oid.trim();
        let encoded = der::oid(oid).ok_or_else(|| format!("invalid policy identifier {oid:?}"))?;
        let mut qualifiers = Vec::new();
        if let Some(cps) = cps.filter(|c| !c.is_empty()) {
            qualifiers.push(der::sequence(&[
                der::oid("1.3.6.1.5.5.7.2.1").unwrap_or_default(),
                der::tlv(der::IA5_STRING, cps.as_bytes()),
            ]));
        }
        if let Some(notice) = notice.filter(|n| !n.is_empty()) {
            qualifiers.push(der::sequence(&[
                der::oid("1.3.6.1.5.5.7.2.2").unwrap_or_default(),
                der::sequence(&[der::tlv(der::UTF8_STRING, notice.as_bytes())]),
            ]));
        }
        let mut info = vec![encoded];
        if !qualifiers.is_empty() {
            info.push(der::sequence(&qualifiers));
        }
        policies.push(der::sequence(&info));
    }
    Ok(der::sequence(&policies))
}

/// Extensions always written from the template, never copied: subject and authority key
/// identifiers, basic constraints, CRL distribution points, authority information access.
const OWN_EXTENSIONS: &[&str] = &[
    "2.5.29.14",
    "2.5.29.19",
    "2.5.29.31",
    "2.5.29.35",
    "1.3.6.1.5.5.7.1.1",
];

const OID_SAN: &str = "2.5.29.17";
const OID_KU: &str = "2.5.29.15";
const OID_EKU: &str = "2.5.29.37";
const OID_NAME_CONSTRAINTS: &str = "2.5.29.30";
const OID_POLICIES: &str = "2.5.29.32";

fn params(template: &Template, subject_spki: &[u8]) -> Result<CertificateParams, String> {
    // Copied extensions (use_csr_values, sign-verbatim, sign-self-issued) stand in for the
    // template's own names, usages, constraints and policies.
    let copied = |oid: &str| template.extra_extensions.iter().any(|(o, _, _)| o == oid);
    let mut params = CertificateParams::default();
    params.distinguished_name = match &template.raw_subject {
        Some(raw) => dn_from_raw(raw)?,
        None => template.subject.to_dn()?,
    };
    params.not_before = datetime(template.not_before)?;
    params.not_after = datetime(template.not_after)?;
    params.serial_number = Some(SerialNumber::from_slice(&template.serial));
    for san in template.sans.iter().filter(|_| !copied(OID_SAN)) {
        let ia5 = |s: &str| {
            rcgen::string::Ia5String::try_from(s).map_err(|_| format!("invalid name {s:?}"))
        };
        params.subject_alt_names.push(match san {
            San::Dns(name) => SanType::DnsName(ia5(name)?),
            San::Email(email) => SanType::Rfc822Name(ia5(email)?),
            San::Uri(uri) => SanType::URI(ia5(uri)?),
            San::Ip(ip) => SanType::IpAddress(*ip),
            San::Other(oid, value) => SanType::OtherName((
                der::parse_oid(oid).ok_or_else(|| format!("invalid other SAN OID {oid:?}"))?,
                OtherNameValue::Utf8String(value.clone()),
            )),
        });
    }
    let skid = template
        .skid
        .clone()
        .unwrap_or_else(|| key_id(subject_spki));
    params.key_identifier_method = KeyIdMethod::PreSpecified(skid.clone());
    params.use_authority_key_identifier_extension = true;
    if template.is_ca {
        params.is_ca = IsCa::Ca(match u8::try_from(template.max_path_len) {
            Ok(len) => BasicConstraints::Constrained(len),
            Err(_) => BasicConstraints::Unconstrained,
        });
    } else {
        if template.basic_constraints_for_leaf {
            params.is_ca = IsCa::ExplicitNoCa;
        } else {
            params.custom_extensions.push(custom(
                "2.5.29.14",
                false,
                der::tlv(der::OCTET_STRING, &skid),
            )?);
        }
    }
    if !copied(OID_KU) {
        params.key_usages = key_usages(&template.key_usage);
    }
    if !copied(OID_EKU) {
        params.extended_key_usages = template.ext_key_usage.clone();
    }
    if !template.permitted_dns_domains.is_empty() && !copied(OID_NAME_CONSTRAINTS) {
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: template
                .permitted_dns_domains
                .iter()
                .map(|d| GeneralSubtree::DnsName(d.clone()))
                .collect(),
            excluded_subtrees: Vec::new(),
        });
    }
    if !template.urls.crl_distribution_points.is_empty() {
        params.crl_distribution_points = vec![CrlDistributionPoint {
            uris: template.urls.crl_distribution_points.clone(),
        }];
    }
    if let Some(aia) = aia_value(&template.urls) {
        params
            .custom_extensions
            .push(custom("1.3.6.1.5.5.7.1.1", false, aia)?);
    }
    if !template.policy_identifiers.is_empty() && !copied(OID_POLICIES) {
        params.custom_extensions.push(custom(
            "2.5.29.32",
            false,
            policies_value(&template.policy_identifiers)?,
        )?);
    }
    for (oid, critical, value) in &template.extra_extensions {
        if !OWN_EXTENSIONS.contains(&oid.as_str()) {
            params
                .custom_extensions
                .push(custom(oid, *critical, value.clone())?);
        }
    }
    Ok(params)
}

/// Builds and signs a certificate; returns its DER.
pub(crate) fn build(
    template: &Template,
    subject_key: SubjectKey<'_>,
    signer: Signer<'_>,
    signature_bits: i64,
) -> Result<Vec<u8>, String> {
    let failed = |err: rcgen::Error| format!("error creating certificate: {err}");
    let subject_spki = match subject_key {
        SubjectKey::Private(key) => key.public_key_der()?,
        SubjectKey::Public(spki) => spki.to_vec(),
    };
    let params = params(template, &subject_spki)?;
    let cert = match signer {
        Signer::SelfSigned(key) => {
            let pair = key.signer(signature_bits)?;
            params.self_signed(&pair).map_err(failed)?
        }
        Signer::Issuer(issuer) => match subject_key {
            SubjectKey::Private(key) => params.signed_by(&key.public(), issuer).map_err(failed)?,
            SubjectKey::Public(spki) => {
                let public = rcgen::SubjectPublicKeyInfo::from_der(spki)
                    .map_err(|err| format!("unsupported public key: {err}"))?;
                params.signed_by(&public, issuer).map_err(failed)?
            }
        },
    };
    Ok(cert.der().to_vec())
}

/// An rcgen issuer for a CA certificate and its key.
pub(crate) fn rcgen_issuer(
    cert: &CertInfo,
    key: &PrivateKey,
    signature_bits: i64,
) -> Result<Issuer<'static, KeyPair>, String> {
    let pair = key.signer(signature_bits)?;
    let mut params = CertificateParams::default();
    params.distinguished_name = dn_from_raw(&cert.subject_raw)?;
    params.key_identifier_method =
        KeyIdMethod::PreSpecified(cert.skid.clone().unwrap_or_else(|| key_id(&cert.spki)));
    Ok(Issuer::new(params, pair))
}

/// A CSR for `subject` with `sans`, signed by `key`; returns its DER.
pub(crate) fn csr(
    subject: &Subject,
    sans: &[San],
    key: &PrivateKey,
    add_basic_constraints: bool,
    extra: Vec<(String, bool, Vec<u8>)>,
) -> Result<Vec<u8>, String> {
    let template = Template {
        subject: subject.clone(),
        sans: sans.to_vec(),
        ..Template::default()
    };
    let mut params = params(&template, &key.public_key_der()?)?;
    // A CSR carries none of the certificate-only parts.
    params.serial_number = None;
    params.use_authority_key_identifier_extension = false;
    params.custom_extensions.clear();
    params.key_identifier_method = KeyIdMethod::Sha256;
    if add_basic_constraints {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    for (oid, critical, value) in extra {
        params
            .custom_extensions
            .push(custom(&oid, critical, value)?);
    }
    let pair = key.signer(0)?;
    let request = params
        .serialize_request(&pair)
        .map_err(|err| format!("error creating certificate request: {err}"))?;
    Ok(request.der().to_vec())
}

/// One revoked certificate on a CRL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RevokedEntry {
    pub(crate) serial_bytes: Vec<u8>,
    /// Unix seconds.
    pub(crate) revocation_time: i64,
}

/// A CRL signed by `issuer`: number, this/next update, revoked entries; returns its DER.
pub(crate) fn crl(
    issuer_cert: &CertInfo,
    issuer_key: &PrivateKey,
    number: u64,
    this_update: i64,
    next_update: i64,
    revoked: &[RevokedEntry],
) -> Result<Vec<u8>, String> {
    let issuer = rcgen_issuer(issuer_cert, issuer_key, 0)?;
    let params = CertificateRevocationListParams {
        this_update: datetime(this_update)?,
        next_update: datetime(next_update.max(this_update + 1))?,
        crl_number: SerialNumber::from_slice(&crl_number_bytes(number)),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|entry| {
                Ok(RevokedCertParams {
                    serial_number: SerialNumber::from_slice(&entry.serial_bytes),
                    revocation_time: datetime(entry.revocation_time)?,
                    reason_code: None::<RevocationReason>,
                    invalidity_date: None,
                })
            })
            .collect::<Result<_, String>>()?,
        key_identifier_method: KeyIdMethod::PreSpecified(
            issuer_cert
                .skid
                .clone()
                .unwrap_or_else(|| key_id(&issuer_cert.spki)),
        ),
    };
    let crl = params
        .signed_by(&issuer)
        .map_err(|err| format!("error creating CRL: {err}"))?;
    Ok(crl.der().to_vec())
}

fn crl_number_bytes(number: u64) -> Vec<u8> {
    let bytes = number.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count().min(7);
    bytes[skip..].to_vec()
}

/// Whether `ip` parses as an IP address (`ip_sans`).
pub(crate) fn parse_ip(text: &str) -> Option<IpAddr> {
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_follow_gos_attribute_order_and_refuse_repeats() {
        let subject = Subject {
            common_name: "example.com".into(),
            organization: vec!["Org".into()],
            country: vec!["US".into()],
            ..Subject::default()
        };
        let dn = subject.to_dn().unwrap();
        let order: Vec<_> = dn.iter().map(|(ty, _)| ty.clone()).collect();
        assert_eq!(
            order,
            vec![
                DnType::CountryName,
                DnType::OrganizationName,
                DnType::CommonName
            ]
        );
        let repeated = Subject {
            ou: vec!["a".into(), "b".into()],
            ..Subject::default()
        };
        assert!(repeated.to_dn().unwrap_err().contains("ou"));
    }

    #[test]
    fn key_usage_names_are_vaults_case_insensitive_names() {
        let names = ["DigitalSignature", "keyencipherment", "CertSign", "bogus"].map(String::from);
        assert_eq!(
            key_usages(&names),
            vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
                KeyUsagePurpose::KeyCertSign
            ]
        );
    }

    #[test]
    fn policy_identifiers_accept_oids_and_qualified_json() {
        let plain = policies_value(&["1.2.3.4".to_owned()]).unwrap();
        assert_eq!(plain[0], der::SEQUENCE);
        let qualified = policies_value(&[
            r#"{"oid":"1.3.6.1.4.1.7.8","notice":"hi","cps":"https://example.com"}"#.to_owned(),
        ])
        .unwrap();
        assert!(qualified.len() > plain.len());
        assert!(policies_value(&["x".to_owned()]).is_err());
    }
}
