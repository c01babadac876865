//! The receivers whose PROXY setting is per listener, read per port of the load balancer's
//! Service (issue 38): Service port -> `targetPort` (a number, or a container port's name) ->
//! container port -> the listener bound to it. Traefik's entry points
//! (`--entryPoints.<ep>.address=:PORT` and `--entryPoints.<ep>.proxyProtocol.*`) and Kong's
//! `KONG_PROXY_LISTEN` listeners (Envoy Gateway's listeners are read in `gateways.rs`). A port
//! whose listener is not found is unknown, never off.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{
    Found, PortReceiver, Read, Requirement, container_port, containers, port_read, read,
    tcp_service_ports, unknown,
};
use crate::workloads::Workload;

/// One Traefik entry point: the port of its address, and its `proxyProtocol` setting as read
/// (`(setting, where)`).
#[derive(Debug, Default)]
pub(super) struct EntryPoint {
    port: Option<i32>,
    pub(super) proxy: Option<(String, String)>,
}

/// The port of a Traefik entry point address (`:8000/tcp`, `0.0.0.0:8000`, `[::]:8000`).
fn address_port(address: &str) -> Option<i32> {
    let address = address.split('/').next().unwrap_or(address);
    address.rsplit(':').next()?.trim().parse().ok()
}

/// The entry points the workload's arguments and environment define (Traefik's flags and
/// variables are case-insensitive: the names are lowercased).
fn flag_entry_points(w: &Workload) -> BTreeMap<String, EntryPoint> {
    let mut out: BTreeMap<String, EntryPoint> = BTreeMap::new();
    let mut set = |ep: &str, field: &str, value: &str, setting: String| {
        let entry = out.entry(ep.to_ascii_lowercase()).or_default();
        if field.eq_ignore_ascii_case("address") {
            entry.port = address_port(value);
        } else if field.to_ascii_lowercase().starts_with("proxyprotocol") && entry.proxy.is_none() {
            entry.proxy = Some((setting, w.describe()));
        }
    };
    for c in containers(w) {
        for arg in c.command.iter().flatten().chain(c.args.iter().flatten()) {
            let bare = arg.trim_start_matches('-');
            let (key, value) = bare.split_once('=').unwrap_or((bare, ""));
            let Some(rest) = key
                .get(..12)
                .filter(|p| p.eq_ignore_ascii_case("entrypoints."))
                .map(|_| &key[12..])
            else {
                continue;
            };
            if let Some((ep, field)) = rest.split_once('.') {
                set(ep, field, value, arg.clone());
            }
        }
        for e in c.env.iter().flatten() {
            let Some(rest) = e.name.strip_prefix("TRAEFIK_ENTRYPOINTS_") else {
                continue;
            };
            let value = e.value.clone().unwrap_or_default();
            let setting = format!("{}={value}", e.name);
            if let Some(ep) = rest.strip_suffix("_ADDRESS") {
                set(ep, "address", &value, setting);
            } else if let Some((ep, _)) = rest.split_once("_PROXYPROTOCOL") {
                set(ep, "proxyprotocol", &value, setting);
            }
        }
    }
    out
}

/// A key of a YAML map, case-insensitively (Traefik's file configuration is).
fn get_ci<'v>(v: &'v Value, key: &str) -> Option<&'v Value> {
    v.as_object()?
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| v)
}

