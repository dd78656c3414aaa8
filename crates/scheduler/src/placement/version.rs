//! Version constraints for the `version` and `semver` constraint operators (Nomad uses
//! hashicorp/go-version and its own semver copy of it; this is a fresh implementation of the
//! same rules).
//!
//! - Versions parse loosely (`v1.2`, `1.2.3.4`, `1.2.3-beta.1+meta`, `1.2.3beta`): numeric
//!   segments padded to at least three, an optional pre-release and optional metadata (which
//!   never takes part in comparisons).
//! - `version` constraints (go-version): comma-separated `op version` terms, `op` one of
//!   `= != > < >= <= ~>` or none (equality); a pre-release version only satisfies an ordering
//!   term whose version is a pre-release of the same segments, and `~>` is pessimistic.
//! - `semver` constraints: the same terms without `~>`, versions must be well formed (a `-`
//!   before the pre-release), and pre-releases order as in SemVer 2.0 with no pre-release check.
//!
//! Invariants: pure and total (a malformed version or constraint parses to `None`, which
//! fails the constraint); no panics on any input.

use std::cmp::Ordering;

/// A parsed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Version {
    /// Numeric segments, padded with zeros to at least three.
    segments: Vec<i64>,
    /// How many segments were written.
    specified: usize,
    /// The pre-release, without its leading `-`.
    pre: String,
}

/// Which dialect a constraint string is parsed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    /// go-version constraints (`version` operator).
    GoVersion,
    /// Nomad's semver constraints (`semver` operator).
    Semver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal,
    NotEqual,
    Greater,
    Less,
    GreaterEqual,
    LessEqual,
    Pessimistic,
}

/// A parsed constraint: every term must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct VersionConstraint {
    dialect: Dialect,
    terms: Vec<(Op, Version)>,
}

fn is_ident_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'~'
}

/// Whether `text` is one or more non-empty dot-separated identifiers of `[0-9A-Za-z-~]`.
fn is_ident_chain(text: &str) -> bool {
    !text.is_empty()
        && text
            .split('.')
            .all(|part| !part.is_empty() && part.bytes().all(is_ident_byte))
}

impl Version {
    /// Parses a version; `strict` requires a `-` before a pre-release (semver).
    pub(super) fn parse(input: &str, strict: bool) -> Option<Version> {
        let text = input.strip_prefix('v').unwrap_or(input);
        let bytes = text.as_bytes();
        // Numeric segments: digits ('.' digits)*.
        let mut end = 0;
        loop {
            let start = end;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end == start {
                return None;
            }
            // A '.' continues the segments only when a digit follows.
            if end + 1 < bytes.len() && bytes[end] == b'.' && bytes[end + 1].is_ascii_digit() {
                end += 1;
                continue;
            }
            break;
        }
        let numbers = &text[..end];
        let rest = &text[end..];
        let (before_meta, meta) = match rest.split_once('+') {
            Some((before, meta)) => (before, Some(meta)),
            None => (rest, None),
        };
        if let Some(meta) = meta
            && !is_ident_chain(meta)
        {
            return None;
        }
        let pre = if before_meta.is_empty() {
            ""
        } else if let Some(pre) = before_meta.strip_prefix('-') {
            // `-` then identifiers; the loose form also accepts `--x` (the second `-` starts
            // the identifier).
            if !is_ident_chain(pre) {
                return None;
            }
            pre
        } else {
            // Without a dash (loose only) the pre-release must start with a letter, `-` or `~`.
            if strict {
                return None;
            }
            let first = before_meta.as_bytes()[0];
            if first.is_ascii_digit() || !is_ident_chain(before_meta) {
                return None;
            }
            before_meta
        };
        let mut segments = Vec::new();
        for part in numbers.split('.') {
            segments.push(part.parse::<i64>().ok()?);
        }
        let specified = segments.len();
        while segments.len() < 3 {
            segments.push(0);
        }
        Some(Version {
            segments,
            specified,
            pre: pre.to_owned(),
        })
    }

    fn equal_segments(&self, other: &Version) -> bool {
        self.segments == other.segments
    }

    /// go-version's `Compare` (metadata is ignored).
    pub(super) fn compare(&self, other: &Version) -> Ordering {
        if self.equal_segments(other) {
            return match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_prereleases(&self.pre, &other.pre),
            };
        }
        let (left, right) = (&self.segments, &other.segments);
        let longest = left.len().max(right.len());
        for index in 0..longest {
            match (left.get(index), right.get(index)) {
                (Some(l), Some(r)) => match l.cmp(r) {
                    Ordering::Equal => {}
                    unequal => return unequal,
                },
                (None, _) => {
                    return if right[index..].iter().all(|segment| *segment == 0) {
                        Ordering::Equal
                    } else {
                        Ordering::Less
                    };
                }
                (_, None) => {
                    return if left[index..].iter().all(|segment| *segment == 0) {
                        Ordering::Equal
                    } else {
                        Ordering::Greater
                    };
                }
            }
        }
        Ordering::Equal
    }
}

