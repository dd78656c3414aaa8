//! Placement unit tests over hand-built snapshots: constraints, bin-packing order, spread,
//! affinity, anti-affinity, exhaustion metrics, reconciliation (scale, updates, lost,
//! migrations), rescheduling and system jobs.
//!
//! `World` builds a `Snapshot` the way the state writer would (jobs with their versions,
//! allocations with the node/job indexes and node usage kept in step), so `compute` sees
//! what it sees in production.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::structs::{
    ALLOC_CLIENT_COMPLETE, ALLOC_CLIENT_FAILED, ALLOC_CLIENT_RUNNING, Affinity, Comparable,
    Constraint, DesiredTransition, DriverInfo, EVAL_STATUS_PENDING, JOB_TYPE_SERVICE,
    NODE_STATUS_DOWN, NODE_STATUS_READY, Node, NodeCpuResources, NodeDiskResources,
    NodeMemoryResources, NodeResources, RescheduleEvent, RescheduleTracker, SECOND, Spread,
    SpreadTarget, TRIGGER_JOB_REGISTER, Task,
};

const NOW: i64 = 1_700_000_000 * SECOND;

/// A snapshot under construction.
#[derive(Default)]
struct World {
    snap: Snapshot,
}

impl World {
    fn new() -> World {
        World::default()
    }

    fn bump(&mut self) -> u64 {
        self.snap.index += 1;
        self.snap.index
    }

    fn add_node(&mut self, mut node: Node) {
        let index = self.bump();
        node.create_index = index;
        node.modify_index = index;
        self.snap.tables.nodes = index;
        self.snap.nodes.insert(node.id.clone(), Arc::new(node));
    }

    fn add_job(&mut self, mut job: Job) {
        let index = self.bump();
        job.modify_index = index;
        job.job_modify_index = index;
        let key = job.key();
        let job = Arc::new(job);
        self.snap
            .job_versions
            .insert((key.clone(), job.version), Arc::clone(&job));
        self.snap.jobs.insert(key, job);
        self.snap.tables.jobs = index;
    }

    fn add_alloc(&mut self, mut alloc: Allocation) {
        let index = self.bump();
        alloc.create_index = index;
        alloc.modify_index = index;
        if !alloc.terminal() {
            let mut usage = self.snap.node_used(&alloc.node_id);
            usage.add(&alloc.allocated_resources.comparable());
            self.snap.node_usage.insert(alloc.node_id.clone(), usage);
        }
        self.snap
            .allocs_by_node
            .entry(alloc.node_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        self.snap
            .allocs_by_job
            .entry(JobKey::new(&alloc.namespace, &alloc.job_id))
            .or_default()
            .insert(alloc.id.clone());
        self.snap.tables.allocs = index;
        self.snap.allocs.insert(alloc.id.clone(), Arc::new(alloc));
    }

    fn run(&self, job: &Job) -> Plan {
        self.run_seed(job, 1)
    }

    fn run_seed(&self, job: &Job, seed: u64) -> Plan {
        compute(
            &self.snap,
            &eval_for(job),
            &PlacementContext {
                now: NOW,
                seed,
                stopwatch: || 0,
            },
        )
    }
}

fn node(id: &str) -> Node {
    let mut node = Node {
        id: id.to_owned(),
        name: format!("name-{id}"),
        datacenter: "dc1".to_owned(),
        node_pool: "default".to_owned(),
        status: NODE_STATUS_READY.to_owned(),
        scheduling_eligibility: "eligible".to_owned(),
        node_resources: NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 4000,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb: 8192 },
            disk: NodeDiskResources { disk_mb: 100_000 },
            ..NodeResources::default()
        },
        ..Node::default()
    };
    node.attributes
        .insert("kernel.name".to_owned(), "linux".to_owned());
    node.drivers.insert(
        "raw_exec".to_owned(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..DriverInfo::default()
        },
    );
    node
}

fn node_with(id: &str, attr: &str, value: &str) -> Node {
    let mut node = node(id);
    node.attributes.insert(attr.to_owned(), value.to_owned());
    node
}

fn job(id: &str, job_type: &str, count: i64) -> Job {
    let reschedule = match job_type {
        JOB_TYPE_SERVICE => Some(ReschedulePolicy {
            attempts: 0,
            interval: 0,
            delay: 30 * SECOND,
            delay_function: "exponential".to_owned(),
            max_delay: 3600 * SECOND,
            unlimited: true,
        }),
        JOB_TYPE_BATCH => Some(ReschedulePolicy {
            attempts: 1,
            interval: 86_400 * SECOND,
            delay: 5 * SECOND,
            delay_function: "constant".to_owned(),
            max_delay: 0,
            unlimited: false,
        }),
        _ => None,
    };
    Job {
        namespace: "default".to_owned(),
        id: id.to_owned(),
        name: id.to_owned(),
        job_type: job_type.to_owned(),
        priority: 50,
        datacenters: vec!["*".to_owned()],
        node_pool: "default".to_owned(),
        task_groups: vec![TaskGroup {
            name: "web".to_owned(),
            count,
            reschedule_policy: reschedule,
            ephemeral_disk: Some(crate::structs::EphemeralDisk {
                size_mb: 300,
                ..Default::default()
            }),
            tasks: vec![Task {
                name: "server".to_owned(),
                driver: "raw_exec".to_owned(),
                resources: Resources {
                    cpu: 100,
                    memory_mb: 256,
                    ..Resources::default()
                },
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        status: "pending".to_owned(),
        ..Job::default()
    }
}

fn service(count: i64) -> Job {
    job("web", JOB_TYPE_SERVICE, count)
}

fn eval_for(job: &Job) -> Evaluation {
    Evaluation {
        id: "eval-0000".to_owned(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        job_type: job.job_type.clone(),
        triggered_by: TRIGGER_JOB_REGISTER.to_owned(),
        job_id: job.id.clone(),
        job_modify_index: job.job_modify_index,
        status: EVAL_STATUS_PENDING.to_owned(),
        ..Evaluation::default()
    }
}

/// A running allocation of `job`'s first group on `node`, as the plan would have placed it.
fn alloc(job: &Job, index: u64, node_id: &str) -> Allocation {
    let tg = &job.task_groups[0];
    let mut alloc = alloc_template(job, tg, "eval-old", NOW - 3600 * SECOND);
    alloc.id = format!("alloc-{}-{index}-{node_id}", job.id);
    alloc.name = alloc_name(&job.id, &tg.name, index);
    alloc.node_id = node_id.to_owned();
    alloc.node_name = format!("name-{node_id}");
    alloc.client_status = ALLOC_CLIENT_RUNNING.to_owned();
    alloc
}

/// Allocations the plan creates (IDs not in the snapshot).
fn placed<'p>(world: &World, plan: &'p Plan) -> Vec<&'p Allocation> {
    plan.node_allocation
        .values()
        .flatten()
        .filter(|alloc| !world.snap.allocs.contains_key(&alloc.id))
        .map(|alloc| &**alloc)
        .collect()
}

/// Existing allocations the plan rewrites (in-place updates, follow-up marks).
fn rewritten<'p>(world: &World, plan: &'p Plan) -> Vec<&'p Allocation> {
    plan.node_allocation
        .values()
        .flatten()
        .filter(|alloc| world.snap.allocs.contains_key(&alloc.id))
        .map(|alloc| &**alloc)
        .collect()
}

fn stops(plan: &Plan) -> Vec<&AllocStop> {
    plan.node_update.values().flatten().collect()
}

fn nodes_of(allocs: &[&Allocation]) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    for alloc in allocs {
        *count.entry(alloc.node_id.clone()).or_default() += 1;
    }
    count
}

