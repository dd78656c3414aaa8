//! Feasibility: which nodes may take an allocation of a task group (Nomad's
//! `scheduler/feasible/feasible.go` and `util.go`).
//!
//! - Node selection before any check: ready (status ready, eligible, not draining), in the
//!   job's node pool (`""`/`default` → `default`, `all` → any), in one of the job's
//!   datacenters (glob patterns with `*`; none → all).
//! - Per node, in upstream's order: job constraints, drivers (`missing drivers`), group and
//!   task constraints. The first failure is recorded in the metrics under the constraint's
//!   text (`${attr.kernel.name} = linux`).
//! - Operators as upstream: `=`/`==`/`is`, `!=`/`not`, `<`/`<=`/`>`/`>=` (integer, else
//!   float, else lexical), `regexp`, `version`, `semver`, `set_contains`(`_all`),
//!   `set_contains_any`, `is_set`, `is_not_set`; `distinct_hosts` and `distinct_property` are
//!   handled by the stack (`rank.rs`) and always pass here.
//!
//! Invariants: pure; targets are parsed once per run (`Target`), regexes and version
//! constraints are compiled once per run (`Caches`); checking a node allocates nothing; an
//! unknown operator or malformed pattern simply fails the constraint.

use std::collections::HashMap;

use regex::Regex;

use super::version::{self, Dialect, VersionConstraint};
use crate::structs::{ALL_NODE_POOL, Constraint, DEFAULT_NODE_POOL, Node};

pub(super) const DISTINCT_HOSTS: &str = "distinct_hosts";
pub(super) const DISTINCT_PROPERTY: &str = "distinct_property";
/// The metric key of a node without a task's driver (upstream's `FilterConstraintDrivers`).
pub(super) const MISSING_DRIVERS: &str = "missing drivers";

/// Where a constraint side takes its value from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Literal(String),
    NodeId,
    NodeName,
    Datacenter,
    Class,
    Pool,
    Attr(String),
    Meta(String),
    /// An interpolation upstream does not know: never found.
    Unknown,
}

impl Target {
    /// Parses `${node.unique.id}`, `${attr.x}`, ... or a literal (upstream's `resolveTarget`).
    pub(super) fn parse(text: &str) -> Target {
        if !text.starts_with("${") {
            return Target::Literal(text.to_owned());
        }
        match text {
            "${node.unique.id}" => Target::NodeId,
            "${node.datacenter}" => Target::Datacenter,
            "${node.unique.name}" => Target::NodeName,
            "${node.class}" => Target::Class,
            "${node.pool}" => Target::Pool,
            _ => {
                if let Some(rest) = text.strip_prefix("${attr.") {
                    Target::Attr(rest.strip_suffix('}').unwrap_or(rest).to_owned())
                } else if let Some(rest) = text.strip_prefix("${meta.") {
                    Target::Meta(rest.strip_suffix('}').unwrap_or(rest).to_owned())
                } else {
                    Target::Unknown
                }
            }
        }
    }

