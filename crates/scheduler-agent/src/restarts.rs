//! The restart policy (Nomad's `client/allocrunner/taskrunner/restarts`): after each run of a
//! task, decide whether it restarts, after what delay and why.
//!
//! Pure: the caller passes the time (`Instant`) and the jitter sample, so every decision is
//! reproducible in tests. Semantics are upstream's:
//! - a kill is never restarted; a user-requested restart restarts at once, uncounted;
//! - `attempts = 0` → "Policy allows no restarts" (a successful exit of a batch task is still a
//!   clean termination);
//! - the attempt counter resets once `interval` has passed since the window started;
//! - an unrecoverable start error → "Error was unrecoverable";
//! - exit 0 of a batch/sysbatch task → terminated, not restarted; a service/system task is
//!   restarted even after exit 0;
//! - more failures than `attempts` in the window → mode `fail`: not restarting (the task
//!   fails); mode `delay`: wait until the window ends;
//! - otherwise restart after `delay` plus up to 25% jitter.

use std::time::{Duration, Instant};

use scheduler_structs::{
    JOB_TYPE_BATCH, JOB_TYPE_SYSBATCH, RESTART_MODE_DELAY, RESTART_MODE_FAIL, RestartPolicy, SECOND,
};

use crate::time::duration_of;

pub(crate) const REASON_NO_RESTARTS_ALLOWED: &str = "Policy allows no restarts";
pub(crate) const REASON_UNRECOVERABLE_ERROR: &str = "Error was unrecoverable";
pub(crate) const REASON_WITHIN_POLICY: &str = "Restart within policy";
pub(crate) const REASON_DELAY: &str = "Exceeded allowed attempts, applying a delay";
pub(crate) const REASON_SUCCESSFUL_EXIT: &str =
    "Restart unnecessary as task terminated successfully";

/// The fraction of the delay added at most as jitter.
const JITTER: f64 = 0.25;

/// How a run of the task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunOutcome {
    /// The process exited on its own; `successful` is exit code 0 without a signal.
    Exited { successful: bool },
    /// The task could not be started.
    StartFailed { recoverable: bool },
    /// The task was killed (alloc stopped, sibling failed, ...).
    Killed,
    /// A user asked for a restart (not counted against the policy).
    UserRestart,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Restart {
        delay: Duration,
        reason: String,
    },
    /// Do not restart; the task fails.
    NotRestarting {
        reason: String,
    },
    /// Done, successfully; no event beyond `Terminated`.
    Terminated {
        reason: String,
    },
    /// Killed on purpose; emit `Killed`.
    Killed,
}

/// Upstream's default policy for a job type (service/system vs batch/sysbatch).
pub(crate) fn default_policy(job_type: &str) -> RestartPolicy {
    if job_type == JOB_TYPE_BATCH || job_type == JOB_TYPE_SYSBATCH {
        RestartPolicy {
            attempts: 3,
            interval: 24 * 3600 * SECOND,
            delay: 15 * SECOND,
            mode: RESTART_MODE_FAIL.to_owned(),
            render_templates: false,
        }
    } else {
        RestartPolicy {
            attempts: 2,
            interval: 30 * 60 * SECOND,
            delay: 15 * SECOND,
            mode: RESTART_MODE_FAIL.to_owned(),
            render_templates: false,
        }
    }
}

/// Counts restarts of one task within the policy's interval.
#[derive(Debug, Clone)]
pub(crate) struct RestartTracker {
    attempts: i64,
    interval: Duration,
    delay: Duration,
    delay_mode: bool,
    restart_on_success: bool,
    count: i64,
    window_start: Instant,
}

impl RestartTracker {
    pub(crate) fn new(policy: &RestartPolicy, job_type: &str, now: Instant) -> RestartTracker {
        RestartTracker {
            attempts: policy.attempts.max(0),
            interval: duration_of(policy.interval),
            delay: duration_of(policy.delay),
            delay_mode: policy.mode == RESTART_MODE_DELAY,
            restart_on_success: job_type != JOB_TYPE_BATCH && job_type != JOB_TYPE_SYSBATCH,
            count: 0,
            window_start: now,
        }
    }