fn names(allocs: &[&Allocation]) -> Vec<String> {
    let mut names: Vec<String> = allocs.iter().map(|alloc| alloc.name.clone()).collect();
    names.sort();
    names
}

fn constrained(constraint: (&str, &str, &str)) -> Job {
    let mut job = service(1);
    job.constraints.push(Constraint {
        l_target: constraint.0.to_owned(),
        operand: constraint.1.to_owned(),
        r_target: constraint.2.to_owned(),
    });
    job
}

#[test]
fn every_constraint_operator_selects_the_matching_node() {
    // (constraint, attribute on node "a", attribute on node "b", node expected)
    type Case<'c> = ((&'c str, &'c str, &'c str), &'c str, &'c str, &'c str);
    let cases: &[Case<'_>] = &[
        (("${attr.v}", "=", "x"), "x", "y", "a"),
        (("${attr.v}", "==", "y"), "x", "y", "b"),
        (("${attr.v}", "is", "x"), "x", "y", "a"),
        (("${attr.v}", "!=", "x"), "x", "y", "b"),
        (("${attr.v}", "not", "y"), "x", "y", "a"),
        (("${attr.v}", "<", "10"), "9", "10", "a"),
        (("${attr.v}", "<=", "9"), "9", "10", "a"),
        (("${attr.v}", ">", "9"), "9", "10", "b"),
        (("${attr.v}", ">=", "10"), "9", "10", "b"),
        (("${attr.v}", ">", "apple"), "aardvark", "banana", "b"),
        (
            ("${attr.v}", "regexp", "^ubu.*22"),
            "ubuntu-22.04",
            "debian-12",
            "a",
        ),
        (
            ("${attr.v}", "version", ">= 1.2, < 2.0"),
            "1.10.0",
            "2.1.0",
            "a",
        ),
        (("${attr.v}", "version", "~> 1.2"), "1.2.9", "1.1.0", "a"),
        (
            ("${attr.v}", "semver", "> 2.0.0-beta"),
            "2.0.0-rc1",
            "2.0.0-alpha",
            "a",
        ),
        (("${attr.v}", "set_contains", "b,c"), "a,b,c", "a,b", "a"),
        (("${attr.v}", "set_contains_all", "a, b"), "c", "a,b", "b"),
        (("${attr.v}", "set_contains_any", "z,b"), "a", "b,c", "b"),
        (("${attr.v}", "is_set", ""), "1", "", "a"),
        (("${attr.v}", "is_not_set", ""), "1", "", "b"),
        (("${node.unique.name}", "=", "name-b"), "1", "1", "b"),
        (("${node.unique.id}", "!=", "a"), "1", "1", "b"),
    ];
    for (constraint, on_a, on_b, want) in cases {
        let mut world = World::new();
        world.add_node(node_with("a", "v", on_a));
        let mut b = node_with("b", "v", on_b);
        if on_b.is_empty() {
            b.attributes.remove("v");
        }
        world.add_node(b);
        let job = constrained(*constraint);
        world.add_job(job.clone());
        let plan = world.run(&job);
        let placed = placed(&world, &plan);
        assert_eq!(placed.len(), 1, "{constraint:?}: {plan:#?}");
        assert_eq!(placed[0].node_id, *want, "{constraint:?}");
        let text = format!("{} {} {}", constraint.0, constraint.1, constraint.2);
        assert_eq!(
            placed[0].metrics.constraint_filtered.get(&text),
            Some(&1),
            "{constraint:?} records the filtered node under its text"
        );
    }
}

#[test]
fn malformed_constraints_filter_every_node_without_panicking() {
    for constraint in [
        ("${attr.kernel.name}", "regexp", "(unclosed"),
        ("${attr.kernel.name}", "version", "not a version"),
        ("${attr.kernel.name}", "no-such-operator", "linux"),
        ("${attr.kernel.name}", "semver", "~> 1.0"),
    ] {
        let mut world = World::new();
        world.add_node(node("a"));
        let job = constrained(constraint);
        world.add_job(job.clone());
        let plan = world.run(&job);
        assert!(placed(&world, &plan).is_empty());
        let failed = &plan.eval.failed_tg_allocs["web"];
        assert_eq!(failed.nodes_filtered, 1, "{constraint:?}");
    }
}

#[test]
fn distinct_hosts_never_puts_two_allocations_on_one_node() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let mut job = service(3);
    job.task_groups[0].constraints.push(Constraint {
        operand: "distinct_hosts".to_owned(),
        ..Constraint::default()
    });
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 2);
    assert_eq!(nodes_of(&placed).len(), 2, "one per node");
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert_eq!(failed.constraint_filtered.get("distinct_hosts"), Some(&2));
    assert_eq!(plan.eval.queued_allocations["web"], 1);
}

#[test]
fn distinct_property_caps_allocations_per_property_value() {
    let mut world = World::new();
    for (id, rack) in [("a", "r1"), ("b", "r1"), ("c", "r2")] {
        let mut n = node(id);
        n.meta.insert("rack".to_owned(), rack.to_owned());
        world.add_node(n);
    }
    let mut job = service(5);
    job.constraints.push(Constraint {
        l_target: "${meta.rack}".to_owned(),
        operand: "distinct_property".to_owned(),
        r_target: "2".to_owned(),
    });
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 4, "two per rack");
    let on_r1 = placed
        .iter()
        .filter(|alloc| alloc.node_id == "a" || alloc.node_id == "b")
        .count();
    assert_eq!(on_r1, 2);
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert!(
        failed
            .constraint_filtered
            .keys()
            .any(|key| key.starts_with("distinct_property: ${meta.rack}=r")),
        "{failed:#?}"
    );
}

