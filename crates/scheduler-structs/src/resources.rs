//! Resources: what a task asks for (`Resources`), what a node offers (`NodeResources`) and
//! what an allocation holds (`AllocatedResources`), with the arithmetic placement needs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A task's `resources` block (canonical: CPU 100, MemoryMB 300 unless set).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct Resources {
    #[serde(rename = "CPU")]
    pub cpu: i64,
    pub cores: i64,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: i64,
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    #[serde(rename = "IOPS")]
    pub iops: i64,
    pub networks: Vec<NetworkResource>,
    pub devices: Vec<serde_json::Value>,
    #[serde(rename = "NUMA")]
    pub numa: Option<serde_json::Value>,
    #[serde(rename = "SecretsMB")]
    pub secrets_mb: Option<i64>,
}

/// A `network` block (group or task).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetworkResource {
    pub mode: String,
    pub device: String,
    #[serde(rename = "CIDR")]
    pub cidr: String,
    #[serde(rename = "IP")]
    pub ip: String,
    pub hostname: String,
    #[serde(rename = "MBits")]
    pub mbits: i64,
    #[serde(rename = "DNS")]
    pub dns: Option<serde_json::Value>,
    pub reserved_ports: Vec<Port>,
    pub dynamic_ports: Vec<Port>,
}

/// A port label and, once placed, its value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Port {
    pub label: String,
    pub value: i64,
    pub to: i64,
    pub host_network: String,
}

/// The comparable dimensions placement checks: CPU in MHz, memory and disk in MB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparable {
    pub cpu: i64,
    pub memory_mb: i64,
    pub disk_mb: i64,
}

impl Comparable {
    /// Adds `other` (saturating: absurd requests never overflow).
    pub fn add(&mut self, other: &Comparable) {
        self.cpu = self.cpu.saturating_add(other.cpu);
        self.memory_mb = self.memory_mb.saturating_add(other.memory_mb);
        self.disk_mb = self.disk_mb.saturating_add(other.disk_mb);
    }

    /// Subtracts `other` (saturating).
    pub fn subtract(&mut self, other: &Comparable) {
        self.cpu = self.cpu.saturating_sub(other.cpu);
        self.memory_mb = self.memory_mb.saturating_sub(other.memory_mb);
        self.disk_mb = self.disk_mb.saturating_sub(other.disk_mb);
    }

    /// The first dimension in which `self` (what is asked, on top of what is used) exceeds
    /// `capacity`, named as Nomad names it in `DimensionExhausted`.
    pub fn exceeded_dimension(&self, capacity: &Comparable) -> Option<&'static str> {
        if self.cpu > capacity.cpu {
            Some("cpu")
        } else if self.memory_mb > capacity.memory_mb {
            Some("memory")
        } else if self.disk_mb > capacity.disk_mb {
            Some("disk")
        } else {
            None
        }
    }
}

/// What a node offers (Nomad's `NodeResources`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeResources {
    pub cpu: NodeCpuResources,
    pub memory: NodeMemoryResources,
    pub disk: NodeDiskResources,
    pub networks: Vec<NetworkResource>,
    pub min_dynamic_port: i64,
    pub max_dynamic_port: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeCpuResources {
    /// Total MHz across cores.
    pub cpu_shares: i64,
    pub total_cpu_cores: i64,
    pub reservable_cpu_cores: Vec<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeDiskResources {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
}

/// What a node keeps for itself (Nomad's `NodeReservedResources`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedResources {
    pub cpu: NodeCpuResources,
    pub memory: NodeMemoryResources,
    pub disk: NodeDiskResources,
}

impl NodeResources {
    pub fn comparable(&self) -> Comparable {
        Comparable {
            cpu: self.cpu.cpu_shares,
            memory_mb: self.memory.memory_mb,
            disk_mb: self.disk.disk_mb,
        }
    }
}

impl NodeReservedResources {
    pub fn comparable(&self) -> Comparable {
        Comparable {
            cpu: self.cpu.cpu_shares,
            memory_mb: self.memory.memory_mb,
            disk_mb: self.disk.disk_mb,
        }
    }
}

/// What an allocation holds (Nomad's `AllocatedResources`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedResources {
    pub tasks: BTreeMap<String, AllocatedTaskResources>,
    pub shared: AllocatedSharedResources,
    pub task_lifecycles: BTreeMap<String, Option<serde_json::Value>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedTaskResources {
    pub cpu: AllocatedCpuResources,
    pub memory: AllocatedMemoryResources,
    pub networks: Vec<NetworkResource>,
    pub devices: Vec<serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedCpuResources {
    pub cpu_shares: i64,
    pub reserved_cores: Vec<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedSharedResources {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
    pub networks: Vec<NetworkResource>,
    pub ports: Vec<serde_json::Value>,
}

impl AllocatedResources {
    pub fn comparable(&self) -> Comparable {
        let mut total = Comparable {
            disk_mb: self.shared.disk_mb,
            ..Comparable::default()
        };
        for task in self.tasks.values() {
            total.cpu = total.cpu.saturating_add(task.cpu.cpu_shares);
            total.memory_mb = total.memory_mb.saturating_add(task.memory.memory_mb);
        }
        total
    }
}
