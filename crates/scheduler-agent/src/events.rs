//! Task events as the client emits them (Nomad's `structs.NewTaskEvent(...).SetX(...)` chains)
//! and their `DisplayMessage`, rendered as upstream's `PopulateEventDisplayMessage` does.
//!
//! Invariants: every constructor stamps `Time` with the current Unix nanoseconds and mirrors
//! each typed field it sets into `Details` under upstream's key; [`display_message`] is a pure
//! function of the event and never overrides a message already set.

use std::time::Duration;

use scheduler_structs::{
    EVENT_DRIVER_FAILURE, EVENT_FAILED_VALIDATION, EVENT_KILLED, EVENT_KILLING, EVENT_LEADER_DEAD,
    EVENT_NOT_RESTARTING, EVENT_RECEIVED, EVENT_RESTART_SIGNAL, EVENT_RESTARTING,
    EVENT_SETUP_FAILURE, EVENT_SIBLING_FAILED, EVENT_SIGNALING, EVENT_STARTED, EVENT_TASK_SETUP,
    EVENT_TERMINATED, TaskEvent,
};
use stdx::duration::{format_go, format_go_std};

use crate::driver::ExitResult;
use crate::restarts::REASON_WITHIN_POLICY;
use crate::time::nanos_of;

/// `structs.TaskWaitingShuttingDownDelay`.
pub(crate) const EVENT_WAITING_SHUTDOWN_DELAY: &str = "Waiting for shutdown delay";
/// `structs.TaskSkippingShutdownDelay`.
pub(crate) const EVENT_SKIPPING_SHUTDOWN_DELAY: &str = "Skipping shutdown delay";

/// `structs.TaskBuildingTaskDir`, the message of the first `Task Setup` event.
pub(crate) const BUILDING_TASK_DIR: &str = "Building Task Directory";

/// A bare event of `kind`, stamped now.
pub(crate) fn new_event(kind: &str) -> TaskEvent {
    TaskEvent {
        event_type: kind.to_owned(),
        time: stdx::time::unix_now_nanos(),
        ..TaskEvent::default()
    }
}

fn detail(mut event: TaskEvent, key: &str, value: impl Into<String>) -> TaskEvent {
    event.details.insert(key.to_owned(), value.into());
    event
}

pub(crate) fn received() -> TaskEvent {
    new_event(EVENT_RECEIVED)
}

pub(crate) fn task_setup(message: &str) -> TaskEvent {
    let mut event = new_event(EVENT_TASK_SETUP);
    event.message = message.to_owned();
    detail(event, "message", message)
}

pub(crate) fn setup_failure(error: &str) -> TaskEvent {
    let mut event = new_event(EVENT_SETUP_FAILURE);
    event.setup_error = error.to_owned();
    detail(event, "setup_error", error)
}

pub(crate) fn started() -> TaskEvent {
    new_event(EVENT_STARTED)
}

pub(crate) fn driver_failure(error: &str) -> TaskEvent {
    let mut event = new_event(EVENT_DRIVER_FAILURE);
    event.driver_error = error.to_owned();
    detail(event, "driver_error", error)
}

pub(crate) fn failed_validation(error: &str) -> TaskEvent {
    let mut event = new_event(EVENT_FAILED_VALIDATION);
    event.validation_error = error.to_owned();
    detail(event, "validation_error", error)
}

/// `Terminated` with the exit code, signal and, when the result carries one, the exit message.
pub(crate) fn terminated(result: &ExitResult) -> TaskEvent {
    let mut event = new_event(EVENT_TERMINATED);
    event.exit_code = result.exit_code;
    event.signal = result.signal;
    event = detail(event, "exit_code", result.exit_code.to_string());
    event = detail(event, "signal", result.signal.to_string());
    let oom_killed = result.message.as_deref() == Some(crate::driver::OOM_KILLED);
    event = detail(event, "oom_killed", oom_killed.to_string());
    if let Some(message) = &result.message {
        event.message = message.clone();
        event = detail(event, "exit_message", message.clone());
    }
    event
}

