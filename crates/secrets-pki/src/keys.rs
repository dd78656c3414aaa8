//! Private keys: generation (RSA 2048/3072/4096/8192, EC P-256/P-384/P-521, Ed25519) through
//! aws-lc-rs, import from PEM (PKCS#8, PKCS#1 `RSA PRIVATE KEY`, SEC 1 `EC PRIVATE KEY`), export
//! in Vault's `private_key_format`s, and the rcgen signer for a key with the signature hash an
//! issuer asks for.
//!
//! Invariants: a [`PrivateKey`] always holds a PKCS#8 document aws-lc-rs accepted, so turning
//! it into a signer cannot fail for malformed bytes; its public key and (EC) SEC 1 form are
//! derived once, from the same aws-lc-rs key object that generated or checked it, so reading
//! them never parses the key again (a parse costs about as much as a key generation: aws-lc
//! checks the key); key type names are Vault's (`rsa`, `ec`, `ed25519`).

use aws_lc_rs::encoding::{AsDer, EcPrivateKeyRfc5915Der, Pkcs8V1Der};
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, ECDSA_P384_SHA384_ASN1_SIGNING, ECDSA_P521_SHA512_ASN1_SIGNING,
    EcdsaKeyPair, EcdsaSigningAlgorithm, Ed25519KeyPair, KeyPair as _,
};
use rcgen::{KeyPair, PublicKeyData, SignatureAlgorithm};

use crate::{der, pem};

/// The kinds of key Vault's PKI engine handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    Rsa,
    Ec,
    Ed25519,
}

impl KeyKind {
    /// Vault's name for the type (`private_key_type`, `key_type`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            KeyKind::Rsa => "rsa",
            KeyKind::Ec => "ec",
            KeyKind::Ed25519 => "ed25519",
        }
    }
}

const OID_RSA: &str = "1.2.840.113549.1.1.1";
const OID_EC: &str = "1.2.840.10045.2.1";
const OID_ED25519: &str = "1.3.101.112";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_P521: &str = "1.3.132.0.35";

/// A key type and size Vault accepts (`key_type`, `key_bits`), after its defaults: rsa 2048,
/// ec 256; ed25519 has no size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeySpec {
    pub(crate) kind: KeyKind,
    pub(crate) bits: u32,
}

impl KeySpec {
    /// Validates `key_type`/`key_bits` as Vault's `ValidateDefaultOrValueKeyTypeSignatureLength`
    /// does for generated keys, with its messages. EC P-224 is refused: no library here signs
    /// with it.
    pub(crate) fn parse(key_type: &str, key_bits: i64) -> Result<KeySpec, String> {
        match key_type {
            "rsa" => {
                let bits = if key_bits == 0 { 2048 } else { key_bits };
                if bits < 2048 {
                    return Err(format!(
                        "RSA keys < 2048 bits are unsafe and not supported: got {bits}"
                    ));
                }
                match bits {
                    2048 | 3072 | 4096 | 8192 => Ok(KeySpec {
                        kind: KeyKind::Rsa,
                        bits: bits as u32,
                    }),
                    _ => Err(format!("unsupported bit length for RSA key: {bits}")),
                }
            }
            "ec" => {
                let bits = if key_bits == 0 { 256 } else { key_bits };
                match bits {
                    256 | 384 | 521 => Ok(KeySpec {
                        kind: KeyKind::Ec,
                        bits: bits as u32,
                    }),
                    _ => Err(format!("unsupported bit length for EC key: {bits}")),
                }
            }
            "ed25519" => Ok(KeySpec {
                kind: KeyKind::Ed25519,
                bits: 0,
            }),
            other => Err(format!("unknown key type {other}")),
        }
    }
}

/// Checks `signature_bits` for a key type (0 is "pick for me"); only RSA chooses its hash.
pub(crate) fn check_signature_bits(kind: Option<KeyKind>, bits: i64) -> Result<(), String> {
    match (kind, bits) {
        (Some(KeyKind::Rsa), 0 | 256 | 384 | 512) => Ok(()),
        (Some(KeyKind::Rsa), other) => {
            Err(format!("unsupported hash signature algorithm: {other}"))
        }
        _ => Ok(()),
    }
}

fn ec_alg(bits: u32) -> &'static EcdsaSigningAlgorithm {
    match bits {
        384 => &ECDSA_P384_SHA384_ASN1_SIGNING,
        521 => &ECDSA_P521_SHA512_ASN1_SIGNING,
        _ => &ECDSA_P256_SHA256_ASN1_SIGNING,
    }
}

