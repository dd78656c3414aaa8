//! The placement stack: picks the node for one allocation (Nomad's `GenericStack` and
//! `SystemStack`: `feasible/stack.go`, `rank.go`, `spread.go`, `select.go`,
//! `propertyset.go`).
//!
//! Chain, per candidate node: static feasibility (job constraints, drivers, group and task
//! constraints; results shared per node table, see `nodes.rs`) → `distinct_hosts` →
//! `distinct_property` → bin-pack fit (`DimensionExhausted`) and score → ports (static ones
//! free, enough dynamic ones: `network: …`, only for groups with a network) → job anti-affinity →
//! reschedule penalty → node affinity → spread → mean of the appended scores. The node source
//! is the run's ready nodes in a seeded random order, visited round-robin across selections
//! (upstream's `StaticIterator` over shuffled nodes); the limit iterator stops after `limit`
//! scored candidates (2 for batch, `max(2, ceil(log2 n))` otherwise, `max(count, 100)` with
//! affinities or spreads), skipping up to 3 candidates scoring ≤ 0, and the best score wins.
//!
//! Invariants: pure (randomness only from the run's seeded generator; the `AllocationTime`
//! metric is timed with the caller's stopwatch, no clock is read here); per candidate node
//! nothing is allocated unless it is filtered by a constraint not seen before (metric keys),
//! and a node already checked is not read again (capacity, usage and feasibility come from
//! dense per-position vectors); what the plan already placed or stopped is accounted for
//! through [`Proposed`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use stdx::hash::FastMap;

use super::feasible::{
    self, Caches, Compiled, DISTINCT_PROPERTY, MISSING_DRIVERS, Target, distinct_hosts_enabled,
};
use super::nodes::{Feasibility, NodeSet};
use super::ports::{self, PortAsk};
use crate::state::Snapshot;
use crate::structs::{AllocMetric, Allocation, Comparable, Job, Node, NodeScoreMeta, TaskGroup};

/// Upstream's `skipScoreThreshold` and `maxSkip`.
const SKIP_SCORE_THRESHOLD: f64 = 0.0;
const MAX_SKIP: usize = 3;
/// Upstream's `binPackingMaxFitScore`.
const BIN_PACKING_MAX_FIT_SCORE: f64 = 18.0;
/// Upstream's `DefaultNodeLimitForFeasibilityChecks` (candidates with affinities/spreads).
const NODE_LIMIT_WITH_AFFINITY: usize = 100;
/// Upstream's `MaxRetainedNodeScores`.
const MAX_RETAINED_NODE_SCORES: usize = 5;
/// Upstream's `implicitTarget`.
const IMPLICIT_TARGET: &str = "*";

/// One static feasibility check of a group.
#[derive(Debug)]
enum Check {
    Constraint(Compiled),
    Drivers(Vec<String>),
}

impl Check {
    fn passes(&self, node: &Node, caches: &mut Caches) -> bool {
        match self {
            Check::Constraint(compiled) => compiled.check(node, caches),
            Check::Drivers(drivers) => drivers.iter().all(|driver| node.has_driver(driver)),
        }
    }

    fn reason(&self) -> &str {
        match self {
            Check::Constraint(compiled) => &compiled.text,
            Check::Drivers(_) => MISSING_DRIVERS,
        }
    }

    /// Appends an exact description of the check to a check-list signature.
    fn sign(&self, signature: &mut String) {
        match self {
            Check::Constraint(compiled) => {
                signature.push('C');
                compiled.sign(signature);
            }
            Check::Drivers(drivers) => {
                signature.push('D');
                for driver in drivers {
                    signature.push_str(driver);
                    signature.push('\0');
                }
            }
        }
        signature.push('\u{1}');
    }
}

/// One spread block applied to a group.
#[derive(Debug)]
struct SpreadTerm {
    /// The property set counting allocations per value of the attribute.
    set: usize,
    weight: f64,
    /// Desired allocations per value (with `*` for the rest); empty: spread evenly.
    desired: HashMap<String, f64>,
}

