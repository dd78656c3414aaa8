//! Reading certificates and CSRs (x509-parser): the facts the engine needs about a certificate
//! (serial, names, validity, CA constraints, key identifiers, public key), signature checks,
//! Vault's serial-number spelling, and the PEM/DER forms certificates travel in.
//!
//! Invariants: nothing here panics on hostile input (every parse answers an error string);
//! serial numbers are always lower-case colon hex of the minimal big-endian magnitude
//! (`17:67:16:b0:...`), stored with `-` instead of `:`.

use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;
use x509_parser::x509::SubjectPublicKeyInfo;

use crate::keys::KeyKind;
use crate::{der, pem};

/// What the engine reads from a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CertInfo {
    pub(crate) der: Vec<u8>,
    /// `aa:bb:...`.
    pub(crate) serial: String,
    pub(crate) serial_bytes: Vec<u8>,
    pub(crate) subject_raw: Vec<u8>,
    pub(crate) issuer_raw: Vec<u8>,
    pub(crate) common_name: String,
    /// Unix seconds.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
    pub(crate) is_ca: bool,
    /// The path length constraint; `None` when unlimited (or not a CA).
    pub(crate) max_path_len: Option<u32>,
    pub(crate) skid: Option<Vec<u8>>,
    pub(crate) akid: Option<Vec<u8>>,
    pub(crate) spki: Vec<u8>,
    pub(crate) key_kind: Option<KeyKind>,
    /// Whether the certificate has a key usage extension without `cRLSign`.
    pub(crate) cannot_sign_crls: bool,
}

impl CertInfo {
    /// Parses one DER certificate.
    pub(crate) fn from_der(bytes: &[u8]) -> Result<CertInfo, String> {
        let (rest, cert) = X509Certificate::from_der(bytes)
            .map_err(|err| format!("unable to parse certificate: {err}"))?;
        if !rest.is_empty() {
            return Err("unable to parse certificate: trailing data".to_owned());
        }
        let mut skid = None;
        let mut akid = None;
        for ext in cert.iter_extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => skid = Some(id.0.to_vec()),
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    akid = aki.key_identifier.as_ref().map(|id| id.0.to_vec());
                }
                _ => {}
            }
        }
        let (is_ca, max_path_len) = match cert.basic_constraints() {
            Ok(Some(bc)) => (bc.value.ca, bc.value.path_len_constraint),
            _ => (false, None),
        };
        let cannot_sign_crls = matches!(cert.key_usage(), Ok(Some(ku)) if !ku.value.crl_sign());
        let serial_bytes = minimal(cert.raw_serial()).to_vec();
        Ok(CertInfo {
            der: bytes.to_vec(),
            serial: format_serial(&serial_bytes),
            serial_bytes,
            subject_raw: cert.subject().as_raw().to_vec(),
            issuer_raw: cert.issuer().as_raw().to_vec(),
            common_name: cert
                .subject()
                .iter_common_name()
                .next()
                .and_then(|cn| cn.as_str().ok())
                .unwrap_or_default()
                .to_owned(),
            not_before: cert.validity().not_before.timestamp(),
            not_after: cert.validity().not_after.timestamp(),
            is_ca,
            max_path_len: if is_ca { max_path_len } else { None },
            skid,
            akid,
            spki: cert.public_key().raw.to_vec(),
            key_kind: spki_kind(cert.public_key().raw),
            cannot_sign_crls,
        })
    }

    /// The first certificate of a PEM text.
    pub(crate) fn from_pem(text: &str) -> Result<CertInfo, String> {
        let certs = certs_in_pem(text);
        match certs.first() {
            Some(der) => CertInfo::from_der(der),
            None => Err("no certificate found in PEM data".to_owned()),
        }
    }

    pub(crate) fn pem(&self) -> String {
        pem::encode("CERTIFICATE", &self.der)
    }

    /// Vault's issuer PEM: Go's `pem.EncodeToMemory` output, trimmed of the final newline.
    pub(crate) fn pem_trimmed(&self) -> String {
        self.pem().trim_end().to_owned()
    }

    /// Whether `parent`'s key made this certificate's signature (and the names link up).
    pub(crate) fn signed_by(&self, parent: &CertInfo) -> bool {
        self.issuer_raw == parent.subject_raw && verify_with(&self.der, &parent.spki)
    }

    /// Self-signed as Vault's `remove_roots_from_chain` reads it: AKID equal to SKID, or no
    /// AKID with subject equal to issuer and a valid self-signature.
    pub(crate) fn is_self_signed(&self) -> bool {
        if self.subject_raw != self.issuer_raw {
            return false;
        }
        match (&self.akid, &self.skid) {
            (Some(akid), Some(skid)) if akid == skid => true,
            (Some(_), _) => false,
            (None, _) => verify_with(&self.der, &self.spki),
        }
    }
}

