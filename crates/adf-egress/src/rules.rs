//! The address half of the §5.6 rules: what kind of destination one resolved address is.
//! [`crate::Policy`] applies them in order; these functions only classify.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 addresses written as IPv6 (mapped `::ffff:a.b.c.d`, the deprecated compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) are judged as the IPv4 address they reach.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || nat64 {
        IpAddr::V4(embedded)
    } else {
        ip
    }
}

/// Rule 1: link-local and cloud-metadata addresses, refused whatever the agent's flags say.
/// `ip` must be [`canonical`].
pub fn link_local_or_metadata(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local/cloud-metadata"),
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(100, 100, 100, 200) => Some("cloud-metadata"),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some("link-local"),
        IpAddr::V6(v6) if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => {
            Some("cloud-metadata")
        }
        _ => None,
    }
}

/// Rule 5's refused kinds (loopback is allowed and not listed). `ip` must be [`canonical`].
pub fn local_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            match (a, b, c) {
                (0, _, _) => Some("unspecified"),
                (10, _, _) => Some("private (10.0.0.0/8)"),
                (172, 16..=31, _) => Some("private (172.16.0.0/12)"),
                (192, 168, _) => Some("private (192.168.0.0/16)"),
                (100, 64..=127, _) => Some("CGNAT (100.64.0.0/10)"),
                (224..=239, _, _) => Some("multicast"),
                (240..=255, _, _) => Some("reserved"),
                (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) => {
                    Some("reserved")
                }
                _ => None,
            }
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if v6.is_unspecified() {
                Some("unspecified")
            } else if s[0] & 0xff00 == 0xff00 {
                Some("multicast")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("unique-local (fc00::/7)")
            } else if s[0] & 0xffc0 == 0xfec0 {
                Some("site-local")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 || s[..4] == [0x100, 0, 0, 0] {
                Some("reserved")
            } else {
                None
            }
        }
    }
}

/// Whether a connection to `ip` stays on this machine: loopback, the unspecified address
/// (which the kernel routes to this host), or an address assigned to one of its interfaces.
/// The last is asked of the kernel by binding a UDP socket to it, which sends nothing and
/// succeeds only for a local address.
pub fn is_this_machine(ip: IpAddr) -> bool {
    let ip = canonical(ip);
    ip.is_loopback()
        || ip.is_unspecified()
        || (!ip.is_multicast() && std::net::UdpSocket::bind((ip, 0)).is_ok())
}
