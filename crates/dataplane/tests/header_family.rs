//! Property tests of the header-family rule: whatever the client's family, and however it
//! arrives (IPv4 on an IPv4 socket, v4-mapped on a dual-stack one, IPv6), the header the proxy
//! writes for a dual-stack load balancer is the one the real load balancer would write: the
//! client's own address and the load balancer's address of the client's family, as
//! `TCP4` / `AF_INET` for an IPv4 client and `TCP6` / `AF_INET6` for an IPv6 one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hairpin_dataplane::routes::{ProxyProtocol, Route};
use hairpin_proxy_protocol::{Addresses, Decoded, Version, decode, encode_header};
use proptest::prelude::*;

/// An IPv4 client, as an IPv4 socket or a dual-stack one reports it.
#[derive(Clone, Debug)]
enum Client {
    V4(Ipv4Addr, bool),
    V6(Ipv6Addr),
}

impl Client {
    fn peer(&self, port: u16) -> SocketAddr {
        match self {
            Client::V4(ip, false) => SocketAddr::new(IpAddr::V4(*ip), port),
            Client::V4(ip, true) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), port),
            Client::V6(ip) => SocketAddr::new(IpAddr::V6(*ip), port),
        }
    }

    fn real(&self) -> IpAddr {
        match self {
            Client::V4(ip, _) => IpAddr::V4(*ip),
            Client::V6(ip) => IpAddr::V6(*ip),
        }
    }
}

fn client() -> impl Strategy<Value = Client> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<bool>()).prop_map(|(o, mapped)| Client::V4(o.into(), mapped)),
        // Any IPv6 address that is not itself v4-mapped (that is an IPv4 client).
        any::<[u8; 16]>()
            .prop_map(Ipv6Addr::from)
            .prop_filter("not v4-mapped", |ip| ip.to_ipv4_mapped().is_none())
            .prop_map(Client::V6),
    ]
}

fn ipv6() -> impl Strategy<Value = Ipv6Addr> {
    any::<[u8; 16]>()
        .prop_map(Ipv6Addr::from)
        .prop_filter("not v4-mapped", |ip| ip.to_ipv4_mapped().is_none())
}

fn header(version: Version, (src, dst): (SocketAddr, SocketAddr)) -> Vec<u8> {
    let mut buf = [0u8; 256];
    let len = encode_header(version, src, dst, &mut buf).unwrap();
    buf[..len].to_vec()
}

fn decoded_addresses(bytes: &[u8]) -> Addresses {
    match decode(bytes).unwrap() {
        Decoded::Complete { header, len } => {
            assert_eq!(len, bytes.len());
            *header.addresses()
        }
        other => panic!("not a complete header: {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_dual_stack_load_balancer_answers_each_client_in_its_family(
        client in client(),
        client_port in any::<u16>(),
        lb_v4 in any::<[u8; 4]>().prop_map(Ipv4Addr::from),
        lb_v6 in ipv6(),
        port in 1u16..,
        v6_first in any::<bool>(),
        old_field_v6 in any::<bool>(),
        version in prop_oneof![Just(Version::V1), Just(Version::V2)],
    ) {
        let v4 = SocketAddr::new(IpAddr::V4(lb_v4), port);
        let v6 = SocketAddr::new(IpAddr::V6(lb_v6), port);
        let route = Route {
            name: "web".into(),
            listen: "[::]:10443".parse().unwrap(),
            upstream: "ingress.example:443".parse().unwrap(),
            proxy_protocol: ProxyProtocol::from(version),
            destination: Some(if old_field_v6 { v6 } else { v4 }),
            destinations: if v6_first { vec![v6, v4] } else { vec![v4, v6] },
        };
        let peer = client.peer(client_port);
        let (src, dst) = route
            .header_addresses(peer, || panic!("no getsockname with destinations"))
            .unwrap();
        let source = SocketAddr::new(client.real(), client_port);
        let expected = if source.is_ipv4() { v4 } else { v6 };
        prop_assert_eq!((src, dst), (source, expected));

        let bytes = header(version, (src, dst));
        match (version, &client) {
            (Version::V1, Client::V4(..)) => prop_assert!(bytes.starts_with(b"PROXY TCP4 ")),
            (Version::V1, Client::V6(_)) => prop_assert!(bytes.starts_with(b"PROXY TCP6 ")),
            // v2: byte 13 is the family and protocol, 0x11 TCP over IPv4, 0x21 over IPv6.
            (Version::V2, Client::V4(..)) => prop_assert_eq!(bytes[13], 0x11),
            (Version::V2, Client::V6(_)) => prop_assert_eq!(bytes[13], 0x21),
        }
        let addresses = decoded_addresses(&bytes);
        prop_assert_eq!(addresses.source(), Some(source));
        prop_assert_eq!(addresses.destination(), Some(expected));
    }

    #[test]
    fn an_ipv4_client_never_gets_a_mapped_address(
        client in any::<[u8; 4]>().prop_map(Ipv4Addr::from),
        mapped_destination in any::<bool>(),
        lb in any::<[u8; 4]>().prop_map(Ipv4Addr::from),
    ) {
        // Also when the destination itself was written v4-mapped, or is the local address of a
        // dual-stack listener (no destination configured).
        let lb_ip = if mapped_destination { IpAddr::V6(lb.to_ipv6_mapped()) } else { IpAddr::V4(lb) };
        for destination in [Some(SocketAddr::new(lb_ip, 80)), None] {
            let route = Route {
                name: "web".into(),
                listen: "[::]:10080".parse().unwrap(),
                upstream: "ingress.example:80".parse().unwrap(),
                proxy_protocol: ProxyProtocol::V1,
                destination,
                destinations: Vec::new(),
            };
            let peer = SocketAddr::new(IpAddr::V6(client.to_ipv6_mapped()), 5000);
            let (src, dst) = route
                .header_addresses(peer, || Ok(SocketAddr::new(lb_ip, 80)))
                .unwrap();
            prop_assert_eq!(src, SocketAddr::new(IpAddr::V4(client), 5000));
            prop_assert_eq!(dst, SocketAddr::new(IpAddr::V4(lb), 80));
            let bytes = header(Version::V1, (src, dst));
            let expected = format!("PROXY TCP4 {client} {lb} 5000 80\r\n");
            prop_assert_eq!(String::from_utf8(bytes).unwrap(), expected);
        }
    }
}