fn compare_part(left: &str, right: &str) -> Ordering {
    if left == right {
        return Ordering::Equal;
    }
    let left_number = left.parse::<i64>().ok();
    let right_number = right.parse::<i64>().ok();
    if left.is_empty() {
        return if right_number.is_some() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
    }
    if right.is_empty() {
        return if left_number.is_some() {
            Ordering::Greater
        } else {
            Ordering::Less
        };
    }
    match (left_number, right_number) {
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => {
            if left > right {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
        (Some(l), Some(r)) => {
            if l > r {
                Ordering::Greater
            } else {
                Ordering::Less
            }
        }
    }
}

fn compare_prereleases(left: &str, right: &str) -> Ordering {
    if left == right {
        return Ordering::Equal;
    }
    let left_parts: Vec<&str> = left.split('.').collect();
    let right_parts: Vec<&str> = right.split('.').collect();
    let longest = left_parts.len().max(right_parts.len());
    for index in 0..longest {
        let l = left_parts.get(index).copied().unwrap_or("");
        let r = right_parts.get(index).copied().unwrap_or("");
        match compare_part(l, r) {
            Ordering::Equal => {}
            unequal => return unequal,
        }
    }
    Ordering::Equal
}

/// go-version's pre-release rule for ordering terms.
fn prerelease_check(version: &Version, check: &Version) -> bool {
    match (version.pre.is_empty(), check.pre.is_empty()) {
        (false, false) => version.equal_segments(check),
        (false, true) => false,
        _ => true,
    }
}

fn pessimistic(version: &Version, check: &Version) -> bool {
    if !prerelease_check(version, check) || (!check.pre.is_empty() && version.pre.is_empty()) {
        return false;
    }
    if version.compare(check) == Ordering::Less {
        return false;
    }
    let count = check.segments.len();
    if count > version.segments.len() {
        return false;
    }
    for index in 0..check.specified.saturating_sub(1) {
        if version.segments.get(index) != check.segments.get(index) {
            return false;
        }
    }
    match (
        check.segments.get(count - 1),
        version.segments.get(count - 1),
    ) {
        (Some(c), Some(v)) => c <= v,
        _ => false,
    }
}

impl VersionConstraint {
    /// Parses a comma-separated constraint string; `None` when any term is malformed.
    pub(super) fn parse(input: &str, dialect: Dialect) -> Option<VersionConstraint> {
        let mut terms = Vec::new();
        for term in input.split(',') {
            let term = term.trim();
            let (op, rest) = if let Some(rest) = term.strip_prefix("!=") {
                (Op::NotEqual, rest)
            } else if let Some(rest) = term.strip_prefix(">=") {
                (Op::GreaterEqual, rest)
            } else if let Some(rest) = term.strip_prefix("<=") {
                (Op::LessEqual, rest)
            } else if let Some(rest) = term.strip_prefix("~>") {
                if dialect == Dialect::Semver {
                    return None;
                }
                (Op::Pessimistic, rest)
            } else if let Some(rest) = term.strip_prefix('=') {
                (Op::Equal, rest)
            } else if let Some(rest) = term.strip_prefix('>') {
                (Op::Greater, rest)
            } else if let Some(rest) = term.strip_prefix('<') {
                (Op::Less, rest)
            } else {
                (Op::Equal, term)
            };
            let version = Version::parse(rest.trim(), dialect == Dialect::Semver)?;
            terms.push((op, version));
        }
        Some(VersionConstraint { dialect, terms })
    }

    /// Whether `version` satisfies every term.
    pub(super) fn check(&self, version: &Version) -> bool {
        self.terms.iter().all(|(op, check)| {
            let ordering = version.compare(check);
            let prerelease_ok = match self.dialect {
                Dialect::GoVersion => prerelease_check(version, check),
                Dialect::Semver => true,
            };
            match op {
                Op::Equal => ordering == Ordering::Equal,
                Op::NotEqual => ordering != Ordering::Equal,
                Op::Greater => prerelease_ok && ordering == Ordering::Greater,
                Op::Less => prerelease_ok && ordering == Ordering::Less,
                Op::GreaterEqual => prerelease_ok && ordering != Ordering::Less,
                Op::LessEqual => prerelease_ok && ordering != Ordering::Greater,
                Op::Pessimistic => pessimistic(version, check),
            }
        })
    }
}

/// Whether version `value` satisfies `constraint` in `dialect` (the version side always parses
/// loosely, as upstream's `version.NewVersion`).
pub(super) fn matches(value: &str, constraint: &VersionConstraint) -> bool {
    Version::parse(value, false).is_some_and(|version| constraint.check(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(dialect: Dialect, constraint: &str, version: &str) -> bool {
        let parsed = VersionConstraint::parse(constraint, dialect)
            .unwrap_or_else(|| panic!("constraint {constraint:?} must parse"));
        matches(version, &parsed)
    }

    #[test]
    fn go_version_constraints_match_go_version() {
        let cases = [
            (">= 1.0, < 1.2", "1.1.5", true),
            ("< 1.0, < 1.2", "1.1.5", false),
            ("= 1.0", "1.1.5", false),
            ("= 1.0", "1.0.0", true),
            ("1.0", "1.0.0", true),
            (">= 1.0", "1.0.0", true),
            (">= 1.0", "v1.0.0", true),
            (">= 1.2, < 2.0", "1.10.3", true),
            ("> 10", "8", false),
            ("!= 1.0", "1.0.1", true),
            ("~> 1.0", "2.0", false),
            ("~> 1.2", "1.9.4", true),
            ("~> 1.2.3", "1.2.4", true),
            ("~> 1.2.3", "1.3", false),
            ("~> 1.2.3", "1.2.2", false),
            ("~> 1.0.9.5", "1.0.9.5", true),
            ("~> 1.0.9.5", "1.0.9.4", false),
            ("~> 1.0.9.5", "1.0.9.6", true),
            // Pre-releases only match pre-release terms of the same segments.
            (">= 1.0", "1.1.0-beta", false),
            ("> 1.0.0-beta", "1.0.0-rc1", true),
            (">= 1.0.0-beta", "1.1.0-beta", false),
            ("~> 1.0.0-beta", "1.0.0", false),
            ("< 2.0", "1.9.9-beta", false),
            ("= 1.2.3-beta.1", "1.2.3-beta.1+ent", true),
        ];
        for (constraint, version, want) in cases {
            assert_eq!(
                check(Dialect::GoVersion, constraint, version),
                want,
                "{version} against {constraint}"
            );
        }
    }

    #[test]
    fn semver_constraints_order_prereleases_like_semver() {
        let cases = [
            (">= 1.0, < 1.2", "1.1.5", true),
            ("= 1.0", "1.0.0", true),
            ("> 10", "8", false),
            ("> 2.0", "2.1.0-beta", true),
            ("> 2.1.0-a", "2.1.0-beta", true),
            ("> 2.1.0-a", "2.1.1-beta", true),
            ("> 2.1.0-a", "2.1.0", true),
            ("<= 2.1.0-a", "2.0.0", true),
            (">= 0.6.1", "1.3.0-beta1", true),
            ("> 1.0-beta1", "1.0-rc1", true),
            (">= 0.6.1", "1.3.0-beta1+ent", true),
            ("> 1.3.0-beta1+cgo", "1.3.0-beta1+ent", false),
            ("= 1.3.0-beta1+cgo", "1.3.0-beta1+ent", true),
        ];
        for (constraint, version, want) in cases {
            assert_eq!(
                check(Dialect::Semver, constraint, version),
                want,
                "{version} against {constraint}"
            );
        }
    }

    #[test]
    fn malformed_versions_and_constraints_do_not_parse() {
        for bad in [
            "", "abc", ">= ", "~> x", "1.2.3-", "1..2", ">= 1.0,", "1.0+",
        ] {
            assert!(
                VersionConstraint::parse(bad, Dialect::GoVersion).is_none(),
                "{bad:?} must not parse"
            );
        }
        // Semver has no pessimistic operator and needs a dash before the pre-release.
        assert!(VersionConstraint::parse("~> 1.0", Dialect::Semver).is_none());
        assert!(VersionConstraint::parse("1.0beta", Dialect::Semver).is_none());
        assert!(VersionConstraint::parse("1.0beta", Dialect::GoVersion).is_some());
        assert!(!matches(
            "not-a-version",
            &VersionConstraint::parse(">= 1", Dialect::GoVersion).unwrap()
        ));
        assert!(Version::parse("99999999999999999999", false).is_none());
    }

    #[test]
    fn prerelease_parts_compare_numerically_then_lexically() {
        let version = |text: &str| Version::parse(text, false).unwrap();
        assert_eq!(
            version("1.0.0-2").compare(&version("1.0.0-10")),
            Ordering::Less
        );
        assert_eq!(
            version("1.0.0-alpha").compare(&version("1.0.0-1")),
            Ordering::Greater
        );
        assert_eq!(
            version("1.0.0-alpha").compare(&version("1.0.0-alpha.1")),
            Ordering::Less
        );
        assert_eq!(
            version("1.0.0").compare(&version("1.0.0-rc1")),
            Ordering::Greater
        );
        assert_eq!(version("1.2").compare(&version("1.2.0.0")), Ordering::Equal);
        assert_eq!(
            version("1.2.0.1").compare(&version("1.2")),
            Ordering::Greater
        );
    }
}
