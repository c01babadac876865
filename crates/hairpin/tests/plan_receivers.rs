//! `hairpin plan` on a bare-metal cluster (issue 31): no provider annotation and no hairpin
//! annotation, only ingress-nginx's own `use-proxy-protocol: "true"`, and the load balancer is
//! hairpinned with zero configuration.

mod support;

use std::process::Stdio;

const BARE_METAL: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/bare-metal.yaml"
);

fn plan(args: &[&str]) -> (Option<i32>, String, String) {
    let mut cmd = support::hairpin(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn bare_metal_ingress_nginx_is_hairpinned_from_its_own_setting() {
    let (code, text, err) = plan(&["plan", "-f", BARE_METAL]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.starts_with("hairpin plan: 1 load balancer needs a hairpin, 0 do not\n"),
        "{text}"
    );
    for expected in [
        "Load balancer ingress-nginx/ingress-nginx-controller",
        "PROXY from       ingress-nginx use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)",
        "receiver         ingress-nginx Deployment ingress-nginx/ingress-nginx-controller: PROXY required by use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)",
        "PROXY v1  destination 192.0.2.80:443",
        "git.example.net",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
}

#[test]
fn bare_metal_json_names_the_receiver_setting_as_the_proxy_source() {
    let (code, json, err) = plan(&["plan", "-f", BARE_METAL, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lb = &doc["loadBalancers"][0];
    assert_eq!(lb["service"], "ingress-nginx/ingress-nginx-controller");
    assert_eq!(
        lb["proxySources"][0],
        "ingress-nginx use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)"
    );
    assert_eq!(lb["routes"][0]["proxyProtocol"], "v1");
}

#[test]
fn bare_metal_json_names_the_receiver_of_the_load_balancer() {
    let (code, json, err) = plan(&["plan", "-f", BARE_METAL, "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        doc["loadBalancers"][0]["receiver"],
        serde_json::json!({
            "implementation": "ingress-nginx",
            "name": "ingress-nginx",
            "workload": "Deployment ingress-nginx/ingress-nginx-controller",
            "proxyProtocol": "required",
            "setting": "use-proxy-protocol: \"true\"",
            "readFrom": "ConfigMap ingress-nginx/ingress-nginx-controller",
        })
    );
}

/// Against a cluster (the fake API server holding the example's objects), `hairpin plan` reads
/// the receiver as the controller does: the same receiver and the same load balancer as `-f`.
#[tokio::test]
async fn a_live_plan_reads_the_receiver_as_the_offline_one() {
    let fake = hairpin_fake_apiserver::FakeApiServer::start().await;
    for doc in std::fs::read_to_string(BARE_METAL).unwrap().split("\n---") {
        let object: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
        if !object.is_null() {
            fake.apply(object);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = fake
        .write_kubeconfig(dir.path())
        .to_str()
        .unwrap()
        .to_owned();
    let live = |output: &'static str| {
        let kubeconfig = kubeconfig.clone();
        tokio::task::spawn_blocking(move || {
            plan(&[
                "plan",
                "--kubeconfig",
                &kubeconfig,
                "--verify-hostnames=off",
                "-o",
                output,
            ])
        })
    };
    let (code, json, err) = live("json").await.unwrap();
    assert_eq!(code, Some(0), "{err}");
    let (_, offline, _) = plan(&[
        "plan",
        "-f",
        BARE_METAL,
        "--verify-hostnames=off",
        "--cure",
        "auto",
        "-o",
        "json",
    ]);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let offline: serde_json::Value = serde_json::from_str(&offline).unwrap();
    assert_eq!(doc["source"], "cluster");
    let lb = &doc["loadBalancers"][0];
    assert_eq!(lb["receiver"], offline["loadBalancers"][0]["receiver"]);
    assert_eq!(
        lb["proxySources"],
        offline["loadBalancers"][0]["proxySources"]
    );
    assert_eq!(lb["hostnames"], offline["loadBalancers"][0]["hostnames"]);
    let (code, text, err) = live("text").await.unwrap();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.contains("receiver         ingress-nginx Deployment ingress-nginx/ingress-nginx-controller: PROXY required by use-proxy-protocol: \"true\" (ConfigMap ingress-nginx/ingress-nginx-controller)"),
        "{text}"
    );
}

/// Issue 38: a receiver whose setting differs per port (Kong with `proxy_protocol` on its 8443
/// listeners only) is shown per port, and only that port is hairpinned with PROXY.
#[test]
fn a_per_port_receiver_is_shown_per_port() {
    let receivers = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../planner/tests/fixtures/receivers/kong-tls-only.yaml"
    );
    // The fixture and a CoreDNS ConfigMap to plan the DNS rule in.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    let coredns = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: coredns\n  namespace: kube-system\ndata:\n  Corefile: |\n    .:53 {\n        kubernetes cluster.local in-addr.arpa ip6.arpa\n        forward . /etc/resolv.conf\n    }\n";
    std::fs::write(&path, std::fs::read_to_string(receivers).unwrap() + coredns).unwrap();
    let fixture = path.to_str().unwrap();
    let (code, json, err) = plan(&[
        "plan",
        "-f",
        fixture,
        "-o",
        "json",
        "--verify-hostnames=off",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let receiver = &doc["loadBalancers"][0]["receiver"];
    assert_eq!(receiver["proxyProtocol"], "per-port", "{json}");
    let ports: Vec<(i64, &str)> = receiver["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_i64().unwrap(),
                p["proxyProtocol"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [(80, "off"), (443, "required")]);
    let (code, text, err) = plan(&["plan", "-f", fixture, "--verify-hostnames=off"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        text.contains("PROXY per port: 80 (kong-proxy) off by KONG_PROXY_LISTEN 0.0.0.0:8000, [::]:8000: no proxy_protocol (Deployment kong/kong-kong); 443 (kong-proxy-tls) required by"),
        "{text}"
    );
}

/// Issue 36: nothing says how this load balancer reaches the nodes (a MetalLB address with an
/// HAProxy pair in front, or a proxy appliance): `auto` (the default) does not try the native
/// cure, and the plan says why and how to declare it.
#[test]
fn bare_metal_plan_says_why_native_is_not_tried() {
    // The test helper sets HAIRPIN_CURE=dns: the flag says what the default is.
    let (code, text, err) = plan(&[
        "plan",
        "-f",
        BARE_METAL,
        "--verify-hostnames=off",
        "--cure",
        "auto",
    ]);
    assert_eq!(code, Some(0), "{err}");
    for expected in [
        "  cure             dns (native not tried: not known to be a proxy load balancer (no provider annotation or VIP implementation says how it reaches the nodes; declare it with hairpin.io/delivery: proxy or vip))\n",
        "  delivery         unknown: no provider annotation or VIP implementation says how it reaches the nodes; declare it with hairpin.io/delivery: proxy or vip\n",
    ] {
        assert!(text.contains(expected), "missing {expected:?}:\n{text}");
    }
    let (code, json, err) = plan(&[
        "plan",
        "-f",
        BARE_METAL,
        "--verify-hostnames=off",
        "--cure",
        "auto",
        "-o",
        "json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cure = &doc["cures"][0];
    assert_eq!(cure["cure"], "dns");
    assert_eq!(cure["mode"], "auto");
    assert_eq!(cure["delivery"]["kind"], "unknown");
    assert!(cure.get("native").is_none(), "{cure}");
}

/// The same cluster on a MetalLB address, and `--cure native`: refused, with the outage named
/// in the warning, and the DNS cure in place.
#[test]
fn forcing_native_on_a_metallb_address_is_refused_with_the_outage() {
    let text = std::fs::read_to_string(BARE_METAL)
        .unwrap()
        .replacen(
            "  namespace: ingress-nginx\n  labels:",
            "  namespace: ingress-nginx\n  annotations:\n    metallb.io/address-pool: public\n  labels:",
            1,
        );
    assert!(text.contains("metallb.io/address-pool"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metallb.yaml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap();
    for cure in ["auto", "native"] {
        let (code, text, err) =
            plan(&["plan", "-f", path, "--verify-hostnames=off", "--cure", cure]);
        assert_eq!(code, Some(0), "{err}");
        assert!(
            text.contains(
                "  delivery         vip: MetalLB, annotation metallb.io/address-pool=public\n"
            ),
            "{text}"
        );
        assert!(text.contains("  cure             dns ("), "{text}");
        let warned = text.contains(
            "would cut off every client outside the cluster: kube-proxy drops every rule for that IP. It stays on the DNS cure",
        );
        assert_eq!(warned, cure == "native", "--cure {cure}:\n{text}");
        assert!(text.contains("git.example.net"), "{text}");
    }
}
