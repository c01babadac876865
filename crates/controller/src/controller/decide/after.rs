//! What follows a reconcile's writes, decided without a client from what they found
//! ([`Observed`]) and what the write-fight guard learnt of it ([`Learnt`]): the Events about a
//! write, a revert or a fight, the fight metrics, and when to run again.

use std::time::{Duration, Instant};

use hairpin_planner::{ClusterSnapshot, Plan, PlannerConfig};

use super::super::observed::{
    DnsObserved, EndpointsObserved, KeyObserved, Learnt, ObjectsObserved, Observed,
};
use super::{
    Actions, Counter, DnsIntent, DnsKey, DnsTarget, DnsWritten, Effect, Gauge, Restored, Verdict,
    dns_fight_over, dns_write_failed, dns_written, earliest, own_key_written, restored,
};
use crate::apply::{ObjectChanges, last_writer};
use crate::dns_endpoints::crd_missing_message;
use crate::fight::Observation;
use crate::report::{object_ref, reason};

/// What [`after`] reads besides the actions and what they found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scene<'a> {
    /// The plan the actions were decided from.
    pub plan: &'a Plan,
    /// The cluster as cached.
    pub snapshot: &'a ClusterSnapshot,
    /// What was planned with.
    pub planner: &'a PlannerConfig,
    /// The write-fight window, named in the Events.
    pub window: Duration,
    /// Now.
    pub now: Instant,
}

/// The effects that follow the writes of `actions`, in the order of the writes, and when to
/// run again (the earliest of a backed-off write, a fight's end, the native cure's next step).
pub(crate) fn after(
    actions: &Actions<'_>,
    observed: &Observed,
    learnt: &Learnt,
    scene: Scene<'_>,
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut follow = |next: Verdict| {
        verdict.effects.extend(next.effects);
        verdict.requeue = earliest(verdict.requeue, next.requeue);
    };
    for target in &learnt.fights_over {
        if target.contains(' ') {
            tracing::info!(object = %target, "our object has held for a whole window; the write fight is over");
        }
    }
    if let Some(services) = observed.services.as_ref().filter(|s| s.done) {
        let reverts = &learnt.services_reverted;
        follow(objects(
            "Service",
            services,
            reverts,
            learnt.service_fight,
            &actions.namespace,
            scene,
        ));
    }
    follow(own_keys(actions, observed, learnt, scene));
    if let Some(native) = observed.native {
        follow(Verdict {
            effects: Vec::new(),
            requeue: native,
        });
    }
    if let Some(dns) = &observed.dns {
        follow(self::dns(actions, dns, learnt, scene));
    }
    verdict
}

/// hairpin's objects of `kind` restored after someone else changed them ([`restored`]).
fn objects(
    kind: &str,
    applied: &ObjectsObserved,
    reverted: &[crate::apply::Reverted],
    in_fight: bool,
    namespace: &str,
    scene: Scene<'_>,
) -> Verdict {
    let restored_: Vec<Restored<'_>> = reverted
        .iter()
        .map(|r| Restored {
            name: &r.name,
            observation: r.observation,
            writer: r.writer.as_deref(),
        })
        .collect();
    restored(
        kind,
        namespace,
        &restored_,
        applied.changes.backed_off.iter().map(|(_, until)| *until),
        in_fight,
        scene.window,
        scene.now,
    )
}

/// hairpin's own ConfigMap keys: a fight over, a write backed off, a write that was a revert
/// or a fight ([`own_key_written`]); then the fight gauge, once every key was gone through.
fn own_keys(
    actions: &Actions<'_>,
    observed: &Observed,
    learnt: &Learnt,
    scene: Scene<'_>,
) -> Verdict {
    let mut verdict = Verdict::default();
    let keys = actions.intent.own_keys.iter().zip(&observed.own_keys);
    for ((own, _), found) in keys {
        let target = own.target();
        match found {
            KeyObserved::AsPlanned if learnt.fights_over.contains(&target) => {
                tracing::info!(configmap = %own.config_map(), "our ConfigMap has held for a whole window; the write fight is over");
            }
            KeyObserved::BackedOff(until) => {
                tracing::debug!(configmap = %own.config_map(), "write backed off (write fight)");
                verdict.requeue = earliest(verdict.requeue, Some(*until));
            }
            KeyObserved::Written { managed_fields, .. } => {
                let writer = last_writer(managed_fields);
                let observation = learnt
                    .keys
                    .get(&target)
                    .copied()
                    .unwrap_or(Observation::Normal);
                let next =
                    own_key_written(own, observation, writer.as_deref(), scene.window, scene.now);
                verdict.effects.extend(next.effects);
                verdict.requeue = earliest(verdict.requeue, next.requeue);
            }
            _ => {}
        }
    }
    if observed.own_keys_done {
        let fight = i64::from(learnt.config_map_fight);
        verdict
            .effects
            .push(Effect::Set(Gauge::ConfigMapFight, fight));
    }
    verdict
}