/// A certificate this engine just built, with what its answer and its record need, taken from
/// the template that built it instead of parsing the DER back (the serial as rcgen writes it:
/// minimal magnitude; the validity in whole seconds, as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Issued {
    pub(crate) der: Vec<u8>,
    /// `aa:bb:...`.
    pub(crate) serial: String,
    /// Unix seconds.
    pub(crate) not_before: i64,
    pub(crate) not_after: i64,
}

impl Issued {
    pub(crate) fn new(der: Vec<u8>, serial: &[u8], not_before: i64, not_after: i64) -> Issued {
        Issued {
            der,
            serial: format_serial(minimal(serial)),
            not_before,
            not_after,
        }
    }
}

/// Whether the certificate `cert_der` carries a signature by the key `spki_der`.
pub(crate) fn verify_with(cert_der: &[u8], spki_der: &[u8]) -> bool {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return false;
    };
    let Ok((_, spki)) = SubjectPublicKeyInfo::from_der(spki_der) else {
        return false;
    };
    cert.verify_signature(Some(&spki)).is_ok()
}

/// The DER of every `CERTIFICATE` block in a PEM text.
pub(crate) fn certs_in_pem(text: &str) -> Vec<Vec<u8>> {
    pem::decode_all(text)
        .into_iter()
        .filter(|block| block.label == "CERTIFICATE")
        .map(|block| block.der)
        .collect()
}

fn minimal(bytes: &[u8]) -> &[u8] {
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    if skip == bytes.len() {
        &bytes[bytes.len().saturating_sub(1)..]
    } else {
        &bytes[skip..]
    }
}

/// Lower-case colon hex of `bytes`.
pub(crate) fn format_serial(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A serial as clients write it (`aa:bb`, `aa-bb`, upper case) in the storage spelling
/// (`aa-bb`); `None` when it is not hex pairs.
pub(crate) fn normalize_serial(raw: &str) -> Option<String> {
    let lower = raw.trim().to_ascii_lowercase().replace(':', "-");
    let ok = !lower.is_empty()
        && lower
            .split('-')
            .all(|pair| pair.len() == 2 && pair.bytes().all(|b| b.is_ascii_hexdigit()));
    ok.then_some(lower)
}

/// The key kind of a DER SubjectPublicKeyInfo.
pub(crate) fn spki_kind(spki: &[u8]) -> Option<KeyKind> {
    let (oid, _) = spki_algorithm(spki)?;
    match oid.as_str() {
        "1.2.840.113549.1.1.1" => Some(KeyKind::Rsa),
        "1.2.840.10045.2.1" => Some(KeyKind::Ec),
        "1.3.101.112" => Some(KeyKind::Ed25519),
        _ => None,
    }
}

/// The size in bits of a DER SubjectPublicKeyInfo's key (RSA modulus, EC curve; 0 for
/// Ed25519).
pub(crate) fn spki_bits(spki: &[u8]) -> Option<u32> {
    let (oid, curve) = spki_algorithm(spki)?;
    match oid.as_str() {
        "1.2.840.113549.1.1.1" => {
            let (_, info) = SubjectPublicKeyInfo::from_der(spki).ok()?;
            let key = info.parsed().ok()?;
            u32::try_from(key.key_size()).ok()
        }
        "1.2.840.10045.2.1" => match curve.as_deref() {
            Some("1.2.840.10045.3.1.7") => Some(256),
            Some("1.3.132.0.34") => Some(384),
            Some("1.3.132.0.35") => Some(521),
            Some("1.3.132.0.33") => Some(224),
            _ => None,
        },
        "1.3.101.112" => Some(0),
        _ => None,
    }
}

fn spki_algorithm(spki: &[u8]) -> Option<(String, Option<String>)> {
    let outer = der::expect(spki, der::SEQUENCE)?;
    let parts = der::children(outer.content)?;
    let alg = der::children(parts.first()?.content)?;
    let oid = der::oid_to_string(alg.first().filter(|t| t.tag == der::OID)?.content)?;
    let curve = alg
        .get(1)
        .filter(|t| t.tag == der::OID)
        .and_then(|t| der::oid_to_string(t.content));
    Some((oid, curve))
}

/// A subject alternative name as requested (in a CSR or a certificate to re-sign).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum San {
    Dns(String),
    Email(String),
    Ip(std::net::IpAddr),
    Uri(String),
    /// `(oid, UTF-8 value)`.
    Other(String, String),
}

