//! Target: the target URL and the address policy. Every accepted URL's dialed address is the
//! one the policy judged: IP literals in every spelling the URL parser takes (dotted, short,
//! octal, hex, one number, percent-encoded, full-width; IPv6 compressed, padded, with an
//! IPv4 tail, mapped, compatible, NAT64, 6to4) name the address the test built them from, the
//! address the submission judges and the one the HTTP connector would dial (modelled as
//! hyper-util does it: `http::Uri` host, brackets stripped, `Ipv4Addr`/`Ipv6Addr` parse), and
//! a forbidden range is always refused. Host names are never looked up: the test only asserts
//! that the connector hands them to the resolver (which judges what it resolves).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::json;
use spool_proto::ErrorCode;
use spoold::deliveries::outbound::{literal_ip, AddressPolicy, Outbound, OutboundConfig};
use spoold::deliveries::submission::{decode, validate, Rules};
use url::Url;

use super::{check, corpus_lines, replay};

/// A host as a URL spells it, and the address it names (`None`: a name, for the resolver).
#[derive(Debug, Clone)]
pub struct Spelled {
    pub host: String,
    pub ip: Option<IpAddr>,
}

/// IPv4 addresses, most of them in or at the edge of a range that matters.
fn v4() -> impl Strategy<Value = u32> {
    let ranges: &[(u32, u8)] = &[
        (0x7f00_0000, 8),  // loopback
        (0x0a00_0000, 8),  // private
        (0x0000_0000, 8),  // this network
        (0xa9fe_0000, 16), // link-local (metadata services)
        (0xac10_0000, 12), // private
        (0xc0a8_0000, 16), // private
        (0x6440_0000, 10), // shared
        (0xe000_0000, 4),  // multicast
        (0xf000_0000, 4),  // reserved, broadcast
        (0x0101_0101, 32), // public
        (0x0808_0808, 24), // public
    ];
    prop_oneof![
        2 => any::<u32>(),
        3 => (prop::sample::select(ranges), any::<u32>(), 0u8..3).prop_map(|((net, prefix), r, edge)| {
            let span = if prefix == 32 { 0 } else { u32::MAX >> prefix };
            match edge {
                0 => net,
                1 => net | span,
                _ => net | (r & span),
            }
        }),
    ]
}

/// One number in a radix the WHATWG IPv4 parser reads: decimal, octal (`0` prefix) or hex
/// (`0x`, any case).
fn number(n: u32, radix: u8, upper: bool) -> String {
    match radix {
        0 => n.to_string(),
        1 => format!("0{n:o}"),
        _ if upper => format!("0X{n:X}"),
        _ => format!("0x{n:x}"),
    }
}

/// IPv4 spellings of an address the URL parser accepts, each naming that address.
fn v4_spelled() -> impl Strategy<Value = Spelled> {
    (
        v4(),
        0u8..4,
        prop::collection::vec((0u8..3, any::<bool>()), 4),
        0u8..4,
    )
        .prop_map(|(addr, parts, radixes, dress)| {
            let [a, b, c, d] = addr.to_be_bytes();
            let [a, b, c, d] = [a, b, c, d].map(u32::from);
            let values: Vec<u32> = match parts {
                0 => vec![addr],
                1 => vec![a, addr & 0x00ff_ffff],
                2 => vec![a, b, addr & 0xffff],
                _ => vec![a, b, c, d],
            };
            let mut host = values
                .iter()
                .zip(&radixes)
                .map(|(v, (radix, upper))| number(*v, *radix, *upper))
                .collect::<Vec<_>>()
                .join(".");
            match dress {
                // A trailing dot still names the address.
                1 => host.push('.'),
                // Percent-encoded digits are decoded before the host is parsed.
                2 => host = host.replacen('1', "%31", 1),
                // Full-width digits and dots are mapped to ASCII (IDNA) before it is parsed.
                3 => {
                    host = host
                        .chars()
                        .map(|ch| match ch {
                            '0'..='9' => char::from_u32(0xff10 + (ch as u32 - '0' as u32))
                                .expect("full-width digit"),
                            '.' => '\u{ff0e}',
                            other => other,
                        })
                        .collect()
                }
                _ => {}
            }
            Spelled {
                host,
                ip: Some(IpAddr::V4(Ipv4Addr::from(addr))),
            }
        })
}