/// The DNS change: the plan's errors when none was planned, else what each key write found
/// or what the `DNSEndpoint`s' apply found.
fn dns(actions: &Actions<'_>, dns: &DnsObserved, learnt: &Learnt, scene: Scene<'_>) -> Verdict {
    let (change, effects, target) = match &actions.intent.dns {
        DnsIntent::NotPlanned { verdict, .. } => {
            return Verdict {
                effects: verdict.effects.clone(),
                requeue: verdict.requeue,
            };
        }
        DnsIntent::Planned {
            change,
            effects,
            target,
            ..
        } => (*change, effects, target),
    };
    let mut verdict = Verdict {
        effects: effects.clone(),
        requeue: None,
    };
    let mut follow = |next: Verdict| {
        verdict.effects.extend(next.effects);
        verdict.requeue = earliest(verdict.requeue, next.requeue);
    };
    match (target, dns) {
        (DnsTarget::Keys(keys), DnsObserved::Keys(found)) => {
            for (key, found) in keys.iter().zip(found) {
                follow(dns_key(change, key, found, learnt, scene));
            }
        }
        (DnsTarget::Endpoints(endpoints), DnsObserved::Endpoints(found)) => {
            follow(self::endpoints(actions, endpoints, found, learnt, scene));
        }
        _ => {}
    }
    verdict
}

/// One DNS key: a fight over, a write backed off, a failed write, a write (an Event, a revert
/// or a fight: [`dns_written`]).
fn dns_key(
    change: &hairpin_planner::DnsChange,
    key: &DnsKey<'_>,
    found: &KeyObserved,
    learnt: &Learnt,
    scene: Scene<'_>,
) -> Verdict {
    let write = key.write;
    match found {
        KeyObserved::AsPlanned if learnt.fights_over.contains(&write.target()) => {
            Verdict::of(dns_fight_over(write))
        }
        KeyObserved::BackedOff(until) => Verdict {
            effects: Vec::new(),
            requeue: Some(*until),
        },
        KeyObserved::Failed(err) => dns_write_failed(write, err).0,
        KeyObserved::Written { managed_fields, .. } => {
            let writer = last_writer(managed_fields);
            let written = DnsWritten {
                dns: change,
                write,
                observation: learnt
                    .keys
                    .get(&write.target())
                    .copied()
                    .unwrap_or(Observation::Normal),
                managed_fields,
                writer: writer.as_deref(),
                coredns: &scene.plan.coredns,
            };
            dns_written(&written, scene.planner, scene.window, scene.now)
        }
        _ => Verdict::default(),
    }
}

/// `--dns-mode external-dns`: without the CRD, a Warning on every hairpinned load balancer
/// (logged once); after an apply, the objects restored and an Event on each written; a
/// failed write counted.
fn endpoints(
    actions: &Actions<'_>,
    planned: &hairpin_planner::external_dns::DnsEndpoints,
    found: &EndpointsObserved,
    learnt: &Learnt,
    scene: Scene<'_>,
) -> Verdict {
    match found {
        EndpointsObserved::CrdMissing => {
            let message = crd_missing_message();
            if learnt.crd_missing_news {
                tracing::warn!("{message}");
            }
            let effects = scene
                .plan
                .load_balancers
                .iter()
                .map(|lb| {
                    let svc = &lb.load_balancer.service;
                    let uid = scene
                        .snapshot
                        .service(&svc.namespace, &svc.name)
                        .and_then(|s| s.metadata.uid.clone());
                    Effect::Publish {
                        regarding: object_ref("Service", &svc.namespace, &svc.name, uid),
                        warning: true,
                        reason: reason::DNS_ENDPOINT_CRD_MISSING,
                        note: message.clone(),
                    }
                })
                .collect();
            Verdict::of(effects)
        }
        EndpointsObserved::Failed(..) => {
            Verdict::of(vec![Effect::Count(Counter::DnsWriteFailures, 1)])
        }
        EndpointsObserved::Applied(applied) if applied.done => {
            let kind = hairpin_planner::external_dns::KIND;
            let reverts = &learnt.endpoints_reverted;
            let mut verdict = objects(
                kind,
                applied,
                reverts,
                learnt.endpoint_fight,
                &actions.namespace,
                scene,
            );
            verdict
                .effects
                .extend(announce(planned, &applied.changes, &actions.namespace));
            verdict
        }
        EndpointsObserved::Applied(_) => Verdict::default(),
    }
}

/// An Event on each `DNSEndpoint` created or updated: how many records, for which load
/// balancer.
fn announce(
    planned: &hairpin_planner::external_dns::DnsEndpoints,
    changes: &ObjectChanges,
    namespace: &str,
) -> Vec<Effect> {
    let mut effects = Vec::new();
    for name in changes.created.iter().chain(&changes.updated) {
        let Some(o) = planned
            .objects
            .iter()
            .find(|o| o.object.metadata.name.as_deref() == Some(name.as_str()))
        else {
            continue;
        };
        let note = format!(
            "hairpin published {} record(s) for the hostnames of {}, pointing at its hairpin Service",
            o.object.spec.endpoints.len(),
            o.load_balancer
        );
        effects.push(Effect::Publish {
            regarding: object_ref("DNSEndpoint", namespace, name, None),
            warning: false,
            reason: reason::DNS_UPDATED,
            note,
        });
    }
    effects
}