/// A private key, kept as PKCS#8, with what is derived from it once.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PrivateKey {
    pub(crate) spec: KeySpec,
    pkcs8: Vec<u8>,
    /// The public key's bits as X.509 carries them (the SubjectPublicKeyInfo's BIT STRING
    /// content: PKCS#1 for RSA, the uncompressed point for EC, 32 bytes for Ed25519).
    public: Vec<u8>,
    /// SEC 1 (`EC PRIVATE KEY`) for EC keys, Vault's default export.
    sec1: Option<Vec<u8>>,
}

/// A key's public half as rcgen reads it, for certifying a key without parsing it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PublicKey<'a> {
    alg: &'static SignatureAlgorithm,
    bits: &'a [u8],
}

impl PublicKeyData for PublicKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.bits
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}

/// The SEC 1 form of an EC key pair.
fn sec1_of(pair: &EcdsaKeyPair) -> Result<Vec<u8>, String> {
    let der: EcPrivateKeyRfc5915Der<'_> = pair
        .private_key()
        .as_der()
        .map_err(|_| "unable to encode EC key".to_owned())?;
    Ok(der.as_ref().to_vec())
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl PrivateKey {
    /// A fresh key.
    pub(crate) fn generate(spec: KeySpec) -> Result<PrivateKey, String> {
        let failed = |_| format!("failed to generate a {} key", spec.kind.name());
        let (pkcs8, public, sec1) = match spec.kind {
            KeyKind::Rsa => {
                use aws_lc_rs::rsa::{KeyPair as RsaKeyPair, KeySize};
                let size = match spec.bits {
                    3072 => KeySize::Rsa3072,
                    4096 => KeySize::Rsa4096,
                    8192 => KeySize::Rsa8192,
                    _ => KeySize::Rsa2048,
                };
                let pair = RsaKeyPair::generate(size).map_err(failed)?;
                let der: Pkcs8V1Der<'_> = pair.as_der().map_err(failed)?;
                (
                    der.as_ref().to_vec(),
                    pair.public_key().as_ref().to_vec(),
                    None,
                )
            }
            KeyKind::Ec => {
                let pair = EcdsaKeyPair::generate(ec_alg(spec.bits)).map_err(failed)?;
                let pkcs8 = pair.to_pkcs8v1().map_err(failed)?;
                (
                    pkcs8.as_ref().to_vec(),
                    pair.public_key().as_ref().to_vec(),
                    Some(sec1_of(&pair)?),
                )
            }
            KeyKind::Ed25519 => {
                let pair = Ed25519KeyPair::generate().map_err(failed)?;
                let pkcs8 = pair.to_pkcs8v1().map_err(failed)?;
                (
                    pkcs8.as_ref().to_vec(),
                    pair.public_key().as_ref().to_vec(),
                    None,
                )
            }
        };
        Ok(PrivateKey {
            spec,
            pkcs8,
            public,
            sec1,
        })
    }

    /// A key from the first private-key block of a PEM text (PKCS#8, PKCS#1 or SEC 1).
    pub(crate) fn from_pem(text: &str) -> Result<PrivateKey, String> {
        let block = pem::decode_all(text)
            .into_iter()
            .find(|block| block.label.ends_with("PRIVATE KEY"))
            .ok_or_else(|| "no private key found in PEM data".to_owned())?;
        PrivateKey::from_der(&block.label, &block.der)
    }

    /// A key from DER under a PEM label (`PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY`).
    pub(crate) fn from_der(label: &str, bytes: &[u8]) -> Result<PrivateKey, String> {
        let bad = |what: &str| format!("unable to parse private key: {what}");
        match label {
            "RSA PRIVATE KEY" => {
                let pair = aws_lc_rs::rsa::KeyPair::from_der(bytes)
                    .map_err(|_| bad("invalid PKCS#1 RSA key"))?;
                let der: Pkcs8V1Der<'_> = pair.as_der().map_err(|_| bad("invalid RSA key"))?;
                PrivateKey::from_pkcs8(der.as_ref())
            }
            "EC PRIVATE KEY" => {
                for bits in [256, 384, 521] {
                    if let Ok(pair) = EcdsaKeyPair::from_private_key_der(ec_alg(bits), bytes) {
                        let pkcs8 = pair.to_pkcs8v1().map_err(|_| bad("invalid EC key"))?;
                        return PrivateKey::from_pkcs8(pkcs8.as_ref());
                    }
                }
                Err(bad("invalid or unsupported EC key"))
            }
            _ => PrivateKey::from_pkcs8(bytes),
        }
    }

    /// A key from PKCS#8, checked by aws-lc-rs.
    pub(crate) fn from_pkcs8(bytes: &[u8]) -> Result<PrivateKey, String> {
        let bad = |what: &str| format!("unable to parse private key: {what}");
        let (kind, curve) = pkcs8_algorithm(bytes).ok_or_else(|| bad("not PKCS#8"))?;
        let (spec, public, sec1) = match kind.as_str() {
            OID_RSA => {
                let pair = aws_lc_rs::rsa::KeyPair::from_pkcs8(bytes)
                    .map_err(|_| bad("invalid RSA key"))?;
                let spec = KeySpec {
                    kind: KeyKind::Rsa,
                    bits: (pair.public_modulus_len() * 8) as u32,
                };
                (spec, pair.public_key().as_ref().to_vec(), None)
            }
            OID_EC => {
                let bits = match curve.as_deref() {
                    Some(OID_P256) => 256,
                    Some(OID_P384) => 384,
                    Some(OID_P521) => 521,
                    _ => return Err(bad("unsupported EC curve")),
                };
                let pair = EcdsaKeyPair::from_pkcs8(ec_alg(bits), bytes)
                    .map_err(|_| bad("invalid EC key"))?;
                let spec = KeySpec {
                    kind: KeyKind::Ec,
                    bits,
                };
                // A key aws-lc accepted but cannot write as SEC 1 is exported as PKCS#8.
                let sec1 = sec1_of(&pair).ok();
                (spec, pair.public_key().as_ref().to_vec(), sec1)
            }
            OID_ED25519 => {
                let pair = Ed25519KeyPair::from_pkcs8_maybe_unchecked(bytes)
                    .map_err(|_| bad("invalid Ed25519 key"))?;
                let spec = KeySpec {
                    kind: KeyKind::Ed25519,
                    bits: 0,
                };
                (spec, pair.public_key().as_ref().to_vec(), None)
            }
            _ => return Err(bad("unsupported key algorithm")),
        };
        Ok(PrivateKey {
            spec,
            pkcs8: bytes.to_vec(),
            public,
            sec1,
        })
    }

    /// The key as Vault's default (`der`) format writes it: PKCS#1 for RSA, SEC 1 for EC,
    /// PKCS#8 for Ed25519; or PKCS#8 for every type with `pkcs8`. Returns (PEM label, DER).
    pub(crate) fn export(&self, pkcs8: bool) -> (&'static str, Vec<u8>) {
        if pkcs8 {
            return ("PRIVATE KEY", self.pkcs8.clone());
        }
        match self.spec.kind {
            KeyKind::Rsa => match pkcs8_inner(&self.pkcs8) {
                Some(inner) => ("RSA PRIVATE KEY", inner),
                None => ("PRIVATE KEY", self.pkcs8.clone()),
            },
            KeyKind::Ec => match &self.sec1 {
                Some(sec1) => ("EC PRIVATE KEY", sec1.clone()),
                None => ("PRIVATE KEY", self.pkcs8.clone()),
            },
            KeyKind::Ed25519 => ("PRIVATE KEY", self.pkcs8.clone()),
        }
    }

    /// [`PrivateKey::export`] armoured as PEM.
    pub(crate) fn pem(&self, pkcs8: bool) -> String {
        let (label, der) = self.export(pkcs8);
        pem::encode(label, &der)
    }

    /// The rcgen signer: RSA keys sign with SHA-2 of `signature_bits` (256 when 0), EC keys
    /// with the hash matching their curve, Ed25519 with itself.
    pub(crate) fn signer(&self, signature_bits: i64) -> Result<KeyPair, String> {
        KeyPair::from_pkcs8_der_and_sign_algo(
            &self.pkcs8.as_slice().into(),
            self.algorithm(signature_bits),
        )
        .map_err(|err| format!("unable to load private key: {err}"))
    }

    /// The rcgen signature algorithm [`PrivateKey::signer`] signs with.
    fn algorithm(&self, signature_bits: i64) -> &'static SignatureAlgorithm {
        match self.spec.kind {
            KeyKind::Rsa => match signature_bits {
                384 => &rcgen::PKCS_RSA_SHA384,
                512 => &rcgen::PKCS_RSA_SHA512,
                _ => &rcgen::PKCS_RSA_SHA256,
            },
            KeyKind::Ec => match self.spec.bits {
                384 => &rcgen::PKCS_ECDSA_P384_SHA384,
                521 => &rcgen::PKCS_ECDSA_P521_SHA512,
                _ => &rcgen::PKCS_ECDSA_P256_SHA256,
            },
            KeyKind::Ed25519 => &rcgen::PKCS_ED25519,
        }
    }

    /// The public key, as rcgen would read it from [`PrivateKey::signer`]`(0)`.
    pub(crate) fn public(&self) -> PublicKey<'_> {
        PublicKey {
            alg: self.algorithm(0),
            bits: &self.public,
        }
    }

    /// The DER SubjectPublicKeyInfo of the key.
    pub(crate) fn public_key_der(&self) -> Result<Vec<u8>, String> {
        Ok(self.public().subject_public_key_info())
    }
}

