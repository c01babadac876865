//! Issue 22 item 1 in the controller's outputs: a refused hostname holding a line break and a
//! YAML document reaches the `Hairpin` status escaped, on one line. Issue 29 item 4: a plan
//! error quoting Corefile text shows it escaped once in every outlet.

mod support;

use std::time::Duration;

use hairpin_controller::preview;
use hairpin_controller::status::desired_hairpins;
use hairpin_fake_apiserver::{FakeApiServer, fixtures};
use hairpin_planner::load::load_yaml;
use hairpin_planner::{ClusterSnapshot, PlanError, PlannerConfig, desired, render};
use support::controller::condition;

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

/// A Corefile whose only server block has no braces, its keys holding a terminal escape, a
/// quote and a backslash: hairpin refuses it, quoting the keys.
const BRACELESS: &str = "ex\u{1b}[2J\"am\\ple.com:53\nforward . 1.1.1.1\n";

/// The keys as every output shows them: escaped once (`\u{1b}`, `\\`; a quote is text).
const ONCE: &str = "the server block `ex\\u{1b}[2J\"am\\\\ple.com:53` has no braces";

/// The keys escaped twice, as the plan showed them before its errors were typed.
const TWICE: &str = "ex\\\\u{1b}";

fn braceless_cluster() -> ClusterSnapshot {
    let mut snapshot = ClusterSnapshot::default();
    load_yaml(&mut snapshot, "t.yaml", CLUSTER).unwrap();
    snapshot.config_maps = vec![serde_json::from_value(fixtures::coredns(BRACELESS)).unwrap()];
    snapshot
}

#[test]
fn a_plan_error_quoting_the_corefile_is_escaped_once_in_the_text_and_the_json() {
    let snapshot = braceless_cluster();
    let plan = desired(&snapshot, &PlannerConfig::default());
    assert!(plan.dns.is_none());
    let [error] = plan.errors.as_slice() else {
        panic!("{:?}", plan.errors)
    };
    // The error holds the keys as written; only its message escapes them.
    assert!(
        matches!(error, PlanError::Corefile { source, .. }
            if source.to_string().contains(ONCE)),
        "{error:?}"
    );
    assert_eq!(error.metric_label(), "unsupported_layout");

    // Text: one line under Errors, escaped once.
    let text = render::text(&plan);
    let line = text
        .lines()
        .find(|l| l.starts_with("  - ConfigMap kube-system/coredns key Corefile: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(ONCE), "{line}");
    assert!(!text.contains(TWICE), "{text}");
    assert!(text.chars().all(|c| c == '\n' || (' '..='~').contains(&c)));

    // JSON: the same message as a string (JSON encoding is on top of it: decoded here, it
    // is the message, escaped once).
    let document = preview::json(&plan, &[], "files");
    let json_error = document["errors"][0].as_str().unwrap();
    assert_eq!(json_error, error.to_string());
    assert!(json_error.contains(ONCE), "{json_error}");
    assert!(!json_error.contains(TWICE), "{json_error}");
}

#[tokio::test]
async fn a_plan_error_quoting_the_corefile_is_escaped_once_in_the_condition_and_the_event() {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    fake.create_namespace("hairpin");
    fake.apply(support::cluster::http_lb());
    fake.apply(support::cluster::ingress(
        "shop",
        "shop",
        "shop.example.com",
    ));
    fake.apply(fixtures::coredns(BRACELESS));
    let running = support::controller::start(&fake, support::controller::config("pod-a", false));
    let hairpin = |f: &FakeApiServer| {
        f.get(
            "hairpin.io/v1alpha1",
            "Hairpin",
            Some("ingress-nginx"),
            "ingress-nginx-controller",
        )
    };
    let refused = |f: &FakeApiServer| {
        hairpin(f).is_some_and(|h| condition(&h, "DNSWritten")["reason"] == "NotPlanned")
    };
    assert!(
        fake.wait_until(Duration::from_secs(10), refused)
            .await
            .is_some(),
        "{:?}",
        hairpin(&fake)
    );
    let h = hairpin(&fake).unwrap();
    let written = condition(&h, "DNSWritten");
    assert_eq!(written["status"], "False", "{written}");
    let message = written["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "hairpin cannot change DNS: ConfigMap kube-system/coredns key Corefile: Corefile line 1: "
        ) && message.contains(ONCE),
        "{message}"
    );
    assert!(!message.contains(TWICE), "{message}");

    // The Warning Event on the CoreDNS ConfigMap says the same.
    let event = fake
        .list("events.k8s.io/v1", "Event")
        .into_iter()
        .find(|e| e["reason"] == "DNSWriteFailed")
        .unwrap_or_else(|| panic!("{:?}", fake.list("events.k8s.io/v1", "Event")));
    let note = event["note"].as_str().unwrap();
    assert!(note.contains(ONCE) && !note.contains(TWICE), "{note}");
    assert!(running.metrics.error_count("unsupported_layout") >= 1);
    running.stop().await;
}
