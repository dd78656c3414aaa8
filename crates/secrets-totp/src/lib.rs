//! TOTP for the secrets store's MFA methods (`sys/mfa/method/totp`): key generation, Vault's
//! otpauth URL and QR barcode, and RFC 6238 code validation with skew.
//!
//! Where it sits: a pure library the core (`crates/secrets`) calls; it keeps no state, does no
//! I/O and reads no clock (every time is an argument, Unix seconds). The core keeps the keys
//! (behind its barrier), the used codes and the failure counters.
//!
//! What follows Vault (its TOTP MFA generate and validate, built on `pquerna/otp`):
//! - [`otpauth_url`] builds `otpauth://totp/<issuer>:<account>?algorithm=..&digits=..&issuer=..&period=..&secret=..`,
//!   query keys sorted (Go's `url.Values.Encode`), the secret in base32 without padding, the
//!   label escaped as a Go URL path and the values as Go query values;
//! - [`qr_png`] draws a square PNG of exactly `size` pixels, the code scaled by a whole factor and
//!   centred on white (Vault scales without a quiet zone; here up to four modules of quiet zone
//!   are kept when they fit, so more readers decode it);
//! - [`verify`] wants the code to be exactly `digits` ASCII digits (no spaces, no sign) and match
//!   one of the counters `now/period - skew ..= now/period + skew`.
//!
//! Invariants: every function is total on its inputs (bad input is `None`, `false` or an
//! error, never a panic); nothing here logs or stores a key.

use std::fmt;

use base64::Engine as _;
use qrcodegen_image::image::{ExtendedColorType, ImageEncoder, codecs::png::PngEncoder};
use qrcodegen_image::qrcodegen::{QrCode, QrCodeEcc};
use rand::RngCore as _;

/// The HMAC behind the codes (Vault's `algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Sha1,
    Sha256,
    Sha512,
}

impl Algorithm {
    /// `SHA1`, `SHA256` or `SHA512`, exactly as Vault spells them; anything else is `None`.
    pub fn parse(name: &str) -> Option<Algorithm> {
        match name {
            "SHA1" => Some(Algorithm::Sha1),
            "SHA256" => Some(Algorithm::Sha256),
            "SHA512" => Some(Algorithm::Sha512),
            _ => None,
        }
    }

    /// The name Vault reads back and puts in URLs.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "SHA1",
            Algorithm::Sha256 => "SHA256",
            Algorithm::Sha512 => "SHA512",
        }
    }

    fn to_totp_rs(self) -> totp_rs::Algorithm {
        match self {
            Algorithm::Sha1 => totp_rs::Algorithm::SHA1,
            Algorithm::Sha256 => totp_rs::Algorithm::SHA256,
            Algorithm::Sha512 => totp_rs::Algorithm::SHA512,
        }
    }
}

/// How codes are computed and checked for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub algorithm: Algorithm,
    /// 6 or 8 (the core validates; [`code_at`] and [`verify`] accept 1 to 9).
    pub digits: u8,
    /// Seconds per counter step; at least 1.
    pub period: u64,
    /// Steps accepted on each side of the current one.
    pub skew: u8,
}

impl Params {
    fn usable(&self) -> bool {
        (1..=9).contains(&self.digits) && self.period > 0
    }

    fn totp(&self, key: &[u8]) -> totp_rs::Totp {
        totp_rs::Builder::new()
            .with_algorithm(self.algorithm.to_totp_rs())
            .with_digits(self.digits)
            .with_step_duration(self.period)
            .with_skew(u16::from(self.skew))
            .with_secret(key.to_vec())
            .build_noncompliant()
    }
}

/// `size` random bytes from the OS-seeded thread RNG: a new key.
pub fn generate_key(size: usize) -> Vec<u8> {
    let mut key = vec![0u8; size];
    rand::rng().fill_bytes(&mut key);
    key
}

/// RFC 4648 base32 without padding, as otpauth URLs carry keys.
pub fn encode_base32(key: &[u8]) -> String {
    totp_rs::Secret::from(key.to_vec()).to_base32()
}

/// The bytes of a base32 key (no padding); `None` when it is not base32.
pub fn decode_base32(text: &str) -> Option<Vec<u8>> {
    totp_rs::Secret::try_from_base32(text)
        .ok()
        .map(|secret| secret.as_bytes().to_vec())
}

