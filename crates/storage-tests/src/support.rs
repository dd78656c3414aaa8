//! Helpers shared by the conformance checks: bounded waits on watches, event constructors, a
//! reference model that replays events into the state they describe, and comparisons that
//! report the first difference instead of dumping thousands of events.
//!
//! Invariant: every wait here is bounded by [`WAIT`]; nothing sleeps.

use std::collections::BTreeMap;
use std::time::Duration;

use storage::{
    Error, Event, EventKind, KeyRange, KeyValue, Revision, Storage, StorageExt, WatchStream,
};
use tokio::time::timeout;

use crate::Semantics;

/// The longest any check waits for one thing (an event, a stream end) before failing.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

pub(crate) fn put_event(
    key: impl Into<Vec<u8>>,
    value: impl Into<Vec<u8>>,
    revision: Revision,
) -> Event {
    Event {
        kind: EventKind::Put,
        key: key.into(),
        value: value.into(),
        revision,
    }
}

pub(crate) fn delete_event(key: impl Into<Vec<u8>>, revision: Revision) -> Event {
    Event {
        kind: EventKind::Delete,
        key: key.into(),
        value: Vec::new(),
        revision,
    }
}

/// Puts one key, panicking on failure; returns the new revision.
pub(crate) async fn put(
    store: &dyn Storage,
    key: impl AsRef<[u8]>,
    value: impl AsRef<[u8]>,
) -> Revision {
    let key = key.as_ref();
    match store.put(key, value.as_ref()).await {
        Ok(revision) => revision,
        Err(err) => panic!("put {:?} failed: {err}", String::from_utf8_lossy(key)),
    }
}

/// Deletes one key, panicking on failure; returns the store revision afterwards.
pub(crate) async fn delete(store: &dyn Storage, key: impl AsRef<[u8]>) -> Revision {
    let key = key.as_ref();
    match store.delete(key).await {
        Ok(revision) => revision,
        Err(err) => panic!("delete {:?} failed: {err}", String::from_utf8_lossy(key)),
    }
}

pub(crate) async fn revision(store: &dyn Storage) -> Revision {
    store.revision().await.expect("revision")
}

pub(crate) async fn watch(store: &dyn Storage, range: KeyRange, after: Revision) -> WatchStream {
    match store.watch(range.clone(), after).await {
        Ok(stream) => stream,
        Err(err) => panic!("watch {range:?} after {after} failed: {err}"),
    }
}

/// Every key in the store, in order.
pub(crate) async fn all_kvs(store: &dyn Storage) -> Vec<KeyValue> {
    store
        .scan(KeyRange::all(), None)
        .await
        .expect("full scan")
        .kvs
}

/// Key and value of each entry: what "contents" means when metadata may legitimately differ.
pub(crate) fn contents(kvs: &[KeyValue]) -> Vec<(Vec<u8>, Vec<u8>)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect()
}

/// The next event of `stream`, panicking on error, end, or timeout.
pub(crate) async fn next_event(stream: &mut WatchStream, what: &str) -> Event {
    match timeout(WAIT, stream.next_event()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(err))) => panic!("{what}: watch failed: {err}"),
        Ok(None) => panic!("{what}: watch ended early"),
        Err(_) => panic!("{what}: no event within {WAIT:?}"),
    }
}

/// Exactly `count` events of `stream`.
pub(crate) async fn take_events(stream: &mut WatchStream, count: usize, what: &str) -> Vec<Event> {
    let mut events = Vec::with_capacity(count);
    while events.len() < count {
        events.push(next_event(stream, what).await);
    }
    events
}

/// Every event before the first one for which `stop` holds (that one is consumed, not
/// returned). Writing a sentinel after the events under test and reading up to it proves there
/// was no extra event in between.
pub(crate) async fn events_until(
    stream: &mut WatchStream,
    what: &str,
    stop: impl Fn(&Event) -> bool,
) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let event = next_event(stream, what).await;
        if stop(&event) {
            return events;
        }
        events.push(event);
    }
}

/// Events up to the put of `sentinel`, which is not returned.
pub(crate) async fn events_until_key(
    stream: &mut WatchStream,
    what: &str,
    sentinel: &[u8],
) -> Vec<Event> {
    events_until(stream, what, |event| event.key == sentinel).await
}

/// Asserts two event sequences are equal, reporting lengths and the first difference.
pub(crate) fn assert_events(actual: &[Event], expected: &[Event], what: &str) {
    if actual == expected {
        return;
    }
    let first = actual
        .iter()
        .zip(expected)
        .position(|(a, e)| a != e)
        .unwrap_or(actual.len().min(expected.len()));
    panic!(
        "{what}: got {} events, expected {}; first difference at index {first}: got {:?}, expected {:?}",
        actual.len(),
        expected.len(),
        actual.get(first),
        expected.get(first),
    );
}

