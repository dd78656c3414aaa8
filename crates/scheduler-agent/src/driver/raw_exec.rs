//! The `raw_exec` driver: runs a task's `command` with `args` as a process of the agent's user,
//! in its own process group, cwd the task directory, stdout/stderr appended to
//! `alloc/logs/<task>.stdout.0` / `.stderr.0`.
//!
//! Exit statuses survive agent restarts. The command is not spawned directly but under a tiny
//! POSIX-sh wrapper that runs it in the foreground, then writes its exit status (`$?`) to an
//! *exit file* in the agent's state directory and exits with it:
//!
//! ```text
//! sh -c 'f=$1; shift; trap : HUP INT ...; "$@"; c=$?; printf "%s\n" "$c" >"$f"; exit "$c"' \
//!     cairn-task <exit-file> <resolved command> <args...>
//! ```
//!
//! - The wrapper is the process-group leader; its pid and `/proc/<pid>/stat` start time identify
//!   the task. Signals and kills go to the whole group (`killpg`), so the command gets them; the
//!   wrapper traps the catchable terminating signals with a no-op (a caught disposition is reset
//!   on `exec`, so the command sees the default ones) and survives to record the status.
//! - While the agent is the wrapper's parent, the exit comes from `wait`, refined by the exit
//!   file; after an agent restart the agent re-attaches ([`ProcessHandle::adopt`]) and polls the
//!   pid until it is gone, then reads the exit file.
//! - `$?` is the shell's encoding, so a command killed by signal `n` reports exit code `128+n`
//!   and signal `n`, as upstream's executor does; a command that itself exits with `128+n`
//!   is reported the same way (the one ambiguity of this design). A wrapper killed by SIGKILL
//!   writes nothing: that is reported as exit 137, signal 9 when the agent saw it or sent it,
//!   exit -1 ("unknown") otherwise.
//! - dash reports a foreground job killed by a signal other than SIGINT on its stderr, so such a
//!   kill leaves a line like `Terminated` in the task's stderr log.
//! - A signal that lands in the instant between the wrapper's fork and the command's exec runs
//!   the wrapper's no-op trap in the child and is lost; a kill then takes effect at its SIGKILL,
//!   after the kill timeout. Only a kill within a millisecond or so of the start can hit this.
//! - After the main process ends, the rest of its process group is SIGKILLed (upstream's
//!   executor destroys the process tree the same way).
//!
//! The command is resolved before spawning (task `local/`, the task dir, then `PATH`), so a
//! missing binary is a start error (`Driver Failure`), not an exit code 127.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;

use super::ExitResult;
use super::cgroups::TaskCgroups;

/// The wrapper script (see the module doc). `$1` is the exit file, the rest the command line.
const WRAPPER: &str = "f=$1; shift; \
trap : HUP INT QUIT ABRT USR1 USR2 ALRM TERM XCPU XFSZ VTALRM PROF IO PWR SYS 2>/dev/null \
|| trap : HUP INT QUIT TERM USR1 USR2 ALRM; \
\"$@\"; c=$?; printf '%s\\n' \"$c\" > \"$f\"; exit \"$c\"";

/// `$0` of the wrapper, what `ps` shows.
const WRAPPER_NAME: &str = "cairn-task";

/// How long to wait for a process to go away after SIGKILL before giving up on it.
const SIGKILL_WAIT: Duration = Duration::from_secs(15);

/// Config keys upstream's raw_exec accepts; the ones not listed in [`RawExecConfig`] are
/// accepted and ignored (cgroup and OOM tuning need privileges this driver does not use).
const KNOWN_KEYS: &[&str] = &[
    "command",
    "args",
    "work_dir",
    "cgroup_v1_override",
    "cgroup_v2_override",
    "oom_score_adj",
    "denied_envvars",
];

/// A task's `config` block for raw_exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawExecConfig {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) work_dir: Option<String>,
}

