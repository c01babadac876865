//! Whether what changed is a removal of hairpin, and keeping the holds on what is not.
//!
//! Only a real removal counts: the namespace, the Deployment or the ServiceAccount being
//! deleted, gone, or made again under a new uid. Any other held object deleted alone (`kubectl
//! replace --force`, `kubectl auth reconcile` making a binding again, Argo CD's
//! `Replace=true`/`Force=true`, a `helm upgrade` that renames or drops it) is let go once no
//! removal followed within [`RemovalParams::settle`] (`kubectl delete -f` deletes the RBAC of
//! hairpin's manifest and its Deployment within a second of each other), and held again under
//! its new uid when it comes back. A hold another writer dropped (a `kubectl replace`) is put
//! back.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::DynamicObject;

use super::RemovalParams;
use super::held::{Armed, Held, hold, is_held, unhold};

/// What one look found.
#[derive(Debug, Default)]
pub(crate) struct Look {
    /// Why this is a removal of hairpin, if it is.
    pub(crate) removal: Option<String>,
    /// When to look again without a change (an object being deleted whose settle time ends).
    pub(crate) again_at: Option<Instant>,
    /// `hairpin uninstall` fenced the controllers: it restores and lets every hold go itself,
    /// and the guard stands down (it holds nothing again).
    pub(crate) uninstalling: bool,
}

/// Whether the Lease carries `hairpin uninstall`'s fence (not the removal guard's own).
pub(crate) async fn uninstalling(client: &kube::Client, p: &RemovalParams) -> bool {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &p.namespace);
    matches!(leases.get_opt(&p.lease_name).await,
        Ok(Some(lease)) if crate::lease::fence_of(&lease).is_some_and(|f| !f.by_removal))
}

/// Looks at the namespace and every object the guard holds (see the module documentation),
/// re-holding and letting go as it goes. `settle`: how long an object other than the vital
/// ones may be being deleted before it is let go (zero at the shutdown). An object that cannot
/// be read for another reason than 404 says nothing (an API outage is not a removal), but a
/// 401 or 403 on all of them is: the controller's token or rights are gone.
pub(crate) async fn look(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &mut Armed,
    settle: Duration,
) -> Look {
    let mut look = Look::default();
    if !armed.is_armed() {
        return look;
    }
    if uninstalling(client, p).await {
        look.uninstalling = true;
        return look;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get_opt(&p.namespace).await {
        Ok(Some(ns)) if ns.metadata.deletion_timestamp.is_some() => {
            look.removal = Some(format!("namespace {} is being deleted", p.namespace));
            return look;
        }
        Ok(None) => {
            look.removal = Some(format!("namespace {} is gone", p.namespace));
            return look;
        }
        _ => {}
    }
    let (mut asked, mut refused) = (0, 0);
    for held in Held::ALL {
        if armed.leftovers.contains(&held) {
            continue;
        }
        let known = armed.uids.contains_key(&held);
        asked += usize::from(known);
        let (_, name) = held.at(p);
        let found = match held.api(client, p).get_opt(name).await {
            Ok(found) => found,
            Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
                refused += usize::from(known);
                continue;
            }
            Err(_) => continue,
        };
        match found {
            Some(object) if held.is_vital() => {
                if let Some(reason) = vital_changed(held, p, armed, &object) {
                    look.removal = Some(reason);
                    return look;
                }
                keep_held(client, p, armed, held, &object).await;
            }
            Some(object) if object.metadata.deletion_timestamp.is_some() => {
                let since = *armed.deleting.entry(held).or_insert_with(Instant::now);
                if since.elapsed() >= settle {
                    let_go(client, p, armed, held, &object).await;
                } else {
                    let at = since + settle;
                    look.again_at = Some(look.again_at.map_or(at, |t| t.min(at)));
                }
            }
            Some(object) => {
                armed.deleting.remove(&held);
                keep_held(client, p, armed, held, &object).await;
            }
            None if held.is_vital() && known => {
                look.removal = Some(format!("{} is gone", held.describe(p)));
                return look;
            }
            None => {
                armed.uids.remove(&held);
                armed.deleting.remove(&held);
            }
        }
    }
    if asked > 0 && refused == asked {
        look.removal = Some(
            "the controller's token or rights are gone (every read refused with 401/403)"
                .to_owned(),
        );
    }
    look
}

/// Why the vital `object` (as read) makes this a removal: being deleted, or made again.
fn vital_changed(
    held: Held,
    p: &RemovalParams,
    armed: &Armed,
    object: &DynamicObject,
) -> Option<String> {
    let known = armed.uids.get(&held)?;
    if object.metadata.uid.as_ref() != Some(known) {
        return Some(format!("{} was deleted (and made again)", held.describe(p)));
    }
    object
        .metadata
        .deletion_timestamp
        .is_some()
        .then(|| format!("{} is being deleted", held.describe(p)))
}

/// Holds `object` (standing) when it is not held: new (made again under a new uid, or made
/// after the arming) or its hold dropped by another writer. A refusal is logged: it is not a
/// removal, and the next change tries again.
async fn keep_held(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &mut Armed,
    held: Held,
    object: &DynamicObject,
) {
    let Some(uid) = object.metadata.uid.clone() else {
        return;
    };
    let new = armed.uids.get(&held) != Some(&uid);
    if !new && is_held(object) {
        return;
    }
    match hold(held, &held.api(client, p), object).await {
        Ok(()) => {
            if new {
                tracing::info!(object = %held.describe(p), uid = %uid, "held again under its new uid (made again or made since the start; not a removal of hairpin)");
            } else {
                tracing::info!(object = %held.describe(p), "held again (another writer dropped hairpin's finalizer)");
            }
            armed.uids.insert(held, uid);
        }
        // Changed meanwhile: the watch brings the change, and the next look holds it.
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => {
            tracing::warn!(error = %err, object = %held.describe(p), "could not hold again; a removal that deletes it first could leave the restore without it");
        }
    }
}

/// Lets go of `object`, being deleted alone for longer than the settle time: replaced,
/// renamed or dropped by the chart, not a removal of hairpin.
async fn let_go(
    client: &kube::Client,
    p: &RemovalParams,
    armed: &mut Armed,
    held: Held,
    object: &DynamicObject,
) {
    if is_held(object) {
        match unhold(held, client, p).await {
            Ok(()) => {
                tracing::info!(object = %held.describe(p), "being deleted while the Deployment, the ServiceAccount and the namespace stay (replaced, renamed or dropped by the chart): let go, and held again if it comes back; nothing restored");
            }
            Err(err) => {
                tracing::warn!(error = %err, object = %held.describe(p), "could not let go of an object being deleted alone; trying again at the next change");
                return;
            }
        }
    }
    armed.uids.remove(&held);
    armed.deleting.remove(&held);
}
