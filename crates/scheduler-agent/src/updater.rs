//! Sends allocation status changes to the server in batches.
//!
//! Alloc runners queue an [`AllocClientUpdate`] on every change; the updater keeps only the
//! latest per allocation and flushes them together once per interval (default 100 ms), so a
//! node with many allocations sends one request per interval, not one per event.
//!
//! Invariants: an update is dropped only after the server accepted it or a newer update for
//! the same allocation superseded it; a failed flush is retried with backoff; at shutdown the
//! queue is drained and flushed once more (bounded in time). A status lost anyway (server down
//! at shutdown) is not lost for good: it is persisted with the allocation and sent again when
//! the agent restarts.

use std::collections::BTreeMap;
use std::time::Duration;

use scheduler_structs::AllocClientUpdate;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::server_client::ServerClient;

/// How long the final flush at shutdown may take.
const FINAL_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs until `shutdown`, then flushes what is queued.
pub(crate) async fn run(
    client: &ServerClient,
    mut updates: mpsc::UnboundedReceiver<AllocClientUpdate>,
    interval: Duration,
    shutdown: &CancellationToken,
) {
    let mut pending: BTreeMap<String, AllocClientUpdate> = BTreeMap::new();
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
    // When the queued updates are due; `None` while nothing is queued.
    let mut due: Option<Instant> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            update = updates.recv() => match update {
                Some(update) => {
                    pending.insert(update.id.clone(), update);
                    due.get_or_insert_with(|| Instant::now() + interval);
                }
                None => break,
            },
            () = sleep_until(due) => {
                let batch = std::mem::take(&mut pending);
                let list: Vec<_> = batch.values().cloned().collect();
                let sent = tokio::select! {
                    result = client.update_allocations(&list) => result,
                    () = shutdown.cancelled() => {
                        restore(&mut pending, batch);
                        break;
                    }
                };
                match sent {
                    Ok(()) => {
                        backoff.reset();
                        due = (!pending.is_empty()).then(|| Instant::now() + interval);
                    }
                    Err(error) => {
                        restore(&mut pending, batch);
                        let delay = backoff.next_delay();
                        tracing::warn!(%error, retry_in = ?delay, "allocation update failed");
                        due = Some(Instant::now() + delay);
                    }
                }
            }
        }
    }
    while let Ok(update) = updates.try_recv() {
        pending.insert(update.id.clone(), update);
    }
    if pending.is_empty() {
        return;
    }
    let batch: Vec<AllocClientUpdate> = pending.into_values().collect();
    match tokio::time::timeout(FINAL_FLUSH_TIMEOUT, client.update_allocations(&batch)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::warn!(%error, "final allocation update failed; it is sent again at the next start");
        }
        Err(_) => {
            tracing::warn!("final allocation update timed out; it is sent again at the next start")
        }
    }
}

/// Puts a failed batch back without overwriting newer updates queued meanwhile.
fn restore(
    pending: &mut BTreeMap<String, AllocClientUpdate>,
    batch: BTreeMap<String, AllocClientUpdate>,
) {
    for (id, update) in batch {
        pending.entry(id).or_insert(update);
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_batch_does_not_override_newer_updates() {
        let update = |id: &str, status: &str| AllocClientUpdate {
            id: id.to_owned(),
            client_status: status.to_owned(),
            ..AllocClientUpdate::default()
        };
        let mut pending = BTreeMap::from([("a".to_owned(), update("a", "complete"))]);
        let batch = BTreeMap::from([
            ("a".to_owned(), update("a", "running")),
            ("b".to_owned(), update("b", "running")),
        ]);
        restore(&mut pending, batch);
        assert_eq!(pending["a"].client_status, "complete");
        assert_eq!(pending["b"].client_status, "running");
    }
}
