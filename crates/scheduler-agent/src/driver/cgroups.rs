//! Per-task cgroups for the `exec` driver: CPU and memory limits from the task's resources, in
//! cgroup v2 when the unified hierarchy offers the `cpu` and `memory` controllers, else in the
//! cgroup v1 `cpu` and `memory` hierarchies (Nomad's client supports both).
//!
//! Layout and values (upstream's):
//! - v2: `<unified mount>/cairn.slice/<name>` (Nomad's `nomad.slice`; a sibling of the agent's
//!   own cgroup rather than a child, because v2's "no internal processes" rule forbids enabling
//!   controllers below a cgroup that holds processes, as the agent's does): `cpu.weight`
//!   converted from CPU shares as runc does, `memory.max` = `MemoryMaxMB` or `MemoryMB`,
//!   `memory.low` = `MemoryMB` when a maximum is set, `memory.swap.max` = 0;
//! - v1: `<memory mount><agent's own cgroup>/<name>` and the same under the `cpu` mount:
//!   `cpu.shares` = CPU MHz (at least 2), `memory.limit_in_bytes` = `MemoryMaxMB` or `MemoryMB`,
//!   `memory.soft_limit_in_bytes` = `MemoryMB` when a maximum is set, and
//!   `memory.memsw.limit_in_bytes` the same as the limit where swap accounting exists.
//!
//! The task joins its cgroups itself, before it forks anything (the driver's wrapper writes `0`
//! to each `cgroup.procs`), so no process of the task escapes them. The list of directories is
//! written next to the task's exit file, so an agent that re-attached after a restart removes
//! them too. [`remove`] kills what is left inside, reads whether the OOM killer struck, and
//! removes the directories.
//!
//! Invariants: a cgroup is only ever created below the hierarchies found in
//! `/proc/self/mountinfo` with a name the agent chose (`cairn-<alloc id>-<task>`); removal
//! touches only directories listed in that file and only when they lie below a cgroup mount.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup hierarchy holds the task's controllers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    V1,
    V2,
}

/// The task's limits, from its `resources` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// CPU in MHz (Nomad's `cpu`, used as shares).
    pub(crate) cpu_mhz: i64,
    pub(crate) memory_mb: i64,
    /// `memory_max` (oversubscription), 0 when unset.
    pub(crate) memory_max_mb: i64,
}

/// The cgroups created for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskCgroups {
    pub(crate) version: Version,
    /// Every directory the task joins (one for v2, `memory` then `cpu` for v1).
    pub(crate) dirs: Vec<PathBuf>,
}

/// Where the hierarchies are, read from `/proc/self/mountinfo` and `/proc/self/cgroup`.
#[derive(Debug, Clone, Default)]
struct Hierarchies {
    unified: Option<PathBuf>,
    /// v1 mount point of the `memory` controller and the agent's path in it.
    memory: Option<(PathBuf, String)>,
    cpu: Option<(PathBuf, String)>,
}

impl Hierarchies {
    fn discover() -> Hierarchies {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        Hierarchies::parse(&mountinfo, &own)
    }

    /// The hierarchies `mountinfo` (`/proc/self/mountinfo`) mounts, with this process's paths
    /// in the v1 ones from `own` (`/proc/self/cgroup`).
    fn parse(mountinfo: &str, own: &str) -> Hierarchies {
        let own_path = |controller: &str| -> String {
            own.lines()
                .filter_map(|line| {
                    let mut parts = line.splitn(3, ':');
                    let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                    controllers
                        .split(',')
                        .any(|name| name == controller)
                        .then(|| path.to_owned())
                })
                .next()
                .unwrap_or_else(|| "/".to_owned())
        };
        let mut found = Hierarchies::default();
        for line in mountinfo.lines() {
            // `id parent major:minor root mountpoint options... - fstype source superoptions`
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let mount_point = left.split(' ').nth(4).unwrap_or_default();
            let mut right = right.split(' ');
            let fstype = right.next().unwrap_or_default();
            let super_options = right.nth(1).unwrap_or_default();
            match fstype {
                "cgroup2" if found.unified.is_none() => {
                    found.unified = Some(PathBuf::from(mount_point));
                }
                "cgroup" => {
                    let options: Vec<&str> = super_options.split(',').collect();
                    if options.contains(&"memory") && found.memory.is_none() {
                        found.memory = Some((PathBuf::from(mount_point), own_path("memory")));
                    }
                    if options.contains(&"cpu") && found.cpu.is_none() {
                        found.cpu = Some((PathBuf::from(mount_point), own_path("cpu")));
                    }
                }
                _ => {}
            }
        }
        found
    }

