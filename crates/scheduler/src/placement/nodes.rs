//! The candidate nodes of a run: the snapshot's nodes that are ready for placement and in the
//! job's node pool and datacenters (upstream's `readyNodesInDCsAndPool`), visited in a
//! seeded random order.
//!
//! Scanning thousands of nodes on every evaluation would dominate placement, so the scan is
//! memoized per node table: an entry is reused only while the snapshot's `nodes` map is the
//! very same persistent map (`OrdMap::ptr_eq`; the entry holds a clone, so a shared root can
//! never be changed in place) and the job asks for the same pool and datacenters. The memo
//! changes no result, only the time to get it.
//!
//! What runs read of every candidate over and over is kept densely per memo entry: node
//! capacities, static feasibility per check list (nodes do not change while their table
//! lives), and node usage: a dense base plus the changes since, found through `OrdMap::diff`
//! (consecutive snapshots share all but what a few plans changed).
//!
//! Invariants: the order is a Fisher-Yates shuffle seeded by the run, performed lazily (one
//! step per position first visited; kept as a dense permutation up to [`DENSE_ORDER_MAX`]
//! nodes and as a sparse map of the swapped positions beyond, the same order either way);
//! positions index the ready nodes in ID order and every per-node vector; maps keyed by
//! position use the fast hasher (`stdx::hash::FastMap`: the keys are ours); a poisoned memo
//! lock is recovered, never a panic.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU16;
use std::sync::{Arc, Mutex};

use imbl::OrdMap;
use imbl::ordmap::DiffItem;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use stdx::hash::FastMap;

use super::feasible;
use crate::state::Snapshot;
use crate::structs::{Comparable, Job, Node};

/// Memo entries kept (distinct pool/datacenter combinations over recent node tables).
const MEMO_ENTRIES: usize = 16;

/// A node usage table and the usage it gives each ready node (by position).
type UsageBase = (OrdMap<String, Comparable>, Arc<Vec<Comparable>>);

/// Static feasibility results per node position: 0 not yet checked, 1 feasible, `2 + i`
/// failed check `i` of the group's check list.
pub(super) type Feasibility = Vec<AtomicU16>;

/// Check lists whose results are kept per node table (beyond that, runs keep their own).
const MAX_SHARED_CHECK_LISTS: usize = 64;

/// Usage changes looked up on top of the dense base before the base is rebuilt.
const MAX_USAGE_CHANGES: usize = 16;

/// Ready nodes up to which a run's shuffled order is a dense permutation (filled once, 4 bytes
/// a node); beyond, only the positions a run visits are kept, in a map.
const DENSE_ORDER_MAX: usize = 1 << 16;

/// The ready nodes for one pool and set of datacenters, with what placement reads of them
/// over and over kept densely.
#[derive(Debug)]
pub(super) struct ReadyNodes {
    /// In ID order.
    pub(super) nodes: Vec<Arc<Node>>,
    /// What each node can give to allocations (`Node::capacity`).
    pub(super) capacity: Vec<Comparable>,
    /// Ready nodes per datacenter (`NodesAvailable`).
    pub(super) by_dc: BTreeMap<String, i64>,
    /// Static feasibility per check list: nodes do not change while this table lives, so
    /// results are shared by every run with the same checks.
    feasibility: Mutex<HashMap<String, Arc<Feasibility>>>,
    /// The node usage table last seen and the usage of each node of `nodes`.
    usage: Mutex<Option<UsageBase>>,
}

impl ReadyNodes {
    /// The shared feasibility results for a check list (`signature` identifies it exactly).
    pub(super) fn feasibility(&self, signature: &str) -> Arc<Feasibility> {
        let fresh = || Arc::new((0..self.nodes.len()).map(|_| AtomicU16::new(0)).collect());
        let mut shared = self
            .feasibility
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = shared.get(signature) {
            return Arc::clone(found);
        }
        let results: Arc<Feasibility> = fresh();
        if shared.len() < MAX_SHARED_CHECK_LISTS {
            shared.insert(signature.to_owned(), Arc::clone(&results));
        }
        results
    }

    fn position(&self, node_id: &str) -> Option<usize> {
        self.nodes
            .binary_search_by(|node| node.id.as_str().cmp(node_id))
            .ok()
    }

