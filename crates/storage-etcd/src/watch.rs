//! Watches: an etcd watch over the data subspace turned into cairn's [`WatchStream`].
//!
//! etcd replays its history from the start revision and then follows, in revision order and in
//! operation order within a transaction; this file only maps its events and its cancellations.
//!
//! Invariants: a cancellation with a compaction revision ends the stream with
//! [`Error::Compacted`] naming the revision the caller asked for; any other end of the etcd
//! stream (a cancellation, a broken connection) ends it with a backend error, never silently;
//! the store's close (its token) ends the stream with `None`.

use std::collections::VecDeque;

use etcd_client::{Client, EventType, WatchOptions};
use futures::stream;
use storage::{Error, Event, EventKind, KeyRange, Result, Revision, WatchStream};
use tokio_util::sync::CancellationToken;

use crate::keys::Layout;
use crate::{backend, txn, unsigned};

struct State {
    stream: Option<etcd_client::WatchStream>,
    layout: Layout,
    pending: VecDeque<Event>,
    requested: Revision,
    closed: CancellationToken,
    done: bool,
}

/// A watch of `range` delivering every event after `from` (`requested` is what the caller
/// asked for, reported in `Compacted`).
pub(crate) async fn open(
    client: Client,
    layout: Layout,
    range: KeyRange,
    requested: Revision,
    from: Revision,
    closed: CancellationToken,
) -> Result<WatchStream> {
    let stream = if range.is_empty() {
        None
    } else {
        let (start, end) = layout.data_range(&range);
        let options = WatchOptions::new()
            .with_range(end)
            .with_start_revision(txn::signed(from.saturating_add(1)));
        Some(
            client
                .watch_client()
                .watch(start, Some(options))
                .await
                .map_err(|err| backend("watch", err))?,
        )
    };
    let state = State {
        stream,
        layout,
        pending: VecDeque::new(),
        requested,
        closed,
        done: false,
    };
    Ok(WatchStream::from_stream(stream::unfold(state, next)))
}

async fn next(mut state: State) -> Option<(Result<Event>, State)> {
    loop {
        if state.done {
            return None;
        }
        if let Some(event) = state.pending.pop_front() {
            return Some((Ok(event), state));
        }
        let closed = state.closed.clone();
        let Some(stream) = state.stream.as_mut() else {
            // An empty range never changes: wait for the store to close.
            closed.cancelled().await;
            return None;
        };
        let message = tokio::select! {
            biased;
            () = closed.cancelled() => return None,
            message = stream.message() => message,
        };
        let response = match message {
            Ok(Some(response)) => response,
            Ok(None) => {
                state.done = true;
                return Some((
                    Err(Error::Backend("etcd ended the watch".to_owned())),
                    state,
                ));
            }
            Err(err) => {
                state.done = true;
                return Some((Err(backend("watch", err)), state));
            }
        };
        if response.canceled() {
            state.done = true;
            let err = if response.compact_revision() > 0 {
                Error::Compacted {
                    requested: state.requested,
                    compacted: unsigned(response.compact_revision()),
                }
            } else {
                Error::Backend(format!(
                    "etcd cancelled the watch: {}",
                    response.cancel_reason()
                ))
            };
            return Some((Err(err), state));
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let Some(key) = state.layout.strip_data(kv.key()) else {
                continue;
            };
            let kind = match event.event_type() {
                EventType::Put => EventKind::Put,
                EventType::Delete => EventKind::Delete,
            };
            state.pending.push_back(Event {
                kind,
                key: key.to_vec(),
                value: match kind {
                    EventKind::Put => kv.value().to_vec(),
                    EventKind::Delete => Vec::new(),
                },
                revision: unsigned(kv.mod_revision()),
            });
        }
    }
}