/// Vault's otpauth URL for a key (module docs): the label is `<issuer>:<account>`, the query
/// `algorithm`, `digits`, `issuer`, `period`, `secret` in that (sorted) order.
pub fn otpauth_url(issuer: &str, account: &str, key: &[u8], params: &Params) -> String {
    let label = format!("{issuer}:{account}");
    let query = [
        ("algorithm", params.algorithm.as_str().to_owned()),
        ("digits", params.digits.to_string()),
        ("issuer", issuer.to_owned()),
        ("period", params.period.to_string()),
        ("secret", encode_base32(key)),
    ]
    .iter()
    .map(|(name, value)| format!("{name}={}", go_query_escape(value)))
    .collect::<Vec<_>>()
    .join("&");
    format!("otpauth://totp/{}?{query}", go_path_escape(&label))
}

/// Go's `url.PathEscape`-style escaping of a URL path (`URL.EscapedPath` in `encodePath`
/// mode): unreserved characters and `$&+,/:;=@` stay, every other byte is `%XX`.
fn go_path_escape(text: &str) -> String {
    escape(
        text,
        |b| b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b),
        false,
    )
}

/// Go's `url.QueryEscape`: unreserved characters stay, a space is `+`, the rest `%XX`.
fn go_query_escape(text: &str) -> String {
    escape(
        text,
        |b| b.is_ascii_alphanumeric() || b"-_.~".contains(&b),
        true,
    )
}

fn escape(text: &str, keep: impl Fn(u8) -> bool, space_as_plus: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if keep(byte) {
            out.push(char::from(byte));
        } else if byte == b' ' && space_as_plus {
            out.push('+');
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Why a QR barcode could not be drawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QrError {
    /// The text does not fit in a QR code.
    TooLong,
    /// The requested size is below one pixel per module.
    TooSmall { modules: u32 },
    /// The PNG encoder failed.
    Encode(String),
}

impl fmt::Display for QrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QrError::TooLong => f.write_str("the text is too long for a QR code"),
            // The barcode library Vault uses words it so.
            QrError::TooSmall { modules } => write!(
                f,
                "can not scale barcode to an image smaller than {modules}x{modules}"
            ),
            QrError::Encode(why) => write!(f, "encoding the PNG failed: {why}"),
        }
    }
}

impl std::error::Error for QrError {}

/// Quiet-zone modules kept on each side when the size allows (the QR standard asks for 4).
const QUIET_ZONE: u32 = 4;

/// A grayscale PNG of exactly `size` × `size` pixels showing `text` as a QR code (error
/// correction level M), scaled by the largest whole factor that fits and centred on white.
pub fn qr_png(text: &str, size: u32) -> Result<Vec<u8>, QrError> {
    let code = QrCode::encode_text(text, QrCodeEcc::Medium).map_err(|_| QrError::TooLong)?;
    let modules = u32::try_from(code.size()).unwrap_or(u32::MAX);
    let with_quiet = modules + 2 * QUIET_ZONE;
    let scale = if size / with_quiet > 0 {
        size / with_quiet
    } else {
        size / modules
    };
    if scale == 0 {
        return Err(QrError::TooSmall { modules });
    }
    let offset = (size - modules * scale) / 2;
    let width = usize::try_from(size).unwrap_or(0);
    let mut pixels = vec![255u8; width * width];
    for y in 0..modules {
        for x in 0..modules {
            let dark = code.get_module(
                i32::try_from(x).unwrap_or(i32::MAX),
                i32::try_from(y).unwrap_or(i32::MAX),
            );
            if !dark {
                continue;
            }
            for dy in 0..scale {
                let row = usize::try_from(offset + y * scale + dy).unwrap_or(0);
                let start = row * width + usize::try_from(offset + x * scale).unwrap_or(0);
                let end = start + usize::try_from(scale).unwrap_or(0);
                if let Some(run) = pixels.get_mut(start..end) {
                    run.fill(0);
                }
            }
        }
    }
    let mut png = Vec::new();
    PngEncoder::new(&mut png)
        .write_image(&pixels, size, size, ExtendedColorType::L8)
        .map_err(|err| QrError::Encode(err.to_string()))?;
    Ok(png)
}

