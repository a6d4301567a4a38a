//! The outbound address policy, as pure functions: which IP addresses a delivery may connect
//! to. Everything that is not clearly a public unicast address is denied unless the operator
//! opened it with `--allow-target` or `--allow-private-targets`.
//!
//! IPv6 forms that embed an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by the
//! embedded address, so `::ffff:127.0.0.1` is loopback however it is spelled.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// IPv4 ranges that are never a legitimate public target.
const DENIED_V4: &[(Ipv4Addr, u8, &str)] = &[
    (Ipv4Addr::new(0, 0, 0, 0), 8, "this-network 0.0.0.0/8"),
    (Ipv4Addr::new(10, 0, 0, 0), 8, "private 10.0.0.0/8"),
    (
        Ipv4Addr::new(100, 64, 0, 0),
        10,
        "shared address space 100.64.0.0/10",
    ),
    (Ipv4Addr::new(127, 0, 0, 0), 8, "loopback 127.0.0.0/8"),
    (
        Ipv4Addr::new(169, 254, 0, 0),
        16,
        "link-local 169.254.0.0/16",
    ),
    (Ipv4Addr::new(172, 16, 0, 0), 12, "private 172.16.0.0/12"),
    (
        Ipv4Addr::new(192, 0, 0, 0),
        24,
        "IETF protocol assignments 192.0.0.0/24",
    ),
    (
        Ipv4Addr::new(192, 0, 2, 0),
        24,
        "documentation 192.0.2.0/24",
    ),
    (
        Ipv4Addr::new(192, 88, 99, 0),
        24,
        "6to4 relay anycast 192.88.99.0/24",
    ),
    (Ipv4Addr::new(192, 168, 0, 0), 16, "private 192.168.0.0/16"),
    (
        Ipv4Addr::new(198, 18, 0, 0),
        15,
        "benchmarking 198.18.0.0/15",
    ),
    (
        Ipv4Addr::new(198, 51, 100, 0),
        24,
        "documentation 198.51.100.0/24",
    ),
    (
        Ipv4Addr::new(203, 0, 113, 0),
        24,
        "documentation 203.0.113.0/24",
    ),
    (Ipv4Addr::new(224, 0, 0, 0), 4, "multicast 224.0.0.0/4"),
    (Ipv4Addr::new(240, 0, 0, 0), 4, "reserved 240.0.0.0/4"),
    (
        Ipv4Addr::new(255, 255, 255, 255),
        32,
        "broadcast 255.255.255.255/32",
    ),
];

/// IPv6 ranges denied outright (the embedded-IPv4 forms are handled separately).
const DENIED_V6: &[(Ipv6Addr, u8, &str)] = &[
    (
        Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0),
        48,
        "local-use NAT64 64:ff9b:1::/48",
    ),
    (
        Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0),
        64,
        "discard-only 100::/64",
    ),
    (
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0),
        32,
        "documentation 2001:db8::/32",
    ),
    (
        Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0),
        32,
        "Teredo 2001::/32",
    ),
    (
        Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0),
        7,
        "unique local fc00::/7",
    ),
    (
        Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0),
        10,
        "link-local fe80::/10",
    ),
    (
        Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0),
        10,
        "site-local fec0::/10",
    ),
    (
        Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0),
        8,
        "multicast ff00::/8",
    ),
];

/// Why an address is refused: the rule that matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub addr: IpAddr,
    pub rule: String,
}

impl Denied {
    /// What an operator can do about it, as a clause.
    pub fn remedy(&self) -> String {
        let bits = if self.addr.is_ipv4() { 32 } else { 128 };
        format!(
            "start spoold with --allow-target {}/{bits} or, for development, \
             --allow-private-targets",
            self.addr
        )
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is blocked ({})", self.addr, self.rule)
    }
}

impl std::error::Error for Denied {}

/// An IP network in CIDR form, e.g. `10.1.0.0/16` or `fd00::/8`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => in_v4(ip, net, self.prefix),
            (IpAddr::V6(net), IpAddr::V6(ip)) => in_v6(ip, net, self.prefix),
            _ => false,
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// A bare address is a host route (`/32` or `/128`).
    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP network like 10.0.0.0/8"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?} has a bad prefix length"))?,
        };
        Ok(Cidr { addr, prefix })
    }
}

/// The policy in force: the default deny list, minus what the operator opened.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// `--allow-private-targets`: every address is allowed.
    pub allow_all: bool,
    /// `--allow-target`: these networks are allowed even if the deny list names them.
    pub allowed: Vec<Cidr>,
}

