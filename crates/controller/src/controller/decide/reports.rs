//! The Events of a plan on the objects it is about (configured, not needed, mismatches, the
//! native cure not tried or refused, conflicts, refused and unverified hostnames), published
//! when they change.

use std::collections::{BTreeMap, BTreeSet};

use hairpin_planner::{ClusterSnapshot, ObjectRef, Plan};
use k8s_openapi::api::core::v1::ObjectReference;

use super::{Effect, RefusedClaim, Reported, Reports};
use crate::report::{list_note, object_ref, reason};

/// The Events of a plan, on the objects it is about, given what the loop `reported` before:
/// each hairpinned load balancer (configured), each skipped one with a PROXY signal (not
/// needed), load balancers and receivers that disagree, the native cure not tried or refused,
/// hostname conflicts, refused and unverified hostnames (published when their list changes).
pub(crate) fn reports(plan: &Plan, snapshot: &ClusterSnapshot, reported: &Reported) -> Reports {
    // The Event is about the Service, named with its uid when it is cached.
    let regarding_service = |svc: &ObjectRef| service_ref(snapshot, svc);
    let mut effects = Vec::new();
    let mut publish = |regarding, warning, reason, note| {
        effects.push(Effect::Publish {
            regarding,
            warning,
            reason,
            note,
        });
    };
    for lb in &plan.load_balancers {
        let svc = &lb.load_balancer.service;
        let hosts: Vec<&str> = lb.hostnames.iter().map(|h| h.name.as_str()).collect();
        let head = format!(
            "hairpin Service {} routes {} hostname(s) through the hairpin proxy: ",
            lb.service_ref(),
            hosts.len(),
        );
        let note = list_note(&head, &hosts, ", ", "");
        publish(regarding_service(svc), false, reason::CONFIGURED, note);
    }
    // A load balancer without any PROXY signal is not hairpin's business: no Event.
    let relevant = plan
        .not_needed
        .iter()
        .filter(|n| n.reason != hairpin_planner::SkipReason::NoProxyProtocol);
    for skipped in relevant {
        let note = format!("no hairpin needed: {}", skipped.reason.describe());
        publish(
            regarding_service(&skipped.service),
            false,
            reason::NOT_NEEDED,
            note,
        );
    }
    for (svc, message) in mismatches(plan) {
        publish(
            regarding_service(svc),
            true,
            reason::RECEIVER_MISMATCH,
            message,
        );
    }
    for (svc, warning, reason, note) in delivery(plan) {
        publish(regarding_service(svc), warning, reason, note);
    }
    // The Nodes' gate: the nodes that keep the DNS cure, named (escaped by the planner).
    for choice in plan.cures.iter().filter(|c| !c.nodes.is_empty()) {
        publish(
            regarding_service(&choice.service),
            true,
            reason::NATIVE_NOT_ON_EVERY_NODE,
            choice.reason.clone(),
        );
    }
    for conflict in &plan.conflicts {
        let lbs: Vec<String> = conflict
            .load_balancers
            .iter()
            .map(ToString::to_string)
            .collect();
        let note = list_note(
            &format!(
                "hostname {} is claimed by several load balancers (",
                hairpin_planner::escape::Text(&conflict.hostname)
            ),
            &lbs,
            ", ",
            "); hairpin redirects it for none of them",
        );
        for svc in &conflict.load_balancers {
            publish(
                regarding_service(svc),
                true,
                reason::HOST_CONFLICT,
                note.clone(),
            );
        }
    }
    let refused = refused(plan, snapshot, &reported.refused, &mut effects);
    let unverified = unverified(plan, snapshot, &reported.unverified, &mut effects);
    Reports {
        effects,
        reported: Reported {
            refused,
            unverified,
        },
    }
}

/// The load balancer Service `svc` as an Event's `regarding`, with its uid when it is cached.
fn service_ref(snapshot: &ClusterSnapshot, svc: &ObjectRef) -> ObjectReference {
    let uid = snapshot
        .service(&svc.namespace, &svc.name)
        .and_then(|s| s.metadata.uid.clone());
    object_ref("Service", &svc.namespace, &svc.name, uid)
}

/// A load balancer and its receiver that disagree: kept (its cure was in place) or left
/// alone; either way a Warning on the Service with both settings and the fix.
fn mismatches(plan: &Plan) -> Vec<(&ObjectRef, String)> {
    let kept = plan.load_balancers.iter().filter_map(|lb| {
        let l = &lb.load_balancer;
        Some((&l.service, l.receiver_mismatch.clone()?))
    });
    let subject =
        |svc: &ObjectRef| hairpin_planner::escape::text(&format!("Service {svc}")).into_owned();
    let left = plan
        .not_needed
        .iter()
        .filter(|n| n.reason == hairpin_planner::SkipReason::ReceiverMismatch)
        .filter_map(|n| {
            // One warning per port that disagrees (issue 38), or one for the whole.
            let broken: Vec<&str> = plan
                .warnings
                .iter()
                .filter(|w| w.subject == subject(&n.service) && w.message.starts_with("BROKEN"))
                .map(|w| w.message.as_str())
                .collect();
            (!broken.is_empty()).then(|| (&n.service, broken.join("; ")))
        });
    kept.chain(left).collect()
}

