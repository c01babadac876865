//! The `external-dns` DNS mode's writes: hairpin's `DNSEndpoint` objects in its namespace
//! (external-dns's CRD source, read by a private external-dns instance).
//!
//! Written like the hairpin Services, by the same loop ([`crate::apply::apply_owned`]): the
//! desired objects are created or replaced with the resourceVersion just read, objects that
//! are hairpin's but no longer wanted are deleted only as read, an object of a needed name
//! that is not hairpin's is never touched ([`Error::NotOwned`]), and another writer that keeps
//! changing them is backed off from ([`crate::fight`]). A missing CRD is not an error:
//! [`Applied::CrdMissing`].

use std::sync::Arc;

use hairpin_planner::DnsEndpoint;
use hairpin_planner::DnsMode;
use hairpin_planner::external_dns::{self, DnsEndpoints};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::Error;
use crate::apply::{BackedOff, ObjectChanges, Owned, Target, apply_owned, list_labelled};
use crate::context::Context;
use crate::error::is_not_found;

/// The `DNSEndpoint` resource.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(
            external_dns::GROUP,
            external_dns::VERSION,
            external_dns::KIND,
        ),
        external_dns::PLURAL,
    )
}

/// `DNSEndpoint`s in `namespace`.
pub fn api(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &api_resource())
}

/// A cached or listed object in the planner's type; `None` when it does not parse (someone
/// else's malformed object: never hairpin's to judge).
pub fn typed(object: &DynamicObject) -> Option<DnsEndpoint> {
    serde_json::to_value(object)
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
}

/// Sent as a [`DynamicObject`] (kube has no typed client for a CRD it does not know), and
/// compared as the planner's type ([`typed`]).
impl Owned for DnsEndpoint {
    type Object = DynamicObject;
    const KIND: &'static str = external_dns::KIND;

    fn encode(&self, _have: Option<&DynamicObject>) -> Result<DynamicObject, serde_json::Error> {
        serde_json::to_value(self).and_then(serde_json::from_value)
    }

    fn is_met_by(&self, have: &DynamicObject) -> bool {
        typed(have).is_some_and(|h| h.matches(self))
    }

    fn object_meta(&self) -> &ObjectMeta {
        &self.metadata
    }
}

/// The outcome of [`apply_dns_endpoints`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The objects are as planned.
    Done(ObjectChanges),
    /// The API server does not serve `DNSEndpoint` (external-dns's CRD is not installed):
    /// nothing was written.
    CrdMissing,
}

/// Makes hairpin's `DNSEndpoint`s in `namespace` exactly `desired` ([`apply_owned`]).
///
/// # Errors
/// API errors other than a 404 on the list (the CRD is missing) or on delete, and 409s still
/// conflicting after every retry; [`Error::NotOwned`] (after the others were applied) when an
/// object of a desired name is not hairpin's.
pub async fn apply_dns_endpoints(
    client: &kube::Client,
    namespace: &str,
    source_annotation: &str,
    desired: &[DnsEndpoint],
    guard: Option<&BackedOff>,
) -> Result<Applied, Error> {
    let mut changes = ObjectChanges::default();
    let target = Target {
        namespace,
        source_annotation,
    };
    let served = apply_into(client, target, desired, guard, &mut changes).await?;
    Ok(if served {
        Applied::Done(changes)
    } else {
        Applied::CrdMissing
    })
}

/// [`apply_dns_endpoints`], recording what it did in `changes` as it goes (so a failure part
/// way still says what was written); false when the CRD is not served (nothing written).
async fn apply_into(
    client: &kube::Client,
    target: Target<'_>,
    desired: &[DnsEndpoint],
    guard: Option<&BackedOff>,
    changes: &mut ObjectChanges,
) -> Result<bool, Error> {
    let namespace = target.namespace;
    let api = api(client, namespace);
    let listed = match list_labelled(&api).await {
        Ok(listed) => listed,
        Err(err) if is_not_found(&err) => return Ok(false),
        Err(err) => {
            return Err(Error::kube(
                format!("list DNSEndpoints in {namespace}"),
                err,
            ));
        }
    };
    apply_owned(&api, listed, target, desired, guard, changes).await?;
    Ok(true)
}

