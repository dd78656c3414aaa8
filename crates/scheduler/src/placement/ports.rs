//! Port assignment at placement (Nomad's `NetworkIndex`: `AssignPorts` for the group's
//! network, `AssignTaskNetwork` for a task's legacy `resources { network {} }`).
//!
//! A node's used ports are those its non-terminal allocations hold (what the plan stops no
//! longer counts, what it places does). A group's static ports must be free on the node, else
//! the node is exhausted with `network: reserved port collision <label>=<port>`; dynamic ports
//! are drawn from the node's range (Nomad's default 20000–32000) among the free ones, randomly
//! (a few random probes, then a pick among every free port, as upstream). The offer is written
//! into the allocation as Nomad's API shows it: `AllocatedResources.Shared.Networks` (the ask
//! with the node's IP and the dynamic values), `Shared.Ports` (`{Label, Value, To, HostIP}`,
//! static ports first) and each task's `Networks`.
//!
//! Invariants: pure (randomness only from the caller's seeded generator); [`check`] accepts
//! exactly the asks [`assign`] can satisfy against the same used set, so a node that ranked
//! feasible always gets an offer; no two ports of one offer, nor an offered port and a used
//! one, are equal; nodes have one address (host networks other than the default are never
//! available, as on a Nomad node without `host_network` blocks).

use std::collections::BTreeSet;

use rand::Rng;
use rand::rngs::StdRng;
use serde_json::json;

use crate::structs::{Allocation, NetworkResource, Node, TaskGroup};

/// Nomad's default `min_dynamic_port` and `max_dynamic_port`.
pub(crate) const MIN_DYNAMIC_PORT: i64 = 20_000;
pub(crate) const MAX_DYNAMIC_PORT: i64 = 32_000;
/// Upstream's `MaxValidPort`: ports are below it.
const MAX_VALID_PORT: i64 = 65_536;
/// Upstream's `maxRandPortAttempts`.
const RANDOM_ATTEMPTS: usize = 20;

/// What one allocation of a group asks for: the group's first network and each task's first
/// network (upstream reads only the first of either).
#[derive(Debug, Clone, Default)]
pub(super) struct PortAsk {
    group: Option<NetworkResource>,
    tasks: Vec<(String, NetworkResource)>,
}

impl PortAsk {
    /// The ask of `tg`, or `None` when it asks for no network at all.
    pub(super) fn of(tg: &TaskGroup) -> Option<PortAsk> {
        let ask = PortAsk {
            group: tg.networks.first().cloned(),
            tasks: tg
                .tasks
                .iter()
                .filter_map(|task| {
                    let network = task.resources.networks.first()?;
                    Some((task.name.clone(), network.clone()))
                })
                .collect(),
        };
        (ask.group.is_some() || !ask.tasks.is_empty()).then_some(ask)
    }

    fn networks(&self) -> impl Iterator<Item = &NetworkResource> {
        self.group
            .iter()
            .chain(self.tasks.iter().map(|(_, network)| network))
    }
}

/// The ports an offer gives, written into an allocation by [`Offer::apply`].
#[derive(Debug, Clone, Default)]
pub(super) struct Offer {
    group: Option<NetworkResource>,
    ports: Vec<serde_json::Value>,
    tasks: Vec<(String, NetworkResource)>,
    /// Every port of the offer (what the node holds once it is placed).
    pub(super) held: Vec<i64>,
}

impl Offer {
    pub(super) fn apply(self, alloc: &mut Allocation) {
        let resources = &mut alloc.allocated_resources;
        if let Some(group) = self.group {
            resources.shared.networks = vec![group.clone()];
            resources.shared.ports = self.ports;
            if let Some(shared) = alloc.shared_resources.as_mut() {
                shared.networks = vec![group];
            }
        }
        for (task, network) in self.tasks {
            if let Some(allocated) = resources.tasks.get_mut(&task) {
                allocated.networks = vec![network.clone()];
            }
            if let Some(legacy) = alloc.task_resources.get_mut(&task) {
                legacy.networks = vec![network];
            }
        }
    }
}

/// The ports an allocation holds on its node: its `Shared.Ports` when set, else the values
/// of its group and task networks (only assigned ones: a port 0 holds nothing).
pub(crate) fn held(alloc: &Allocation) -> Vec<i64> {
    let resources = &alloc.allocated_resources;
    let mut ports: Vec<i64> = resources
        .shared
        .ports
        .iter()
        .filter_map(|port| port.get("Value").and_then(serde_json::Value::as_i64))
        .collect();
    if ports.is_empty() {
        ports.extend(
            resources
                .shared
                .networks
                .iter()
                .flat_map(|network| network.reserved_ports.iter().chain(&network.dynamic_ports))
                .map(|port| port.value),
        );
    }
    ports.extend(
        resources
            .tasks
            .values()
            .flat_map(|task| task.networks.first())
            .flat_map(|network| network.reserved_ports.iter().chain(&network.dynamic_ports))
            .map(|port| port.value),
    );
    ports.retain(|port| *port > 0);
    ports
}

