//! Where the cluster DNS sends the names it does not serve: the `forward` plugins of the
//! Corefile, per zone, read into [`crate::forward`]'s values. The controller's resolver asks
//! these servers itself ([`crate::verify`]), so that it sees what CoreDNS would answer without
//! hairpin's rules.

use std::net::{IpAddr, SocketAddr};

use super::placement::labels;
use super::{CorefileError, parse};
use crate::forward::{Upstream, ZoneUpstreams, in_zone};

/// Every zone with a `forward`, most specific first: a name is sent to the first whose zone
/// holds it.
pub fn upstreams(corefile: &str) -> Result<Vec<ZoneUpstreams>, CorefileError> {
    Ok(upstreams_in(&parse::parse(corefile)?, corefile))
}

/// [`upstreams`] of a Corefile already parsed (`cf` is `corefile` parsed).
pub(super) fn upstreams_in(cf: &parse::Corefile, corefile: &str) -> Vec<ZoneUpstreams> {
    let mut out = Vec::new();
    for block in &cf.blocks {
        let zones: Vec<String> = block
            .keys
            .iter()
            .filter_map(|k| key_zone(k.value(corefile)))
            .collect();
        for d in block
            .directives
            .iter()
            .filter(|d| d.name.value(corefile) == "forward")
        {
            let mut args = d.args.iter().map(|a| a.value(corefile));
            let Some(from) = args.next() else { continue };
            let from = normal_zone(from);
            let targets: Vec<Upstream> = args.map(upstream).collect();
            if targets.is_empty() {
                continue;
            }
            // `forward . X` in a block for `example.com` forwards `example.com`; a `from`
            // narrower than the block's zone narrows it.
            for zone in &zones {
                let zone = if in_zone(&from, zone) {
                    from.clone()
                } else if in_zone(zone, &from) {
                    zone.clone()
                } else {
                    continue;
                };
                out.push(ZoneUpstreams {
                    zone,
                    upstreams: targets.clone(),
                });
            }
        }
    }
    // Most specific first; for one zone, the first block wins (CoreDNS refuses duplicates on
    // one port; other ports are not where pods ask, and come later in the file as a rule).
    out.sort_by_key(|z| std::cmp::Reverse(labels(&z.zone)));
    out
}

fn normal_zone(zone: &str) -> String {
    let z = zone.trim_end_matches('.').to_ascii_lowercase();
    if z.is_empty() { ".".into() } else { z }
}

/// The zone of a server block key (`.:53`, `dns://example.com`, `example.com:5353`); `None` for
/// other transports.
fn key_zone(key: &str) -> Option<String> {
    let rest = match key.split_once("://") {
        Some(("dns", rest)) => rest,
        Some(_) => return None,
        None => key,
    };
    let zone = match rest.rsplit_once(':') {
        Some((zone, port)) if port.bytes().all(|b| b.is_ascii_digit()) => zone,
        _ => rest,
    };
    Some(normal_zone(zone))
}

/// One `forward` target as CoreDNS reads it: a path is a resolv.conf, `dns://` or a bare
/// address is plain DNS (port 53 unless given).
fn upstream(target: &str) -> Upstream {
    if target.starts_with('/') {
        return Upstream::ResolvConf(target.to_owned());
    }
    let rest = match target.split_once("://") {
        Some(("dns", rest)) => rest,
        Some(_) => return Upstream::Unsupported(target.to_owned()),
        None => target,
    };
    if let Ok(ip) = rest.parse::<IpAddr>() {
        return Upstream::Server(SocketAddr::new(ip, 53));
    }
    match rest.parse::<SocketAddr>() {
        Ok(addr) => Upstream::Server(addr),
        Err(_) => Upstream::Unsupported(target.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::upstreams_for;

    #[test]
    fn forward_targets_per_zone_most_specific_first() {
        let corefile = ".:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf 8.8.8.8 dns://[2001:db8::1]:5353 tls://1.1.1.1 {\n       max_concurrent 1000\n    }\n}\ncorp.example:53 {\n    forward . 10.0.0.10:5353\n}\n";
        let zones = upstreams(corefile).unwrap();
        assert_eq!(zones.len(), 2);
        assert_eq!(zones[0].zone, "corp.example");
        assert_eq!(
            zones[0].upstreams,
            [Upstream::Server("10.0.0.10:5353".parse().unwrap())]
        );
        assert_eq!(zones[1].zone, ".");
        assert_eq!(
            zones[1].upstreams,
            [
                Upstream::ResolvConf("/etc/resolv.conf".into()),
                Upstream::Server("8.8.8.8:53".parse().unwrap()),
                Upstream::Server("[2001:db8::1]:5353".parse().unwrap()),
                Upstream::Unsupported("tls://1.1.1.1".into()),
            ]
        );
        assert_eq!(
            upstreams_for(&zones, "a.corp.example").unwrap(),
            zones[0].upstreams.as_slice()
        );
        assert_eq!(
            upstreams_for(&zones, "*.corp.example").unwrap(),
            zones[0].upstreams.as_slice()
        );
        assert_eq!(
            upstreams_for(&zones, "github.com").unwrap(),
            zones[1].upstreams.as_slice()
        );
        assert_eq!(
            upstreams_for(&zones, "xcorp.example").unwrap(),
            zones[1].upstreams.as_slice()
        );
    }

    #[test]
    fn a_from_narrower_than_its_block_narrows_the_zone() {
        let zones = upstreams(".:53 {\n    forward example.com 192.0.2.1\n}\n").unwrap();
        assert_eq!(zones[0].zone, "example.com");
        assert!(upstreams_for(&zones, "github.com").is_none());
    }
}
