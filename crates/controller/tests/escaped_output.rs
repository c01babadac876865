//! Issue 22 item 1 in the controller's outputs: a refused hostname holding a line break and a
//! YAML document reaches the `Hairpin` status escaped, on one line.

use hairpin_controller::status::desired_hairpins;
use hairpin_planner::load::load_yaml;
use hairpin_planner::{ClusterSnapshot, PlannerConfig, desired};

const CLUSTER: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: lb
  namespace: web
  annotations:
    hairpin.io/proxy-protocol: v1
    external-dns.alpha.kubernetes.io/hostname: "shop.example.com,x\n---\nkind: Secret\n#"
spec: { type: LoadBalancer, ports: [{ name: http, port: 80 }] }
status: { loadBalancer: { ingress: [{ ip: 192.0.2.1 }] } }
"#;

#[test]
fn a_refused_hostname_is_escaped_in_the_hairpin_status() {
    let mut snapshot = ClusterSnapshot::default();
    load_yaml(&mut snapshot, "t.yaml", CLUSTER).unwrap();
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(
        plan.refused
            .iter()
            .any(|r| r.hostname == "x\n---\nkind: Secret\n#")
    );
    let hairpins = desired_hairpins(&plan, &snapshot, "hairpin.io/source");
    let status = hairpins[0].status.as_ref().unwrap();
    let refused = &status.refused[0];
    assert_eq!(refused.name, "x\\n---\\nkind: Secret\\n#");
    for text in [&refused.name, &refused.reason]
        .into_iter()
        .chain(&refused.sources)
    {
        assert!(text.chars().all(|c| (' '..='~').contains(&c)), "{text:?}");
    }
    assert!(
        refused.reason.starts_with("invalid: not a valid hostname"),
        "{}",
        refused.reason
    );
}