/// The address a node offers ports on: its first host-mode (or unnamed) network's IP, else
/// its fingerprinted `unique.network.ip-address`, else loopback (the agent's default).
fn node_ip(node: &Node) -> String {
    node.node_resources
        .networks
        .iter()
        .find(|network| {
            (network.mode.is_empty() || network.mode == "host") && !network.ip.is_empty()
        })
        .map(|network| network.ip.clone())
        .or_else(|| {
            node.attributes
                .get("unique.network.ip-address")
                .filter(|ip| !ip.is_empty())
                .cloned()
        })
        .unwrap_or_else(|| "127.0.0.1".to_owned())
}

/// The node's dynamic range (its own when it reports a sane one).
fn dynamic_range(node: &Node) -> (i64, i64) {
    let (min, max) = (
        node.node_resources.min_dynamic_port,
        node.node_resources.max_dynamic_port,
    );
    if min > 0 && max >= min && max < MAX_VALID_PORT {
        (min, max)
    } else {
        (MIN_DYNAMIC_PORT, MAX_DYNAMIC_PORT)
    }
}

fn default_network(host_network: &str) -> bool {
    host_network.is_empty() || host_network == "default"
}

/// Whether `ask` can be satisfied on `node` with `used` taken: `Err` is upstream's reason
/// (the metric's dimension, without its `network: ` prefix).
pub(super) fn check(ask: &PortAsk, node: &Node, used: &BTreeSet<i64>) -> Result<(), String> {
    let mut taken = used.clone();
    let mut dynamic = 0_usize;
    for network in ask.networks() {
        for port in &network.reserved_ports {
            reserve(
                port.label.as_str(),
                port.value,
                &port.host_network,
                &mut taken,
            )?;
        }
        for port in &network.dynamic_ports {
            if !default_network(&port.host_network) {
                return Err(no_addresses(&port.host_network));
            }
            dynamic += 1;
        }
    }
    let (min, max) = dynamic_range(node);
    let in_range = taken.range(min..=max).count();
    let size = usize::try_from(max - min + 1).unwrap_or(0);
    if size.saturating_sub(in_range) < dynamic {
        return Err("dynamic port selection failed".to_owned());
    }
    Ok(())
}

fn no_addresses(host_network: &str) -> String {
    format!("no addresses available for {host_network} network")
}

/// Takes a static port, or tells why it cannot be had.
fn reserve(
    label: &str,
    value: i64,
    host_network: &str,
    taken: &mut BTreeSet<i64>,
) -> Result<(), String> {
    if !default_network(host_network) {
        return Err(no_addresses(host_network));
    }
    if !(0..MAX_VALID_PORT).contains(&value) {
        return Err(format!("invalid port {value} (out of range)"));
    }
    if !taken.insert(value) {
        return Err(format!("reserved port collision {label}={value}"));
    }
    Ok(())
}

/// Assigns `ask`'s ports on `node` with `used` taken; the same answer as [`check`] on failure.
pub(super) fn assign(
    ask: &PortAsk,
    node: &Node,
    used: &BTreeSet<i64>,
    rng: &mut StdRng,
) -> Result<Offer, String> {
    check(ask, node, used)?;
    let ip = node_ip(node);
    let (min, max) = dynamic_range(node);
    let mut taken = used.clone();
    for network in ask.networks() {
        for port in &network.reserved_ports {
            taken.insert(port.value);
        }
    }
    let mut offer = Offer::default();
    for network in ask.networks() {
        offer
            .held
            .extend(network.reserved_ports.iter().map(|p| p.value));
    }
    let mut fill = |network: &NetworkResource, ports: Option<&mut Vec<serde_json::Value>>| {
        let mut out = network.clone();
        out.ip = ip.clone();
        let mut mappings = Vec::new();
        for port in &out.reserved_ports {
            mappings.push(json!({
                "Label": port.label, "Value": port.value, "To": port.to, "HostIP": ip,
            }));
        }
        for port in &mut out.dynamic_ports {
            let value = pick(&taken, min, max, rng).ok_or("dynamic port selection failed")?;
            taken.insert(value);
            offer_push(value, port);
            mappings.push(json!({
                "Label": port.label, "Value": port.value, "To": port.to, "HostIP": ip,
            }));
        }
        if let Some(ports) = ports {
            *ports = mappings;
        }
        Ok::<NetworkResource, String>(out)
    };
    let mut ports = Vec::new();
    let group = match &ask.group {
        Some(network) => Some(fill(network, Some(&mut ports))?),
        None => None,
    };
    let mut tasks = Vec::new();
    for (task, network) in &ask.tasks {
        tasks.push((task.clone(), fill(network, None)?));
    }
    offer.group = group;
    offer.ports = ports;
    offer.tasks = tasks;
    offer.held.extend(
        offer
            .group
            .iter()
            .chain(offer.tasks.iter().map(|(_, network)| network))
            .flat_map(|network| &network.dynamic_ports)
            .map(|port| port.value),
    );
    Ok(offer)
}