    /// The usage of every ready node in `table` (the snapshot's `node_usage`): a dense base
    /// for an earlier table plus what changed since (`OrdMap::diff` skips the structure the
    /// tables share); the base moves forward once the changes pile up.
    fn usage(&self, table: &OrdMap<String, Comparable>) -> Usage {
        let mut memo = self
            .usage
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some((seen, base)) = memo.as_ref() else {
            let base = Arc::new(self.dense_usage(table));
            *memo = Some((table.clone(), Arc::clone(&base)));
            return Usage {
                base,
                changed: FastMap::default(),
            };
        };
        let mut changed = FastMap::default();
        if !seen.ptr_eq(table) {
            // Diff items come in ID order, as the nodes: each search starts where the last
            // one ended.
            let mut from = 0;
            for item in seen.diff(table) {
                let (node_id, value) = match item {
                    DiffItem::Add(node_id, value) => (node_id, *value),
                    DiffItem::Update { new, .. } => (new.0, *new.1),
                    DiffItem::Remove(node_id, _) => (node_id, Comparable::default()),
                };
                let rest = self.nodes.get(from..).unwrap_or_default();
                let offset = rest.partition_point(|node| node.id.as_str() < node_id.as_str());
                from += offset;
                if self.nodes.get(from).is_some_and(|node| node.id == *node_id) {
                    changed.insert(from, value);
                }
            }
        }
        if changed.len() <= MAX_USAGE_CHANGES {
            return Usage {
                base: Arc::clone(base),
                changed,
            };
        }
        let mut rebased = Vec::clone(base);
        for (position, value) in changed {
            if let Some(slot) = rebased.get_mut(position) {
                *slot = value;
            }
        }
        let base = Arc::new(rebased);
        *memo = Some((table.clone(), Arc::clone(&base)));
        Usage {
            base,
            changed: FastMap::default(),
        }
    }

    /// The usage of every ready node, in one merged pass (both are in ID order).
    fn dense_usage(&self, table: &OrdMap<String, Comparable>) -> Vec<Comparable> {
        let mut usage = vec![Comparable::default(); self.nodes.len()];
        let mut entries = table.iter().peekable();
        for (slot, node) in usage.iter_mut().zip(&self.nodes) {
            while entries
                .peek()
                .is_some_and(|(node_id, _)| node_id.as_str() < node.id.as_str())
            {
                entries.next();
            }
            if let Some((node_id, value)) = entries.peek()
                && **node_id == node.id
            {
                *slot = **value;
            }
        }
        usage
    }
}

/// What the snapshot's allocations use on each ready node.
#[derive(Debug)]
pub(super) struct Usage {
    base: Arc<Vec<Comparable>>,
    /// Positions whose usage differs from `base`.
    changed: FastMap<usize, Comparable>,
}

impl Usage {
    pub(super) fn get(&self, position: usize) -> Comparable {
        match self.changed.get(&position) {
            Some(value) => *value,
            None => self.base.get(position).copied().unwrap_or_default(),
        }
    }
}

struct MemoEntry {
    table: OrdMap<String, Arc<Node>>,
    pool: String,
    datacenters: Vec<String>,
    ready: Arc<ReadyNodes>,
}

static MEMO: Mutex<Vec<MemoEntry>> = Mutex::new(Vec::new());

fn scan(table: &OrdMap<String, Arc<Node>>, job: &Job) -> ReadyNodes {
    let mut nodes = Vec::new();
    let mut by_dc: BTreeMap<String, i64> = BTreeMap::new();
    for node in table.values() {
        if !node.ready_for_placement()
            || !feasible::in_pool(node, &job.node_pool)
            || !feasible::in_datacenters(node, &job.datacenters)
        {
            continue;
        }
        match by_dc.get_mut(&node.datacenter) {
            Some(count) => *count += 1,
            None => {
                by_dc.insert(node.datacenter.clone(), 1);
            }
        }
        nodes.push(Arc::clone(node));
    }
    ReadyNodes {
        capacity: nodes.iter().map(|node| node_capacity(node)).collect(),
        nodes,
        by_dc,
        feasibility: Mutex::new(HashMap::new()),
        usage: Mutex::new(None),
    }
}

/// The ready nodes of `snapshot` for `job`, memoized per node table.
fn ready_nodes(snapshot: &Snapshot, job: &Job) -> Arc<ReadyNodes> {
    let matches = |entry: &MemoEntry| {
        entry.table.ptr_eq(&snapshot.nodes)
            && entry.pool == job.node_pool
            && entry.datacenters == job.datacenters
    };
    {
        let mut memo = MEMO.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(at) = memo.iter().position(matches) {
            let entry = memo.remove(at);
            let ready = Arc::clone(&entry.ready);
            memo.push(entry);
            return ready;
        }
    }
    let ready = Arc::new(scan(&snapshot.nodes, job));
    let mut memo = MEMO.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // Least recently used first.
    if memo.len() >= MEMO_ENTRIES {
        memo.remove(0);
    }
    memo.push(MemoEntry {
        table: snapshot.nodes.clone(),
        pool: job.node_pool.clone(),
        datacenters: job.datacenters.clone(),
        ready: Arc::clone(&ready),
    });
    ready
}

