//! The run state machine, as pure functions over plain data: which status a new run starts
//! in, what the `apply`, `discard`, `cancel` and `force-cancel` actions do, which pending run
//! starts when the workspace frees up, and the `actions` flags clients read.
//!
//! Where it sits: `run_queue.rs` (a new run, the next run to start) and `runs.rs` (the
//! actions) call these and persist the result through `store/runs.rs`; the `runs` view reads
//! [`actions`]; nothing here does IO.
//!
//! What happens without an executor (cairn does not run Terraform yet; docs/compat.md):
//! - A run starts `plan_queued` when it may start now (a speculative run always may; any other
//!   run when the workspace is unlocked and no other run holds it), else `pending`.
//! - A `plan_queued` run waits there for an executor; it never reaches `planning`, so it never
//!   becomes confirmable. It holds the workspace until it is canceled.
//! - `discard` ends a `pending` run (or one waiting for confirmation) as `discarded`;
//!   `cancel` ends a queued or running run as `canceled` at once (there is no process to
//!   interrupt); `force-cancel` is refused because a cancel always completes; `apply` is
//!   refused unless the run waits for confirmation, which needs a plan.
//! - When the run holding a workspace ends, or the workspace is unlocked, the oldest `pending`
//!   run of that workspace becomes `plan_queued` ([`next_to_start`]).
//!
//! Invariants: a final status never changes; at most one non-speculative run per workspace
//! holds it (is past `pending` and not final), which [`next_to_start`] preserves.

use serde::{Deserialize, Serialize};

/// Every run status cairn stores; a subset of TFE's (all of them parse in pytfe and go-tfe).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RunStatus {
    Pending,
    PlanQueued,
    Planning,
    Planned,
    CostEstimated,
    PolicyChecked,
    Confirmed,
    ApplyQueued,
    Applying,
    Applied,
    Discarded,
    Errored,
    Canceled,
    ForceCanceled,
    PlannedAndFinished,
}

impl RunStatus {
    /// Every status, in the order of the run's life (metrics report one sample each).
    pub(crate) const ALL: [RunStatus; 15] = [
        RunStatus::Pending,
        RunStatus::PlanQueued,
        RunStatus::Planning,
        RunStatus::Planned,
        RunStatus::CostEstimated,
        RunStatus::PolicyChecked,
        RunStatus::Confirmed,
        RunStatus::ApplyQueued,
        RunStatus::Applying,
        RunStatus::Applied,
        RunStatus::Discarded,
        RunStatus::Errored,
        RunStatus::Canceled,
        RunStatus::ForceCanceled,
        RunStatus::PlannedAndFinished,
    ];

    /// The wire spelling (`plan_queued`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::PlanQueued => "plan_queued",
            RunStatus::Planning => "planning",
            RunStatus::Planned => "planned",
            RunStatus::CostEstimated => "cost_estimated",
            RunStatus::PolicyChecked => "policy_checked",
            RunStatus::Confirmed => "confirmed",
            RunStatus::ApplyQueued => "apply_queued",
            RunStatus::Applying => "applying",
            RunStatus::Applied => "applied",
            RunStatus::Discarded => "discarded",
            RunStatus::Errored => "errored",
            RunStatus::Canceled => "canceled",
            RunStatus::ForceCanceled => "force_canceled",
            RunStatus::PlannedAndFinished => "planned_and_finished",
        }
    }

    /// Parses the wire spelling; `None` for anything else.
    #[cfg(test)]
    pub(crate) fn parse(text: &str) -> Option<RunStatus> {
        RunStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == text)
    }

    /// The `status-timestamps` key set when a run enters this status (`plan-queued-at`);
    /// `None` for `pending`, whose time is `created-at`.
    pub(crate) fn timestamp_key(self) -> Option<String> {
        match self {
            RunStatus::Pending => None,
            other => Some(format!("{}-at", other.as_str().replace('_', "-"))),
        }
    }

    /// The run is over: nothing changes it any more.
    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            RunStatus::Applied
                | RunStatus::Discarded
                | RunStatus::Errored
                | RunStatus::Canceled
                | RunStatus::ForceCanceled
                | RunStatus::PlannedAndFinished
        )
    }

    /// The plan finished and waits for someone to confirm or discard it.
    fn awaits_confirmation(self) -> bool {
        matches!(
            self,
            RunStatus::Planned | RunStatus::CostEstimated | RunStatus::PolicyChecked
        )
    }

    /// Queued for or running a plan or an apply.
    fn is_running(self) -> bool {
        matches!(
            self,
            RunStatus::PlanQueued
                | RunStatus::Planning
                | RunStatus::Confirmed
                | RunStatus::ApplyQueued
                | RunStatus::Applying
        )
    }
}

