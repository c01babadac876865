//! The `external-dns` DNS mode's writes: hairpin's `DNSEndpoint` objects in its namespace
//! (external-dns's CRD source, read by a private external-dns instance).
//!
//! Like the hairpin Services ([`crate::apply::apply_services`]): the desired objects are
//! created or replaced with the resourceVersion just read (409 Conflict: read again, retry),
//! objects that are hairpin's (the managed-by label AND the source annotation) but no longer
//! wanted are deleted only as read, and an object of a needed name that is not hairpin's is
//! never touched ([`Error::NotOwned`]). A missing CRD is not an error: [`Applied::CrdMissing`].
//! Another writer that keeps changing them is backed off from like one reverting the CoreDNS
//! change ([`crate::fight`]).

use std::collections::BTreeMap;

use hairpin_planner::config::is_managed;
use hairpin_planner::external_dns::{self, DnsEndpoint};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};

use crate::apply::{CONFLICT_RETRIES, ObjectChanges, ObjectFights, delete_unwanted, post_params};
use crate::error::{is_conflict, is_not_found};
use crate::fight::Fights;
use crate::{Error, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

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

fn dynamic(object: &DnsEndpoint) -> Result<DynamicObject, serde_json::Error> {
    serde_json::to_value(object).and_then(serde_json::from_value)
}

fn encode(source: serde_json::Error) -> Error {
    Error::Encode {
        what: "DNSEndpoint",
        source,
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

/// Makes hairpin's `DNSEndpoint`s in `namespace` exactly `desired`.
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
    let mut fights = ObjectFights::new(fights, "DNSEndpoint", namespace);
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let listed = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(err) if is_not_found(&err) => return Ok(Applied::CrdMissing),
        Err(err) => {
            return Err(Error::kube(
                format!("list DNSEndpoints in {namespace}"),
                err,
            ));
        }
    };
    let existing: BTreeMap<String, DynamicObject> = listed
        .into_iter()
        .filter(|o| is_managed(&o.metadata, source_annotation))
        .filter_map(|o| Some((o.metadata.name.clone()?, o)))
        .collect();
    let mut changes = ObjectChanges::default();
    let mut refused = None;
    for want in desired {
        let name = want.metadata.name.clone().unwrap_or_default();
        let what = format!("DNSEndpoint {namespace}/{name}");
        let mut current = existing.get(&name).cloned();
        for attempt in 0..=CONFLICT_RETRIES {
            let result = match &current {
                Some(have) if !is_managed(&have.metadata, source_annotation) => {
                    tracing::warn!(dnsendpoint = %what, "a DNSEndpoint hairpin needs exists and is not hairpin's; left alone");
                    refused.get_or_insert_with(|| Error::NotOwned {
                        kind: "DNSEndpoint",
                        object: format!("{namespace}/{name}"),
                        label: MANAGED_BY_LABEL,
                        annotation: source_annotation.to_owned(),
                    });
                    break;
                }
                Some(have) if typed(have).is_some_and(|h| h.matches(want)) => {
                    fights.held(&name);
                    break;
                }
                _ if fights.backed_off(&name, &mut changes) => break,
                Some(have) => {
                    let mut updated = dynamic(want).map_err(encode)?;
                    updated.metadata.resource_version = have.metadata.resource_version.clone();
                    api.replace(&name, &post_params(), &updated)
                        .await
                        .map(|_| changes.updated.push(name.clone()))
                }
                None => {
                    let mut created = dynamic(want).map_err(encode)?;
                    created.metadata.resource_version = None;
                    api.create(&post_params(), &created)
                        .await
                        .map(|_| changes.created.push(name.clone()))
                }
            };
            if result.is_ok() {
                fights.written(
                    &name,
                    want,
                    current.as_ref().map(|c| &c.metadata),
                    &mut changes,
                );
            }
            match result {
                Ok(()) => break,
                Err(err)
                    if (is_conflict(&err) || is_not_found(&err)) && attempt < CONFLICT_RETRIES =>
                {
                    tracing::debug!(dnsendpoint = %what, "write conflicted; reading again");
                    current = api
                        .get_opt(&name)
                        .await
                        .map_err(|err| Error::kube(format!("get {what}"), err))?;
                }
                Err(err) => return Err(Error::kube(format!("write {what}"), err)),
            }
        }
    }
    let wanted: Vec<&str> = desired
        .iter()
        .filter_map(|d| d.metadata.name.as_deref())
        .collect();
    fights.retain(&wanted);
    delete_unwanted(
        &api,
        &existing,
        &wanted,
        "DNSEndpoint",
        namespace,
        &mut changes.deleted,
    )
    .await?;
    match refused {
        Some(err) => Err(err),
        None => Ok(Applied::Done(changes)),
    }
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
