//! Health check status writes: client updates (TTL heartbeats, `/v1/agent/check/update`), the
//! check runner's probe results, and TTL expiry.
//!
//! Where it sits: called by the agent handlers and by `tasks/check_runner.rs`; reads and writes
//! the check and TTL-deadline records of `store/catalog.rs`.
//!
//! Invariants: every write is one compare-and-swap transaction on the check (and its deadline),
//! retried up to [`MAX_ATTEMPTS`] times; a check that ends up critical has the sessions bound to
//! it invalidated after the commit; a TTL check is expired only if its stored deadline is still
//! the one that passed; output is cut to [`MAX_OUTPUT`] bytes as Consul does.

use std::time::Duration;

use storage::{Compare, Op, Txn};

use crate::domain::{MAX_ATTEMPTS, sessions};
use crate::store::catalog::{
    CheckKind, CheckRecord, CheckStatus, DeadlineRecord, RECORD_VERSION, check_key, deadline_key,
    valid_key_part,
};
use crate::store::{decode, encode};
use crate::{Error, State};

/// The longest check output kept (Consul's default `check_output_max_size`).
pub(crate) const MAX_OUTPUT: usize = 4096;

/// The shortest interval an HTTP or TCP check runs at (Consul's `MinInterval`).
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The timeout of an HTTP or TCP check that names none (Consul's default).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Output of an expired TTL check.
pub(crate) const TTL_EXPIRED: &str = "TTL expired";

/// Cuts a check's output to [`MAX_OUTPUT`] bytes as Consul does.
pub(crate) fn truncate_output(output: &str) -> String {
    if output.len() <= MAX_OUTPUT {
        return output.to_owned();
    }
    let mut end = MAX_OUTPUT;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{} ... (captured {end} of {} bytes)",
        &output[..end],
        output.len()
    )
}

/// Parses a check status; `None` or empty means critical, as Consul defaults.
pub(crate) fn parse_status(raw: Option<&str>) -> Result<CheckStatus, Error> {
    match raw {
        None | Some("") => Ok(CheckStatus::Critical),
        Some(raw) => CheckStatus::parse(raw)
            .ok_or_else(|| Error::Invalid(format!("Invalid check status: {raw:?}"))),
    }
}

/// How a status update treats the check's TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TtlUpdate {
    /// A client update (`/v1/agent/check/pass` ...): the check must be a TTL check, and its
    /// deadline moves to now + TTL.
    Heartbeat,
    /// A result of the check runner: the TTL is untouched.
    Runner,
}

/// Sets a check's status and output. Returns whether the stored check changed. A check that
/// ends up critical has its sessions invalidated (always for a client update; for the runner
/// only when the status changed).
pub(crate) async fn update_check_status(
    state: &State,
    node: &str,
    check_id: &str,
    status: CheckStatus,
    output: &str,
    mode: TtlUpdate,
) -> Result<bool, Error> {
    let storage = state.storage();
    let output = truncate_output(output);
    let mut attempts = 0;
    let changed = loop {
        attempts += 1;
        if attempts > MAX_ATTEMPTS {
            return Err(Error::Contention);
        }
        let ckey = check_key(node, check_id);
        let Some(kv) = (if valid_key_part(node) {
            storage.get(&ckey).await?
        } else {
            None
        }) else {
            return Err(unknown_check(check_id));
        };
        let record: CheckRecord = decode(&kv.key, &kv.value)?;
        let mut txn = Txn::new().when(Compare::ModRevision(ckey.clone(), kv.mod_revision));
        if mode == TtlUpdate::Heartbeat {
            if record.kind != CheckKind::Ttl {
                return Err(Error::Invalid(format!(
                    "CheckID {check_id:?} does not have associated TTL"
                )));
            }
            let dkey = deadline_key(node, check_id);
            let deadline = DeadlineRecord {
                version: RECORD_VERSION,
                deadline_ms: state.now_ms().saturating_add(record.definition.ttl_ms),
            };
            txn = txn.then(Op::Put {
                value: encode(&dkey, &deadline)?,
                key: dkey,
            });
        }
        let mut updated = record.clone();
        updated.status = status;
        updated.output.clone_from(&output);
        let changed = updated != record;
        if changed {
            txn = txn.then(Op::Put {
                value: encode(&ckey, &updated)?,
                key: ckey,
            });
        }
        if txn.success.is_empty() || storage.txn(txn).await?.succeeded {
            break changed;
        }
    };
    if status == CheckStatus::Critical && (changed || mode == TtlUpdate::Heartbeat) {
        sessions::invalidate_sessions_for_check(state, node, check_id).await?;
    }
    Ok(changed)
}

/// Marks a TTL check critical with Output "TTL expired" if its stored deadline is still
/// `deadline_ms` and has passed. Returns whether it expired the check.
pub(crate) async fn expire_ttl_check(
    state: &State,
    node: &str,
    check_id: &str,
    deadline_ms: u64,
) -> Result<bool, Error> {
    let storage = state.storage();
    for _ in 0..MAX_ATTEMPTS {
        let dkey = deadline_key(node, check_id);
        let Some(deadline_kv) = storage.get(&dkey).await? else {
            return Ok(false);
        };
        let deadline: DeadlineRecord = decode(&deadline_kv.key, &deadline_kv.value)?;
        if deadline.deadline_ms != deadline_ms || state.now_ms() < deadline_ms {
            return Ok(false);
        }
        let ckey = check_key(node, check_id);
        let mut txn = Txn::new()
            .when(Compare::ModRevision(dkey.clone(), deadline_kv.mod_revision))
            .then(Op::Delete { key: dkey });
        let check_kv = storage.get(&ckey).await?;
        if let Some(kv) = &check_kv {
            let record: CheckRecord = decode(&kv.key, &kv.value)?;
            let mut updated = record.clone();
            updated.status = CheckStatus::Critical;
            updated.output = TTL_EXPIRED.to_owned();
            txn = txn.when(Compare::ModRevision(ckey.clone(), kv.mod_revision));
            if updated != record {
                txn = txn.then(Op::Put {
                    value: encode(&ckey, &updated)?,
                    key: ckey,
                });
            }
        } else {
            txn = txn.when(Compare::Missing(ckey));
        }
        if storage.txn(txn).await?.succeeded {
            if check_kv.is_some() {
                sessions::invalidate_sessions_for_check(state, node, check_id).await?;
            }
            return Ok(check_kv.is_some());
        }
    }
    Err(Error::Contention)
}

/// Consul's 404 for an unknown check ID on the agent endpoints.
pub(crate) fn unknown_check(check_id: &str) -> Error {
    Error::NotFound(format!(
        "Unknown check ID {check_id:?}. Ensure that the check ID is passed, not the check name."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_output_is_truncated() {
        let long = "x".repeat(MAX_OUTPUT + 10);
        let cut = truncate_output(&long);
        assert!(cut.starts_with(&"x".repeat(MAX_OUTPUT)));
        assert!(cut.ends_with(&format!(
            "(captured {MAX_OUTPUT} of {} bytes)",
            MAX_OUTPUT + 10
        )));
    }
}