/// A run action (`POST /runs/:id/actions/<action>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunAction {
    Apply,
    Discard,
    Cancel,
    ForceCancel,
}

/// Why an action was refused: answered 409 with title `transition not allowed` and this
/// detail (TFE's wording).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refused {
    pub(crate) detail: &'static str,
}

/// The status `action` moves a run in `status` to, or why it may not.
pub(crate) fn transition(status: RunStatus, action: RunAction) -> Result<RunStatus, Refused> {
    match action {
        RunAction::Apply if status.awaits_confirmation() => Ok(RunStatus::Confirmed),
        RunAction::Apply => Err(Refused {
            detail: "Run was not paused for confirmation or priority; apply not allowed.",
        }),
        RunAction::Discard if status == RunStatus::Pending || status.awaits_confirmation() => {
            Ok(RunStatus::Discarded)
        }
        RunAction::Discard => Err(Refused {
            detail: "Run was not paused for confirmation or priority; discard not allowed.",
        }),
        RunAction::Cancel if status.is_running() => Ok(RunStatus::Canceled),
        RunAction::Cancel => Err(Refused {
            detail: "Run was not planning or applying; cancel not allowed.",
        }),
        // A cancel completes at once here, so there is never a stuck cancel to force.
        RunAction::ForceCancel => Err(Refused {
            detail: "Run was not planning or applying, has not been canceled non-forcefully, \
                     or the cool-off period has not yet passed.",
        }),
    }
}

/// The status a new run starts in.
pub(crate) fn initial_status(
    speculative: bool,
    workspace_locked: bool,
    workspace_held: bool,
) -> RunStatus {
    if speculative || !(workspace_locked || workspace_held) {
        RunStatus::PlanQueued
    } else {
        RunStatus::Pending
    }
}

/// A run as the queue sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuedRun {
    pub(crate) status: RunStatus,
    pub(crate) speculative: bool,
}

impl QueuedRun {
    /// Whether this run holds its workspace (blocks other non-speculative runs).
    pub(crate) fn holds_workspace(self) -> bool {
        !self.speculative && self.status != RunStatus::Pending && !self.status.is_final()
    }
}

/// Given a workspace's runs in creation order, the index of the run that should now leave
/// `pending` for `plan_queued`, if any.
pub(crate) fn next_to_start(runs: &[QueuedRun], workspace_locked: bool) -> Option<usize> {
    if workspace_locked || runs.iter().any(|run| run.holds_workspace()) {
        return None;
    }
    runs.iter()
        .position(|run| run.status == RunStatus::Pending && !run.speculative)
}

/// The `actions` attribute of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct RunActions {
    pub(crate) is_cancelable: bool,
    pub(crate) is_confirmable: bool,
    pub(crate) is_discardable: bool,
    pub(crate) is_force_cancelable: bool,
}

