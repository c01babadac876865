//! The `external-dns` DNS mode's writes: hairpin's `DNSEndpoint` objects in its namespace
//! (external-dns's CRD source, read by a private external-dns instance).
//!
//! Written like the hairpin Services, by the same loop ([`crate::apply::apply_owned`]): the
//! desired objects are created or replaced with the resourceVersion just read, objects that
//! are hairpin's but no longer wanted are deleted only as read, an object of a needed name
//! that is not hairpin's is never touched ([`Error::NotOwned`]), and another writer that keeps
//! changing them is backed off from ([`crate::fight`]). A missing CRD is not an error:
//! [`Applied::CrdMissing`].

use hairpin_planner::external_dns::{self, DnsEndpoint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

use crate::Error;
use crate::apply::{ObjectChanges, Owned, apply_owned, list_labelled};
use crate::error::is_not_found;
use crate::fight::Fights;

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
    fights: Option<&mut Fights>,
) -> Result<Applied, Error> {
    let api = api(client, namespace);
    let listed = match list_labelled(&api).await {
        Ok(listed) => listed,
        Err(err) if is_not_found(&err) => return Ok(Applied::CrdMissing),
        Err(err) => {
            return Err(Error::kube(
                format!("list DNSEndpoints in {namespace}"),
                err,
            ));
        }
    };
    apply_owned(&api, listed, namespace, source_annotation, desired, fights)
        .await
        .map(Applied::Done)
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