/// Validates and decodes `config`; the error reads as upstream's HCL decoding errors.
pub(crate) fn parse_config(config: &BTreeMap<String, Value>) -> Result<RawExecConfig, String> {
    if let Some(unknown) = config
        .keys()
        .find(|key| !KNOWN_KEYS.contains(&key.as_str()))
    {
        return Err(format!(
            "failed to parse config: Unsupported argument: An argument named {unknown:?} is not expected here."
        ));
    }
    let command = match config.get("command") {
        Some(Value::String(command)) if !command.is_empty() => command.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => {
            return Err("failed to parse config: Missing required argument: The argument \"command\" is required, but no definition was found.".to_owned());
        }
        Some(other) => {
            return Err(format!(
                "failed to parse config: Incorrect attribute value type: Inappropriate value for attribute \"command\": string required, got {other}."
            ));
        }
    };
    let args = match config.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(text) => Ok(text.clone()),
                Value::Number(number) => Ok(number.to_string()),
                Value::Bool(flag) => Ok(flag.to_string()),
                other => Err(format!(
                    "failed to parse config: Incorrect attribute value type: Inappropriate value for attribute \"args\": element: string required, got {other}."
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(format!(
                "failed to parse config: Incorrect attribute value type: Inappropriate value for attribute \"args\": list of string required, got {other}."
            ));
        }
    };
    let work_dir = match config.get("work_dir") {
        None | Some(Value::Null) => None,
        Some(Value::String(dir)) if dir.is_empty() => None,
        Some(Value::String(dir)) => Some(dir.clone()),
        Some(other) => {
            return Err(format!(
                "failed to parse config: Incorrect attribute value type: Inappropriate value for attribute \"work_dir\": string required, got {other}."
            ));
        }
    };
    Ok(RawExecConfig {
        command,
        args,
        work_dir,
    })
}

/// Everything needed to launch one run of a task (already interpolated).
#[derive(Debug, Clone)]
pub(crate) struct LaunchSpec {
    pub(crate) command: String,
    pub(crate) args: Vec<String>,
    pub(crate) env: BTreeMap<String, String>,
    /// The task directory: cwd and the base for relative commands.
    pub(crate) task_dir: PathBuf,
    /// An absolute working directory overriding `task_dir` as cwd.
    pub(crate) work_dir: Option<PathBuf>,
    pub(crate) stdout: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) exit_file: PathBuf,
}

/// A running (or finished) task process: the wrapper's pid and start time.
#[derive(Debug)]
pub(crate) struct ProcessHandle {
    pid: i32,
    start_time: u64,
    exit_file: PathBuf,
    source: Source,
    poll_interval: Duration,
    exited: Option<ExitResult>,
    sent_sigkill: bool,
    /// The `exec` driver's cgroups, removed once the process is gone.
    cgroups: Option<super::cgroups::TaskCgroups>,
}

#[derive(Debug)]
enum Source {
    /// Started by this agent process: `wait` gives the status.
    Child(tokio::process::Child),
    /// Re-attached after an agent restart: watched by polling `/proc`.
    Adopted,
}

/// Starts the task; errors are the `DriverError` of a `Driver Failure` event.
pub(crate) fn start(spec: &LaunchSpec, poll_interval: Duration) -> Result<ProcessHandle, String> {
    launch(spec, poll_interval, None)
}

/// Builds the command that runs a task's binary in a sandbox, with the cgroups it made: the
/// `exec` driver's (`exec::launch`), given to [`launch`] so that this launcher knows nothing
/// of sandboxes.
pub(crate) type Sandbox<'a> =
    &'a dyn Fn(&LaunchSpec, &Path) -> Result<(tokio::process::Command, TaskCgroups), String>;

