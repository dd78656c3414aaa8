//! An issuer ready to sign ([`SigningIssuer`]: its record, parsed certificate and chain, key,
//! and the rcgen signers made from them) and the mount's cache of them ([`SignerCache`]), so
//! that issuance does not decode and check the same issuer and key on every request.
//!
//! Where it sits: below `ca.rs`, which reads the stored bytes and builds or finds the entry;
//! the mount (`mount.rs`) owns one cache.
//!
//! Invariants: an entry remembers the exact stored bytes of the issuer record and of the key
//! record it was built from, and is used only when storage still holds those bytes (the
//! caller reads both on every use and compares): any write, import, delete, default change or
//! restore — through this mount or not — changes the bytes or the resolution and so can never
//! hand out a stale issuer. Entries are immutable once built; the signers are made lazily, at
//! most once per hash (a race makes two equivalent signers and keeps one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use rcgen::{Issuer, KeyPair};

use crate::cert::CertInfo;
use crate::keys::{KeyKind, PrivateKey};
use crate::store::IssuerRecord;
use crate::template;

/// Cached entries past this many are all dropped (a mount rarely has more issuers).
const MAX_ENTRIES: usize = 64;

/// An issuer with its key, parsed once.
#[derive(Debug)]
pub(crate) struct SigningIssuer {
    pub(crate) record: IssuerRecord,
    pub(crate) cert: CertInfo,
    pub(crate) key: PrivateKey,
    /// The issuer's chain: itself, then its parents (from `record.ca_chain`).
    chain: Vec<CertInfo>,
    /// The rcgen signers: SHA-256 (or the key's own hash), SHA-384, SHA-512.
    signers: [OnceLock<Issuer<'static, KeyPair>>; 3],
    /// The stored issuer and key records this was built from.
    issuer_bytes: Vec<u8>,
    key_bytes: Vec<u8>,
}

impl SigningIssuer {
    /// An issuer from its parsed parts and the stored bytes they came from (empty bytes: not
    /// from storage, never cached).
    pub(crate) fn new(
        record: IssuerRecord,
        cert: CertInfo,
        key: PrivateKey,
        issuer_bytes: Vec<u8>,
        key_bytes: Vec<u8>,
    ) -> SigningIssuer {
        let mut chain: Vec<CertInfo> = record
            .ca_chain
            .iter()
            .filter_map(|pem| CertInfo::from_pem(pem).ok())
            .collect();
        if chain.first().map(|c| &c.der) != Some(&cert.der) {
            chain.insert(0, cert.clone());
        }
        SigningIssuer {
            record,
            cert,
            key,
            chain,
            signers: Default::default(),
            issuer_bytes,
            key_bytes,
        }
    }

    /// The issuer's chain: itself, then its parents.
    pub(crate) fn chain(&self) -> &[CertInfo] {
        &self.chain
    }

    /// Whether this entry was built from exactly these stored records.
    pub(crate) fn built_from_key(&self, key_bytes: &[u8]) -> bool {
        !self.key_bytes.is_empty() && self.key_bytes == key_bytes
    }

    /// The rcgen issuer signing with `signature_bits` (only RSA keys choose their hash).
    pub(crate) fn signer(&self, signature_bits: i64) -> Result<&Issuer<'static, KeyPair>, String> {
        let slot = match (self.key.spec.kind, signature_bits) {
            (KeyKind::Rsa, 384) => 1,
            (KeyKind::Rsa, 512) => 2,
            _ => 0,
        };
        let cell = &self.signers[slot];
        if let Some(made) = cell.get() {
            return Ok(made);
        }
        let made = template::rcgen_issuer(&self.cert, &self.key, signature_bits)?;
        let _ = cell.set(made);
        cell.get()
            .ok_or_else(|| "unable to prepare the issuer's signer".to_owned())
    }
}

/// The mount's parsed issuers, by issuer id.
#[derive(Debug, Default)]
pub(crate) struct SignerCache {
    entries: Mutex<HashMap<String, Arc<SigningIssuer>>>,
}

impl SignerCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<SigningIssuer>>> {
        // Entries are immutable Arcs: a panic while holding the lock leaves nothing half-done.
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The entry for issuer `id` if it was built from exactly `issuer_bytes` (the caller
    /// still checks the key record with [`SigningIssuer::built_from_key`]).
    pub(crate) fn get(&self, id: &str, issuer_bytes: &[u8]) -> Option<Arc<SigningIssuer>> {
        self.entries()
            .get(id)
            .filter(|entry| !entry.issuer_bytes.is_empty() && entry.issuer_bytes == issuer_bytes)
            .cloned()
    }

    /// Keeps `entry` for its issuer id, replacing any older one.
    pub(crate) fn put(&self, entry: Arc<SigningIssuer>) {
        let mut entries = self.entries();
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&entry.record.id) {
            entries.clear();
        }
        entries.insert(entry.record.id.clone(), entry);
    }

    /// Drops the entry of issuer `id` (after it is deleted: memory only, since a stale entry
    /// is never used anyway).
    pub(crate) fn forget(&self, id: &str) {
        self.entries().remove(id);
    }
}
