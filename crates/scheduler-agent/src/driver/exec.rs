//! The `exec` driver (Linux, agent running as root): the task runs isolated, in its own mount,
//! PID and IPC namespaces, with the task directory as its root and CPU and memory limits in a
//! per-task cgroup (`cgroups.rs`). `raw_exec` stays unisolated.
//!
//! How (no `unsafe`, no `pre_exec`: the workspace forbids unsafe code, so namespaces are entered
//! with util-linux's `unshare` and the root is switched with `pivot_root`, both run by a POSIX-sh
//! script, as the raw_exec driver's wrapper is):
//!
//! ```text
//! unshare --mount --pid --ipc --propagation private -- /bin/sh -c OUTER ...
//!   OUTER  (old PID namespace, new mount namespace; the process-group leader the agent tracks):
//!          traps the catchable signals with a no-op, opens the exit file as fd 9, joins the
//!          task's cgroups (`echo 0 > cgroup.procs`, a builtin, before any fork), then runs
//!   INIT   (its first child, so PID 1 of the new PID namespace): builds the root — the task
//!          directory with the host's /usr, /etc (and /bin, /lib, /lib64, /sbin, as symlinks when
//!          the host's are) bound read-only, the allocation's shared directory at /alloc, a small
//!          /dev (null, zero, full, random, urandom, tty, a tmpfs /dev/shm) and a /proc of the new
//!          PID namespace — then `pivot_root`s into it, detaches the old root and runs the task
//!          as its child (PID 2) through `setpriv`, which drops the capability bounding set to
//!          upstream's default `allow_caps` (no CAP_SYS_ADMIN: the task cannot remount /usr
//!          read-write or mount anything) and switches to the task's `user` when one is set;
//!          when the task ends, INIT exits with its status, and OUTER writes it to fd 9.
//! ```
//!
//! Signals from the agent go to the process group (OUTER, INIT and the task); OUTER and INIT
//! ignore them through their no-op traps (INIT needs a handler anyway: PID 1 only receives
//! signals it handles), so the task sees the kill signal with its default disposition. When
//! INIT exits, the kernel kills whatever is left in the PID namespace; the mounts vanish with the
//! mount namespace. The exit status thus survives agent restarts exactly as raw_exec's does.
//!
//! Invariants: nothing of the host is writable inside but the task's own directories and the
//! allocation's shared directory; the cgroups exist before the task starts and are removed once
//! its process is gone (also after an agent restart, through the list file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cgroups::{self, Limits, TaskCgroups};
use super::raw_exec::{self, LaunchSpec, RawExecConfig};

/// Host directories bound read-only into the task's root (symlinked when the host's is one).
const HOST_DIRS: &[&str] = &["usr", "etc", "bin", "lib", "lib64", "sbin"];

/// Upstream's default `allow_caps` for exec: the task's capability bounding set.
const DEFAULT_CAPS: &str = "+audit_write,+chown,+dac_override,+fowner,+fsetid,+kill,+mknod,+net_bind_service,+net_raw,+setfcap,+setgid,+setpcap,+setuid,+sys_chroot";

/// Config keys upstream's exec driver accepts beyond raw_exec's shape.
const EXEC_ONLY_KEYS: &[&str] = &["pid_mode", "ipc_mode", "cap_add", "cap_drop"];

/// OUTER (see the module doc). Arguments: exit file, root, shared dir, user, work dir, the
/// number of cgroup dirs, the dirs, then the command line.
const OUTER: &str = r#"f=$1; root=$2; shared=$3; user=$4; wd=$5; n=$6; shift 6
trap : HUP INT QUIT ABRT USR1 USR2 ALRM TERM XCPU XFSZ VTALRM PROF IO PWR SYS 2>/dev/null || trap : HUP INT QUIT TERM USR1 USR2 ALRM
exec 9>"$f"
while [ "$n" -gt 0 ]; do echo 0 > "$1/cgroup.procs" || exit 125; shift; n=$((n-1)); done
/bin/sh -c "$INIT" cairn-init "$root" "$shared" "$user" "$wd" "$@"
c=$?; printf '%s\n' "$c" >&9; exit "$c""#;