pub(crate) fn restarting(delay: Duration, reason: &str) -> TaskEvent {
    let mut event = new_event(EVENT_RESTARTING);
    event.start_delay = nanos_of(delay);
    let start_delay = event.start_delay.to_string();
    event = detail(event, "start_delay", start_delay);
    event.restart_reason = reason.to_owned();
    detail(event, "restart_reason", reason)
}

/// `Not Restarting`, which fails the task.
pub(crate) fn not_restarting(reason: &str) -> TaskEvent {
    let mut event = new_event(EVENT_NOT_RESTARTING);
    event.restart_reason = reason.to_owned();
    event = detail(event, "restart_reason", reason);
    event.fails_task = true;
    detail(event, "fails_task", "true")
}

/// `Killing` with the kill timeout actually applied (the task's, capped by the client's max).
pub(crate) fn killing(timeout: Duration) -> TaskEvent {
    let mut event = new_event(EVENT_KILLING);
    event.kill_timeout = nanos_of(timeout);
    detail(event, "kill_timeout", format_go_std(timeout))
}

/// `Waiting for shutdown delay` (before the kill of a task with a `shutdown_delay`).
pub(crate) fn waiting_shutdown_delay(delay: Duration) -> TaskEvent {
    let mut event = new_event(EVENT_WAITING_SHUTDOWN_DELAY);
    event.message = format!(
        "Waiting for shutdown_delay of {} before killing the task.",
        format_go_std(delay)
    );
    event
}

/// `Skipping shutdown delay` (the stop asked for `no_shutdown_delay`).
pub(crate) fn skipping_shutdown_delay(delay: Duration) -> TaskEvent {
    let mut event = new_event(EVENT_SKIPPING_SHUTDOWN_DELAY);
    event.message = format!(
        "Skipping shutdown_delay of {} before killing the task.",
        format_go_std(delay)
    );
    event
}

pub(crate) fn killed(kill_error: Option<&str>) -> TaskEvent {
    let mut event = new_event(EVENT_KILLED);
    if let Some(error) = kill_error {
        event.kill_error = error.to_owned();
        event = detail(event, "kill_error", error);
    }
    event
}

pub(crate) fn sibling_failed(sibling: &str) -> TaskEvent {
    let mut event = new_event(EVENT_SIBLING_FAILED);
    event.failed_sibling = sibling.to_owned();
    detail(event, "failed_sibling", sibling)
}

pub(crate) fn leader_dead() -> TaskEvent {
    new_event(EVENT_LEADER_DEAD)
}

/// `Signaling` as the alloc runner emits it (`SetSignalText`: only `Details["signal"]`).
pub(crate) fn signaling(signal: &str) -> TaskEvent {
    detail(new_event(EVENT_SIGNALING), "signal", signal)
}

pub(crate) fn restart_signaled(reason: &str) -> TaskEvent {
    let mut event = new_event(EVENT_RESTART_SIGNAL);
    event.restart_reason = reason.to_owned();
    detail(event, "restart_reason", reason)
}

