//! Recording: the per-area counters and gauges the controller updates, and the counts tests read.

use super::{
    CureLabels, ErrorLabels, IpModeWriteLabels, LookupLabels, Metrics, RefusedLabels,
    UnverifiedLabels, VerdictLabels,
};

// === impl Metrics ===

impl Metrics {
    /// Counts a native-cure verdict.
    pub fn native_verdict(&self, verdict: &str) {
        self.native_verdicts
            .get_or_create(&VerdictLabels {
                verdict: verdict.to_owned(),
            })
            .inc();
    }

    /// Counts an `ipMode` write of `kind`.
    pub fn ip_mode_write(&self, kind: &str) {
        self.ip_mode_writes
            .get_or_create(&IpModeWriteLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts an error.
    pub fn error(&self, error: &crate::Error) {
        self.count_error(error.metric_label());
    }

    /// Counts an error under the label `kind`.
    pub(crate) fn count_error(&self, kind: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Counts a refused hostname claim under its reason label.
    pub fn refused(&self, reason: &str) {
        self.hostnames_refused
            .get_or_create(&RefusedLabels {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Counts one upstream lookup under its result label.
    pub fn hostname_lookup(&self, result: &str) {
        self.hostname_lookups
            .get_or_create(&LookupLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// The count of upstream lookups with one result label (for tests and reports).
    pub fn hostname_lookup_count(&self, result: &str) -> u64 {
        self.hostname_lookups
            .get_or_create(&LookupLabels {
                result: result.to_owned(),
            })
            .get()
    }

    /// Sets the unverified-hostname gauges from a plan (every reason, 0 where none).
    pub fn set_unverified(&self, verification: &hairpin_planner::verify::Verification) {
        use hairpin_planner::verify::UnverifiedReason as R;
        for reason in [
            R::NotResolved,
            R::ResolvesElsewhere,
            R::NoAddress,
            R::NxDomain,
            R::ResolveFailed,
            R::CoversOthers,
        ] {
            let n = verification
                .unverified
                .iter()
                .filter(|u| u.reason == reason)
                .count();
            self.hostnames_unverified
                .get_or_create(&UnverifiedLabels {
                    reason: reason.as_str().to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets `hairpin_load_balancers` from a plan's cures (both labels, 0 where none).
    pub fn set_cures(&self, cures: &[hairpin_planner::native::CureChoice]) {
        use hairpin_planner::native::Cure;
        for cure in [Cure::Native, Cure::Dns] {
            let n = cures.iter().filter(|c| c.cure == cure).count();
            self.load_balancers_by_cure
                .get_or_create(&CureLabels {
                    cure: cure.as_str().to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// The count of refused claims with one reason label (for tests and reports).
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.hostnames_refused
            .get_or_create(&RefusedLabels {
                reason: reason.to_owned(),
            })
            .get()
    }

    /// The current count of errors of one kind (for tests and reports).
    pub fn error_count(&self, kind: &str) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
            })
            .get()
    }
}
