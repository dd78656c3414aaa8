//! The syntax of the SAN values roles and requests write, shared by role validation
//! (`roles.rs`) and name policy (`names.rs`): IP networks (`allowed_ip_sans_cidr`) and other
//! SANs (`<oid>;UTF8:<value>`).
//!
//! Where it sits: a leaf; it knows no role, only text.
//!
//! Invariant: parsing answers `None` or an error message, never panics.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// Parses `<oid>;<type>:<value>` entries (type UTF8 or UTF-8, any case) into values per OID.
pub(crate) fn parse_other_sans(
    entries: &[String],
) -> Result<BTreeMap<String, Vec<String>>, String> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in entries {
        let Some((oid, rest)) = entry.split_once(';') else {
            return Err(format!("expected a semicolon in other SAN {entry:?}"));
        };
        let Some((kind, value)) = rest.split_once(':') else {
            return Err(format!("expected a colon in other SAN {entry:?}"));
        };
        if !kind.eq_ignore_ascii_case("utf8") && !kind.eq_ignore_ascii_case("utf-8") {
            return Err(format!(
                "only utf8 other SANs are supported; found non-supported type in other SAN {entry:?}"
            ));
        }
        out.entry(oid.to_owned())
            .or_default()
            .push(value.to_owned());
    }
    Ok(out)
}

/// An IP network (`10.0.0.0/8`), stored masked as Go's `ParseCIDR` returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Cidr {
    pub(crate) fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_v4(u32::from(*ip), self.prefix) == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                mask_v6(u128::from(*ip), self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

fn mask_v4(value: u32, prefix: u8) -> u32 {
    value & u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask_v6(value: u128, prefix: u8) -> u128 {
    value & u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// Parses `addr/prefix`.
pub(crate) fn parse_cidr(text: &str) -> Option<Cidr> {
    let (addr, prefix) = text.trim().split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    let addr = match addr {
        IpAddr::V4(v4) if prefix <= 32 => IpAddr::V4(mask_v4(u32::from(v4), prefix).into()),
        IpAddr::V6(v6) if prefix <= 128 => IpAddr::V6(mask_v6(u128::from(v6), prefix).into()),
        _ => return None,
    };
    Some(Cidr { addr, prefix })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_are_masked_and_contain_their_addresses() {
        let net = parse_cidr("10.1.2.3/8").unwrap();
        assert_eq!(net.to_string(), "10.0.0.0/8");
        assert!(net.contains(&"10.200.0.1".parse().unwrap()));
        assert!(!net.contains(&"11.0.0.1".parse().unwrap()));
        assert!(parse_cidr("10.0.0.0/33").is_none());
        assert!(
            parse_cidr("fd00::1/8")
                .unwrap()
                .contains(&"fd12::1".parse().unwrap())
        );
    }

    #[test]
    fn other_sans_group_values_by_oid_and_take_utf8_only() {
        let parsed = parse_other_sans(&[
            "1.2.3;UTF8:a".into(),
            "1.2.3;utf-8:b".into(),
            "1.2.4;UTF8:c:d".into(),
        ])
        .unwrap();
        assert_eq!(parsed["1.2.3"], vec!["a", "b"]);
        assert_eq!(parsed["1.2.4"], vec!["c:d"]);
        assert!(parse_other_sans(&["1.2.3;UTF16:x".into()]).is_err());
        assert!(parse_other_sans(&["1.2.3".into()]).is_err());
    }
}