#[test]
fn bin_packing_prefers_the_fuller_node() {
    let mut world = World::new();
    world.add_node(node("empty"));
    world.add_node(node("busy"));
    let other = job("other", JOB_TYPE_SERVICE, 1);
    let mut big = alloc(&other, 0, "busy");
    big.allocated_resources
        .tasks
        .get_mut("server")
        .unwrap()
        .cpu
        .cpu_shares = 2000;
    big.allocated_resources
        .tasks
        .get_mut("server")
        .unwrap()
        .memory
        .memory_mb = 4096;
    world.add_job(other);
    world.add_alloc(big);
    let job = service(1);
    world.add_job(job.clone());
    for seed in 0..10 {
        let plan = world.run_seed(&job, seed);
        let placed = placed(&world, &plan);
        assert_eq!(placed[0].node_id, "busy", "seed {seed}");
        let meta = &placed[0].metrics.score_meta_data;
        assert_eq!(meta.len(), 2);
        assert_eq!(meta[0].node_id, "busy");
        assert!(meta[0].norm_score > meta[1].norm_score);
        assert!(meta[0].scores["binpack"] > meta[1].scores["binpack"]);
    }
}

#[test]
fn job_anti_affinity_spreads_a_groups_allocations() {
    let mut world = World::new();
    for id in ["a", "b", "c"] {
        world.add_node(node(id));
    }
    let job = service(3);
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 3);
    assert_eq!(nodes_of(&placed).len(), 3, "{:?}", nodes_of(&placed));
    assert_eq!(names(&placed), ["web.web[0]", "web.web[1]", "web.web[2]"]);
}

#[test]
fn spread_targets_split_allocations_by_percentage() {
    let mut world = World::new();
    for i in 0..10 {
        let mut n = node(&format!("n{i:02}"));
        n.datacenter = if i < 5 { "dc1" } else { "dc2" }.to_owned();
        world.add_node(n);
    }
    let mut job = service(10);
    job.spreads.push(Spread {
        attribute: "${node.datacenter}".to_owned(),
        weight: 100,
        spread_target: vec![
            SpreadTarget {
                value: "dc1".to_owned(),
                percent: 70,
            },
            SpreadTarget {
                value: "dc2".to_owned(),
                percent: 30,
            },
        ],
    });
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 10);
    let in_dc1 = placed
        .iter()
        .filter(|alloc| alloc.node_id.as_str() < "n05")
        .count();
    assert_eq!(in_dc1, 7, "70% in dc1");
    assert!(placed.iter().all(|alloc| alloc.metrics.nodes_available
        == BTreeMap::from([("dc1".to_owned(), 5), ("dc2".to_owned(), 5)])));
}

#[test]
fn even_spread_balances_across_values() {
    let mut world = World::new();
    for i in 0..9 {
        let mut n = node(&format!("n{i}"));
        n.meta.insert("zone".to_owned(), format!("z{}", i % 3));
        world.add_node(n);
    }
    let mut job = service(6);
    job.task_groups[0].spreads.push(Spread {
        attribute: "${meta.zone}".to_owned(),
        weight: 50,
        spread_target: Vec::new(),
    });
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    let mut zones: BTreeMap<String, usize> = BTreeMap::new();
    for alloc in &placed {
        let node = world.snap.node(&alloc.node_id).unwrap();
        *zones.entry(node.meta["zone"].clone()).or_default() += 1;
    }
    assert_eq!(zones.values().copied().collect::<Vec<_>>(), [2, 2, 2]);
}

#[test]
fn node_affinity_prefers_matching_nodes() {
    let mut world = World::new();
    for i in 0..6 {
        let mut n = node(&format!("n{i}"));
        n.meta.insert(
            "rack".to_owned(),
            if i == 4 { "r2" } else { "r1" }.to_owned(),
        );
        world.add_node(n);
    }
    let mut job = service(1);
    job.affinities.push(Affinity {
        l_target: "${meta.rack}".to_owned(),
        operand: "=".to_owned(),
        r_target: "r2".to_owned(),
        weight: 100,
    });
    world.add_job(job.clone());
    for seed in 0..5 {
        let plan = world.run_seed(&job, seed);
        let placed = placed(&world, &plan);
        assert_eq!(placed[0].node_id, "n4", "seed {seed}");
        assert_eq!(
            placed[0].metrics.score_meta_data[0].scores["node-affinity"],
            1.0
        );
    }
}

#[test]
fn exhausted_memory_is_reported_and_blocks_an_evaluation() {
    let mut world = World::new();
    for id in ["a", "b", "c"] {
        world.add_node(node(id));
    }
    let mut job = service(4);
    job.task_groups[0].tasks[0].resources.memory_mb = 10_000;
    world.add_job(job.clone());
    let plan = world.run(&job);
    assert!(plan.node_allocation.is_empty());
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert_eq!(failed.nodes_evaluated, 3);
    assert_eq!(failed.nodes_exhausted, 3);
    assert_eq!(failed.dimension_exhausted.get("memory"), Some(&3));
    assert_eq!(failed.coalesced_failures, 3);
    assert_eq!(failed.nodes_in_pool, 3);
    let exhausted = failed.resources_exhausted.as_ref().unwrap();
    assert_eq!(exhausted["server"]["MemoryMB"], 40_000);
    assert_eq!(plan.eval.queued_allocations["web"], 4);
    assert_eq!(plan.eval.status, EVAL_STATUS_COMPLETE);
    assert_eq!(plan.new_evals.len(), 1);
    let blocked = &plan.new_evals[0];
    assert_eq!(blocked.status, EVAL_STATUS_BLOCKED);
    assert_eq!(blocked.triggered_by, TRIGGER_QUEUED_ALLOCS);
    assert_eq!(blocked.previous_eval, plan.eval.id);
    assert_eq!(plan.eval.blocked_eval, blocked.id);
    assert_eq!(blocked.failed_tg_allocs["web"].nodes_exhausted, 3);
}

#[test]
fn placements_account_for_what_the_plan_already_placed() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut job = service(5);
    // 4000 MHz / 1000 each: four fit, the fifth does not.
    job.task_groups[0].tasks[0].resources.cpu = 1000;
    world.add_job(job.clone());
    let plan = world.run(&job);
    assert_eq!(placed(&world, &plan).len(), 4);
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert_eq!(failed.dimension_exhausted.get("cpu"), Some(&1));
    assert_eq!(plan.eval.queued_allocations["web"], 1);
}

