//! Task drivers: `raw_exec` runs the task as a process of the agent's user, without isolation
//! (see [`raw_exec`]); `exec` runs it in its own mount, PID and IPC namespaces with the task
//! directory as root and cgroup limits (see [`exec`] and [`cgroups`]). Both share raw_exec's
//! wrapper design, so one [`ProcessHandle`] serves them.
//!
//! What a driver hands the task runner is a [`ProcessHandle`]: something that can be waited on,
//! signalled and killed, whether the agent started the process or re-attached to it after a
//! restart. The later `signal`/`restart`/`exec` endpoints reach a task through that handle.

pub(crate) mod cgroups;
pub(crate) mod exec;
pub(crate) mod raw_exec;

pub(crate) use raw_exec::ProcessHandle;

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::Signal;
use scheduler_structs::Task;

use crate::state::TaskDirs;

/// The unisolated driver.
pub(crate) const RAW_EXEC: &str = "raw_exec";
/// The isolated driver (Linux, root).
pub(crate) const EXEC: &str = "exec";

/// The exit message of a task the kernel's OOM killer ended (its `Terminated` event says so).
pub(crate) const OOM_KILLED: &str = "OOM Killed";

/// Whether this client knows `driver`.
pub(crate) fn is_known(driver: &str) -> bool {
    driver == RAW_EXEC || driver == EXEC
}

/// The directories as the task sees them (`NOMAD_ALLOC_DIR`, `NOMAD_TASK_DIR`,
/// `NOMAD_SECRETS_DIR`): the host paths for raw_exec, the paths inside the root for exec.
pub(crate) fn task_paths(driver: &str, dirs: &TaskDirs) -> (PathBuf, PathBuf, PathBuf) {
    if driver == EXEC {
        (
            PathBuf::from("/alloc"),
            PathBuf::from("/local"),
            PathBuf::from("/secrets"),
        )
    } else {
        (
            dirs.shared.clone(),
            dirs.local.clone(),
            dirs.secrets.clone(),
        )
    }
}

/// Decodes the task's config for its driver; the error is a `Failed Validation` message.
pub(crate) fn parse_config(task: &Task) -> Result<raw_exec::RawExecConfig, String> {
    if task.driver == EXEC {
        exec::parse_config(&task.config).map(|(config, _, _)| config)
    } else {
        raw_exec::parse_config(&task.config)
    }
}

/// Launches `spec` with the task's driver.
pub(crate) fn start(
    task: &Task,
    alloc_id: &str,
    dirs: &TaskDirs,
    spec: &raw_exec::LaunchSpec,
    poll_interval: Duration,
) -> Result<ProcessHandle, String> {
    if task.driver != EXEC {
        return raw_exec::start(spec, poll_interval);
    }
    let (_, host_pid, host_ipc) = exec::parse_config(&task.config)?;
    let isolation = exec::Isolation {
        cgroup_name: format!("cairn-{alloc_id}-{}", task.name),
        limits: cgroups::Limits {
            cpu_mhz: task.resources.cpu,
            memory_mb: task.resources.memory_mb,
            memory_max_mb: task.resources.memory_max_mb,
        },
        shared_dir: dirs.shared.clone(),
        user: task.user.clone(),
        host_pid,
        host_ipc,
    };
    exec::launch(spec, poll_interval, &isolation)
}

/// How a task's process ended (Nomad's `drivers.ExitResult`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExitResult {
    /// The exit code; `128 + n` when killed by signal `n` (upstream's executor encoding); `-1`
    /// when unknown.
    pub(crate) exit_code: i64,
    /// The signal that ended the process, or 0.
    pub(crate) signal: i64,
    /// What went wrong when the result is not a plain exit.
    pub(crate) message: Option<String>,
}

impl ExitResult {
    pub(crate) fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0 && self.message.is_none()
    }

    /// A result for a process whose end nobody saw.
    pub(crate) fn unknown(message: &str) -> ExitResult {
        ExitResult {
            exit_code: -1,
            signal: 0,
            message: Some(message.to_owned()),
        }
    }

    /// From a shell-style status: 128+n is read as "killed by signal n".
    pub(crate) fn from_shell_status(code: i64) -> ExitResult {
        let signal = if (129..=128 + 64).contains(&code) {
            code - 128
        } else {
            0
        };
        ExitResult {
            exit_code: code,
            signal,
            message: None,
        }
    }
}

/// Parses a signal name as jobs write it: `SIGTERM`, `TERM` or `sigterm`.
pub(crate) fn parse_signal(name: &str) -> Option<Signal> {
    let upper = name.trim().to_ascii_uppercase();
    if upper.is_empty() {
        return None;
    }
    let full = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    full.parse::<Signal>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_parse_with_or_without_prefix() {
        assert_eq!(parse_signal("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("TERM"), Some(Signal::SIGTERM));
        assert_eq!(parse_signal("sigint"), Some(Signal::SIGINT));
        assert_eq!(parse_signal("hup"), Some(Signal::SIGHUP));
        assert_eq!(parse_signal("SIGBOGUS"), None);
        assert_eq!(parse_signal(""), None);
    }

    #[test]
    fn shell_status_reads_signals() {
        assert_eq!(ExitResult::from_shell_status(3).signal, 0);
        assert_eq!(ExitResult::from_shell_status(130).signal, 2);
        assert_eq!(ExitResult::from_shell_status(137).signal, 9);
        assert_eq!(ExitResult::from_shell_status(128).signal, 0);
        assert!(ExitResult::from_shell_status(0).successful());
    }
}