/// Asserts that `watch(range, after)` fails with `Compacted`, either from `watch` itself or as
/// the stream's first item, and returns the oldest available revision it reports.
pub(crate) async fn expect_compacted(store: &dyn Storage, after: Revision) -> Revision {
    let (requested, compacted) = match store.watch(KeyRange::all(), after).await {
        Err(Error::Compacted {
            requested,
            compacted,
        }) => (requested, compacted),
        Err(err) => panic!("watch after {after}: expected Compacted, got {err}"),
        Ok(mut stream) => match timeout(WAIT, stream.next_event()).await {
            Ok(Some(Err(Error::Compacted {
                requested,
                compacted,
            }))) => (requested, compacted),
            Ok(Some(Err(err))) => panic!("watch after {after}: expected Compacted, got {err}"),
            Ok(Some(Ok(event))) => panic!("watch after {after}: expected Compacted, got {event:?}"),
            Ok(None) => panic!("watch after {after}: expected Compacted, the stream ended"),
            Err(_) => panic!("watch after {after}: expected Compacted, nothing within {WAIT:?}"),
        },
    };
    assert_eq!(requested, after, "Compacted reports the requested revision");
    compacted
}

/// What a sequence of events says the store holds, metadata included: the reference the
/// checks compare real stores against.
#[derive(Debug, Default, Clone)]
pub(crate) struct Model {
    kvs: BTreeMap<Vec<u8>, KeyValue>,
}

impl Model {
    pub(crate) fn from_kvs(kvs: &[KeyValue]) -> Model {
        Model {
            kvs: kvs.iter().map(|kv| (kv.key.clone(), kv.clone())).collect(),
        }
    }

    pub(crate) fn apply(&mut self, event: &Event) {
        match event.kind {
            EventKind::Put => {
                let (create_revision, version) = match self.kvs.get(&event.key) {
                    Some(old) => (old.create_revision, old.version + 1),
                    None => (event.revision, 1),
                };
                self.kvs.insert(
                    event.key.clone(),
                    KeyValue {
                        key: event.key.clone(),
                        value: event.value.clone(),
                        create_revision,
                        mod_revision: event.revision,
                        version,
                    },
                );
            }
            EventKind::Delete => {
                self.kvs.remove(&event.key);
            }
        }
    }

    pub(crate) fn kvs(&self) -> Vec<KeyValue> {
        self.kvs.values().cloned().collect()
    }
}

/// Asserts two key listings are equal, reporting the first difference.
pub(crate) fn assert_kvs(actual: &[KeyValue], expected: &[KeyValue], what: &str) {
    if actual == expected {
        return;
    }
    let first = actual
        .iter()
        .zip(expected)
        .position(|(a, e)| a != e)
        .unwrap_or(actual.len().min(expected.len()));
    panic!(
        "{what}: got {} keys, expected {}; first difference at index {first}: got {:?}, expected {:?}",
        actual.len(),
        expected.len(),
        actual.get(first),
        expected.get(first),
    );
}

/// Revision assertions under a backend's [`Semantics`]: exact with dense revisions, ordering
/// only without.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Revs(pub(crate) Semantics);

impl Revs {
    pub(crate) fn dense(&self) -> bool {
        self.0.dense_revisions
    }

    /// `got` is the revision of a writing transaction that followed the one at `previous`.
    #[track_caller]
    pub(crate) fn next(&self, previous: Revision, got: Revision, what: &str) {
        if self.dense() {
            assert_eq!(got, previous + 1, "{what}: one more than {previous}");
        } else {
            assert!(got > previous, "{what}: {got} is not after {previous}");
        }
    }

    /// `got` was reported by a read, or a transaction that wrote nothing, after the last write
    /// at `last`.
    #[track_caller]
    pub(crate) fn read(&self, last: Revision, got: Revision, what: &str) {
        if self.dense() {
            assert_eq!(got, last, "{what}: the revision of the last write");
        } else {
            assert!(
                got >= last,
                "{what}: {got} is before the last write at {last}"
            );
        }
    }

    /// With dense revisions, `got` equals `expected`; without, nothing is asserted.
    #[track_caller]
    pub(crate) fn exact(&self, got: Revision, expected: Revision, what: &str) {
        if self.dense() {
            assert_eq!(got, expected, "{what}");
        }
    }
}

/// Asserts that nothing in the store changed after `last`: the newest change to any key (puts
/// and deletes) is still `last`. Holds with either revision semantics.
pub(crate) async fn assert_unwritten_since(store: &dyn Storage, last: Revision, what: &str) {
    let newest = store
        .range_revision(KeyRange::all())
        .await
        .expect("range_revision");
    assert_eq!(newest, last, "{what}: something was written after {last}");
}
