//! Semantic versions (semver.org 2.0.0) as the module registry uses them: module versions
//! (`1.2.3`, `1.2.3-alpha.1+build.7`) and the repository tags they are published from (`v1.2.3`
//! or `1.2.3`).
//!
//! Where it sits: pure; `registry_modules/` validates versions and reads tags with it,
//! `store/registry_modules.rs` and `registry_protocol.rs` order versions with [`Version::cmp`].
//!
//! Invariants: [`Version::parse`] accepts exactly the semver 2.0.0 grammar (numeric
//! identifiers without leading zeros, non-empty dot-separated identifiers of `[0-9A-Za-z-]`);
//! the order is semver precedence (build metadata ignored), with the text as the last tie-break
//! so that it is total and consistent with equality of the text.

use std::cmp::Ordering;

/// A parsed semantic version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) major: u64,
    pub(crate) minor: u64,
    pub(crate) patch: u64,
    /// The pre-release identifiers (`alpha`, `1`), empty for a release.
    pub(crate) pre: Vec<String>,
    /// The build metadata after `+`, if any.
    pub(crate) build: Option<String>,
    /// The version as written.
    text: String,
}

impl Version {
    /// Parses `text` (no `v` prefix); `None` unless it is a valid semantic version.
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let (rest, build) = match text.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (text, None),
        };
        if let Some(build) = build
            && !valid_identifiers(build, false)
        {
            return None;
        }
        let (core, pre) = match rest.split_once('-') {
            Some((core, pre)) => (core, Some(pre)),
            None => (rest, None),
        };
        if let Some(pre) = pre
            && !valid_identifiers(pre, true)
        {
            return None;
        }
        let mut numbers = core.split('.');
        let mut number = || numbers.next().and_then(numeric);
        let (major, minor, patch) = (number()?, number()?, number()?);
        if numbers.next().is_some() {
            return None;
        }
        Some(Version {
            major,
            minor,
            patch,
            pre: pre
                .map(|pre| pre.split('.').map(str::to_owned).collect())
                .unwrap_or_default(),
            build: build.map(str::to_owned),
            text: text.to_owned(),
        })
    }

    /// The version a repository tag names: `v1.2.3` or `1.2.3`; `None` for other tags.
    pub(crate) fn from_tag(tag: &str) -> Option<Version> {
        Version::parse(tag.strip_prefix('v').unwrap_or(tag))
    }

    pub(crate) fn is_prerelease(&self) -> bool {
        !self.pre.is_empty()
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Version) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                // A pre-release comes before its release.
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_pre(&self.pre, &other.pre),
            })
            .then_with(|| self.text.cmp(&other.text))
    }
}

fn compare_pre(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let order = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(x), Ok(y)) => x.cmp(&y),
            // Numeric identifiers have lower precedence than alphanumeric ones.
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => x.cmp(y),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    a.len().cmp(&b.len())
}

/// A numeric identifier: digits, no leading zero (but `0` itself).
fn numeric(part: &str) -> Option<u64> {
    let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits || (part.len() > 1 && part.starts_with('0')) {
        return None;
    }
    part.parse().ok()
}

/// Dot-separated, non-empty identifiers of `[0-9A-Za-z-]`; pre-release identifiers that are
/// all digits must not have leading zeros.
fn valid_identifiers(text: &str, pre_release: bool) -> bool {
    text.split('.').all(|part| {
        let charset =
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let all_digits = part.bytes().all(|b| b.is_ascii_digit());
        charset && !(pre_release && all_digits && numeric(part).is_none())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_semver_with_pre_release_and_build() {
        let version = Version::parse("1.2.3-alpha.1+feature.7").unwrap();
        assert_eq!((version.major, version.minor, version.patch), (1, 2, 3));
        assert_eq!(version.pre, ["alpha", "1"]);
        assert_eq!(version.build.as_deref(), Some("feature.7"));
        assert_eq!(version.as_str(), "1.2.3-alpha.1+feature.7");
        assert!(Version::parse("1.2.3-alpha+feature").is_some());
        assert!(Version::parse("0.0.0").is_some());
    }

    #[test]
    fn parse_refuses_what_semver_refuses() {
        for text in [
            "",
            "1",
            "1.2",
            "1.2.3.4",
            "01.2.3",
            "1.02.3",
            "v1.2.3",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-a..b",
            "1.2.3-01",
            "1.2.x",
            "1.2.3-a_b",
            " 1.2.3",
        ] {
            assert!(Version::parse(text).is_none(), "{text:?}");
        }
    }

    #[test]
    fn tags_may_have_a_v_prefix() {
        assert_eq!(Version::from_tag("v1.0.0").unwrap().as_str(), "1.0.0");
        assert_eq!(Version::from_tag("2.1.0").unwrap().as_str(), "2.1.0");
        assert!(Version::from_tag("release-1").is_none());
        assert!(Version::from_tag("vv1.0.0").is_none());
    }

    #[test]
    fn order_is_semver_precedence() {
        let ordered = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.10.0",
            "2.0.0",
        ];
        let versions: Vec<Version> = ordered.iter().map(|v| Version::parse(v).unwrap()).collect();
        for pair in versions.windows(2) {
            assert!(
                pair[0] < pair[1],
                "{} < {}",
                pair[0].as_str(),
                pair[1].as_str()
            );
        }
    }
}
