//! Policy names as tokens, entities and auth methods carry them: Vault's sanitizing, the
//! subset rule of token creation, and the fixed names.
//!
//! Where it sits: a leaf below `policy/`, `tokens/`, `identity.rs` and `userpass.rs`, which all
//! handle lists of policy names; it knows nothing of policies' contents.
//!
//! Invariant: pure functions over names; no storage, no clock.

/// The name of the fixed policy of response-wrapping tokens.
pub(crate) const RESPONSE_WRAPPING_POLICY: &str = "response-wrapping";

/// Vault's `policyutil.SanitizePolicies`: trims, lower-cases, drops empties and duplicates,
/// adds `default` when asked, sorts; a list containing `root` becomes just `["root"]`.
pub(crate) fn sanitize_policies(policies: &[String], add_default: bool) -> Vec<String> {
    let mut out: Vec<String> = policies
        .iter()
        .map(|p| p.trim().to_lowercase())
        .filter(|p| !p.is_empty())
        .collect();
    if out.iter().any(|p| p == "root") {
        return vec!["root".to_owned()];
    }
    if add_default {
        out.push("default".to_owned());
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a child token's policies are a subset of its parent's (Vault's
/// `strutil.StrListSubset` in token creation). `default` is always allowed, since every token
/// gets it unless `no_default_policy` is set; a `root` parent allows everything.
pub(crate) fn is_subset(parent: &[String], child: &[String]) -> bool {
    if parent.iter().any(|p| p == "root") {
        return true;
    }
    child
        .iter()
        .all(|c| c == "default" || parent.iter().any(|p| p == c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn sanitize_lowercases_dedups_and_collapses_root() {
        assert_eq!(
            sanitize_policies(&list(&[" Dev", "dev", "", "ops"]), true),
            list(&["default", "dev", "ops"])
        );
        assert_eq!(
            sanitize_policies(&list(&["dev", "root"]), true),
            list(&["root"])
        );
    }

    #[test]
    fn subset_allows_default_and_root_parents() {
        assert!(is_subset(&list(&["a", "b"]), &list(&["a", "default"])));
        assert!(!is_subset(&list(&["a"]), &list(&["a", "b"])));
        assert!(is_subset(&list(&["root"]), &list(&["anything"])));
    }
}
