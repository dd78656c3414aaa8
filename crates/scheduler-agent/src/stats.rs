//! Resource statistics the client reports to the server's `/v1/client/allocation/:id/stats`
//! and `/v1/client/stats` calls: per task, the memory and CPU of its processes (the task's
//! wrapper and every descendant, read from `/proc`, as Nomad's executor measures tasks without
//! cgroup accounting: `RSS`, `Swap` and `System Mode`, `User Mode`, `Percent`), summed per
//! allocation (Nomad's `AllocResourceUsage`); and for the host its memory (`/proc/meminfo`),
//! per-CPU usage (`/proc/stat`), the disk holding the allocation directories and its uptime
//! (Nomad's `HostStats`).
//!
//! CPU percentages are measured over a short window ([`SAMPLE`]) between two readings of the
//! same counters; `TotalTicks` is the CPU used in MHz (percent of one core times the node's
//! MHz per core), as upstream.
//!
//! Invariants: read-only (nothing here changes a process or a file); a process that exits
//! between two readings simply stops counting; an unknown allocation is a 404 and a task with
//! no running process reports zeros.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::Shared;
use crate::state::is_safe_component;
use crate::tunnel::{ClientCall, Refusal, param_str};

/// The window CPU usage is measured over.
const SAMPLE: Duration = Duration::from_millis(100);

/// Upstream's measured fields for tasks without cgroup accounting.
const MEASURED_MEMORY: [&str; 2] = ["RSS", "Swap"];
const MEASURED_CPU: [&str; 3] = ["System Mode", "User Mode", "Percent"];

/// One process's counters.
#[derive(Debug, Clone, Copy, Default)]
struct ProcSample {
    /// Clock ticks in user and system mode.
    user: u64,
    system: u64,
    rss: u64,
    swap: u64,
    max_rss: u64,
}

/// Clock ticks per second of `/proc` counters (Linux's `USER_HZ`, fixed at 100 for
/// userspace whatever the kernel's own tick rate).
const USER_HZ: f64 = 100.0;

/// Parent of every process (pid → ppid).
fn parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(fields) = stat_fields(pid)
            && let Some(ppid) = fields.get(1).and_then(|f| f.parse::<i32>().ok())
        {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The fields of `/proc/<pid>/stat` after the command name (state first).
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 1..)?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `root` and all its descendants.
fn tree(root: i32, parents: &HashMap<i32, i32>) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (pid, ppid) in parents {
        children.entry(*ppid).or_default().push(*pid);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![root];
    while let Some(pid) = stack.pop() {
        if !parents.contains_key(&pid) || !seen.insert(pid) {
            continue;
        }
        out.push(pid);
        if let Some(kids) = children.get(&pid) {
            stack.extend(kids);
        }
    }
    out
}

fn sample(pid: i32) -> Option<ProcSample> {
    let fields = stat_fields(pid)?;
    // After the name: state(0) ppid(1) ... utime(11) stime(12).
    let number = |index: usize| {
        fields
            .get(index)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut out = ProcSample {
        user: number(11),
        system: number(12),
        ..ProcSample::default()
    };
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in status.lines() {
            let kib = |line: &str| {
                line.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
                    .saturating_mul(1024)
            };
            if line.starts_with("VmRSS:") {
                out.rss = kib(line);
            } else if line.starts_with("VmSwap:") {
                out.swap = kib(line);
            } else if line.starts_with("VmHWM:") {
                out.max_rss = kib(line);
            }
        }
    }
    Some(out)
}

/// The summed counters of each task's processes (task → sample), read now.
fn sample_tasks(roots: &BTreeMap<String, Option<i32>>) -> BTreeMap<String, ProcSample> {
    let parents = parents();
    roots
        .iter()
        .map(|(task, root)| {
            let mut total = ProcSample::default();
            for pid in root.map(|root| tree(root, &parents)).unwrap_or_default() {
                if let Some(one) = sample(pid) {
                    total.user += one.user;
                    total.system += one.system;
                    total.rss += one.rss;
                    total.swap += one.swap;
                    total.max_rss += one.max_rss;
                }
            }
            (task.clone(), total)
        })
        .collect()
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
        })
}