/// INIT (see the module doc), spliced into OUTER as one quoted word in place of `"$INIT"`
/// (an environment variable would leak to the task).
const INIT: &str = r#"trap : HUP INT QUIT ABRT USR1 USR2 ALRM TERM XCPU XFSZ VTALRM PROF IO PWR SYS 2>/dev/null || trap : HUP INT QUIT TERM USR1 USR2 ALRM
root=$1; shared=$2; user=$3; wd=$4; shift 4
tp=$PATH; PATH=/usr/sbin:/usr/bin:/sbin:/bin
fail() { echo "cairn exec: setting up the task's root failed: $1" >&2; exit 125; }
mount --bind "$root" "$root" || fail "bind $root"
for d in HOSTDIRS; do
  if [ -L "/$d" ]; then
    [ -L "$root/$d" ] || ln -s "$(readlink "/$d")" "$root/$d" || fail "link /$d"
  elif [ -d "/$d" ]; then
    mkdir -p "$root/$d" && mount --bind -o ro "/$d" "$root/$d" || fail "bind /$d"
  fi
done
mkdir -p "$root/alloc" "$root/proc" "$root/dev" || fail "mount points"
mount --bind "$shared" "$root/alloc" || fail "bind the alloc dir"
mount -t tmpfs -o nosuid,noexec,mode=755 tmpfs "$root/dev" || fail "mount /dev"
for d in null zero full random urandom tty; do
  touch "$root/dev/$d" && mount --bind "/dev/$d" "$root/dev/$d" || fail "bind /dev/$d"
done
mkdir -p "$root/dev/shm" && mount -t tmpfs -o nosuid,nodev,mode=1777 shm "$root/dev/shm" || fail "mount /dev/shm"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc" || fail "mount /proc"
cd "$root" && mkdir -p .oldroot && pivot_root . .oldroot || fail "pivot_root"
cd / && umount -l /.oldroot && rmdir /.oldroot || fail "detach the old root"
cd "$wd" || fail "work dir $wd"
PATH=$tp
if [ -n "$user" ]; then
  gid=$(/usr/bin/id -g "$user") || fail "unknown user $user"
  /usr/bin/setpriv --reuid="$user" --regid="$gid" --init-groups --bounding-set=-all,CAPS --inh-caps=-all -- "$@"
else
  /usr/bin/setpriv --bounding-set=-all,CAPS --inh-caps=-all -- "$@"
fi"#;

/// What the exec driver needs beyond a raw_exec launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Isolation {
    /// The cgroup name (`cairn-<alloc id>-<task>`).
    pub(crate) cgroup_name: String,
    pub(crate) limits: Limits,
    /// The allocation's shared directory, bound at `/alloc`.
    pub(crate) shared_dir: PathBuf,
    /// The task's `user`; empty runs it as root without the dangerous capabilities.
    pub(crate) user: String,
    /// `pid_mode = "host"` / `ipc_mode = "host"` keep the host's namespace.
    pub(crate) host_pid: bool,
    pub(crate) host_ipc: bool,
}

/// Validates and decodes an exec task's `config`: raw_exec's keys plus `pid_mode` and
/// `ipc_mode` (`private` or `host`); `cap_add`/`cap_drop` are accepted and not applied.
pub(crate) fn parse_config(
    config: &BTreeMap<String, Value>,
) -> Result<(RawExecConfig, bool, bool), String> {
    let mode = |key: &str| -> Result<bool, String> {
        match config.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::String(mode)) if mode.is_empty() || mode == "private" => Ok(false),
            Some(Value::String(mode)) if mode == "host" => Ok(true),
            Some(other) => Err(format!(
                "failed to parse config: {key} must be \"private\" or \"host\", got {other}"
            )),
        }
    };
    let host_pid = mode("pid_mode")?;
    let host_ipc = mode("ipc_mode")?;
    let rest: BTreeMap<String, Value> = config
        .iter()
        .filter(|(key, _)| !EXEC_ONLY_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    Ok((raw_exec::parse_config(&rest)?, host_pid, host_ipc))
}