    /// Restarts counted in the current window.
    #[cfg(test)]
    pub(crate) fn count(&self) -> i64 {
        self.count
    }

    /// Decides after a run ended with `outcome` at `now`; `jitter` is a sample in [0, 1).
    pub(crate) fn decide(&mut self, outcome: RunOutcome, now: Instant, jitter: f64) -> Decision {
        match outcome {
            RunOutcome::Killed => return Decision::Killed,
            RunOutcome::UserRestart => {
                return Decision::Restart {
                    delay: Duration::ZERO,
                    reason: String::new(),
                };
            }
            _ => {}
        }
        let successful_exit = outcome == RunOutcome::Exited { successful: true };

        if self.attempts == 0 {
            let reason = REASON_NO_RESTARTS_ALLOWED.to_owned();
            if !self.restart_on_success && successful_exit {
                return Decision::Terminated { reason };
            }
            return Decision::NotRestarting { reason };
        }

        if now > self.window_start + self.interval {
            self.count = 0;
            self.window_start = now;
        }
        self.count += 1;

        match outcome {
            RunOutcome::StartFailed { recoverable: false } => {
                return Decision::NotRestarting {
                    reason: REASON_UNRECOVERABLE_ERROR.to_owned(),
                };
            }
            RunOutcome::Exited { successful: true } if !self.restart_on_success => {
                return Decision::Terminated {
                    reason: REASON_SUCCESSFUL_EXIT.to_owned(),
                };
            }
            _ => {}
        }

        if self.count > self.attempts {
            if !self.delay_mode {
                return Decision::NotRestarting {
                    reason: format!(
                        "Exceeded allowed attempts {} in interval {} and mode is \"{RESTART_MODE_FAIL}\"",
                        self.attempts,
                        stdx::duration::format_go_std(self.interval)
                    ),
                };
            }
            let window_end = self.window_start + self.interval;
            return Decision::Restart {
                delay: window_end.saturating_duration_since(now),
                reason: REASON_DELAY.to_owned(),
            };
        }

        Decision::Restart {
            delay: self.jittered_delay(jitter),
            reason: REASON_WITHIN_POLICY.to_owned(),
        }
    }

    /// `delay + floor(jitter * delay) * 25%` (upstream: `d + rand.Int63n(d) * 0.25`).
    fn jittered_delay(&self, jitter: f64) -> Duration {
        let base = self.delay.as_nanos().max(1) as f64;
        let sample = (jitter.clamp(0.0, 1.0) * base)
            .floor()
            .min(base - 1.0)
            .max(0.0);
        Duration::from_nanos((base + sample * JITTER) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = SECOND;

    fn policy(attempts: i64, interval_s: i64, delay_ms: i64, mode: &str) -> RestartPolicy {
        RestartPolicy {
            attempts,
            interval: interval_s * S,
            delay: delay_ms * 1_000_000,
            mode: mode.to_owned(),
            render_templates: false,
        }
    }

    fn failed() -> RunOutcome {
        RunOutcome::Exited { successful: false }
    }

    #[test]
    fn restarts_within_policy_then_fails_in_fail_mode() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(2, 60, 1000, "fail"), "service", t0);
        for i in 1..=2 {
            let decision = tracker.decide(failed(), t0 + Duration::from_secs(i), 0.0);
            assert_eq!(
                decision,
                Decision::Restart {
                    delay: Duration::from_secs(1),
                    reason: REASON_WITHIN_POLICY.to_owned()
                }
            );
        }
        assert_eq!(
            tracker.decide(failed(), t0 + Duration::from_secs(3), 0.0),
            Decision::NotRestarting {
                reason: "Exceeded allowed attempts 2 in interval 1m0s and mode is \"fail\""
                    .to_owned()
            }
        );
        assert_eq!(tracker.count(), 3);
    }