/// The algorithm OID (and the EC curve OID) of a PKCS#8 document.
fn pkcs8_algorithm(bytes: &[u8]) -> Option<(String, Option<String>)> {
    let outer = der::expect(bytes, der::SEQUENCE)?;
    let parts = der::children(outer.content)?;
    let alg = parts.get(1).filter(|tlv| tlv.tag == der::SEQUENCE)?;
    let alg_parts = der::children(alg.content)?;
    let oid = alg_parts.first().filter(|tlv| tlv.tag == der::OID)?;
    let curve = alg_parts
        .get(1)
        .filter(|tlv| tlv.tag == der::OID)
        .and_then(|tlv| der::oid_to_string(tlv.content));
    Some((der::oid_to_string(oid.content)?, curve))
}

/// The private key octets inside a PKCS#8 document (PKCS#1 for RSA).
fn pkcs8_inner(bytes: &[u8]) -> Option<Vec<u8>> {
    let outer = der::expect(bytes, der::SEQUENCE)?;
    let parts = der::children(outer.content)?;
    let key = parts.get(2).filter(|tlv| tlv.tag == der::OCTET_STRING)?;
    Some(key.content.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_specs_take_vaults_defaults_and_refuse_bad_sizes() {
        assert_eq!(
            KeySpec::parse("rsa", 0).unwrap(),
            KeySpec {
                kind: KeyKind::Rsa,
                bits: 2048
            }
        );
        assert_eq!(KeySpec::parse("ec", 0).unwrap().bits, 256);
        assert_eq!(KeySpec::parse("ed25519", 99).unwrap().bits, 0);
        assert_eq!(
            KeySpec::parse("rsa", 1024).unwrap_err(),
            "RSA keys < 2048 bits are unsafe and not supported: got 1024"
        );
        assert_eq!(
            KeySpec::parse("ec", 200).unwrap_err(),
            "unsupported bit length for EC key: 200"
        );
        assert_eq!(
            KeySpec::parse("dsa", 0).unwrap_err(),
            "unknown key type dsa"
        );
    }

    #[test]
    fn every_key_type_round_trips_through_both_export_formats() {
        for (kind, bits, label) in [
            ("ec", 256, "EC PRIVATE KEY"),
            ("ec", 384, "EC PRIVATE KEY"),
            ("ec", 521, "EC PRIVATE KEY"),
            ("ed25519", 0, "PRIVATE KEY"),
            ("rsa", 2048, "RSA PRIVATE KEY"),
        ] {
            let key = PrivateKey::generate(KeySpec::parse(kind, bits).unwrap()).unwrap();
            let (got_label, _) = key.export(false);
            assert_eq!(got_label, label, "{kind} {bits}");
            for pkcs8 in [false, true] {
                let back = PrivateKey::from_pem(&key.pem(pkcs8)).unwrap();
                assert_eq!(back.spec, key.spec);
                assert_eq!(
                    back.public_key_der().unwrap(),
                    key.public_key_der().unwrap()
                );
                assert_eq!(back.export(false), key.export(false), "{kind} {bits}");
            }
        }
    }

    #[test]
    fn derived_public_keys_match_what_rcgen_reads_from_the_key() {
        for (kind, bits) in [
            ("ec", 256),
            ("ec", 384),
            ("ec", 521),
            ("ed25519", 0),
            ("rsa", 2048),
        ] {
            let key = PrivateKey::generate(KeySpec::parse(kind, bits).unwrap()).unwrap();
            let parsed = PrivateKey::from_pkcs8(&key.pkcs8).unwrap();
            let from_rcgen = key.signer(0).unwrap().subject_public_key_info();
            assert_eq!(key.public_key_der().unwrap(), from_rcgen, "{kind} {bits}");
            assert_eq!(
                parsed.public_key_der().unwrap(),
                from_rcgen,
                "{kind} {bits}"
            );
            assert_eq!(parsed, key, "{kind} {bits}");
        }
    }
}
