//! Hostname sources defined by CRDs, read when their CRDs are installed: Traefik
//! `IngressRoute` / `IngressRouteTCP`, Istio `Gateway` and Contour `HTTPProxy`.
//!
//! The objects arrive untyped ([`CustomSource`]: metadata, `spec`, `status`), because hairpin
//! reads a few fields of several API versions of each and carries no generated types for
//! them. Every field is optional here: a tenant's object that lacks one, or holds the wrong
//! type, gives no hostname, never an error.
//!
//! How each one finds its load balancer (applied in [`crate::hostnames::collect`]):
//! - Traefik routes: Traefik's own `type: LoadBalancer` Service, found the way an Ingress of
//!   the class `traefik.io/ingress-controller` is ([`crate::hostnames::CONTROLLER_APP_NAMES`]).
//! - Istio `Gateway`: the `type: LoadBalancer` Service whose `spec.selector` holds every label of
//!   the Gateway's `spec.selector` (the gateway pods carry both).
//! - Contour `HTTPProxy`: its `status.loadBalancer.ingress[]`, as for an Ingress; without a
//!   status, Contour's Envoy Service, as for an Ingress of the class `projectcontour.io/...`.

use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::name::{WildcardLabels, normalize_address};
use crate::snapshot::{CustomSource, SourceKind};

/// One CRD hairpin reads hostnames from, and how to ask the API for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceApi {
    /// API group.
    pub group: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Resource (plural) name.
    pub plural: &'static str,
    /// Versions to read, newest first: the first one served is used.
    pub versions: &'static [&'static str],
    /// What hairpin makes of it.
    pub source: SourceKind,
}

/// Every CRD hostname source hairpin reads (the controller watches, `hairpin doctor` lists,
/// each only where the API serves it).
pub const SOURCE_APIS: &[SourceApi] = &[
    SourceApi {
        group: "traefik.io",
        kind: "IngressRoute",
        plural: "ingressroutes",
        versions: &["v1alpha1"],
        source: SourceKind::TraefikIngressRoute,
    },
    SourceApi {
        group: "traefik.io",
        kind: "IngressRouteTCP",
        plural: "ingressroutetcps",
        versions: &["v1alpha1"],
        source: SourceKind::TraefikIngressRouteTcp,
    },
    SourceApi {
        group: "traefik.containo.us",
        kind: "IngressRoute",
        plural: "ingressroutes",
        versions: &["v1alpha1"],
        source: SourceKind::TraefikIngressRoute,
    },
    SourceApi {
        group: "traefik.containo.us",
        kind: "IngressRouteTCP",
        plural: "ingressroutetcps",
        versions: &["v1alpha1"],
        source: SourceKind::TraefikIngressRouteTcp,
    },
    SourceApi {
        group: "networking.istio.io",
        kind: "Gateway",
        plural: "gateways",
        versions: &["v1", "v1beta1", "v1alpha3"],
        source: SourceKind::IstioGateway,
    },
    SourceApi {
        group: "projectcontour.io",
        kind: "HTTPProxy",
        plural: "httpproxies",
        versions: &["v1"],
        source: SourceKind::ContourHttpProxy,
    },
];

/// The Gateway API `TLSRoute` versions read, newest first (`v1` in Gateway API 1.4; the
/// experimental channel served `v1alpha3` and `v1alpha2` before): the first one served is
/// used, its objects read into the `v1` type.
pub const TLS_ROUTE_VERSIONS: &[&str] = &["v1", "v1alpha3", "v1alpha2"];

/// A `TLSRoute` of any of [`TLS_ROUTE_VERSIONS`], as read from the API, in the `v1` type (the
/// fields hairpin reads are the same in each).
///
/// # Errors
/// When the object does not parse as a `TLSRoute`.
pub fn tls_route_from_value(mut value: Value) -> Result<TlsRoute, serde_json::Error> {
    value["apiVersion"] = "gateway.networking.k8s.io/v1".into();
    value["kind"] = "TLSRoute".into();
    serde_json::from_value(value)
}

impl SourceKind {
    /// The kind of `group`/`kind`, if hairpin reads it.
    pub fn of(group: &str, kind: &str) -> Option<SourceKind> {
        SOURCE_APIS
            .iter()
            .find(|api| api.group == group && api.kind == kind)
            .map(|api| api.source)
    }

    /// The object kind, as people write it (`IngressRoute`...).
    pub fn kind(self) -> &'static str {
        match self {
            SourceKind::TraefikIngressRoute => "IngressRoute",
            SourceKind::TraefikIngressRouteTcp => "IngressRouteTCP",
            // Not to be confused with a Gateway API Gateway in reports.
            SourceKind::IstioGateway => "Istio Gateway",
            SourceKind::ContourHttpProxy => "HTTPProxy",
        }
    }

    /// What a wildcard means in this source.
    pub(crate) fn wildcard_labels(self) -> WildcardLabels {
        match self {
            // Istio hosts are suffix matches, as in the Gateway API.
            SourceKind::IstioGateway => WildcardLabels::OneOrMore,
            _ => WildcardLabels::One,
        }
    }
}

impl CustomSource {
    /// Builds one from a whole object (`apiVersion`, `kind`, `metadata`, `spec`, `status`), as
    /// read from YAML or from the API. `Err` when the metadata does not parse.
    pub fn from_value(kind: SourceKind, mut value: Value) -> Result<Self, String> {
        let metadata = match value.get_mut("metadata").map(Value::take) {
            Some(m) => serde_json::from_value(m).map_err(|e| format!("metadata: {e}"))?,
            None => ObjectMeta::default(),
        };
        Ok(CustomSource {
            kind,
            metadata,
            spec: value.get_mut("spec").map(Value::take).unwrap_or_default(),
            status: value.get_mut("status").map(Value::take).unwrap_or_default(),
        })
    }

