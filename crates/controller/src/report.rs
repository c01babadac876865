//! Kubernetes Events on the objects concerned, published only when what they say changes
//! (so a steady state does not emit an Event per reconcile).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::metrics::Metrics;

/// Event reasons hairpin emits.
pub mod reason {
    /// A load balancer got its hairpin (Service, routes, DNS).
    pub const CONFIGURED: &str = "HairpinConfigured";
    /// A load balancer needs no hairpin; the note says why.
    pub const NOT_NEEDED: &str = "HairpinNotNeeded";
    /// A hostname is claimed by several load balancers.
    pub const HOST_CONFLICT: &str = "HostConflict";
    /// The CoreDNS ConfigMap could not be written (forbidden, refused by the editor...).
    pub const DNS_WRITE_FAILED: &str = "DNSWriteFailed";
    /// Another writer keeps reverting our CoreDNS change, or changing our `DNSEndpoint`s.
    pub const DNS_FIGHT: &str = "DNSWriteReverted";
    /// Another writer keeps changing (or deleting) one of hairpin's Services.
    pub const SERVICE_FIGHT: &str = "ServiceWriteReverted";
    /// Another writer keeps changing (or deleting) hairpin's routes or hosts ConfigMap.
    pub const CONFIG_MAP_FIGHT: &str = "ConfigMapWriteReverted";
    /// The CoreDNS change was written.
    pub const DNS_UPDATED: &str = "DNSUpdated";
    /// A hostname an object asked for was refused by the admission policy.
    pub const HOSTNAME_REFUSED: &str = "HostnameRefused";
    /// Hostnames of a load balancer are not redirected: the upstream DNS does not resolve them
    /// to it (or they are not resolved yet); the note gives the answer seen for each.
    pub const HOSTNAME_UNVERIFIED: &str = "HostnameUnverified";
    /// The cluster DNS answers the load balancer's hostnames with the hairpin Service.
    pub const HAIRPIN_EFFECTIVE: &str = "HairpinEffective";
    /// After the deadline the cluster DNS still does not; the note says what it answered.
    pub const DNS_NOT_EFFECTIVE: &str = "DNSNotEffective";
    /// `--dns-mode external-dns`, but external-dns's `DNSEndpoint` CRD is not installed.
    pub const DNS_ENDPOINT_CRD_MISSING: &str = "DNSEndpointCRDMissing";
    /// The leader Lease's name is taken by a Lease that is not hairpin's: nobody leads.
    pub const LEASE_NOT_OWNED: &str = "LeaseNotOwned";
    /// `hairpin uninstall` fenced the controller: it stays idle until it exits.
    pub const FENCED: &str = "HairpinUninstalling";
    /// The native cure set `ipMode: Proxy` on a load balancer's status (or set it again).
    pub const IP_MODE_SET: &str = "IpModeProxySet";
    /// Another writer (a cloud controller's sync) rebuilt a cured status without `ipMode:
    /// Proxy` and hairpin set it again: the note names the writer and the window.
    pub const IP_MODE_REASSERTED: &str = "IpModeProxyReasserted";
    /// The native cure was proven by probe.
    pub const NATIVE_PROVEN: &str = "NativeCureProven";
    /// The native cure is not tried on a load balancer that is not known to be a proxy (a VIP
    /// the nodes receive, or an unknown delivery); the note says why. Its names stay on DNS.
    pub const NATIVE_NOT_TRIED: &str = "NativeCureNotTried";
    /// The native cure was asked for (`--cure native` or the Service's annotation) on a VIP
    /// load balancer and refused: the note names the outage it would cause.
    pub const NATIVE_REFUSED: &str = "NativeCureRefused";
    /// The native cure is kept off a load balancer because some node's data plane is known
    /// not to honour `ipMode` (an older kubelet or kube-proxy, the feature gate off, a CNI
    /// older than its support): the note names the nodes; every node keeps the DNS cure.
    pub const NATIVE_NOT_ON_EVERY_NODE: &str = "NativeCureNotOnEveryNode";
    /// hairpin put a load balancer's `ipMode` back as it was.
    pub const IP_MODE_RESTORED: &str = "IpModeRestored";
    /// Another writer (an upgraded cloud controller) set `ipMode: Proxy` itself: hairpin
    /// stepped back from that load balancer's status.
    pub const IP_MODE_HANDED_OVER: &str = "IpModeHandedOver";
    /// Every PROXY port of a load balancer answered a request without a header before any
    /// change: it needs no cure here; nothing was written.
    pub const NATIVE_NOT_NEEDED: &str = "NativeCureNotNeeded";
    /// The native cure cannot be proven (some requests without a header were answered before
    /// any change, or the address is unreachable from the controller): nothing was written.
    pub const NATIVE_UNPROVABLE: &str = "NativeCureUnprovable";
    /// The API server dropped the `ipMode` hairpin wrote (older than 1.30, or the feature
    /// gate `LoadBalancerIPMode` off).
    pub const IP_MODE_DROPPED: &str = "IpModeDropped";
    /// Another writer keeps removing the `ipMode: Proxy` hairpin sets: hairpin backs off and
    /// the load balancer is on the DNS cure.
    pub const IP_MODE_FIGHT: &str = "IpModeWriteReverted";
    /// hairpin put `ipMode` back but the API server refused it (409) or its answer still says
    /// `Proxy`: tried again, backing off, until it shows.
    pub const IP_MODE_NOT_RESTORED: &str = "IpModeNotRestored";
    /// The native cure was not proven but `--cure native` (or the Service's annotation) keeps
    /// `ipMode: Proxy`: the only case where a failed cure's `Proxy` stays.
    pub const NATIVE_KEPT_UNPROVEN: &str = "NativeCureKeptUnproven";
    /// A load balancer and its receiver disagree about the PROXY protocol (broken for clients
    /// outside the cluster too); the note names both settings and the fix. hairpin keeps the
    /// cure it had in place and changes nothing else for it.
    pub const RECEIVER_MISMATCH: &str = crate::crd::condition::RECEIVER_MISMATCH;
}

