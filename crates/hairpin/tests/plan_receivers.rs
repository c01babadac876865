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