#[test]
fn unusable_nodes_are_not_candidates_and_drivers_are_checked() {
    let mut world = World::new();
    world.add_node(node("good"));
    let mut other_dc = node("other-dc");
    other_dc.datacenter = "dc2".to_owned();
    world.add_node(other_dc);
    let mut other_pool = node("other-pool");
    other_pool.node_pool = "gpu".to_owned();
    world.add_node(other_pool);
    let mut draining = node("draining");
    draining.drain = true;
    world.add_node(draining);
    let mut down = node("down");
    down.status = NODE_STATUS_DOWN.to_owned();
    world.add_node(down);
    let mut no_driver = node("no-driver");
    no_driver.drivers.clear();
    world.add_node(no_driver);
    let mut job = service(2);
    job.datacenters = vec!["dc1".to_owned()];
    world.add_job(job.clone());
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 2);
    assert!(placed.iter().all(|alloc| alloc.node_id == "good"));
    let metrics = &placed[0].metrics;
    assert_eq!(
        metrics.nodes_in_pool, 2,
        "ready nodes in the pool and datacenters"
    );
    assert_eq!(metrics.constraint_filtered.get("missing drivers"), Some(&1));
    assert_eq!(
        metrics.nodes_available,
        BTreeMap::from([("dc1".to_owned(), 2)])
    );
}

#[test]
fn placed_allocations_carry_resources_metrics_and_identity() {
    let mut world = World::new();
    world.add_node(node("a"));
    let job = service(1);
    world.add_job(job.clone());
    let plan = world.run(&job);
    let alloc = placed(&world, &plan)[0];
    assert_eq!(alloc.id.len(), 36);
    assert_eq!(
        alloc.id.split('-').map(str::len).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12]
    );
    assert_eq!(alloc.id.as_bytes()[14], b'4', "UUID v4 format");
    assert_eq!(alloc.name, "web.web[0]");
    assert_eq!(
        (alloc.node_id.as_str(), alloc.node_name.as_str()),
        ("a", "name-a")
    );
    assert_eq!(alloc.eval_id, "eval-0000");
    assert_eq!(
        (alloc.job_id.as_str(), alloc.job_type.as_str()),
        ("web", "service")
    );
    assert_eq!(alloc.desired_status, "run");
    assert_eq!(alloc.client_status, "pending");
    assert_eq!((alloc.create_time, alloc.modify_time), (NOW, NOW));
    assert_eq!(alloc.create_index, 0);
    assert_eq!(
        alloc.allocated_resources.comparable(),
        Comparable {
            cpu: 100,
            memory_mb: 256,
            disk_mb: 300
        }
    );
    assert_eq!(alloc.resources.as_ref().unwrap().cpu, 100);
    assert_eq!(alloc.task_resources["server"].memory_mb, 256);
    assert_eq!(alloc.metrics.nodes_evaluated, 1);
    assert_eq!(alloc.metrics.score_meta_data.len(), 1);
    assert!(
        alloc.metrics.score_meta_data[0]
            .scores
            .contains_key("binpack")
    );
    assert_eq!(plan.eval.queued_allocations["web"], 0);
    assert!(plan.eval.failed_tg_allocs.is_empty());
    assert!(plan.new_evals.is_empty());
    assert_eq!(
        plan.job_modify_index,
        world.snap.jobs[&job.key()].job_modify_index
    );
    assert_eq!(plan.snapshot_index, world.snap.index);
    assert_eq!(plan.eval.snapshot_index, world.snap.index);
}

#[test]
fn scaling_up_places_the_lowest_free_indexes() {
    let mut world = World::new();
    for id in ["a", "b", "c"] {
        world.add_node(node(id));
    }
    let job = service(4);
    world.add_job(job.clone());
    world.add_alloc(alloc(&job, 0, "a"));
    world.add_alloc(alloc(&job, 2, "b"));
    let plan = world.run(&job);
    assert_eq!(names(&placed(&world, &plan)), ["web.web[1]", "web.web[3]"]);
    assert!(plan.node_update.is_empty());
    assert!(
        rewritten(&world, &plan).is_empty(),
        "up-to-date allocations stay"
    );
}

#[test]
fn scaling_down_stops_the_highest_indexes() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let job = service(2);
    world.add_job(job.clone());
    for index in 0..4 {
        world.add_alloc(alloc(&job, index, if index % 2 == 0 { "a" } else { "b" }));
    }
    let plan = world.run(&job);
    assert!(placed(&world, &plan).is_empty());
    let mut stopped: Vec<&str> = stops(&plan).iter().map(|s| s.alloc_id.as_str()).collect();
    stopped.sort();
    assert_eq!(stopped, ["alloc-web-2-a", "alloc-web-3-b"]);
    assert!(stops(&plan).iter().all(|stop| stop.desired_description
        == "alloc not needed due to job update"
        && stop.desired_status == "stop"
        && stop.client_status.is_none()));
}

#[test]
fn destructive_update_replaces_allocations_of_a_changed_group() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let old = service(2);
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "a"));
    world.add_alloc(alloc(&old, 1, "b"));
    let mut new = old.clone();
    new.version = 1;
    new.task_groups[0].tasks[0]
        .env
        .insert("COLOR".to_owned(), "blue".to_owned());
    world.add_job(new.clone());
    let plan = world.run(&new);
    let placed = placed(&world, &plan);
    assert_eq!(names(&placed), ["web.web[0]", "web.web[1]"]);
    assert!(placed.iter().all(|alloc| alloc.job_version == 1));
    let stops = stops(&plan);
    assert_eq!(stops.len(), 2);
    for stop in stops {
        assert_eq!(
            stop.desired_description,
            "alloc is being updated due to job update"
        );
        let replacement = placed
            .iter()
            .find(|alloc| alloc.previous_allocation == stop.alloc_id)
            .expect("each stopped allocation has a replacement");
        assert_eq!(
            stop.next_allocation.as_deref(),
            Some(replacement.id.as_str())
        );
    }
}

#[test]
fn unchanged_group_is_updated_in_place_to_the_new_version() {
    let mut world = World::new();
    world.add_node(node("a"));
    let old = service(1);
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "a"));
    let mut new = old.clone();
    new.version = 1;
    new.priority = 70;
    new.task_groups[0].constraints.push(Constraint {
        l_target: "${attr.kernel.name}".to_owned(),
        operand: "=".to_owned(),
        r_target: "linux".to_owned(),
    });
    world.add_job(new.clone());
    let plan = world.run(&new);
    assert!(placed(&world, &plan).is_empty());
    assert!(plan.node_update.is_empty());
    let updated = rewritten(&world, &plan);
    assert_eq!(updated.len(), 1);
    assert_eq!(updated[0].id, "alloc-web-0-a");
    assert_eq!(updated[0].job_version, 1);
    assert_eq!(updated[0].eval_id, "eval-0000");
}

#[test]
fn in_place_candidate_on_a_no_longer_feasible_node_is_replaced() {
    let mut world = World::new();
    world.add_node(node("a"));
    world.add_node(node_with("b", "kernel.name", "darwin"));
    let old = service(1);
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "a"));
    let mut new = old.clone();
    new.version = 1;
    new.constraints.push(Constraint {
        l_target: "${attr.kernel.name}".to_owned(),
        operand: "=".to_owned(),
        r_target: "darwin".to_owned(),
    });
    world.add_job(new.clone());
    let plan = world.run(&new);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].node_id, "b");
    assert_eq!(stops(&plan)[0].alloc_id, "alloc-web-0-a");
}