    /// The unified hierarchy, when it offers both `cpu` and `memory`.
    fn usable_unified(&self) -> Option<&Path> {
        let unified = self.unified.as_deref()?;
        let controllers =
            std::fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
        let has = |name: &str| controllers.split_whitespace().any(|c| c == name);
        (has("cpu") && has("memory")).then_some(unified)
    }
}

/// Why limits cannot be applied on this host, or `None` when they can: what
/// `driver.exec` reports and what a task start fails with.
pub(crate) fn unavailable_reason() -> Option<String> {
    let found = Hierarchies::discover();
    if found.usable_unified().is_some() || (found.memory.is_some() && found.cpu.is_some()) {
        return None;
    }
    Some(describe(&found))
}

fn describe(found: &Hierarchies) -> String {
    let unified = match (&found.unified, found.usable_unified()) {
        (None, _) => "no cgroup2 mount".to_owned(),
        (Some(path), Some(_)) => format!("cgroup v2 at {} with cpu and memory", path.display()),
        (Some(path), None) => format!(
            "cgroup v2 at {} without the cpu and memory controllers (controllers: {:?}; a controller \
             attached to a cgroup v1 hierarchy cannot be enabled in v2)",
            path.display(),
            std::fs::read_to_string(path.join("cgroup.controllers"))
                .unwrap_or_default()
                .trim()
        ),
    };
    let v1 = |name: &str, entry: &Option<(PathBuf, String)>| match entry {
        Some((mount, own)) => format!("v1 {name} at {} (agent in {own})", mount.display()),
        None => format!("no v1 {name} hierarchy"),
    };
    format!(
        "{unified}; {}; {}",
        v1("memory", &found.memory),
        v1("cpu", &found.cpu)
    )
}

/// runc's conversion of v1 CPU shares to a v2 `cpu.weight`.
pub(crate) fn shares_to_weight(shares: i64) -> i64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// Creates the task's cgroups with `limits` (the task joins them itself).
pub(crate) fn create(name: &str, limits: Limits) -> Result<TaskCgroups, String> {
    create_in(&Hierarchies::discover(), name, limits)
}

/// [`create`] below the hierarchies `found`.
fn create_in(found: &Hierarchies, name: &str, limits: Limits) -> Result<TaskCgroups, String> {
    let shares = limits.cpu_mhz.max(2);
    let limit_mb = if limits.memory_max_mb > 0 {
        limits.memory_max_mb
    } else {
        limits.memory_mb
    };
    let bytes = |mb: i64| (mb.max(1) * 1024 * 1024).to_string();
    if let Some(unified) = found.usable_unified() {
        let slice = unified.join("cairn.slice");
        make_dir(&slice)?;
        // Enable the controllers on the way down; already enabled is fine.
        let _ = std::fs::write(unified.join("cgroup.subtree_control"), "+cpu +memory");
        write(&slice.join("cgroup.subtree_control"), "+cpu +memory")?;
        let dir = slice.join(name);
        make_dir(&dir)?;
        let result = (|| {
            write(
                &dir.join("cpu.weight"),
                &shares_to_weight(shares).to_string(),
            )?;
            write(&dir.join("memory.max"), &bytes(limit_mb))?;
            if limits.memory_max_mb > 0 {
                write(&dir.join("memory.low"), &bytes(limits.memory_mb))?;
            }
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            Ok(())
        })();
        let cgroups = TaskCgroups {
            version: Version::V2,
            dirs: vec![dir],
        };
        return match result {
            Ok(()) => Ok(cgroups),
            Err(error) => {
                remove(&cgroups);
                Err(error)
            }
        };
    }
    let (Some((memory_mount, memory_own)), Some((cpu_mount, cpu_own))) =
        (&found.memory, &found.cpu)
    else {
        return Err(format!(
            "no usable cgroup hierarchy for cpu and memory: {}",
            describe(found)
        ));
    };
    let memory_dir = below(memory_mount, memory_own).join(name);
    let cpu_dir = below(cpu_mount, cpu_own).join(name);
    let mut dirs = vec![memory_dir.clone()];
    if cpu_dir != memory_dir {
        dirs.push(cpu_dir.clone());
    }
    let cgroups = TaskCgroups {
        version: Version::V1,
        dirs,
    };
    let result = (|| {
        for dir in &cgroups.dirs {
            make_dir(dir)?;
        }
        write(&memory_dir.join("memory.limit_in_bytes"), &bytes(limit_mb))?;
        if std::fs::metadata(memory_dir.join("memory.memsw.limit_in_bytes")).is_ok() {
            write(
                &memory_dir.join("memory.memsw.limit_in_bytes"),
                &bytes(limit_mb),
            )?;
        }
        if limits.memory_max_mb > 0 {
            write(
                &memory_dir.join("memory.soft_limit_in_bytes"),
                &bytes(limits.memory_mb),
            )?;
        }
        write(&cpu_dir.join("cpu.shares"), &shares.to_string())
    })();
    match result {
        Ok(()) => Ok(cgroups),
        Err(error) => {
            remove(&cgroups);
            Err(error)
        }
    }
}

