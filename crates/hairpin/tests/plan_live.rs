//! `hairpin plan` against a cluster (the fake API server, through a kubeconfig file): it only
//! reads, and what it prints is what the controller then writes.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hairpin_fake_apiserver::{FakeApiServer, Recorded, object};
use serde_json::{Value, json};
use support::hairpin;

const LB: (&str, &str) = ("ingress-nginx", "ingress-nginx-controller");
const HAIRPIN_SERVICE: &str = "hairpin-ingress-nginx-ingress-nginx-controller";

async fn run(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        hairpin(&args).output().unwrap()
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A cluster with one PROXY load balancer, an Ingress on it, CoreDNS, the Hairpin CRD, a
/// hairpin Service left over from a load balancer that is gone, and its stale Hairpin.
async fn cluster() -> FakeApiServer {
    let fake = FakeApiServer::start().await;
    fake.install_hairpin_crd();
    support::seed(&fake);
    let managed = json!({"app.kubernetes.io/managed-by": "hairpin"});
    fake.apply(object(
        "v1",
        "Service",
        Some("hairpin"),
        "hairpin-gone-gone",
        json!({
            "metadata": {"labels": managed, "annotations": {"hairpin.io/source": "gone/gone"}},
            "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 10005}]}
        }),
    ));
    fake.create_namespace("gone");
    fake.apply(object(
        "hairpin.io/v1alpha1",
        "Hairpin",
        Some("gone"),
        "gone",
        json!({
            "metadata": {"labels": managed, "annotations": {"hairpin.io/source": "gone/gone"}},
            "spec": {},
            "status": {"proxy": "v1", "hostCount": 1}
        }),
    ));
    fake
}

fn kubeconfig(fake: &FakeApiServer, dir: &Path) -> String {
    fake.write_kubeconfig(dir).to_str().unwrap().to_owned()
}

/// `(kind, namespace, name)` of a write request, from its path.
fn target(request: &Recorded) -> Option<(String, String, String)> {
    let path = request.uri.split('?').next().unwrap_or_default();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let at = parts.iter().position(|p| *p == "namespaces")?;
    let namespace = parts.get(at + 1)?.to_string();
    let plural = parts.get(at + 2)?;
    let kind = match *plural {
        "services" => "Service",
        "configmaps" => "ConfigMap",
        "hairpins" => "Hairpin",
        "events" => "Event",
        "leases" => "Lease",
        other => other,
    };
    let name = match parts.get(at + 3) {
        Some(name) => (*name).to_owned(),
        None => request.body.as_ref()?["metadata"]["name"]
            .as_str()?
            .to_owned(),
    };
    Some((kind.to_owned(), namespace, name))
}

fn is_write(request: &Recorded) -> bool {
    request.method != "GET"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_against_a_cluster_only_reads_and_prints_what_the_controller_then_writes() {
    let fake = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(&fake, dir.path());

    let plan = |output: &str| {
        run(["plan", "--kubeconfig", &kubeconfig, "-o", output]
            .map(String::from)
            .to_vec())
    };
    let json_out = plan("json").await;
    assert_eq!(
        json_out.status.code(),
        Some(0),
        "{}",
        text(&json_out.stderr)
    );
    let diff_out = plan("diff").await;
    assert_eq!(
        diff_out.status.code(),
        Some(0),
        "{}",
        text(&diff_out.stderr)
    );
    let text_out = plan("text").await;
    assert_eq!(
        text_out.status.code(),
        Some(0),
        "{}",
        text(&text_out.stderr)
    );

    // Read-only: lists, watches and discovery, all GETs.
    let requests = fake.requests();
    assert!(!requests.is_empty());
    let writes: Vec<String> = requests
        .iter()
        .filter(|r| is_write(r))
        .map(|r| format!("{} {}", r.method, r.uri))
        .collect();
    assert!(writes.is_empty(), "hairpin plan wrote: {writes:?}");
    for kind in [
        "/api/v1/services",
        "/apis/networking.k8s.io/v1/ingresses",
        "/apis/hairpin.io/v1alpha1/hairpins",
    ] {
        assert!(
            requests.iter().any(|r| r.uri.starts_with(kind)),
            "{kind} not listed"
        );
    }

    let document: Value = serde_json::from_slice(&json_out.stdout).unwrap();
    assert_eq!(document["kind"], "Plan");
    assert_eq!(document["source"], "cluster");
    assert_eq!(document["complete"], true);
    assert_eq!(
        document["loadBalancers"][0]["service"],
        format!("{}/{}", LB.0, LB.1)
    );
    let changes = document["changes"].as_array().unwrap().clone();
    let described: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "{} {} {}/{}{}",
                c["action"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
                c["namespace"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["key"]
                    .as_str()
                    .map(|k| format!(" {k}"))
                    .unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        described,
        [
            "update ConfigMap kube-system/coredns Corefile",
            "create ConfigMap hairpin/hairpin-routes routes.json",
            // No hosts.json yet: the node agents' block is published only once the hairpin
            // Service it names has its ClusterIP (never empty while names are coming).
            &format!("create Service hairpin/{HAIRPIN_SERVICE}"),
            "delete Service hairpin/hairpin-gone-gone",
            &format!("create Hairpin {}/{}", LB.0, LB.1),
            "delete Hairpin gone/gone",
        ]
    );

    // The diff covers every one of them, each under its own header.
    let diff = text(&diff_out.stdout);
    for header in [
        "--- a/kube-system/coredns/Corefile\n+++ b/kube-system/coredns/Corefile\n",
        "--- /dev/null\n+++ b/hairpin/hairpin-routes/routes.json\n",
        &format!("--- /dev/null\n+++ b/service/hairpin/{HAIRPIN_SERVICE}\n"),
        "--- a/service/hairpin/hairpin-gone-gone\n+++ /dev/null\n",
        &format!("--- /dev/null\n+++ b/hairpin/{}/{}\n", LB.0, LB.1),
        "--- a/hairpin/gone/gone\n+++ /dev/null\n",
    ] {
        assert!(diff.contains(header), "{header:?} missing in:\n{diff}");
    }
    assert!(
        diff.contains("\n+    rewrite stop name exact web.example.com "),
        "{diff}"
    );
    let summary = text(&text_out.stdout);
    assert!(
        summary.contains(
            "\nChanges against the cluster (see -o diff)\n  update  ConfigMap kube-system/coredns key Corefile\n"
        ),
        "{summary}"
    );

    // Now the controller: each of its writes is one the plan printed, with the same content.
    let before_controller = fake.requests().len();
    let mut child = hairpin(&[
        "controller",
        "--kubeconfig",
        &kubeconfig,
        "--leader-election=false",
        "--debounce",
        "50ms",
        "--admin-addr",
        "127.0.0.1:0",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let done = fake
        .wait_until(Duration::from_secs(30), |f| {
            f.get("hairpin.io/v1alpha1", "Hairpin", Some(LB.0), LB.1)
                .is_some_and(|h| h["status"]["hostCount"] == 1)
                && f.get("hairpin.io/v1alpha1", "Hairpin", Some("gone"), "gone")
                    .is_none()
                && f.get("v1", "Service", Some("hairpin"), "hairpin-gone-gone")
                    .is_none()
        })
        .await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(done.is_some(), "the controller applied the plan");

    let written: Vec<Recorded> = fake.requests()[before_controller..]
        .iter()
        .filter(|r| is_write(r) && r.status < 300)
        .cloned()
        .collect();
    let first = |kind: &str, namespace: &str, name: &str, status: bool| {
        written
            .iter()
            .find(|r| {
                target(r).is_some_and(|t| t == (kind.into(), namespace.into(), name.into()))
                    && r.uri.contains("/status") == status
            })
            .unwrap_or_else(|| {
                let seen: Vec<String> = written
                    .iter()
                    .map(|r| format!("{} {}", r.method, r.uri))
                    .collect();
                panic!("no write of {kind} {namespace}/{name} in {seen:#?}")
            })
            .clone()
    };
    for change in &changes {
        let kind = change["kind"].as_str().unwrap();
        let namespace = change["namespace"].as_str().unwrap();
        let name = change["name"].as_str().unwrap();
        let request = first(kind, namespace, name, false);
        match (kind, change["action"].as_str().unwrap()) {
            (_, "delete") => assert_eq!(request.method, "DELETE"),
            ("ConfigMap", _) => {
                let key = change["key"].as_str().unwrap();
                let body = request.body.as_ref().unwrap();
                assert_eq!(
                    body["data"][key], change["written"],
                    "{kind} {namespace}/{name}"
                );
            }
            ("Service", _) => {
                let body = request.body.as_ref().unwrap();
                let want = &change["written"];
                for field in [
                    "/metadata/labels",
                    "/metadata/annotations",
                    "/spec/type",
                    "/spec/selector",
                    "/spec/ports",
                ] {
                    assert_eq!(body.pointer(field), want.pointer(field), "{field}");
                }
            }
            ("Hairpin", _) => {
                let want = &change["written"];
                let created = request.body.as_ref().unwrap();
                for field in ["/metadata/labels", "/metadata/ownerReferences"] {
                    assert_eq!(created.pointer(field), want.pointer(field), "{field}");
                }
                let patched = first(kind, namespace, name, true);
                let status = &patched.body.as_ref().unwrap()["status"];
                for (field, value) in want["status"].as_object().unwrap() {
                    assert_eq!(&status[field], value, "status.{field}");
                }
            }
            other => panic!("unexpected change {other:?}"),
        }
    }
    // And nothing else: no write the plan did not print (Events aside, and the Hairpin's
    // later status patches, which add what is measured at run time).
    let predicted: Vec<(String, String, String)> = changes
        .iter()
        .map(|c| {
            (
                c["kind"].as_str().unwrap().to_owned(),
                c["namespace"].as_str().unwrap().to_owned(),
                c["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for request in &written {
        let target = target(request).unwrap();
        if target.0 == "Event" {
            continue;
        }
        // The hosts block the plan could not print yet (the hairpin Service had no
        // ClusterIP): written once the Service has one, with the planned name in it.
        if target == ("ConfigMap".into(), "hairpin".into(), "hairpin-hosts".into()) {
            let hosts = request.body.as_ref().unwrap()["data"]["hosts.json"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(hosts.contains("web.example.com"), "{hosts}");
            continue;
        }
        assert!(
            predicted.contains(&target),
            "the controller wrote {target:?} ({} {}), which the plan did not print",
            request.method,
            request.uri
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_read_from_a_cluster_has_the_documented_exit_codes() {
    let fake = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(&fake, dir.path());

    // Usage error: a kubeconfig that cannot be read.
    let out = run(vec![
        "plan".into(),
        "--kubeconfig".into(),
        "/nonexistent/kubeconfig".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("/nonexistent/kubeconfig"),
        "{}",
        text(&out.stderr)
    );

    // A list the user may not make: exit 1, naming what could not be listed and why.
    fake.fail_next("GET", "/ingresses", 1, 403);
    let out = run(vec![
        "plan".into(),
        "--kubeconfig".into(),
        kubeconfig.clone(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("cannot read the cluster: cannot list Ingress: ")
            && stderr.contains("forbidden"),
        "{stderr}"
    );

    // A partial plan: a Corefile hairpin cannot edit.
    fake.apply(object(
        "v1",
        "ConfigMap",
        Some("kube-system"),
        "coredns",
        json!({"data": {"Corefile": ".:53 {\n    file /etc/db\n}\n"}}),
    ));
    let out = run(vec![
        "plan".into(),
        "--kubeconfig".into(),
        kubeconfig.clone(),
        "-o".into(),
        "json".into(),
    ])
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let document: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(document["complete"], false);
    assert!(document["dns"].is_null());
    assert!(
        document["errors"][0]
            .as_str()
            .unwrap()
            .contains("kube-system/coredns"),
        "{document:#}"
    );
}

/// A kube-dns cluster (GKE Standard) read with the default planner flags: `kube-dns` is one of
/// the default `--coredns-configmap` candidates, so its ConfigMap is read (by name, as the
/// controller watches it) and the live plan prints the same `kube-dns stubDomains` part as
/// the plan of the same objects from a file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kube_dns_cluster_read_with_the_defaults_gets_the_stub_domains_part() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../planner/tests/fixtures/plans/dns-kube-dns-stub-domains.yaml"
    );
    let fake = FakeApiServer::start().await;
    fake.create_namespace("hairpin");
    let yaml = std::fs::read_to_string(fixture).unwrap();
    for document in yaml.split("\n---\n") {
        fake.apply(serde_saphyr::from_str::<Value>(document).unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(&fake, dir.path());
    let part = |out: &Output| -> String {
        let stdout = text(&out.stdout);
        let start = stdout
            .find("kube-dns stubDomains")
            .unwrap_or_else(|| panic!("no kube-dns stubDomains part:\n{stdout}"));
        let end = stdout[start..]
            .find("\n\n")
            .map_or(stdout.len(), |e| start + e);
        stdout[start..end].to_owned()
    };

    let live = run(vec![
        "plan".into(),
        "--kubeconfig".into(),
        kubeconfig,
        "--stub-domain-nameserver".into(),
        "10.96.0.53".into(),
    ])
    .await;
    assert_eq!(
        live.status.code(),
        Some(3),
        "no Corefile: a partial plan; {}",
        text(&live.stderr)
    );
    let from_file = run(vec![
        "plan".into(),
        "-f".into(),
        fixture.into(),
        "--stub-domain-nameserver".into(),
        "10.96.0.53".into(),
    ])
    .await;
    assert_eq!(part(&live), part(&from_file));
    assert!(
        part(&live).contains(
            "data.stubDomains:\n    {\"api.example.com\": [\"10.96.0.53\"], \"shop.example.com\": [\"10.96.0.53\"]}"
        ),
        "{}",
        part(&live)
    );
    let reads: Vec<String> = fake
        .requests()
        .into_iter()
        .map(|r| r.uri)
        .filter(|uri| uri.contains("/namespaces/kube-system/configmaps"))
        .collect();
    assert!(
        reads
            .iter()
            .all(|uri| uri.contains("fieldSelector=metadata.name")),
        "kube-system ConfigMaps are read by name only: {reads:?}"
    );
    assert!(
        reads.iter().any(|uri| uri.contains("kube-dns")),
        "{reads:?}"
    );
}

/// Ctrl-C ends a plan at once, even while it waits on an API server that does not answer: a
/// one-shot command has nothing to drain (the start-up builder's `OnSignal::Abort`).
#[test]
fn ctrl_c_ends_a_plan_waiting_on_the_cluster_at_once() {
    use std::os::unix::process::ExitStatusExt as _;

    // Accepts connections and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: silent\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: silent\n  context:\n    cluster: silent\n    user: silent\n\
             current-context: silent\nusers:\n- name: silent\n  user:\n    token: t\n",
            silent.local_addr().unwrap()
        ),
    )
    .unwrap();
    let mut child = hairpin(&[
        "plan",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--timeout",
        "5m",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The plan is reading the cluster once it has connected.
    let (_held, _) = silent.accept().unwrap();
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGINT did not end the plan"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.signal(), Some(2), "{status:?}; stderr: {stderr}");
}