#[test]
fn lost_allocations_on_a_down_node_are_replaced_at_once() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut gone = node("gone");
    gone.status = NODE_STATUS_DOWN.to_owned();
    world.add_node(gone);
    let job = service(2);
    world.add_job(job.clone());
    world.add_alloc(alloc(&job, 0, "a"));
    world.add_alloc(alloc(&job, 1, "gone"));
    // An allocation on a node that no longer exists is lost too.
    let mut orphan = alloc(&job, 2, "vanished");
    orphan.name = alloc_name("web", "web", 1);
    world.add_alloc(orphan);
    let plan = world.run(&job);
    let stops = stops(&plan);
    assert_eq!(stops.len(), 2);
    for stop in &stops {
        assert_eq!(stop.desired_status, "stop");
        assert_eq!(stop.client_status.as_deref(), Some("lost"));
        assert_eq!(
            stop.desired_description,
            "alloc is lost since its node is down"
        );
    }
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 1, "replacements only up to the count");
    assert_eq!(placed[0].name, "web.web[1]");
    assert_eq!(placed[0].node_id, "a");
    assert!(placed[0].previous_allocation.starts_with("alloc-web-"));
    let linked = stops
        .iter()
        .find(|stop| stop.alloc_id == placed[0].previous_allocation)
        .unwrap();
    assert_eq!(
        linked.next_allocation.as_deref(),
        Some(placed[0].id.as_str())
    );
    assert!(plan.new_evals.is_empty(), "no reschedule delay");
}

#[test]
fn migrating_allocation_is_stopped_and_replaced() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let job = service(1);
    world.add_job(job.clone());
    let mut moving = alloc(&job, 0, "a");
    moving.desired_transition = DesiredTransition {
        migrate: Some(true),
        ..DesiredTransition::default()
    };
    world.add_alloc(moving);
    let plan = world.run(&job);
    let stop = stops(&plan)[0];
    assert_eq!(stop.desired_description, "alloc is being migrated");
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].previous_allocation, "alloc-web-0-a");
    assert_eq!(placed[0].name, "web.web[0]");
    assert_eq!(stop.next_allocation.as_deref(), Some(placed[0].id.as_str()));
}

fn failed(job: &Job, index: u64, node: &str, failed_at: i64) -> Allocation {
    let mut alloc = alloc(job, index, node);
    alloc.client_status = ALLOC_CLIENT_FAILED.to_owned();
    alloc.modify_time = failed_at;
    alloc
}

#[test]
fn failed_allocation_past_its_delay_is_rescheduled_now_on_another_node() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let job = service(1);
    world.add_job(job.clone());
    world.add_alloc(failed(&job, 0, "a", NOW - 60 * SECOND));
    for seed in 0..5 {
        let plan = world.run_seed(&job, seed);
        let placed = placed(&world, &plan);
        assert_eq!(placed.len(), 1);
        let replacement = placed[0];
        assert_eq!(
            replacement.node_id, "b",
            "the failed node is penalized (seed {seed})"
        );
        assert_eq!(replacement.name, "web.web[0]");
        assert_eq!(replacement.previous_allocation, "alloc-web-0-a");
        let events = &replacement.reschedule_tracker.as_ref().unwrap().events;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].prev_alloc_id, "alloc-web-0-a");
        assert_eq!(events[0].prev_node_id, "a");
        assert_eq!(events[0].reschedule_time, NOW);
        assert_eq!(events[0].delay, 30 * SECOND);
        let stop = stops(&plan)[0];
        assert_eq!(stop.alloc_id, "alloc-web-0-a");
        assert_eq!(
            stop.desired_description,
            "alloc was rescheduled because it failed"
        );
        assert_eq!(
            stop.next_allocation.as_deref(),
            Some(replacement.id.as_str())
        );
        assert_eq!(stop.client_status, None);
    }
}

#[test]
fn failed_allocation_within_its_delay_gets_a_follow_up_evaluation() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let job = service(1);
    world.add_job(job.clone());
    let mut previous = failed(&job, 0, "a", NOW - 10 * SECOND);
    previous.reschedule_tracker = Some(RescheduleTracker {
        events: vec![RescheduleEvent {
            reschedule_time: NOW - 100 * SECOND,
            prev_alloc_id: "older".to_owned(),
            prev_node_id: "b".to_owned(),
            delay: 30 * SECOND,
        }],
    });
    world.add_alloc(previous);
    let plan = world.run(&job);
    assert!(placed(&world, &plan).is_empty());
    assert!(plan.node_update.is_empty());
    assert_eq!(plan.new_evals.len(), 1);
    let followup = &plan.new_evals[0];
    assert_eq!(followup.status, "pending");
    assert_eq!(followup.triggered_by, "alloc-failure");
    // Exponential: the previous delay (30 s) doubled, from the failure time.
    assert_eq!(followup.wait_until, NOW - 10 * SECOND + 60 * SECOND);
    assert_eq!(
        (
            followup.job_id.as_str(),
            followup.namespace.as_str(),
            followup.priority
        ),
        ("web", "default", 50)
    );
    assert_eq!(followup.job_type, "service");
    assert_eq!(plan.eval.next_eval, followup.id);
    let marked = rewritten(&world, &plan);
    assert_eq!(marked.len(), 1);
    assert_eq!(marked[0].followup_eval_id, followup.id);
    assert_eq!(marked[0].node_id, "a");
    assert_eq!(marked[0].client_status, "failed");

    // The follow-up evaluation itself reschedules it, avoiding both earlier nodes if it can.
    let mut world2 = World::new();
    for id in ["a", "b", "c"] {
        world2.add_node(node(id));
    }
    world2.add_job(job.clone());
    let mut waiting = (*marked[0]).clone();
    waiting.modify_time = NOW - 10 * SECOND;
    world2.add_alloc(waiting);
    let mut eval = eval_for(&job);
    eval.id = followup.id.clone();
    let plan = compute(
        &world2.snap,
        &eval,
        &PlacementContext {
            now: NOW,
            seed: 3,
            stopwatch: || 0,
        },
    );
    let placed = placed(&world2, &plan);
    assert_eq!(placed.len(), 1);
    assert_eq!(placed[0].node_id, "c");
    assert_eq!(
        placed[0].reschedule_tracker.as_ref().unwrap().events.len(),
        2
    );
}

