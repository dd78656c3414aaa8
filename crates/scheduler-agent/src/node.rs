//! This client's node: fingerprinting the host (CPU, memory, disk, kernel and OS attributes,
//! the raw_exec driver) into a [`Node`], registering it and keeping it alive with heartbeats.
//!
//! Invariants: the node's ID and SecretID come from the persisted identity (same node across
//! agent restarts); heartbeats go out at half the TTL the server gave; a 404 on a heartbeat
//! means the server forgot the node, so it registers again, and every successful registration
//! bumps the *registration epoch* so the allocation watcher restarts its blocking query from
//! index 0 (a restarted server's index starts over).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use scheduler_structs::{
    DriverInfo, NODE_ELIGIBLE, NODE_STATUS_READY, Node, NodeCpuResources, NodeDiskResources,
    NodeMemoryResources, NodeResources,
};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::AgentConfig;
use crate::backoff::Backoff;
use crate::driver::RAW_EXEC;
use crate::server_client::ServerClient;
use crate::state::NodeIdentity;
use crate::time::{duration_of, now_rfc3339};

/// The Nomad version this client claims to be compatible with (`nomad.version`).
pub(crate) const NOMAD_COMPAT_VERSION: &str = "1.9.0";

/// The TTL assumed when the server gives none.
const DEFAULT_TTL: Duration = Duration::from_secs(10);

/// The shortest pause between heartbeats, whatever the TTL.
const MIN_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// Builds the node this agent registers.
pub(crate) fn fingerprint(config: &AgentConfig, identity: &NodeIdentity) -> Node {
    let host = HostFacts::gather(&config.data_dir);
    let mut attributes = BTreeMap::new();
    let mut attr = |key: &str, value: String| {
        if !value.is_empty() {
            attributes.insert(key.to_owned(), value);
        }
    };
    attr("kernel.name", std::env::consts::OS.to_owned());
    attr("kernel.arch", std::env::consts::ARCH.to_owned());
    attr("kernel.version", host.kernel_version.clone());
    attr("os.name", host.os_name.clone());
    attr("os.version", host.os_version.clone());
    attr("cpu.arch", go_arch(std::env::consts::ARCH).to_owned());
    attr("cpu.numcores", host.cores.to_string());
    attr("cpu.frequency", host.mhz.to_string());
    attr("cpu.totalcompute", host.total_mhz().to_string());
    attr("cpu.modelname", host.cpu_model.clone());
    attr("memory.totalbytes", host.memory_bytes.to_string());
    attr("unique.hostname", host.hostname.clone());
    attr("unique.storage.volume", host.volume.clone());
    attr(
        "unique.storage.bytestotal",
        host.disk_total_bytes.to_string(),
    );
    attr("unique.storage.bytesfree", host.disk_free_bytes.to_string());
    attr("nomad.version", NOMAD_COMPAT_VERSION.to_owned());
    attr("cairn.version", env!("CARGO_PKG_VERSION").to_owned());
    attr("driver.raw_exec", "1".to_owned());
    if let Some(ip) = advertised_ip(&config.http_addr) {
        attr("unique.network.ip-address", ip);
    }

    let mut drivers = BTreeMap::new();
    drivers.insert(
        RAW_EXEC.to_owned(),
        DriverInfo {
            attributes: BTreeMap::from([("driver.raw_exec".to_owned(), "1".to_owned())]),
            detected: true,
            healthy: true,
            health_description: "Healthy".to_owned(),
            update_time: Some(now_rfc3339()),
        },
    );

    // The exec driver is detected when this host can isolate tasks (docs/design.md §D5).
    let exec_problem = crate::driver::exec::unavailable_reason();
    if exec_problem.is_none() {
        attr("driver.exec", "1".to_owned());
    }
    drivers.insert(
        crate::driver::EXEC.to_owned(),
        DriverInfo {
            attributes: if exec_problem.is_none() {
                BTreeMap::from([("driver.exec".to_owned(), "1".to_owned())])
            } else {
                BTreeMap::new()
            },
            detected: exec_problem.is_none(),
            healthy: exec_problem.is_none(),
            health_description: exec_problem.unwrap_or_else(|| "Healthy".to_owned()),
            update_time: Some(now_rfc3339()),
        },
    );

    let cores = i64::try_from(host.cores).unwrap_or(i64::MAX);
    Node {
        id: identity.id.clone(),
        secret_id: identity.secret_id.clone(),
        datacenter: config.datacenter.clone(),
        name: config.node_name.clone(),
        node_pool: config.node_pool.clone(),
        http_addr: config.http_addr.clone(),
        attributes,
        node_resources: NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: i64::try_from(host.total_mhz()).unwrap_or(i64::MAX),
                total_cpu_cores: cores,
                reservable_cpu_cores: (0..cores).collect(),
            },
            memory: NodeMemoryResources {
                memory_mb: i64::try_from(host.memory_bytes / (1024 * 1024)).unwrap_or(i64::MAX),
            },
            disk: NodeDiskResources {
                disk_mb: i64::try_from(host.disk_free_bytes / (1024 * 1024)).unwrap_or(i64::MAX),
            },
            networks: Vec::new(),
            min_dynamic_port: 20_000,
            max_dynamic_port: 32_000,
        },
        meta: config.meta.clone(),
        node_class: config.node_class.clone(),
        drivers,
        scheduling_eligibility: NODE_ELIGIBLE.to_owned(),
        status: NODE_STATUS_READY.to_owned(),
        status_updated_at: stdx::time::unix_now_nanos() / 1_000_000_000,
        ..Node::default()
    }
}

