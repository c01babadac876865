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
    /// Another writer keeps reverting our CoreDNS change.
    pub const DNS_FIGHT: &str = "DNSWriteReverted";
    /// The CoreDNS change was written.
    pub const DNS_UPDATED: &str = "DNSUpdated";
    /// A hostname an object asked for was refused by the admission policy.
    pub const HOSTNAME_REFUSED: &str = "HostnameRefused";
    /// The cluster DNS answers the load balancer's hostnames with the hairpin Service.
    pub const HAIRPIN_EFFECTIVE: &str = "HairpinEffective";
    /// After the deadline the cluster DNS still does not; the note says what it answered.
    pub const DNS_NOT_EFFECTIVE: &str = "DNSNotEffective";
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

/// events.k8s.io/v1 notes are limited to 1 KiB.
fn truncate(mut note: String) -> String {
    const MAX: usize = 1024;
    if note.len() > MAX {
        let mut cut = MAX - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}