impl Found<'_> {
    /// Traefik's entry points: its flags and environment, then the static configuration files
    /// of its ConfigMap volumes (YAML). `Err`: a file that may set `proxyProtocol` could not
    /// be read (a ConfigMap the snapshot lacks, a file that is not YAML).
    pub(super) fn traefik_entry_points(
        &self,
        w: &Workload,
    ) -> Result<BTreeMap<String, EntryPoint>, Read> {
        let mut eps = flag_entry_points(w);
        let volumes = w
            .spec()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten();
        for cm in volumes.filter_map(|v| v.config_map.as_ref()) {
            let where_ = format!("ConfigMap {}/{}", self.namespace(), cm.name);
            let Some(found) = self.snapshot.config_map(self.namespace(), &cm.name) else {
                return Err(unknown(format!(
                    "{where_} (a volume of {}: it may hold Traefik's static configuration) is not in the snapshot",
                    w.describe()
                )));
            };
            for (key, text) in found.data.iter().flatten() {
                if !text.to_ascii_lowercase().contains("proxyprotocol") {
                    continue;
                }
                let parsed: Option<Value> = serde_saphyr::from_str(text).ok();
                let Some(defined) = parsed
                    .as_ref()
                    .and_then(|v| get_ci(v, "entryPoints"))
                    .and_then(Value::as_object)
                else {
                    return Err(unknown(format!(
                        "proxyProtocol in {key} of {where_}: not a YAML static configuration hairpin reads"
                    )));
                };
                for (name, ep) in defined {
                    let entry = eps.entry(name.to_ascii_lowercase()).or_default();
                    if let Some(port) = get_ci(ep, "address")
                        .and_then(Value::as_str)
                        .and_then(address_port)
                    {
                        entry.port = Some(port);
                    }
                    if get_ci(ep, "proxyProtocol").is_some_and(|v| !v.is_null()) {
                        entry.proxy = Some((format!("proxyProtocol in {key}"), where_.clone()));
                    }
                }
            }
        }
        Ok(eps)
    }

    /// Traefik per Service port: the entry point whose address is the container port the
    /// Service port sends to; `proxyProtocol` there is optional (go-proxyproto's USE/IGNORE
    /// policies serve a connection without a header), none is off. `None` where no entry
    /// point has `proxyProtocol` (off on every port) or the entry points could not be read.
    pub(super) fn traefik_ports(&self) -> Option<Vec<PortReceiver>> {
        let w = self.workload?;
        let eps = self.traefik_entry_points(w).ok()?;
        if eps.values().all(|e| e.proxy.is_none()) {
            return None;
        }
        let ports = tcp_service_ports(self.svc).map(|sp| {
            let port = container_port(w, sp);
            let ep = port.and_then(|p| eps.iter().find(|(_, e)| e.port == Some(p)));
            let reading = match (port, ep) {
                (None, _) => unknown(format!(
                    "targetPort {} is no container port of {}",
                    target(sp),
                    w.describe()
                )),
                (Some(p), None) => unknown(format!("no entry point listens on container port {p}")),
                (Some(p), Some((name, e))) => match &e.proxy {
                    Some((setting, from)) => read(
                        Requirement::Optional,
                        format!("entry point {name} (:{p}): {setting}"),
                        from.clone(),
                    ),
                    None => read(
                        Requirement::Off,
                        format!("entry point {name} (:{p}) has no proxyProtocol"),
                        w.describe(),
                    ),
                },
            };
            port_read(sp, reading)
        });
        Some(ports.collect())
    }

    /// Kong per Service port: the `KONG_PROXY_LISTEN` listeners on the container port the
    /// Service port sends to; `proxy_protocol` on them is required, on none off. `None` where
    /// every listener agrees (the whole reading holds).
    pub(super) fn kong_ports(&self) -> Option<Vec<PortReceiver>> {
        let w = self.workload?;
        let listen = super::env(w, "KONG_PROXY_LISTEN")?;
        let listeners = kong_listeners(&listen);
        let with = listeners.iter().filter(|l| l.2).count();
        if with == 0 || with == listeners.len() {
            return None;
        }
        let ports = tcp_service_ports(self.svc).map(|sp| {
            let port = container_port(w, sp);
            let on: Vec<&(Option<i32>, &str, bool)> = listeners
                .iter()
                .filter(|l| port.is_some() && l.0 == port)
                .collect();
            let entries = on.iter().map(|l| l.1).collect::<Vec<_>>().join(", ");
            let reading = match port {
                None => unknown(format!(
                    "targetPort {} is no container port of {}",
                    target(sp),
                    w.describe()
                )),
                Some(p) if on.is_empty() => unknown(format!(
                    "no KONG_PROXY_LISTEN listener on container port {p}"
                )),
                Some(_) if on.iter().all(|l| l.2) => read(
                    Requirement::Required { only_v2: false },
                    format!("KONG_PROXY_LISTEN {entries}"),
                    w.describe(),
                ),
                Some(_) if on.iter().all(|l| !l.2) => read(
                    Requirement::Off,
                    format!("KONG_PROXY_LISTEN {entries}: no proxy_protocol"),
                    w.describe(),
                ),
                Some(p) => unknown(format!(
                    "KONG_PROXY_LISTEN {entries}: proxy_protocol on some listeners of port {p} only"
                )),
            };
            port_read(sp, reading)
        });
        Some(ports.collect())
    }
}

/// `KONG_PROXY_LISTEN`'s listeners (kong/conf_loader/listeners.lua): `(port, entry,
/// proxy_protocol)`, `off` left out.
pub(super) fn kong_listeners(listen: &str) -> Vec<(Option<i32>, &str, bool)> {
    listen
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "off")
        .map(|l| {
            let mut words = l.split_whitespace();
            let address = words.next().unwrap_or_default();
            let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
            (port, l, words.any(|f| f == "proxy_protocol"))
        })
        .collect()
}

/// A Service port's `targetPort` as written (its port when unset).
fn target(sp: &k8s_openapi::api::core::v1::ServicePort) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match &sp.target_port {
        Some(IntOrString::Int(n)) => n.to_string(),
        Some(IntOrString::String(s)) => s.clone(),
        None => sp.port.to_string(),
    }
}
