//! The client's record of the ports its allocations hold. The server assigns ports at
//! placement (`placement/ports.rs` of the scheduler: static and dynamic, never shared on the
//! node) and its values are kept as they are; this table only fills a dynamic port the server
//! left at 0 (an allocation placed before the server assigned ports), from Nomad's default
//! range ([`MIN_DYNAMIC_PORT`]–[`MAX_DYNAMIC_PORT`]), and an empty network `IP` with the node's
//! address. The task environment (`env.rs`: `NOMAD_PORT_<label>`, `NOMAD_ADDR_<label>`...) and
//! the service registrations (`services.rs`) read the ports from the allocation as upstream's
//! do.
//!
//! Invariants: an allocation keeps its ports for its whole life on this node, across server
//! updates and agent restarts (the ports of every allocation on disk are held before any new
//! one is picked); no two live allocations of this node share a dynamic port, and none takes a
//! port reserved by another allocation or one something on the host is already bound to.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, PoisonError};

use scheduler_structs::{Allocation, NetworkResource};

use crate::state::StateDir;

/// The lowest dynamic port (Nomad's `min_dynamic_port` default).
pub(crate) const MIN_DYNAMIC_PORT: i64 = 20000;
/// The highest dynamic port (Nomad's `max_dynamic_port` default).
pub(crate) const MAX_DYNAMIC_PORT: i64 = 32000;

/// The ports this node's allocations hold: allocation ID → label → port.
#[derive(Debug, Default)]
pub(crate) struct PortTable {
    held: Mutex<HashMap<String, BTreeMap<String, i64>>>,
}

impl PortTable {
    /// A table holding the ports of the allocations the agent ran before (their state files),
    /// so that no new allocation is given one of them, whichever runner starts first.
    pub(crate) fn restored(state: &StateDir) -> PortTable {
        let table = PortTable::default();
        {
            let mut held = table.held.lock().unwrap_or_else(PoisonError::into_inner);
            for alloc_id in state.alloc_ids() {
                if let Some(record) = state.load_alloc(&alloc_id) {
                    held.insert(alloc_id, assigned_ports(&record.alloc));
                }
            }
        }
        table
    }

    /// Fills `alloc`'s dynamic ports (and empty network IPs with `node_ip`): a label keeps the
    /// port it already has in this table, else the one `previous` (the allocation as the agent
    /// last ran it) had, else a free one.
    pub(crate) fn fill(
        &self,
        alloc: &mut Allocation,
        previous: Option<&Allocation>,
        node_ip: &str,
    ) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let known_previous = previous.map(assigned_ports).unwrap_or_default();
        let mut used: BTreeSet<i64> = held
            .iter()
            .filter(|(id, _)| **id != alloc.id)
            .flat_map(|(_, ports)| ports.values().copied())
            .collect();
        for network in networks_mut(alloc) {
            used.extend(network.reserved_ports.iter().map(|port| port.value));
        }
        let mine = held.entry(alloc.id.clone()).or_default();
        for network in networks_mut(alloc) {
            if network.ip.is_empty() {
                network.ip = node_ip.to_owned();
            }
            for port in &mut network.dynamic_ports {
                if port.value <= 0 {
                    let value = mine
                        .get(&port.label)
                        .or_else(|| known_previous.get(&port.label))
                        .copied()
                        .filter(|value| *value > 0)
                        .unwrap_or_else(|| pick_free(&used));
                    port.value = value;
                }
                if port.to < 0 {
                    port.to = port.value;
                }
                used.insert(port.value);
                mine.insert(port.label.clone(), port.value);
            }
        }
    }

    /// Releases an allocation's ports (it ended or was destroyed).
    pub(crate) fn release(&self, alloc_id: &str) {
        self.held
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(alloc_id);
    }
}

/// The group's and every task's networks of an allocation.
fn networks_mut(alloc: &mut Allocation) -> impl Iterator<Item = &mut NetworkResource> {
    let resources = &mut alloc.allocated_resources;
    resources.shared.networks.iter_mut().chain(
        resources
            .tasks
            .values_mut()
            .flat_map(|task| task.networks.iter_mut()),
    )
}