/// What one task group needs from the stack, prepared once per run.
#[derive(Debug)]
pub(super) struct GroupStack<'a> {
    pub(super) tg: &'a TaskGroup,
    pub(super) ask: Comparable,
    checks: Vec<Check>,
    /// Per node position: 0 not yet checked, 1 feasible, `2 + i` failed check `i`.
    cache: Arc<Feasibility>,
    distinct_hosts_job: bool,
    distinct_hosts_group: bool,
    distinct_properties: Vec<usize>,
    affinities: Vec<(Compiled, f64)>,
    affinity_weight_sum: f64,
    /// Per node position: the affinity score, NaN until computed.
    affinity_cache: Vec<f64>,
    spreads: Vec<SpreadTerm>,
    spread_weight_sum: f64,
    limit_override: Option<usize>,
    /// The group's network ask (`None`: no network, no port checks).
    pub(super) ports: Option<PortAsk>,
}

/// A property set (upstream's `propertySet`): allocations of the job (or of one group) per
/// value of a node property, as the plan leaves them.
#[derive(Debug)]
pub(super) struct PropertySet<'a> {
    target: Target,
    attribute: String,
    /// `None`: every group of the job.
    group: Option<&'a str>,
    /// Spread targets: values outside them count under `*`.
    target_values: Vec<String>,
    /// `distinct_property`: allocations allowed per value.
    allowed: u64,
    error: Option<String>,
    counts: HashMap<String, u64>,
}

impl<'a> PropertySet<'a> {
    fn targeted<'v>(&self, value: &'v str) -> &'v str {
        if self.target_values.is_empty() || self.target_values.iter().any(|v| v == value) {
            value
        } else {
            IMPLICIT_TARGET
        }
    }

    fn applies_to(&self, group: &str) -> bool {
        self.group.is_none_or(|own| own == group)
    }

    /// Counts (or uncounts) an allocation of `group` on `node`.
    pub(super) fn record(&mut self, node: &Node, group: &str, add: bool) {
        if !self.applies_to(group) || self.attribute.is_empty() {
            return;
        }
        let PropertySet {
            target,
            target_values,
            counts,
            ..
        } = self;
        let Some(value) = target.resolve(node) else {
            return;
        };
        let key = if target_values.is_empty() || target_values.iter().any(|v| v == value) {
            value
        } else {
            IMPLICIT_TARGET
        };
        if add {
            match counts.get_mut(key) {
                Some(count) => *count += 1,
                None => {
                    counts.insert(key.to_owned(), 1);
                }
            }
        } else if let Some(count) = counts.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.remove(key);
            }
        }
    }

    /// The node's (targeted) value and how many allocations use it, or why it cannot be
    /// told.
    fn used<'s>(&'s self, node: &'s Node) -> Result<(&'s str, u64), String> {
        if let Some(error) = &self.error {
            return Err(error.clone());
        }
        let found = if self.attribute.is_empty() {
            None
        } else {
            self.target.resolve(node)
        };
        let Some(value) = found else {
            return Err(format!("missing property {:?}", self.attribute));
        };
        let value = self.targeted(value);
        Ok((value, self.counts.get(value).copied().unwrap_or(0)))
    }
}

/// What the plan changes on the candidate nodes (by position): the resource delta
/// (placements minus stops), the job's non-terminal allocations, in total and per group
/// (for `distinct_hosts` and job anti-affinity), and the ports: allocations it stops there
/// (their ports are free again) and ports its placements take.
///
/// Keyed by position with the fast hasher: every candidate node is looked up here.
#[derive(Debug, Default)]
pub(super) struct Proposed {
    usage: FastMap<usize, Comparable>,
    job: FastMap<usize, (i64, Vec<(String, i64)>)>,
    stopped: FastMap<usize, Vec<String>>,
    placed_ports: FastMap<usize, Vec<i64>>,
}

impl Proposed {
    fn add_usage(&mut self, position: usize, delta: &Comparable, add: bool) {
        let entry = self.usage.entry(position).or_default();
        if add {
            entry.add(delta);
        } else {
            entry.subtract(delta);
        }
    }

    fn count(&mut self, position: usize, group: &str, add: bool) {
        let step = if add { 1 } else { -1 };
        let (total, groups) = self.job.entry(position).or_default();
        *total += step;
        match groups.iter_mut().find(|(name, _)| name == group) {
            Some((_, count)) => *count += step,
            None => groups.push((group.to_owned(), step)),
        }
    }

    fn on_node(&self, position: usize, group: &str) -> (i64, i64) {
        self.job.get(&position).map_or((0, 0), |(total, groups)| {
            let in_group = groups
                .iter()
                .find(|(name, _)| name == group)
                .map_or(0, |(_, count)| *count);
            (*total, in_group)
        })
    }
}

