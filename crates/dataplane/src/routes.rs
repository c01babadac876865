//! The route table: which address to listen on, where to forward, which PROXY header to write.
//!
//! Pure data with serde, no I/O and no tokio, so the controller can build, diff and publish a
//! table (as JSON in a ConfigMap) with the same type the proxy runs.
//!
//! The JSON form is a list of routes:
//!
//! ```json
//! [
//!   { "name": "https", "listen": "0.0.0.0:10443",
//!     "upstream": "ingress-nginx-controller.ingress-nginx.svc.cluster.local:443",
//!     "proxy_protocol": "v2", "destination": "203.0.113.10:443" }
//! ]
//! ```
//!
//! `proxy_protocol` is `v1` (the default), `v2`, or `none` (forward the bytes as they are: a
//! port of the load balancer that does not use the PROXY protocol). `destination` defaults to
//! the proxy's own local address of each accepted connection.
//!
//! A dual-stack load balancer has an address of each family, and the real one writes the
//! address its client connected to, so in the client's family: `destinations` lists them, at
//! most one per family, e.g. `"destinations": ["203.0.113.10:443", "[2001:db8::10]:443"]`, and
//! each connection's header gets the one of its client's family ([`Route::destination_for`]).
//! `destination` alone (the older form, still read) is written whatever the client's family.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use hairpin_proxy_protocol::Version;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// One listener and where its connections go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// A unique name, used in logs and as the `route` metric label.
    pub name: String,
    /// The address to accept connections on.
    pub listen: SocketAddr,
    /// Where to forward, `host:port`; a host name is resolved again for every connection.
    pub upstream: Upstream,
    /// The PROXY protocol header to write, if any.
    #[serde(
        default,
        serialize_with = "serialize_header",
        deserialize_with = "deserialize_header"
    )]
    pub proxy_protocol: ProxyProtocol,
    /// The destination written in the header (the load balancer's external address, as the
    /// real load balancer would write it). `None`: the local address of the accepted socket.
    /// With [`Route::destinations`], one of them (what proxies that read only this field write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<SocketAddr>,
    /// The load balancer's addresses, at most one per family: a client gets the one of its own
    /// family ([`Route::destination_for`]). Empty: [`Route::destination`] for every client.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destinations: Vec<SocketAddr>,
}

impl Route {
    /// The header's destination for a client at `client`, as the real load balancer writes it:
    /// the load balancer's address of the client's family (an IPv4 client on a dual-stack
    /// listener, `::ffff:a.b.c.d`, is an IPv4 client), else the one address configured (the
    /// codec then writes both addresses as IPv6). `None`: nothing configured, the caller uses
    /// the connection's local address. The address returned is never v4-mapped.
    pub fn destination_for(&self, client: IpAddr) -> Option<SocketAddr> {
        let ipv4 = client.to_canonical().is_ipv4();
        let configured = || {
            self.destinations
                .iter()
                .chain(&self.destination)
                .map(canonical)
        };
        configured()
            .find(|d| d.is_ipv4() == ipv4)
            .or_else(|| configured().next())
    }

    /// The header's source and destination for a client at `client`, in one family, as the
    /// real load balancer writes them: [`Route::destination_for`], else the listener's own
    /// address when it listens on one, else `local()`, the accepted socket's local address
    /// (asked only then: it costs a `getsockname`). A v4-mapped address on either side (an
    /// IPv4 client or local address on a dual-stack listener) is written as the IPv4 address it
    /// is, so an IPv4 client gets a `TCP4` / `AF_INET` header; a pair still mixed after that
    /// (an IPv6 client of a load balancer without IPv6) is mapped to IPv6 by the codec.
    ///
    /// # Errors
    /// `local()`'s.
    pub fn header_addresses(
        &self,
        client: SocketAddr,
        local: impl FnOnce() -> std::io::Result<SocketAddr>,
    ) -> std::io::Result<(SocketAddr, SocketAddr)> {
        let destination = match self.destination_for(client.ip()) {
            Some(destination) => destination,
            None if !self.listen.ip().is_unspecified() => self.listen,
            None => local()?,
        };
        Ok((canonical(&client), canonical(&destination)))
    }

    /// The destinations for logs: `203.0.113.10:443, [2001:db8::10]:443`, or `local address`.
    pub fn describe_destinations(&self) -> String {
        let listed: Vec<String> = if self.destinations.is_empty() {
            self.destination.iter().map(ToString::to_string).collect()
        } else {
            self.destinations.iter().map(ToString::to_string).collect()
        };
        if listed.is_empty() {
            "local address".to_owned()
        } else {
            listed.join(", ")
        }
    }
}

