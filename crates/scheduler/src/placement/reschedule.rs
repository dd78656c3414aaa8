//! Rescheduling of failed allocations (Nomad's `Allocation.NextRescheduleTime`, `NextDelay`,
//! `RescheduleTracker.RescheduleEligible` and the scheduler's `UpdateRescheduleTracker`).
//!
//! A failed allocation is eligible when its group's `ReschedulePolicy` allows another attempt
//! (unlimited, or fewer than `Attempts` attempts within `Interval` before the failure); it may
//! be replaced at `failure time + delay`, where the delay grows per `DelayFunction` (constant,
//! exponential, fibonacci) up to `MaxDelay`, and falls back to `Delay` once the allocation ran
//! longer than the capped delay since its last reschedule.
//!
//! Invariants: pure (times come from the allocation and the caller's `now`); all arithmetic
//! saturates, so absurd policies cannot overflow or panic.

use crate::structs::{
    ALLOC_CLIENT_FAILED, ALLOC_CLIENT_LOST, ALLOC_DESIRED_STOP, Allocation, Nanos, RescheduleEvent,
    ReschedulePolicy, RescheduleTracker,
};

/// Reschedule events carried over when the policy is unlimited (Nomad's
/// `maxPastRescheduleEvents`).
const MAX_PAST_RESCHEDULE_EVENTS: usize = 5;

/// Failed allocations whose reschedule time is at most this far ahead are replaced now
/// (Nomad's `rescheduleWindowSize`).
pub(super) const RESCHEDULE_WINDOW: Nanos = 1_000_000_000;

/// Follow-up evaluations for allocations eligible within this window of each other are
/// batched (Nomad's `batchedFailedAllocWindowSize`).
pub(super) const BATCHED_FAILED_ALLOC_WINDOW: Nanos = 5_000_000_000;

/// What to do with one failed allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Replace it in this run.
    Now,
    /// Replace it at this time (a follow-up evaluation).
    Later(i64),
    /// Leave it (not failed, or no attempts left).
    Never,
}

/// The time the allocation failed: the latest `FinishedAt` of its tasks, else its
/// `ModifyTime` (Nomad's `LastEventTime`).
pub(super) fn last_event_time(alloc: &Allocation) -> i64 {
    let finished = alloc
        .task_states
        .values()
        .filter_map(|state| state.finished_at.as_deref())
        .filter_map(|text| stdx::time::parse_rfc3339(text).ok())
        .filter(|nanos| *nanos > 0)
        .max();
    finished.unwrap_or(alloc.modify_time)
}

fn events(tracker: Option<&RescheduleTracker>) -> &[RescheduleEvent] {
    tracker.map_or(&[], |tracker| tracker.events.as_slice())
}

/// Attempts made within the policy's interval before `fail_time`.
fn attempts_in_interval(alloc: &Allocation, policy: &ReschedulePolicy, fail_time: i64) -> i64 {
    if policy.attempts <= 0 {
        return 0;
    }
    let recent = events(alloc.reschedule_tracker.as_ref())
        .iter()
        .filter(|event| fail_time.saturating_sub(event.reschedule_time) < policy.interval)
        .count();
    i64::try_from(recent).unwrap_or(i64::MAX)
}

/// The delay before the next attempt (Nomad's `NextDelay`).
pub(super) fn next_delay(alloc: &Allocation, policy: &ReschedulePolicy) -> Nanos {
    let events = events(alloc.reschedule_tracker.as_ref());
    let Some(last) = events.last() else {
        return policy.delay;
    };
    let mut delay = match policy.delay_function.as_str() {
        "exponential" => last.delay.saturating_mul(2),
        "fibonacci" => match events.len().checked_sub(2).and_then(|i| events.get(i)) {
            Some(before) => {
                if before.delay == policy.max_delay && last.delay == policy.delay {
                    // The ceiling was reset: a new series starts.
                    last.delay
                } else {
                    last.delay.saturating_add(before.delay)
                }
            }
            None => policy.delay,
        },
        _ => return policy.delay,
    };
    if policy.max_delay > 0 && delay > policy.max_delay {
        delay = policy.max_delay;
        let since_last = last_event_time(alloc).saturating_sub(last.reschedule_time);
        if since_last > delay {
            delay = policy.delay;
        }
    }
    delay
}

