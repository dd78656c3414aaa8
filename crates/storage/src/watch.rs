//! Watches: a stream of every change in a key range after a given revision.
//!
//! Backends publish each committed transaction once, as a [`Batch`], on a [`Hub`]; a watch
//! subscribes to the hub first and then replays the backend's stored history, so nothing that
//! commits between the two is missed, and skips live batches it already replayed, so nothing is
//! delivered twice. A subscriber that falls behind the hub's buffer re-reads history from its
//! cursor instead of losing events.
//!
//! Invariant: a [`WatchStream`] yields events with strictly increasing `(revision, position in
//! the transaction)`, every event in its range after its start revision exactly once, and ends
//! with [`Error::Compacted`](crate::Error::Compacted) if the history it needs is gone.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::stream::{BoxStream, Stream, StreamExt};
use tokio::sync::broadcast;

use crate::{Event, KeyRange, Result, Revision};

/// How many committed batches the hub buffers for slow subscribers before they must re-read
/// history.
const HUB_CAPACITY: usize = 1024;

/// The events of one committed transaction.
#[derive(Debug, Clone)]
pub struct Batch {
    pub revision: Revision,
    pub events: Vec<Event>,
}

/// Where a watch replays history from: the backend's change log.
pub trait History: Send + Sync + 'static {
    /// Every stored event in `range` with revision `> after`, in order, and the store revision
    /// the read saw (every event up to it is included). Fails with `Compacted` if events after
    /// `after` were already discarded.
    fn read_history(
        &self,
        range: &KeyRange,
        after: Revision,
    ) -> BoxFuture<'_, Result<(Vec<Event>, Revision)>>;
}

/// The fan-out point for committed batches. Backends call [`Hub::publish`] after each durable
/// commit, in revision order.
#[derive(Clone)]
pub struct Hub {
    sender: broadcast::Sender<Arc<Batch>>,
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("subscribers", &self.sender.receiver_count())
            .finish()
    }
}

impl Default for Hub {
    fn default() -> Hub {
        Hub::new()
    }
}

impl Hub {
    pub fn new() -> Hub {
        let (sender, _) = broadcast::channel(HUB_CAPACITY);
        Hub { sender }
    }

    /// Publishes one committed transaction. Must be called in revision order, after the commit
    /// is visible to `History::read_history`.
    pub fn publish(&self, batch: Batch) {
        // No subscribers is fine: nobody is watching.
        let _ = self.sender.send(Arc::new(batch));
    }

    /// A watch over `range` from `after`, replaying `history` first.
    pub fn watch(
        &self,
        history: Arc<dyn History>,
        range: KeyRange,
        after: Revision,
    ) -> WatchStream {
        let receiver = self.sender.subscribe();
        let state = WatchState {
            history,
            range,
            cursor: after,
            receiver,
            pending: Vec::new(),
            started: false,
        };
        let stream = futures::stream::unfold(Some(state), |state| async move {
            let mut state = state?;
            match state.next().await {
                Some(Ok(event)) => Some((Ok(event), Some(state))),
                Some(Err(err)) => Some((Err(err), None)),
                None => None,
            }
        });
        WatchStream {
            inner: stream.boxed(),
        }
    }
}

struct WatchState {
    history: Arc<dyn History>,
    range: KeyRange,
    /// Every event with a revision `<= cursor` has been queued or delivered.
    cursor: Revision,
    receiver: broadcast::Receiver<Arc<Batch>>,
    /// Queued events, in reverse order (popped from the end).
    pending: Vec<Event>,
    started: bool,
}

impl WatchState {
    async fn replay(&mut self) -> Result<()> {
        let (events, read_at) = self.history.read_history(&self.range, self.cursor).await?;
        self.queue(events);
        self.cursor = self.cursor.max(read_at);
        Ok(())
    }

    fn queue(&mut self, events: Vec<Event>) {
        debug_assert!(self.pending.is_empty());
        self.pending = events;
        self.pending.reverse();
    }

    async fn next(&mut self) -> Option<Result<Event>> {
        if !self.started {
            self.started = true;
            if let Err(err) = self.replay().await {
                return Some(Err(err));
            }
        }
        loop {
            if let Some(event) = self.pending.pop() {
                return Some(Ok(event));
            }
            match self.receiver.recv().await {
                Ok(batch) => {
                    if batch.revision <= self.cursor {
                        continue;
                    }
                    self.cursor = batch.revision;
                    let events: Vec<Event> = batch
                        .events
                        .iter()
                        .filter(|e| self.range.contains(&e.key))
                        .cloned()
                        .collect();
                    self.queue(events);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if let Err(err) = self.replay().await {
                        return Some(Err(err));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

/// A stream of [`Event`]s; ends when the store closes, or with an error.
pub struct WatchStream {
    inner: BoxStream<'static, Result<Event>>,
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream").finish_non_exhaustive()
    }
}

impl WatchStream {
    /// Wraps any event stream (for backends with a native watch, such as etcd).
    pub fn from_stream(stream: impl Stream<Item = Result<Event>> + Send + 'static) -> WatchStream {
        WatchStream {
            inner: stream.boxed(),
        }
    }

    /// The next event, or `None` once the store has closed.
    pub async fn next_event(&mut self) -> Option<Result<Event>> {
        self.inner.next().await
    }
}

impl Stream for WatchStream {
    type Item = Result<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