    #[test]
    fn jitter_adds_at_most_a_quarter_of_the_delay() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(10, 60, 1000, "fail"), "service", t0);
        let Decision::Restart { delay, .. } = tracker.decide(failed(), t0, 0.5) else {
            panic!("expected a restart");
        };
        assert_eq!(delay, Duration::from_millis(1125));
        let Decision::Restart { delay, .. } = tracker.decide(failed(), t0, 0.999_999_999) else {
            panic!("expected a restart");
        };
        assert!(delay < Duration::from_millis(1250) && delay > Duration::from_millis(1249));
    }

    #[test]
    fn the_window_resets_after_the_interval() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(1, 10, 100, "fail"), "service", t0);
        assert!(matches!(
            tracker.decide(failed(), t0 + Duration::from_secs(1), 0.0),
            Decision::Restart { .. }
        ));
        // 11 s after the window started: a new window, so this failure is the first again.
        assert!(matches!(
            tracker.decide(failed(), t0 + Duration::from_secs(11), 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(tracker.count(), 1);
        assert!(matches!(
            tracker.decide(failed(), t0 + Duration::from_secs(12), 0.0),
            Decision::NotRestarting { .. }
        ));
    }

    #[test]
    fn delay_mode_waits_for_the_window_end() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(1, 60, 100, "delay"), "service", t0);
        assert!(matches!(
            tracker.decide(failed(), t0, 0.0),
            Decision::Restart { .. }
        ));
        assert_eq!(
            tracker.decide(failed(), t0 + Duration::from_secs(20), 0.0),
            Decision::Restart {
                delay: Duration::from_secs(40),
                reason: REASON_DELAY.to_owned()
            }
        );
    }

    #[test]
    fn batch_success_terminates_service_success_restarts() {
        let t0 = Instant::now();
        let ok = RunOutcome::Exited { successful: true };
        let mut batch = RestartTracker::new(&policy(3, 60, 100, "fail"), "batch", t0);
        assert_eq!(
            batch.decide(ok, t0, 0.0),
            Decision::Terminated {
                reason: REASON_SUCCESSFUL_EXIT.to_owned()
            }
        );
        let mut service = RestartTracker::new(&policy(3, 60, 100, "fail"), "service", t0);
        assert!(matches!(
            service.decide(ok, t0, 0.0),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn zero_attempts_allows_no_restarts() {
        let t0 = Instant::now();
        let mut service = RestartTracker::new(&policy(0, 60, 100, "fail"), "service", t0);
        assert_eq!(
            service.decide(RunOutcome::Exited { successful: true }, t0, 0.0),
            Decision::NotRestarting {
                reason: REASON_NO_RESTARTS_ALLOWED.to_owned()
            }
        );
        let mut batch = RestartTracker::new(&policy(0, 60, 100, "fail"), "batch", t0);
        assert_eq!(
            batch.decide(RunOutcome::Exited { successful: true }, t0, 0.0),
            Decision::Terminated {
                reason: REASON_NO_RESTARTS_ALLOWED.to_owned()
            }
        );
        assert_eq!(
            batch.decide(failed(), t0, 0.0),
            Decision::NotRestarting {
                reason: REASON_NO_RESTARTS_ALLOWED.to_owned()
            }
        );
    }

    #[test]
    fn unrecoverable_start_errors_do_not_restart() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(3, 60, 100, "fail"), "service", t0);
        assert_eq!(
            tracker.decide(RunOutcome::StartFailed { recoverable: false }, t0, 0.0),
            Decision::NotRestarting {
                reason: REASON_UNRECOVERABLE_ERROR.to_owned()
            }
        );
        assert!(matches!(
            tracker.decide(RunOutcome::StartFailed { recoverable: true }, t0, 0.0),
            Decision::Restart { .. }
        ));
    }

    #[test]
    fn kills_and_user_restarts_bypass_counting() {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new(&policy(0, 60, 100, "fail"), "service", t0);
        assert_eq!(
            tracker.decide(RunOutcome::Killed, t0, 0.0),
            Decision::Killed
        );
        assert_eq!(
            tracker.decide(RunOutcome::UserRestart, t0, 0.0),
            Decision::Restart {
                delay: Duration::ZERO,
                reason: String::new()
            }
        );
        assert_eq!(tracker.count(), 0);
    }

    #[test]
    fn defaults_follow_the_job_type() {
        assert_eq!(default_policy("service").attempts, 2);
        assert_eq!(default_policy("service").interval, 1800 * S);
        assert_eq!(default_policy("batch").attempts, 3);
        assert_eq!(default_policy("batch").interval, 86_400 * S);
        assert_eq!(default_policy("system").delay, 15 * S);
    }
}