/// (namespace, kind/name, reason) of an Event.
type EventKey = (String, String, String);

/// Publishes Events, deduplicated by (object, reason, note).
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    metrics: Metrics,
    last: std::sync::Arc<tokio::sync::Mutex<HashMap<EventKey, String>>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

/// A reference to an object for Events (a core v1 object unless `kind` is one of the
/// networking or Gateway API kinds hairpin reads).
pub fn object_ref(kind: &str, namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version(kind).into()),
        kind: Some(kind.into()),
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        name: Some(name.into()),
        uid,
        ..ObjectReference::default()
    }
}

/// The API version of the kinds hairpin reads (the served one it watches first).
fn api_version(kind: &str) -> &'static str {
    match kind {
        "Ingress" | "IngressClass" => "networking.k8s.io/v1",
        "Gateway" | "HTTPRoute" | "GRPCRoute" | "TLSRoute" => "gateway.networking.k8s.io/v1",
        "DNSEndpoint" => hairpin_planner::external_dns::API_VERSION,
        "Lease" => "coordination.k8s.io/v1",
        _ => "v1",
    }
}

impl Events {
    /// An Event publisher reporting as `hairpin-controller` from `instance`.
    pub fn new(client: kube::Client, instance: &str, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: "hairpin-controller".into(),
            instance: Some(instance.into()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
            metrics,
            last: std::sync::Arc::default(),
        }
    }

    /// Publishes an Event unless the same note was the last one for this object and reason.
    /// Failures are logged and counted, never returned: an Event is a report, not a write the
    /// plan depends on.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        // The parts quoting objects were escaped when the note was built; this guard keeps
        // any control or line-breaking character left out of the Event.
        let note = hairpin_planner::escape::controls(&note).into_owned();
        let key = event_key(regarding, reason);
        {
            let mut last = self.last.lock().await;
            if last.get(&key) == Some(&note) {
                return;
            }
            last.insert(key.clone(), note.clone());
        }
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(truncate(note)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, regarding).await {
            let err = crate::Error::kube("publish Event", err);
            if crate::gate::is_withheld(&err) {
                // Not leading (any more): nothing to report, and nothing failed.
                tracing::debug!(reason, "Event withheld: this instance does not lead");
                self.last.lock().await.remove(&key);
                return;
            }
            self.metrics.error(&err);
            tracing::warn!(error = %err, reason, "could not publish an Event");
            // Let the next reconcile try again.
            self.last.lock().await.remove(&key);
        }
    }

    /// Forgets the last note for this object and reason, so that the same note is published
    /// again if the condition comes back (refused hostnames that went away and return).
    pub async fn forget(&self, regarding: &ObjectReference, reason: &str) {
        self.last.lock().await.remove(&event_key(regarding, reason));
    }
}

fn event_key(regarding: &ObjectReference, reason: &str) -> EventKey {
    (
        regarding.namespace.clone().unwrap_or_default(),
        format!(
            "{}/{}",
            regarding.kind.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default()
        ),
        reason.to_owned(),
    )
}

/// The most bytes an events.k8s.io/v1 Event's `note` may hold: kube-apiserver refuses a longer
/// one with 422 Invalid (`note: Invalid value: "": can have at most 1024 characters`, counted
/// in bytes; `pkg/apis/core/validation/events.go`).
pub const NOTE_LIMIT: usize = 1024;

/// `head`, then as many whole `items` (joined by `sep`) as fit in [`NOTE_LIMIT`] together with
/// `tail`, then `… and N more` naming how many were left out. A list that fits is joined as
/// it is. Only when `head` and `tail` alone do not fit is the text cut ([`truncate`]).
pub fn list_note<S: AsRef<str>>(head: &str, items: &[S], sep: &str, tail: &str) -> String {
    let total: usize = items.iter().map(|i| i.as_ref().len()).sum::<usize>()
        + sep.len() * items.len().saturating_sub(1);
    if head.len() + total + tail.len() <= NOTE_LIMIT {
        let joined: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
        return format!("{head}{}{tail}", joined.join(sep));
    }
    let more = |left: usize| format!("… and {left} more");
    let mut out = head.to_owned();
    let mut listed = 0;
    for item in items {
        let item = item.as_ref();
        let joint = if listed == 0 { "" } else { sep };
        // Room for this item and, after it, the count of the rest (its longest form).
        let after = out.len() + joint.len() + item.len();
        let rest = items.len() - listed - 1;
        let reserve = if rest == 0 {
            0
        } else {
            sep.len() + more(rest).len()
        };
        if after + reserve + tail.len() > NOTE_LIMIT {
            break;
        }
        out.push_str(joint);
        out.push_str(item);
        listed += 1;
    }
    if listed < items.len() {
        if listed > 0 {
            out.push_str(sep);
        }
        out.push_str(&more(items.len() - listed));
    }
    out.push_str(tail);
    truncate(out)
}

/// The last resort for a note over [`NOTE_LIMIT`]: cut on a UTF-8 character boundary and end
/// with `…`.
fn truncate(mut note: String) -> String {
    const ELLIPSIS: &str = "…";
    if note.len() > NOTE_LIMIT {
        let mut cut = NOTE_LIMIT - ELLIPSIS.len();
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str(ELLIPSIS);
    }
    note
}

#[cfg(test)]
mod tests;