/// Starts the task unisolated (`sandbox` `None`) or through `sandbox`.
pub(crate) fn launch(
    spec: &LaunchSpec,
    poll_interval: Duration,
    sandbox: Option<Sandbox<'_>>,
) -> Result<ProcessHandle, String> {
    let launch_error = |error: String| format!("failed to launch command with executor: {error}");
    let binary =
        lookup_binary(&spec.task_dir, &spec.command, spec.env.get("PATH")).map_err(launch_error)?;
    let cwd = spec
        .work_dir
        .clone()
        .unwrap_or_else(|| spec.task_dir.clone());
    if sandbox.is_none() && !cwd.is_dir() {
        return Err(launch_error(format!(
            "working directory {} does not exist",
            cwd.display()
        )));
    }
    match std::fs::remove_file(&spec.exit_file) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(launch_error(format!("clearing the exit file: {error}"))),
    }
    if let Some(parent) = spec.exit_file.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|error| launch_error(format!("creating {}: {error}", parent.display())))?;
    }
    let stdout = open_log(&spec.stdout).map_err(launch_error)?;
    let stderr = open_log(&spec.stderr).map_err(launch_error)?;

    let (mut command, cgroups) = match sandbox {
        None => {
            let mut command = tokio::process::Command::new("/bin/sh");
            command
                .arg("-c")
                .arg(WRAPPER)
                .arg(WRAPPER_NAME)
                .arg(&spec.exit_file)
                .arg(&binary)
                .args(&spec.args)
                .current_dir(&cwd);
            (command, None)
        }
        Some(sandbox) => {
            let (command, cgroups) = sandbox(spec, &binary).map_err(launch_error)?;
            (command, Some(cgroups))
        }
    };
    command
        .env_clear()
        .envs(&spec.env)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .kill_on_drop(false);
    let child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            if let Some(cgroups) = &cgroups {
                super::cgroups::remove(cgroups);
            }
            return Err(launch_error(error.to_string()));
        }
    };
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return Err(launch_error("the process has no pid".to_owned()));
    };
    let Some(stat) = ProcStat::read(pid) else {
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        return Err(launch_error(format!("cannot read /proc/{pid}/stat")));
    };
    Ok(ProcessHandle {
        pid,
        start_time: stat.start_time,
        exit_file: spec.exit_file.clone(),
        source: Source::Child(child),
        poll_interval,
        exited: None,
        sent_sigkill: false,
        cgroups,
    })
}

/// The exit of a task that ended while no agent watched it: the exit file, or unknown.
pub(crate) fn exit_of_vanished(exit_file: &Path) -> ExitResult {
    let oom = super::cgroups::load_list(exit_file).is_some_and(|cgroups| {
        let oom = super::cgroups::oom_killed(&cgroups);
        super::cgroups::remove(&cgroups);
        let _ = std::fs::remove_file(super::cgroups::list_file(exit_file));
        oom
    });
    let mut result = read_exit_file(exit_file).map_or_else(
        || {
            ExitResult::unknown(
                "the task exited while the agent was not running; its exit status is unknown",
            )
        },
        ExitResult::from_shell_status,
    );
    if oom && result.message.is_none() {
        result.message = Some(super::OOM_KILLED.to_owned());
    }
    result
}

impl ProcessHandle {
    /// Re-attaches to a task process recorded before an agent restart; `None` when that
    /// process (same pid *and* start time) is no longer alive.
    pub(crate) fn adopt(
        pid: i32,
        start_time: u64,
        exit_file: PathBuf,
        poll_interval: Duration,
    ) -> Option<ProcessHandle> {
        if !is_alive(pid, start_time) {
            return None;
        }
        let cgroups = super::cgroups::load_list(&exit_file);
        Some(ProcessHandle {
            pid,
            start_time,
            exit_file,
            source: Source::Adopted,
            poll_interval,
            exited: None,
            sent_sigkill: false,
            cgroups,
        })
    }

    pub(crate) fn pid(&self) -> i32 {
        self.pid
    }

    pub(crate) fn start_time(&self) -> u64 {
        self.start_time
    }

    /// Waits for the process to end. Cancel-safe; once ended, returns the same result again.
    pub(crate) async fn wait(&mut self) -> ExitResult {
        if let Some(result) = &self.exited {
            return result.clone();
        }
        let result = match &mut self.source {
            Source::Child(child) => match child.wait().await {
                Ok(status) => self.result_from_status(status),
                Err(error) => {
                    ExitResult::unknown(&format!("executor: error waiting on process: {error}"))
                }
            },
            Source::Adopted => {
                while is_alive(self.pid, self.start_time) {
                    tokio::time::sleep(self.poll_interval).await;
                }
                match read_exit_file(&self.exit_file) {
                    Some(code) => ExitResult::from_shell_status(code),
                    None if self.sent_sigkill => ExitResult::from_shell_status(128 + 9),
                    None => ExitResult::unknown(
                        "the task process ended without recording its exit status",
                    ),
                }
            }
        };
        // Destroy whatever the task left behind in its process group.
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        let mut result = result;
        if let Some(cgroups) = self.cgroups.take() {
            if super::cgroups::oom_killed(&cgroups) && result.message.is_none() {
                result.message = Some(super::OOM_KILLED.to_owned());
            }
            super::cgroups::remove(&cgroups);
            let _ = std::fs::remove_file(super::cgroups::list_file(&self.exit_file));
        }
        self.exited = Some(result.clone());
        result
    }