/// [`qr_png`] as standard base64 (what Vault returns as `barcode`).
pub fn qr_png_base64(text: &str, size: u32) -> Result<String, QrError> {
    qr_png(text, size).map(|png| base64::engine::general_purpose::STANDARD.encode(png))
}

/// The code for `key` at Unix time `unix_secs`; empty when `params` are unusable (digits
/// outside 1..=9 or a zero period).
pub fn code_at(key: &[u8], params: &Params, unix_secs: u64) -> String {
    if !params.usable() {
        return String::new();
    }
    params.totp(key).generate(unix_secs).to_string()
}

/// Whether `code` is valid for `key` at `unix_secs` within the skew: exactly `digits` ASCII
/// digits matching one of the counters around now. Returns the matched counter step.
pub fn verify(key: &[u8], params: &Params, code: &str, unix_secs: u64) -> Option<u64> {
    if !params.usable()
        || code.len() != usize::from(params.digits)
        || !code.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    params.totp(key).check(code, unix_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6238 appendix B: the seeds are the ASCII digits repeated to the hash's size.
    fn rfc_seed(algorithm: Algorithm) -> Vec<u8> {
        let len = match algorithm {
            Algorithm::Sha1 => 20,
            Algorithm::Sha256 => 32,
            Algorithm::Sha512 => 64,
        };
        b"1234567890".iter().copied().cycle().take(len).collect()
    }

    fn rfc_params(algorithm: Algorithm) -> Params {
        Params {
            algorithm,
            digits: 8,
            period: 30,
            skew: 0,
        }
    }

    #[test]
    fn codes_match_rfc_6238_appendix_b_for_every_algorithm() {
        let table: &[(u64, &str, &str, &str)] = &[
            (59, "94287082", "46119246", "90693936"),
            (1111111109, "07081804", "68084774", "25091201"),
            (1111111111, "14050471", "67062674", "99943326"),
            (1234567890, "89005924", "91819424", "93441116"),
            (2000000000, "69279037", "90698825", "38618901"),
            (20000000000, "65353130", "77737706", "47863826"),
        ];
        for (time, sha1, sha256, sha512) in table {
            for (algorithm, want) in [
                (Algorithm::Sha1, sha1),
                (Algorithm::Sha256, sha256),
                (Algorithm::Sha512, sha512),
            ] {
                let key = rfc_seed(algorithm);
                let params = rfc_params(algorithm);
                assert_eq!(
                    &code_at(&key, &params, *time),
                    want,
                    "{algorithm:?} at {time}"
                );
                assert!(verify(&key, &params, want, *time).is_some());
            }
        }
    }

    #[test]
    fn six_digit_codes_are_the_last_six_of_the_eight() {
        let key = rfc_seed(Algorithm::Sha1);
        let params = Params {
            digits: 6,
            ..rfc_params(Algorithm::Sha1)
        };
        assert_eq!(code_at(&key, &params, 59), "287082");
    }

    #[test]
    fn skew_accepts_one_step_either_side_and_no_more() {
        let key = rfc_seed(Algorithm::Sha1);
        let strict = rfc_params(Algorithm::Sha1);
        let lenient = Params { skew: 1, ..strict };
        let code = code_at(&key, &strict, 1_000_000_000);
        for (offset, with_skew) in [
            (-60i64, false),
            (-30, true),
            (0, true),
            (30, true),
            (60, false),
        ] {
            let at = 1_000_000_000u64.saturating_add_signed(offset);
            assert_eq!(
                verify(&key, &lenient, &code, at).is_some(),
                with_skew,
                "{offset}"
            );
            assert_eq!(
                verify(&key, &strict, &code, at).is_some(),
                offset == 0,
                "{offset}"
            );
        }
    }

    #[test]
    fn codes_with_spaces_signs_or_the_wrong_length_are_refused() {
        let key = rfc_seed(Algorithm::Sha1);
        let params = rfc_params(Algorithm::Sha1);
        let code = code_at(&key, &params, 59);
        for bad in [
            format!(" {code}"),
            format!("{code} "),
            format!("{code}\n"),
            format!("+{}", &code[1..]),
            code[1..].to_owned(),
            format!("{code}0"),
            String::new(),
        ] {
            assert!(verify(&key, &params, &bad, 59).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn unusable_params_never_panic() {
        let params = Params {
            algorithm: Algorithm::Sha1,
            digits: 0,
            period: 0,
            skew: 1,
        };
        assert_eq!(code_at(b"k", &params, 59), "");
        assert!(verify(b"k", &params, "", 59).is_none());
    }

    #[test]
    fn algorithm_names_are_vaults() {
        for name in ["SHA1", "SHA256", "SHA512"] {
            assert_eq!(Algorithm::parse(name).unwrap().as_str(), name);
        }
        assert_eq!(Algorithm::parse("sha1"), None);
        assert_eq!(Algorithm::parse("MD5"), None);
    }

    #[test]
    fn base32_has_no_padding_and_round_trips() {
        let key = b"12345678901234567890";
        let text = encode_base32(key);
        assert_eq!(text, "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ");
        assert_eq!(decode_base32(&text).unwrap(), key);
        assert_eq!(encode_base32(b"\x01"), "AE");
        assert_eq!(decode_base32("not base32 !"), None);
    }

    #[test]
    fn url_has_vaults_sorted_query_and_escaping() {
        let params = Params {
            algorithm: Algorithm::Sha256,
            digits: 8,
            period: 60,
            skew: 1,
        };
        let url = otpauth_url(
            "Acme Corp",
            "4746fb81-028c-cd4e-026b-7dd18fe4c2f4",
            b"12345678901234567890",
            &params,
        );
        assert_eq!(
            url,
            "otpauth://totp/Acme%20Corp:4746fb81-028c-cd4e-026b-7dd18fe4c2f4?algorithm=SHA256&digits=8&issuer=Acme+Corp&period=60&secret=GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ"
        );
        let plain = otpauth_url(
            "vault",
            "e",
            b"\x01",
            &Params {
                digits: 6,
                period: 30,
                algorithm: Algorithm::Sha1,
                skew: 1,
            },
        );
        assert_eq!(
            plain,
            "otpauth://totp/vault:e?algorithm=SHA1&digits=6&issuer=vault&period=30&secret=AE"
        );
    }

    #[test]
    fn generated_keys_have_the_requested_size_and_differ() {
        let a = generate_key(20);
        let b = generate_key(20);
        assert_eq!(a.len(), 20);
        assert_ne!(a, b);
        assert!(generate_key(0).is_empty());
    }

    /// Decodes a PNG made by [`qr_png`] back to its text.
    fn decode_qr(png: &[u8]) -> (u32, String) {
        use qrcodegen_image::image::{ImageDecoder, codecs::png::PngDecoder};
        let decoder = PngDecoder::new(std::io::Cursor::new(png)).unwrap();
        let (width, height) = decoder.dimensions();
        assert_eq!(width, height);
        let mut pixels = vec![0u8; usize::try_from(decoder.total_bytes()).unwrap()];
        decoder.read_image(&mut pixels).unwrap();
        let w = usize::try_from(width).unwrap();
        let mut prepared =
            rqrr::PreparedImage::prepare_from_greyscale(w, w, |x, y| pixels[y * w + x]);
        let grids = prepared.detect_grids();
        assert_eq!(grids.len(), 1);
        let (_, text) = grids[0].decode().unwrap();
        (width, text)
    }

    #[test]
    fn qr_png_is_exactly_the_requested_size_and_decodes_to_the_url() {
        let params = Params {
            algorithm: Algorithm::Sha1,
            digits: 6,
            period: 30,
            skew: 1,
        };
        let url = otpauth_url(
            "vault",
            "4746fb81-028c-cd4e-026b-7dd18fe4c2f4",
            &generate_key(20),
            &params,
        );
        for size in [200, 333, 64] {
            let png = qr_png(&url, size).unwrap();
            assert_eq!(decode_qr(&png), (size, url.clone()), "size {size}");
        }
        let b64 = qr_png_base64(&url, 200).unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(decode_qr(&png).1, url);
    }

    #[test]
    fn qr_smaller_than_one_pixel_per_module_is_an_error() {
        let err = qr_png("otpauth://totp/vault:e?secret=AE", 10).unwrap_err();
        assert!(matches!(err, QrError::TooSmall { .. }), "{err}");
        assert!(err.to_string().starts_with("can not scale barcode"));
        assert_eq!(
            qr_png(&"x".repeat(8000), 200).unwrap_err(),
            QrError::TooLong
        );
    }
}
