//! Job validation at register time (Nomad's `Job.Validate`, `TaskGroup.Validate`,
//! `Task.Validate` and the register endpoint's own checks), on the canonical job.
//!
//! Where it sits: `jobs::register` canonicalizes and deserializes the submitted job, then calls
//! [`validate`]; a non-empty result is one 400 whose text is Go's multierror format
//! ([`multierror`]), nested the way Nomad nests it (`Task group web validation failed: 1 error
//! occurred: ...`), so clients that match on upstream's messages keep working.
//!
//! Invariants: pure (no state, no clock); every problem is reported, not just the first; no
//! input panics. Deliberate additions to upstream: a per-group count cap ([`MAX_GROUP_COUNT`])
//! so a typo such as `count = 1000000` is refused instead of flooding the scheduler.

use std::collections::{BTreeSet, HashMap};

use stdx::duration::format_go;

use crate::error::multierror;
use crate::structs::{
    Affinity, Constraint, JOB_TYPE_BATCH, JOB_TYPE_SERVICE, JOB_TYPE_SYSBATCH, JOB_TYPE_SYSTEM,
    Job, Nanos, RESTART_MODE_DELAY, RESTART_MODE_FAIL, ReschedulePolicy, RestartPolicy, SECOND,
    Spread, Task, TaskGroup,
};

/// The most allocations one task group may ask for (cairn's limit; Nomad has none by default).
pub(crate) const MAX_GROUP_COUNT: i64 = 10_000;

const MIN_PRIORITY: i64 = 1;
const MAX_PRIORITY: i64 = 100;
const RESTART_MIN_INTERVAL: Nanos = 5 * SECOND;
const RESCHEDULE_MIN_INTERVAL: Nanos = 15 * SECOND;
const RESCHEDULE_MIN_DELAY: Nanos = 5 * SECOND;
const DELAY_FUNCTIONS: [&str; 3] = ["constant", "exponential", "fibonacci"];

/// Every problem with `job`, in Nomad's order and wording (empty: valid).
pub(crate) fn validate(job: &Job) -> Vec<String> {
    let mut errors = Vec::new();
    if job.region.is_empty() && job.multiregion.is_none() {
        errors.push("Missing job region".to_owned());
    }
    if job.id.is_empty() {
        errors.push("Missing job ID".to_owned());
    } else if job.id.contains(' ') {
        errors.push("Job ID contains a space".to_owned());
    } else if job.id.contains('\0') {
        errors.push("Job ID contains a null character".to_owned());
    }
    if job.name.is_empty() {
        errors.push("Missing job name".to_owned());
    } else if job.name.contains('\0') {
        errors.push("Job Name contains a null character".to_owned());
    }
    if job.namespace.is_empty() {
        errors.push("Job must be in a namespace".to_owned());
    }
    let system = job.job_type == JOB_TYPE_SYSTEM;
    match job.job_type.as_str() {
        JOB_TYPE_SERVICE | JOB_TYPE_BATCH | JOB_TYPE_SYSTEM | JOB_TYPE_SYSBATCH => {}
        "" => errors.push("Missing job type".to_owned()),
        other => errors.push(format!("Invalid job type: {other:?}")),
    }
    if job.datacenters.is_empty() && job.multiregion.is_none() {
        errors.push("Missing job datacenters".to_owned());
    } else if job.datacenters.iter().any(String::is_empty) {
        errors.push("Job datacenter must be non-empty string".to_owned());
    }
    if job.task_groups.is_empty() {
        errors.push("Missing job task groups".to_owned());
    }
    errors.extend(constraint_errors(&job.constraints, false));
    errors.extend(affinity_errors(&job.affinities, system));
    errors.extend(spread_errors(&job.spreads, system));

    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (idx, group) in job.task_groups.iter().enumerate() {
        if group.name.is_empty() {
            errors.push(format!("Job task group {} missing name", idx + 1));
        } else if let Some(existing) = seen.get(group.name.as_str()) {
            errors.push(format!(
                "Job task group {} redefines '{}' from group {}",
                idx + 1,
                group.name,
                existing + 1
            ));
        } else {
            seen.insert(&group.name, idx);
        }
        if group.shutdown_delay.is_some_and(|delay| delay < 0) {
            errors.push("ShutdownDelay must be a positive value".to_owned());
        }
        if system && group.count > 1 {
            errors.push(format!(
                "Job task group {} has count {}. Count cannot exceed 1 with system scheduler",
                group.name, group.count
            ));
        }
        if group.count > MAX_GROUP_COUNT {
            errors.push(format!(
                "Job task group {} has count {}, above the limit of {MAX_GROUP_COUNT} allocations per group",
                group.name, group.count
            ));
        }
    }
    for group in &job.task_groups {
        let group_errors = task_group_errors(job, group);
        if !group_errors.is_empty() {
            errors.push(format!(
                "Task group {} validation failed: {}",
                group.name,
                multierror(&group_errors)
            ));
        }
    }
    let batch_like = job.job_type == JOB_TYPE_BATCH || job.job_type == JOB_TYPE_SYSBATCH;
    if job.is_periodic() && !batch_like {
        errors.push(format!(
            "Periodic can only be used with {JOB_TYPE_BATCH:?} or {JOB_TYPE_SYSBATCH:?} scheduler"
        ));
    }
    if job.is_parameterized() && !batch_like {
        errors.push(format!(
            "Parameterized job can only be used with {JOB_TYPE_BATCH:?} or {JOB_TYPE_SYSBATCH:?} scheduler"
        ));
    }
    // The register endpoint's own checks (nomad/job_endpoint_hooks.go `jobValidate`).
    if job
        .payload
        .as_ref()
        .is_some_and(|payload| !payload.is_null() && payload.as_str() != Some(""))
    {
        errors.push("job can't be submitted with a payload, only dispatched".to_owned());
    }
    if !(MIN_PRIORITY..=MAX_PRIORITY).contains(&job.priority) {
        errors.push(format!(
            "job priority must be between [{MIN_PRIORITY}, {MAX_PRIORITY}]"
        ));
    }
    errors
}

