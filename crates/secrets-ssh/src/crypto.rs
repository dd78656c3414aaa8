//! SSH key material: parsing private and public keys, generating the CA's key pair and the
//! dynamic keys, signing certificates with the algorithm a role asks for, and the OTP salt.
//! Pure apart from the system RNG; no storage, no HTTP.
//!
//! Invariants: private keys are accepted in OpenSSH format and, for RSA, as PKCS#1 or PKCS#8
//! PEM (what `ssh-keygen -m PEM` and older tools write); an encrypted key is refused (the engine
//! has no passphrase); an RSA CA signs with exactly the hash its role names (`ssh-rsa` is
//! SHA-1, `rsa-sha2-256`, `rsa-sha2-512`; `default` is `rsa-sha2-256` as in Vault), any other CA
//! with its one algorithm; every public key rendered for a client ends with a newline (Go's
//! `MarshalAuthorizedKey`).

use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey};
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{self, Signer};
use ssh_key::private::{KeypairData, RsaKeypair};
use ssh_key::public::KeyData;
use ssh_key::rand_core::UnwrapErr;
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, LineEnding, PrivateKey, PublicKey, Signature};

/// The system RNG, as the RustCrypto stack under ssh-key wants it.
pub(crate) fn rng() -> UnwrapErr<ssh_key::getrandom::SysRng> {
    UnwrapErr(ssh_key::getrandom::SysRng)
}

/// A random `u64` (certificate serial numbers).
pub(crate) fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    fill_random(&mut bytes);
    u64::from_be_bytes(bytes)
}

/// Fills `out` from aws-lc-rs's RNG (the store's one crypto provider).
pub(crate) fn fill_random(out: &mut [u8]) {
    use aws_lc_rs::rand::{SecureRandom, SystemRandom};
    if SystemRandom::new().fill(out).is_err() {
        // The system RNG failing is not recoverable; aws-lc-rs aborts in the same case.
        panic!("the system random number generator failed");
    }
}

/// Parses a private key in any format the engine accepts.
pub(crate) fn parse_private_key(text: &str) -> Result<PrivateKey, String> {
    let text = text.trim();
    let key = if text.contains("BEGIN OPENSSH PRIVATE KEY") {
        PrivateKey::from_openssh(text).map_err(|err| err.to_string())?
    } else if text.contains("BEGIN RSA PRIVATE KEY") {
        let rsa = rsa::RsaPrivateKey::from_pkcs1_pem(text).map_err(|err| err.to_string())?;
        rsa_private_key(&rsa)?
    } else if text.contains("BEGIN PRIVATE KEY") {
        let rsa = rsa::RsaPrivateKey::from_pkcs8_pem(text)
            .map_err(|err| format!("only RSA keys are read from PKCS#8: {err}"))?;
        rsa_private_key(&rsa)?
    } else {
        return Err("ssh: no key found".to_owned());
    };
    if key.is_encrypted() {
        return Err("the key is encrypted with a passphrase".to_owned());
    }
    Ok(key)
}

fn rsa_private_key(rsa: &rsa::RsaPrivateKey) -> Result<PrivateKey, String> {
    let keypair = RsaKeypair::try_from(rsa).map_err(|err| err.to_string())?;
    PrivateKey::new(KeypairData::Rsa(keypair), "").map_err(|err| err.to_string())
}

/// Parses an authorized_keys-style public key line (`<type> <base64> [comment]`), allowing
/// leading option-free whitespace and a trailing newline.
pub(crate) fn parse_public_key(text: &str) -> Result<PublicKey, String> {
    PublicKey::from_openssh(text.trim()).map_err(|err| err.to_string())
}

/// `<type> <base64>` plus a newline, without the comment (Go's `MarshalAuthorizedKey`).
pub(crate) fn authorized_key_line(key: &KeyData) -> Result<String, String> {
    let public = PublicKey::new(key.clone(), "");
    public
        .to_openssh()
        .map(|line| format!("{}\n", line.trim_end()))
        .map_err(|err| err.to_string())
}

