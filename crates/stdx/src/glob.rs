//! `*` globs as ryanuber/go-glob matches them (Nomad's datacenter lists and ACL rule names).
//!
//! Invariant: `*` matches any run of characters, including none; every other character matches
//! itself; the pattern `*` matches everything. No other metacharacters exist.

/// Whether `subject` matches `pattern`.
pub fn matches(pattern: &str, subject: &str) -> bool {
    if pattern == "*" {
        return true;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == subject;
    };
    let Some(mut rest) = subject.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        let Some(at) = rest.find(part) else {
            return false;
        };
        rest = &rest[at + part.len()..];
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_star_matches_any_run_including_none() {
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("dc*", "dc"));
        assert!(matches("dc*", "dc1"));
        assert!(matches("*-east", "us-east"));
        assert!(matches("us-*-1", "us-east-1"));
        assert!(matches("a*b*c", "abc"));
        assert!(matches("a*b*c", "axxbyyc"));
    }

    #[test]
    fn without_a_star_only_equal_strings_match() {
        assert!(matches("dc1", "dc1"));
        assert!(!matches("dc1", "dc2"));
        assert!(!matches("", "x"));
        assert!(matches("", ""));
    }

    #[test]
    fn the_parts_must_appear_in_order_without_overlap() {
        assert!(!matches("dc*", "xdc1"));
        assert!(!matches("*-east", "us-west"));
        assert!(!matches("a*b*c", "acb"));
        assert!(!matches("ab*ba", "aba"));
    }
}