/// The candidate nodes of a run, in a lazily shuffled order.
#[derive(Debug)]
pub(super) struct NodeSet {
    pub(super) ready: Arc<ReadyNodes>,
    /// What the snapshot's allocations use on each node (by position).
    pub(super) usage: Usage,
    /// How many ready nodes there are.
    count: usize,
    /// The shuffled permutation, as far as it is shuffled (`shuffled`).
    order: Order,
    shuffled: usize,
    /// Where the round-robin source resumes (upstream's `StaticIterator.offset`).
    pub(super) offset: usize,
    rng: StdRng,
}

impl NodeSet {
    pub(super) fn new(snapshot: &Snapshot, job: &Job, seed: u64) -> NodeSet {
        let ready = ready_nodes(snapshot, job);
        let usage = ready.usage(&snapshot.node_usage);
        NodeSet {
            count: ready.nodes.len(),
            ready,
            usage,
            order: Order::Unset,
            shuffled: 0,
            offset: 0,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn node(&self, position: usize) -> Option<&Arc<Node>> {
        self.ready.nodes.get(position)
    }

    /// The position of the node at `index` of the shuffled order.
    pub(super) fn at(&mut self, index: usize) -> usize {
        if matches!(self.order, Order::Unset) {
            self.order = match u32::try_from(self.count) {
                Ok(count) if self.count <= DENSE_ORDER_MAX => Order::Dense((0..count).collect()),
                _ => Order::Sparse(FastMap::default()),
            };
        }
        while self.shuffled <= index && self.shuffled < self.count {
            let here = self.shuffled;
            let pick = self.rng.random_range(here..self.count);
            self.order.swap(here, pick);
            self.shuffled += 1;
        }
        self.order.get(index)
    }

    /// The position of a node by ID, if it is a candidate of this run.
    pub(super) fn position(&self, node_id: &str) -> Option<usize> {
        self.ready.position(node_id)
    }
}

/// A run's node order: the identity until first used, then a permutation being shuffled.
#[derive(Debug)]
enum Order {
    Unset,
    /// Every position (fits `u32`: at most [`DENSE_ORDER_MAX`] nodes).
    Dense(Vec<u32>),
    /// Only the entries that differ from the identity.
    Sparse(FastMap<usize, usize>),
}

impl Order {
    fn get(&self, index: usize) -> usize {
        match self {
            Order::Unset => index,
            Order::Dense(order) => order.get(index).map_or(index, |&at| at as usize),
            Order::Sparse(swapped) => swapped.get(&index).copied().unwrap_or(index),
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        match self {
            Order::Unset => {}
            Order::Dense(order) => {
                if a < order.len() && b < order.len() {
                    order.swap(a, b);
                }
            }
            Order::Sparse(swapped) => {
                let (at_a, at_b) = (
                    swapped.get(&a).copied().unwrap_or(a),
                    swapped.get(&b).copied().unwrap_or(b),
                );
                swapped.insert(a, at_b);
                swapped.insert(b, at_a);
            }
        }
    }
}

/// What a node can give to allocations (`Node::capacity`, saturating).
fn node_capacity(node: &Node) -> Comparable {
    let mut capacity = node.node_resources.comparable();
    capacity.subtract(&node.reserved_resources.comparable());
    capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shuffles `count` positions lazily with `order`, as `NodeSet::at` does, visiting them all.
    fn shuffled(mut order: Order, count: usize, seed: u64) -> Vec<usize> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count)
            .map(|here| {
                let pick = rng.random_range(here..count);
                order.swap(here, pick);
                order.get(here)
            })
            .collect()
    }

    #[test]
    fn dense_and_sparse_orders_give_the_same_permutation() {
        for (count, seed) in [(1, 7), (2, 1), (17, 3), (500, 42)] {
            let dense = shuffled(Order::Dense((0..count as u32).collect()), count, seed);
            let sparse = shuffled(Order::Sparse(FastMap::default()), count, seed);
            assert_eq!(dense, sparse);
            let mut sorted = dense.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, (0..count).collect::<Vec<_>>(), "a permutation");
        }
    }
}