pub(crate) fn actions(status: RunStatus) -> RunActions {
    let allowed = |action| transition(status, action).is_ok();
    RunActions {
        is_cancelable: allowed(RunAction::Cancel),
        is_confirmable: allowed(RunAction::Apply),
        is_discardable: allowed(RunAction::Discard),
        is_force_cancelable: allowed(RunAction::ForceCancel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RunAction::{Apply, Cancel, Discard, ForceCancel};
    use RunStatus::*;

    #[test]
    fn status_spellings_round_trip_and_match_serde() {
        for status in RunStatus::ALL {
            assert_eq!(RunStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert_eq!(RunStatus::parse("bogus"), None);
        assert_eq!(
            PlanQueued.timestamp_key().as_deref(),
            Some("plan-queued-at")
        );
        assert_eq!(Pending.timestamp_key(), None);
    }

    #[test]
    fn final_statuses_accept_no_action() {
        for status in RunStatus::ALL.into_iter().filter(|s| s.is_final()) {
            for action in [Apply, Discard, Cancel, ForceCancel] {
                assert!(transition(status, action).is_err(), "{status:?} {action:?}");
            }
        }
    }

    #[test]
    fn transitions_table() {
        let cases = [
            (Pending, Discard, Ok(Discarded)),
            (Pending, Apply, Err("apply not allowed")),
            (Pending, Cancel, Err("cancel not allowed")),
            (PlanQueued, Cancel, Ok(Canceled)),
            (PlanQueued, Discard, Err("discard not allowed")),
            (PlanQueued, Apply, Err("apply not allowed")),
            (Planning, Cancel, Ok(Canceled)),
            (Planned, Apply, Ok(Confirmed)),
            (CostEstimated, Apply, Ok(Confirmed)),
            (PolicyChecked, Apply, Ok(Confirmed)),
            (Planned, Discard, Ok(Discarded)),
            (PolicyChecked, Discard, Ok(Discarded)),
            (Planned, Cancel, Err("cancel not allowed")),
            (ApplyQueued, Cancel, Ok(Canceled)),
            (Applying, Cancel, Ok(Canceled)),
            (Applying, ForceCancel, Err("cool-off period")),
        ];
        for (status, action, expected) in cases {
            let got = transition(status, action);
            match expected {
                Ok(next) => assert_eq!(got, Ok(next), "{status:?} {action:?}"),
                Err(text) => {
                    let refused = got.expect_err("refused");
                    assert!(
                        refused.detail.contains(text),
                        "{status:?} {action:?}: {refused:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn initial_status_queues_unless_workspace_is_busy() {
        assert_eq!(initial_status(false, false, false), PlanQueued);
        assert_eq!(initial_status(false, true, false), Pending);
        assert_eq!(initial_status(false, false, true), Pending);
        assert_eq!(initial_status(true, true, true), PlanQueued);
    }

    fn run(status: RunStatus, speculative: bool) -> QueuedRun {
        QueuedRun {
            status,
            speculative,
        }
    }

    #[test]
    fn next_to_start_picks_oldest_pending_when_workspace_is_free() {
        let runs = [
            run(Canceled, false),
            run(Pending, false),
            run(Pending, false),
        ];
        assert_eq!(next_to_start(&runs, false), Some(1));
        assert_eq!(next_to_start(&runs, true), None);
    }

    #[test]
    fn next_to_start_waits_while_a_run_holds_the_workspace() {
        let runs = [run(PlanQueued, false), run(Pending, false)];
        assert_eq!(next_to_start(&runs, false), None);
        let speculative_only = [run(PlanQueued, true), run(Pending, false)];
        assert_eq!(next_to_start(&speculative_only, false), Some(1));
        assert_eq!(next_to_start(&[run(Applied, false)], false), None);
    }

    #[test]
    fn actions_flags_follow_transitions() {
        assert_eq!(
            actions(Pending),
            RunActions {
                is_cancelable: false,
                is_confirmable: false,
                is_discardable: true,
                is_force_cancelable: false,
            }
        );
        assert!(actions(PlanQueued).is_cancelable);
        assert!(actions(Planned).is_confirmable);
        assert_eq!(
            serde_json::to_value(actions(Applied)).unwrap(),
            serde_json::json!({"is-cancelable": false, "is-confirmable": false,
                "is-discardable": false, "is-force-cancelable": false})
        );
    }
}