#[test]
fn failed_allocation_with_attempts_exhausted_stays_failed() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let job = job("batch", JOB_TYPE_BATCH, 1);
    world.add_job(job.clone());
    let mut exhausted = failed(&job, 0, "a", NOW - 3600 * SECOND);
    exhausted.reschedule_tracker = Some(RescheduleTracker {
        events: vec![RescheduleEvent {
            reschedule_time: NOW - 7200 * SECOND,
            prev_alloc_id: "first".to_owned(),
            prev_node_id: "b".to_owned(),
            delay: 5 * SECOND,
        }],
    });
    world.add_alloc(exhausted);
    let plan = world.run(&job);
    assert!(plan.node_allocation.is_empty());
    assert!(plan.node_update.is_empty());
    assert!(plan.new_evals.is_empty());
    assert_eq!(plan.eval.queued_allocations["web"], 0);
}

#[test]
fn completed_batch_allocations_are_not_replaced() {
    let mut world = World::new();
    world.add_node(node("a"));
    let job = job("batch", JOB_TYPE_BATCH, 2);
    world.add_job(job.clone());
    let mut done = alloc(&job, 0, "a");
    done.client_status = ALLOC_CLIENT_COMPLETE.to_owned();
    world.add_alloc(done);
    world.add_alloc(alloc(&job, 1, "a"));
    let plan = world.run(&job);
    assert!(plan.node_allocation.is_empty(), "{plan:#?}");
    assert!(plan.node_update.is_empty());

    // A completed service allocation, on the other hand, is replaced.
    let mut world = World::new();
    world.add_node(node("a"));
    let job = service(1);
    world.add_job(job.clone());
    let mut done = alloc(&job, 0, "a");
    done.client_status = ALLOC_CLIENT_COMPLETE.to_owned();
    world.add_alloc(done);
    let plan = world.run(&job);
    assert_eq!(names(&placed(&world, &plan)), ["web.web[0]"]);
}

#[test]
fn system_job_runs_one_allocation_per_eligible_node() {
    let mut world = World::new();
    for id in ["a", "b", "c"] {
        world.add_node(node(id));
    }
    world.add_node(node_with("mac", "kernel.name", "darwin"));
    let mut down = node("down");
    down.status = NODE_STATUS_DOWN.to_owned();
    world.add_node(down);
    let mut job = job("agent", JOB_TYPE_SYSTEM, 1);
    job.constraints.push(Constraint {
        l_target: "${attr.kernel.name}".to_owned(),
        operand: "=".to_owned(),
        r_target: "linux".to_owned(),
    });
    world.add_job(job.clone());
    world.add_alloc(alloc(&job, 0, "a"));
    world.add_alloc(alloc(&job, 0, "down"));
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(
        nodes_of(&placed).into_keys().collect::<Vec<_>>(),
        ["b", "c"],
        "one per eligible node without one"
    );
    assert!(placed.iter().all(|alloc| alloc.name == "agent.web[0]"));
    let stops = stops(&plan);
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0].alloc_id, "alloc-agent-0-down");
    assert_eq!(stops[0].client_status.as_deref(), Some("lost"));
    assert!(
        plan.eval.failed_tg_allocs.is_empty(),
        "filtered nodes are not failures"
    );
    assert_eq!(plan.eval.queued_allocations["web"], 0);
    assert!(plan.new_evals.is_empty());
}

#[test]
fn system_job_reports_nodes_without_room() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut small = node("small");
    small.node_resources.memory.memory_mb = 100;
    world.add_node(small);
    let job = job("agent", JOB_TYPE_SYSTEM, 1);
    world.add_job(job.clone());
    let plan = world.run(&job);
    assert_eq!(placed(&world, &plan).len(), 1);
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert_eq!(failed.dimension_exhausted.get("memory"), Some(&1));
    assert_eq!(plan.eval.queued_allocations["web"], 1);
    assert_eq!(plan.new_evals.len(), 1);
    assert_eq!(plan.new_evals[0].status, EVAL_STATUS_BLOCKED);
}

#[test]
fn stopped_or_missing_job_stops_every_running_allocation() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut job = service(2);
    world.add_job(job.clone());
    world.add_alloc(alloc(&job, 0, "a"));
    let mut done = alloc(&job, 1, "a");
    done.client_status = ALLOC_CLIENT_COMPLETE.to_owned();
    world.add_alloc(done);
    job.stop = true;
    world.add_job(job.clone());
    let plan = world.run(&job);
    let stops = stops(&plan);
    assert_eq!(stops.len(), 1, "terminal allocations are left alone");
    assert_eq!(stops[0].alloc_id, "alloc-web-0-a");
    assert_eq!(
        stops[0].desired_description,
        "alloc not needed due to job update"
    );
    assert_eq!(plan.eval.queued_allocations["web"], 0);

    let mut gone = world;
    gone.snap.jobs.remove(&job.key());
    let plan = gone.run(&job);
    assert_eq!(stops_len(&plan), 1);
    assert_eq!(plan.job_modify_index, 0);
    assert!(plan.eval.queued_allocations.is_empty());
}

fn stops_len(plan: &Plan) -> usize {
    stops(plan).len()
}

#[test]
fn removed_group_allocations_are_stopped() {
    let mut world = World::new();
    world.add_node(node("a"));
    let old = service(1);
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "a"));
    let mut new = old.clone();
    new.version = 1;
    new.task_groups[0].name = "api".to_owned();
    world.add_job(new.clone());
    let plan = world.run(&new);
    assert_eq!(stops(&plan)[0].alloc_id, "alloc-web-0-a");
    assert_eq!(names(&placed(&world, &plan)), ["web.api[0]"]);
}

#[test]
fn a_run_is_deterministic_for_a_seed() {
    let mut world = World::new();
    for i in 0..50 {
        world.add_node(node(&format!("n{i:02}")));
    }
    let job = service(20);
    world.add_job(job.clone());
    let strip = |mut plan: Plan| {
        for alloc in plan.node_allocation.values_mut().flatten() {
            Arc::make_mut(alloc).metrics.allocation_time = 0;
        }
        plan
    };
    let first = strip(world.run_seed(&job, 42));
    let second = strip(world.run_seed(&job, 42));
    assert_eq!(first, second);
    let placements = |plan: &Plan| -> Vec<(String, String)> {
        plan.node_allocation
            .values()
            .flatten()
            .map(|alloc| (alloc.name.clone(), alloc.node_id.clone()))
            .collect()
    };
    let differs =
        (0..5).any(|seed| placements(&strip(world.run_seed(&job, seed))) != placements(&first));
    assert!(differs, "other seeds shuffle nodes differently");
}

