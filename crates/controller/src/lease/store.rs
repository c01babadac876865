//! The Lease's reads and writes: what the API server answers, mapped to what the election
//! needs (a conflict or a deletion is "not written", never an error). No policy here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::resource_version;
use crate::Error;
use crate::error::{is_conflict, is_not_found};

/// Reads and writes the one Lease `name`.
#[derive(Debug)]
pub(super) struct LeaseStore {
    api: Api<Lease>,
    name: String,
    /// The resourceVersion of this instance's last claim, renewal or creation of the Lease
    /// (0: none, or not a number): watch events at or before it are older than our claim.
    written_rv: Arc<AtomicU64>,
}

// === impl LeaseStore ===

impl LeaseStore {
    pub(super) fn new(api: Api<Lease>, name: &str) -> Self {
        Self {
            api,
            name: name.to_owned(),
            written_rv: Arc::default(),
        }
    }

    /// The API, for the watch.
    pub(super) fn api(&self) -> &Api<Lease> {
        &self.api
    }

    /// The resourceVersion of our last recorded write, shared with the watch.
    pub(super) fn written_rv(&self) -> Arc<AtomicU64> {
        self.written_rv.clone()
    }

    /// The Lease (`None`: it does not exist).
    pub(super) async fn get(&self) -> Result<Option<Lease>, Error> {
        let name = &self.name;
        self.api
            .get_opt(name)
            .await
            .map_err(|err| Error::kube(format!("get Lease {name}"), err))
    }

    /// Creates the Lease and records the write. False: another instance was first.
    pub(super) async fn create(&self, lease: &Lease) -> Result<bool, Error> {
        match self.api.create(&crate::apply::post_params(), lease).await {
            Ok(created) => {
                self.record(&created);
                Ok(true)
            }
            Err(err) if is_conflict(&err) => Ok(false),
            Err(err) => Err(Error::kube(format!("create Lease {}", self.name), err)),
        }
    }

    /// Updates the Lease with its resourceVersion set and records the write. False: a
    /// concurrent change (409).
    pub(super) async fn claim(&self, lease: &Lease) -> Result<bool, Error> {
        match self.replace(lease).await {
            Ok(written) => {
                self.record(&written);
                Ok(true)
            }
            Err(err) if is_conflict(&err) => Ok(false),
            Err(err) => Err(Error::kube(format!("update Lease {}", self.name), err)),
        }
    }

    /// Writes the vacated Lease. False: deleted or changed since the read.
    pub(super) async fn vacate(&self, lease: &Lease) -> Result<bool, Error> {
        match self.replace(lease).await {
            Ok(_) => Ok(true),
            Err(err) if is_not_found(&err) || is_conflict(&err) => Ok(false),
            Err(err) => Err(Error::kube(format!("vacate Lease {}", self.name), err)),
        }
    }

    /// Writes the fence's acknowledgement (not recorded: the Lease stays fenced).
    pub(super) async fn acknowledge(&self, lease: &Lease) -> Result<(), kube::Error> {
        self.replace(lease).await.map(drop)
    }

    async fn replace(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        self.api
            .replace(&self.name, &crate::apply::post_params(), lease)
            .await
    }

    fn record(&self, lease: &Lease) {
        self.written_rv
            .store(resource_version(lease).unwrap_or(0), Ordering::SeqCst);
    }
}
