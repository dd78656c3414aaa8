//! Task schedules (Nomad Enterprise's `schedule { cron { start, end, timezone } }`): a task
//! with a schedule runs only inside its window, and pause overrides (`pause`, `run`,
//! `scheduled`, pulled by `runtime.rs`) force it either way. [`ScheduleGate`] is what a task
//! runner asks ("run now?") and waits on ("until that may change"); the runner stops the task
//! with a `Pausing` event when the answer turns to no and starts it again with `Running` when
//! it turns back (resources stay allocated meanwhile, as upstream).
//!
//! The window: `start` is a cron expression of minute, hour, day of month, month, day of week
//! and optionally year (upstream's six fields; five are accepted); `end` is `minute hour` on
//! the same day (no overnight windows); both in `timezone` (IANA, from the system's zoneinfo,
//! `zoneinfo.rs`; default UTC). The task is inside its window from the day's first start until
//! that day's end.
//!
//! `ScheduleState` as reported (and read back by `GET /v1/client/allocation/:id/pause`): `""`
//! inside the window, `scheduled_pause` outside it, `force_pause` / `force_run` under an
//! override.
//!
//! Invariants: the decision is a pure function of the window, the override and the time
//! ([`Window::at`]); a gate re-decides at least every [`MAX_RECHECK`], so a clock change or a
//! daylight-saving shift is followed within that bound; an invalid schedule never stops a task
//! (it is logged and the task runs unscheduled).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, NaiveTime};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use scheduler_structs::{Task, TaskEvent};
use serde::Deserialize;

use crate::Shared;
use crate::events;
use crate::runtime::{Override, Runtime};
use crate::zoneinfo::Zone;

/// Upstream's event types (Enterprise).
pub(crate) const EVENT_PAUSING: &str = "Pausing";
pub(crate) const EVENT_RUNNING: &str = "Running";

/// The longest a gate waits before deciding again.
pub(crate) const MAX_RECHECK: Duration = Duration::from_secs(60);

/// A task's `schedule` block (API JSON).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct ScheduleBlock {
    cron: Option<CronBlock>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct CronBlock {
    start: String,
    end: String,
    timezone: String,
}

/// A parsed schedule window.
#[derive(Debug, Clone)]
pub(crate) struct Window {
    start: Cron,
    end: NaiveTime,
    zone: Zone,
}

impl Window {
    /// The window of a task's `schedule` block; `None` without a `cron` block.
    pub(crate) fn parse(schedule: &serde_json::Value) -> Result<Option<Window>, String> {
        let block: ScheduleBlock = serde_json::from_value(schedule.clone())
            .map_err(|error| format!("invalid schedule: {error}"))?;
        let Some(cron) = block.cron else {
            return Ok(None);
        };
        let fields = cron.start.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(format!(
                "invalid schedule start {:?}: 5 or 6 fields (minute hour day month weekday [year])",
                cron.start
            ));
        }
        let start = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Optional)
            .build()
            .parse(&format!("0 {}", cron.start))
            .map_err(|error| format!("invalid schedule start {:?}: {error}", cron.start))?;
        let end = parse_end(&cron.end)?;
        let zone = Zone::load(&cron.timezone)?;
        Ok(Some(Window { start, end, zone }))
    }

    /// Whether `unix` seconds is inside the window, and how many seconds until that may
    /// change (at least 1).
    pub(crate) fn at(&self, unix: i64) -> (bool, i64) {
        let offset = i64::from(self.zone.offset_at(unix));
        let Some(local) =
            DateTime::from_timestamp(unix.saturating_add(offset), 0).map(|time| time.naive_utc())
        else {
            return (false, MAX_RECHECK.as_secs() as i64);
        };
        let today = local.date();
        let midnight = today.and_time(NaiveTime::MIN);
        if let Ok(first) = self.start.find_next_occurrence(&midnight, true)
            && first.date() == today
            && first <= local
        {
            let end = today.and_time(self.end);
            if local < end {
                return (true, seconds_until(local, end));
            }
        }
        // Outside: the next start whose day ends after it.
        let mut from = local;
        for _ in 0..1000 {
            let Ok(next) = self.start.find_next_occurrence(&from, false) else {
                break;
            };
            if next.date().and_time(self.end) > next {
                return (false, seconds_until(local, next));
            }
            from = next;
        }
        (false, 86_400)
    }
}

