//! Session timers on several servers: every server keeps the TTL timer of every session,
//! whichever server created or renewed it, by following the store's watch.
//!
//! Where it sits: a local loop (every server) that `registry::start_tasks` registers only when
//! leadership is elected (storage on etcd); with the embedded store one server sees every
//! create and renew itself. On elected servers every renew is also written through
//! (`SessionTimers::set_write_through`), so a renew on a follower reaches the leader, whose
//! reaper (`ttl_reaper.rs`) is the only one that invalidates. This loop:
//! - a session record put with a TTL and no timer here → arms it at the record's deadline;
//! - a session record deleted → disarms it;
//! - a deadline record put (a renew written through elsewhere) → moves the timer forward.
//!
//! Invariants: a deadline only moves forward here (never makes a session expire early); when a
//! watch fails (compaction, an unreachable store) every timer is rebuilt from the store
//! (`session_timers::load`) and following starts again from the revision read before.

use std::time::Duration;

use futures::StreamExt;
use storage::{Event, EventKind};
use tokio_util::sync::CancellationToken;

use crate::State;
use crate::domain::session_timers;
use crate::store::decode;
use crate::store::sessions::{self, DeadlineRecord, SessionRecord};

/// The loop: follows session records and deadlines until `shutdown`.
pub(crate) async fn run(state: State, shutdown: CancellationToken) {
    state.session_timers().set_write_through();
    let mut reload = false;
    loop {
        let ended = tokio::select! {
            () = shutdown.cancelled() => return,
            ended = follow(&state, reload) => ended,
        };
        tracing::warn!(error = %ended, "following session timers: reloading and starting over");
        reload = true;
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

async fn follow(state: &State, reload: bool) -> String {
    let storage = state.storage();
    let from = match storage.revision().await {
        Ok(revision) => revision,
        Err(err) => return err.to_string(),
    };
    if reload && let Err(err) = session_timers::load(state).await {
        return err.to_string();
    }
    let records = match storage.watch(sessions::sessions_range(), from).await {
        Ok(watch) => watch,
        Err(err) => return err.to_string(),
    };
    let deadlines = match storage.watch(sessions::deadlines_range(), from).await {
        Ok(watch) => watch,
        Err(err) => return err.to_string(),
    };
    let mut events = futures::stream::select(records, deadlines);
    loop {
        match events.next().await {
            None => return "the watch ended".to_owned(),
            Some(Err(err)) => return err.to_string(),
            Some(Ok(event)) => apply(state, &event),
        }
    }
}

fn apply(state: &State, event: &Event) {
    let timers = state.session_timers();
    if let Some(id) = sessions::parse_deadline_key(&event.key) {
        if event.kind == EventKind::Put
            && let Ok(record) = decode::<DeadlineRecord>(&event.key, &event.value)
        {
            timers.extend(id, record.expires_at_ms);
        }
        return;
    }
    let Some(id) = event
        .key
        .strip_prefix(sessions::sessions_prefix().as_bytes())
        .and_then(|id| std::str::from_utf8(id).ok())
    else {
        return;
    };
    match event.kind {
        EventKind::Delete => timers.disarm(id),
        EventKind::Put => {
            let Ok(record) = decode::<SessionRecord>(&event.key, &event.value) else {
                return;
            };
            if record.ttl_ms > 0
                && timers.deadline(id).is_none()
                && let Some(deadline_ms) = record.expires_at_ms
            {
                timers.arm(id, record.ttl_ms, deadline_ms);
            }
        }
    }
}