    /// The value on `node`, `None` when the node does not have it.
    pub(super) fn resolve<'n>(&'n self, node: &'n Node) -> Option<&'n str> {
        match self {
            Target::Literal(value) => Some(value),
            Target::NodeId => Some(&node.id),
            Target::NodeName => Some(&node.name),
            Target::Datacenter => Some(&node.datacenter),
            Target::Class => Some(&node.node_class),
            Target::Pool => Some(&node.node_pool),
            Target::Attr(key) => node.attributes.get(key).map(String::as_str),
            Target::Meta(key) => node.meta.get(key).map(String::as_str),
            Target::Unknown => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    Equal,
    NotEqual,
    Less,
    LessEqual,
    Greater,
    GreaterEqual,
    IsSet,
    IsNotSet,
    Version,
    Semver,
    Regexp,
    SetContainsAll,
    SetContainsAny,
    /// `distinct_hosts` / `distinct_property`: checked elsewhere.
    Pass,
    Unknown,
}

impl Operand {
    fn parse(operand: &str) -> Operand {
        match operand {
            "=" | "==" | "is" => Operand::Equal,
            "!=" | "not" => Operand::NotEqual,
            "<" => Operand::Less,
            "<=" => Operand::LessEqual,
            ">" => Operand::Greater,
            ">=" => Operand::GreaterEqual,
            "is_set" => Operand::IsSet,
            "is_not_set" => Operand::IsNotSet,
            "version" => Operand::Version,
            "semver" => Operand::Semver,
            "regexp" => Operand::Regexp,
            "set_contains" | "set_contains_all" => Operand::SetContainsAll,
            "set_contains_any" => Operand::SetContainsAny,
            DISTINCT_HOSTS | DISTINCT_PROPERTY => Operand::Pass,
            _ => Operand::Unknown,
        }
    }
}

/// Compiled regexes and version constraints of one run, by pattern text (`None`: invalid).
#[derive(Debug, Default)]
pub(super) struct Caches {
    regexes: HashMap<String, Option<Regex>>,
    go_versions: HashMap<String, Option<VersionConstraint>>,
    semvers: HashMap<String, Option<VersionConstraint>>,
}

impl Caches {
    fn regex(&mut self, pattern: &str) -> Option<&Regex> {
        if !self.regexes.contains_key(pattern) {
            self.regexes
                .insert(pattern.to_owned(), Regex::new(pattern).ok());
        }
        self.regexes.get(pattern).and_then(Option::as_ref)
    }

    fn version(&mut self, constraint: &str, dialect: Dialect) -> Option<&VersionConstraint> {
        let map = match dialect {
            Dialect::GoVersion => &mut self.go_versions,
            Dialect::Semver => &mut self.semvers,
        };
        if !map.contains_key(constraint) {
            map.insert(
                constraint.to_owned(),
                VersionConstraint::parse(constraint, dialect),
            );
        }
        map.get(constraint).and_then(Option::as_ref)
    }
}

/// A constraint (or affinity condition) ready to be checked against nodes.
#[derive(Debug, Clone)]
pub(super) struct Compiled {
    left: Target,
    right: Target,
    operand: Operand,
    /// Upstream's `Constraint.String()`: the metrics key.
    pub(super) text: String,
}

impl Compiled {
    pub(super) fn new(l_target: &str, operand: &str, r_target: &str) -> Compiled {
        Compiled {
            left: Target::parse(l_target),
            right: Target::parse(r_target),
            operand: Operand::parse(operand),
            text: format!("{l_target} {operand} {r_target}"),
        }
    }

    pub(super) fn from_constraint(constraint: &Constraint) -> Compiled {
        Compiled::new(
            &constraint.l_target,
            &constraint.operand,
            &constraint.r_target,
        )
    }

    /// Appends an exact description (targets and operand, separated) to a signature.
    pub(super) fn sign(&self, signature: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            signature,
            "{:?}\0{:?}\0{:?}",
            self.left, self.right, self.operand
        );
    }

    /// Whether `node` satisfies it (upstream's `checkConstraint`).
    pub(super) fn check(&self, node: &Node, caches: &mut Caches) -> bool {
        let left = self.left.resolve(node);
        let right = self.right.resolve(node);
        let (l, r) = (left.unwrap_or(""), right.unwrap_or(""));
        let both = left.is_some() && right.is_some();
        match self.operand {
            Operand::Pass => true,
            Operand::Equal => both && l == r,
            // Missing targets compare as empty strings, as upstream's.
            Operand::NotEqual => l != r,
            Operand::Less | Operand::LessEqual | Operand::Greater | Operand::GreaterEqual => {
                both && check_order(self.operand, l, r)
            }
            Operand::IsSet => left.is_some(),
            Operand::IsNotSet => left.is_none(),
            Operand::Version => {
                both && caches
                    .version(r, Dialect::GoVersion)
                    .is_some_and(|constraint| version::matches(l, constraint))
            }
            Operand::Semver => {
                both && caches
                    .version(r, Dialect::Semver)
                    .is_some_and(|constraint| version::matches(l, constraint))
            }
            Operand::Regexp => both && caches.regex(r).is_some_and(|re| re.is_match(l)),
            Operand::SetContainsAll => both && set_contains_all(l, r),
            Operand::SetContainsAny => both && set_contains_any(l, r),
            Operand::Unknown => false,
        }
    }
}

fn compare<T: PartialOrd>(operand: Operand, left: T, right: T) -> bool {
    match operand {
        Operand::Less => left < right,
        Operand::LessEqual => left <= right,
        Operand::Greater => left > right,
        Operand::GreaterEqual => left >= right,
        _ => false,
    }
}

/// Integers if both parse, else floats if both parse, else lexical (upstream's `checkOrder`).
fn check_order(operand: Operand, left: &str, right: &str) -> bool {
    if let (Some(l), Some(r)) = (parse_go_int(left), parse_go_int(right)) {
        return compare(operand, l, r);
    }
    if let (Some(l), Some(r)) = (parse_go_float(left), parse_go_float(right)) {
        return compare(operand, l, r);
    }
    compare(operand, left, right)
}

/// Go's `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits.
fn parse_go_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Go's `strconv.ParseFloat(s, 64)` for the forms that matter here (Rust's parser accepts
/// the same decimal and exponent forms, plus `inf`/`nan` which Go also accepts).
fn parse_go_float(text: &str) -> Option<f64> {
    if text.is_empty() || text.contains('_') {
        return None;
    }
    text.parse().ok()
}

fn set_contains_all(left: &str, right: &str) -> bool {
    right
        .split(',')
        .all(|wanted| left.split(',').any(|have| have.trim() == wanted.trim()))
}

fn set_contains_any(left: &str, right: &str) -> bool {
    right
        .split(',')
        .any(|wanted| left.split(',').any(|have| have.trim() == wanted.trim()))
}

/// Whether a `distinct_hosts` constraint is in force (empty or unparsable `RTarget`: yes).
pub(super) fn distinct_hosts_enabled(constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .find(|constraint| constraint.operand == DISTINCT_HOSTS)
        .is_some_and(|constraint| {
            constraint.r_target.is_empty()
                || stdx::strconv::parse_bool(&constraint.r_target).unwrap_or(true)
        })
}

/// Whether `node` is in one of the datacenters (no datacenters: all).
pub(super) fn in_datacenters(node: &Node, datacenters: &[String]) -> bool {
    datacenters.is_empty()
        || datacenters
            .iter()
            .any(|pattern| stdx::glob::matches(pattern, &node.datacenter))
}

fn pool_of(pool: &str) -> &str {
    if pool.is_empty() {
        DEFAULT_NODE_POOL
    } else {
        pool
    }
}

/// Whether `node` is in the job's node pool.
pub(super) fn in_pool(node: &Node, job_pool: &str) -> bool {
    let job_pool = pool_of(job_pool);
    job_pool == ALL_NODE_POOL || pool_of(&node.node_pool) == job_pool
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        let mut node = Node {
            id: "11111111-2222-3333-4444-555555555555".to_owned(),
            name: "node-1".to_owned(),
            datacenter: "dc1".to_owned(),
            node_class: "large".to_owned(),
            node_pool: "default".to_owned(),
            ..Node::default()
        };
        for (key, value) in [
            ("kernel.name", "linux"),
            ("cpu.numcores", "8"),
            ("cpu.frequency", "2.5"),
            ("nomad.version", "1.7.3"),
            ("os.version", "22.04"),
            ("features", "a, b,c"),
        ] {
            node.attributes.insert(key.to_owned(), value.to_owned());
        }
        node.meta.insert("rack".to_owned(), "r1".to_owned());
        node
    }