    /// Whether the process has been seen to end.
    pub(crate) fn has_exited(&self) -> bool {
        self.exited.is_some()
    }

    /// Sends `signal` to the task's process group.
    pub(crate) fn signal(&self, signal: Signal) -> Result<(), String> {
        if self.exited.is_some() {
            return Err("Task not running".to_owned());
        }
        match killpg(Pid::from_raw(self.pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => Ok(()),
            Err(error) => Err(format!("failed to signal task: {error}")),
        }
    }

    /// Stops the task: `signal` to the group, then SIGKILL once `timeout` has passed (at once
    /// when `timeout` is zero). Returns the exit and, when the process outlived SIGKILL, an error.
    pub(crate) async fn kill(
        &mut self,
        signal: Signal,
        timeout: Duration,
    ) -> (ExitResult, Option<String>) {
        if let Some(result) = &self.exited {
            return (result.clone(), None);
        }
        if !timeout.is_zero() {
            let _ = killpg(Pid::from_raw(self.pid), signal);
            if let Ok(result) = tokio::time::timeout(timeout, self.wait()).await {
                return (result, None);
            }
        }
        self.sent_sigkill = true;
        let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        match tokio::time::timeout(SIGKILL_WAIT, self.wait()).await {
            Ok(result) => (result, None),
            Err(_) => (
                ExitResult::unknown("process did not exit after 15 seconds"),
                Some("process did not exit after 15 seconds".to_owned()),
            ),
        }
    }

    fn result_from_status(&self, status: ExitStatus) -> ExitResult {
        if let Some(code) = read_exit_file(&self.exit_file) {
            return ExitResult::from_shell_status(code);
        }
        if let Some(signal) = status.signal() {
            return ExitResult {
                exit_code: 128 + i64::from(signal),
                signal: i64::from(signal),
                message: None,
            };
        }
        status.code().map_or_else(
            || ExitResult::unknown("the process ended without an exit status"),
            |code| ExitResult::from_shell_status(i64::from(code)),
        )
    }
}

fn open_log(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| format!("opening log file {}: {error}", path.display()))
}

fn read_exit_file(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Upstream's `lookupBin`: `<task>/local/<bin>`, `<task>/<bin>`, an absolute path, then `PATH`.
pub(super) fn lookup_binary(
    task_dir: &Path,
    command: &str,
    path: Option<&String>,
) -> Result<PathBuf, String> {
    let not_found = || format!("binary {command:?} could not be found");
    let relative = Path::new(command);
    if relative.is_absolute() {
        return check_executable(relative.to_path_buf(), command);
    }
    for candidate in [
        task_dir.join("local").join(relative),
        task_dir.join(relative),
    ] {
        if candidate.is_file() {
            return check_executable(candidate, command);
        }
    }
    if command.contains('/') {
        return Err(not_found());
    }
    let search = path
        .cloned()
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_owned());
    search
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(command))
        .find(|candidate| is_executable_file(candidate))
        .ok_or_else(not_found)
}

fn check_executable(path: PathBuf, command: &str) -> Result<PathBuf, String> {
    if !path.exists() {
        return Err(format!("binary {command:?} could not be found"));
    }
    if !is_executable_file(&path) {
        return Err(format!("fork/exec {}: permission denied", path.display()));
    }
    Ok(path)
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The fields of `/proc/<pid>/stat` that identify a live process.
#[derive(Debug, Clone, Copy)]
struct ProcStat {
    state: char,
    /// Clock ticks after boot (field 22).
    start_time: u64,
}

impl ProcStat {
    fn read(pid: i32) -> Option<ProcStat> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `comm` (field 2) may hold spaces and parentheses: parse after the last ')'.
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        // After `state` (field 3) come fields 4..; the start time is field 22.
        let start_time = fields.nth(22 - 4)?.parse().ok()?;
        Some(ProcStat { state, start_time })
    }
}