/// Per-select options.
#[derive(Debug, Default)]
pub(super) struct SelectOptions<'o> {
    /// Nodes of previous failed attempts (reschedule penalty).
    pub(super) penalty_nodes: Vec<&'o str>,
    /// Try this node position first (sticky or migrating ephemeral disk).
    pub(super) preferred: Option<usize>,
    /// Only this node position (system jobs).
    pub(super) only: Option<usize>,
}

/// The scores of one ranked node.
#[derive(Debug, Clone, Copy, Default)]
struct Scores {
    binpack: f64,
    anti_affinity: f64,
    penalty: f64,
    affinity: f64,
    spread: Option<f64>,
    norm: f64,
}

/// A node that passed feasibility, with its final score.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    position: usize,
    scores: Scores,
}

/// The stack of one run.
#[derive(Debug)]
pub(super) struct Stack<'a> {
    /// The run's snapshot (the allocations holding ports on a node).
    snapshot: &'a Snapshot,
    pub(super) nodes: NodeSet,
    pub(super) groups: Vec<GroupStack<'a>>,
    pub(super) sets: Vec<PropertySet<'a>>,
    pub(super) caches: Caches,
    proposed: Proposed,
    /// Upstream's `SpreadIterator.lowestSpreadBoost` (kept across selections of the run).
    lowest_spread_boost: f64,
    base_limit: usize,
    /// System stack: bin-pack only (no anti-affinity, penalty, affinity or spread).
    system: bool,
    /// Times each selection (`PlacementContext::stopwatch`).
    stopwatch: fn() -> i64,
}

fn add_metric(map: &mut BTreeMap<String, i64>, key: &str) {
    match map.get_mut(key) {
        Some(count) => *count += 1,
        None => {
            map.insert(key.to_owned(), 1);
        }
    }
}

fn filter_node(metric: &mut AllocMetric, node: &Node, reason: &str) {
    metric.nodes_filtered += 1;
    if !node.node_class.is_empty() {
        add_metric(&mut metric.class_filtered, &node.node_class);
    }
    if !reason.is_empty() {
        add_metric(&mut metric.constraint_filtered, reason);
    }
}

fn exhaust_node(metric: &mut AllocMetric, node: &Node, dimension: &str) {
    metric.nodes_exhausted += 1;
    if !node.node_class.is_empty() {
        add_metric(&mut metric.class_exhausted, &node.node_class);
    }
    add_metric(&mut metric.dimension_exhausted, dimension);
}

/// What one allocation of `tg` asks for (`TaskGroup::comparable`, saturating).
pub(super) fn group_ask(tg: &TaskGroup) -> Comparable {
    let mut ask = Comparable {
        disk_mb: tg.disk_mb(),
        ..Comparable::default()
    };
    for task in &tg.tasks {
        ask.cpu = ask.cpu.saturating_add(task.resources.cpu);
        ask.memory_mb = ask.memory_mb.saturating_add(task.resources.memory_mb);
    }
    ask
}

/// Upstream's `ScoreFitBinPack`: 20 − (10^freeCpu + 10^freeMem), clamped to [0, 18].
pub(super) fn score_fit_bin_pack(capacity: &Comparable, util: &Comparable) -> f64 {
    let free = |used: i64, total: i64| {
        if total <= 0 {
            0.0
        } else {
            1.0 - used as f64 / total as f64
        }
    };
    let total = 10_f64.powf(free(util.cpu, capacity.cpu))
        + 10_f64.powf(free(util.memory_mb, capacity.memory_mb));
    let score = 20.0 - total;
    if score.is_nan() {
        0.0
    } else {
        score.clamp(0.0, BIN_PACKING_MAX_FIT_SCORE)
    }
}

/// Upstream's `evenSpreadScoreBoost`.
fn even_spread_boost(set: &PropertySet<'_>, node: &Node) -> f64 {
    if set.counts.is_empty() {
        return 0.0;
    }
    let Some(value) = (if set.attribute.is_empty() {
        None
    } else {
        set.target.resolve(node)
    }) else {
        return -1.0;
    };
    let current = set.counts.get(value).copied().unwrap_or(0);
    let min = set.counts.values().copied().min().unwrap_or(0);
    let max = set.counts.values().copied().max().unwrap_or(0);
    if current != min {
        if min == 0 {
            return -1.0;
        }
        return (min as f64 - current as f64) / min as f64;
    }
    if min == max {
        return -1.0;
    }
    if min == 0 {
        return 1.0;
    }
    (max - min) as f64 / min as f64
}