/// Registers the node, then heartbeats until `shutdown`, registering again whenever the
/// server no longer knows it. Each successful registration increments `epoch`.
pub(crate) async fn maintain(
    client: &ServerClient,
    node: &Node,
    epoch: &watch::Sender<u64>,
    shutdown: &CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(250), Duration::from_secs(10));
    let mut ttl: Option<Duration> = None;
    let mut next = Instant::now();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep_until(next) => {}
        }
        match ttl {
            None => match client.register(node).await {
                Ok(response) => {
                    let given = ttl_of(response.heartbeat_ttl);
                    tracing::info!(node_id = %node.id, ttl = ?given, "node registered");
                    ttl = Some(given);
                    backoff.reset();
                    epoch.send_modify(|epoch| *epoch += 1);
                    next = Instant::now() + heartbeat_interval(given);
                }
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(%error, retry_in = ?delay, "node registration failed");
                    next = Instant::now() + delay;
                }
            },
            Some(current) => match client.heartbeat(&node.id).await {
                Ok(response) => {
                    let given = ttl_of(response.heartbeat_ttl);
                    ttl = Some(given);
                    backoff.reset();
                    next = Instant::now() + heartbeat_interval(given);
                }
                Err(error) if error.is_not_found() => {
                    tracing::warn!(node_id = %node.id, "the server does not know this node; registering again");
                    ttl = None;
                    next = Instant::now();
                }
                Err(error) => {
                    let delay = backoff.next_delay().min(heartbeat_interval(current));
                    tracing::warn!(%error, retry_in = ?delay, "heartbeat failed");
                    next = Instant::now() + delay;
                }
            },
        }
    }
}

fn ttl_of(nanos: i64) -> Duration {
    if nanos <= 0 {
        DEFAULT_TTL
    } else {
        duration_of(nanos)
    }
}

fn heartbeat_interval(ttl: Duration) -> Duration {
    (ttl / 2).max(MIN_HEARTBEAT_INTERVAL)
}

/// Go's `GOARCH` name for a Rust target architecture.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// The host part of `host:port` when it is an IP address.
fn advertised_ip(http_addr: &str) -> Option<String> {
    let without_scheme = http_addr.split("://").last().unwrap_or(http_addr);
    let host = without_scheme.split('/').next().unwrap_or_default();
    if let Ok(addr) = host.parse::<std::net::SocketAddr>() {
        return Some(addr.ip().to_string());
    }
    host.parse::<std::net::IpAddr>()
        .ok()
        .map(|ip| ip.to_string())
}

/// What the host offers, read from `/proc`, `/etc/os-release` and `statvfs`.
#[derive(Debug, Default)]
struct HostFacts {
    cores: u64,
    mhz: u64,
    cpu_model: String,
    memory_bytes: u64,
    disk_free_bytes: u64,
    disk_total_bytes: u64,
    volume: String,
    kernel_version: String,
    os_name: String,
    os_version: String,
    hostname: String,
}