/// MHz of one core (the node's total over its cores).
fn mhz_per_core(shared: &Shared) -> f64 {
    let cpu = &shared.node.node_resources.cpu;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores = if cpu.total_cpu_cores > 0 {
        usize::try_from(cpu.total_cpu_cores).unwrap_or(cores)
    } else {
        cores
    };
    cpu.cpu_shares as f64 / cores.max(1) as f64
}

fn resource_usage(before: &ProcSample, after: &ProcSample, elapsed: f64, mhz: f64) -> Value {
    let ticks = USER_HZ;
    let percent = |a: u64, b: u64| {
        if elapsed <= 0.0 {
            0.0
        } else {
            b.saturating_sub(a) as f64 / ticks / elapsed * 100.0
        }
    };
    let user = percent(before.user, after.user);
    let system = percent(before.system, after.system);
    let total = user + system;
    json!({
        "MemoryStats": {
            "RSS": after.rss,
            "Cache": 0,
            "MappedFile": 0,
            "Swap": after.swap,
            "Usage": 0,
            "MaxUsage": after.max_rss,
            "KernelUsage": 0,
            "KernelMaxUsage": 0,
            "Measured": MEASURED_MEMORY,
        },
        "CpuStats": {
            "SystemMode": system,
            "UserMode": user,
            "TotalTicks": total / 100.0 * mhz,
            "ThrottledPeriods": 0,
            "ThrottledTime": 0,
            "Percent": total,
            "Measured": MEASURED_CPU,
        },
        "DeviceStats": [],
    })
}

/// `stats/alloc`: `Task` (optional: only that task). Nomad's `AllocResourceUsage`.
pub(crate) async fn alloc_stats(shared: &Shared, call: &ClientCall) -> Result<Value, Refusal> {
    if !is_safe_component(&call.alloc_id) {
        return Err(Refusal::unknown_allocation(&call.alloc_id));
    }
    let record = shared
        .state
        .load_alloc(&call.alloc_id)
        .ok_or_else(|| Refusal::unknown_allocation(&call.alloc_id))?;
    let only = param_str(call, "Task");
    if !only.is_empty() && !record.tasks.contains_key(only) {
        return Err(Refusal::bad_request(format!("unknown task name {only:?}")));
    }
    let live = shared.controls.is_live(&call.alloc_id);
    let roots: BTreeMap<String, Option<i32>> = record
        .tasks
        .iter()
        .filter(|(name, _)| only.is_empty() || name.as_str() == only)
        .map(|(name, task)| (name.clone(), task.local.pid.filter(|_| live)))
        .collect();
    let started = std::time::Instant::now();
    let before = sample_tasks(&roots);
    tokio::time::sleep(SAMPLE).await;
    let after = sample_tasks(&roots);
    let elapsed = started.elapsed().as_secs_f64();
    let timestamp = now_nanos();
    let mhz = mhz_per_core(shared);
    let mut total_before = ProcSample::default();
    let mut total_after = ProcSample::default();
    let mut tasks = serde_json::Map::new();
    for (name, after) in &after {
        let before = before.get(name).copied().unwrap_or_default();
        for (sum, one) in [(&mut total_before, &before), (&mut total_after, after)] {
            sum.user += one.user;
            sum.system += one.system;
            sum.rss += one.rss;
            sum.swap += one.swap;
            sum.max_rss += one.max_rss;
        }
        tasks.insert(
            name.clone(),
            json!({
                "ResourceUsage": resource_usage(&before, after, elapsed, mhz),
                "Timestamp": timestamp,
                "Pids": null,
            }),
        );
    }
    Ok(json!({
        "ResourceUsage": resource_usage(&total_before, &total_after, elapsed, mhz),
        "Tasks": tasks,
        "Timestamp": timestamp,
    }))
}

/// `/proc/stat` per-CPU counters: name → (user, system, idle, total) in ticks.
fn cpu_times() -> Vec<(String, [u64; 4])> {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    text.lines()
        .filter(|line| line.starts_with("cpu") && !line.starts_with("cpu "))
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let name = parts.next()?.to_owned();
            let values: Vec<u64> = parts.filter_map(|v| v.parse().ok()).collect();
            let get = |i: usize| values.get(i).copied().unwrap_or(0);
            // user nice system idle iowait irq softirq steal
            let user = get(0) + get(1);
            let system = get(2) + get(5) + get(6);
            let idle = get(3) + get(4);
            let total = values.iter().take(8).sum();
            Some((name, [user, system, idle, total]))
        })
        .collect()
}

