//! Executing the DNS change: the clean-ups an earlier mode left, then its keys one by one, or
//! the `DNSEndpoint`s of `--dns-mode external-dns`; what each found is handed back.

use hairpin_planner::DnsChange;

use super::super::decide::{Actions, DnsIntent, DnsTarget};
use super::super::observed::{
    DnsObserved, EndpointsObserved, KeyObserved, ObjectsObserved, Observed,
};
use super::key;
use crate::Error;
use crate::apply::{ObjectChanges, write_key};
use crate::context::Context;
use crate::dns_endpoints::DnsEndpointWriter;

/// Executes the DNS part of `actions`, recording in `observed` what each write found.
pub(super) async fn dns(
    ctx: &Context,
    endpoints: &DnsEndpointWriter,
    actions: &Actions<'_>,
    observed: &mut Observed,
) -> Result<(), Error> {
    let (change, clean_ups, target) = match &actions.intent.dns {
        DnsIntent::NotPlanned { .. } => {
            observed.dns = Some(DnsObserved::NotPlanned);
            return Ok(());
        }
        DnsIntent::Planned {
            change,
            clean_ups,
            target,
            ..
        } => (*change, clean_ups, target),
    };
    observed.dns = Some(DnsObserved::Keys(Vec::new()));
    for edit in clean_ups {
        write_key(&ctx.client, edit).await?;
    }
    match target {
        DnsTarget::Keys(keys) => {
            let guards = keys.iter().zip(&actions.guards.dns_keys);
            for (dns_key, decision) in guards {
                let found = match key(ctx, dns_key.edit.as_ref(), *decision).await {
                    Ok(found) => found,
                    // Not leading any more: not a failure of the DNS write.
                    Err(err) if crate::gate::is_withheld(&err) => return Err(err),
                    Err(err) => {
                        push(observed, KeyObserved::Failed(err.to_string()));
                        return Err(err);
                    }
                };
                if matches!(found, KeyObserved::Written { .. }) {
                    written(change, dns_key.write);
                }
                push(observed, found);
            }
            Ok(())
        }
        DnsTarget::Endpoints(planned) => {
            if actions.guards.endpoints_crd_missing {
                observed.dns = Some(DnsObserved::Endpoints(EndpointsObserved::CrdMissing));
                return Ok(());
            }
            let mut changes = ObjectChanges::default();
            let result = endpoints
                .apply(planned, &actions.guards.endpoints, &mut changes)
                .await;
            let (found, result) = match result {
                Ok(true) => {
                    ctx.count_writes(changes.writes());
                    let done = ObjectsObserved {
                        changes,
                        done: true,
                    };
                    (EndpointsObserved::Applied(done), Ok(()))
                }
                Ok(false) => (EndpointsObserved::CrdMissing, Ok(())),
                Err(err) if crate::gate::is_withheld(&err) => {
                    let done = ObjectsObserved {
                        changes,
                        done: false,
                    };
                    (EndpointsObserved::Applied(done), Err(err))
                }
                Err(err) => (
                    EndpointsObserved::Failed(err.to_string(), changes),
                    Err(err),
                ),
            };
            observed.dns = Some(DnsObserved::Endpoints(found));
            result
        }
    }
}

/// Adds what a DNS key write found.
fn push(observed: &mut Observed, found: KeyObserved) {
    if let Some(DnsObserved::Keys(keys)) = &mut observed.dns {
        keys.push(found);
    }
}

/// Logs a DNS key written.
fn written(change: &DnsChange, write: &hairpin_planner::DnsWrite) {
    tracing::info!(configmap = %write.config_map, key = %write.key, entries = change.entries.len(), "DNS change written");
}
