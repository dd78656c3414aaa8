//! Blocking queries, the Consul/Nomad long poll: `GET ...?index=N&wait=5m` answers once what
//! the query reads has an index greater than `N`, or when the wait runs out.
//!
//! A handler parses the parameters into a [`BlockingParams`] (usually through
//! [`QueryParams::blocking`](crate::query::QueryParams::blocking)) and runs its read through
//! [`block_range`] (the index is the last change to the range the read watches), [`block`] (the
//! read computes its own index) or, for state kept in memory and published through a
//! `tokio::sync::watch`, [`block_watch`]. The handler sends the index as `X-Registry-Index` /
//! `X-Scheduler-Index` ([`Indexed`](crate::query::Indexed)).
//!
//! Invariants:
//! - No wake-up is lost: the watch starts at the store revision read *before* the query ran, so a
//!   write that lands between the query and the watch is replayed and wakes the loop.
//! - A wake-up that does not move the query's index (a write elsewhere in the range) just loops;
//!   the deadline is fixed once, at the start.
//! - The returned index is never 0 (1 instead, as Consul does), so clients never spin.
//! - The deadline gets up to `wait / 16` of random jitter, as Consul adds, so that clients woken
//!   together do not return together forever (the wait itself is capped when it is parsed:
//!   `query::MAX_WAIT`).

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use storage::{KeyRange, Storage};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::query::BlockingParams;

/// The jitter added to a wait is at most `wait / JITTER_FRACTION` (Consul's value).
const JITTER_FRACTION: u32 = 16;

/// Runs `query` as a blocking query over the keys in `range`; returns its value and index.
///
/// `query` reads the store and returns its value with the index of what it read. With
/// `params.index == 0` it runs once. Otherwise it runs until its index exceeds `params.index`,
/// re-running after each watch event in `range`; when the wait (plus jitter) runs out or
/// `shutdown` fires, the last result is returned as is. If the watch reports that history was
/// compacted, the query is re-run once and that result returned. The index returned is at
/// least 1.
pub async fn block<T, E, F, Fut>(
    storage: &dyn Storage,
    range: KeyRange,
    params: &BlockingParams,
    shutdown: Option<&CancellationToken>,
    mut query: F,
) -> Result<(T, u64), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(T, u64), E>>,
    E: From<storage::Error>,
{
    if !params.is_blocking() {
        return run_query(&mut query).await;
    }
    let deadline = deadline(params);
    loop {
        let revision_before = storage.revision().await?;
        let (value, index) = run_query(&mut query).await?;
        if index > params.index {
            return Ok((value, index));
        }
        let mut watch = match storage.watch(range.clone(), revision_before).await {
            Ok(watch) => watch,
            Err(storage::Error::Compacted { .. }) => return run_query(&mut query).await,
            Err(err) => return Err(err.into()),
        };
        let woken = tokio::select! {
            biased;
            () = cancelled(shutdown) => return Ok((value, index)),
            () = tokio::time::sleep_until(deadline) => return Ok((value, index)),
            event = watch.next_event() => event,
        };
        match woken {
            // Something in the range changed: re-run the query (it may not move the index).
            Some(Ok(_event)) => continue,
            Some(Err(storage::Error::Compacted { .. })) => return run_query(&mut query).await,
            Some(Err(err)) => return Err(err.into()),
            // The store closed (the server is stopping): answer with what we have.
            None => return Ok((value, index)),
        }
    }
}

/// [`block`] for a read whose index is the last change to the range it watches
/// (`Storage::range_revision(range)`, read before `read` runs, so a write that lands between the
/// two makes the next poll return at once rather than be missed). `read` returns the value
/// only.
pub async fn block_range<T, E, F, Fut>(
    storage: &dyn Storage,
    range: KeyRange,
    params: &BlockingParams,
    shutdown: Option<&CancellationToken>,
    mut read: F,
) -> Result<(T, u64), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<storage::Error>,
{
    let watched = range.clone();
    block(storage, watched, params, shutdown, || {
        let index = storage.range_revision(range.clone());
        let value = read();
        async move {
            let index = index.await?;
            Ok((value.await?, index))
        }
    })
    .await
}

/// A blocking query over state published through a `watch` channel (the scheduler's
/// snapshots): `query` runs on the current value, then on each newer one, until its index
/// exceeds `params.index`, the wait (plus jitter) runs out, `shutdown` fires or the sender is
/// gone; the last result is returned, its index at least 1.
pub async fn block_watch<S, T, E>(
    mut updates: watch::Receiver<S>,
    params: &BlockingParams,
    shutdown: Option<&CancellationToken>,
    mut query: impl FnMut(&S) -> Result<(T, u64), E>,
) -> Result<(T, u64), E>
where
    S: Clone,
{
    let current = updates.borrow_and_update().clone();
    let (mut value, mut index) = query(&current)?;
    if !params.is_blocking() || index > params.index {
        return Ok((value, index.max(1)));
    }
    let deadline = deadline(params);
    loop {
        tokio::select! {
            biased;
            () = cancelled(shutdown) => break,
            () = tokio::time::sleep_until(deadline) => break,
            changed = updates.changed() => {
                if changed.is_err() {
                    break;
                }
            }
        }
        let current = updates.borrow_and_update().clone();
        (value, index) = query(&current)?;
        if index > params.index {
            break;
        }
    }
    Ok((value, index.max(1)))
}

