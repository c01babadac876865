//! Where the cluster DNS sends the names it does not serve: the `forward` targets of each zone
//! of the Corefile (read by [`crate::corefile`], held in [`crate::CorednsFacts::forward_zones`]),
//! and the zone a name falls in. Plain values: the controller's ownership resolver asks these
//! servers without reading a Corefile itself.

use std::net::SocketAddr;

use serde::Serialize;

/// One `forward` target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Upstream {
    /// A DNS server (`8.8.8.8`, `dns://10.0.0.10:5353`, `[2001:db8::1]:53`).
    Server(SocketAddr),
    /// A resolv.conf file (`/etc/resolv.conf`): the servers of the CoreDNS pod's file, which
    /// with CoreDNS's usual `dnsPolicy: Default` are the node's resolvers.
    ResolvConf(String),
    /// A target the resolver cannot ask as CoreDNS does (`tls://`, `https://`, a
    /// placeholder), as written.
    Unsupported(String),
}

/// The `forward` targets of one zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoneUpstreams {
    /// `.` or a domain, lowercase, without trailing dot: the `forward` plugin's `from`, within
    /// its server block's zone.
    pub zone: String,
    /// The targets, in Corefile order (CoreDNS picks among them at random by default).
    pub upstreams: Vec<Upstream>,
}

/// The targets of the most specific zone holding `name`.
pub fn upstreams_for<'a>(zones: &'a [ZoneUpstreams], name: &str) -> Option<&'a [Upstream]> {
    let name = name.strip_prefix("*.").unwrap_or(name);
    zones
        .iter()
        .find(|z| in_zone(name, &z.zone))
        .map(|z| z.upstreams.as_slice())
}

/// `name` lies in `zone` (or is it); `.` holds every name.
pub(crate) fn in_zone(name: &str, zone: &str) -> bool {
    zone == "." || name == zone || name.strip_suffix(zone).is_some_and(|h| h.ends_with('.'))
}
