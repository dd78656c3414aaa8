//! The compiled ACL of one token, and the decisions it makes. Pure: no I/O.
//!
//! Where it sits: the [`Authz`](super::Authz) extractor compiles a token's parsed policies
//! ([`super::policy::PolicyRules`]) into an [`Acl`] per request and asks it questions; handlers
//! never see it directly.
//!
//! Semantics (upstream's `acl/acl.go`):
//! - Management tokens may do everything; a token without policies may do nothing.
//! - Namespace, node-pool and host-volume rules are keyed by name. The capabilities of rules
//!   with the same key merge as a union across all of the token's policies, except that `deny`
//!   at a key wipes that key's capabilities and blocks every later addition: deny wins.
//! - For a name, an exact rule wins over every glob; otherwise the closest matching glob wins,
//!   the one whose `*`s match the fewest characters (`len(name) - len(glob) + stars`); ties go
//!   to the glob that sorts last, which is where upstream's sort leaves them. A more specific
//!   rule wins even when it grants less than a broader one (a `deny` on `prod-*` beats a
//!   `write` on `*`, and a `read` on `prod-api` beats a `deny` on `prod-*`).
//! - `*` as the namespace asked about means "any namespace": allowed when some rule allows.
//! - The fine-grained job capabilities (`register-job`, `deregister-job`, `purge-job`...) are
//!   also granted by `submit-job`, as upstream's endpoints accept either.
//! - `agent`, `node`, `operator`, `quota` and `plugin` merge to the most privileged level, with
//!   `deny` above all; `write` implies `read`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::Capability;
use super::policy::PolicyRules;

/// A coarse policy level; the order is upstream's `maxPrivilege` precedence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    #[default]
    None,
    List,
    Read,
    Write,
    Deny,
}

impl Level {
    fn from_policy(policy: &str) -> Level {
        match policy {
            "list" => Level::List,
            "read" => Level::Read,
            "write" => Level::Write,
            "deny" => Level::Deny,
            // `scale` and anything else grant nothing at this level (as upstream).
            _ => Level::None,
        }
    }

    fn allows_read(self) -> bool {
        matches!(self, Level::Read | Level::Write)
    }

    fn allows_write(self) -> bool {
        self == Level::Write
    }
}

/// A set of capability names; `deny` is kept as a member, as upstream does.
type CapSet = BTreeSet<String>;

const DENY: &str = "deny";

/// Rules keyed by exact name or by glob.
#[derive(Debug, Clone, Default)]
struct Keyed {
    exact: HashMap<String, CapSet>,
    globs: BTreeMap<String, CapSet>,
}

impl Keyed {
    /// Adds one block's capabilities at `name`, with deny precedence.
    fn add(&mut self, name: &str, capabilities: &[String]) {
        let set = if name.contains('*') {
            self.globs.entry(name.to_owned()).or_default()
        } else {
            self.exact.entry(name.to_owned()).or_default()
        };
        if set.contains(DENY) {
            return;
        }
        for capability in capabilities {
            if capability == DENY {
                set.clear();
                set.insert(DENY.to_owned());
                return;
            }
            set.insert(capability.clone());
        }
    }

    /// The capability set that governs `name`: the exact rule, else the closest glob.
    fn lookup(&self, name: &str) -> Option<&CapSet> {
        if let Some(set) = self.exact.get(name) {
            return Some(set);
        }
        self.globs
            .iter()
            .filter(|(glob, _)| stdx::glob::matches(glob, name))
            .min_by(|(a, _), (b, _)| {
                glob_difference(a, name)
                    .cmp(&glob_difference(b, name))
                    .then_with(|| b.cmp(a))
            })
            .map(|(_, set)| set)
    }

    fn sets(&self) -> impl Iterator<Item = &CapSet> {
        self.exact.values().chain(self.globs.values())
    }
}

/// How many characters of `name` the `*`s of `glob` cover (upstream's "difference").
fn glob_difference(glob: &str, name: &str) -> i64 {
    let stars = glob.matches('*').count();
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    as_i64(name.len()) - as_i64(glob.len()) + as_i64(stars)
}

/// A token's compiled permissions.
#[derive(Debug, Clone, Default)]
pub(crate) struct Acl {
    management: bool,
    namespaces: Keyed,
    node_pools: Keyed,
    host_volumes: Keyed,
    agent: Level,
    node: Level,
    operator: Level,
    quota: Level,
    plugin: Level,
}