#[test]
fn absurd_input_does_not_crash_or_hang() {
    let mut world = World::new();
    world.add_node(node("a"));
    // A count no cluster could hold: the failures are coalesced at once.
    let mut huge = service(1_000_000_000_000);
    huge.task_groups[0].tasks[0].resources.memory_mb = 1 << 40;
    world.add_job(huge.clone());
    let plan = world.run(&huge);
    assert_eq!(
        plan.eval.failed_tg_allocs["web"].coalesced_failures,
        1_000_000_000_000 - 1
    );
    assert_eq!(plan.eval.queued_allocations["web"], 1_000_000_000_000);

    let mutations: [fn(&mut Job); 6] = [
        |job: &mut Job| job.task_groups[0].count = -5,
        |job: &mut Job| {
            let mut task = job.task_groups[0].tasks[0].clone();
            task.name = "second".to_owned();
            task.resources.memory_mb = i64::MAX;
            task.resources.cpu = i64::MAX;
            job.task_groups[0].tasks.push(task);
            job.task_groups[0].tasks[0].resources.memory_mb = i64::MAX;
        },
        |job: &mut Job| job.task_groups.clear(),
        |job: &mut Job| job.task_groups[0].tasks.clear(),
        |job: &mut Job| {
            job.task_groups[0].reschedule_policy = Some(ReschedulePolicy {
                attempts: i64::MAX,
                interval: i64::MAX,
                delay: i64::MAX,
                delay_function: "fibonacci".to_owned(),
                max_delay: -1,
                unlimited: false,
            })
        },
        |job: &mut Job| {
            job.task_groups[0].spreads.push(Spread {
                attribute: String::new(),
                weight: 0,
                spread_target: vec![SpreadTarget {
                    value: "x".to_owned(),
                    percent: 1000,
                }],
            });
            job.affinities.push(Affinity {
                l_target: "${".to_owned(),
                operand: "regexp".to_owned(),
                r_target: "[".to_owned(),
                weight: 0,
            });
            job.constraints.push(Constraint {
                l_target: "${meta.x}".to_owned(),
                operand: "distinct_property".to_owned(),
                r_target: "-1".to_owned(),
            });
        },
    ];
    for mutate in mutations {
        let mut world = World::new();
        world.add_node(node("a"));
        let mut job = service(2);
        world.add_alloc(failed(&job, 0, "a", NOW - SECOND));
        mutate(&mut job);
        world.add_job(job.clone());
        let _ = world.run(&job);
    }
}

/// Commits a plan's allocations into the world (what the applier would write).
fn commit(world: &mut World, plan: Plan) {
    for alloc in plan.node_allocation.into_values().flatten() {
        world.add_alloc(Arc::unwrap_or_clone(alloc));
    }
}

#[test]
fn later_runs_see_capacity_used_by_committed_plans() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut first = job("first", JOB_TYPE_SERVICE, 3);
    first.task_groups[0].tasks[0].resources.cpu = 1000;
    world.add_job(first.clone());
    let plan = world.run(&first);
    assert_eq!(placed(&world, &plan).len(), 3);
    commit(&mut world, plan);
    // Only 1000 MHz are left on the node.
    let mut second = job("second", JOB_TYPE_SERVICE, 3);
    second.task_groups[0].tasks[0].resources.cpu = 1000;
    world.add_job(second.clone());
    let plan = world.run(&second);
    assert_eq!(placed(&world, &plan).len(), 1);
    assert_eq!(plan.eval.queued_allocations["web"], 2);
    commit(&mut world, plan);
    // Stopping the first job frees the node for the rest of the second.
    let mut stopped = first.clone();
    stopped.stop = true;
    world.add_job(stopped.clone());
    let plan = world.run(&stopped);
    assert_eq!(stops(&plan).len(), 3);
    for stop in stops(&plan) {
        let mut alloc = (**world.snap.alloc(&stop.alloc_id).unwrap()).clone();
        alloc.desired_status = "stop".to_owned();
        let mut usage = world.snap.node_used("a");
        usage.subtract(&alloc.allocated_resources.comparable());
        world.snap.node_usage.insert("a".to_owned(), usage);
        world.snap.allocs.insert(alloc.id.clone(), Arc::new(alloc));
    }
    let plan = world.run(&second);
    assert_eq!(placed(&world, &plan).len(), 2);
}

#[test]
fn nodes_added_after_a_run_are_candidates_in_the_next() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut job = service(2);
    job.task_groups[0].constraints.push(Constraint {
        operand: "distinct_hosts".to_owned(),
        ..Constraint::default()
    });
    world.add_job(job.clone());
    let plan = world.run(&job);
    assert_eq!(placed(&world, &plan).len(), 1);
    commit(&mut world, plan);
    world.add_node(node("b"));
    let plan = world.run(&job);
    let placed = placed(&world, &plan);
    assert_eq!(placed.len(), 1, "{plan:#?}");
    assert_eq!(placed[0].node_id, "b");
}

#[test]
fn follow_up_evaluations_batch_failures_within_five_seconds() {
    let mut world = World::new();
    world.add_node(node("a"));
    let job = service(3);
    world.add_job(job.clone());
    world.add_alloc(failed(&job, 0, "a", NOW - 10 * SECOND));
    world.add_alloc(failed(&job, 1, "a", NOW - 8 * SECOND));
    world.add_alloc(failed(&job, 2, "a", NOW));
    let plan = world.run(&job);
    assert!(placed(&world, &plan).is_empty());
    let mut waits: Vec<i64> = plan.new_evals.iter().map(|e| e.wait_until).collect();
    waits.sort();
    assert_eq!(waits, [NOW + 20 * SECOND, NOW + 30 * SECOND]);
    let marked = rewritten(&world, &plan);
    assert_eq!(marked.len(), 3);
    let first = &plan
        .new_evals
        .iter()
        .find(|e| e.wait_until == NOW + 20 * SECOND)
        .unwrap()
        .id;
    assert_eq!(
        marked
            .iter()
            .filter(|alloc| alloc.followup_eval_id == *first)
            .count(),
        2
    );
}

#[test]
fn several_failing_groups_share_one_blocked_evaluation() {
    let mut world = World::new();
    world.add_node(node("a"));
    let mut job = service(1);
    job.task_groups[0].tasks[0].resources.memory_mb = 100_000;
    let mut api = job.task_groups[0].clone();
    api.name = "api".to_owned();
    api.count = 2;
    job.task_groups.push(api);
    world.add_job(job.clone());
    let plan = world.run(&job);
    assert_eq!(plan.eval.failed_tg_allocs.len(), 2);
    assert_eq!(plan.eval.queued_allocations["web"], 1);
    assert_eq!(plan.eval.queued_allocations["api"], 2);
    let blocked: Vec<_> = plan
        .new_evals
        .iter()
        .filter(|eval| eval.status == EVAL_STATUS_BLOCKED)
        .collect();
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].failed_tg_allocs.len(), 2);
}