/// Label → port of the dynamic ports an allocation already has.
fn assigned_ports(alloc: &Allocation) -> BTreeMap<String, i64> {
    let resources = &alloc.allocated_resources;
    resources
        .shared
        .networks
        .iter()
        .chain(resources.tasks.values().flat_map(|task| &task.networks))
        .flat_map(|network| &network.dynamic_ports)
        .filter(|port| port.value > 0)
        .map(|port| (port.label.clone(), port.value))
        .collect()
}

/// A port of the dynamic range that is neither `used` nor bound on the host: random first
/// (as upstream picks), then a scan of the range.
fn pick_free(used: &BTreeSet<i64>) -> i64 {
    let free = |port: i64| !used.contains(&port) && bindable(port);
    for _ in 0..64 {
        let port = rand::random_range(MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT);
        if free(port) {
            return port;
        }
    }
    (MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT)
        .find(|port| free(*port))
        .unwrap_or(MIN_DYNAMIC_PORT)
}

fn bindable(port: i64) -> bool {
    u16::try_from(port).is_ok_and(|port| TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok())
}

#[cfg(test)]
mod tests {
    use scheduler_structs::{AllocatedTaskResources, Port};

    use super::*;

    fn alloc(id: &str) -> Allocation {
        let mut alloc = Allocation {
            id: id.to_owned(),
            ..Allocation::default()
        };
        alloc.allocated_resources.shared.networks = vec![NetworkResource {
            dynamic_ports: vec![
                Port {
                    label: "http".to_owned(),
                    to: -1,
                    ..Port::default()
                },
                Port {
                    label: "admin".to_owned(),
                    ..Port::default()
                },
            ],
            reserved_ports: vec![Port {
                label: "fixed".to_owned(),
                value: 25000,
                ..Port::default()
            }],
            ..NetworkResource::default()
        }];
        alloc.allocated_resources.tasks.insert(
            "main".to_owned(),
            AllocatedTaskResources {
                networks: vec![NetworkResource {
                    dynamic_ports: vec![Port {
                        label: "metrics".to_owned(),
                        ..Port::default()
                    }],
                    ..NetworkResource::default()
                }],
                ..AllocatedTaskResources::default()
            },
        );
        alloc
    }

    #[test]
    fn dynamic_ports_are_in_range_distinct_and_stable() {
        let table = PortTable::default();
        let mut first = alloc("a1");
        table.fill(&mut first, None, "10.0.0.5");
        let ports = assigned_ports(&first);
        assert_eq!(ports.len(), 3);
        assert!(
            ports
                .values()
                .all(|port| (MIN_DYNAMIC_PORT..=MAX_DYNAMIC_PORT).contains(port) && *port != 25000)
        );
        let network = &first.allocated_resources.shared.networks[0];
        assert_eq!(network.ip, "10.0.0.5");
        assert_eq!(network.dynamic_ports[0].to, network.dynamic_ports[0].value);

        // The server's copy again (ports 0): the same ports.
        let mut again = alloc("a1");
        table.fill(&mut again, None, "10.0.0.5");
        assert_eq!(assigned_ports(&again), ports);

        // Another allocation never shares one.
        let mut second = alloc("a2");
        table.fill(&mut second, None, "10.0.0.5");
        let others = assigned_ports(&second);
        assert!(
            others
                .values()
                .all(|port| !ports.values().any(|mine| mine == port))
        );
    }

    #[test]
    fn ports_of_allocations_on_disk_are_never_given_to_new_ones() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::new(dir.path().to_path_buf());
        state.init().unwrap();
        let mut before = alloc("a1");
        PortTable::default().fill(&mut before, None, "127.0.0.1");
        state
            .save_alloc(&crate::state::AllocRecord {
                alloc: before.clone(),
                ..crate::state::AllocRecord::default()
            })
            .unwrap();
        let table = PortTable::restored(&state);
        let held = table.held.lock().unwrap().clone();
        assert_eq!(held["a1"], assigned_ports(&before));
    }

    #[test]
    fn a_restored_allocation_keeps_its_ports_and_release_frees_them() {
        let table = PortTable::default();
        let mut before = alloc("a1");
        table.fill(&mut before, None, "127.0.0.1");
        let ports = assigned_ports(&before);

        let restarted = PortTable::default();
        let mut server_copy = alloc("a1");
        restarted.fill(&mut server_copy, Some(&before), "127.0.0.1");
        assert_eq!(assigned_ports(&server_copy), ports);

        restarted.release("a1");
        assert!(restarted.held.lock().unwrap().is_empty());
    }
}