/// When a blocking query that starts now gives up: the wait plus up to `wait / 16` of jitter.
pub fn deadline(params: &BlockingParams) -> Instant {
    Instant::now() + params.wait + jitter(params.wait)
}

async fn run_query<T, E, F, Fut>(query: &mut F) -> Result<(T, u64), E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(T, u64), E>>,
{
    let (value, index) = query().await?;
    Ok((value, index.max(1)))
}

async fn cancelled(shutdown: Option<&CancellationToken>) {
    match shutdown {
        Some(shutdown) => shutdown.cancelled().await,
        None => std::future::pending().await,
    }
}

/// A random extra wait of up to `wait / 16`.
fn jitter(wait: Duration) -> Duration {
    let max_nanos = u64::try_from((wait / JITTER_FRACTION).as_nanos()).unwrap_or(u64::MAX);
    if max_nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::rng().random_range(0..=max_nanos))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use storage::{MemStorage, StorageExt};

    use super::*;
    use crate::query::MAX_WAIT;

    const PREFIX: &str = "registry/kv/";

    fn params(index: u64, wait: Duration) -> BlockingParams {
        BlockingParams { index, wait }
    }

    /// The test query: the range's last-change revision, as value and index.
    async fn read_range(storage: &MemStorage) -> Result<(u64, u64), storage::Error> {
        let index = storage.range_revision(KeyRange::prefix(PREFIX)).await?;
        Ok((index, index))
    }

    async fn run_block(
        storage: &MemStorage,
        params: &BlockingParams,
        shutdown: Option<&CancellationToken>,
    ) -> (u64, Duration) {
        let started = std::time::Instant::now();
        let (value, index) = block(storage, KeyRange::prefix(PREFIX), params, shutdown, || {
            read_range(storage)
        })
        .await
        .unwrap();
        assert_eq!(value.max(1), index);
        (index, started.elapsed())
    }

    #[tokio::test]
    async fn block_range_reports_the_range_revision_and_wakes_on_a_write_in_it() {
        let storage = Arc::new(MemStorage::new());
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        storage.put(b"elsewhere/x", b"1").await.unwrap();
        let (value, index) = block_range(
            &*storage,
            KeyRange::prefix(PREFIX),
            &params(0, MAX_WAIT),
            None,
            || async { Ok::<_, storage::Error>("read") },
        )
        .await
        .unwrap();
        assert_eq!((value, index), ("read", current));
        let writer = {
            let storage = Arc::clone(&storage);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                storage.put(b"registry/kv/b", b"2").await.unwrap()
            })
        };
        let (_, index) = block_range(
            &*storage,
            KeyRange::prefix(PREFIX),
            &params(current, Duration::from_secs(10)),
            None,
            || async { Ok::<_, storage::Error>(()) },
        )
        .await
        .unwrap();
        assert_eq!(index, writer.await.unwrap());
    }

    #[tokio::test]
    async fn block_watch_returns_once_a_newer_value_moves_the_index() {
        let (sender, receiver) = watch::channel(3u64);
        let query = |value: &u64| Ok::<_, ()>((*value * 10, *value));
        let at_once = block_watch(receiver.clone(), &params(2, MAX_WAIT), None, query).await;
        assert_eq!(at_once, Ok((30, 3)));
        let publisher = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            sender.send_replace(4);
            sender
        });
        let started = std::time::Instant::now();
        let woken = block_watch(receiver, &params(3, Duration::from_secs(10)), None, query).await;
        assert_eq!(woken, Ok((40, 4)));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(publisher.await.unwrap());
    }

    #[tokio::test]
    async fn block_watch_times_out_and_ends_on_shutdown() {
        let (_sender, receiver) = watch::channel(0u64);
        let query = |value: &u64| Ok::<_, ()>(((), *value));
        let wait = Duration::from_millis(100);
        let started = std::time::Instant::now();
        let (_, index) = block_watch(receiver.clone(), &params(1, wait), None, query)
            .await
            .unwrap();
        assert_eq!(index, 1, "an index of 0 is reported as 1");
        assert!(started.elapsed() >= wait);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let started = std::time::Instant::now();
        block_watch(receiver, &params(1, MAX_WAIT), Some(&shutdown), query)
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn jitter_is_at_most_a_sixteenth_of_the_wait() {
        for _ in 0..100 {
            assert!(jitter(Duration::from_millis(160)) <= Duration::from_millis(10));
        }
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test]
    async fn block_index_zero_returns_immediately() {
        let storage = MemStorage::new();
        storage.put(b"registry/kv/a", b"1").await.unwrap();
        let (index, elapsed) = run_block(&storage, &params(0, MAX_WAIT), None).await;
        assert_eq!(index, 1);
        assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
    }

    #[tokio::test]
    async fn block_empty_range_reports_index_one() {
        let storage = MemStorage::new();
        let (index, _) = run_block(&storage, &params(0, MAX_WAIT), None).await;
        assert_eq!(index, 1);
    }

    #[tokio::test]
    async fn block_older_client_index_returns_immediately() {
        let storage = MemStorage::new();
        storage.put(b"registry/kv/a", b"1").await.unwrap();
        storage.put(b"registry/kv/a", b"2").await.unwrap();
        let (index, elapsed) = run_block(&storage, &params(1, MAX_WAIT), None).await;
        assert_eq!(index, 2);
        assert!(elapsed < Duration::from_millis(100), "{elapsed:?}");
    }

    #[tokio::test]
    async fn block_returns_promptly_after_write_in_range() {
        let storage = Arc::new(MemStorage::new());
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let writer = {
            let storage = Arc::clone(&storage);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                storage.put(b"registry/kv/b", b"2").await.unwrap()
            })
        };
        let (index, elapsed) =
            run_block(&storage, &params(current, Duration::from_secs(10)), None).await;
        let written = writer.await.unwrap();
        assert_eq!(index, written);
        assert!(elapsed >= Duration::from_millis(90), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(600), "{elapsed:?}");
    }

    #[tokio::test]
    async fn block_write_outside_range_does_not_wake() {
        let storage = Arc::new(MemStorage::new());
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let queries = AtomicUsize::new(0);
        let writer = {
            let storage = Arc::clone(&storage);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                storage.put(b"registry/session/x", b"2").await.unwrap();
            })
        };
        let wait = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let (_, index) = block(
            &*storage,
            KeyRange::prefix(PREFIX),
            &params(current, wait),
            None,
            || {
                queries.fetch_add(1, Ordering::SeqCst);
                read_range(&storage)
            },
        )
        .await
        .unwrap();
        writer.await.unwrap();
        assert_eq!(index, current);
        assert_eq!(
            queries.load(Ordering::SeqCst),
            1,
            "an outside write must not re-run the query"
        );
        assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn block_spurious_wakeup_keeps_waiting_until_deadline() {
        let storage = Arc::new(MemStorage::new());
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let queries = AtomicUsize::new(0);
        let writer = {
            let storage = Arc::clone(&storage);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                storage.put(b"registry/kv/other", b"2").await.unwrap();
            })
        };
        // The query reads only `a`; the watch covers the whole prefix, so `other` wakes it.
        let wait = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let (_, index) = block(
            &*storage,
            KeyRange::prefix(PREFIX),
            &params(current, wait),
            None,
            || {
                queries.fetch_add(1, Ordering::SeqCst);
                let storage = Arc::clone(&storage);
                async move {
                    let index = storage
                        .range_revision(KeyRange::key("registry/kv/a"))
                        .await?;
                    Ok::<_, storage::Error>(((), index))
                }
            },
        )
        .await
        .unwrap();
        writer.await.unwrap();
        assert_eq!(index, current);
        assert_eq!(queries.load(Ordering::SeqCst), 2);
        assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn block_times_out_after_wait_and_not_much_later() {
        let storage = MemStorage::new();
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let wait = Duration::from_millis(200);
        let (index, elapsed) = run_block(&storage, &params(current, wait), None).await;
        assert_eq!(index, current);
        assert!(elapsed >= wait, "{elapsed:?}");
        // At most wait/16 of jitter, plus scheduling slack.
        assert!(elapsed < Duration::from_millis(400), "{elapsed:?}");
    }

    #[tokio::test]
    async fn block_ends_early_on_shutdown() {
        let storage = MemStorage::new();
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let shutdown = CancellationToken::new();
        let canceller = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                shutdown.cancel();
            })
        };
        let (index, elapsed) = run_block(
            &storage,
            &params(current, Duration::from_secs(10)),
            Some(&shutdown),
        )
        .await;
        canceller.await.unwrap();
        assert_eq!(index, current);
        assert!(elapsed < Duration::from_millis(600), "{elapsed:?}");
    }

    #[tokio::test]
    async fn block_compacted_history_reruns_query_and_returns() {
        // Retention 1: a write made by the query itself compacts the revision the watch
        // starts from, so the watch reports `Compacted`.
        let storage = MemStorage::with_retention(1);
        let current = storage.put(b"registry/kv/a", b"1").await.unwrap();
        let queries = AtomicUsize::new(0);
        let started = std::time::Instant::now();
        let (_, index) = block(
            &storage,
            KeyRange::prefix(PREFIX),
            &params(current, Duration::from_secs(10)),
            None,
            || {
                let call = queries.fetch_add(1, Ordering::SeqCst);
                let storage = &storage;
                async move {
                    if call == 0 {
                        storage.put(b"elsewhere/x", b"1").await?;
                        storage.put(b"elsewhere/x", b"2").await?;
                    }
                    read_range(storage).await
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(index, current);
        assert_eq!(queries.load(Ordering::SeqCst), 2);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
}