#[test]
fn sticky_ephemeral_disk_keeps_a_replacement_on_its_node() {
    let mut world = World::new();
    for id in ["a", "b", "c", "d"] {
        world.add_node(node(id));
    }
    let mut old = service(1);
    old.task_groups[0].ephemeral_disk.as_mut().unwrap().sticky = true;
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "c"));
    let mut new = old.clone();
    new.version = 1;
    new.task_groups[0].tasks[0]
        .config
        .insert("command".to_owned(), serde_json::json!("/bin/true"));
    world.add_job(new.clone());
    for seed in 0..5 {
        let plan = world.run_seed(&new, seed);
        let placed = placed(&world, &plan);
        assert_eq!(placed.len(), 1);
        assert_eq!(placed[0].node_id, "c", "seed {seed}");
        assert_eq!(placed[0].previous_allocation, "alloc-web-0-c");
    }
}

#[test]
fn system_job_update_replaces_allocations_on_their_nodes() {
    let mut world = World::new();
    for id in ["a", "b"] {
        world.add_node(node(id));
    }
    let old = job("agent", JOB_TYPE_SYSTEM, 1);
    world.add_job(old.clone());
    world.add_alloc(alloc(&old, 0, "a"));
    world.add_alloc(alloc(&old, 0, "b"));
    let mut new = old.clone();
    new.version = 1;
    new.task_groups[0].tasks[0].resources.memory_mb = 512;
    world.add_job(new.clone());
    let plan = world.run(&new);
    let placed = placed(&world, &plan);
    assert_eq!(
        nodes_of(&placed).into_keys().collect::<Vec<_>>(),
        ["a", "b"]
    );
    for alloc in &placed {
        assert_eq!(
            alloc.previous_allocation,
            format!("alloc-agent-0-{}", alloc.node_id)
        );
        assert_eq!(alloc.allocated_resources.comparable().memory_mb, 512);
    }
    assert!(stops(&plan).iter().all(|stop| stop.desired_description
        == "alloc is being updated due to job update"
        && stop.next_allocation.is_some()));
}

/// A service job whose group asks for a dynamic port `http` and, optionally, a static one.
fn with_ports(id: &str, count: i64, static_port: Option<i64>) -> Job {
    let mut job = job(id, JOB_TYPE_SERVICE, count);
    job.task_groups[0].networks = vec![crate::structs::NetworkResource {
        dynamic_ports: vec![crate::structs::Port {
            label: "http".to_owned(),
            to: -1,
            ..Default::default()
        }],
        reserved_ports: static_port
            .map(|value| crate::structs::Port {
                label: "admin".to_owned(),
                value,
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }];
    job
}

fn alloc_ports(alloc: &Allocation) -> Vec<i64> {
    ports::held(alloc)
}

#[test]
fn allocations_on_one_node_never_share_a_port() {
    let mut world = World::new();
    let mut n1 = node("n1");
    n1.attributes.insert(
        "unique.network.ip-address".to_owned(),
        "10.0.0.9".to_owned(),
    );
    world.add_node(n1);
    let first = with_ports("first", 8, None);
    world.add_job(first.clone());
    let plan = world.run(&first);
    let placed_first: Vec<Allocation> = placed(&world, &plan).into_iter().cloned().collect();
    assert_eq!(placed_first.len(), 8);
    let mut seen = std::collections::BTreeSet::new();
    for alloc in &placed_first {
        let network = &alloc.allocated_resources.shared.networks[0];
        assert_eq!(network.ip, "10.0.0.9");
        let port = network.dynamic_ports[0].value;
        assert!((ports::MIN_DYNAMIC_PORT..=ports::MAX_DYNAMIC_PORT).contains(&port));
        assert_eq!(
            network.dynamic_ports[0].to, port,
            "to = -1 maps to the port"
        );
        assert_eq!(
            alloc.allocated_resources.shared.ports[0]["Value"].as_i64(),
            Some(port)
        );
        assert_eq!(
            alloc.allocated_resources.shared.ports[0]["HostIP"],
            "10.0.0.9"
        );
        assert!(seen.insert(port), "port {port} given twice");
    }
    // Another job planned once those run: none of its ports is taken.
    for alloc in placed_first {
        world.add_alloc(alloc);
    }
    let second = with_ports("second", 8, None);
    world.add_job(second.clone());
    let plan = world.run_seed(&second, 99);
    for alloc in placed(&world, &plan) {
        for port in alloc_ports(alloc) {
            assert!(seen.insert(port), "port {port} given twice");
        }
    }
    assert_eq!(seen.len(), 16);
}

#[test]
fn a_static_port_collision_makes_the_node_infeasible() {
    let mut world = World::new();
    world.add_node(node("n1"));
    world.add_node(node("n2"));
    let holder = with_ports("holder", 1, Some(8080));
    world.add_job(holder.clone());
    let mut existing = alloc(&holder, 0, "n1");
    existing.allocated_resources.shared.ports =
        vec![serde_json::json!({"Label": "admin", "Value": 8080, "To": 0, "HostIP": "127.0.0.1"})];
    world.add_alloc(existing);

    // One more allocation with the static port: only n2 can take it.
    let job = with_ports("other", 1, Some(8080));
    world.add_job(job.clone());
    let plan = world.run(&job);
    let allocs = placed(&world, &plan);
    assert_eq!(allocs.len(), 1);
    assert_eq!(allocs[0].node_id, "n2");

    // Two of them: the second finds no node, as upstream reports it.
    let two = with_ports("two", 2, Some(8080));
    world.add_job(two.clone());
    let plan = world.run(&two);
    assert_eq!(placed(&world, &plan).len(), 1);
    let failed = &plan.eval.failed_tg_allocs["web"];
    assert_eq!(
        failed
            .dimension_exhausted
            .get("network: reserved port collision admin=8080"),
        Some(&2)
    );
}

#[test]
fn a_destructive_update_may_reuse_the_ports_of_the_allocation_it_replaces() {
    let mut world = World::new();
    world.add_node(node("n1"));
    let job_v0 = with_ports("web", 1, Some(9090));
    world.add_job(job_v0.clone());
    let mut existing = alloc(&job_v0, 0, "n1");
    existing.allocated_resources.shared.ports =
        vec![serde_json::json!({"Label": "admin", "Value": 9090, "To": 0, "HostIP": "127.0.0.1"})];
    world.add_alloc(existing);
    let mut job_v1 = job_v0.clone();
    job_v1.version = 1;
    job_v1.task_groups[0].tasks[0]
        .env
        .insert("V".to_owned(), "1".to_owned());
    world.add_job(job_v1.clone());
    let plan = world.run(&job_v1);
    let allocs = placed(&world, &plan);
    assert_eq!(allocs.len(), 1);
    assert_eq!(alloc_ports(allocs[0])[0], 9090);
    assert_eq!(stops(&plan).len(), 1);
}