fn below(mount: &Path, own: &str) -> PathBuf {
    mount.join(own.trim_start_matches('/'))
}

fn make_dir(dir: &Path) -> Result<(), String> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(error) => Err(format!("creating cgroup {}: {error}", dir.display())),
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|error| format!("writing {}: {error}", path.display()))
}

/// The file listing a task's cgroup directories, next to its exit file.
pub(crate) fn list_file(exit_file: &Path) -> PathBuf {
    exit_file.with_extension("cgroups")
}

/// Records `cgroups` for [`remove_listed`].
pub(crate) fn save_list(exit_file: &Path, cgroups: &TaskCgroups) -> Result<(), String> {
    let text: String = cgroups
        .dirs
        .iter()
        .map(|dir| format!("{}\n", dir.display()))
        .collect();
    write(&list_file(exit_file), &text)
}

/// Whether the OOM killer killed a process in the task's memory cgroup.
pub(crate) fn oom_killed(cgroups: &TaskCgroups) -> bool {
    let Some(dir) = cgroups.dirs.first() else {
        return false;
    };
    let file = match cgroups.version {
        Version::V2 => "memory.events",
        Version::V1 => "memory.oom_control",
    };
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.strip_prefix("oom_kill "))
        .any(|count| count.trim().parse::<u64>().is_ok_and(|n| n > 0))
}