/// The OpenSSH PEM encoding of a private key (what the engine stores).
pub(crate) fn private_key_pem(key: &PrivateKey) -> Result<String, String> {
    key.to_openssh(LineEnding::LF)
        .map(|pem| pem.to_string())
        .map_err(|err| err.to_string())
}

/// The hex SHA-256 of a public key's wire encoding (`{{public_key_hash}}`).
pub(crate) fn public_key_hash(key: &KeyData) -> Result<String, String> {
    use ssh_key::encoding::Encode;
    let wire = key.encode_vec().map_err(|err| err.to_string())?;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &wire);
    Ok(stdx::hex::encode(digest.as_ref()))
}

/// The family and size `allowed_user_key_lengths` judges a key by: `("rsa", modulus bits)`,
/// `("ecdsa", curve bits)`, `("ed25519", 256)`, `("dsa", 1024)`; `None` for other key types.
pub(crate) fn key_family(key: &KeyData) -> Option<(&'static str, u32)> {
    match key.algorithm() {
        Algorithm::Rsa { .. } => key.rsa().map(|rsa| ("rsa", rsa.key_size())),
        Algorithm::Ecdsa { curve } => Some((
            "ecdsa",
            match curve {
                EcdsaCurve::NistP256 => 256,
                EcdsaCurve::NistP384 => 384,
                EcdsaCurve::NistP521 => 521,
            },
        )),
        Algorithm::Ed25519 => Some(("ed25519", 256)),
        Algorithm::Dsa => Some(("dsa", 1024)),
        _ => None,
    }
}

/// Generates the CA key pair `config/ca` asks for (Vault's `generateSSHKeyPair`): `ssh-rsa`
/// or `rsa` (4096 bits unless `key_bits`, never below 2048), `ecdsa-sha2-nistp256|384|521` or
/// `ec` (P-256 unless `key_bits` is 384 or 521), `ssh-ed25519` or `ed25519`.
pub(crate) fn generate_ca_key(key_type: &str, key_bits: u32) -> Result<PrivateKey, String> {
    let mut rng = rng();
    let curve = |curve| PrivateKey::random(&mut self::rng(), Algorithm::Ecdsa { curve });
    let key = match key_type {
        "ssh-rsa" | "rsa" => {
            let bits = if key_bits == 0 { 4096 } else { key_bits };
            if bits < 2048 {
                return Err(format!(
                    "refusing to generate weak {key_type} key: {bits} bits < 2048 bits"
                ));
            }
            if bits > 8192 {
                return Err(format!(
                    "refusing to generate {key_type} key: {bits} bits > 8192 bits"
                ));
            }
            let rsa =
                rsa::RsaPrivateKey::new(&mut rng, bits as usize).map_err(|err| err.to_string())?;
            return rsa_private_key(&rsa);
        }
        "ecdsa-sha2-nistp256" => curve(EcdsaCurve::NistP256),
        "ecdsa-sha2-nistp384" => curve(EcdsaCurve::NistP384),
        "ecdsa-sha2-nistp521" => curve(EcdsaCurve::NistP521),
        "ec" => match key_bits {
            0 | 256 => curve(EcdsaCurve::NistP256),
            384 => curve(EcdsaCurve::NistP384),
            521 => curve(EcdsaCurve::NistP521),
            _ => return Err(format!("unknown ECDSA key pair algorithm: {key_type}")),
        },
        "ssh-ed25519" | "ed25519" => PrivateKey::random(&mut rng, Algorithm::Ed25519),
        _ => return Err(format!("unknown ssh key pair algorithm: {key_type}")),
    };
    key.map_err(|err| err.to_string())
}

/// A dynamic key: an RSA key pair of `bits`, as the PKCS#1 PEM handed to the client and the
/// authorized_keys line installed on the host.
pub(crate) fn generate_dynamic_key(bits: u32) -> Result<(String, String), String> {
    let rsa = rsa::RsaPrivateKey::new(&mut rng(), bits as usize).map_err(|err| err.to_string())?;
    let pem = rsa
        .to_pkcs1_pem(rsa::pkcs1::LineEnding::LF)
        .map_err(|err| err.to_string())?
        .to_string();
    let keypair = RsaKeypair::try_from(&rsa).map_err(|err| err.to_string())?;
    let line = authorized_key_line(&KeyData::Rsa(keypair.public().clone()))?;
    Ok((pem, line))
}