impl<'a> Stack<'a> {
    pub(super) fn new(
        snapshot: &'a Snapshot,
        nodes: NodeSet,
        batch: bool,
        system: bool,
        stopwatch: fn() -> i64,
    ) -> Stack<'a> {
        let count = nodes.len();
        let base_limit = if batch || count == 0 {
            2
        } else {
            // ceil(log2(n)), at least 2.
            let log = usize::BITS - (count - 1).leading_zeros();
            (log as usize).max(2)
        };
        Stack {
            snapshot,
            nodes,
            groups: Vec::new(),
            sets: Vec::new(),
            caches: Caches::default(),
            proposed: Proposed::default(),
            lowest_spread_boost: -1.0,
            base_limit,
            system,
            stopwatch,
        }
    }

    /// Prepares a group (once per run); returns its index. `existing` lists the job's
    /// allocations that count for property sets: (node, group).
    pub(super) fn prepare_group(
        &mut self,
        job: &'a Job,
        tg: &'a TaskGroup,
        existing: &[(&'a Node, &'a str)],
    ) -> usize {
        let mut checks = Vec::new();
        let compile = |constraint: &crate::structs::Constraint| {
            Check::Constraint(Compiled::from_constraint(constraint))
        };
        checks.extend(
            job.constraints
                .iter()
                .filter(|c| c.operand != feasible::DISTINCT_HOSTS && c.operand != DISTINCT_PROPERTY)
                .map(compile),
        );
        let mut drivers: Vec<String> = Vec::new();
        for task in &tg.tasks {
            if !drivers.contains(&task.driver) {
                drivers.push(task.driver.clone());
            }
        }
        if !drivers.is_empty() {
            checks.push(Check::Drivers(drivers));
        }
        let group_constraints = tg
            .constraints
            .iter()
            .chain(tg.tasks.iter().flat_map(|task| task.constraints.iter()));
        checks.extend(
            group_constraints
                .filter(|c| c.operand != feasible::DISTINCT_HOSTS && c.operand != DISTINCT_PROPERTY)
                .map(compile),
        );
        // Cached results are u16 codes: keep the number of checks in range.
        checks.truncate(usize::from(u16::MAX) - 2);

        let mut distinct_properties = Vec::new();
        for constraint in job
            .constraints
            .iter()
            .filter(|c| c.operand == DISTINCT_PROPERTY)
        {
            let set = self.property_set(constraint, None, Vec::new(), existing);
            distinct_properties.push(set);
        }
        for constraint in tg
            .constraints
            .iter()
            .filter(|c| c.operand == DISTINCT_PROPERTY)
        {
            let set = self.property_set(constraint, Some(tg.name.as_str()), Vec::new(), existing);
            distinct_properties.push(set);
        }

        let affinities: Vec<(Compiled, f64)> = job
            .affinities
            .iter()
            .chain(tg.affinities.iter())
            .chain(tg.tasks.iter().flat_map(|task| task.affinities.iter()))
            .map(|a| {
                (
                    Compiled::new(&a.l_target, &a.operand, &a.r_target),
                    a.weight as f64,
                )
            })
            .collect();
        let affinity_weight_sum = affinities.iter().map(|(_, weight)| weight.abs()).sum();

        // Spread details keyed by attribute (group spreads, then job spreads override), and
        // one property set per spread block (job spreads first), as upstream.
        let count = tg.count.max(0) as f64;
        let mut details: HashMap<&str, (f64, HashMap<String, f64>)> = HashMap::new();
        let mut spread_weight_sum = 0.0;
        for spread in tg.spreads.iter().chain(job.spreads.iter()) {
            let mut desired = HashMap::new();
            let mut sum = 0.0;
            for target in &spread.spread_target {
                let want = target.percent as f64 / 100.0 * count;
                desired.insert(target.value.clone(), want);
                sum += want;
            }
            if sum > 0.0 && sum < count {
                desired.insert(IMPLICIT_TARGET.to_owned(), count - sum);
            }
            details.insert(spread.attribute.as_str(), (spread.weight as f64, desired));
            spread_weight_sum += spread.weight as f64;
        }
        let mut spreads = Vec::new();
        for spread in job.spreads.iter().chain(tg.spreads.iter()) {
            let values = spread
                .spread_target
                .iter()
                .map(|t| t.value.clone())
                .collect();
            let set = self.spread_set(&spread.attribute, &tg.name, values, existing);
            let (weight, desired) = details
                .get(spread.attribute.as_str())
                .cloned()
                .unwrap_or_default();
            spreads.push(SpreadTerm {
                set,
                weight,
                desired,
            });
        }

        let limit_override = (!affinities.is_empty() || !spreads.is_empty()).then(|| {
            let count = usize::try_from(tg.count.max(0)).unwrap_or(usize::MAX);
            count.max(NODE_LIMIT_WITH_AFFINITY)
        });
        let nodes = self.nodes.len();
        let has_affinities = !affinities.is_empty();
        let mut signature = String::new();
        for check in &checks {
            check.sign(&mut signature);
        }
        let cache = self.nodes.ready.feasibility(&signature);
        self.groups.push(GroupStack {
            tg,
            ask: group_ask(tg),
            checks,
            cache,
            distinct_hosts_job: distinct_hosts_enabled(&job.constraints),
            distinct_hosts_group: distinct_hosts_enabled(&tg.constraints),
            distinct_properties,
            affinities,
            affinity_weight_sum,
            affinity_cache: if has_affinities {
                vec![f64::NAN; nodes]
            } else {
                Vec::new()
            },
            spreads,
            spread_weight_sum,
            limit_override,
            ports: PortAsk::of(tg),
        });
        self.groups.len() - 1
    }

    fn property_set(
        &mut self,
        constraint: &crate::structs::Constraint,
        group: Option<&'a str>,
        target_values: Vec<String>,
        existing: &[(&'a Node, &'a str)],
    ) -> usize {
        let (allowed, error) = if constraint.r_target.is_empty() {
            (1, None)
        } else {
            match constraint.r_target.parse::<u64>() {
                Ok(allowed) => (allowed, None),
                Err(_) => (
                    0,
                    Some(format!(
                        "failed to convert RTarget {:?} to uint64: strconv.ParseUint: parsing {:?}: invalid syntax",
                        constraint.r_target, constraint.r_target
                    )),
                ),
            }
        };
        self.new_set(
            &constraint.l_target,
            group,
            target_values,
            allowed,
            error,
            existing,
        )
    }

    fn spread_set(
        &mut self,
        attribute: &str,
        group: &'a str,
        target_values: Vec<String>,
        existing: &[(&'a Node, &'a str)],
    ) -> usize {
        self.new_set(attribute, Some(group), target_values, 0, None, existing)
    }

    fn new_set(
        &mut self,
        attribute: &str,
        group: Option<&'a str>,
        target_values: Vec<String>,
        allowed: u64,
        error: Option<String>,
        existing: &[(&'a Node, &'a str)],
    ) -> usize {
        let mut set = PropertySet {
            target: Target::parse(attribute),
            attribute: attribute.to_owned(),
            group,
            target_values,
            allowed,
            error,
            counts: HashMap::new(),
        };
        if !attribute.is_empty() {
            for (node, alloc_group) in existing {
                set.record(node, alloc_group, true);
            }
        }
        self.sets.push(set);
        self.sets.len() - 1
    }

    /// Counts (or uncounts) an existing non-terminal allocation where the plan leaves it
    /// (`node`: its node, if the snapshot has it).
    pub(super) fn account(&mut self, alloc: &Allocation, node: Option<&Node>, add: bool) {
        if alloc.terminal() {
            return;
        }
        if let Some(position) = self.nodes.position(&alloc.node_id) {
            self.proposed
                .add_usage(position, &alloc.allocated_resources.comparable(), add);
            self.proposed.count(position, &alloc.task_group, add);
            let stopped = self.proposed.stopped.entry(position).or_default();
            if add {
                stopped.retain(|id| *id != alloc.id);
            } else {
                stopped.push(alloc.id.clone());
            }
        }
        if let Some(node) = node {
            for set in &mut self.sets {
                set.record(node, &alloc.task_group, add);
            }
        }
    }

    /// Counts an allocation of the job the snapshot already has (for `distinct_hosts` and
    /// anti-affinity; its resources are in the node usage already).
    pub(super) fn count_existing(&mut self, alloc: &Allocation) {
        if let Some(position) = self.nodes.position(&alloc.node_id) {
            self.proposed.count(position, &alloc.task_group, true);
        }
    }

    /// Counts an allocation of group `g` placed by the plan on the node at `position`.
    pub(super) fn place(&mut self, g: usize, position: usize) {
        let Some(group) = self.groups.get(g) else {
            return;
        };
        let name = group.tg.name.as_str();
        self.proposed.add_usage(position, &group.ask, true);
        self.proposed.count(position, name, true);
        if let Some(node) = self.nodes.ready.nodes.get(position) {
            for set in &mut self.sets {
                set.record(node, name, true);
            }
        }
    }

    /// Records the ports an allocation placed by the plan takes on the node at `position`.
    pub(super) fn place_ports(&mut self, position: usize, held: &[i64]) {
        self.proposed
            .placed_ports
            .entry(position)
            .or_default()
            .extend_from_slice(held);
    }

    /// The ports taken on the node at `position` once the plan is applied.
    pub(super) fn used_ports(&self, position: usize) -> BTreeSet<i64> {
        used_ports(self.snapshot, &self.nodes, &self.proposed, position)
    }

    /// Static feasibility of `node` for group `g` outside the ready set (in-place updates):
    /// the reason it fails, if it does.
    pub(super) fn static_check(&mut self, g: usize, node: &Node) -> Option<String> {
        let group = self.groups.get(g)?;
        group
            .checks
            .iter()
            .find(|check| !check.passes(node, &mut self.caches))
            .map(|check| check.reason().to_owned())
    }

    /// Selects a node for one allocation of group `g`; the metric describes the search.
    pub(super) fn select(
        &mut self,
        g: usize,
        options: &SelectOptions<'_>,
    ) -> (Option<usize>, AllocMetric) {
        if let Some(preferred) = options.preferred {
            let first = SelectOptions {
                penalty_nodes: options.penalty_nodes.clone(),
                preferred: None,
                only: Some(preferred),
            };
            let (found, metric) = self.select_from(g, &first);
            if found.is_some() {
                return (found, metric);
            }
        }
        self.select_from(g, options)
    }

    fn select_from(
        &mut self,
        g: usize,
        options: &SelectOptions<'_>,
    ) -> (Option<usize>, AllocMetric) {
        let started = (self.stopwatch)();
        let mut metric = AllocMetric::default();
        let Some(limit) = self
            .groups
            .get(g)
            .map(|group| group.limit_override.unwrap_or(self.base_limit))
        else {
            return (None, metric);
        };
        let mut top: Vec<Ranked> = Vec::with_capacity(MAX_RETAINED_NODE_SCORES + 1);
        let mut source = Source {
            seen: 0,
            only: options.only,
        };

        // Upstream's LimitIterator feeding a MaxScoreIterator.
        let mut returned = 0;
        let mut skipped: Vec<Ranked> = Vec::with_capacity(MAX_SKIP);
        let mut skipped_next = 0;
        let mut best: Option<Ranked> = None;
        loop {
            if returned == limit {
                break;
            }
            let mut option = self.next_option(g, options, &mut source, &mut metric, &mut top);
            if option.is_none() && skipped_next < skipped.len() {
                option = Some(skipped[skipped_next]);
                skipped_next += 1;
            }
            let Some(mut candidate) = option else {
                break;
            };
            let mut exhausted = false;
            while candidate.scores.norm <= SKIP_SCORE_THRESHOLD && skipped.len() < MAX_SKIP {
                skipped.push(candidate);
                match self.next_option(g, options, &mut source, &mut metric, &mut top) {
                    Some(next) => candidate = next,
                    None => {
                        exhausted = true;
                        break;
                    }
                }
            }
            returned += 1;
            if exhausted {
                if skipped_next < skipped.len() {
                    candidate = skipped[skipped_next];
                    skipped_next += 1;
                } else {
                    break;
                }
            }
            if best.is_none_or(|best| candidate.scores.norm > best.scores.norm) {
                best = Some(candidate);
            }
        }

        metric.score_meta_data = top.iter().map(|ranked| self.score_meta(ranked)).collect();
        metric.allocation_time = (self.stopwatch)().saturating_sub(started).max(0);
        (best.map(|best| best.position), metric)
    }

    fn score_meta(&self, ranked: &Ranked) -> NodeScoreMeta {
        let mut scores = BTreeMap::new();
        scores.insert("binpack".to_owned(), ranked.scores.binpack);
        if !self.system {
            scores.insert("job-anti-affinity".to_owned(), ranked.scores.anti_affinity);
            scores.insert("node-reschedule-penalty".to_owned(), ranked.scores.penalty);
            scores.insert("node-affinity".to_owned(), ranked.scores.affinity);
            if let Some(spread) = ranked.scores.spread {
                scores.insert("allocation-spread".to_owned(), spread);
            }
        }
        NodeScoreMeta {
            node_id: self
                .nodes
                .node(ranked.position)
                .map(|node| node.id.clone())
                .unwrap_or_default(),
            scores,
            norm_score: ranked.scores.norm,
        }
    }

    /// The next feasible, scored node from the source (upstream's rank iterator chain).
    fn next_option(
        &mut self,
        g: usize,
        options: &SelectOptions<'_>,
        source: &mut Source,
        metric: &mut AllocMetric,
        top: &mut Vec<Ranked>,
    ) -> Option<Ranked> {
        loop {
            let position = self.next_node(source)?;
            metric.nodes_evaluated += 1;
            if let Some(ranked) = self.rank(g, position, options, metric) {
                // Keep the top scores (upstream's ScoreMetaData heap).
                let at = top
                    .iter()
                    .position(|other| ranked.scores.norm > other.scores.norm)
                    .unwrap_or(top.len());
                if at < MAX_RETAINED_NODE_SCORES {
                    top.insert(at, ranked);
                    top.truncate(MAX_RETAINED_NODE_SCORES);
                }
                return Some(ranked);
            }
        }
    }

    /// The next node position of the source (upstream's `StaticIterator.Next`).
    fn next_node(&mut self, source: &mut Source) -> Option<usize> {
        if let Some(only) = source.only {
            if source.seen > 0 {
                return None;
            }
            source.seen = 1;
            return Some(only);
        }
        let count = self.nodes.len();
        if source.seen >= count {
            return None;
        }
        if self.nodes.offset >= count {
            self.nodes.offset = 0;
        }
        let index = self.nodes.offset;
        self.nodes.offset += 1;
        source.seen += 1;
        Some(self.nodes.at(index))
    }

    fn rank(
        &mut self,
        g: usize,
        position: usize,
        options: &SelectOptions<'_>,
        metric: &mut AllocMetric,
    ) -> Option<Ranked> {
        let caches = &mut self.caches;
        let ready = &*self.nodes.ready;
        let node = ready.nodes.get(position)?;
        let group = self.groups.get_mut(g)?;

        // Static feasibility, shared per node table.
        let slot = group.cache.get(position)?;
        let code = match slot.load(Ordering::Relaxed) {
            0 => {
                let failed = group
                    .checks
                    .iter()
                    .position(|check| !check.passes(node, caches));
                let code = failed.map_or(1, |index| u16::try_from(index + 2).unwrap_or(u16::MAX));
                slot.store(code, Ordering::Relaxed);
                code
            }
            code => code,
        };
        if code != 1 {
            let reason = group
                .checks
                .get(usize::from(code).saturating_sub(2))
                .map_or("", Check::reason);
            filter_node(metric, node, reason);
            return None;
        }

        let group_name = group.tg.name.as_str();
        let (job_here, group_here) = self.proposed.on_node(position, group_name);
        if !self.system
            && ((group.distinct_hosts_job && job_here > 0)
                || (group.distinct_hosts_group && group_here > 0))
        {
            filter_node(metric, node, feasible::DISTINCT_HOSTS);
            return None;
        }
        for set in &group.distinct_properties {
            let Some(set) = self.sets.get(*set) else {
                continue;
            };
            match set.used(node) {
                Err(reason) => {
                    filter_node(metric, node, &reason);
                    return None;
                }
                Ok((value, used)) if used >= set.allowed => {
                    let reason = format!(
                        "distinct_property: {}={} used by {} allocs",
                        set.attribute, value, used
                    );
                    filter_node(metric, node, &reason);
                    return None;
                }
                Ok(_) => {}
            }
        }

        // Bin-pack: what the node holds once the plan is applied, plus this allocation.
        let mut util = self.nodes.usage.get(position);
        if let Some(delta) = self.proposed.usage.get(&position) {
            util.add(delta);
        }
        util.add(&group.ask);
        let capacity = ready.capacity.get(position).copied().unwrap_or_default();
        if let Some(dimension) = util.exceeded_dimension(&capacity) {
            exhaust_node(metric, node, dimension);
            return None;
        }
        if let Some(ask) = &group.ports {
            let used = used_ports(self.snapshot, &self.nodes, &self.proposed, position);
            if let Err(reason) = ports::check(ask, node, &used) {
                exhaust_node(metric, node, &format!("network: {reason}"));
                return None;
            }
        }
        let mut scores = Scores {
            binpack: score_fit_bin_pack(&capacity, &util) / BIN_PACKING_MAX_FIT_SCORE,
            ..Scores::default()
        };
        let mut sum = scores.binpack;
        let mut appended = 1.0;
        if !self.system {
            if group_here > 0 {
                let desired = group.tg.count.max(1) as f64;
                scores.anti_affinity = -((group_here + 1) as f64) / desired;
                sum += scores.anti_affinity;
                appended += 1.0;
            }
            if options.penalty_nodes.contains(&node.id.as_str()) {
                scores.penalty = -1.0;
                sum -= 1.0;
                appended += 1.0;
            }
            if !group.affinities.is_empty() {
                let cached = group
                    .affinity_cache
                    .get(position)
                    .copied()
                    .unwrap_or(f64::NAN);
                let score = if cached.is_nan() {
                    let matched: f64 = group
                        .affinities
                        .iter()
                        .filter(|(condition, _)| condition.check(node, caches))
                        .map(|(_, weight)| *weight)
                        .sum();
                    let score = if group.affinity_weight_sum > 0.0 {
                        matched / group.affinity_weight_sum
                    } else {
                        0.0
                    };
                    if let Some(slot) = group.affinity_cache.get_mut(position) {
                        *slot = score;
                    }
                    score
                } else {
                    cached
                };
                scores.affinity = score;
                sum += score;
                appended += 1.0;
            }
            if !group.spreads.is_empty() {
                let mut total = 0.0;
                for term in &group.spreads {
                    let Some(set) = self.sets.get(term.set) else {
                        continue;
                    };
                    let (value, used) = match set.used(node) {
                        Ok(found) => found,
                        Err(_) => {
                            total -= 1.0;
                            continue;
                        }
                    };
                    let used = used + 1;
                    if term.desired.is_empty() {
                        total += even_spread_boost(set, node);
                        continue;
                    }
                    let Some(desired) = term
                        .desired
                        .get(value)
                        .or_else(|| term.desired.get(IMPLICIT_TARGET))
                        .copied()
                    else {
                        total -= 1.0;
                        continue;
                    };
                    let weight = if group.spread_weight_sum != 0.0 {
                        term.weight / group.spread_weight_sum
                    } else {
                        0.0
                    };
                    if desired == 0.0 {
                        total += self.lowest_spread_boost;
                        continue;
                    }
                    let boost = (desired - used as f64) / desired * weight;
                    total += boost;
                    if boost < self.lowest_spread_boost {
                        self.lowest_spread_boost = boost;
                    }
                }
                if total != 0.0 {
                    scores.spread = Some(total);
                    sum += total;
                    appended += 1.0;
                }
            }
        }
        scores.norm = sum / appended;
        Some(Ranked { position, scores })
    }
}