fn seconds_until(from: NaiveDateTime, to: NaiveDateTime) -> i64 {
    (to - from).num_seconds().max(1)
}

/// `end`: `minute hour`.
fn parse_end(end: &str) -> Result<NaiveTime, String> {
    let invalid = || format!("invalid schedule end {end:?}: expected \"minute hour\"");
    let fields: Vec<&str> = end.split_whitespace().collect();
    let [minute, hour] = fields[..] else {
        return Err(invalid());
    };
    let minute: u32 = minute.parse().map_err(|_| invalid())?;
    let hour: u32 = hour.parse().map_err(|_| invalid())?;
    NaiveTime::from_hms_opt(hour, minute, 0).ok_or_else(invalid)
}

/// The answer of a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) run: bool,
    /// Why, for the `Pausing` / `Running` event.
    pub(crate) reason: &'static str,
    /// The `ScheduleState` to report.
    pub(crate) state: &'static str,
    /// Seconds until the window may change.
    pub(crate) recheck: i64,
}

/// The pure decision: the override wins, else the window.
pub(crate) fn decide(window: &Window, wanted: Option<Override>, unix: i64) -> Decision {
    let (inside, recheck) = window.at(unix);
    match wanted {
        Some(Override::Pause) => Decision {
            run: false,
            reason: "Task paused by an override",
            state: "force_pause",
            recheck,
        },
        Some(Override::Run) => Decision {
            run: true,
            reason: "Task run by an override",
            state: "force_run",
            recheck,
        },
        None if inside => Decision {
            run: true,
            reason: "Task is inside its schedule",
            state: "",
            recheck,
        },
        None => Decision {
            run: false,
            reason: "Task is outside its schedule",
            state: "scheduled_pause",
            recheck,
        },
    }
}

/// What a scheduled task's runner asks.
#[derive(Debug)]
pub(crate) struct ScheduleGate {
    runtime: Arc<Runtime>,
    alloc_id: String,
    task: String,
    window: Window,
    /// The override version the last decision saw.
    seen: AtomicU64,
}

impl ScheduleGate {
    /// The gate of `task` in `alloc_id`, or `None` when it has no (valid) schedule.
    pub(crate) fn for_task(
        shared: &Shared,
        alloc_id: &str,
        task: &Task,
    ) -> Option<Arc<ScheduleGate>> {
        let schedule = task.schedule.as_ref()?;
        match Window::parse(schedule) {
            Ok(window) => Some(Arc::new(ScheduleGate {
                runtime: shared.runtime.clone(),
                alloc_id: alloc_id.to_owned(),
                task: task.name.clone(),
                window: window?,
                seen: AtomicU64::new(0),
            })),
            Err(error) => {
                tracing::warn!(alloc_id, task = %task.name, %error, "ignoring the task's schedule");
                None
            }
        }
    }

    /// Decides now and reports the task's `ScheduleState`.
    pub(crate) fn decide(&self) -> Decision {
        let version = *self.runtime.watch_overrides().borrow();
        self.seen.store(version, Ordering::SeqCst);
        let wanted = self.runtime.override_of(&self.alloc_id, &self.task);
        let decision = decide(
            &self.window,
            wanted,
            stdx::time::unix_now_nanos().div_euclid(1_000_000_000),
        );
        self.runtime
            .set_schedule(&self.alloc_id, &self.task, decision.state);
        decision
    }

    /// Waits until the decision may have changed: the window's next boundary (at most
    /// [`MAX_RECHECK`] away) or a new override.
    pub(crate) async fn changed(&self, recheck: i64) {
        let mut overrides = self.runtime.watch_overrides();
        let seen = self.seen.load(Ordering::SeqCst);
        let wait = Duration::from_secs(u64::try_from(recheck).unwrap_or(1)).min(MAX_RECHECK);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = overrides.wait_for(|version| *version != seen) => {}
        }
    }
}

/// Resolves (with the reason) once `gate` says the task must pause; never without a gate.
pub(crate) async fn until_paused(gate: Option<&ScheduleGate>) -> &'static str {
    let Some(gate) = gate else {
        return std::future::pending().await;
    };
    loop {
        let decision = gate.decide();
        if !decision.run {
            return decision.reason;
        }
        gate.changed(decision.recheck).await;
    }
}