/// What the engine reads from a CSR.
#[derive(Debug, Clone)]
pub(crate) struct CsrInfo {
    pub(crate) subject_raw: Vec<u8>,
    pub(crate) common_name: String,
    /// The subject's serialNumber attribute.
    pub(crate) subject_serial: String,
    pub(crate) spki: Vec<u8>,
    pub(crate) sans: Vec<San>,
    /// Every requested extension as `(oid, critical, DER value)`.
    pub(crate) extensions: Vec<(String, bool, Vec<u8>)>,
    pub(crate) has_basic_constraints: bool,
}

/// Parses a PEM CSR and checks its self-signature (`csr contains no data`,
/// `certificate request could not be parsed: ...` as Vault says).
pub(crate) fn parse_csr(text: &str) -> Result<CsrInfo, String> {
    let block = pem::decode_all(text)
        .into_iter()
        .next()
        .ok_or_else(|| "csr contains no data".to_owned())?;
    let (_, csr) = X509CertificationRequest::from_der(&block.der)
        .map_err(|err| format!("certificate request could not be parsed: {err}"))?;
    let info = &csr.certification_request_info;
    if spki_kind(info.subject_pki.raw).is_none() {
        return Err("Refusing to sign CSR with empty PublicKey. This usually means the SubjectPublicKeyInfo field has an OID not recognized by Go, such as 1.2.840.113549.1.1.10 for rsaPSS.".to_owned());
    }
    csr.verify_signature().map_err(|_| {
        "certificate request could not be parsed: x509: signature of the request is invalid or uses an unsupported algorithm (RSA-PSS CSRs are not supported)".to_owned()
    })?;
    let mut sans = Vec::new();
    if let Some(exts) = csr.requested_extensions() {
        for ext in exts {
            if let ParsedExtension::SubjectAlternativeName(san) = ext {
                sans.extend(san.general_names.iter().filter_map(san_of));
            }
        }
    }
    let extensions = raw_requested_extensions(&csr);
    let has_basic_constraints = extensions.iter().any(|(oid, _, _)| oid == "2.5.29.19");
    let subject_serial = info
        .subject
        .iter_attributes()
        .find(|attr| attr.attr_type().to_id_string() == "2.5.4.5")
        .and_then(|attr| attr.as_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok(CsrInfo {
        subject_raw: info.subject.as_raw().to_vec(),
        common_name: info
            .subject
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .unwrap_or_default()
            .to_owned(),
        subject_serial,
        spki: info.subject_pki.raw.to_vec(),
        sans,
        extensions,
        has_basic_constraints,
    })
}

fn san_of(name: &GeneralName<'_>) -> Option<San> {
    match name {
        GeneralName::DNSName(dns) => Some(San::Dns((*dns).to_owned())),
        GeneralName::RFC822Name(email) => Some(San::Email((*email).to_owned())),
        GeneralName::URI(uri) => Some(San::Uri((*uri).to_owned())),
        GeneralName::IPAddress(bytes) => match bytes.len() {
            4 => <[u8; 4]>::try_from(*bytes).ok().map(|b| San::Ip(b.into())),
            16 => <[u8; 16]>::try_from(*bytes).ok().map(|b| San::Ip(b.into())),
            _ => None,
        },
        GeneralName::OtherName(oid, value) => {
            other_name_utf8(value).map(|v| San::Other(oid.to_id_string(), v))
        }
        _ => None,
    }
}

/// The UTF-8 string inside an otherName's `[0] EXPLICIT` value, if it is one.
fn other_name_utf8(value: &[u8]) -> Option<String> {
    let (outer, _) = der::read(value)?;
    let inner = if outer.tag == 0xa0 {
        der::read(outer.content)?.0
    } else {
        outer
    };
    (inner.tag == der::UTF8_STRING)
        .then(|| String::from_utf8(inner.content.to_vec()).ok())
        .flatten()
}

/// The requested extensions of a CSR in raw form, read from its attributes by hand (so
/// extensions x509-parser does not know are kept too).
fn raw_requested_extensions(csr: &X509CertificationRequest<'_>) -> Vec<(String, bool, Vec<u8>)> {
    let mut out = Vec::new();
    for attr in csr.certification_request_info.iter_attributes() {
        if attr.oid.to_id_string() != "1.2.840.113549.1.9.14" {
            continue;
        }
        // value: SET { SEQUENCE OF Extension }
        let Some((set, _)) = der::read(attr.value) else {
            continue;
        };
        let content = if set.tag == 0x31 {
            set.content
        } else {
            attr.value
        };
        let Some((seq, _)) = der::read(content) else {
            continue;
        };
        for ext in der::children(seq.content).unwrap_or_default() {
            let Some(parts) = der::children(ext.content) else {
                continue;
            };
            let Some(oid) = parts.first().and_then(|t| der::oid_to_string(t.content)) else {
                continue;
            };
            let critical = parts.len() == 3 && parts[1].content == [0xff];
            if let Some(value) = parts.last().filter(|t| t.tag == der::OCTET_STRING) {
                out.push((oid, critical, value.content.to_vec()));
            }
        }
    }
    out
}

/// The subject alternative names of a certificate.
pub(crate) fn cert_sans(cert_der: &[u8]) -> Vec<San> {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return Vec::new();
    };
    match cert.subject_alternative_name() {
        Ok(Some(san)) => san.value.general_names.iter().filter_map(san_of).collect(),
        _ => Vec::new(),
    }
}