/// IPv6 addresses: random, and each form that embeds an IPv4 address, around the ranges.
fn v6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        Just(Ipv6Addr::LOCALHOST),
        Just(Ipv6Addr::UNSPECIFIED),
        v4().prop_map(|v| Ipv4Addr::from(v).to_ipv6_mapped()),
        v4().prop_map(|v| Ipv4Addr::from(v).to_ipv6_compatible()),
        v4().prop_map(|v| Ipv6Addr::from((0x0064_ff9b_u128 << 96) | u128::from(v))),
        (v4(), any::<u64>()).prop_map(|(v, low)| Ipv6Addr::from(
            (0x2002_u128 << 112) | (u128::from(v) << 80) | u128::from(low)
        )),
        (0u8..5, any::<u128>()).prop_map(|(net, r)| {
            let (base, prefix): (u128, u32) = [
                (0xfc00_u128 << 112, 7),
                (0xfe80_u128 << 112, 10),
                (0xff00_u128 << 112, 8),
                (0x2001_0db8_u128 << 96, 32),
                (0x2606_4700_u128 << 96, 32),
            ][usize::from(net)];
            Ipv6Addr::from(base | (r >> prefix))
        }),
    ]
}

/// IPv6 spellings in brackets, each naming the address.
fn v6_spelled() -> impl Strategy<Value = Spelled> {
    (v6(), 0u8..4).prop_map(|(addr, style)| {
        let s = addr.segments();
        let body = match style {
            0 => addr.to_string(),
            1 => s
                .iter()
                .map(|g| format!("{g:04x}"))
                .collect::<Vec<_>>()
                .join(":"),
            2 => addr.to_string().to_uppercase(),
            _ => {
                let [a, b, c, d] = (u128::from(addr) as u32).to_be_bytes();
                let head = s[..6]
                    .iter()
                    .map(|g| format!("{g:x}"))
                    .collect::<Vec<_>>()
                    .join(":");
                format!("{head}:{a}.{b}.{c}.{d}")
            }
        };
        Spelled {
            host: format!("[{body}]"),
            ip: Some(IpAddr::V6(addr)),
        }
    })
}

/// Host names, some of them made to look like addresses.
fn name_spelled() -> impl Strategy<Value = Spelled> {
    let label = "[a-z0-9][a-z0-9-]{0,10}";
    prop_oneof![
        prop::collection::vec(label, 1..4).prop_map(|l| format!("{}.test", l.join("."))),
        Just("localhost".to_owned()),
        Just("LOCALHOST.".to_owned()),
        v4().prop_map(|v| format!("{}.nip.test", Ipv4Addr::from(v))),
        v4().prop_map(|v| format!("x{}", Ipv4Addr::from(v))),
        Just("b\u{fc}cher.test".to_owned()),
        Just("xn--bcher-kva.test".to_owned()),
    ]
    .prop_map(|host| Spelled { host, ip: None })
}

/// Any host: an IP literal in some spelling, or a name.
pub fn host() -> impl Strategy<Value = Spelled> {
    prop_oneof![3 => v4_spelled(), 3 => v6_spelled(), 1 => name_spelled()]
}

/// A target URL around `host`: scheme in any case, a port or none, a path.
fn url_around(host: &Spelled) -> impl Strategy<Value = String> {
    let host = host.host.clone();
    (
        prop::sample::select(vec!["http", "https", "HTTP", "hTTpS"]),
        prop::sample::select(vec!["", ":80", ":443", ":8080", ":0", ":65535", ":00080"]),
        prop::sample::select(vec!["", "/", "/hook", "/a/../b?x=1", "/%2e%2e/x"]),
    )
        .prop_map(move |(scheme, port, path)| format!("{scheme}://{host}{port}{path}"))
}

/// The address a connection to `stored` goes to without a lookup, as reqwest and hyper-util
/// find it: the URL as an `http::Uri`, its host without brackets, parsed as an IP address.
/// `None`: the host is a name, handed to the resolver (spoold's, which applies the policy).
fn dialed(stored: &str) -> Result<Option<IpAddr>, String> {
    let uri: http::Uri = stored
        .parse()
        .map_err(|e| format!("{stored:?} is no http::Uri: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("{stored:?}: no host"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Ok(host
        .parse::<Ipv4Addr>()
        .map(IpAddr::V4)
        .or_else(|_| host.parse::<Ipv6Addr>().map(IpAddr::V6))
        .ok())
}

/// Addresses that must never be dialled under the default policy, written out here
/// independently of the policy's own table (a subset of it).
fn forbidden(ip: IpAddr) -> bool {
    fn v4(ip: Ipv4Addr) -> bool {
        let [a, b, ..] = ip.octets();
        ip.is_loopback()
            || ip.is_private()
            || ip.is_link_local()
            || ip.is_unspecified()
            || ip.is_broadcast()
            || ip.is_multicast()
            || a == 0
            || a >= 240
            || (a == 100 && (64..128).contains(&b))
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            let n = u128::from(ip);
            let low = Ipv4Addr::from(n as u32);
            let s = ip.segments();
            ip.is_loopback()
                || ip.is_unspecified()
                || ip.is_multicast()
                || s[0] & 0xfe00 == 0xfc00
                || s[0] & 0xffc0 == 0xfe80
                || (n >> 32 == 0xffff && v4(low))
                || (n >> 32 == 0 && v4(low))
                || (n >> 32 == 0x0064_ff9b_u128 << 64 && v4(low))
                || (s[0] == 0x2002 && v4(Ipv4Addr::from((n >> 80) as u32)))
        }
    }
}