/// Deletes every `DNSEndpoint` of hairpin's in `namespace` (uninstall); none when the CRD is
/// not installed. Returns the names deleted.
///
/// # Errors
/// API errors other than 404.
pub async fn delete_dns_endpoints(
    client: &kube::Client,
    namespace: &str,
    source_annotation: &str,
) -> Result<Vec<String>, Error> {
    match apply_dns_endpoints(client, namespace, source_annotation, &[], None).await? {
        Applied::Done(changes) => Ok(changes.deleted),
        Applied::CrdMissing => Ok(Vec::new()),
    }
}

/// The control loop's executor of `--dns-mode external-dns`: writes the planned
/// `DNSEndpoint`s, and after a switch away from that mode removes the ones an earlier run
/// left. It decides nothing (whether to write, what a missing CRD or a fight leads to, which
/// Events: the loop's `decide`) and keeps nothing: what the loop learns between reconciles is
/// in its memory ([`DnsEndpointMemory`]).
pub(crate) struct DnsEndpointWriter {
    /// The loop's client.
    ctx: Arc<Context>,
    /// hairpin's namespace, where its DNSEndpoints live.
    namespace: String,
    /// The annotation naming each object's source load balancer.
    source: String,
}

/// What the loop remembers of the `DNSEndpoint`s between reconciles: whether the CRD is
/// served, whether its absence was logged, whether the clean-up ran.
#[derive(Debug, Default)]
pub(crate) struct DnsEndpointMemory {
    /// Whether external-dns's `DNSEndpoint` CRD is served (`None`: not in that mode, or not
    /// known yet), as the caches said at the start of the reconcile.
    pub(crate) crd: Option<bool>,
    /// The missing CRD was logged (once until it appears).
    pub(crate) crd_missing_logged: bool,
    /// Outside external-dns mode, hairpin's DNSEndpoints of an earlier run in that mode were
    /// looked for (once: the mode is a flag, so it changes only with a restart).
    pub(crate) cleaned: bool,
}

impl DnsEndpointWriter {
    pub(crate) fn new(ctx: &Arc<Context>) -> Self {
        Self {
            ctx: ctx.clone(),
            namespace: ctx.planner.namespace.clone(),
            source: ctx.planner.annotation("source"),
        }
    }

    /// After a switch away from `--dns-mode external-dns`, hairpin's `DNSEndpoint`s would keep
    /// publishing records at the hairpin Services (and at released addresses once they are
    /// gone): deleted, as uninstall does (once per run: the loop decides when). A missing CRD
    /// or permission ends it quietly (the chart grants list and delete in hairpin's namespace
    /// in every mode). Returns how many were deleted.
    pub(crate) async fn clean(&self, mode: DnsMode) -> usize {
        match delete_dns_endpoints(&self.ctx.client, &self.namespace, &self.source).await {
            Ok(deleted) if !deleted.is_empty() => {
                tracing::info!(deleted = ?deleted, mode = mode.as_str(), "DNSEndpoints of an earlier external-dns mode deleted");
                deleted.len()
            }
            Ok(_) => 0,
            Err(err) => {
                tracing::debug!(error = %err, "cannot look for DNSEndpoints of an earlier external-dns mode; skipped");
                0
            }
        }
    }

    /// `--dns-mode external-dns`: hairpin's `DNSEndpoint`s, as planned, except those `guard`
    /// backs off from; what was done is recorded in `changes` as it goes. False when the CRD
    /// is not served (nothing written).
    pub(crate) async fn apply(
        &self,
        endpoints: &DnsEndpoints,
        guard: &BackedOff,
        changes: &mut ObjectChanges,
    ) -> Result<bool, Error> {
        let desired: Vec<_> = endpoints.objects.iter().map(|o| o.object.clone()).collect();
        let target = Target {
            namespace: &self.namespace,
            source_annotation: &self.source,
        };
        let served = apply_into(&self.ctx.client, target, &desired, Some(guard), changes).await?;
        if changes.writes() > 0 {
            tracing::info!(created = ?changes.created, updated = ?changes.updated, deleted = ?changes.deleted, "DNSEndpoints applied");
        }
        Ok(served)
    }
}

/// The message of a missing `DNSEndpoint` CRD, in the log, the Events and the statuses.
pub(crate) fn crd_missing_message() -> String {
    format!(
        "--dns-mode external-dns, but the DNSEndpoint CRD ({}.{}) is not installed: install external-dns's CRD (charts/external-dns/crds/dnsendpoint.yaml in kubernetes-sigs/external-dns); no DNS rule is published until it is (checked again every minute)",
        external_dns::PLURAL,
        external_dns::GROUP
    )
}
