//! The watch of the Lease, beside the election's polls: it closes the gate the moment the
//! Lease is lost, without waiting for the next attempt.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;

use super::fence::is_fenced;
use super::{LeaseParams, holder_of, resource_version};
use crate::gate::WriteGate;

/// Watches the Lease: the moment it is deleted, fenced or shows another holder (in a change
/// newer than our own last write of it), the gate closes, and the manager is poked to look
/// again at once (also when the Lease is vacated, so a standby claims it without waiting).
pub(super) async fn watch_lease(
    api: Api<Lease>,
    params: LeaseParams,
    gate: WriteGate,
    written_rv: Arc<AtomicU64>,
    poke: Arc<Notify>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={}", params.name));
    let newer_than_ours = |lease: &Lease| {
        let ours = written_rv.load(Ordering::SeqCst);
        resource_version(lease).is_none_or(|rv| ours == 0 || rv > ours)
    };
    watcher(api, config)
        .backoff(crate::watch::WatchBackoff::default())
        .for_each(|event| {
            match event {
                Ok(watcher::Event::Delete(_)) if !params.observe_only => {
                    gate.close_now();
                    poke.notify_one();
                }
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    let holder = holder_of(&lease);
                    let fenced = is_fenced(&lease);
                    // Without an election only the fence matters.
                    let other = !params.observe_only && holder != Some(params.identity.as_str());
                    if (fenced || other) && newer_than_ours(&lease) {
                        gate.close_now();
                    }
                    if fenced || holder.is_none() || (other && gate.is_open()) {
                        poke.notify_one();
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %err, "watch of the leader Lease failed; retrying")
                }
            }
            futures::future::ready(())
        })
        .await;
}