/// The ports the non-terminal allocations on the node at `position` hold, minus those of
/// allocations the plan stops, plus those its placements take.
fn used_ports(
    snapshot: &Snapshot,
    nodes: &NodeSet,
    proposed: &Proposed,
    position: usize,
) -> BTreeSet<i64> {
    let mut used = BTreeSet::new();
    let Some(node) = nodes.node(position) else {
        return used;
    };
    let stopped = proposed.stopped.get(&position);
    for alloc in snapshot.allocs_on_node(&node.id) {
        if alloc.terminal() || stopped.is_some_and(|ids| ids.contains(&alloc.id)) {
            continue;
        }
        used.extend(ports::held(alloc));
    }
    if let Some(placed) = proposed.placed_ports.get(&position) {
        used.extend(placed.iter().copied());
    }
    used
}

/// Where one selection is in its source.
#[derive(Debug)]
struct Source {
    seen: usize,
    only: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_pack_scores_fuller_nodes_higher() {
        let capacity = Comparable {
            cpu: 1000,
            memory_mb: 1000,
            disk_mb: 1000,
        };
        let empty = score_fit_bin_pack(&capacity, &Comparable::default());
        let half = score_fit_bin_pack(
            &capacity,
            &Comparable {
                cpu: 500,
                memory_mb: 500,
                disk_mb: 0,
            },
        );
        let full = score_fit_bin_pack(&capacity, &capacity);
        assert_eq!(empty, 0.0);
        assert!((half - (20.0 - 2.0 * 10_f64.sqrt())).abs() < 1e-9);
        assert_eq!(full, 18.0);
        assert_eq!(score_fit_bin_pack(&Comparable::default(), &capacity), 18.0);
    }
}