impl HostFacts {
    fn gather(data_dir: &Path) -> HostFacts {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let field = |name: &str| {
            cpuinfo.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim().to_owned())
            })
        };
        let mhz = field("cpu MHz")
            .and_then(|mhz| mhz.parse::<f64>().ok())
            .map(|mhz| mhz.round() as u64)
            .or_else(|| {
                read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .map(|khz| khz / 1000)
            })
            .filter(|mhz| *mhz > 0)
            .unwrap_or(1000);
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find_map(|line| {
                let rest = line.strip_prefix("MemTotal:")?;
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kb| kb * 1024);
        let (disk_free_bytes, disk_total_bytes) = match nix::sys::statvfs::statvfs(data_dir) {
            Ok(stat) => {
                let unit = stat.fragment_size();
                (stat.blocks_available() * unit, stat.blocks() * unit)
            }
            Err(_) => (0, 0),
        };
        let os_release = read("/etc/os-release");
        let os_field = |name: &str| {
            os_release.lines().find_map(|line| {
                let value = line.strip_prefix(name)?.strip_prefix('=')?;
                Some(value.trim_matches('"').to_owned())
            })
        };
        HostFacts {
            cores,
            mhz,
            cpu_model: field("model name").unwrap_or_default(),
            memory_bytes,
            disk_free_bytes,
            disk_total_bytes,
            volume: mount_source(data_dir).unwrap_or_default(),
            kernel_version: read("/proc/sys/kernel/osrelease").trim().to_owned(),
            os_name: os_field("ID").unwrap_or_default(),
            os_version: os_field("VERSION_ID").unwrap_or_default(),
            hostname: read("/proc/sys/kernel/hostname").trim().to_owned(),
        }
    }

    fn total_mhz(&self) -> u64 {
        self.cores * self.mhz
    }
}

/// The device mounted at the longest mount point containing `path`.
fn mount_source(path: &Path) -> Option<String> {
    let path = path.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let source = fields.next()?;
            let target = fields.next()?;
            path.starts_with(target)
                .then(|| (target.len(), source.to_owned()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, source)| source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_describes_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = AgentConfig::new(
            vec!["http://127.0.0.1:4646".to_owned()],
            dir.path().to_path_buf(),
        );
        config.node_name = "box-1".to_owned();
        config.http_addr = "127.0.0.1:4646".to_owned();
        config.meta.insert("rack".to_owned(), "r1".to_owned());
        let identity = NodeIdentity {
            id: "id".to_owned(),
            secret_id: "secret".to_owned(),
        };
        let node = fingerprint(&config, &identity);
        assert_eq!(node.id, "id");
        assert_eq!(node.secret_id, "secret");
        assert_eq!(node.name, "box-1");
        assert_eq!(node.datacenter, "dc1");
        assert_eq!(node.node_pool, "default");
        assert_eq!(node.status, "ready");
        assert_eq!(node.meta["rack"], "r1");
        assert_eq!(node.attributes["kernel.name"], "linux");
        assert_eq!(node.attributes["driver.raw_exec"], "1");
        assert_eq!(node.attributes["nomad.version"], NOMAD_COMPAT_VERSION);
        assert_eq!(node.attributes["unique.network.ip-address"], "127.0.0.1");
        assert!(node.has_driver("raw_exec"));
        let cores: i64 = node.attributes["cpu.numcores"].parse().unwrap();
        assert_eq!(node.node_resources.cpu.total_cpu_cores, cores);
        assert!(node.node_resources.cpu.cpu_shares >= cores);
        assert_eq!(
            node.attributes["cpu.totalcompute"],
            node.node_resources.cpu.cpu_shares.to_string()
        );
        assert!(node.node_resources.memory.memory_mb > 0);
        assert!(node.node_resources.disk.disk_mb > 0);
    }

    #[test]
    fn arch_and_addresses() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(advertised_ip("10.1.2.3:4646").as_deref(), Some("10.1.2.3"));
        assert_eq!(
            advertised_ip("http://10.1.2.3:4646").as_deref(),
            Some("10.1.2.3")
        );
        assert_eq!(advertised_ip("localhost:4646"), None);
    }
}
