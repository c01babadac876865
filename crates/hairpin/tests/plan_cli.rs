//! `hairpin plan` as a user runs it: the built binary on `examples/cluster.yaml`.

mod support;

use std::io::Write as _;
use std::process::{Output, Stdio};

use hairpin_planner::ClusterSnapshot;
use hairpin_planner::load::load_yaml;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/cluster.yaml");
const TENANT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/tenant-admission.yaml"
);

/// `hairpin plan` with `args`, planning every admitted name as if it resolved to its load
/// balancer (`HAIRPIN_VERIFY_HOSTNAMES=off`): an offline plan resolves nothing, and these tests
/// are about the rest of the plan. `an_offline_plan_lists_the_names_it_did_not_verify` runs the
/// default.
fn hairpin(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = support::hairpin(args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(input) = stdin {
        pipe.write_all(input.as_bytes()).unwrap();
    }
    drop(pipe);
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn text_summary_of_the_example() {
    let out = hairpin(&["plan", "-f", EXAMPLE], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("hairpin plan: 2 load balancers need a hairpin, 1 does not\n"),
        "{text}"
    );
    for expected in [
        "Load balancer ingress-nginx/ingress-nginx-controller",
        "load-balancer.hetzner.cloud/uses-proxyprotocol=true",
        "[::]:10000      -> ingress-nginx-controller.ingress-nginx.svc.cluster.local:80   PROXY v1  destination 203.0.113.10:80",
        "Load balancer traefik/traefik",
        "PROXY v2  destination 198.51.100.20:443",
        // Wildcards say what they cover: one label from an Ingress, one or more from a
        // Gateway listener (the Gateway API's suffix match).
        "    *.apps.example.com (one label)  Ingress saas/tenants\n",
        "    *.example.org (one or more labels)  Gateway traefik/public\n",
        "    auth.example.org                    Ingress auth/auth\n",
        "    docs.example.org                    HTTPRoute docs/docs via Gateway traefik/public\n",
        "backoffice/internal-api  no PROXY protocol annotation",
        "mode corefile (cluster domain cluster.local)",
        "ConfigMap kube-system/coredns key Corefile: block in `.:53` (rewrite); changes",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        !text.contains("docs.example.net"),
        "outside the listener's hostname:\n{text}"
    );
    assert!(
        stderr(&out).contains("skipped v1 ServiceAccount coredns"),
        "{}",
        stderr(&out)
    );
}

/// The cure of each load balancer, per `--cure` (the flag wins over `HAIRPIN_CURE=dns`, which
/// the test helper sets): with `auto` the DigitalOcean-like `traefik/traefik` (its controller
/// never sets ipMode) is native to be proven by probe and keeps its DNS rules meanwhile (make
/// before break); hcloud's controller computes ipMode itself, so its load balancer stays on
/// DNS and the plan names that controller's own setting. With `dns` both are DNS.
#[test]
fn the_cure_of_each_load_balancer_follows_the_flag() {
    let args = |cure: &'static str, output: &'static str| {
        vec![
            "plan",
            "-f",
            EXAMPLE,
            "--verify-hostnames=off",
            "--cure",
            cure,
            "-o",
            output,
        ]
    };
    let cure_rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("  cure "))
            .map(|l| l.trim_start_matches("  cure ").trim().to_owned())
            .collect()
    };

    let out = hairpin(&args("auto", "text"), None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        cure_rows(&text),
        [
            "dns (hcloud-cloud-controller-manager computes ipMode itself (hairpin never overrides a cloud controller): its own setting is load-balancer.hetzner.cloud/uses-proxyprotocol: \"true\" (controller v1.21 or later sets ipMode: Proxy))",
            "dns (native to be proven by probe)",
        ],
        "{text}"
    );
    // Until the probe proves native, the names keep their DNS rules.
    assert!(
        text.contains("DNS\n  mode corefile (cluster domain cluster.local), 7 hostnames"),
        "{text}"
    );
    let out = hairpin(&args("auto", "json"), None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let cures = plan["cures"].as_array().unwrap();
    assert_eq!(cures.len(), 2, "{cures:?}");
    assert_eq!(cures[1]["service"], "traefik/traefik", "{cures:?}");
    assert_eq!(cures[1]["cure"], "dns");
    assert_eq!(cures[1]["mode"], "auto");
    assert_eq!(cures[1]["native"], "to-prove");
    assert_eq!(cures[0]["cure"], "dns");
    assert!(cures[0].get("native").is_none(), "{cures:?}");

    let out = hairpin(&args("dns", "text"), None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let rows = cure_rows(&text);
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows.iter().all(|r| r.starts_with("dns (")), "{rows:?}");
    assert_eq!(
        rows[1],
        "dns (--cure dns (or the Service's cure annotation))"
    );
    assert!(!text.contains("native"), "{text}");
}

/// A load balancer whose native cure hairpin's record (`hairpin-native`) says proven is on
/// `native`: its names leave the DNS plan, and the row quotes the probe's outcome from the
/// record, escaped (a record is cluster data: it cannot add a line or a section).
#[test]
fn a_proven_native_cure_is_shown_with_its_reason_escaped() {
    let record = serde_json::json!({"loadBalancers": {"traefik/traefik": {
        "uid": "",
        "original": [{"ip": "198.51.100.20"}],
        "state": "proven",
        "since": "2026-11-27T10:00:00Z",
        "reason": "198.51.100.20:80 answered\nLoad balancer evil/evil\u{202e}",
    }}});
    let input = format!(
        "{}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hairpin-native\n  namespace: hairpin\ndata:\n  native.json: {}\n",
        std::fs::read_to_string(EXAMPLE).unwrap(),
        serde_json::to_string(&record.to_string()).unwrap()
    );
    let out = hairpin(
        &[
            "plan",
            "-f",
            "-",
            "--verify-hostnames=off",
            "--cure",
            "auto",
        ],
        Some(&input),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "  cure             native (proven: ipMode: Proxy is honoured here: 198.51.100.20:80 answered\\nLoad balancer evil/evil\\u{202e})\n"
        ),
        "{text}"
    );
    assert!(!text.contains("\nLoad balancer evil/evil"), "{text}");
    // Only the hcloud load balancer's names keep DNS rules.
    assert!(
        text.contains("DNS\n  mode corefile (cluster domain cluster.local), 3 hostnames"),
        "{text}"
    );
}