/// Submits `url` as a create under `policy`; the stored URL or the rejection.
fn submit(url: &str, policy: &AddressPolicy) -> Result<String, (ErrorCode, String)> {
    let body = serde_json::to_vec(&json!({ "targetUrl": url })).expect("json");
    let rules = Rules {
        policy: policy.clone(),
        retry_window: None,
    };
    decode(&body)
        .and_then(|req| validate(req, &rules))
        .map(|d| d.target_url)
        .map_err(|r| (r.code, r.message))
}

/// The send-time check of the outbound client (built once: no connection is made by it).
fn outbound() -> &'static Outbound {
    static OUTBOUND: std::sync::OnceLock<Outbound> = std::sync::OnceLock::new();
    OUTBOUND.get_or_init(|| {
        Outbound::new(OutboundConfig {
            policy: AddressPolicy::default(),
            per_target: 1,
            connect_timeout: std::time::Duration::from_secs(1),
            max_redirects: 0,
        })
        .expect("an outbound client builds")
    })
}

/// The property, for one URL around a host whose address (if any) is known.
fn judged_as_dialed(url: &str, expected: Option<IpAddr>) -> Result<(), TestCaseError> {
    let policy = AddressPolicy::default();
    match submit(url, &policy) {
        Ok(stored) => {
            let parsed = Url::parse(&stored).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(
                parsed.as_str(),
                stored.as_str(),
                "stored is the parser's form"
            );
            let judged = literal_ip(&parsed);
            let dialed = dialed(&stored).map_err(TestCaseError::fail)?;
            prop_assert_eq!(judged, dialed, "{} stored as {}", url, stored);
            if let Some(expected) = expected {
                prop_assert_eq!(dialed, Some(expected), "{} names {}", url, expected);
            }
            if let Some(ip) = dialed {
                prop_assert!(!forbidden(ip), "{url} dials the forbidden {ip}");
                prop_assert!(policy.check(ip).is_ok(), "{url}: accepted, denied {ip}");
            }
            prop_assert!(
                outbound().check_literal(&parsed).is_ok(),
                "send refuses {stored}"
            );
        }
        Err((ErrorCode::TargetBlocked, message)) => {
            let ip = expected
                .or_else(|| Url::parse(url.trim()).ok().and_then(|u| literal_ip(&u)))
                .ok_or_else(|| {
                    TestCaseError::fail(format!("{url}: a host name blocked at submission"))
                })?;
            prop_assert!(policy.check(ip).is_err(), "{url} blocked: {message}");
            prop_assert!(message.contains(&ip.to_string()), "{message} names {ip}");
        }
        Err((code, message)) => {
            // Refused as malformed: nothing is stored, nothing dialled.
            prop_assert_eq!(code, ErrorCode::InvalidDelivery, "{}: {}", url, message);
            prop_assert!(!message.is_empty());
        }
    }
    Ok(())
}

#[test]
fn every_accepted_url_dials_the_address_the_policy_judged() {
    check(
        1000,
        host().prop_flat_map(|h| {
            let ip = h.ip;
            url_around(&h).prop_map(move |url| (url, ip))
        }),
        |(url, ip)| judged_as_dialed(&url, ip),
    );
}

