//! TOTP for the secrets store's MFA methods (`sys/mfa/method/totp`): key generation, Vault's
//! otpauth URL and QR barcode, and RFC 6238 code validation with skew.
//!
//! Where it sits: a pure library the core (`crates/secrets`) calls; it keeps no state and does
//! no I/O. Scaffolding: being built (issue 13).