impl AddressPolicy {
    /// Whether a delivery may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Denied> {
        if self.allow_all {
            return Ok(());
        }
        let plain = unmap(ip);
        if self
            .allowed
            .iter()
            .any(|net| net.contains(ip) || net.contains(plain))
        {
            return Ok(());
        }
        match deny_rule(ip) {
            Some(rule) => Err(Denied { addr: ip, rule }),
            None => Ok(()),
        }
    }
}

/// The default rule that denies `ip`, if any.
pub fn deny_rule(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => deny_rule_v4(v4).map(str::to_owned),
        IpAddr::V6(v6) => deny_rule_v6(v6),
    }
}

fn deny_rule_v4(ip: Ipv4Addr) -> Option<&'static str> {
    DENIED_V4
        .iter()
        .find(|(net, prefix, _)| in_v4(ip, *net, *prefix))
        .map(|(_, _, name)| *name)
}

fn deny_rule_v6(ip: Ipv6Addr) -> Option<String> {
    let seg = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified ::/128".into());
    }
    if ip.is_loopback() {
        return Some("loopback ::1/128".into());
    }
    let embedded =
        |v4: Ipv4Addr, form: &str| deny_rule_v4(v4).map(|rule| format!("{form} of {v4}: {rule}"));
    let low32 = Ipv4Addr::from(u128::from(ip) as u32);
    // ::ffff:0:0/96, IPv4-mapped.
    if seg[..6] == [0, 0, 0, 0, 0, 0xffff] {
        return embedded(low32, "IPv4-mapped address");
    }
    // ::/96, IPv4-compatible (deprecated, but still routed by some stacks).
    if seg[..6] == [0; 6] {
        return embedded(low32, "IPv4-compatible address");
    }
    // 64:ff9b::/96, well-known NAT64 prefix.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return embedded(low32, "NAT64 address");
    }
    // 2002::/16, 6to4: the IPv4 address is in bits 16..48.
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::from((u32::from(seg[1]) << 16) | u32::from(seg[2]));
        return embedded(v4, "6to4 address");
    }
    DENIED_V6
        .iter()
        .find(|(net, prefix, _)| in_v6(ip, *net, *prefix))
        .map(|(_, _, name)| (*name).to_owned())
}

