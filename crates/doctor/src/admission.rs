//! hairpin's own admission policy (issue 37): the ValidatingAdmissionPolicy that pins the
//! controller ServiceAccount's Service status writes to `ipMode`, and its binding. RBAC lets
//! that account write any field of any Service's status; only the policy stops it.

use serde::Serialize;

/// What the API says of the policy and its binding (both of one name, as the chart makes them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AdmissionPolicyFacts {
    /// The policy's name (`<release>-status-ipmode-only`), also its binding's.
    pub name: String,
    /// The cluster can have one: Kubernetes 1.30 or later (or the version is unknown).
    pub available: bool,
    /// hairpin looks installed (its CRD, or its Services): only then is a missing policy news.
    pub hairpin_installed: bool,
    /// The ValidatingAdmissionPolicy exists.
    pub policy: bool,
    /// Its `failurePolicy` (`Fail`: a policy that cannot be evaluated denies).
    pub failure_policy: Option<String>,
    /// The binding of that name exists.
    pub binding: bool,
    /// The binding's `validationActions` when it refers to the policy (`Deny` enforces).
    pub binding_actions: Vec<String>,
}

impl AdmissionPolicyFacts {
    /// The policy exists and a binding denies what it rejects.
    pub fn in_force(&self) -> bool {
        self.policy && self.binding_actions.iter().any(|a| a == "Deny")
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let name = &self.name;
        if !self.available {
            return "not available (Kubernetes before 1.30 has no ValidatingAdmissionPolicy): \
                    RBAC alone limits hairpin's status writes"
                .to_owned();
        }
        if self.in_force() {
            let failure = self.failure_policy.as_deref().unwrap_or("Fail");
            return format!(
                "{name} in force (binding {name}: {}; failurePolicy {failure}): hairpin may \
                 change a Service's status ipMode and nothing else",
                self.binding_actions.join(",")
            );
        }
        match (self.policy, self.binding) {
            (false, _) => format!("{name} missing: hairpin's status writes are not limited"),
            (true, false) => format!("{name} present but not bound (no binding {name})"),
            (true, true) => format!(
                "{name} bound without Deny (binding {name}: {}): not enforced",
                if self.binding_actions.is_empty() {
                    "another policy".to_owned()
                } else {
                    self.binding_actions.join(",")
                }
            ),
        }
    }

    /// A warning when hairpin is installed on a cluster that can have the policy and it is not
    /// in force.
    pub fn warning(&self) -> Option<String> {
        (self.available && self.hairpin_installed && !self.in_force()).then(|| {
            format!(
                "warning: admission policy {}; the controller's ServiceAccount can then set any \
                 load balancer IP in any Service's status (CVE-2020-8554). Install the chart \
                 with admissionPolicy.enabled=true (the default), or pass --admission-policy \
                 with your release's `<release>-status-ipmode-only`.",
                self.describe()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> AdmissionPolicyFacts {
        AdmissionPolicyFacts {
            name: "hairpin-status-ipmode-only".into(),
            available: true,
            hairpin_installed: true,
            policy: true,
            failure_policy: Some("Fail".into()),
            binding: true,
            binding_actions: vec!["Deny".into()],
        }
    }

    #[test]
    fn in_force_only_with_the_policy_and_a_denying_binding() {
        assert!(facts().in_force());
        assert_eq!(facts().warning(), None);
        let audit = AdmissionPolicyFacts {
            binding_actions: vec!["Audit".into()],
            ..facts()
        };
        assert!(!audit.in_force());
        assert!(
            audit.describe().contains("not enforced"),
            "{}",
            audit.describe()
        );
        let unbound = AdmissionPolicyFacts {
            binding: false,
            binding_actions: vec![],
            ..facts()
        };
        assert!(unbound.describe().contains("not bound"));
        let missing = AdmissionPolicyFacts {
            policy: false,
            ..facts()
        };
        let warning = missing.warning().expect("a warning");
        assert!(
            warning.contains("hairpin-status-ipmode-only missing"),
            "{warning}"
        );
    }

    #[test]
    fn no_warning_where_the_cluster_cannot_have_one_or_hairpin_is_absent() {
        let old = AdmissionPolicyFacts {
            available: false,
            policy: false,
            binding: false,
            ..facts()
        };
        assert_eq!(old.warning(), None);
        assert!(old.describe().starts_with("not available"));
        let absent = AdmissionPolicyFacts {
            hairpin_installed: false,
            policy: false,
            ..facts()
        };
        assert_eq!(absent.warning(), None);
    }
}