    fn check(l: &str, op: &str, r: &str) -> bool {
        Compiled::new(l, op, r).check(&node(), &mut Caches::default())
    }

    #[test]
    fn equality_operators_need_both_sides_except_not_equal() {
        assert!(check("${attr.kernel.name}", "=", "linux"));
        assert!(check("${attr.kernel.name}", "==", "linux"));
        assert!(check("${attr.kernel.name}", "is", "linux"));
        assert!(!check("${attr.kernel.name}", "=", "windows"));
        assert!(!check("${attr.missing}", "=", ""));
        assert!(check("${attr.kernel.name}", "!=", "windows"));
        assert!(check("${attr.kernel.name}", "not", "windows"));
        assert!(!check("${attr.kernel.name}", "!=", "linux"));
        // A missing attribute compares as "" for !=.
        assert!(check("${attr.missing}", "!=", "linux"));
        assert!(!check("${attr.missing}", "!=", ""));
        assert!(check(
            "${node.unique.id}",
            "=",
            "11111111-2222-3333-4444-555555555555"
        ));
        assert!(check("${node.unique.name}", "=", "node-1"));
        assert!(check("${node.datacenter}", "=", "dc1"));
        assert!(check("${node.class}", "=", "large"));
        assert!(check("${node.pool}", "=", "default"));
        assert!(check("${meta.rack}", "=", "r1"));
        assert!(!check("${node.bogus}", "=", ""));
        assert!(!check("${attr.kernel.name}", "bogus-operator", "linux"));
    }

