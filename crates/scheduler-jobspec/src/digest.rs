//! Byte encodings and message digests for the jobspec function library (`base64encode`,
//! `base64decode`, `md5`, `sha1`, `sha256`, `sha512`, `uuidv5`), over the crates the
//! workspace links: `base64`, `aws-lc-rs` (the SHA family), `md-5` (MD5, which aws-lc-rs
//! lacks); hex is `stdx::hex`.
//!
//! Used only by `functions.rs`. These digests secure nothing: they compute the same strings
//! Nomad's functions return.
//!
//! Invariant: pure functions over byte slices; no input panics.

use aws_lc_rs::digest;
use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use md5::Digest as _;

/// Standard base64 (RFC 4648 alphabet) as Go's `base64.StdEncoding` reads it: the input is
/// whole padded quanta, and the unused low bits of the last symbol may be set.
const STANDARD: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Standard base64, padded.
pub(crate) fn base64_encode(input: &[u8]) -> String {
    STANDARD.encode(input)
}

/// Standard padded base64 to bytes; `None` when `input` is not that.
pub(crate) fn base64_decode(input: &str) -> Option<Vec<u8>> {
    STANDARD.decode(input).ok()
}

/// MD5 as lowercase hex.
pub(crate) fn md5_hex(input: &[u8]) -> String {
    stdx::hex::encode(&md5::Md5::digest(input))
}

/// SHA-1 (for `sha1` and the name-based UUIDs of `uuidv5`).
pub(crate) fn sha1(input: &[u8]) -> Vec<u8> {
    digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, input)
        .as_ref()
        .to_vec()
}

/// SHA-1 as lowercase hex.
pub(crate) fn sha1_hex(input: &[u8]) -> String {
    stdx::hex::encode(&sha1(input))
}

/// SHA-256 as lowercase hex.
pub(crate) fn sha256_hex(input: &[u8]) -> String {
    stdx::hex::encode(digest::digest(&digest::SHA256, input).as_ref())
}

/// SHA-512 as lowercase hex.
pub(crate) fn sha512_hex(input: &[u8]) -> String {
    stdx::hex::encode(digest::digest(&digest::SHA512, input).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_match_known_vectors() {
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha512_hex(b"abc"),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn base64_round_trips() {
        for text in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            let encoded = base64_encode(text.as_bytes());
            assert_eq!(base64_decode(&encoded).as_deref(), Some(text.as_bytes()));
        }
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8=");
        assert_eq!(base64_decode("Zm8"), None);
        assert_eq!(base64_decode("Z=m8"), None);
    }

    #[test]
    fn base64_decode_ignores_set_trailing_bits_as_go_does() {
        assert_eq!(base64_decode("Zm9=").as_deref(), Some(&b"fo"[..]));
        assert_eq!(base64_decode("Zh==").as_deref(), Some(&b"f"[..]));
        assert_eq!(base64_decode("Zm8=Zm8="), None);
        assert_eq!(base64_decode("Z==="), None);
    }
}