/// By default an offline plan resolves nothing: each name is listed as not verified, no rule
/// is planned for it (what `-o yaml` prints is safe to apply), and the output says how to
/// plan them anyway.
#[test]
fn an_offline_plan_lists_the_names_it_did_not_verify() {
    let out = support::hairpin_command()
        .args(["plan", "-f", EXAMPLE])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "\nUnverified (hostnames not redirected: not proven to resolve to their load balancer)\n"
        ),
        "{text}"
    );
    for name in ["shop.example.com", "*.apps.example.com", "*.example.org"] {
        let row = text
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}:\n{text}"));
        assert!(row.contains("has not been resolved yet"), "{row}");
    }
    assert!(
        text.contains("`--verify-hostnames=off` plans them"),
        "{text}"
    );
    assert!(text.contains("  hostnames (0)\n"), "{text}");
    let yaml = support::hairpin_command()
        .args(["plan", "-f", EXAMPLE, "-o", "yaml"])
        .output()
        .unwrap();
    let yaml = stdout(&yaml);
    assert!(!yaml.contains("shop.example.com"), "{yaml}");
}

#[test]
fn diff_of_the_example() {
    let out = hairpin(&["plan", "-f", EXAMPLE, "-o", "diff"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let diff = stdout(&out);
    assert!(
        diff.starts_with(
            "--- a/kube-system/coredns/Corefile\n+++ b/kube-system/coredns/Corefile\n@@ "
        ),
        "{diff}"
    );
    assert!(diff.contains("\n+    # BEGIN hairpin"), "{diff}");
    assert!(
        diff.contains("\n+    # BEGIN hairpin (managed by hairpin; do not edit)\n+    rewrite stop name regex "),
        "{diff}"
    );
    assert!(
        diff.contains("\n     kubernetes cluster.local in-addr.arpa ip6.arpa {"),
        "context line kept:\n{diff}"
    );
    // The Ingress wildcard covers one label, the Gateway listener's one or more, after it. A
    // load balancer's exact names share one rule with its one-label wildcards, and from three
    // names on have one rule without them (each rule costs every query that reaches it).
    let ingress_wildcard = "\n+    rewrite stop name regex ^(?:shop\\.example\\.com|www\\.shop\\.example\\.com|[^.]+\\.apps\\.example\\.com)\\.$ hairpin-ingress-nginx-ingress-nginx-controller.hairpin.svc.cluster.local answer auto\n";
    let gateway_wildcard = "\n+    rewrite stop name regex ^(?:[^.]+\\.)+example\\.org\\.$ hairpin-traefik-traefik.hairpin.svc.cluster.local answer auto\n";
    let at = |rule: &str| {
        diff.find(rule)
            .unwrap_or_else(|| panic!("{rule:?} missing in:\n{diff}"))
    };
    assert!(at(ingress_wildcard) < at(gateway_wildcard), "{diff}");
    assert!(
        at(
            "\n+    rewrite stop name regex ^(?:auth\\.example\\.org|docs\\.example\\.org|metrics\\.example\\.org)\\.$ "
        ) < at(gateway_wildcard),
        "exact names before the wildcards that cover them:\n{diff}"
    );
    assert!(
        diff.contains("--- /dev/null\n+++ b/hairpin/hairpin-routes/routes.json\n"),
        "{diff}"
    );
    // Only additions: nothing of the existing Corefile is removed.
    assert!(
        !diff
            .lines()
            .any(|l| l.starts_with('-') && !l.starts_with("---")),
        "{diff}"
    );
}

#[test]
fn yaml_of_the_example_reads_back_as_typed_objects() {
    let out = hairpin(&["plan", "-f", EXAMPLE, "-o", "yaml"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert!(
        yaml.starts_with("---\napiVersion: v1\nkind: Service\n"),
        "{yaml}"
    );
    let mut objects = ClusterSnapshot::default();
    let notes = load_yaml(&mut objects, "plan-output", &yaml).unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(objects.services.len(), 2);
    assert_eq!(objects.config_maps.len(), 2);
    let svc = &objects.services[0];
    assert_eq!(
        svc.metadata.name.as_deref(),
        Some("hairpin-ingress-nginx-ingress-nginx-controller")
    );
    assert_eq!(
        svc.metadata.resource_version, None,
        "new objects carry no resourceVersion"
    );
    assert_eq!(
        svc.spec.as_ref().unwrap().type_.as_deref(),
        Some("ClusterIP")
    );
    let coredns = objects.config_map("kube-system", "coredns").unwrap();
    assert_eq!(
        coredns.metadata.resource_version.as_deref(),
        Some("4711"),
        "update guarded by resourceVersion"
    );
    assert!(coredns.data.as_ref().unwrap()["Corefile"].contains("# BEGIN hairpin"));
    let routes = objects.config_map("hairpin", "hairpin-routes").unwrap();
    let table: Vec<serde_json::Value> =
        serde_json::from_str(&routes.data.as_ref().unwrap()["routes.json"]).unwrap();
    assert_eq!(table.len(), 4);
    for route in &table {
        let keys: Vec<&String> = route.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "destination",
                "listen",
                "name",
                "proxy_protocol",
                "upstream"
            ]
        );
    }
    assert_eq!(
        table[3]["upstream"],
        "traefik.traefik.svc.cluster.local:443"
    );
    assert_eq!(table[3]["proxy_protocol"], "v2");
    // The proxy reads and validates exactly this table.
    let json = &routes.data.as_ref().unwrap()["routes.json"];
    let parsed = hairpin_dataplane::routes::RouteTable::from_json(json.as_bytes()).unwrap();
    assert_eq!(parsed.len(), 4);
    let route = parsed.get("traefik/traefik/443").unwrap();
    assert_eq!(route.listen.to_string(), "[::]:10003");
    assert_eq!(
        route.destination.map(|d| d.to_string()).as_deref(),
        Some("198.51.100.20:443")
    );
}

/// A Linode NodeBalancer with PROXY v2 on 443 only (per-port setting); SMTP on 25 is plain.
const MIXED_LB: &str = r#"
---
apiVersion: v1
kind: Service
metadata:
  name: relay
  namespace: mail
  annotations:
    service.beta.kubernetes.io/linode-loadbalancer-default-proxy-protocol: none
    service.beta.kubernetes.io/linode-loadbalancer-port-443: '{"proxy-protocol": "v2"}'
    hairpin.io/hostnames: mail.example.net
spec:
  type: LoadBalancer
  selector:
    app: relay
  ports:
    - name: smtp
      port: 25
      targetPort: 2525
    - name: https
      port: 443
      targetPort: 8443
status:
  loadBalancer:
    ingress:
      - ip: 192.0.2.60
"#;

#[test]
fn plain_ports_are_planned_as_routes_the_proxy_accepts() {
    let input = format!("{}{MIXED_LB}", std::fs::read_to_string(EXAMPLE).unwrap());

    let out = hairpin(&["plan", "-f", "-"], Some(&input));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "Load balancer mail/relay
",
        "    [::]:10002      -> relay.mail.svc.cluster.local:25   PROXY none  no header, bytes forwarded as they are
",
        "    [::]:10003      -> relay.mail.svc.cluster.local:443  PROXY v2    destination 192.0.2.60:443
",
        // Load balancers without plain ports keep the narrow column.
        "PROXY v1  destination 203.0.113.10:80
",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        !text.contains("does not use the PROXY protocol"),
        "no stale warning:\n{text}"
    );

    let out = hairpin(&["plan", "-f", "-", "-o", "yaml"], Some(&input));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut objects = ClusterSnapshot::default();
    load_yaml(&mut objects, "plan-output", &stdout(&out)).unwrap();
    // The hairpin Service answers on both ports of the load balancer.
    let svc = objects.service("hairpin", "hairpin-mail-relay").unwrap();
    let ports: Vec<(i32, Option<IntOrString>)> = svc
        .spec
        .as_ref()
        .unwrap()
        .ports
        .iter()
        .flatten()
        .map(|p| (p.port, p.target_port.clone()))
        .collect();
    assert_eq!(
        ports,
        [
            (25, Some(IntOrString::Int(10002))),
            (443, Some(IntOrString::Int(10003)))
        ]
    );
    // The proxy reads and validates the planner's table, plain route included.
    let routes = objects.config_map("hairpin", "hairpin-routes").unwrap();
    let json = &routes.data.as_ref().unwrap()["routes.json"];
    let table = hairpin_dataplane::routes::RouteTable::from_json(json.as_bytes()).unwrap();
    assert_eq!(table.len(), 6);
    let smtp = table.get("mail/relay/25").unwrap();
    assert_eq!(
        smtp.proxy_protocol,
        hairpin_dataplane::routes::ProxyProtocol::None
    );
    assert_eq!(smtp.listen.to_string(), "[::]:10002");
    assert_eq!(smtp.upstream.to_string(), "relay.mail.svc.cluster.local:25");
    let https = table.get("mail/relay/443").unwrap();
    assert_eq!(
        https.proxy_protocol,
        hairpin_dataplane::routes::ProxyProtocol::V2
    );
    assert_eq!(
        https.destination.map(|d| d.to_string()).as_deref(),
        Some("192.0.2.60:443")
    );
}

#[test]
fn stdin_input_and_flags_from_the_environment() {
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let out = hairpin(
        &[
            "plan",
            "-f",
            "-",
            "-o",
            "yaml",
            "--listener-port-base",
            "20000",
        ],
        Some(&example),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("targetPort: 20000"),
        "{}",
        stdout(&out)
    );

    let out = support::hairpin(&["plan", "-f", EXAMPLE, "-o", "yaml"])
        .env("HAIRPIN_NAMESPACE", "net")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("namespace: net\n"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains(".net.svc.cluster.local"),
        "{}",
        stdout(&out)
    );
}

/// (hostname, reason) of each row of the text output's Refused section.
fn refused_rows(text: &str) -> Vec<(String, String)> {
    let section = text
        .split("\nRefused (hostnames hairpin will not redirect)\n")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .unwrap_or_else(|| panic!("no Refused section in:\n{text}"));
    section
        .lines()
        .map(|l| {
            let mut cols = l.split_whitespace().map(str::to_owned);
            (cols.next().unwrap(), cols.next().unwrap())
        })
        .collect()
}

#[test]
fn refused_hostnames_are_listed_in_text_and_yaml() {
    let out = hairpin(&["plan", "-f", TENANT], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let rows = refused_rows(&text);
    let want = [
        ("*.co.uk", "public_suffix"),
        ("*.svc.cluster.local", "cluster_zone"),
        ("kubernetes.default.svc.cluster.local", "cluster_zone"),
        ("localhost", "localhost"),
        ("metadata.google.internal", "cloud_metadata"),
    ]
    .map(|(h, r)| (h.to_owned(), r.to_owned()));
    assert_eq!(rows, want);
    assert!(
        text.contains("  hostnames (2)\n"),
        "only the legitimate hosts are planned:\n{text}"
    );
    assert!(
        text.contains("  - Ingress tenant-a/storefront: hostname localhost refused (localhost)")
    );

    let out = hairpin(&["plan", "-f", TENANT, "-o", "yaml"], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert_eq!(yaml.matches("# refused: hostname ").count(), 5, "{yaml}");
    assert!(!yaml.contains("svc\\.cluster\\.local\\.$"), "{yaml}");
    assert!(!yaml.contains("metadata.google.internal hairpin"), "{yaml}");
}

#[test]
fn admission_flags_and_their_environment_variables() {
    // `--deny-hostnames`: the tenant's own name is refused too.
    let out = hairpin(
        &[
            "plan",
            "-f",
            TENANT,
            "--deny-hostnames",
            "tenant-a.example.com",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        refused_rows(&stdout(&out))
            .contains(&("shop.tenant-a.example.com".into(), "denied".into())),
        "{}",
        stdout(&out)
    );
    // `HAIRPIN_HOSTNAME_NAMESPACES`: a namespace outside the list claims nothing.
    let out = support::hairpin_command()
        .args(["plan", "-f", TENANT])
        .env("HAIRPIN_HOSTNAME_NAMESPACES", "tenant-b")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let rows = refused_rows(&text);
    for host in ["shop.tenant-a.example.com", "*.apps.tenant-a.example.co.uk"] {
        assert!(
            rows.contains(&(host.into(), "namespace_not_allowed".into())),
            "{text}"
        );
    }
    assert!(
        text.contains("  hostnames (0)\n"),
        "nothing planned:\n{text}"
    );
    // Bad values are usage errors.
    for (flag, value) in [
        ("--deny-hostnames", "a..b"),
        ("--hostname-namespaces", "web,team=web"),
    ] {
        let out = hairpin(&["plan", "-f", TENANT, flag, value], None);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}");
        assert!(stderr(&out).contains(flag), "{}", stderr(&out));
    }
}

#[test]
fn bad_yaml_names_the_file_and_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\nkind: Service\nmetadata: [oops\n",
    )
    .unwrap();
    let out = hairpin(&["plan", "-f", EXAMPLE, "-f", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}: document 2 (line 6)", path.display())),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "no partial plan on bad input");

    let out = hairpin(
        &["plan", "-f", "-"],
        Some("kind: Service\nmetadata: {name: [x\n"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("-: document 1"), "{}", stderr(&out));

    let out = hairpin(&["plan", "-f", "/nonexistent/cluster.yaml"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent/cluster.yaml"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn corefile_without_kubernetes_block_exits_non_zero_and_writes_no_dns() {
    let example = std::fs::read_to_string(EXAMPLE).unwrap();
    let broken = example.replace(
        "        kubernetes cluster.local in-addr.arpa ip6.arpa {",
        "        file /etc/db {",
    );
    assert_ne!(broken, example);
    let out = hairpin(&["plan", "-f", "-"], Some(&broken));
    assert_eq!(
        out.status.code(),
        Some(3),
        "a partial plan, not a usage error"
    );
    let text = stdout(&out);
    assert!(
        text.contains("Errors (nothing is written for these)"),
        "{text}"
    );
    assert!(text.contains("kube-system/coredns"), "{text}");

    let out = hairpin(&["plan", "-f", "-", "-o", "yaml"], Some(&broken));
    assert_eq!(out.status.code(), Some(3));
    assert!(!stdout(&out).contains("name: coredns"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("error: ConfigMap kube-system/coredns"),
        "{}",
        stderr(&out)
    );
}

/// `hairpin plan -f <fixture>` prints exactly the golden plan of each fixture under
/// `crates/planner/tests/fixtures/plans/` (providers, hostname sources, cluster shapes).
#[test]
fn plan_of_each_fixture_is_its_golden() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../planner/tests");
    let mut checked = 0;
    for entry in std::fs::read_dir(format!("{root}/fixtures/plans")).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".yaml"))
        else {
            continue;
        };
        // A fixture's `# planner: --<flag> <value>` lines are the flags it is planned with.
        let text = std::fs::read_to_string(&path).unwrap();
        let mut args = vec!["plan", "-f", path.to_str().unwrap()];
        args.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("# planner: "))
                .flat_map(str::split_whitespace),
        );
        let out = hairpin(&args, None);
        let golden =
            std::fs::read_to_string(format!("{root}/golden/plans/{name}.plan.txt")).unwrap();
        // A plan with errors (a kube-dns cluster has no Corefile) is partial: exit 3.
        let partial = golden.contains("\nErrors (nothing is written for these)\n");
        assert_eq!(
            out.status.code(),
            Some(if partial { 3 } else { 0 }),
            "{name}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), golden, "{name}");
        checked += 1;
    }
    assert!(checked > 0);
}

const KUBE_DNS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../planner/tests/fixtures/plans/dns-kube-dns-stub-domains.yaml"
);

/// On kube-dns, `--stub-domain-nameserver` (or its environment variable) turns the plan's
/// hostnames into a `stubDomains` value; without it the plan names the flag. kube-dns's
/// ConfigMap is never among the objects written.
#[test]
fn kube_dns_clusters_get_the_stub_domains_value_for_the_nameserver_given() {
    let out = hairpin(&["plan", "-f", KUBE_DNS], None);
    assert_eq!(out.status.code(), Some(3), "no Corefile: a partial plan");
    let text = stdout(&out);
    assert!(
        text.contains("hostnames: api.example.com, shop.example.com\n"),
        "{text}"
    );
    assert!(
        text.contains("rerun with --stub-domain-nameserver <IP of that server>"),
        "{text}"
    );
    assert!(
        !text.contains("data.stubDomains"),
        "no server, no value:\n{text}"
    );
    assert!(text.contains("also captures every name under it"), "{text}");

    let value = r#"{"api.example.com": ["10.96.0.53", "[fd00::53]:5353"], "shop.example.com": ["10.96.0.53", "[fd00::53]:5353"]}"#;
    let out = hairpin(
        &[
            "plan",
            "-f",
            KUBE_DNS,
            "--stub-domain-nameserver",
            "10.96.0.53",
            "--stub-domain-nameserver",
            "[fd00::53]:5353",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("  data.stubDomains:\n    {value}\n")),
        "{text}"
    );
    assert!(
        text.contains("left out (a stub domain for the parent would take the parent name too): *.apps.example.com"),
        "{text}"
    );

    let out = support::hairpin(&["plan", "-f", KUBE_DNS, "-o", "json"])
        .env(
            "HAIRPIN_STUB_DOMAIN_NAMESERVERS",
            "10.96.0.53,[fd00::53]:5353",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let document: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stub = &document["kubeDnsStubDomains"];
    assert_eq!(stub["configMap"], "kube-system/kube-dns");
    assert_eq!(stub["value"], value);
    assert_eq!(stub["wildcardsLeftOut"][0], "*.apps.example.com");
    let parsed: serde_json::Value = serde_json::from_str(value).unwrap();
    assert_eq!(parsed["shop.example.com"][1], "[fd00::53]:5353");

    let out = hairpin(
        &[
            "plan",
            "-f",
            KUBE_DNS,
            "-o",
            "yaml",
            "--stub-domain-nameserver",
            "10.96.0.53",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    assert!(
        !stdout(&out).contains("namespace: kube-system"),
        "{}",
        stdout(&out)
    );

    // A cluster with a Corefile gets no stub domains, whatever the flag says.
    let out = hairpin(
        &[
            "plan",
            "-f",
            EXAMPLE,
            "--stub-domain-nameserver",
            "10.96.0.53",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stdout(&out).contains("stubDomains"), "{}", stdout(&out));

    for bad in ["dns.example.com", "127.0.0.1", "10.96.0.53:0"] {
        let out = hairpin(
            &["plan", "-f", KUBE_DNS, "--stub-domain-nameserver", bad],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{bad}: a usage error");
        assert!(
            stderr(&out).contains("--stub-domain-nameserver"),
            "{bad}: {}",
            stderr(&out)
        );
    }
}

/// A `ClusterRoleBinding` to `cluster-admin` as YAML, folded into one annotation value.
const CLUSTER_ADMIN: &str = "x\\n---\\napiVersion: rbac.authorization.k8s.io/v1\\nkind: ClusterRoleBinding\\nmetadata:\\n  name: pwn\\nroleRef:\\n  apiGroup: rbac.authorization.k8s.io\\n  kind: ClusterRole\\n  name: cluster-admin\\nsubjects:\\n- kind: ServiceAccount\\n  name: default\\n  namespace: tenant-a\\n#";

/// The kinds of the documents of `-o yaml` output, parsed as YAML (objects of kinds the
/// planner does not read are listed by their notes).
fn yaml_kinds(yaml: &str) -> Vec<String> {
    let mut objects = ClusterSnapshot::default();
    let notes = load_yaml(&mut objects, "plan-output", yaml).unwrap();
    let mut kinds: Vec<String> = objects
        .services
        .iter()
        .map(|_| "Service".to_owned())
        .collect();
    kinds.extend(objects.config_maps.iter().map(|_| "ConfigMap".to_owned()));
    kinds.extend(notes);
    kinds
}

/// The column-0 lines of the text output after its first: its section headers.
fn text_sections(text: &str) -> Vec<&str> {
    text.lines()
        .skip(1)
        .filter(|l| !l.is_empty() && !l.starts_with(' '))
        .collect()
}

#[test]
fn a_refused_annotation_cannot_add_a_document_to_the_yaml() {
    let clean = stdout(&hairpin(&["plan", "-f", TENANT, "-o", "yaml"], None));
    let evil = format!(
        "{}\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: evil\n  namespace: tenant-a\n  \
         annotations:\n    external-dns.alpha.kubernetes.io/hostname: \"evil.example.com,{CLUSTER_ADMIN}\"\n\
         spec:\n  type: LoadBalancer\n  ports: [{{ port: 80 }}]\n\
         status: {{ loadBalancer: {{ ingress: [{{ ip: 203.0.113.10 }}] }} }}\n",
        std::fs::read_to_string(TENANT).unwrap()
    );
    let out = hairpin(&["plan", "-f", "-", "-o", "yaml"], Some(&evil));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let yaml = stdout(&out);
    assert_eq!(
        yaml_kinds(&yaml),
        ["Service", "ConfigMap", "ConfigMap"],
        "{yaml}"
    );
    assert_eq!(yaml_kinds(&yaml), yaml_kinds(&clean));
    assert!(!yaml.contains("\nkind: ClusterRoleBinding"), "{yaml}");
    // The refusal is one comment line that shows the value, escaped.
    let comment = yaml
        .lines()
        .find(|l| l.starts_with("# refused: hostname x\\n---\\napiVersion"))
        .unwrap_or_else(|| panic!("{yaml}"));
    assert!(
        comment.contains("(invalid) from Service tenant-a/evil annotation"),
        "{comment}"
    );
    let head: Vec<&str> = yaml.split("\n---\n").next().unwrap().lines().collect();
    assert!(head.iter().all(|l| l.starts_with("# ")), "{head:?}");
    assert_eq!(
        head.len(),
        6,
        "five refusals of the tenant's Ingress and this one"
    );

    // The text output: the same sections, the refusal one row.
    let text = stdout(&hairpin(&["plan", "-f", "-"], Some(&evil)));
    let clean_text = stdout(&hairpin(&["plan", "-f", TENANT], None));
    // The evil Service is a load balancer without PROXY: a `Not needed` section.
    let mut want = text_sections(&clean_text);
    want.insert(1, "Not needed");
    assert_eq!(text_sections(&text), want, "{text}");
    assert_eq!(refused_rows(&text).len(), 6, "{text}");
}

#[test]
fn an_httproute_annotation_cannot_add_a_secret_with_hostname_namespaces() {
    let secret = "x\\n---\\napiVersion: v1\\nkind: Secret\\nmetadata:\\n  name: stolen\\n  namespace: kube-system\\nstringData:\\n  a: b\\n#";
    let input = format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: gw
  namespace: infra
  annotations: {{ hairpin.io/proxy-protocol: v2 }}
spec:
  type: LoadBalancer
  ports: [{{ name: https, port: 443 }}]
status: {{ loadBalancer: {{ ingress: [{{ ip: 192.0.2.5 }}] }} }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{ name: public, namespace: infra }}
spec:
  gatewayClassName: example
  addresses: [{{ type: IPAddress, value: 192.0.2.5 }}]
  listeners:
    - {{ name: wild, port: 443, protocol: HTTPS, allowedRoutes: {{ namespaces: {{ from: All }} }} }}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
  namespace: tenant-b
  annotations:
    external-dns.alpha.kubernetes.io/hostname: "{secret}"
spec:
  parentRefs: [{{ name: public, namespace: infra }}]
  hostnames: [www.example.com]
"#
    );
    for output in ["yaml", "text"] {
        let out = hairpin(
            &[
                "plan",
                "-f",
                "-",
                "-o",
                output,
                "--hostname-namespaces",
                "infra",
            ],
            Some(&input),
        );
        let printed = stdout(&out);
        assert!(!printed.contains("\nkind: Secret"), "{printed}");
        assert!(
            printed.contains("x\\n---\\napiVersion: v1\\nkind: Secret"),
            "the value is shown, escaped:\n{printed}"
        );
        if output == "yaml" {
            assert_eq!(yaml_kinds(&printed), ["Service", "ConfigMap"], "{printed}");
            let refusals = printed
                .lines()
                .filter(|l| l.starts_with("# refused: "))
                .count();
            assert_eq!(refusals, 2, "{printed}");
        } else {
            let rows = refused_rows(&printed);
            assert_eq!(rows.len(), 2, "{printed}");
            assert_eq!(
                rows[0],
                ("www.example.com".into(), "namespace_not_allowed".into())
            );
            assert!(
                printed.contains("\n  x\\n---\\napiVersion: v1\\nkind: Secret\\nmetadata:"),
                "one row:\n{printed}"
            );
        }
    }
}

#[test]
fn text_output_sections_cannot_be_spoofed() {
    // A host that tries to close the Refused section and open an Errors section and a load
    // balancer of its own, with a terminal escape for good measure.
    let spoof = "a.example.com\\n\\nErrors (nothing is written for these)\\n  - none\\n\\nLoad balancer kube-system/kube-dns\\u001b[2K";
    let input = format!(
        "{}\n---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{ name: spoof, namespace: tenant-a }}\n\
         spec:\n  ingressClassName: nginx\n  rules: [{{ host: \"{spoof}\" }}]\n\
         status: {{ loadBalancer: {{ ingress: [{{ ip: 203.0.113.10 }}] }} }}\n",
        std::fs::read_to_string(TENANT).unwrap()
    );
    let out = hairpin(&["plan", "-f", "-"], Some(&input));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let clean = stdout(&hairpin(&["plan", "-f", TENANT], None));
    assert_eq!(text_sections(&text), text_sections(&clean), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    assert!(
        text.chars().all(|c| c == '\n' || (' '..='~').contains(&c)),
        "{text}"
    );
    let rows = refused_rows(&text);
    assert_eq!(rows.len(), 6, "{text}");
    assert!(
        text.contains("  a.example.com\\n\\nErrors (nothing is written for these)\\n  - none\\n\\nLoad balancer kube-system/kube-dns\\u{1b}[2K  invalid"),
        "{text}"
    );
}

/// `--routes-configmap` takes `NAMESPACE/NAME` here as for `hairpin proxy`; a bare NAME is
/// in hairpin's namespace, and another namespace is refused with what to write instead.
#[test]
fn the_routes_configmap_is_named_namespace_slash_name_in_hairpins_namespace() {
    let routes_of = |args: &[&str]| {
        let out = hairpin(
            &[&["plan", "-f", EXAMPLE, "-o", "yaml"], args].concat(),
            None,
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let mut objects = ClusterSnapshot::default();
        load_yaml(&mut objects, "plan-output", &stdout(&out)).unwrap();
        objects
            .config_maps
            .iter()
            .filter(|cm| {
                cm.data
                    .as_ref()
                    .is_some_and(|d| d.contains_key("routes.json"))
            })
            .map(|cm| {
                let meta = &cm.metadata;
                format!(
                    "{}/{}",
                    meta.namespace.as_deref().unwrap(),
                    meta.name.as_deref().unwrap()
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(routes_of(&[]), ["hairpin/hairpin-routes"]);
    assert_eq!(
        routes_of(&["--routes-configmap", "hairpin/custom-routes"]),
        ["hairpin/custom-routes"]
    );
    assert_eq!(
        routes_of(&["-n", "net", "--routes-configmap", "net/custom-routes"]),
        ["net/custom-routes"]
    );
    assert_eq!(
        routes_of(&["--routes-configmap", "custom-routes"]),
        ["hairpin/custom-routes"]
    );

    let elsewhere = ["--routes-configmap", "other/custom-routes"];
    let out = hairpin(&[&["plan", "-f", EXAMPLE][..], &elsewhere].concat(), None);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("--routes-configmap \"other/custom-routes\"")
            && err.contains("hairpin's namespace, \"hairpin\"")
            && err.contains("use \"hairpin/custom-routes\""),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "nothing planned: {}", stdout(&out));

    let out = hairpin(
        &["plan", "-f", EXAMPLE, "--routes-configmap", "a/b/c"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(stderr(&out).contains("NAMESPACE/NAME"), "{}", stderr(&out));
}