    #[test]
    fn ordering_is_numeric_then_lexical() {
        assert!(check("${attr.cpu.numcores}", ">", "4"));
        assert!(check("${attr.cpu.numcores}", ">=", "8"));
        assert!(check("${attr.cpu.numcores}", "<=", "8"));
        // 8 < 10 numerically although "8" > "10" lexically.
        assert!(check("${attr.cpu.numcores}", "<", "10"));
        assert!(check("${attr.cpu.frequency}", ">", "2.25"));
        assert!(check("${attr.kernel.name}", ">", "darwin"));
        assert!(!check("${attr.missing}", "<", "1"));
    }

    #[test]
    fn set_membership_and_presence() {
        assert!(check("${attr.features}", "set_contains", "a,c"));
        assert!(check("${attr.features}", "set_contains_all", "b"));
        assert!(!check("${attr.features}", "set_contains", "a,d"));
        assert!(check("${attr.features}", "set_contains_any", "d, c"));
        assert!(!check("${attr.features}", "set_contains_any", "d,e"));
        assert!(check("${attr.kernel.name}", "is_set", ""));
        assert!(!check("${attr.missing}", "is_set", ""));
        assert!(check("${attr.missing}", "is_not_set", ""));
        assert!(!check("${attr.kernel.name}", "is_not_set", ""));
    }

    #[test]
    fn regexp_version_and_semver_operators() {
        assert!(check("${attr.kernel.name}", "regexp", "^lin"));
        assert!(!check("${attr.kernel.name}", "regexp", "^win"));
        assert!(!check("${attr.kernel.name}", "regexp", "(unclosed"));
        assert!(check("${attr.nomad.version}", "version", ">= 1.2, < 2.0"));
        assert!(check("${attr.nomad.version}", "version", "~> 1.7"));
        assert!(!check("${attr.nomad.version}", "version", "~> 1.8"));
        assert!(check("${attr.os.version}", "semver", ">= 20.04"));
        assert!(!check("${attr.nomad.version}", "semver", "~> 1.7"));
        assert!(!check("${attr.missing}", "version", ">= 1"));
        // distinct_* pass here: they are enforced by the stack.
        assert!(check("${meta.rack}", "distinct_property", "1"));
        assert!(check("", "distinct_hosts", ""));
    }

    #[test]
    fn datacenter_globs_and_pools() {
        assert!(stdx::glob::matches("*", "dc1"));
        assert!(stdx::glob::matches("dc*", "dc1"));
        assert!(stdx::glob::matches("*1", "dc1"));
        assert!(stdx::glob::matches("d*c*1", "dc1"));
        assert!(!stdx::glob::matches("us-*", "dc1"));
        assert!(!stdx::glob::matches("dc2", "dc1"));
        let node = node();
        assert!(in_datacenters(&node, &[]));
        assert!(in_datacenters(&node, &["eu".to_owned(), "dc*".to_owned()]));
        assert!(!in_datacenters(&node, &["eu".to_owned()]));
        assert!(in_pool(&node, ""));
        assert!(in_pool(&node, "default"));
        assert!(in_pool(&node, "all"));
        assert!(!in_pool(&node, "gpu"));
    }

    #[test]
    fn distinct_hosts_rtarget_parses_like_go() {
        let constraint = |r: &str| Constraint {
            l_target: String::new(),
            r_target: r.to_owned(),
            operand: DISTINCT_HOSTS.to_owned(),
        };
        assert!(distinct_hosts_enabled(&[constraint("")]));
        assert!(distinct_hosts_enabled(&[constraint("true")]));
        assert!(distinct_hosts_enabled(&[constraint("junk")]));
        assert!(!distinct_hosts_enabled(&[constraint("false")]));
        assert!(!distinct_hosts_enabled(&[]));
    }
}