/// Whether and when a (failed) allocation may be replaced (Nomad's `NextRescheduleTime`
/// combined with the reconciler's now/later split).
pub(super) fn decide(
    alloc: &Allocation,
    policy: Option<&ReschedulePolicy>,
    eval_id: &str,
    now: i64,
) -> Decision {
    let Some(policy) = policy else {
        return Decision::Never;
    };
    if policy.attempts <= 0 && !policy.unlimited {
        return Decision::Never;
    }
    if alloc.desired_status == ALLOC_DESIRED_STOP
        || (alloc.client_status != ALLOC_CLIENT_FAILED && alloc.client_status != ALLOC_CLIENT_LOST)
    {
        return Decision::Never;
    }
    let fail_time = last_event_time(alloc);
    if fail_time == 0 {
        return Decision::Never;
    }
    let delay = next_delay(alloc, policy);
    let at = fail_time.saturating_add(delay);
    let has_events = !events(alloc.reschedule_tracker.as_ref()).is_empty();
    let eligible = if policy.attempts > 0 && has_events {
        attempts_in_interval(alloc, policy, fail_time) < policy.attempts && delay < policy.interval
    } else {
        policy.unlimited || policy.attempts > 0
    };
    if !eligible {
        return Decision::Never;
    }
    if alloc.followup_eval_id == eval_id || at.saturating_sub(now) <= RESCHEDULE_WINDOW {
        return Decision::Now;
    }
    if alloc.followup_eval_id.is_empty() {
        Decision::Later(at)
    } else {
        // A follow-up evaluation is already waiting for it.
        Decision::Never
    }
}

/// The tracker of a replacement: the previous attempts worth keeping plus this one
/// (Nomad's `UpdateRescheduleTracker`).
pub(super) fn next_tracker(
    prev: &Allocation,
    policy: Option<&ReschedulePolicy>,
    now: i64,
) -> RescheduleTracker {
    let past = events(prev.reschedule_tracker.as_ref());
    let mut events: Vec<RescheduleEvent> = match policy {
        Some(policy) if policy.attempts > 0 => past
            .iter()
            .filter(|event| {
                policy.interval > 0 && now.saturating_sub(event.reschedule_time) <= policy.interval
            })
            .cloned()
            .collect(),
        _ => past[past.len().saturating_sub(MAX_PAST_RESCHEDULE_EVENTS)..].to_vec(),
    };
    let delay = policy.map_or(0, |policy| next_delay(prev, policy));
    events.push(RescheduleEvent {
        reschedule_time: now,
        prev_alloc_id: prev.id.clone(),
        prev_node_id: prev.node_id.clone(),
        delay,
    });
    RescheduleTracker { events }
}