/// `addr` with a v4-mapped IPv6 address written as the IPv4 address it is.
pub fn canonical(addr: &SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// What a route writes to the upstream before the client's bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProxyProtocol {
    /// A PROXY protocol v1 (text) header.
    #[default]
    V1,
    /// A PROXY protocol v2 (binary) header.
    V2,
    /// No header: the bytes are forwarded as they are, for a load balancer port that does not
    /// use the PROXY protocol (its hostnames point at the proxy, so all its ports must work).
    None,
}

impl ProxyProtocol {
    /// The header version to write, or `None` for no header.
    pub fn version(self) -> Option<Version> {
        match self {
            Self::V1 => Some(Version::V1),
            Self::V2 => Some(Version::V2),
            Self::None => None,
        }
    }

    /// `v1`, `v2` or `none`.
    pub fn as_str(self) -> &'static str {
        self.version().map_or("none", Version::as_str)
    }
}

impl From<Version> for ProxyProtocol {
    fn from(version: Version) -> Self {
        match version {
            Version::V1 => Self::V1,
            Version::V2 => Self::V2,
        }
    }
}

impl fmt::Display for ProxyProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProxyProtocol {
    type Err = String;

    /// `none` (any case), or a version as [`Version`] spells it (`v1`, `V1`, `1`, ...).
    fn from_str(text: &str) -> Result<Self, String> {
        if text.eq_ignore_ascii_case("none") {
            return Ok(Self::None);
        }
        text.parse::<Version>().map(Self::from).map_err(|_| {
            format!("unknown PROXY protocol setting {text:?}: expected \"v1\", \"v2\" or \"none\"")
        })
    }
}

fn serialize_header<S: Serializer>(
    header: &ProxyProtocol,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(header)
}

fn deserialize_header<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ProxyProtocol, D::Error> {
    let text = String::deserialize(deserializer)?;
    text.parse().map_err(serde::de::Error::custom)
}

/// An upstream `host:port`: an IP literal (`10.0.0.7:80`, `[fd00::7]:80`) or a DNS name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Upstream {
    host: String,
    port: u16,
}

impl Upstream {
    /// The host part (a name or an IP address, without brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The socket address when the host is an IP literal (no resolution needed).
    pub fn as_socket_addr(&self) -> Option<SocketAddr> {
        self.host
            .parse::<IpAddr>()
            .ok()
            .map(|ip| SocketAddr::new(ip, self.port))
    }
}