fn meminfo() -> HashMap<String, u64> {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some((key.to_owned(), kib.saturating_mul(1024)))
        })
        .collect()
}

/// Nomad's `DiskStats` of the file system holding `path`.
fn disk_stats(path: &Path) -> Value {
    let Ok(stat) = nix::sys::statvfs::statvfs(path) else {
        return Value::Null;
    };
    let fragment = stat.fragment_size();
    let size = stat.blocks().saturating_mul(fragment);
    let available = stat.blocks_available().saturating_mul(fragment);
    let free = stat.blocks_free().saturating_mul(fragment);
    let used = size.saturating_sub(free);
    let used_percent = if size == 0 {
        0.0
    } else {
        used as f64 / size as f64 * 100.0
    };
    let inodes = stat.files();
    let inodes_free = stat.files_free();
    let inodes_percent = if inodes == 0 {
        0.0
    } else {
        inodes.saturating_sub(inodes_free) as f64 / inodes as f64 * 100.0
    };
    let (device, mountpoint) = mount_of(path);
    json!({
        "Device": device,
        "Mountpoint": mountpoint,
        "Size": size,
        "Used": used,
        "Available": available,
        "UsedPercent": used_percent,
        "InodesUsedPercent": inodes_percent,
    })
}

/// The device and mount point of the longest mount prefix of `path` (`/proc/mounts`).
fn mount_of(path: &Path) -> (String, String) {
    let real = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .filter(|(_, mount)| real.starts_with(mount))
        .max_by_key(|(_, mount)| mount.len())
        .unwrap_or_else(|| (String::new(), "/".to_owned()))
}

/// `stats/host`: Nomad's `HostStats`.
pub(crate) async fn host_stats(shared: &Shared) -> Value {
    let before = cpu_times();
    tokio::time::sleep(SAMPLE).await;
    let after = cpu_times();
    let mut cpus = Vec::new();
    let mut busy_fraction = 0.0;
    for (name, now) in &after {
        let Some((_, then)) = before.iter().find(|(other, _)| other == name) else {
            continue;
        };
        let delta = |i: usize| now[i].saturating_sub(then[i]) as f64;
        let total = delta(3);
        let share = |value: f64| {
            if total > 0.0 {
                value / total * 100.0
            } else {
                0.0
            }
        };
        let (user, system, idle) = (share(delta(0)), share(delta(1)), share(delta(2)));
        busy_fraction += (100.0 - idle) / 100.0;
        cpus.push(json!({
            "CPU": name,
            "User": user,
            "System": system,
            "Idle": idle,
            "Total": 100.0 - idle,
        }));
    }
    let memory = meminfo();
    let get = |key: &str| memory.get(key).copied().unwrap_or(0);
    let total = get("MemTotal");
    let available = get("MemAvailable");
    let uptime = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0, |seconds| seconds as u64);
    let alloc_dirs = shared
        .state
        .alloc_dir("probe")
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let alloc_disk = disk_stats(&alloc_dirs);
    json!({
        "Memory": {
            "Total": total,
            "Available": available,
            "Used": total.saturating_sub(available),
            "Free": get("MemFree"),
        },
        "CPU": cpus,
        "CPUTicksConsumed": busy_fraction * mhz_per_core(shared),
        "DiskStats": if alloc_disk.is_null() { json!([]) } else { json!([alloc_disk.clone()]) },
        "AllocDirStats": alloc_disk,
        "DeviceStats": [],
        "Uptime": uptime,
        "Timestamp": now_nanos(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_tree_counts_its_descendants_only() {
        let parents = HashMap::from([(1, 0), (10, 1), (11, 10), (12, 11), (20, 1)]);
        let mut found = tree(10, &parents);
        found.sort_unstable();
        assert_eq!(found, vec![10, 11, 12]);
        assert!(tree(99, &parents).is_empty());
    }

    #[test]
    fn this_process_has_memory_and_cpu_counters() {
        let me = i32::try_from(std::process::id()).unwrap();
        let sample = sample(me).expect("our own /proc entry");
        assert!(sample.rss > 0);
        assert!(!cpu_times().is_empty());
        assert!(meminfo().get("MemTotal").copied().unwrap_or(0) > 0);
        let disk = disk_stats(Path::new("/"));
        assert!(disk["Size"].as_u64().unwrap_or(0) > 0, "{disk}");
    }
}