/// Why this host cannot run exec tasks, or `None` when it can.
pub(crate) fn unavailable_reason() -> Option<String> {
    if !running_as_root() {
        return Some("the exec driver needs the agent to run as root".to_owned());
    }
    for tool in ["/usr/bin/unshare", "/usr/bin/setpriv"] {
        if !Path::new(tool).exists() {
            return Some(format!("the exec driver needs {tool} (util-linux)"));
        }
    }
    if find_tool("pivot_root").is_none() {
        return Some("the exec driver needs pivot_root (util-linux)".to_owned());
    }
    cgroups::unavailable_reason()
}

/// Whether the effective uid is 0 (`/proc/self/status`; no `unsafe` getuid call).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1).map(|euid| euid == "0"))
        .unwrap_or(false)
}

fn find_tool(name: &str) -> Option<PathBuf> {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(name))
        .find(|path| path.exists())
}

/// The path of `binary` (resolved on the host) inside the task's root.
fn path_inside(task_dir: &Path, binary: &Path) -> Result<PathBuf, String> {
    if let Ok(relative) = binary.strip_prefix(task_dir) {
        return Ok(Path::new("/").join(relative));
    }
    let under_host_dir = HOST_DIRS
        .iter()
        .any(|dir| binary.starts_with(Path::new("/").join(dir)));
    if under_host_dir {
        Ok(binary.to_path_buf())
    } else {
        Err(format!(
            "binary {} is not inside the task's root (the task directory, /usr, /bin, /lib, /etc)",
            binary.display()
        ))
    }
}

/// Starts `spec` in the sandbox `isolation` describes.
pub(crate) fn launch(
    spec: &LaunchSpec,
    poll_interval: std::time::Duration,
    isolation: &Isolation,
) -> Result<raw_exec::ProcessHandle, String> {
    raw_exec::launch(
        spec,
        poll_interval,
        Some(&|spec: &LaunchSpec, binary: &Path| command(spec, isolation, binary)),
    )
}

/// The sandboxed command for `spec` and the task's fresh cgroups.
fn command(
    spec: &LaunchSpec,
    isolation: &Isolation,
    binary: &Path,
) -> Result<(tokio::process::Command, TaskCgroups), String> {
    if let Some(reason) = unavailable_reason() {
        return Err(reason);
    }
    let inside = path_inside(&spec.task_dir, binary)?;
    let work_dir = match &spec.work_dir {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => Path::new("/").join(dir),
        None => PathBuf::from("/"),
    };
    let cgroups = cgroups::create(&isolation.cgroup_name, isolation.limits)?;
    if let Err(error) = cgroups::save_list(&spec.exit_file, &cgroups) {
        cgroups::remove(&cgroups);
        return Err(error);
    }
    let init = INIT
        .replace("HOSTDIRS", &HOST_DIRS.join(" "))
        .replace("CAPS", DEFAULT_CAPS);
    let mut command = tokio::process::Command::new("/usr/bin/unshare");
    command.arg("--mount");
    if !isolation.host_pid {
        command.arg("--pid");
    }
    if !isolation.host_ipc {
        command.arg("--ipc");
    }
    command
        .args(["--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(OUTER.replace("\"$INIT\"", &shell_quote(&init)))
        .arg("cairn-task")
        .arg(&spec.exit_file)
        .arg(&spec.task_dir)
        .arg(&isolation.shared_dir)
        .arg(&isolation.user)
        .arg(&work_dir)
        .arg(cgroups.dirs.len().to_string())
        .args(&cgroups.dirs)
        .arg(&inside)
        .args(&spec.args)
        .current_dir(&spec.task_dir);
    Ok((command, cgroups))
}