/// Whether `pid` is alive and is the process that started at `start_time` (not a reused pid,
/// not a zombie).
pub(crate) fn is_alive(pid: i32, start_time: u64) -> bool {
    pid > 0
        && ProcStat::read(pid).is_some_and(|stat| {
            stat.start_time == start_time && !matches!(stat.state, 'Z' | 'X' | 'x')
        })
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir_all(dir.path().join("task/local")).unwrap();
            Fixture { dir }
        }

        fn spec(&self, command: &str, args: &[&str]) -> LaunchSpec {
            let root = self.dir.path();
            let mut env = BTreeMap::new();
            env.insert("PATH".to_owned(), "/usr/bin:/bin".to_owned());
            env.insert("GREETING".to_owned(), "hello".to_owned());
            LaunchSpec {
                command: command.to_owned(),
                args: args.iter().map(|arg| (*arg).to_owned()).collect(),
                env,
                task_dir: root.join("task"),
                work_dir: None,
                stdout: root.join("task.stdout.0"),
                stderr: root.join("task.stderr.0"),
                exit_file: root.join("state/task.exit"),
            }
        }

        fn read(&self, name: &str) -> String {
            std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
        }
    }

    const POLL: Duration = Duration::from_millis(20);

    #[tokio::test]
    async fn runs_a_command_and_captures_its_exit_code_and_output() {
        let fixture = Fixture::new();
        let spec = fixture.spec(
            "/bin/sh",
            &[
                "-c",
                "echo hi; echo \"$GREETING $PWD\"; echo oops >&2; exit 3",
            ],
        );
        let mut handle = start(&spec, POLL).unwrap();
        let result = handle.wait().await;
        assert_eq!(
            result,
            ExitResult {
                exit_code: 3,
                signal: 0,
                message: None
            }
        );
        let cwd = fixture.dir.path().join("task");
        assert_eq!(
            fixture.read("task.stdout.0"),
            format!("hi\nhello {}\n", cwd.display())
        );
        assert_eq!(fixture.read("task.stderr.0"), "oops\n");
        assert_eq!(fixture.read("state/task.exit").trim(), "3");
        // Waiting again gives the same result.
        assert_eq!(handle.wait().await.exit_code, 3);
    }

    #[tokio::test]
    async fn commands_resolve_through_path_and_the_task_dir() {
        let fixture = Fixture::new();
        let mut handle = start(&fixture.spec("sh", &["-c", "exit 0"]), POLL).unwrap();
        assert!(handle.wait().await.successful());

        let script = fixture.dir.path().join("task/local/run.sh");
        std::fs::write(&script, "#!/bin/sh\necho from-local\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut handle = start(&fixture.spec("run.sh", &[]), POLL).unwrap();
        assert!(handle.wait().await.successful());
        assert_eq!(fixture.read("task.stdout.0"), "from-local\n");
    }

    #[tokio::test]
    async fn a_missing_binary_is_a_start_error() {
        let fixture = Fixture::new();
        let error = start(&fixture.spec("/definitely/not/here", &[]), POLL).unwrap_err();
        assert_eq!(
            error,
            "failed to launch command with executor: binary \"/definitely/not/here\" could not be found"
        );
        let error = start(&fixture.spec("no-such-binary-anywhere", &[]), POLL).unwrap_err();
        assert!(error.contains("could not be found"), "{error}");
    }

    #[tokio::test]
    async fn kill_sends_the_signal_then_sigkill_after_the_timeout() {
        let fixture = Fixture::new();
        // Ignores SIGTERM (the ignore disposition is inherited by `sleep`, too).
        let spec = fixture.spec("/bin/sh", &["-c", "trap '' TERM; echo ready; sleep 5"]);
        let mut handle = start(&spec, POLL).unwrap();
        wait_for(|| fixture.read("task.stdout.0") == "ready\n").await;
        let started = Instant::now();
        let (result, error) = handle
            .kill(Signal::SIGTERM, Duration::from_millis(300))
            .await;
        let elapsed = started.elapsed();
        assert_eq!(error, None);
        assert_eq!(
            result,
            ExitResult {
                exit_code: 137,
                signal: 9,
                message: None
            }
        );
        assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
        assert!(!is_alive(handle.pid(), handle.start_time()));
    }

    #[tokio::test]
    async fn kill_with_a_handled_signal_exits_gracefully() {
        let fixture = Fixture::new();
        let spec = fixture.spec("/bin/sh", &["-c", "trap 'echo bye; exit 0' TERM; echo ready; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done"]);
        let mut handle = start(&spec, POLL).unwrap();
        wait_for(|| fixture.read("task.stdout.0") == "ready\n").await;
        let (result, _) = handle.kill(Signal::SIGTERM, Duration::from_secs(5)).await;
        assert!(result.successful(), "{result:?}");
        assert!(fixture.read("task.stdout.0").contains("bye"));

        let fixture = Fixture::new();
        let spec = fixture.spec("/bin/sh", &["-c", "echo ready; exec sleep 5"]);
        let mut handle = start(&spec, POLL).unwrap();
        wait_for(|| fixture.read("task.stdout.0") == "ready\n").await;
        let (result, _) = handle.kill(Signal::SIGINT, Duration::from_secs(5)).await;
        assert_eq!(
            result,
            ExitResult {
                exit_code: 130,
                signal: 2,
                message: None
            }
        );
    }

    #[tokio::test]
    async fn signals_reach_the_command() {
        let fixture = Fixture::new();
        let spec = fixture.spec(
            "/bin/sh",
            &["-c", "trap 'echo got-usr1' USR1; echo ready; n=0; while [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done"],
        );
        let mut handle = start(&spec, POLL).unwrap();
        wait_for(|| fixture.read("task.stdout.0") == "ready\n").await;
        handle.signal(Signal::SIGUSR1).unwrap();
        wait_for(|| fixture.read("task.stdout.0").contains("got-usr1")).await;
        assert!(is_alive(handle.pid(), handle.start_time()));
        handle.kill(Signal::SIGKILL, Duration::ZERO).await;
        assert_eq!(
            handle.signal(Signal::SIGUSR1).unwrap_err(),
            "Task not running"
        );
    }

    #[tokio::test]
    async fn a_restarted_agent_adopts_the_process_and_gets_its_exit_code() {
        let fixture = Fixture::new();
        let spec = fixture.spec("/bin/sh", &["-c", "sleep 0.3; exit 4"]);
        let handle = start(&spec, POLL).unwrap();
        let (pid, start_time) = (handle.pid(), handle.start_time());
        drop(handle); // the agent goes away; the process keeps running

        assert!(ProcessHandle::adopt(pid, start_time + 1, spec.exit_file.clone(), POLL).is_none());
        let mut adopted = ProcessHandle::adopt(pid, start_time, spec.exit_file.clone(), POLL)
            .expect("the process is still running");
        let result = adopted.wait().await;
        assert_eq!(
            result,
            ExitResult {
                exit_code: 4,
                signal: 0,
                message: None
            }
        );
        assert!(ProcessHandle::adopt(pid, start_time, spec.exit_file.clone(), POLL).is_none());
        assert_eq!(exit_of_vanished(&spec.exit_file).exit_code, 4);
    }

    #[tokio::test]
    async fn an_adopted_process_can_be_killed() {
        let fixture = Fixture::new();
        let spec = fixture.spec("/bin/sh", &["-c", "echo ready; exec sleep 5"]);
        let handle = start(&spec, POLL).unwrap();
        let (pid, start_time) = (handle.pid(), handle.start_time());
        drop(handle);
        wait_for(|| fixture.read("task.stdout.0") == "ready\n").await;
        let mut adopted =
            ProcessHandle::adopt(pid, start_time, spec.exit_file.clone(), POLL).unwrap();
        let (result, _) = adopted.kill(Signal::SIGTERM, Duration::from_secs(2)).await;
        assert_eq!(
            result,
            ExitResult {
                exit_code: 143,
                signal: 15,
                message: None
            }
        );
    }

    #[test]
    fn an_unknown_exit_is_reported_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let result = exit_of_vanished(&dir.path().join("missing"));
        assert_eq!(result.exit_code, -1);
        assert!(!result.successful());
    }

    #[test]
    fn config_is_validated_like_upstream() {
        let config =
            |json: &str| -> BTreeMap<String, Value> { serde_json::from_str(json).unwrap() };
        assert_eq!(
            parse_config(&config(r#"{"command":"/bin/echo","args":["a",1,true]}"#)).unwrap(),
            RawExecConfig {
                command: "/bin/echo".to_owned(),
                args: vec!["a".to_owned(), "1".to_owned(), "true".to_owned()],
                work_dir: None
            }
        );
        assert!(
            parse_config(&config(r#"{"args":["a"]}"#))
                .unwrap_err()
                .contains("\"command\" is required")
        );
        assert!(
            parse_config(&config(r#"{"command":"x","image":"y"}"#))
                .unwrap_err()
                .contains("\"image\" is not expected")
        );
        assert!(
            parse_config(&config(r#"{"command":"x","args":"y"}"#))
                .unwrap_err()
                .contains("list of string required")
        );
    }

    async fn wait_for(mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "condition not met in time");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