impl Acl {
    /// Everything allowed (management tokens, ACLs disabled).
    pub(crate) fn management() -> Acl {
        Acl {
            management: true,
            ..Acl::default()
        }
    }

    /// Nothing allowed (the anonymous token without an `anonymous` policy).
    pub(crate) fn deny_all() -> Acl {
        Acl::default()
    }

    /// Compiles the policies of one token (in the token's order).
    pub(crate) fn compile<'a>(policies: impl IntoIterator<Item = &'a PolicyRules>) -> Acl {
        let mut acl = Acl::default();
        for policy in policies {
            for rule in &policy.namespaces {
                acl.namespaces.add(&rule.name, &rule.capabilities);
            }
            for rule in &policy.node_pools {
                acl.node_pools.add(&rule.name, &rule.capabilities);
            }
            for rule in &policy.host_volumes {
                acl.host_volumes.add(&rule.name, &rule.capabilities);
            }
            let merge = |level: &mut Level, policy: &str| {
                *level = (*level).max(Level::from_policy(policy));
            };
            if let Some(rule) = &policy.agent {
                merge(&mut acl.agent, &rule.policy);
            }
            if let Some(rule) = &policy.node {
                merge(&mut acl.node, &rule.policy);
            }
            if let Some(rule) = &policy.operator {
                merge(&mut acl.operator, &rule.policy);
            }
            if let Some(rule) = &policy.quota {
                merge(&mut acl.quota, &rule.policy);
            }
            if let Some(rule) = &policy.plugin {
                merge(&mut acl.plugin, &rule.policy);
            }
        }
        acl
    }

    pub(crate) fn is_management(&self) -> bool {
        self.management
    }

    /// Whether `capability` is allowed in `namespace` (`*`: in some namespace).
    pub(crate) fn allows_namespace_op(&self, namespace: &str, capability: Capability) -> bool {
        self.allows_namespace_name(namespace, capability.name())
            || (capability.is_fine_grained_job()
                && self.allows_namespace_name(namespace, Capability::SubmitJob.name()))
    }

    fn allows_namespace_name(&self, namespace: &str, capability: &str) -> bool {
        if self.management {
            return true;
        }
        if namespace == "*" && self.namespaces.sets().any(|set| set.contains(capability)) {
            return true;
        }
        self.namespaces
            .lookup(namespace)
            .is_some_and(|set| set.contains(capability))
    }

    /// Whether anything at all is allowed in `namespace` (upstream's `AllowNamespace`), which
    /// decides whether a namespace is listed or readable.
    pub(crate) fn allows_namespace(&self, namespace: &str) -> bool {
        let grants = |set: &CapSet| !set.is_empty() && !set.contains(DENY);
        if self.management {
            return true;
        }
        if namespace == "*" && self.namespaces.sets().any(grants) {
            return true;
        }
        self.namespaces.lookup(namespace).is_some_and(grants)
    }

    /// Whether `capability` (`read`, `write`, `delete`) is allowed on node pool `pool`.
    pub(crate) fn allows_node_pool_op(&self, pool: &str, capability: &str) -> bool {
        self.management
            || self
                .node_pools
                .lookup(pool)
                .is_some_and(|set| set.contains(capability))
    }

    /// Whether `capability` (`mount-readonly`, `mount-readwrite`) is allowed on a host volume.
    pub(crate) fn allows_host_volume_op(&self, volume: &str, capability: &str) -> bool {
        self.management
            || self
                .host_volumes
                .lookup(volume)
                .is_some_and(|set| set.contains(capability))
    }

    pub(crate) fn allows_node_read(&self) -> bool {
        self.management || self.node.allows_read()
    }

    pub(crate) fn allows_node_write(&self) -> bool {
        self.management || self.node.allows_write()
    }

    pub(crate) fn allows_agent_read(&self) -> bool {
        self.management || self.agent.allows_read()
    }

    pub(crate) fn allows_agent_write(&self) -> bool {
        self.management || self.agent.allows_write()
    }

    pub(crate) fn allows_operator_read(&self) -> bool {
        self.management || self.operator.allows_read()
    }

    pub(crate) fn allows_operator_write(&self) -> bool {
        self.management || self.operator.allows_write()
    }

    pub(crate) fn allows_quota_read(&self) -> bool {
        self.management || self.quota.allows_read()
    }

    /// Plugin listing: `list`, `read` or `write`.
    pub(crate) fn allows_plugin_list(&self) -> bool {
        self.management || matches!(self.plugin, Level::List | Level::Read | Level::Write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::policy;

    fn acl(policies: &[&str]) -> Acl {
        let parsed: Vec<PolicyRules> = policies
            .iter()
            .map(|rules| policy::parse(rules).unwrap_or_else(|err| panic!("{rules}: {err}")))
            .collect();
        Acl::compile(&parsed)
    }

    #[test]
    fn glob_matching_follows_go_glob() {
        assert!(stdx::glob::matches("*", ""));
        assert!(stdx::glob::matches("*", "anything"));
        assert!(stdx::glob::matches("prod-*", "prod-"));
        assert!(stdx::glob::matches("prod-*", "prod-api"));
        assert!(!stdx::glob::matches("prod-*", "dev-prod-api"));
        assert!(stdx::glob::matches("*-api", "prod-api"));
        assert!(!stdx::glob::matches("*-api", "prod-api-2"));
        assert!(stdx::glob::matches("a*b*c", "a-x-b-y-c"));
        assert!(!stdx::glob::matches("a*b*c", "a-x-c-y-b"));
        assert!(stdx::glob::matches("exact", "exact"));
        assert!(!stdx::glob::matches("exact", "exactly"));
    }

    #[test]
    fn read_policy_allows_listing_and_reading_but_not_submitting() {
        let acl = acl(&[r#"namespace "default" { policy = "read" }"#]);
        assert!(acl.allows_namespace_op("default", Capability::ListJobs));
        assert!(acl.allows_namespace_op("default", Capability::ReadJob));
        assert!(acl.allows_namespace_op("default", Capability::ParseJob));
        assert!(!acl.allows_namespace_op("default", Capability::SubmitJob));
        assert!(!acl.allows_namespace_op("default", Capability::AllocExec));
        assert!(!acl.allows_namespace_op("other", Capability::ListJobs));
    }

    #[test]
    fn write_policy_allows_submit_and_the_fine_grained_job_capabilities() {
        let acl = acl(&[r#"namespace "default" { policy = "write" }"#]);
        for capability in [
            Capability::SubmitJob,
            Capability::DispatchJob,
            Capability::AllocLifecycle,
            Capability::AllocExec,
            Capability::ReadLogs,
            Capability::RegisterJob,
            Capability::DeregisterJob,
            Capability::PurgeJob,
        ] {
            assert!(
                acl.allows_namespace_op("default", capability),
                "{capability:?}"
            );
        }
        assert!(!acl.allows_namespace_op("default", Capability::AllocNodeExec));
        assert!(!acl.allows_namespace_op("default", Capability::PolicyOverride));
    }

    #[test]
    fn fine_grained_capability_does_not_imply_submit_job() {
        let acl = acl(&[r#"namespace "default" { capabilities = ["register-job"] }"#]);
        assert!(acl.allows_namespace_op("default", Capability::RegisterJob));
        assert!(!acl.allows_namespace_op("default", Capability::SubmitJob));
    }

    #[test]
    fn deny_wins_over_everything_at_the_same_key_in_any_order() {
        for policies in [
            [
                r#"namespace "default" { policy = "write" }"#,
                r#"namespace "default" { policy = "deny" }"#,
            ],
            [
                r#"namespace "default" { policy = "deny" }"#,
                r#"namespace "default" { policy = "write" }"#,
            ],
        ] {
            let acl = acl(&policies);
            assert!(!acl.allows_namespace_op("default", Capability::ReadJob));
            assert!(!acl.allows_namespace("default"));
        }
        let acl = acl(&[r#"
            namespace "default" {
              policy       = "read"
              capabilities = ["deny"]
            }
        "#]);
        assert!(!acl.allows_namespace_op("default", Capability::ListJobs));
    }

    #[test]
    fn capabilities_of_several_policies_are_a_union() {
        let acl = acl(&[
            r#"namespace "default" { capabilities = ["list-jobs"] }"#,
            r#"namespace "default" { capabilities = ["submit-job"] }"#,
        ]);
        assert!(acl.allows_namespace_op("default", Capability::ListJobs));
        assert!(acl.allows_namespace_op("default", Capability::SubmitJob));
        assert!(!acl.allows_namespace_op("default", Capability::ReadJob));
    }

    #[test]
    fn exact_beats_glob_and_closer_glob_beats_broader() {
        let acl = acl(&[r#"
            namespace "*"        { policy = "write" }
            namespace "prod-*"   { policy = "deny" }
            namespace "prod-api" { policy = "read" }
        "#]);
        assert!(acl.allows_namespace_op("dev", Capability::SubmitJob));
        assert!(!acl.allows_namespace_op("prod-web", Capability::ReadJob));
        assert!(!acl.allows_namespace("prod-web"));
        assert!(acl.allows_namespace_op("prod-api", Capability::ReadJob));
        assert!(!acl.allows_namespace_op("prod-api", Capability::SubmitJob));
    }

    #[test]
    fn glob_ties_go_to_the_glob_that_sorts_last() {
        // Both cover one character of "ab": upstream's sort leaves "a*" (sorting after "*b")
        // first.
        let acl = acl(&[r#"
            namespace "*b" { capabilities = ["list-jobs"] }
            namespace "a*" { capabilities = ["read-job"] }
        "#]);
        assert!(acl.allows_namespace_op("ab", Capability::ReadJob));
        assert!(!acl.allows_namespace_op("ab", Capability::ListJobs));
    }

    #[test]
    fn wildcard_namespace_asks_whether_any_namespace_allows() {
        let acl = acl(&[r#"
            namespace "team-a" { policy = "read" }
            namespace "team-b" { policy = "deny" }
        "#]);
        assert!(acl.allows_namespace_op("*", Capability::ListJobs));
        assert!(!acl.allows_namespace_op("*", Capability::SubmitJob));
        assert!(acl.allows_namespace("*"));
        assert!(acl.allows_namespace("team-a"));
        assert!(!acl.allows_namespace("team-b"));
        let denied = self::acl(&[r#"namespace "team-b" { policy = "deny" }"#]);
        assert!(!denied.allows_namespace("*"));
    }

    #[test]
    fn empty_acl_denies_and_management_allows_everything() {
        let none = Acl::deny_all();
        assert!(!none.allows_namespace_op("default", Capability::ListJobs));
        assert!(!none.allows_namespace("default"));
        assert!(!none.allows_node_read());
        let all = Acl::management();
        assert!(all.allows_namespace_op("anything", Capability::AllocNodeExec));
        assert!(all.allows_namespace("*"));
        assert!(all.allows_node_write());
        assert!(all.allows_node_pool_op("gpu", "delete"));
    }

    #[test]
    fn coarse_policies_take_the_most_privilege_with_deny_on_top() {
        let acl1 = acl(&[
            r#"node { policy = "read" }"#,
            r#"node { policy = "write" }"#,
        ]);
        assert!(acl1.allows_node_read() && acl1.allows_node_write());
        let acl2 = acl(&[
            r#"node { policy = "write" }"#,
            r#"node { policy = "deny" }"#,
        ]);
        assert!(!acl2.allows_node_read());
        let acl3 = acl(&[r#"
            agent { policy = "read" }
            operator { policy = "write" }
        "#]);
        assert!(acl3.allows_agent_read() && !acl3.allows_agent_write());
        assert!(acl3.allows_operator_read() && acl3.allows_operator_write());
        let acl4 = acl(&[r#"
            plugin { policy = "list" }
            quota { policy = "read" }
        "#]);
        assert!(acl4.allows_plugin_list() && acl4.allows_quota_read());
    }

    #[test]
    fn node_pool_and_host_volume_rules_use_the_same_matching() {
        let acl = acl(&[r#"
            node_pool "*"   { policy = "read" }
            node_pool "gpu" { policy = "write" }
            host_volume "shared-*" { policy = "read" }
        "#]);
        assert!(acl.allows_node_pool_op("default", "read"));
        assert!(!acl.allows_node_pool_op("default", "write"));
        assert!(acl.allows_node_pool_op("gpu", "delete"));
        assert!(acl.allows_host_volume_op("shared-data", "mount-readonly"));
        assert!(!acl.allows_host_volume_op("shared-data", "mount-readwrite"));
    }
}
