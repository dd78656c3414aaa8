//! Snapshots of the secrets service's data: taking one, restoring one, and the automated
//! snapshot schedules (`config.rs`: what a schedule is and where it is kept; `targets.rs`:
//! the local directory, S3, Azure blob and GCS writers; `schedule.rs`: the leader loop). The
//! HTTP side is `sys/snapshots.rs`.
//!
//! Scope: the shared store holds four services; a snapshot here is the secrets service's
//! keys only (everything under `store::PREFIX`, `secrets/`), read by one scan at one
//! revision, so it is consistent. It is the `storage` crate's checksummed snapshot encoding
//! of those entries, values exactly as stored: barrier ciphertext, the seal configuration and
//! the root-key-encrypted keyring. Nothing is decrypted to take it, so no secret is ever in a
//! snapshot in clear, and the unseal keys are not in it.
//!
//! Restore replaces exactly that prefix in one transaction (delete the prefix, put every
//! entry; the store keeps its own cluster identity), with requests refused meanwhile, then
//! reloads the core's in-memory state (mounts, policies, tokens, lease timers) through the
//! unseal path (`seal::Seal::replace_contents`). A snapshot whose keyring the running root key
//! does not open (taken from another store, or before a root key change) is refused unless
//! forced, as Vault refuses it without `-force`; after a forced restore the store is sealed
//! and opens with the snapshot's unseal keys.
//!
//! Invariants: a snapshot never holds a key outside `secrets/`, and restore refuses one that
//! does; a restore either happens whole or not at all.

pub(crate) mod config;
pub(crate) mod schedule;
pub(crate) mod targets;

use storage::{KeyRange, KeyValue, Op, Snapshot, Txn};

use crate::barrier::KEYRING_KEY;
use crate::seal::SEAL_CONFIG_KEY;
use crate::store::{CLUSTER_KEY, PREFIX};
use crate::{Error, State};

/// A snapshot of the service's keys at one revision, encoded.
pub(crate) async fn take(state: &State) -> Result<Vec<u8>, Error> {
    if state.barrier().is_sealed() {
        return Err(Error::Sealed);
    }
    let scan = state
        .barrier()
        .storage()
        .scan(KeyRange::prefix(PREFIX.as_bytes()), None)
        .await?;
    let snapshot = Snapshot {
        revision: scan.revision,
        entries: scan.kvs,
    };
    Ok(snapshot.to_bytes())
}

/// Restores `bytes` (a snapshot from [`take`]); see the module docs. Bad input is a 400.
pub(crate) async fn restore(state: &State, bytes: &[u8], force: bool) -> Result<(), Error> {
    if state.barrier().is_sealed() {
        return Err(Error::Sealed);
    }
    let snapshot = Snapshot::from_bytes(bytes)
        .map_err(|err| Error::InvalidParameter(format!("failed to read snapshot: {err}")))?;
    if let Some(stray) = snapshot
        .entries
        .iter()
        .find(|kv| !kv.key.starts_with(PREFIX.as_bytes()))
    {
        return Err(Error::InvalidParameter(format!(
            "the snapshot holds a key outside {PREFIX} ({:?}): not a snapshot of the secrets store",
            String::from_utf8_lossy(&stray.key)
        )));
    }
    let find = |key: &str| {
        snapshot
            .entries
            .iter()
            .find(|kv| kv.key == key.as_bytes())
            .map(|kv| kv.value.clone())
    };
    let (Some(keyring), Some(_)) = (find(KEYRING_KEY), find(SEAL_CONFIG_KEY)) else {
        return Err(Error::InvalidParameter(
            "the snapshot has no keyring or seal configuration: it is of an uninitialized store"
                .to_owned(),
        ));
    };
    let same_keys = state.barrier().root_opens_keyring(&keyring)?;
    if !same_keys && !force {
        return Err(Error::InvalidParameter(
            "the snapshot's keyring does not open with this store's root key (it was taken \
             from another store or with other unseal keys); use snapshot-force to restore it, \
             then unseal with the snapshot's keys"
                .to_owned(),
        ));
    }
    let storage = state.barrier().storage().clone();
    let replace = async move {
        let cluster = storage.get(CLUSTER_KEY.as_bytes()).await?;
        let txn = replace_txn(&snapshot.entries, cluster.as_ref());
        storage.txn(txn).await?;
        Ok(())
    };
    state
        .seal()
        .replace_contents(state, same_keys, replace)
        .await
}

/// One transaction: delete everything under the prefix, put every entry, keep `cluster` (the
/// running store's identity) rather than the snapshot's.
fn replace_txn(entries: &[KeyValue], cluster: Option<&KeyValue>) -> Txn {
    let mut txn = Txn::new().then(Op::DeleteRange(KeyRange::prefix(PREFIX.as_bytes())));
    for kv in entries {
        if kv.key == CLUSTER_KEY.as_bytes() {
            continue;
        }
        txn = txn.then(Op::Put {
            key: kv.key.clone(),
            value: kv.value.clone(),
        });
    }
    if let Some(kv) = cluster {
        txn = txn.then(Op::Put {
            key: kv.key.clone(),
            value: kv.value.clone(),
        });
    }
    txn
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            create_revision: 1,
            mod_revision: 1,
            version: 1,
        }
    }

    #[test]
    fn restore_transaction_replaces_the_prefix_and_keeps_the_running_cluster_identity() {
        let entries = [kv(CLUSTER_KEY, "theirs"), kv("secrets/barrier/x", "1")];
        let ours = kv(CLUSTER_KEY, "ours");
        let txn = replace_txn(&entries, Some(&ours));
        assert_eq!(
            txn.success,
            vec![
                Op::DeleteRange(KeyRange::prefix(PREFIX.as_bytes())),
                Op::Put {
                    key: b"secrets/barrier/x".to_vec(),
                    value: b"1".to_vec()
                },
                Op::Put {
                    key: CLUSTER_KEY.as_bytes().to_vec(),
                    value: b"ours".to_vec()
                },
            ]
        );
        assert!(txn.compares.is_empty());
    }
}
