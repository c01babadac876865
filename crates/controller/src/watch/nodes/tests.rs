use super::{NodeVersion, fingerprint};

fn node(kubelet: &str, kube_proxy: &str) -> NodeVersion {
    NodeVersion {
        kubelet: kubelet.into(),
        kube_proxy: kube_proxy.into(),
    }
}

#[test]
fn the_fingerprint_is_the_distinct_versions_sorted() {
    let nodes = [
        node("v1.32.0", ""),
        node("v1.31.14", "v1.31.14"),
        node("v1.31.14", ""),
    ];
    assert_eq!(
        fingerprint(nodes.iter()),
        "kubelet@v1.31.14,v1.32.0; kube-proxy@v1.31.14"
    );
    // One more Node of a version already seen changes nothing; a new version does.
    let more = [nodes[1].clone(), nodes[0].clone(), nodes[1].clone()];
    assert_eq!(fingerprint(more.iter()), fingerprint(nodes.iter()));
    assert_eq!(fingerprint([node("", "")].iter()), "");
}