/// With everything allowed, an address literal is accepted in every spelling, and names the
/// address it was built from: nothing the policy does can hide a misreading of a spelling.
#[test]
fn every_spelling_names_its_address() {
    let open = AddressPolicy {
        allow_all: true,
        allowed: vec![],
    };
    check(1000, prop_oneof![v4_spelled(), v6_spelled()], |h| {
        let url = format!("http://{}/", h.host);
        let stored =
            submit(&url, &open).map_err(|(_, m)| TestCaseError::fail(format!("{url}: {m}")))?;
        let parsed = Url::parse(&stored).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(literal_ip(&parsed), h.ip, "{} judged", url);
        prop_assert_eq!(
            dialed(&stored).map_err(TestCaseError::fail)?,
            h.ip,
            "{} dialed",
            url
        );
        Ok(())
    });
}

/// An `--allow-target` network opens exactly its addresses (and their IPv4-mapped forms); the
/// rest of the deny list holds.
#[test]
fn an_allowed_network_opens_its_addresses_only() {
    check(1000, (v4(), 8u8..=32, v4()), |(net, prefix, other)| {
        let cidr = format!("{}/{prefix}", Ipv4Addr::from(net));
        let policy = AddressPolicy {
            allow_all: false,
            allowed: vec![cidr.parse().map_err(TestCaseError::fail)?],
        };
        let inside = |v: u32| (v ^ net) >> (32 - u32::from(prefix)) == 0;
        for v in [net, other] {
            let ip = Ipv4Addr::from(v);
            let verdict = policy.check(IpAddr::V4(ip));
            let mapped = policy.check(IpAddr::V6(ip.to_ipv6_mapped()));
            prop_assert_eq!(
                verdict.is_ok(),
                mapped.is_ok(),
                "{} and its mapped form",
                ip
            );
            if inside(v) {
                prop_assert!(verdict.is_ok(), "{ip} is in {cidr}");
            } else {
                prop_assert_eq!(
                    verdict.is_ok(),
                    AddressPolicy::default().check(IpAddr::V4(ip)).is_ok(),
                    "{} is outside {}",
                    ip,
                    cidr
                );
            }
        }
        Ok(())
    });
}

/// A reconciliation URL is judged once, at submission, with stand-in values; every URL the
/// check may dial (whatever the fingerprint and id) must be what was judged: a value must not
/// choose the host.
#[test]
fn a_reconcile_url_dials_what_was_judged_whatever_the_values() {
    let template = prop_oneof![
        Just("https://{fingerprint}/x".to_owned()),
        Just("https://api.test/{fingerprint}".to_owned()),
        Just("https://api.test:{fingerprint}/".to_owned()),
        Just("https://a{deliveryId}.test/".to_owned()),
        Just("https://api.test/s?q={fingerprint}&id={deliveryId}".to_owned()),
        Just("http://[::1]/{fingerprint}".to_owned()),
        host().prop_map(|h| format!("https://{}/search?f={{fingerprint}}", h.host)),
    ];
    let value = prop_oneof![host().prop_map(|h| h.host), "[a-zA-Z0-9._~:/?#@-]{1,40}",];
    check(600, (template, value), |(template, fingerprint)| {
        let body = serde_json::to_vec(&json!({
            "targetUrl": "https://hooks.test/",
            "mode": "at_most_once",
            "fingerprint": fingerprint,
            "reconcile": {"url": template},
        }))
        .expect("json");
        let Ok(new) = decode(&body).and_then(|req| validate(req, &Rules::default())) else {
            return Ok(());
        };
        let reconcile: serde_json::Value =
            serde_json::from_str(new.reconcile.as_deref().unwrap_or("{}")).expect("stored json");
        let stored = reconcile["url"].as_str().unwrap_or_default();
        let fingerprint = new.fingerprint.as_deref().unwrap_or_default();
        let sample = spoold::deliveries::reconcile::expand(stored, "fingerprint", "0123");
        let real = spoold::deliveries::reconcile::expand(stored, fingerprint, &new.id);
        let (Ok(sample), Ok(real)) = (Url::parse(&sample), Url::parse(&real)) else {
            return Ok(());
        };
        prop_assert_eq!(
            (sample.host(), sample.port_or_known_default()),
            (real.host(), real.port_or_known_default()),
            "{} with fingerprint {:?}",
            stored,
            fingerprint
        );
        Ok(())
    });
}

#[test]
fn corpus() {
    replay(corpus_lines("address"), |line| {
        // `URL` alone, or `URL => ADDRESS` for a literal the URL must name.
        let (url, ip) = match line.split_once(" => ") {
            Some((url, ip)) => (
                url,
                Some(
                    ip.parse::<IpAddr>()
                        .map_err(|e| TestCaseError::fail(e.to_string()))?,
                ),
            ),
            None => (line.as_str(), None),
        };
        judged_as_dialed(url, ip)
    });
}