/// `EvalPriority`, when given (non-zero), must be 1..=100.
pub(crate) fn eval_priority_error(priority: i64) -> Option<String> {
    (priority != 0 && !(MIN_PRIORITY..=MAX_PRIORITY).contains(&priority))
        .then(|| "Eval priority must be between 1 and 100 inclusively".to_owned())
}

fn task_group_errors(job: &Job, group: &TaskGroup) -> Vec<String> {
    let system = job.job_type == JOB_TYPE_SYSTEM;
    let mut errors = Vec::new();
    if group.name.is_empty() {
        errors.push("Missing task group name".to_owned());
    } else if group.name.contains('\0') {
        errors.push("Task group name contains null character".to_owned());
    }
    if group.count < 0 {
        errors.push("Task group count can't be negative".to_owned());
    }
    if group.tasks.is_empty() {
        errors.push("Missing tasks for task group".to_owned());
    }
    errors.extend(constraint_errors(&group.constraints, false));
    errors.extend(affinity_errors(&group.affinities, system));
    match &group.restart_policy {
        Some(policy) => errors.extend(restart_errors(policy)),
        None => errors.push(format!(
            "Task Group {} should have a restart policy",
            group.name
        )),
    }
    errors.extend(spread_errors(&group.spreads, system));
    if system || job.job_type == JOB_TYPE_SYSBATCH {
        if group.reschedule_policy.is_some() {
            errors.push("System or sysbatch jobs should not have a reschedule policy".to_owned());
        }
    } else {
        match &group.reschedule_policy {
            Some(policy) => errors.extend(reschedule_errors(policy)),
            None => errors.push(format!(
                "Task Group {} should have a reschedule policy",
                group.name
            )),
        }
    }
    match &group.ephemeral_disk {
        Some(disk) if disk.size_mb < 10 => {
            errors.push(format!("minimum DiskMB value is 10; got {}", disk.size_mb));
        }
        Some(_) => {}
        None => errors.push(format!(
            "Task Group {} should have an ephemeral disk object",
            group.name
        )),
    }
    if group
        .update
        .as_ref()
        .is_some_and(|update| !update.is_null())
        && job.job_type != JOB_TYPE_SERVICE
        && !system
    {
        errors.push(format!(
            "Job type {:?} does not allow update block",
            job.job_type
        ));
    }
    if group
        .migrate
        .as_ref()
        .is_some_and(|migrate| !migrate.is_null())
        && job.job_type != JOB_TYPE_SERVICE
    {
        errors.push(format!(
            "Job type {:?} does not allow migrate block",
            job.job_type
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut leaders = 0;
    for (idx, task) in group.tasks.iter().enumerate() {
        if task.name.is_empty() {
            errors.push(format!("Task {} missing name", idx + 1));
        } else if let Some(existing) = seen.get(task.name.as_str()) {
            errors.push(format!(
                "Task {} redefines '{}' from task {}",
                idx + 1,
                task.name,
                existing + 1
            ));
        } else {
            seen.insert(&task.name, idx);
        }
        if task.leader {
            leaders += 1;
        }
    }
    if leaders > 1 {
        errors.push("Only one task may be marked as leader".to_owned());
    }
    let mut labels = BTreeSet::new();
    for network in &group.networks {
        for port in network.reserved_ports.iter().chain(&network.dynamic_ports) {
            if !labels.insert(port.label.as_str()) {
                errors.push(format!(
                    "Task group network validation failed: Port label {} already in use by taskgroup network",
                    port.label
                ));
            }
            if !(0..=65_535).contains(&port.value) {
                errors.push(format!(
                    "Task group network validation failed: Port {} ({}) cannot be greater than 65535",
                    port.label, port.value
                ));
            }
        }
    }
    for task in &group.tasks {
        let task_errors = task_errors(job, task);
        if !task_errors.is_empty() {
            errors.push(format!(
                "Task {} validation failed: {}",
                task.name,
                multierror(&task_errors)
            ));
        }
    }
    errors
}

fn task_errors(job: &Job, task: &Task) -> Vec<String> {
    let mut errors = Vec::new();
    if task.name.is_empty() {
        errors.push("Missing task name".to_owned());
    }
    if task.name == "alloc" {
        errors.push("Task cannot be named \"alloc\"".to_owned());
    }
    if task.name.contains(['/', '\\']) {
        errors.push("Task name cannot include slashes".to_owned());
    } else if task.name.contains('\0') {
        errors.push("Task name cannot include null characters".to_owned());
    }
    if task.driver.is_empty() {
        errors.push("Missing task driver".to_owned());
    }
    if task.kill_timeout < 0 {
        errors.push("KillTimeout must be a positive value".to_owned());
    }
    if task.shutdown_delay < 0 {
        errors.push("ShutdownDelay must be a positive value".to_owned());
    }
    let resources = &task.resources;
    if resources.cores > 0 && resources.cpu > 0 {
        errors.push("Task can only ask for 'cpu' or 'cores' resource, not both.".to_owned());
    }
    if resources.cores < 0 {
        errors.push(format!(
            "cores value ({}) cannot be negative",
            resources.cores
        ));
    }
    let mut minimums = Vec::new();
    if resources.cpu < 1 && resources.cores == 0 {
        minimums.push(format!("minimum CPU value is 1; got {}", resources.cpu));
    }
    if resources.memory_mb < 10 {
        minimums.push(format!(
            "minimum MemoryMB value is 10; got {}",
            resources.memory_mb
        ));
    }
    if !minimums.is_empty() {
        errors.push(multierror(&minimums));
    }
    if resources.memory_max_mb != 0
        && resources.memory_max_mb != -1
        && resources.memory_max_mb < resources.memory_mb
    {
        errors.push(format!(
            "MemoryMaxMB value ({}) should be larger than MemoryMB value ({})",
            resources.memory_max_mb, resources.memory_mb
        ));
    }
    errors.extend(constraint_errors(&task.constraints, true));
    errors.extend(affinity_errors(
        &task.affinities,
        job.job_type == JOB_TYPE_SYSTEM,
    ));
    errors
}

/// Constraint errors, each as `Constraint N validation failed: ...`; `task_level` refuses the
/// operators that only make sense across allocations.
fn constraint_errors(constraints: &[Constraint], task_level: bool) -> Vec<String> {
    let mut errors = Vec::new();
    for (idx, constraint) in constraints.iter().enumerate() {
        let problems = constraint_problems(constraint);
        if !problems.is_empty() {
            errors.push(format!(
                "Constraint {} validation failed: {}",
                idx + 1,
                multierror(&problems)
            ));
        }
        if task_level
            && matches!(
                constraint.operand.as_str(),
                "distinct_hosts" | "distinct_property"
            )
        {
            errors.push(format!(
                "Constraint {} has disallowed Operand at task level: {}",
                idx + 1,
                constraint.operand
            ));
        }
    }
    errors
}

fn constraint_problems(constraint: &Constraint) -> Vec<String> {
    let mut problems = Vec::new();
    if constraint.operand.is_empty() {
        problems.push("Missing constraint operand".to_owned());
    }
    let mut require_ltarget = true;
    let rtarget = constraint.r_target.as_str();
    match constraint.operand.as_str() {
        "distinct_hosts" => require_ltarget = false,
        "set_contains" | "set_contains_all" | "set_contains_any" => {
            if rtarget.is_empty() {
                problems.push("Set contains constraint requires an RTarget".to_owned());
            }
        }
        "regexp" => {
            if let Err(err) = regex::Regex::new(rtarget) {
                problems.push(format!(
                    "Regular expression failed to compile: {}",
                    one_line(&err.to_string())
                ));
            }
        }
        "version" => {
            if let Err(err) = version_constraint(rtarget) {
                problems.push(format!("Version constraint is invalid: {err}"));
            }
        }
        "semver" => {
            if let Err(err) = version_constraint(rtarget) {
                problems.push(format!("Semver constraint is invalid: {err}"));
            }
        }
        "distinct_property" => {
            if !rtarget.is_empty() {
                match rtarget.parse::<u64>() {
                    Err(_) => problems.push(format!(
                        "Failed to convert RTarget {rtarget:?} to uint64: strconv.ParseUint: parsing {rtarget:?}: invalid syntax"
                    )),
                    Ok(0) => problems.push(
                        "Distinct Property must have an allowed count of 1 or greater: 0 < 1".to_owned(),
                    ),
                    Ok(_) => {}
                }
            }
        }
        "is_set" | "is_not_set" => {
            if !rtarget.is_empty() {
                problems.push(format!(
                    "Operator {:?} does not support an RTarget",
                    constraint.operand
                ));
            }
        }
        "=" | "==" | "is" | "!=" | "not" | "<" | "<=" | ">" | ">=" => {
            if rtarget.is_empty() {
                problems.push(format!(
                    "Operator {:?} requires an RTarget",
                    constraint.operand
                ));
            }
        }
        "" => {}
        other => problems.push(format!("Unknown constraint type {other:?}")),
    }
    if require_ltarget {
        if constraint.l_target.is_empty() {
            problems.push("no attribute provided but is required by operator".to_owned());
        } else if let Err(err) = target_attribute(&constraint.l_target) {
            problems.push(err);
        }
    }
    problems
}

/// Nomad's `validateConstraintAttribute`: a literal, or an interpolation it can resolve.
fn target_attribute(target: &str) -> Result<(), String> {
    if !target.starts_with('$') {
        return Ok(());
    }
    if !target.starts_with("${") {
        return Err(format!("attribute {target:?} is missing an opening brace"));
    }
    if !target.ends_with('}') {
        return Err(format!("attribute {target:?} is missing a closing brace"));
    }
    const EXACT: [&str; 5] = [
        "${node.unique.id}",
        "${node.datacenter}",
        "${node.unique.name}",
        "${node.class}",
        "${node.pool}",
    ];
    const PREFIXES: [&str; 3] = ["${attr.", "${device.", "${meta."];
    if EXACT.contains(&target) || PREFIXES.iter().any(|prefix| target.starts_with(prefix)) {
        Ok(())
    } else {
        Err(format!("unsupported attribute {target:?}"))
    }
}

fn affinity_errors(affinities: &[Affinity], system: bool) -> Vec<String> {
    if system {
        return if affinities.is_empty() {
            Vec::new()
        } else {
            vec!["System jobs may not have an affinity block".to_owned()]
        };
    }
    let mut errors = Vec::new();
    for (idx, affinity) in affinities.iter().enumerate() {
        let problems = affinity_problems(affinity);
        if !problems.is_empty() {
            errors.push(format!(
                "Affinity {} validation failed: {}",
                idx + 1,
                multierror(&problems)
            ));
        }
    }
    errors
}

fn affinity_problems(affinity: &Affinity) -> Vec<String> {
    let mut problems = Vec::new();
    if affinity.operand.is_empty() {
        problems.push("Missing affinity operand".to_owned());
    }
    let rtarget = affinity.r_target.as_str();
    match affinity.operand.as_str() {
        "set_contains" | "set_contains_all" | "set_contains_any" => {
            if rtarget.is_empty() {
                problems.push("Set contains operators require an RTarget".to_owned());
            }
        }
        "regexp" => {
            if let Err(err) = regex::Regex::new(rtarget) {
                problems.push(format!(
                    "Regular expression failed to compile: {}",
                    one_line(&err.to_string())
                ));
            }
        }
        "version" => {
            if let Err(err) = version_constraint(rtarget) {
                problems.push(format!("Version affinity is invalid: {err}"));
            }
        }
        "semver" => {
            if let Err(err) = version_constraint(rtarget) {
                problems.push(format!("Semver affinity is invalid: {err}"));
            }
        }
        "=" | "==" | "is" | "!=" | "not" | "<" | "<=" | ">" | ">=" => {
            if rtarget.is_empty() {
                problems.push(format!(
                    "Operator {:?} requires an RTarget",
                    affinity.operand
                ));
            }
        }
        "" => {}
        other => problems.push(format!("Unknown affinity operator {other:?}")),
    }
    if affinity.l_target.is_empty() {
        problems.push("No LTarget provided but is required".to_owned());
    }
    if affinity.weight == 0 {
        problems.push("Affinity weight cannot be zero".to_owned());
    }
    if !(-100..=100).contains(&affinity.weight) {
        problems.push("Affinity weight must be within the range [-100,100]".to_owned());
    }
    problems
}

fn spread_errors(spreads: &[Spread], system: bool) -> Vec<String> {
    if system {
        return if spreads.is_empty() {
            Vec::new()
        } else {
            vec!["System jobs may not have a spread block".to_owned()]
        };
    }
    let mut errors = Vec::new();
    for (idx, spread) in spreads.iter().enumerate() {
        let mut problems = Vec::new();
        if spread.attribute.is_empty() {
            problems.push("Missing spread attribute".to_owned());
        }
        if spread.weight <= 0 || spread.weight > 100 {
            problems.push("Spread block must have a positive weight from 0 to 100".to_owned());
        }
        let mut seen = BTreeSet::new();
        let mut sum: i64 = 0;
        for target in &spread.spread_target {
            if !seen.insert(target.value.as_str()) {
                problems.push(format!(
                    "Spread target value {:?} already defined",
                    target.value
                ));
            }
            if !(0..=100).contains(&target.percent) {
                problems.push(format!(
                    "Spread target percentage for value {:?} must be between 0 and 100",
                    target.value
                ));
            }
            sum = sum.saturating_add(target.percent.max(0));
        }
        if sum > 100 {
            problems.push(format!(
                "Sum of spread target percentages must not be greater than 100%; got {sum}%"
            ));
        }
        if !problems.is_empty() {
            errors.push(format!(
                "Spread {} validation failed: {}",
                idx + 1,
                multierror(&problems)
            ));
        }
    }
    errors
}

fn restart_errors(policy: &RestartPolicy) -> Vec<String> {
    let mut problems = Vec::new();
    match policy.mode.as_str() {
        RESTART_MODE_DELAY | RESTART_MODE_FAIL => {}
        other => problems.push(format!("Unsupported restart mode: {other:?}")),
    }
    if policy.attempts == 0 && policy.mode != RESTART_MODE_FAIL {
        problems.push(format!(
            "Restart policy {:?} with {} attempts is ambiguous",
            policy.mode, policy.attempts
        ));
    }
    if policy.interval < RESTART_MIN_INTERVAL {
        problems.push(format!(
            "Interval can not be less than {} (got {})",
            format_go(RESTART_MIN_INTERVAL),
            format_go(policy.interval)
        ));
    }
    if policy.attempts.saturating_mul(policy.delay) > policy.interval {
        problems.push(format!(
            "Nomad can't restart the TaskGroup {} times in an interval of {} with a delay of {}",
            policy.attempts,
            format_go(policy.interval),
            format_go(policy.delay)
        ));
    }
    if problems.is_empty() {
        Vec::new()
    } else {
        vec![multierror(&problems)]
    }
}

fn reschedule_errors(policy: &ReschedulePolicy) -> Vec<String> {
    if !(policy.attempts > 0 || policy.unlimited) {
        return Vec::new();
    }
    let mut problems = Vec::new();
    if policy.attempts > 0 {
        if policy.interval <= 0 {
            problems.push("Interval must be a non zero value if Attempts > 0".to_owned());
        }
        if policy.unlimited {
            problems.push(format!(
                "Reschedule Policy with Attempts = {}, Interval = {}, and Unlimited = true is ambiguous",
                policy.attempts,
                format_go(policy.interval)
            ));
            problems.push("If Attempts >0, Unlimited cannot also be set to true".to_owned());
        }
    }
    let mut delay_ok = true;
    if policy.delay < RESCHEDULE_MIN_DELAY {
        problems.push(format!(
            "Delay cannot be less than {} (got {})",
            format_go(RESCHEDULE_MIN_DELAY),
            format_go(policy.delay)
        ));
        delay_ok = false;
    }
    if !DELAY_FUNCTIONS.contains(&policy.delay_function.as_str()) {
        problems.push(format!(
            "Invalid delay function {:?}, must be one of [\"constant\" \"exponential\" \"fibonacci\"]",
            policy.delay_function
        ));
        delay_ok = false;
    }
    if policy.delay_function != "constant" {
        if policy.max_delay < RESCHEDULE_MIN_DELAY {
            problems.push(format!(
                "Max Delay cannot be less than {} (got {})",
                format_go(RESCHEDULE_MIN_DELAY),
                format_go(policy.delay)
            ));
            delay_ok = false;
        }
        if policy.max_delay < policy.delay {
            problems.push(format!(
                "Max Delay cannot be less than Delay {} (got {})",
                format_go(policy.delay),
                format_go(policy.max_delay)
            ));
            delay_ok = false;
        }
    }
    if !policy.unlimited {
        if policy.interval < RESCHEDULE_MIN_INTERVAL {
            problems.push(format!(
                "Interval cannot be less than {} (got {})",
                format_go(RESCHEDULE_MIN_INTERVAL),
                format_go(policy.interval)
            ));
        }
        if delay_ok && let Some(problem) = viable_attempts_problem(policy) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        Vec::new()
    } else {
        vec![multierror(&problems)]
    }
}

/// Nomad's `validateDelayParams`: whether `Attempts` reschedules fit in `Interval`.
fn viable_attempts_problem(policy: &ReschedulePolicy) -> Option<String> {
    let attempts = policy.attempts.clamp(0, 10_000);
    let (valid, possible, recommended) = match policy.delay_function.as_str() {
        "constant" => {
            let recommended = attempts.saturating_mul(policy.delay);
            if policy.interval < recommended {
                (false, policy.interval / policy.delay.max(1), recommended)
            } else {
                (true, 0, recommended)
            }
        }
        "exponential" => {
            let mut recommended: Nanos = 0;
            let mut possible = 0;
            for i in 0..attempts {
                let factor = 1_i64
                    .checked_shl(u32::try_from(i).unwrap_or(u32::MAX))
                    .unwrap_or(i64::MAX);
                let next = factor.saturating_mul(policy.delay);
                if next > policy.max_delay || next < 0 {
                    recommended = recommended.saturating_add(policy.max_delay);
                } else {
                    recommended = next;
                }
                if recommended < policy.interval {
                    possible += 1;
                }
            }
            (possible >= attempts, possible, recommended)
        }
        _ => {
            let mut slots = vec![policy.delay, policy.delay];
            let mut ceiling = false;
            for i in 2..usize::try_from(attempts).unwrap_or(0) {
                let next = if ceiling {
                    slots[i - 1].saturating_add(policy.max_delay)
                } else {
                    let next = slots[i - 1].saturating_add(slots[i - 2]);
                    if next > policy.max_delay {
                        ceiling = true;
                        policy.max_delay
                    } else {
                        next
                    }
                };
                slots.push(next);
            }
            let recommended = slots.last().copied().unwrap_or(0);
            if policy.interval < recommended {
                let possible = slots
                    .iter()
                    .position(|slot| *slot > policy.interval)
                    .unwrap_or(0);
                (false, i64::try_from(possible).unwrap_or(0), recommended)
            } else {
                (true, 0, recommended)
            }
        }
    };
    if valid {
        return None;
    }
    let first = if policy.delay_function == "constant" {
        format!(
            "Nomad can only make {possible} attempts in {} with initial delay {} and delay function {:?}",
            format_go(policy.interval),
            format_go(policy.delay),
            policy.delay_function
        )
    } else {
        format!(
            "Nomad can only make {possible} attempts in {} with initial delay {}, delay function {:?}, and delay ceiling {}",
            format_go(policy.interval),
            format_go(policy.delay),
            policy.delay_function,
            format_go(policy.max_delay)
        )
    };
    let rounded = (recommended.saturating_add(SECOND / 2) / SECOND) * SECOND;
    Some(multierror(&[
        first,
        format!(
            "Set the interval to at least {} to accommodate {} attempts",
            format_go(rounded),
            policy.attempts
        ),
    ]))
}

/// A version constraint as `go-version` / Masterminds `semver` accept it: comma-separated
/// `[op] version` terms.
fn version_constraint(raw: &str) -> Result<(), String> {
    const OPERATORS: [&str; 9] = [">=", "<=", "!=", "~>", "=", ">", "<", "^", "~"];
    for term in raw.split(',') {
        let term = term.trim();
        let version = OPERATORS
            .iter()
            .find_map(|op| term.strip_prefix(op))
            .unwrap_or(term)
            .trim();
        let version = version.strip_prefix('v').unwrap_or(version);
        let core = version.split(['-', '+']).next().unwrap_or("");
        let parts_ok = !core.is_empty()
            && core.split('.').count() <= 4
            && core.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b == b'x' || b == b'*')
            });
        if !parts_ok {
            return Err(format!("Malformed constraint: {term}"));
        }
    }
    Ok(())
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::{EphemeralDisk, Resources};

    fn valid_job() -> Job {
        Job {
            region: "global".to_owned(),
            namespace: "default".to_owned(),
            id: "web".to_owned(),
            name: "web".to_owned(),
            job_type: JOB_TYPE_SERVICE.to_owned(),
            priority: 50,
            datacenters: vec!["*".to_owned()],
            task_groups: vec![TaskGroup {
                name: "web".to_owned(),
                count: 1,
                restart_policy: Some(RestartPolicy {
                    attempts: 2,
                    interval: 30 * 60 * SECOND,
                    delay: 15 * SECOND,
                    mode: RESTART_MODE_FAIL.to_owned(),
                    render_templates: false,
                }),
                reschedule_policy: Some(ReschedulePolicy {
                    attempts: 0,
                    interval: 0,
                    delay: 30 * SECOND,
                    delay_function: "exponential".to_owned(),
                    max_delay: 3600 * SECOND,
                    unlimited: true,
                }),
                ephemeral_disk: Some(EphemeralDisk {
                    size_mb: 300,
                    ..EphemeralDisk::default()
                }),
                tasks: vec![Task {
                    name: "server".to_owned(),
                    driver: "raw_exec".to_owned(),
                    resources: Resources {
                        cpu: 100,
                        memory_mb: 300,
                        ..Resources::default()
                    },
                    ..Task::default()
                }],
                ..TaskGroup::default()
            }],
            ..Job::default()
        }
    }

    #[test]
    fn valid_job_has_no_errors() {
        assert_eq!(validate(&valid_job()), Vec::<String>::new());
    }

    #[test]
    fn id_with_space_and_bad_priority_are_both_reported() {
        let mut job = valid_job();
        job.id = "my job".to_owned();
        job.priority = 500;
        let errors = validate(&job);
        assert_eq!(
            errors,
            vec![
                "Job ID contains a space".to_owned(),
                "job priority must be between [1, 100]".to_owned()
            ]
        );
    }

    #[test]
    fn huge_count_is_refused() {
        let mut job = valid_job();
        job.task_groups[0].count = 1_000_000;
        let errors = validate(&job).join("\n");
        assert!(errors.contains("above the limit of 10000"), "{errors}");
    }

    #[test]
    fn unknown_operand_and_bad_regexp_are_nested_under_the_group() {
        let mut job = valid_job();
        job.task_groups[0].constraints = vec![
            Constraint {
                l_target: "${attr.kernel.name}".to_owned(),
                r_target: "linux".to_owned(),
                operand: "almost".to_owned(),
            },
            Constraint {
                l_target: "${attr.kernel.name}".to_owned(),
                r_target: "(".to_owned(),
                operand: "regexp".to_owned(),
            },
        ];
        let errors = validate(&job);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("Task group web validation failed: 2 errors occurred:"));
        assert!(errors[0].contains("Unknown constraint type \"almost\""));
        assert!(errors[0].contains("Regular expression failed to compile"));
    }

    #[test]
    fn duplicate_groups_and_tasks_and_missing_driver() {
        let mut job = valid_job();
        let group = job.task_groups[0].clone();
        job.task_groups.push(group);
        let twin = job.task_groups[0].tasks[0].clone();
        job.task_groups[0].tasks.push(twin);
        job.task_groups[1].tasks[0].driver = String::new();
        let all = validate(&job).join("\n");
        assert!(
            all.contains("Job task group 2 redefines 'web' from group 1"),
            "{all}"
        );
        assert!(
            all.contains("Task 2 redefines 'server' from task 1"),
            "{all}"
        );
        assert!(all.contains("Missing task driver"), "{all}");
    }

    #[test]
    fn affinity_weight_and_spread_sanity() {
        let mut job = valid_job();
        job.affinities = vec![Affinity {
            l_target: "${node.datacenter}".to_owned(),
            r_target: "dc1".to_owned(),
            operand: "=".to_owned(),
            weight: 0,
        }];
        job.spreads = vec![Spread {
            attribute: "${node.datacenter}".to_owned(),
            weight: 200,
            spread_target: Vec::new(),
        }];
        let all = validate(&job).join("\n");
        assert!(all.contains("Affinity weight cannot be zero"), "{all}");
        assert!(
            all.contains("Spread block must have a positive weight"),
            "{all}"
        );
    }

    #[test]
    fn system_jobs_may_not_reschedule() {
        let mut job = valid_job();
        job.job_type = JOB_TYPE_SYSTEM.to_owned();
        let all = validate(&job).join("\n");
        assert!(
            all.contains("System or sysbatch jobs should not have a reschedule policy"),
            "{all}"
        );
    }

    #[test]
    fn restart_and_reschedule_modes_are_checked() {
        let mut job = valid_job();
        if let Some(policy) = job.task_groups[0].restart_policy.as_mut() {
            policy.mode = "sometimes".to_owned();
        }
        if let Some(policy) = job.task_groups[0].reschedule_policy.as_mut() {
            policy.delay_function = "linear".to_owned();
        }
        let all = validate(&job).join("\n");
        assert!(
            all.contains("Unsupported restart mode: \"sometimes\""),
            "{all}"
        );
        assert!(all.contains("Invalid delay function \"linear\""), "{all}");
    }

    #[test]
    fn eval_priority_bounds() {
        assert_eq!(eval_priority_error(0), None);
        assert_eq!(eval_priority_error(100), None);
        assert!(eval_priority_error(101).is_some());
        assert!(eval_priority_error(-1).is_some());
    }

    #[test]
    fn go_duration_formats_like_go() {
        assert_eq!(format_go(0), "0s");
        assert_eq!(format_go(5 * SECOND), "5s");
        assert_eq!(format_go(60 * SECOND), "1m0s");
        assert_eq!(format_go(24 * 3600 * SECOND), "24h0m0s");
        assert_eq!(format_go(1_500_000), "1.5ms");
        assert_eq!(format_go(1_500_000_000), "1.5s");
    }

    #[test]
    fn version_constraints() {
        assert!(version_constraint(">= 1.2, < 2.0").is_ok());
        assert!(version_constraint("~> 1.2.3-beta").is_ok());
        assert!(version_constraint("one").is_err());
    }

    #[test]
    fn target_attributes() {
        assert!(target_attribute("${attr.kernel.name}").is_ok());
        assert!(target_attribute("${node.unique.id}").is_ok());
        assert!(target_attribute("${nope}").is_err());
        assert!(target_attribute("$attr").is_err());
        assert!(target_attribute("literal").is_ok());
    }
}