/// Nodes a replacement of `prev` should avoid (Nomad's reschedule penalty nodes): the node it
/// failed on and those of earlier attempts.
pub(super) fn penalty_nodes(prev: &Allocation) -> Vec<&str> {
    let mut nodes = Vec::new();
    if prev.client_status == ALLOC_CLIENT_FAILED {
        nodes.push(prev.node_id.as_str());
    }
    for event in events(prev.reschedule_tracker.as_ref()) {
        if !nodes.contains(&event.prev_node_id.as_str()) {
            nodes.push(event.prev_node_id.as_str());
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{SECOND, TaskState};

    fn policy(attempts: i64, interval: Nanos, delay: Nanos, function: &str) -> ReschedulePolicy {
        ReschedulePolicy {
            attempts,
            interval,
            delay,
            delay_function: function.to_owned(),
            max_delay: 3600 * SECOND,
            unlimited: attempts == 0,
        }
    }

    fn failed_at(time: i64, delays: &[Nanos]) -> Allocation {
        let events = delays
            .iter()
            .map(|delay| RescheduleEvent {
                reschedule_time: time - 10 * SECOND,
                prev_alloc_id: "x".to_owned(),
                prev_node_id: "n".to_owned(),
                delay: *delay,
            })
            .collect::<Vec<_>>();
        Allocation {
            id: "a".to_owned(),
            client_status: ALLOC_CLIENT_FAILED.to_owned(),
            desired_status: "run".to_owned(),
            modify_time: time,
            reschedule_tracker: (!events.is_empty()).then_some(RescheduleTracker { events }),
            ..Allocation::default()
        }
    }

    #[test]
    fn rfc3339_parses_go_times() {
        let parse_rfc3339 = |text: &str| stdx::time::parse_rfc3339(text).ok();
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.5Z"), Some(1_500_000_000));
        assert_eq!(parse_rfc3339("1970-01-01T02:00:00+02:00"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T00:00:00Z"),
            Some(1_709_164_800 * SECOND)
        );
        // Go's zero time is outside the nanosecond range: no failure time.
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), None);
        for bad in [
            "",
            "garbage",
            "2024-02-30T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn failure_time_is_the_latest_task_finish() {
        let mut alloc = failed_at(5, &[]);
        assert_eq!(last_event_time(&alloc), 5);
        alloc.task_states.insert(
            "a".to_owned(),
            TaskState {
                finished_at: Some("1970-01-01T00:00:10Z".to_owned()),
                ..TaskState::default()
            },
        );
        alloc.task_states.insert(
            "b".to_owned(),
            TaskState {
                finished_at: Some("1970-01-01T00:00:20Z".to_owned()),
                ..TaskState::default()
            },
        );
        assert_eq!(last_event_time(&alloc), 20 * SECOND);
    }

    #[test]
    fn delays_grow_per_delay_function_up_to_max_delay() {
        let now = 1_000_000 * SECOND;
        let exponential = policy(0, 0, 30 * SECOND, "exponential");
        assert_eq!(next_delay(&failed_at(now, &[]), &exponential), 30 * SECOND);
        assert_eq!(
            next_delay(&failed_at(now, &[30 * SECOND]), &exponential),
            60 * SECOND
        );
        let capped = failed_at(now, &[3000 * SECOND]);
        // Capped at MaxDelay; the alloc ran 10 s since its last reschedule, less than the cap.
        assert_eq!(next_delay(&capped, &exponential), 3600 * SECOND);
        let fibonacci = policy(0, 0, 5 * SECOND, "fibonacci");
        assert_eq!(
            next_delay(&failed_at(now, &[5 * SECOND]), &fibonacci),
            5 * SECOND
        );
        assert_eq!(
            next_delay(&failed_at(now, &[5 * SECOND, 5 * SECOND]), &fibonacci),
            10 * SECOND
        );
        assert_eq!(
            next_delay(&failed_at(now, &[5 * SECOND, 10 * SECOND]), &fibonacci),
            15 * SECOND
        );
        let constant = policy(1, 86_400 * SECOND, 5 * SECOND, "constant");
        assert_eq!(
            next_delay(&failed_at(now, &[5 * SECOND]), &constant),
            5 * SECOND
        );
    }

    #[test]
    fn decisions_follow_attempts_interval_and_delay() {
        let now = 1_000_000 * SECOND;
        let batch = policy(1, 86_400 * SECOND, 5 * SECOND, "constant");
        // Failed just now: 5 s delay → later.
        assert_eq!(
            decide(&failed_at(now, &[]), Some(&batch), "e", now),
            Decision::Later(now + 5 * SECOND)
        );
        // Failed a minute ago → now.
        assert_eq!(
            decide(&failed_at(now - 60 * SECOND, &[]), Some(&batch), "e", now),
            Decision::Now
        );
        // One attempt already used within the interval → never.
        assert_eq!(
            decide(
                &failed_at(now - 60 * SECOND, &[5 * SECOND]),
                Some(&batch),
                "e",
                now
            ),
            Decision::Never
        );
        // Disabled policy, no policy, running alloc → never.
        let disabled = ReschedulePolicy::default();
        assert_eq!(
            decide(&failed_at(now, &[]), Some(&disabled), "e", now),
            Decision::Never
        );
        assert_eq!(
            decide(&failed_at(now, &[]), None, "e", now),
            Decision::Never
        );
        let mut running = failed_at(now, &[]);
        running.client_status = "running".to_owned();
        assert_eq!(decide(&running, Some(&batch), "e", now), Decision::Never);
        // The follow-up evaluation itself replaces it even slightly early.
        let mut waiting = failed_at(now, &[]);
        waiting.followup_eval_id = "e".to_owned();
        assert_eq!(decide(&waiting, Some(&batch), "e", now), Decision::Now);
        assert_eq!(
            decide(&waiting, Some(&batch), "other", now),
            Decision::Never
        );
    }

    #[test]
    fn trackers_keep_recent_events_and_add_this_attempt() {
        let now = 1_000_000 * SECOND;
        let prev = failed_at(now, &[30 * SECOND]);
        let tracker = next_tracker(&prev, Some(&policy(0, 0, 30 * SECOND, "exponential")), now);
        assert_eq!(tracker.events.len(), 2);
        let last = &tracker.events[1];
        assert_eq!((last.reschedule_time, last.delay), (now, 60 * SECOND));
        assert_eq!(last.prev_alloc_id, "a");
        let limited = next_tracker(&prev, Some(&policy(3, SECOND, 5 * SECOND, "constant")), now);
        assert_eq!(
            limited.events.len(),
            1,
            "events outside the interval are dropped"
        );
    }
}