/// `text` as one single-quoted POSIX-sh word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binaries_map_into_the_root() {
        let task = Path::new("/data/alloc/a1/web");
        assert_eq!(
            path_inside(task, Path::new("/data/alloc/a1/web/local/run.sh")).unwrap(),
            PathBuf::from("/local/run.sh")
        );
        assert_eq!(
            path_inside(task, Path::new("/usr/bin/env")).unwrap(),
            PathBuf::from("/usr/bin/env")
        );
        assert!(path_inside(task, Path::new("/opt/tool")).is_err());
    }

    #[test]
    fn exec_config_takes_namespace_modes() {
        let config: BTreeMap<String, Value> = serde_json::from_str(
            r#"{"command":"/bin/true","pid_mode":"host","ipc_mode":"private"}"#,
        )
        .unwrap();
        let (parsed, host_pid, host_ipc) = parse_config(&config).unwrap();
        assert_eq!(parsed.command, "/bin/true");
        assert!(host_pid && !host_ipc);
        let bad: BTreeMap<String, Value> =
            serde_json::from_str(r#"{"command":"/bin/true","pid_mode":"shared"}"#).unwrap();
        assert!(parse_config(&bad).is_err());
    }

    /// A task dir layout like the agent's and a launch of `script` under `sh -c` in the sandbox.
    struct Sandbox {
        dir: tempfile::TempDir,
    }

    impl Sandbox {
        fn new() -> Sandbox {
            let dir = tempfile::tempdir().unwrap();
            for sub in [
                "alloc/web/local",
                "alloc/web/secrets",
                "alloc/web/tmp",
                "alloc/alloc/logs",
                "alloc/alloc/data",
            ] {
                std::fs::create_dir_all(dir.path().join(sub)).unwrap();
            }
            Sandbox { dir }
        }

        fn spec(&self, script: &str) -> LaunchSpec {
            let root = self.dir.path();
            LaunchSpec {
                command: "/bin/sh".to_owned(),
                args: vec!["-c".to_owned(), script.to_owned()],
                env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
                task_dir: root.join("alloc/web"),
                work_dir: None,
                stdout: root.join("alloc/alloc/logs/web.stdout.0"),
                stderr: root.join("alloc/alloc/logs/web.stderr.0"),
                exit_file: root.join("state/web.exit"),
            }
        }

        fn isolation(&self, name: &str, memory_mb: i64) -> Isolation {
            Isolation {
                cgroup_name: format!("cairn-test-{name}-{}", std::process::id()),
                limits: Limits {
                    cpu_mhz: 500,
                    memory_mb,
                    memory_max_mb: 0,
                },
                shared_dir: self.dir.path().join("alloc/alloc"),
                user: String::new(),
                host_pid: false,
                host_ipc: false,
            }
        }

        fn stdout(&self) -> String {
            std::fs::read_to_string(self.dir.path().join("alloc/alloc/logs/web.stdout.0"))
                .unwrap_or_default()
        }
    }

    /// Runs `script` isolated; `None` (and a note) when this host cannot isolate tasks.
    async fn run(
        sandbox: &Sandbox,
        name: &str,
        memory_mb: i64,
        script: &str,
    ) -> Option<(super::super::ExitResult, TaskCgroups)> {
        if let Some(reason) = unavailable_reason() {
            eprintln!("exec driver unavailable here ({reason}); the sandbox is not exercised");
            return None;
        }
        let isolation = sandbox.isolation(name, memory_mb);
        let spec = sandbox.spec(script);
        let mut handle = launch(&spec, std::time::Duration::from_millis(20), &isolation).unwrap();
        let cgroups = cgroups::load_list(&spec.exit_file).expect("the cgroups are listed");
        let result = tokio::time::timeout(std::time::Duration::from_secs(20), handle.wait())
            .await
            .expect("the task ends");
        Some((result, cgroups))
    }

    #[tokio::test]
    async fn an_exec_task_sees_only_its_own_pids_and_root() {
        let sandbox = Sandbox::new();
        let script = "echo $(ls /proc | grep '^[0-9]*$'); ls /; \
            touch /usr/cairn-probe 2>/dev/null && echo usr-writable || echo usr-readonly; \
            mount -o remount,rw /usr 2>/dev/null && echo remounted || echo no-remount; \
            echo data > /local/out; echo shared > /alloc/data/out; echo \"$NOMAD_TASK_DIR\"";
        let Some((result, cgroups)) = run(&sandbox, "view", 64, script).await else {
            return;
        };
        let stderr =
            std::fs::read_to_string(sandbox.dir.path().join("alloc/alloc/logs/web.stderr.0"))
                .unwrap_or_default();
        assert!(result.successful(), "{result:?} {stderr}");
        let stdout = sandbox.stdout();
        let lines: Vec<&str> = stdout.lines().collect();
        // /proc lists only the namespace's processes (its init, PID 1, the shell and the
        // pipeline), never the host's (this test's own pid is not there).
        let pids: Vec<u32> = lines[0]
            .split_whitespace()
            .map(|pid| pid.parse().unwrap())
            .collect();
        assert!(pids.contains(&1), "{stdout}");
        assert!(pids.len() <= 5, "{stdout}");
        assert!(!pids.contains(&std::process::id()), "{stdout}");
        for entry in ["alloc", "etc", "local", "proc", "secrets", "tmp", "usr"] {
            assert!(lines.contains(&entry), "{entry} missing: {stdout}");
        }
        assert!(stdout.contains("usr-readonly"), "{stdout}");
        assert!(stdout.contains("no-remount"), "{stdout}");
        assert!(!Path::new("/usr/cairn-probe").exists());
        let task_dir = sandbox.dir.path().join("alloc/web");
        assert_eq!(
            std::fs::read_to_string(task_dir.join("local/out")).unwrap(),
            "data\n"
        );
        assert_eq!(
            std::fs::read_to_string(sandbox.dir.path().join("alloc/alloc/data/out")).unwrap(),
            "shared\n"
        );
        // The cgroups are gone once the task is.
        assert!(cgroups.dirs.iter().all(|dir| !dir.exists()));
    }

    #[tokio::test]
    async fn memory_limits_are_set_and_an_exceeding_task_is_oom_killed() {
        let sandbox = Sandbox::new();
        // The shell reads its own limit from the cgroup it runs in, then a pipeline holds
        // 200 MiB in `tail` (a line that never ends), past the 48 MiB limit.
        let script =
            "cat /proc/self/cgroup > /local/cgroup; head -c 200000000 /dev/zero | tail; exit 0";
        let isolation = sandbox.isolation("oom", 48);
        if unavailable_reason().is_some() {
            return;
        }
        let spec = sandbox.spec(script);
        let mut handle = launch(&spec, std::time::Duration::from_millis(20), &isolation).unwrap();
        let cgroups = cgroups::load_list(&spec.exit_file).unwrap();
        let memory_dir = &cgroups.dirs[0];
        let limit = match cgroups.version {
            cgroups::Version::V2 => std::fs::read_to_string(memory_dir.join("memory.max")),
            cgroups::Version::V1 => {
                std::fs::read_to_string(memory_dir.join("memory.limit_in_bytes"))
            }
        }
        .unwrap();
        assert_eq!(limit.trim(), (48 * 1024 * 1024).to_string());
        let result = tokio::time::timeout(std::time::Duration::from_secs(20), handle.wait())
            .await
            .unwrap();
        assert_eq!(result.message.as_deref(), Some(super::super::OOM_KILLED));
        let seen =
            std::fs::read_to_string(sandbox.dir.path().join("alloc/web/local/cgroup")).unwrap();
        assert!(seen.contains(&isolation.cgroup_name), "{seen}");
        assert!(!memory_dir.exists());
    }

    #[tokio::test]
    async fn a_kill_signal_reaches_the_task_and_its_status_is_recorded() {
        let sandbox = Sandbox::new();
        if unavailable_reason().is_some() {
            return;
        }
        let isolation = sandbox.isolation("kill", 64);
        let spec =
            sandbox.spec("trap 'echo bye; exit 7' TERM; echo ready; while :; do sleep 0.05; done");
        let mut handle = launch(&spec, std::time::Duration::from_millis(20), &isolation).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !sandbox.stdout().contains("ready") {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let (result, error) = handle
            .kill(
                nix::sys::signal::Signal::SIGTERM,
                std::time::Duration::from_secs(5),
            )
            .await;
        assert_eq!(error, None);
        assert_eq!(result.exit_code, 7, "{result:?}");
        assert!(sandbox.stdout().contains("bye"));
        assert_eq!(
            std::fs::read_to_string(&spec.exit_file).unwrap().trim(),
            "7"
        );
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