/// An Event on each load balancer the native cure is not tried on because of how it delivers
/// traffic (a VIP, or unknown), or refused on (forced on a VIP): the plan's reason, which
/// names the outage native would cause. (Service, warning, reason, note.)
fn delivery(plan: &Plan) -> Vec<(&ObjectRef, bool, &'static str, String)> {
    use hairpin_planner::CureMode;
    use hairpin_planner::delivery::Delivery;
    let barred = plan.cures.iter().filter(|c| {
        c.mode != CureMode::Dns && c.native.is_none() && c.delivery.kind != Delivery::Proxy
    });
    barred
        .map(|choice| {
            let refused = choice.delivery.kind == Delivery::Vip && choice.mode == CureMode::Native;
            let reason = if refused {
                reason::NATIVE_REFUSED
            } else {
                reason::NATIVE_NOT_TRIED
            };
            // Escaped by the planner (it quotes the Service's annotations).
            let note = format!(
                "{} (delivery {}: {})",
                choice.reason, choice.delivery.kind, choice.delivery.evidence
            );
            (&choice.service, refused, reason, note)
        })
        .collect()
}

/// A Warning Event on each load balancer Service with unverified hostnames, naming each and
/// the answer seen, published when that list changes. Returns the notes to remember.
fn unverified(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    before: &BTreeMap<ObjectRef, String>,
    effects: &mut Vec<Effect>,
) -> BTreeMap<ObjectRef, String> {
    let mut by_lb: BTreeMap<&ObjectRef, Vec<String>> = BTreeMap::new();
    // A name not resolved yet is a moment's state, not news.
    let settled = plan
        .verification
        .unverified
        .iter()
        .filter(|u| u.reason != hairpin_planner::verify::UnverifiedReason::NotResolved);
    for u in settled {
        by_lb
            .entry(&u.load_balancer)
            .or_default()
            .push(hairpin_planner::escape::text(&u.detail).into_owned());
    }
    let mut reported = BTreeMap::new();
    for (lb, details) in by_lb {
        let note = list_note(
            "hostnames not redirected (not proven to resolve to this load balancer): ",
            &details,
            "; ",
            "",
        );
        if before.get(lb) != Some(&note) {
            effects.push(Effect::Publish {
                regarding: service_ref(snapshot, lb),
                warning: true,
                reason: reason::HOSTNAME_UNVERIFIED,
                note: note.clone(),
            });
        }
        reported.insert(lb.clone(), note);
    }
    reported
}

/// A Warning Event on each object whose hostnames were refused, naming every refused hostname
/// and why (one Event per object: the Event recorder merges Events with the same object and
/// reason into one series), published when that list changes; and the metric, counted once
/// per claim while it lasts (again if it goes away and comes back). Returns the claims to
/// remember.
fn refused(
    plan: &Plan,
    snapshot: &ClusterSnapshot,
    before: &BTreeSet<RefusedClaim>,
    effects: &mut Vec<Effect>,
) -> BTreeSet<RefusedClaim> {
    let regarding = |kind: &str, object: &ObjectRef| {
        let uid = match kind {
            "Service" => snapshot
                .service(&object.namespace, &object.name)
                .and_then(|s| s.metadata.uid.clone()),
            "Ingress" => snapshot
                .ingresses
                .iter()
                .find(|i| ObjectRef::from_meta(&i.metadata) == *object)
                .and_then(|i| i.metadata.uid.clone()),
            _ => None,
        };
        object_ref(kind, &object.namespace, &object.name, uid)
    };
    let mut current = BTreeSet::new();
    let mut by_object: BTreeMap<(&str, &ObjectRef), Vec<String>> = BTreeMap::new();
    for r in &plan.refused {
        let claim = (
            r.kind.clone(),
            r.object.clone(),
            r.hostname.clone(),
            r.reason,
        );
        if !before.contains(&claim) {
            effects.push(Effect::Refused(r.reason.label()));
        }
        current.insert(claim);
        by_object
            .entry((&r.kind, &r.object))
            .or_default()
            .push(format!(
                "{} ({}: {})",
                hairpin_planner::escape::Text(&r.hostname),
                r.reason,
                r.detail
            ));
    }
    for ((kind, object), refusals) in &by_object {
        let head = format!(
            "hairpin does not redirect {} of this object's hostnames: ",
            refusals.len()
        );
        effects.push(Effect::Publish {
            regarding: regarding(kind, object),
            warning: true,
            reason: reason::HOSTNAME_REFUSED,
            note: list_note(&head, refusals, "; ", ""),
        });
    }
    let gone: BTreeSet<(&str, &ObjectRef)> = before
        .iter()
        .map(|(kind, object, ..)| (kind.as_str(), object))
        .filter(|key| !by_object.contains_key(key))
        .collect();
    for (kind, object) in gone {
        effects.push(Effect::Forget {
            regarding: regarding(kind, object),
            reason: reason::HOSTNAME_REFUSED,
        });
    }
    current
}