    /// The hostnames this object names, as written (validated later by admission).
    pub fn hosts(&self) -> Vec<String> {
        match self.kind {
            SourceKind::TraefikIngressRoute | SourceKind::TraefikIngressRouteTcp => {
                let matcher = if self.kind == SourceKind::TraefikIngressRoute {
                    "Host"
                } else {
                    "HostSNI"
                };
                self.spec
                    .get("routes")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("match").and_then(Value::as_str))
                    .flat_map(|rule| traefik_rule_hosts(rule, matcher))
                    // `HostSNI(`*`)` is any name; Traefik takes `*` in Host literally.
                    .filter(|h| !h.contains('*'))
                    .collect()
            }
            SourceKind::IstioGateway => self
                .spec
                .get("servers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| s.get("hosts").and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_str)
                .map(|h| h.rsplit_once('/').map_or(h, |(_, host)| host))
                .filter(|h| *h != "*")
                .map(str::to_owned)
                .collect(),
            SourceKind::ContourHttpProxy => self
                .spec
                .pointer("/virtualhost/fqdn")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .into_iter()
                .collect(),
        }
    }

    /// `status.loadBalancer.ingress[]` addresses (Contour), normalized like a Service's.
    pub(crate) fn status_addresses(&self) -> Vec<String> {
        let entries = self
            .status
            .pointer("/loadBalancer/ingress")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        entries
            .flat_map(|e| {
                ["ip", "hostname"]
                    .into_iter()
                    .filter_map(|k| e.get(k).and_then(Value::as_str))
            })
            .map(normalize_address)
            .collect()
    }

    /// Istio `spec.selector` label pairs.
    pub(crate) fn istio_selector(&self) -> Vec<(&str, &str)> {
        self.spec
            .get("selector")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.as_str(), v.as_str()?)))
            .collect()
    }
}

/// A token of a Traefik rule expression.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Ident(&'a str),
    Str(&'a str),
    Open,
    Close,
    Comma,
    Not,
    /// `&&`, `||`, and anything else that is not part of a matcher call.
    Other,
}

/// Splits a Traefik rule into tokens. Strings are backquoted or double-quoted (Traefik's rule
/// syntax is Go-like); an unterminated string ends the input. Never fails.
fn tokenize(rule: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let bytes = rule.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'`' | b'"' => {
                let start = i + 1;
                let mut j = start;
                // Go's double-quoted strings may escape a quote; backquoted ones cannot.
                while j < bytes.len() && bytes[j] != c {
                    j += if c == b'"' && bytes[j] == b'\\' { 2 } else { 1 };
                }
                let end = j.min(bytes.len());
                // `start..end` lies on ASCII quote boundaries, so on char boundaries.
                out.push(Token::Str(rule.get(start..end).unwrap_or_default()));
                i = end + 1;
            }
            b'(' => {
                out.push(Token::Open);
                i += 1;
            }
            b')' => {
                out.push(Token::Close);
                i += 1;
            }
            b',' => {
                out.push(Token::Comma);
                i += 1;
            }
            b'!' => {
                out.push(Token::Not);
                i += 1;
            }
            c if c.is_ascii_alphanumeric() || c == b'_' => {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                out.push(Token::Ident(&rule[start..i]));
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                out.push(Token::Other);
                // Skip a whole (possibly multi-byte) character.
                i += rule
                    .get(i..)
                    .and_then(|r| r.chars().next())
                    .map_or(1, char::len_utf8);
            }
        }
    }
    out
}

/// The names of every `matcher(...)` call (`Host`, `HostSNI`) in a Traefik rule that is not
/// negated: ``Host(`a.com`) && PathPrefix(`/x`)``, ``Host(`a.com`, `b.com`)`` (several
/// arguments, Traefik v2), ``Host(`a.com`) || Host(`b.com`)``. `HostRegexp` and friends are
/// other identifiers and are never claimed; `!Host(...)` and `!(...)` are skipped, since they
/// name what the route does not serve. Any input gives a result, never a panic.
pub fn traefik_rule_hosts(rule: &str, matcher: &str) -> Vec<String> {
    let tokens = tokenize(rule);
    let mut hosts = Vec::new();
    // Negation of each open group; the innermost last.
    let mut groups: Vec<bool> = Vec::new();
    let mut pending_not = false;
    let mut i = 0;
    while i < tokens.len() {
        let negated = groups.last().copied().unwrap_or(false) ^ pending_not;
        match tokens[i] {
            Token::Not => {
                pending_not = !pending_not;
                i += 1;
                continue;
            }
            Token::Ident(name) if tokens.get(i + 1) == Some(&Token::Open) => {
                // A call: its arguments run to the matching `)`.
                let mut j = i + 2;
                let mut args = Vec::new();
                while let Some(t) = tokens.get(j) {
                    match t {
                        Token::Str(s) => args.push(*s),
                        Token::Close => break,
                        _ => {}
                    }
                    j += 1;
                }
                if name == matcher && !negated {
                    hosts.extend(args.iter().map(|a| a.trim().to_owned()));
                }
                i = j + 1;
            }
            Token::Open => {
                groups.push(negated);
                i += 1;
            }
            Token::Close => {
                groups.pop();
                i += 1;
            }
            _ => i += 1,
        }
        pending_not = false;
    }
    hosts.retain(|h| !h.is_empty());
    hosts
}
