//! The evaluation broker (Nomad's `eval_broker.go`, in one process): pending evaluations wait
//! here until a worker takes them.
//!
//! Evaluations are handed out highest priority first, then oldest first; at most one
//! evaluation per job is out at a time (later ones wait until it is acked), so two workers never
//! plan the same job at once. Evaluations with a `WaitUntil` in the future wait in a delay queue.
//!
//! Invariants:
//! - The broker holds only what the state writer committed (it is fed after each commit and,
//!   at the start of each term of leadership, refilled from the stored pending evaluations),
//!   so it can be rebuilt from storage alone. Delayed evaluations are due by their stored
//!   `WaitUntil`, so their timers are rebuilt with them.
//! - An evaluation is queued at most once (by ID).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::structs::{Evaluation, JobKey};

type ReadyKey = (Reverse<i64>, u64, String);

#[derive(Debug, Default)]
struct Queues {
    ready: BTreeMap<ReadyKey, Arc<Evaluation>>,
    delayed: BTreeSet<(i64, String)>,
    delayed_evals: HashMap<String, Arc<Evaluation>>,
    queued_ids: HashSet<String>,
    in_flight: HashSet<JobKey>,
}

/// The evaluation broker; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct Broker {
    queues: Arc<Mutex<Queues>>,
    notify: Arc<Notify>,
}

impl Broker {
    pub(crate) fn new() -> Broker {
        Broker::default()
    }

    /// Replaces everything queued with `pending` (the stored pending evaluations, at the
    /// start of a term of leadership, when no worker runs).
    pub(crate) fn restart(&self, pending: Vec<Arc<Evaluation>>) {
        if let Ok(mut queues) = self.queues.lock() {
            *queues = Queues::default();
        }
        self.enqueue(pending);
    }

    /// Queues pending evaluations (already-queued IDs are ignored).
    pub(crate) fn enqueue(&self, evals: Vec<Arc<Evaluation>>) {
        let Ok(mut queues) = self.queues.lock() else {
            return;
        };
        for eval in evals {
            if !queues.queued_ids.insert(eval.id.clone()) {
                continue;
            }
            if eval.wait_until > crate::clock::now_nanos() {
                queues.delayed.insert((eval.wait_until, eval.id.clone()));
                queues.delayed_evals.insert(eval.id.clone(), eval);
            } else {
                let key = (Reverse(eval.priority), eval.create_index, eval.id.clone());
                queues.ready.insert(key, eval);
            }
        }
        drop(queues);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Waits for an evaluation whose job is not being planned; `None` on shutdown.
    pub(crate) async fn dequeue(&self, shutdown: &CancellationToken) -> Option<Arc<Evaluation>> {
        loop {
            let notified = self.notify.notified();
            let wait = match self.try_dequeue() {
                Ok(eval) => return Some(eval),
                Err(wait) => wait,
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return None,
                () = notified => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Takes a ready evaluation, or says how long to wait before the next delayed one is due.
    fn try_dequeue(&self) -> Result<Arc<Evaluation>, Duration> {
        let idle = Duration::from_secs(60);
        let Ok(mut queues) = self.queues.lock() else {
            return Err(idle);
        };
        let now = crate::clock::now_nanos();
        while let Some((wait_until, id)) = queues.delayed.first().cloned() {
            if wait_until > now {
                break;
            }
            queues.delayed.pop_first();
            if let Some(eval) = queues.delayed_evals.remove(&id) {
                let key = (Reverse(eval.priority), eval.create_index, eval.id.clone());
                queues.ready.insert(key, eval);
            }
        }
        let found = queues
            .ready
            .iter()
            .find(|(_, eval)| {
                !queues
                    .in_flight
                    .contains(&JobKey::new(&eval.namespace, &eval.job_id))
            })
            .map(|(key, _)| key.clone());
        if let Some(key) = found
            && let Some(eval) = queues.ready.remove(&key)
        {
            queues.queued_ids.remove(&eval.id);
            queues
                .in_flight
                .insert(JobKey::new(&eval.namespace, &eval.job_id));
            return Ok(eval);
        }
        let wait = queues.delayed.first().map_or(idle, |(wait_until, _)| {
            Duration::from_nanos(u64::try_from(wait_until - now).unwrap_or(0)).min(idle)
        });
        Err(wait)
    }

    /// The worker is done with `eval`: its job may be planned again.
    pub(crate) fn ack(&self, eval: &Evaluation) {
        if let Ok(mut queues) = self.queues.lock() {
            queues
                .in_flight
                .remove(&JobKey::new(&eval.namespace, &eval.job_id));
        }
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// How many evaluations wait (ready and delayed).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.queues
            .lock()
            .map_or(0, |queues| queues.ready.len() + queues.delayed.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(id: &str, job: &str, priority: i64, create_index: u64) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            id: id.to_owned(),
            namespace: "default".to_owned(),
            job_id: job.to_owned(),
            priority,
            create_index,
            status: "pending".to_owned(),
            ..Evaluation::default()
        })
    }

    #[tokio::test]
    async fn higher_priority_first_then_oldest_and_one_per_job_in_flight() {
        let broker = Broker::new();
        let shutdown = CancellationToken::new();
        broker.enqueue(vec![
            eval("a", "web", 50, 1),
            eval("b", "web", 50, 2),
            eval("c", "db", 90, 3),
            eval("a", "web", 50, 1),
        ]);
        assert_eq!(broker.len(), 3, "a duplicate ID is queued once");
        let first = broker.dequeue(&shutdown).await.map(|e| e.id.clone());
        assert_eq!(first.as_deref(), Some("c"));
        let second = broker.dequeue(&shutdown).await.expect("an eval");
        assert_eq!(second.id, "a");
        assert!(
            broker.try_dequeue().is_err(),
            "b waits while web's eval a is out"
        );
        broker.ack(&second);
        assert_eq!(
            broker.try_dequeue().map(|e| e.id.clone()).ok().as_deref(),
            Some("b")
        );
    }

    #[tokio::test]
    async fn delayed_evaluations_wait_until_due() {
        let broker = Broker::new();
        let mut delayed = (*eval("d", "batch", 50, 1)).clone();
        delayed.wait_until = crate::clock::now_nanos() + 150_000_000;
        broker.enqueue(vec![Arc::new(delayed)]);
        assert!(broker.try_dequeue().is_err());
        let shutdown = CancellationToken::new();
        let got = tokio::time::timeout(Duration::from_secs(2), broker.dequeue(&shutdown))
            .await
            .ok()
            .flatten();
        assert_eq!(got.map(|e| e.id.clone()).as_deref(), Some("d"));
    }
}