/// `::ffff:a.b.c.d` → `a.b.c.d`; anything else unchanged.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn in_v4(ip: Ipv4Addr, net: Ipv4Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & mask == u32::from(net) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u8) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    u128::from(ip) & mask == u128::from(net) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(s: &str) -> bool {
        AddressPolicy::default()
            .check(s.parse().expect("test address"))
            .is_err()
    }

    #[test]
    fn table() {
        let cases: &[(&str, bool)] = &[
            ("0.0.0.0", true),
            ("0.1.2.3", true),
            ("10.0.0.1", true),
            ("10.255.255.255", true),
            ("100.64.0.1", true),
            ("100.127.255.255", true),
            ("100.128.0.1", false),
            ("127.0.0.1", true),
            ("127.255.0.9", true),
            ("169.254.169.254", true),
            ("172.16.0.1", true),
            ("172.31.255.255", true),
            ("172.32.0.1", false),
            ("172.15.255.255", false),
            ("192.0.0.8", true),
            ("192.0.2.1", true),
            ("192.88.99.1", true),
            ("192.168.1.1", true),
            ("198.18.0.1", true),
            ("198.19.255.255", true),
            ("198.20.0.1", false),
            ("198.51.100.7", true),
            ("203.0.113.9", true),
            ("224.0.0.1", true),
            ("239.255.255.250", true),
            ("240.0.0.1", true),
            ("255.255.255.255", true),
            ("1.1.1.1", false),
            ("8.8.8.8", false),
            ("93.184.216.34", false),
            ("::", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("::ffff:10.1.2.3", true),
            ("::ffff:8.8.8.8", false),
            ("::127.0.0.1", true),
            ("::8.8.8.8", false),
            ("64:ff9b::7f00:1", true),
            ("64:ff9b::a00:1", true),
            ("64:ff9b::808:808", false),
            ("64:ff9b:1::1", true),
            ("100::1", true),
            ("2001::1", true),
            ("2001:db8::1", true),
            ("2002:7f00:1::", true),
            ("2002:c0a8:101::1", true),
            ("2002:808:808::1", false),
            ("fc00::1", true),
            ("fd12:3456::1", true),
            ("fe80::1", true),
            ("febf::1", true),
            ("fec0::1", true),
            ("ff02::1", true),
            ("2606:4700:4700::1111", false),
            ("2a00:1450:4001::200e", false),
            ("9.255.255.255", false),
            ("11.0.0.0", false),
            ("100.63.255.255", false),
            ("126.255.255.255", false),
            ("128.0.0.1", false),
            ("169.253.255.255", false),
            ("169.255.0.1", false),
            ("192.0.1.1", false),
            ("192.0.3.1", false),
            ("192.167.255.255", false),
            ("192.169.0.1", false),
            ("223.255.255.254", false),
            ("::2", true),
            ("::ffff:169.254.169.254", true),
            ("::ffff:0.0.0.0", true),
            ("64:ff9b::a9fe:a9fe", true),
            ("2001:db8:ffff::1", true),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true),
            ("fbff::1", false),
            ("fe7f::1", false),
            ("ff00::", true),
        ];
        assert!(cases.len() >= 60, "the table keeps at least 60 cases");
        for (addr, want_denied) in cases {
            assert_eq!(denied(addr), *want_denied, "{addr}");
        }
    }

    #[test]
    fn denial_names_address_and_rule() {
        let err = AddressPolicy::default()
            .check("::ffff:127.0.0.1".parse().expect("addr"))
            .expect_err("loopback");
        let text = err.to_string();
        assert!(text.contains("::ffff:127.0.0.1"), "{text}");
        assert!(text.contains("loopback 127.0.0.0/8"), "{text}");
    }

    #[test]
    fn allow_list_opens_ranges() {
        let policy = AddressPolicy {
            allow_all: false,
            allowed: vec!["10.1.0.0/16".parse().expect("cidr")],
        };
        assert!(policy.check("10.1.2.3".parse().expect("addr")).is_ok());
        assert!(policy
            .check("::ffff:10.1.2.3".parse().expect("addr"))
            .is_ok());
        assert!(policy.check("10.2.0.1".parse().expect("addr")).is_err());
        let open = AddressPolicy {
            allow_all: true,
            allowed: vec![],
        };
        assert!(open.check("127.0.0.1".parse().expect("addr")).is_ok());
    }

    #[test]
    fn cidr_parsing() {
        assert!("10.0.0.0/8".parse::<Cidr>().is_ok());
        assert!("fd00::/8".parse::<Cidr>().is_ok());
        assert!("10.0.0.1".parse::<Cidr>().is_ok());
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("example.com/8".parse::<Cidr>().is_err());
    }

    /// Property: every IPv4 address in a denied range is denied as itself and in every IPv6
    /// form that embeds it (mapped, compatible, NAT64, 6to4). Checked on the range edges and
    /// 500 pseudo-random addresses per range (a fixed-seed generator keeps runs reproducible).
    #[test]
    fn every_denied_v4_range_is_denied_in_embedded_forms() {
        let mut seed: u64 = 0x5eed_0000_5900_1d00;
        let mut next = move || {
            // xorshift64*
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
        };
        for (net, prefix, _) in DENIED_V4 {
            let first = u32::from(*net);
            let span = if *prefix == 0 {
                u32::MAX
            } else {
                (1u32 << (32 - prefix)) - 1
            };
            let samples = [first, first + span / 2, first + span]
                .into_iter()
                .chain((0..500).map(|_| first + next() % span.saturating_add(1).max(1)));
            for v4 in samples {
                let v4 = Ipv4Addr::from(v4);
                assert!(denied(&v4.to_string()), "{v4}");
                let [a, b, c, d] = v4.octets();
                let hi = u16::from_be_bytes([a, b]);
                let lo = u16::from_be_bytes([c, d]);
                for v6 in [
                    v4.to_ipv6_mapped(),
                    v4.to_ipv6_compatible(),
                    Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
                    Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 1),
                ] {
                    assert!(denied(&v6.to_string()), "{v4} as {v6}");
                }
            }
        }
    }

    /// Property: public IPv4 addresses are allowed, and so are their mapped and NAT64 forms.
    #[test]
    fn public_v4_is_allowed_in_embedded_forms() {
        for v4 in [
            "1.1.1.1",
            "8.8.4.4",
            "93.184.216.34",
            "151.101.1.69",
            "223.5.5.5",
        ] {
            let v4: Ipv4Addr = v4.parse().expect("addr");
            let [a, b, c, d] = v4.octets();
            let nat64 = Ipv6Addr::new(
                0x64,
                0xff9b,
                0,
                0,
                0,
                0,
                u16::from_be_bytes([a, b]),
                u16::from_be_bytes([c, d]),
            );
            for ip in [
                IpAddr::V4(v4),
                IpAddr::V6(v4.to_ipv6_mapped()),
                IpAddr::V6(nat64),
            ] {
                assert!(!denied(&ip.to_string()), "{ip}");
            }
        }
    }
}