/// Sets a dynamic port's value (and `To = -1` to the same port, as upstream).
fn offer_push(value: i64, port: &mut crate::structs::Port) {
    port.value = value;
    if port.to == -1 {
        port.to = value;
    }
}

/// A free port of `min..=max`: a few random probes, then a random one among all free ports.
fn pick(taken: &BTreeSet<i64>, min: i64, max: i64, rng: &mut StdRng) -> Option<i64> {
    for _ in 0..RANDOM_ATTEMPTS {
        let port = rng.random_range(min..=max);
        if !taken.contains(&port) {
            return Some(port);
        }
    }
    let free: Vec<i64> = (min..=max).filter(|port| !taken.contains(port)).collect();
    if free.is_empty() {
        return None;
    }
    free.get(rng.random_range(0..free.len())).copied()
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::structs::{Port, Task};

    fn port(label: &str, value: i64) -> Port {
        Port {
            label: label.to_owned(),
            value,
            ..Port::default()
        }
    }

    fn group(reserved: Vec<Port>, dynamic: Vec<Port>) -> TaskGroup {
        TaskGroup {
            name: "web".to_owned(),
            networks: vec![NetworkResource {
                reserved_ports: reserved,
                dynamic_ports: dynamic,
                ..NetworkResource::default()
            }],
            tasks: vec![Task {
                name: "main".to_owned(),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }
    }

    fn node() -> Node {
        let mut node = Node::default();
        node.attributes.insert(
            "unique.network.ip-address".to_owned(),
            "10.1.2.3".to_owned(),
        );
        node
    }

    #[test]
    fn a_group_without_networks_asks_nothing() {
        assert!(PortAsk::of(&TaskGroup::default()).is_none());
    }

    #[test]
    fn static_collision_is_reported_as_upstream() {
        let ask = PortAsk::of(&group(vec![port("http", 8080)], Vec::new())).unwrap();
        let used = BTreeSet::from([8080]);
        assert_eq!(
            check(&ask, &node(), &used),
            Err("reserved port collision http=8080".to_owned())
        );
        let bad = PortAsk::of(&group(vec![port("x", 70_000)], Vec::new())).unwrap();
        assert_eq!(
            check(&bad, &node(), &BTreeSet::new()),
            Err("invalid port 70000 (out of range)".to_owned())
        );
    }

    #[test]
    fn dynamic_ports_avoid_used_and_static_ports_and_fill_the_api_shape() {
        let mut dynamic = port("http", 0);
        dynamic.to = -1;
        let ask = PortAsk::of(&group(vec![port("admin", 20_001)], vec![dynamic])).unwrap();
        let mut node = node();
        node.node_resources.min_dynamic_port = 20_000;
        node.node_resources.max_dynamic_port = 20_002;
        let used = BTreeSet::from([20_000]);
        let mut rng = StdRng::seed_from_u64(7);
        let offer = assign(&ask, &node, &used, &mut rng).unwrap();
        assert_eq!(offer.held, vec![20_001, 20_002]);
        let mut alloc = Allocation::default();
        alloc.allocated_resources.shared.networks = vec![NetworkResource::default()];
        offer.apply(&mut alloc);
        let network = &alloc.allocated_resources.shared.networks[0];
        assert_eq!(network.ip, "10.1.2.3");
        assert_eq!(network.dynamic_ports[0].value, 20_002);
        assert_eq!(network.dynamic_ports[0].to, 20_002);
        assert_eq!(
            alloc.allocated_resources.shared.ports,
            vec![
                json!({"Label": "admin", "Value": 20_001, "To": 0, "HostIP": "10.1.2.3"}),
                json!({"Label": "http", "Value": 20_002, "To": 20_002, "HostIP": "10.1.2.3"}),
            ]
        );
        assert_eq!(held(&alloc), vec![20_001, 20_002]);

        // The range is now full.
        let full = BTreeSet::from([20_000, 20_002]);
        assert_eq!(
            check(&ask, &node, &full),
            Err("dynamic port selection failed".to_owned())
        );
    }

    #[test]
    fn other_host_networks_have_no_addresses() {
        let mut dynamic = port("http", 0);
        dynamic.host_network = "public".to_owned();
        let ask = PortAsk::of(&group(Vec::new(), vec![dynamic])).unwrap();
        assert_eq!(
            check(&ask, &node(), &BTreeSet::new()),
            Err("no addresses available for public network".to_owned())
        );
    }
}