/// `Pausing`: the task is stopped until its window (or an override) lets it run.
pub(crate) fn pausing(reason: &str) -> TaskEvent {
    let mut event = events::new_event(EVENT_PAUSING);
    event.message = reason.to_owned();
    event.display_message = reason.to_owned();
    event
        .details
        .insert("message".to_owned(), reason.to_owned());
    event
}

/// `Running`: a paused task may run again.
pub(crate) fn running(reason: &str) -> TaskEvent {
    let mut event = events::new_event(EVENT_RUNNING);
    event.message = reason.to_owned();
    event.display_message = reason.to_owned();
    event
        .details
        .insert("message".to_owned(), reason.to_owned());
    event
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn window(start: &str, end: &str, zone: &str) -> Window {
        Window::parse(&json!({"Cron": {"Start": start, "End": end, "Timezone": zone}}))
            .unwrap()
            .unwrap()
    }

    /// Unix seconds of a UTC civil time.
    fn utc(text: &str) -> i64 {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc()
            .timestamp()
    }

    #[test]
    fn a_weekday_window_opens_at_its_start_and_closes_at_its_end() {
        let office = window("30 9 * * MON-FRI *", "0 16", "");
        // Monday 2024-07-15.
        assert_eq!(office.at(utc("2024-07-15 09:29:00")), (false, 60));
        assert_eq!(
            office.at(utc("2024-07-15 09:30:00")),
            (true, 6 * 3600 + 1800)
        );
        assert_eq!(office.at(utc("2024-07-15 15:59:30")), (true, 30));
        // After the end: the next start is Tuesday's.
        assert_eq!(
            office.at(utc("2024-07-15 16:00:00")),
            (false, 17 * 3600 + 1800)
        );
        // Saturday: Monday's start.
        let (inside, wait) = office.at(utc("2024-07-20 12:00:00"));
        assert!(!inside);
        assert_eq!(wait, 2 * 86_400 - 2 * 3600 - 1800);
    }

    #[test]
    fn the_window_is_read_in_its_time_zone() {
        let Ok(_) = Zone::load("America/New_York") else {
            return;
        };
        let office = window("30 9 * * * *", "0 16", "America/New_York");
        // 13:30 UTC is 09:30 EDT in July and 08:30 EST in January.
        assert!(office.at(utc("2024-07-15 13:30:00")).0);
        assert!(!office.at(utc("2024-01-15 13:30:00")).0);
        assert!(office.at(utc("2024-01-15 14:30:00")).0);
    }

    #[test]
    fn overrides_win_over_the_window_and_map_to_upstream_states() {
        let office = window("30 9 * * *", "0 16", "UTC");
        let inside = utc("2024-07-15 10:00:00");
        let outside = utc("2024-07-15 20:00:00");
        let state = |wanted, at| {
            let decision = decide(&office, wanted, at);
            (decision.run, decision.state)
        };
        assert_eq!(state(None, inside), (true, ""));
        assert_eq!(state(None, outside), (false, "scheduled_pause"));
        assert_eq!(state(Some(Override::Pause), inside), (false, "force_pause"));
        assert_eq!(state(Some(Override::Run), outside), (true, "force_run"));
    }

    #[test]
    fn bad_schedules_are_refused_with_a_reason() {
        let parse = |start: &str, end: &str, zone: &str| {
            Window::parse(&json!({"Cron": {"Start": start, "End": end, "Timezone": zone}}))
                .map(|window| window.is_some())
        };
        assert!(parse("30 9 * * *", "0 16", "").unwrap());
        assert!(
            parse("30 9 *", "0 16", "")
                .unwrap_err()
                .contains("5 or 6 fields")
        );
        assert!(
            parse("30 9 * * * *", "16", "")
                .unwrap_err()
                .contains("minute hour")
        );
        assert!(parse("30 9 * * * *", "0 25", "").is_err());
        assert!(parse("61 9 * * * *", "0 16", "").is_err());
        assert!(parse("30 9 * * * *", "0 16", "Mars/Base").is_err());
        assert!(Window::parse(&json!({})).unwrap().is_none());
    }
}
