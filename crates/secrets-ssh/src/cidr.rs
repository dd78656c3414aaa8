//! CIDR blocks and the role's IP rules (Vault's `cidrutil` and the ssh engine's `validateIP`):
//! pure functions over comma-separated CIDR lists.
//!
//! Invariants: a list is valid only when every non-empty entry parses as `address/prefix`
//! (Go's `net.ParseCIDR`: the prefix within the family's width); an IPv4 address never matches
//! an IPv6 block or the other way round (an IPv4-mapped IPv6 address counts as IPv4, as Go's
//! `To4` reads it).

use std::net::IpAddr;

/// One `address/prefix` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub(crate) fn parse(raw: &str) -> Result<Cidr, String> {
        let raw = raw.trim();
        let invalid = || format!("invalid CIDR address: {raw}");
        let (address, prefix) = raw.split_once('/').ok_or_else(invalid)?;
        let network: IpAddr = address.parse().map_err(|_| invalid())?;
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) || prefix.len() > 3 {
            return Err(invalid());
        }
        let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
        let width = match network {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        if prefix > width {
            return Err(invalid());
        }
        Ok(Cidr { network, prefix })
    }

    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        match (canonical(self.network), canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// The blocks of a comma-separated list; empty entries are skipped.
pub(crate) fn parse_list(list: &str) -> Result<Vec<Cidr>, String> {
    list.split(',')
        .filter(|entry| !entry.trim().is_empty())
        .map(Cidr::parse)
        .collect()
}

/// Whether `ip` lies in some block of `list`.
pub(crate) fn list_contains(list: &str, ip: IpAddr) -> Result<bool, String> {
    Ok(parse_list(list)?.iter().any(|cidr| cidr.contains(ip)))
}

/// Vault's `validateIP`: inside the role's `cidr_list` and outside its `exclude_cidr_list`,
/// unless the role accepts any address (`config/zeroaddress`). The error is the text Vault
/// puts after `Error validating IP: `.
pub(crate) fn validate_ip(
    ip: IpAddr,
    cidr_list: &str,
    exclude_cidr_list: &str,
    zero_address: bool,
) -> Result<(), String> {
    if zero_address {
        return Ok(());
    }
    if parse_list(cidr_list)?.is_empty() || !list_contains(cidr_list, ip)? {
        return Err("IP does not belong to role".to_owned());
    }
    if list_contains(exclude_cidr_list, ip)? {
        return Err("IP does not belong to role".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(raw: &str) -> IpAddr {
        raw.parse().unwrap()
    }

    #[test]
    fn blocks_parse_as_go_does() {
        assert!(Cidr::parse("10.0.0.0/8").is_ok());
        assert!(Cidr::parse(" 192.168.1.7/32 ").is_ok());
        assert!(Cidr::parse("::/0").is_ok());
        for bad in [
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0/8",
            "x/8",
            "10.0.0.0/-1",
            "10.0.0.0/",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn membership_follows_the_prefix() {
        let block = Cidr::parse("192.168.1.0/24").unwrap();
        assert!(block.contains(ip("192.168.1.200")));
        assert!(!block.contains(ip("192.168.2.1")));
        assert!(block.contains(ip("::ffff:192.168.1.3")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(
            !Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains(ip("2001:db8::1"))
        );
        assert!(
            Cidr::parse("2001:db8::/32")
                .unwrap()
                .contains(ip("2001:db8::1"))
        );
    }

    #[test]
    fn the_exclude_list_wins_and_zero_address_roles_take_anything() {
        let list = "10.0.0.0/8,127.0.0.0/8";
        assert!(validate_ip(ip("10.1.2.3"), list, "", false).is_ok());
        assert!(validate_ip(ip("10.1.2.3"), list, "10.1.0.0/16", false).is_err());
        assert!(validate_ip(ip("11.0.0.1"), list, "", false).is_err());
        assert!(validate_ip(ip("11.0.0.1"), "", "", false).is_err());
        assert!(validate_ip(ip("11.0.0.1"), "", "", true).is_ok());
    }
}