/// Every extension of a certificate as `(oid, critical, DER value)`.
pub(crate) fn cert_extensions(cert_der: &[u8]) -> Vec<(String, bool, Vec<u8>)> {
    let Ok((_, cert)) = X509Certificate::from_der(cert_der) else {
        return Vec::new();
    };
    cert.iter_extensions()
        .map(|ext| (ext.oid.to_id_string(), ext.critical, ext.value.to_vec()))
        .collect()
}

/// Go's name for the signature algorithm a key of this kind signs with.
pub(crate) fn signature_algorithm_name(
    kind: KeyKind,
    signature_bits: i64,
    curve_bits: u32,
) -> String {
    match kind {
        KeyKind::Rsa => format!(
            "SHA{}-RSA",
            if signature_bits == 0 {
                256
            } else {
                signature_bits
            }
        ),
        KeyKind::Ec => format!(
            "ECDSA-SHA{}",
            match curve_bits {
                384 => 384,
                521 => 512,
                _ => 256,
            }
        ),
        KeyKind::Ed25519 => "Ed25519".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_are_colon_hex_and_normalise_to_hyphens() {
        assert_eq!(format_serial(&[0x17, 0x0a, 0xff]), "17:0a:ff");
        assert_eq!(minimal(&[0, 0, 0x80]), &[0x80]);
        assert_eq!(minimal(&[0]), &[0]);
        assert_eq!(normalize_serial("17:0A:ff").unwrap(), "17-0a-ff");
        assert_eq!(normalize_serial("17-0a").unwrap(), "17-0a");
        assert!(normalize_serial("17:0").is_none());
        assert!(normalize_serial("zz").is_none());
        assert!(normalize_serial("").is_none());
    }
}