/// Kills what is left in the task's cgroups and removes them (best effort, bounded).
pub(crate) fn remove(cgroups: &TaskCgroups) {
    let deadline = Instant::now() + Duration::from_secs(5);
    for dir in &cgroups.dirs {
        loop {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .lines()
                .filter_map(|line| line.trim().parse::<i32>().ok())
            {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => break,
                Err(error) if Instant::now() >= deadline => {
                    tracing::warn!(cgroup = %dir.display(), %error, "cannot remove a task cgroup");
                    break;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// Reads the list written by [`save_list`], keeping only directories below a cgroup mount.
pub(crate) fn load_list(exit_file: &Path) -> Option<TaskCgroups> {
    let text = std::fs::read_to_string(list_file(exit_file)).ok()?;
    let found = Hierarchies::discover();
    let mounts: Vec<PathBuf> = found
        .unified
        .iter()
        .cloned()
        .chain(found.memory.iter().map(|(mount, _)| mount.clone()))
        .chain(found.cpu.iter().map(|(mount, _)| mount.clone()))
        .collect();
    let dirs: Vec<PathBuf> = text
        .lines()
        .map(PathBuf::from)
        .filter(|dir| {
            dir.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("cairn-"))
                && mounts.iter().any(|mount| dir.starts_with(mount))
        })
        .collect();
    let version = if found
        .unified
        .as_deref()
        .is_some_and(|unified| dirs.iter().all(|dir| dir.starts_with(unified)))
    {
        Version::V2
    } else {
        Version::V1
    };
    (!dirs.is_empty()).then_some(TaskCgroups { version, dirs })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_convert_to_weights_as_runc_does() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(0), 1);
    }

    /// A directory standing in for a cgroup mount: the files the kernel would offer are plain
    /// files here, so this checks the layout and values written, not the kernel's answer.
    fn fake_mount(controllers: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.controllers"), controllers).unwrap();
        dir
    }

    fn read(path: PathBuf) -> String {
        std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    #[test]
    fn the_unified_hierarchy_is_found_and_used_only_with_cpu_and_memory() {
        let mountinfo = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
                         31 23 0:28 / /proc rw - proc proc rw\n";
        let found = Hierarchies::parse(mountinfo, "0::/init.scope\n");
        assert_eq!(found.unified.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(found.memory.is_none() && found.cpu.is_none());

        let without = fake_mount("cpuset io pids");
        let found = Hierarchies {
            unified: Some(without.path().to_path_buf()),
            ..Hierarchies::default()
        };
        assert!(found.usable_unified().is_none());
        let refused = create_in(&found, "t", limits(100, 64, 0)).unwrap_err();
        assert!(
            refused.contains("without the cpu and memory controllers"),
            "{refused}"
        );
    }

    fn limits(cpu_mhz: i64, memory_mb: i64, memory_max_mb: i64) -> Limits {
        Limits {
            cpu_mhz,
            memory_mb,
            memory_max_mb,
        }
    }

    #[test]
    fn v2_limits_are_written_under_cairn_slice() {
        let mount = fake_mount("cpuset cpu io memory pids");
        let found = Hierarchies {
            unified: Some(mount.path().to_path_buf()),
            ..Hierarchies::default()
        };
        let cgroups = create_in(&found, "cairn-a-t", limits(500, 128, 256)).unwrap();
        let dir = mount.path().join("cairn.slice/cairn-a-t");
        assert_eq!(cgroups.version, Version::V2);
        assert_eq!(cgroups.dirs, vec![dir.clone()]);
        assert_eq!(
            read(mount.path().join("cairn.slice/cgroup.subtree_control")),
            "+cpu +memory"
        );
        assert_eq!(
            read(dir.join("cpu.weight")),
            shares_to_weight(500).to_string()
        );
        assert_eq!(
            read(dir.join("memory.max")),
            (256 * 1024 * 1024).to_string()
        );
        assert_eq!(
            read(dir.join("memory.low")),
            (128 * 1024 * 1024).to_string()
        );
        assert_eq!(read(dir.join("memory.swap.max")), "0");

        // Without a maximum the limit is MemoryMB and no low mark is set.
        create_in(&found, "cairn-b-t", limits(100, 64, 0)).unwrap();
        let dir = mount.path().join("cairn.slice/cairn-b-t");
        assert_eq!(read(dir.join("memory.max")), (64 * 1024 * 1024).to_string());
        assert!(!dir.join("memory.low").exists());
    }

    #[test]
    fn v1_limits_are_written_below_the_agents_own_cgroups() {
        let memory = tempfile::tempdir().unwrap();
        let cpu = tempfile::tempdir().unwrap();
        for mount in [&memory, &cpu] {
            // The agent's own cgroup exists, as it does on a real host.
            std::fs::create_dir(mount.path().join("agent")).unwrap();
        }
        let found = Hierarchies {
            unified: None,
            memory: Some((memory.path().to_path_buf(), "/agent".to_owned())),
            cpu: Some((cpu.path().to_path_buf(), "/agent".to_owned())),
        };
        let cgroups = create_in(&found, "cairn-a-t", limits(500, 128, 256)).unwrap();
        let memory_dir = memory.path().join("agent/cairn-a-t");
        let cpu_dir = cpu.path().join("agent/cairn-a-t");
        assert_eq!(cgroups.version, Version::V1);
        assert_eq!(cgroups.dirs, vec![memory_dir.clone(), cpu_dir.clone()]);
        assert_eq!(read(cpu_dir.join("cpu.shares")), "500");
        assert_eq!(
            read(memory_dir.join("memory.limit_in_bytes")),
            (256 * 1024 * 1024).to_string()
        );
        assert_eq!(
            read(memory_dir.join("memory.soft_limit_in_bytes")),
            (128 * 1024 * 1024).to_string()
        );
    }

    #[test]
    fn the_host_description_names_each_hierarchy() {
        let text = describe(&Hierarchies::discover());
        assert!(text.contains("memory"), "{text}");
    }
}