/// Upstream's human-readable rendering of an event.
pub(crate) fn display_message(event: &TaskEvent) -> String {
    if !event.display_message.is_empty() {
        return event.display_message.clone();
    }
    let or = |value: &str, fallback: &str| {
        if value.is_empty() {
            fallback.to_owned()
        } else {
            value.to_owned()
        }
    };
    match event.event_type.as_str() {
        EVENT_TASK_SETUP => event.message.clone(),
        EVENT_STARTED => "Task started by client".to_owned(),
        EVENT_RECEIVED => "Task received by client".to_owned(),
        EVENT_FAILED_VALIDATION => or(&event.validation_error, "Validation of task failed"),
        EVENT_SETUP_FAILURE => or(&event.setup_error, "Task setup failed"),
        EVENT_DRIVER_FAILURE => or(&event.driver_error, "Failed to start task"),
        EVENT_KILLING => {
            if !event.kill_reason.is_empty() {
                event.kill_reason.clone()
            } else if event.kill_timeout != 0 {
                format!(
                    "Sent interrupt. Waiting {} before force killing",
                    format_go(event.kill_timeout)
                )
            } else {
                "Sent interrupt".to_owned()
            }
        }
        EVENT_KILLED => or(&event.kill_error, "Task successfully killed"),
        EVENT_TERMINATED => {
            let mut parts = vec![format!("Exit Code: {}", event.exit_code)];
            if event.signal != 0 {
                parts.push(format!("Signal: {}", event.signal));
            }
            if !event.message.is_empty() {
                parts.push(format!("Exit Message: {:?}", event.message));
            }
            parts.join(", ")
        }
        EVENT_RESTARTING => {
            let in_delay = format!("Task restarting in {}", format_go(event.start_delay));
            if !event.restart_reason.is_empty() && event.restart_reason != REASON_WITHIN_POLICY {
                format!("{} - {in_delay}", event.restart_reason)
            } else {
                in_delay
            }
        }
        EVENT_NOT_RESTARTING => or(&event.restart_reason, "Task exceeded restart policy"),
        EVENT_SIBLING_FAILED => {
            if event.failed_sibling.is_empty() {
                "Task's sibling failed".to_owned()
            } else {
                format!("Task's sibling {:?} failed", event.failed_sibling)
            }
        }
        EVENT_SIGNALING => match (
            event.task_signal.as_str(),
            event.task_signal_reason.as_str(),
        ) {
            ("", "") => "Task being sent a signal".to_owned(),
            ("", reason) => reason.to_owned(),
            (signal, "") => format!("Task being sent signal {signal}"),
            (signal, reason) => format!("Task being sent signal {signal}: {reason}"),
        },
        EVENT_RESTART_SIGNAL => or(&event.restart_reason, "Task signaled to restart"),
        EVENT_LEADER_DEAD => "Leader Task in Group dead".to_owned(),
        _ => event.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_messages_match_upstream() {
        let exit = ExitResult {
            exit_code: 130,
            signal: 2,
            message: None,
        };
        assert_eq!(
            display_message(&terminated(&exit)),
            "Exit Code: 130, Signal: 2"
        );
        let exit = ExitResult {
            exit_code: -1,
            signal: 0,
            message: Some("gone".to_owned()),
        };
        assert_eq!(
            display_message(&terminated(&exit)),
            "Exit Code: -1, Exit Message: \"gone\""
        );
        assert_eq!(
            display_message(&killing(Duration::from_secs(5))),
            "Sent interrupt. Waiting 5s before force killing"
        );
        assert_eq!(
            display_message(&restarting(
                Duration::from_millis(100),
                REASON_WITHIN_POLICY
            )),
            "Task restarting in 100ms"
        );
        assert_eq!(
            display_message(&restarting(
                Duration::from_secs(60),
                "Exceeded allowed attempts, applying a delay"
            )),
            "Exceeded allowed attempts, applying a delay - Task restarting in 1m0s"
        );
        assert_eq!(
            display_message(&sibling_failed("web")),
            "Task's sibling \"web\" failed"
        );
        assert_eq!(
            display_message(&signaling("SIGHUP")),
            "Task being sent a signal"
        );
        assert_eq!(
            display_message(&task_setup(BUILDING_TASK_DIR)),
            "Building Task Directory"
        );
        assert_eq!(display_message(&killed(None)), "Task successfully killed");
        let event = not_restarting("Policy allows no restarts");
        assert!(event.fails_task);
        assert_eq!(event.details["fails_task"], "true");
        assert_eq!(display_message(&event), "Policy allows no restarts");
    }
}