impl FromStr for Upstream {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Error> {
        let invalid = |why: &str| Error::InvalidUpstream {
            upstream: text.to_owned(),
            reason: why.to_owned(),
        };
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self {
                host: addr.ip().to_string(),
                port: addr.port(),
            });
        }
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| invalid("expected HOST:PORT"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| invalid("the port must be a number from 1 to 65535"))?;
        if port == 0 {
            return Err(invalid("the port must be a number from 1 to 65535"));
        }
        let valid_name = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !valid_name {
            return Err(invalid(
                "the host must be a DNS name or an IP address (IPv6 in brackets)",
            ));
        }
        Ok(Self {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_socket_addr() {
            Some(addr) => addr.fmt(f),
            None => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

impl Serialize for Upstream {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Upstream {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A validated set of routes: names are unique and no two routes listen on overlapping
/// addresses (the same port on the same IP, or on a wildcard IP).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Route>", into = "Vec<Route>")]
pub struct RouteTable {
    routes: Vec<Route>,
}

impl RouteTable {
    /// Validates and builds a table.
    ///
    /// # Errors
    /// [`Error::InvalidRoutes`] naming the offending routes.
    pub fn new(routes: Vec<Route>) -> Result<Self, Error> {
        for (i, route) in routes.iter().enumerate() {
            if route.name.trim().is_empty() {
                return Err(Error::InvalidRoutes(format!(
                    "route #{} has an empty name",
                    i + 1
                )));
            }
            let mut families = route.destinations.iter().map(|d| canonical(d).is_ipv4());
            if let (Some(first), Some(second)) = (families.next(), families.next())
                && (first == second || families.next().is_some())
            {
                return Err(Error::InvalidRoutes(format!(
                    "route {:?}: destinations hold at most one address per family, got {}",
                    route.name,
                    route.describe_destinations()
                )));
            }
            if let Some(destination) = route.destination
                && !route.destinations.is_empty()
                && !route.destinations.contains(&destination)
            {
                return Err(Error::InvalidRoutes(format!(
                    "route {:?}: destination {destination} is not one of its destinations ({})",
                    route.name,
                    route.describe_destinations()
                )));
            }
            if route.listen.port() == 0 {
                return Err(Error::InvalidRoutes(format!(
                    "route {:?}: listen port 0 is not allowed",
                    route.name
                )));
            }
            for other in &routes[..i] {
                if other.name == route.name {
                    return Err(Error::InvalidRoutes(format!(
                        "two routes are named {:?}",
                        route.name
                    )));
                }
                if overlaps(other.listen, route.listen) {
                    return Err(Error::InvalidRoutes(format!(
                        "routes {:?} ({}) and {:?} ({}) listen on overlapping addresses",
                        other.name, other.listen, route.name, route.listen
                    )));
                }
            }
        }
        Ok(Self { routes })
    }

    /// Parses the JSON form (a list of routes) and validates it.
    ///
    /// # Errors
    /// [`Error::ParseRoutes`] for malformed JSON or fields, [`Error::InvalidRoutes`] for a
    /// table that does not validate.
    pub fn from_json(json: &[u8]) -> Result<Self, Error> {
        let routes: Vec<Route> =
            serde_json::from_slice(json).map_err(|err| Error::ParseRoutes(err.to_string()))?;
        Self::new(routes)
    }

    /// The JSON form, pretty-printed (what [`RouteTable::from_json`] reads).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.routes).expect("routes always serialize")
    }

    /// The routes, in the order given.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The route with this name.
    pub fn get(&self, name: &str) -> Option<&Route> {
        self.routes.iter().find(|route| route.name == name)
    }

    /// True when there is no route.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }

    /// The number of routes.
    pub fn len(&self) -> usize {
        self.routes.len()
    }
}

impl TryFrom<Vec<Route>> for RouteTable {
    type Error = Error;

    fn try_from(routes: Vec<Route>) -> Result<Self, Error> {
        Self::new(routes)
    }
}

impl From<RouteTable> for Vec<Route> {
    fn from(table: RouteTable) -> Self {
        table.routes
    }
}

fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    if a.port() != b.port() {
        return false;
    }
    let (a, b) = (a.ip().to_canonical(), b.ip().to_canonical());
    if a == b {
        return true;
    }
    // `[::]` also takes IPv4 on Linux (dual-stack) unless IPV6_V6ONLY is set; we do not set
    // it, so it overlaps with every address of the port.
    let wildcard_covers =
        |wild: IpAddr, other: IpAddr| wild.is_unspecified() && (wild.is_ipv6() || other.is_ipv4());
    wildcard_covers(a, b) || wildcard_covers(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, listen: &str) -> Route {
        Route {
            name: name.into(),
            listen: listen.parse().unwrap(),
            upstream: "ingress.example:80".parse().unwrap(),
            proxy_protocol: ProxyProtocol::V1,
            destination: None,
            destinations: Vec::new(),
        }
    }

    #[test]
    fn parses_the_documented_example() {
        let json = br#"[
          { "name": "http", "listen": "0.0.0.0:10080",
            "upstream": "ingress-nginx-controller.ingress-nginx.svc.cluster.local:80",
            "proxy_protocol": "v1", "destination": "203.0.113.10:80" },
          { "name": "https", "listen": "[::]:10443", "upstream": "[fd00::7]:443", "proxy_protocol": "v2" },
          { "name": "plain", "listen": "127.0.0.1:10081", "upstream": "10.0.0.7:80" }
        ]"#;
        let table = RouteTable::from_json(json).unwrap();
        assert_eq!(table.len(), 3);
        let http = table.get("http").unwrap();
        assert_eq!(
            http.upstream.host(),
            "ingress-nginx-controller.ingress-nginx.svc.cluster.local"
        );
        assert_eq!(http.upstream.port(), 80);
        assert_eq!(http.upstream.as_socket_addr(), None);
        assert_eq!(http.destination, Some("203.0.113.10:80".parse().unwrap()));
        let https = table.get("https").unwrap();
        assert_eq!(https.proxy_protocol, ProxyProtocol::V2);
        assert_eq!(
            https.upstream.as_socket_addr(),
            Some("[fd00::7]:443".parse().unwrap())
        );
        assert_eq!(https.upstream.to_string(), "[fd00::7]:443");
        assert_eq!(
            table.get("plain").unwrap().proxy_protocol,
            ProxyProtocol::V1
        );
        assert_eq!(
            RouteTable::from_json(table.to_json().as_bytes()).unwrap(),
            table
        );
    }

    #[test]
    fn a_route_may_write_no_header() {
        let json = br#"[{"name":"smtp","listen":"0.0.0.0:10025","upstream":"10.0.0.7:25","proxy_protocol":"none"}]"#;
        let table = RouteTable::from_json(json).unwrap();
        let smtp = table.get("smtp").unwrap();
        assert_eq!(smtp.proxy_protocol, ProxyProtocol::None);
        assert_eq!(smtp.proxy_protocol.version(), None);
        let json = table.to_json();
        assert!(json.contains(r#""none""#), "{json}");
        assert_eq!(RouteTable::from_json(json.as_bytes()).unwrap(), table);
        assert_eq!("V2".parse::<ProxyProtocol>(), Ok(ProxyProtocol::V2));
        let err = "v3".parse::<ProxyProtocol>().unwrap_err();
        assert!(err.contains("\"none\""), "{err}");
    }

    #[test]
    fn rejects_bad_tables_with_a_reason() {
        let cases: &[(&[u8], &str)] = &[
            (
                br#"[{"name":"a","listen":"nonsense","upstream":"x:1"}]"#,
                "invalid socket address",
            ),
            (
                br#"[{"name":"a","listen":"127.0.0.1:1","upstream":"x:1","proxy_protocol":"v3"}]"#,
                "v3",
            ),
            (
                br#"[{"name":"a","listen":"127.0.0.1:1","upstream":"x"}]"#,
                "HOST:PORT",
            ),
            (
                br#"[{"name":"a","listen":"127.0.0.1:1","upstream":"x:99999"}]"#,
                "port",
            ),
            (
                br#"[{"name":"a","listen":"127.0.0.1:1","upstream":"bad host:80"}]"#,
                "DNS name",
            ),
            (
                br#"[{"name":"a","listen":"127.0.0.1:1","upstream":"x:1","extra":1}]"#,
                "unknown field",
            ),
            (br#"{"name":"a"}"#, "expected a sequence"),
        ];
        for (json, expected) in cases {
            let err = RouteTable::from_json(json).unwrap_err().to_string();
            assert!(
                err.contains(expected),
                "{err:?} should mention {expected:?}"
            );
        }
    }

    #[test]
    fn names_are_unique_and_listeners_do_not_overlap() {
        let dup = RouteTable::new(vec![route("a", "127.0.0.1:80"), route("a", "127.0.0.1:81")]);
        assert!(
            dup.unwrap_err()
                .to_string()
                .contains("two routes are named \"a\"")
        );
        for (x, y) in [
            ("127.0.0.1:80", "127.0.0.1:80"),
            ("0.0.0.0:80", "127.0.0.1:80"),
            ("[::]:80", "127.0.0.2:80"),
            ("[::1]:80", "[::]:80"),
        ] {
            let err = RouteTable::new(vec![route("a", x), route("b", y)]).unwrap_err();
            assert!(err.to_string().contains("overlapping"), "{x} {y}: {err}");
        }
        for (x, y) in [
            ("127.0.0.1:80", "127.0.0.1:81"),
            ("127.0.0.1:80", "127.0.0.2:80"),
            ("0.0.0.0:80", "[::1]:80"),
        ] {
            RouteTable::new(vec![route("a", x), route("b", y)]).unwrap();
        }
        assert!(RouteTable::new(vec![route(" ", "127.0.0.1:80")]).is_err());
        assert!(RouteTable::new(vec![route("a", "127.0.0.1:0")]).is_err());
    }

    fn dual(destination: &str) -> Route {
        Route {
            destination: Some(destination.parse().unwrap()),
            destinations: vec![
                "203.0.113.10:443".parse().unwrap(),
                "[2001:db8::10]:443".parse().unwrap(),
            ],
            ..route("web", "[::]:10443")
        }
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn no_local() -> std::io::Result<SocketAddr> {
        panic!("no getsockname when a destination is configured")
    }

    #[test]
    fn the_header_is_in_the_clients_family() {
        // Whichever address the older `destination` field names.
        for route in [dual("203.0.113.10:443"), dual("[2001:db8::10]:443")] {
            for (client, expected) in [
                ("10.0.0.7:5000", ("10.0.0.7:5000", "203.0.113.10:443")),
                // An IPv4 client on the dual-stack listener: unmapped, both sides.
                (
                    "[::ffff:10.0.0.7]:5000",
                    ("10.0.0.7:5000", "203.0.113.10:443"),
                ),
                ("[fd00::7]:5000", ("[fd00::7]:5000", "[2001:db8::10]:443")),
            ] {
                assert_eq!(
                    route.header_addresses(addr(client), no_local).unwrap(),
                    (addr(expected.0), addr(expected.1)),
                    "{client} via {route:?}"
                );
            }
        }
    }

    #[test]
    fn one_destination_is_written_for_every_client() {
        let v4_only = Route {
            destination: Some(addr("203.0.113.10:80")),
            ..route("web", "[::]:10080")
        };
        assert_eq!(
            v4_only
                .header_addresses(addr("[::ffff:10.0.0.7]:5000"), no_local)
                .unwrap(),
            (addr("10.0.0.7:5000"), addr("203.0.113.10:80"))
        );
        // No IPv6 address to give an IPv6 client: the codec maps the pair to IPv6.
        assert_eq!(
            v4_only
                .header_addresses(addr("[fd00::7]:5000"), no_local)
                .unwrap(),
            (addr("[fd00::7]:5000"), addr("203.0.113.10:80"))
        );
        let mapped = Route {
            destinations: vec![addr("[::ffff:203.0.113.10]:80")],
            ..route("web", "[::]:10080")
        };
        assert_eq!(
            mapped.destination_for("10.0.0.7".parse().unwrap()),
            Some(addr("203.0.113.10:80")),
            "a configured v4-mapped destination is written as IPv4"
        );
    }

    #[test]
    fn without_destination_the_local_address_is_written_unmapped() {
        let wildcard = route("web", "[::]:10080");
        let local = || Ok(addr("[::ffff:10.96.0.50]:10080"));
        assert_eq!(
            wildcard
                .header_addresses(addr("[::ffff:10.0.0.7]:5000"), local)
                .unwrap(),
            (addr("10.0.0.7:5000"), addr("10.96.0.50:10080"))
        );
        let specific = route("web", "10.96.0.50:10080");
        assert_eq!(
            specific
                .header_addresses(addr("10.0.0.7:5000"), no_local)
                .unwrap(),
            (addr("10.0.0.7:5000"), addr("10.96.0.50:10080"))
        );
        let failing = || Err(std::io::Error::other("socket gone"));
        assert!(
            wildcard
                .header_addresses(addr("10.0.0.7:5000"), failing)
                .is_err()
        );
    }

    #[test]
    fn destinations_hold_one_address_per_family() {
        let json = br#"[{"name":"web","listen":"[::]:10443","upstream":"ingress.example:80",
            "destination":"203.0.113.10:443",
            "destinations":["203.0.113.10:443","[2001:db8::10]:443"]}]"#;
        let table = RouteTable::from_json(json).unwrap();
        assert_eq!(table.routes()[0], dual("203.0.113.10:443"));
        assert_eq!(
            RouteTable::from_json(table.to_json().as_bytes()).unwrap(),
            table
        );
        assert_eq!(
            table.routes()[0].describe_destinations(),
            "203.0.113.10:443, [2001:db8::10]:443"
        );
        let two_v4 = Route {
            destinations: vec![addr("203.0.113.10:443"), addr("[::ffff:203.0.113.11]:443")],
            ..route("web", "[::]:10443")
        };
        let err = RouteTable::new(vec![two_v4]).unwrap_err().to_string();
        assert!(err.contains("one address per family"), "{err}");
        let elsewhere = Route {
            destination: Some(addr("198.51.100.1:443")),
            ..dual("203.0.113.10:443")
        };
        let err = RouteTable::new(vec![elsewhere]).unwrap_err().to_string();
        assert!(err.contains("not one of its destinations"), "{err}");
        // The older form, one `destination`, reads as before.
        let old = RouteTable::from_json(
            br#"[{"name":"web","listen":"0.0.0.0:10443","upstream":"ingress.example:443","destination":"203.0.113.10:443"}]"#,
        )
        .unwrap();
        assert_eq!(old.routes()[0].destinations, Vec::<SocketAddr>::new());
        assert_eq!(old.routes()[0].describe_destinations(), "203.0.113.10:443");
        assert!(!old.to_json().contains("destinations"), "{}", old.to_json());
    }

    #[test]
    fn upstream_forms() {
        let up: Upstream = "Ingress.Example.COM:8443".parse().unwrap();
        assert_eq!(up.to_string(), "ingress.example.com:8443");
        let up: Upstream = "127.0.0.1:80".parse().unwrap();
        assert_eq!(up.as_socket_addr(), Some("127.0.0.1:80".parse().unwrap()));
        for bad in ["", ":80", "host:", "host:0", "::1:80", "a..b:80", "host:-1"] {
            assert!(bad.parse::<Upstream>().is_err(), "{bad:?} must be rejected");
        }
    }
}