/// The RSA hash a role's `algorithm_signer` names: `Some(None)` is SHA-1 (`ssh-rsa`).
pub(crate) fn rsa_hash(algorithm_signer: &str) -> Option<Option<HashAlg>> {
    match algorithm_signer {
        "" | "default" | "rsa-sha2-256" => Some(Some(HashAlg::Sha256)),
        "rsa-sha2-512" => Some(Some(HashAlg::Sha512)),
        "ssh-rsa" => Some(None),
        _ => None,
    }
}

/// The CA as a certificate signer: the stored private key and, for RSA, the hash to sign with.
#[derive(Debug)]
pub(crate) struct CaSigner {
    key: std::sync::Arc<PrivateKey>,
    rsa_hash: Option<HashAlg>,
}

impl CaSigner {
    /// `algorithm_signer` must be one [`rsa_hash`] knows; it matters only for an RSA CA.
    pub(crate) fn new(
        key: std::sync::Arc<PrivateKey>,
        algorithm_signer: &str,
    ) -> Result<CaSigner, String> {
        let rsa_hash = rsa_hash(algorithm_signer)
            .ok_or_else(|| format!("unknown algorithm signer {algorithm_signer:?}"))?;
        Ok(CaSigner { key, rsa_hash })
    }

    /// Whether a signature takes long enough to belong on a blocking thread (RSA, ECDSA);
    /// an Ed25519 signature takes tens of microseconds.
    pub(crate) fn is_slow(&self) -> bool {
        !matches!(self.key.key_data(), KeypairData::Ed25519(_))
    }
}

impl Signer<Signature> for CaSigner {
    fn try_sign(&self, message: &[u8]) -> Result<Signature, signature::Error> {
        match self.key.key_data() {
            KeypairData::Rsa(keypair) => (keypair, self.rsa_hash).try_sign(message),
            _ => self.key.try_sign(message),
        }
    }
}

impl From<&CaSigner> for KeyData {
    fn from(signer: &CaSigner) -> KeyData {
        signer.key.public_key().key_data().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ed25519_and_ecdsa_cas_round_trip_through_openssh_pem() {
        for key_type in ["ssh-ed25519", "ed25519", "ec", "ecdsa-sha2-nistp384"] {
            let key = generate_ca_key(key_type, 0).unwrap();
            let pem = private_key_pem(&key).unwrap();
            let back = parse_private_key(&pem).unwrap();
            assert_eq!(back.public_key().key_data(), key.public_key().key_data());
            let line = authorized_key_line(key.public_key().key_data()).unwrap();
            assert!(line.ends_with('\n'), "{line:?}");
            assert_eq!(
                parse_public_key(&line).unwrap().key_data(),
                key.public_key().key_data()
            );
        }
    }

    #[test]
    fn weak_and_unknown_ca_keys_are_refused_with_vaults_words() {
        assert_eq!(
            generate_ca_key("ssh-rsa", 1024).unwrap_err(),
            "refusing to generate weak ssh-rsa key: 1024 bits < 2048 bits"
        );
        assert_eq!(
            generate_ca_key("ec", 300).unwrap_err(),
            "unknown ECDSA key pair algorithm: ec"
        );
        assert_eq!(
            generate_ca_key("dsa", 0).unwrap_err(),
            "unknown ssh key pair algorithm: dsa"
        );
    }

    #[test]
    fn dynamic_keys_are_pkcs1_pem_with_a_matching_authorized_line() {
        let (pem, line) = generate_dynamic_key(1024).unwrap();
        assert!(pem.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let key = parse_private_key(&pem).unwrap();
        let public = parse_public_key(&line).unwrap();
        assert_eq!(key.public_key().key_data(), public.key_data());
        assert_eq!(key_family(public.key_data()), Some(("rsa", 1024)));
    }

    #[test]
    fn garbage_is_not_a_key() {
        assert!(parse_private_key("nope").is_err());
        assert!(parse_public_key("ssh-ed25519 !!!").is_err());
    }
}
