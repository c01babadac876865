//! The cluster's DNS pinned by the API server (issue 47): the policy `hairpin-dns-block-only`
//! of the shipped manifest (`deploy/hairpin.yaml`, rendered from the chart by Helm's engine,
//! its expressions generated from the planner's markers and line shapes) on a real
//! kube-apiserver (v1.31.14), every write made with the controller ServiceAccount's own token
//! (TokenRequest), so RBAC and admission see exactly that account:
//!
//! - in every DNS layout hairpin edits (each real Corefile of `../shared/fixtures/corefiles/`
//!   with the planner's golden insert and update, the zone-block, split-domain, port and
//!   placeholder layouts, node-local-dns's answer form, an imported `*.server` key of
//!   `coredns-custom`, hairpin's own `coredns-custom` key created, changed, removed and the
//!   ConfigMap deleted), its block is added, changed and removed: admitted;
//! - the planner's own block of 20,000 names (about 700 KB) is admitted within the API
//!   server's CEL cost budget, and real CoreDNS answers a name of it from the Corefile read
//!   back;
//! - the forward target changed, a rewrite added outside the markers, a foreign key added or
//!   removed, a line of another shape in the block (a `forward`, a rewrite to another
//!   namespace's Service or another cluster domain, an answer outside the Service CIDRs, an
//!   unclosed block), a foreign line in hairpin's own key, a label changed: denied, with the
//!   policy's message;
//! - the admin (another identity: the addon manager restoring its Corefile) is not matched;
//!   hairpin's removal of its block from that rewritten Corefile is admitted, and
//!   `hairpin uninstall` run with the ServiceAccount's token leaves the addon manager's text;
//! - `hairpin-own-objects`: hairpin's DNSEndpoints created, changed, deleted; one with a
//!   foreign target, a cluster name, a CNAME, without hairpin's labels, or someone else's
//!   deleted: denied; the release ClusterRole with an aggregation label: denied; hairpin's
//!   Service created and deleted, someone else's Service of its namespace deleted: denied; an
//!   Event about a Service admitted, about a Secret denied.
//!
//! Every write and its answer is printed as one row of a table (`--nocapture`).
//!
//! Needs root, etcd and the test peers; without them the test prints why and passes.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hairpin_planner::corefile::{self, DnsEntry};
use hairpin_testkit::coredns::{CoreDns, RecordType};
use hairpin_testkit::kube::{self, ApiServer};
use serde_json::{Value, json};

const POLICY: &str = "hairpin-dns-block-only";
const NS: &str = "kube-system";
const TARGET: &str = "hairpin-lb-1.hairpin.svc.cluster.local";

fn golden(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../planner/tests/golden")
        .join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn cm_path(name: &str) -> String {
    format!("/api/v1/namespaces/{NS}/configmaps/{name}")
}

struct Table {
    rows: Vec<String>,
}

impl Table {
    fn row(&mut self, what: &str, (code, body): &(u16, Value)) -> String {
        let message = body["message"].as_str().unwrap_or_default();
        let answer = if (200..300).contains(code) {
            format!("admitted ({code})")
        } else {
            format!("denied ({code})")
        };
        // The policy's own words, without the API server's prefix.
        let said = message
            .split_once("denied request: ")
            .map_or(message, |(_, m)| m);
        let row = format!("| {what} | {answer} | {} |", said.replace('|', "\\|"));
        println!("{row}");
        self.rows.push(row);
        message.to_owned()
    }

    fn admitted(&mut self, what: &str, outcome: (u16, Value)) {
        let message = self.row(what, &outcome);
        assert!((200..300).contains(&outcome.0), "{what}: {message}");
    }

    fn denied(&mut self, what: &str, outcome: (u16, Value)) {
        let message = self.row(what, &outcome);
        assert_eq!(outcome.0, 403, "{what}: {message}");
        assert!(
            message.contains(&format!("ValidatingAdmissionPolicy '{POLICY}'")),
            "{what}: denied, but not by {POLICY}: {message}"
        );
    }
}

/// The ConfigMap as stored (`None`: absent), `edit`ed, written with PUT (or POST when absent)
/// under its resourceVersion with `token`, as the controller writes it.
fn write_as(
    api: &ApiServer,
    token: &str,
    name: &str,
    edit: impl FnOnce(&mut Value),
) -> (u16, Value) {
    match api.get(&cm_path(name)) {
        Some(mut cm) => {
            edit(&mut cm);
            api.request_as(
                token,
                "PUT",
                &cm_path(name),
                Some(("application/json", &cm)),
            )
            .expect("PUT")
        }
        None => {
            let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"namespace": NS, "name": name}, "data": {}});
            edit(&mut cm);
            api.request_as(
                token,
                "POST",
                &format!("/api/v1/namespaces/{NS}/configmaps"),
                Some(("application/json", &cm)),
            )
            .expect("POST")
        }
    }
}

fn set_key(
    api: &ApiServer,
    token: &str,
    name: &str,
    key: &str,
    text: Option<&str>,
) -> (u16, Value) {
    write_as(api, token, name, |cm| {
        if !cm["data"].is_object() {
            cm["data"] = json!({});
        }
        let data = cm["data"].as_object_mut().expect("data");
        match text {
            Some(t) => drop(data.insert(key.to_owned(), json!(t))),
            None => drop(data.remove(key)),
        }
    })
}

/// The admin (as a person, or the addon manager, would) sets the ConfigMap's data.
fn seed(api: &ApiServer, name: &str, data: Value) {
    api.delete(&cm_path(name));
    api.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"namespace": NS, "name": name}, "data": data}));
}

fn corefile_of(api: &ApiServer, name: &str, key: &str) -> String {
    api.get(&cm_path(name)).expect("the ConfigMap")["data"][key]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The policy is loaded by the admission plugin a moment after it is created: a denied write
/// (the forward target) is retried until the policy answers it.
fn wait_enforced(api: &ApiServer, token: &str) {
    let original = golden("corefiles/kubeadm.Corefile");
    seed(api, "coredns", json!({"Corefile": original}));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let changed = original.replace("forward . /etc/resolv.conf", "forward . 203.0.113.53");
        let (code, body) = set_key(api, token, "coredns", "Corefile", Some(&changed));
        if code == 403 && body["message"].as_str().unwrap_or("").contains(POLICY) {
            return;
        }
        seed(api, "coredns", json!({"Corefile": original}));
        assert!(Instant::now() < deadline, "the policy is not enforced");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The API server's type check of `name` caught up with its generation and found nothing.
fn assert_type_checked(api: &ApiServer, name: &str) {
    let path = format!("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{name}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let policy = loop {
        let policy = api.get(&path).expect("the policy");
        if policy["status"]["observedGeneration"] == policy["metadata"]["generation"] {
            break policy;
        }
        assert!(Instant::now() < deadline, "{name}: not type-checked");
        std::thread::sleep(Duration::from_millis(200));
    };
    let warnings = &policy["status"]["typeChecking"]["expressionWarnings"];
    assert!(
        warnings.as_array().is_none_or(Vec::is_empty),
        "{name}: the API server's type check: {warnings}"
    );
    println!("{name}: type-checked by the API server, no warning");
}

/// Every real Corefile layout the planner has goldens of: added, changed, removed.
fn layouts(api: &ApiServer, token: &str, t: &mut Table) {
    let shared =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/corefiles");
    let mut names: Vec<String> = std::fs::read_dir(&shared)
        .expect("../shared/fixtures/corefiles")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".Corefile")?.to_owned())
        })
        .collect();
    names.sort();
    let mut done = 0;
    for name in &names {
        let dir =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../planner/tests/golden/corefile");
        let (Ok(insert), Ok(update)) = (
            std::fs::read_to_string(dir.join(format!("{name}.insert.Corefile"))),
            std::fs::read_to_string(dir.join(format!("{name}.update.Corefile"))),
        ) else {
            println!("{name}: no planned block (hairpin does not edit this layout's Corefile)");
            continue;
        };
        let original =
            std::fs::read_to_string(shared.join(format!("{name}.Corefile"))).expect("fixture");
        assert_eq!(
            corefile::remove(&insert).expect("remove").text,
            original,
            "{name}: the golden is the planner's edit of the shared fixture"
        );
        seed(api, "coredns", json!({"Corefile": original}));
        t.admitted(
            &format!("{name}: hairpin block added"),
            set_key(api, token, "coredns", "Corefile", Some(&insert)),
        );
        t.admitted(
            &format!("{name}: hairpin block changed"),
            set_key(api, token, "coredns", "Corefile", Some(&update)),
        );
        t.admitted(
            &format!("{name}: hairpin block removed"),
            set_key(api, token, "coredns", "Corefile", Some(&original)),
        );
        done += 1;
    }
    assert!(done >= 10, "{done} layouts");
    // Zone blocks, split cluster domain, another port, a placeholder domain: several blocks.
    for layout in [
        "zone-block",
        "split-domain",
        "openshift-5353",
        "placeholder-domain",
    ] {
        let original = golden(&format!("layouts/{layout}.Corefile"));
        let placed = golden(&format!("layouts/{layout}.placed.Corefile"));
        seed(api, "coredns", json!({"Corefile": original}));
        let added = set_key(api, token, "coredns", "Corefile", Some(&placed));
        t.admitted(&format!("{layout} layout: hairpin blocks added"), added);
        if layout == "placeholder-domain" {
            // Its cluster domain is corp.internal. Its three rules cost a cluster name less than
            // the bypass would, so the planner writes none; where it does (rules that cost
            // more), the bypass names corp.internal: the shipped policy knows only
            // `admissionPolicy.clusterDomains` (default cluster.local), so such a cluster must
            // list its domain there; until then the write is denied.
            let marker = "# BEGIN hairpin (managed by hairpin; do not edit)\n";
            let bypassed = placed.replacen(
                marker,
                &format!("{marker}    rewrite stop name suffix .corp.internal. .corp.internal.\n"),
                1,
            );
            assert_ne!(bypassed, placed);
            t.denied(
                "placeholder-domain layout (cluster domain corp.internal, not in admissionPolicy.clusterDomains): the cluster-domain bypass added",
                set_key(api, token, "coredns", "Corefile", Some(&bypassed)),
            );
        }
        t.admitted(
            &format!("{layout} layout: hairpin blocks removed"),
            set_key(api, token, "coredns", "Corefile", Some(&original)),
        );
    }
    // node-local-dns: the answer form (template) in its own ConfigMap.
    let original = golden("corefiles/nodelocaldns.Corefile");
    let answers = golden("layouts/nodelocaldns.answers.Corefile");
    seed(api, "node-local-dns", json!({"Corefile": original}));
    t.admitted(
        "node-local-dns: template answers added",
        set_key(api, token, "node-local-dns", "Corefile", Some(&answers)),
    );
    let outside = answers.replace("10.96.0.20", "203.0.113.9");
    assert_ne!(outside, answers);
    t.denied(
        "node-local-dns: an answer outside the Service CIDRs",
        set_key(api, token, "node-local-dns", "Corefile", Some(&outside)),
    );
    t.admitted(
        "node-local-dns: template answers removed",
        set_key(api, token, "node-local-dns", "Corefile", Some(&original)),
    );
}

/// `coredns-custom`: an imported server file's block, hairpin's own key, the ConfigMap made
/// and deleted by hairpin.
fn coredns_custom(api: &ApiServer, token: &str, t: &mut Table) {
    let server = golden("imports/example.server");
    let placed = golden("imports/example.placed.server");
    api.delete(&cm_path("coredns-custom"));
    let entries = [
        DnsEntry::new("web.example.com", TARGET).unwrap(),
        DnsEntry::new("*.apps.example.com", TARGET).unwrap(),
    ];
    let own = corefile::render_override(&entries).expect("override");
    t.admitted(
        "coredns-custom: created by hairpin with its own key",
        set_key(api, token, "coredns-custom", "hairpin.override", Some(&own)),
    );
    let more = corefile::render_override(&[DnsEntry::new("shop.example.com", TARGET).unwrap()])
        .expect("override");
    t.admitted(
        "coredns-custom: its own key changed",
        set_key(
            api,
            token,
            "coredns-custom",
            "hairpin.override",
            Some(&more),
        ),
    );
    t.denied(
        "coredns-custom: a forward in its own key",
        set_key(
            api,
            token,
            "coredns-custom",
            "hairpin.override",
            Some(&format!("{more}forward . 203.0.113.53\n")),
        ),
    );
    t.denied(
        "coredns-custom: a foreign key added (evil.override)",
        set_key(
            api,
            token,
            "coredns-custom",
            "evil.override",
            Some("forward . 203.0.113.53\n"),
        ),
    );
    // The user's imported server file: hairpin's blocks in it, nothing else.
    write_as(api, &api_admin(api), "coredns-custom", |cm| {
        cm["data"]["example.server"] = json!(server);
    });
    t.admitted(
        "coredns-custom example.server: hairpin block added",
        set_key(
            api,
            token,
            "coredns-custom",
            "example.server",
            Some(&placed),
        ),
    );
    t.denied(
        "coredns-custom example.server: the user's key removed",
        set_key(api, token, "coredns-custom", "example.server", None),
    );
    t.admitted(
        "coredns-custom example.server: hairpin block removed",
        set_key(
            api,
            token,
            "coredns-custom",
            "example.server",
            Some(&server),
        ),
    );
    t.denied(
        "coredns-custom: deleted while it holds the user's key",
        api.request_as(token, "DELETE", &cm_path("coredns-custom"), None)
            .expect("DELETE"),
    );
    write_as(api, &api_admin(api), "coredns-custom", |cm| {
        cm["data"].as_object_mut().unwrap().remove("example.server");
    });
    t.admitted(
        "coredns-custom: its own key removed",
        set_key(api, token, "coredns-custom", "hairpin.override", None),
    );
    t.admitted(
        "coredns-custom: deleted by hairpin, nothing left in it",
        api.request_as(token, "DELETE", &cm_path("coredns-custom"), None)
            .expect("DELETE"),
    );
}

fn api_admin(api: &ApiServer) -> String {
    api.admin_token().to_owned()
}

/// What a stolen token would try in the Corefile.
fn corefile_attacks(api: &ApiServer, token: &str, t: &mut Table) {
    let original = golden("corefiles/kubeadm.Corefile");
    let insert = golden("corefile/kubeadm.insert.Corefile");
    seed(api, "coredns", json!({"Corefile": insert}));
    let cases: Vec<(&str, String)> = vec![
        (
            "kubeadm: forward target changed (forward . 203.0.113.53)",
            insert.replace("forward . /etc/resolv.conf", "forward . 203.0.113.53"),
        ),
        (
            "kubeadm: a rewrite added outside the markers",
            insert.replace(
                "    loop\n",
                "    rewrite stop name exact kubernetes.default.svc.cluster.local evil.example.com\n    loop\n",
            ),
        ),
        (
            "kubeadm: a line of another shape inside the block (forward)",
            insert.replace("    # END hairpin\n", "    forward . 203.0.113.53\n    # END hairpin\n"),
        ),
        (
            "kubeadm: a rewrite inside the block to another namespace's Service",
            insert.replace(
                "    # END hairpin\n",
                "    rewrite stop name exact a.example.com x.kube-system.svc.cluster.local\n    # END hairpin\n",
            ),
        ),
        (
            "kubeadm: a rewrite inside the block to another cluster domain",
            insert.replace(
                "    # END hairpin\n",
                "    rewrite stop name exact a.example.com lb.hairpin.svc.evil.example\n    # END hairpin\n",
            ),
        ),
        (
            "kubeadm: the block's end marker removed",
            insert.replace("    # END hairpin\n", ""),
        ),
        (
            "kubeadm: a directive before the begin marker on its line",
            insert.replace(
                "    # BEGIN hairpin",
                "    forward . 203.0.113.53 # BEGIN hairpin",
            ),
        ),
    ];
    for (what, text) in &cases {
        assert_ne!(text, &insert, "{what}: the case changes the Corefile");
        t.denied(what, set_key(api, token, "coredns", "Corefile", Some(text)));
    }
    seed(api, "coredns", json!({"Corefile": insert}));
    t.denied(
        "kubeadm: a foreign key added to coredns (evil.server)",
        set_key(
            api,
            token,
            "coredns",
            "evil.server",
            Some("evil.example:53 {\n    forward . 203.0.113.53\n}\n"),
        ),
    );
    t.denied(
        "kubeadm: a label changed",
        write_as(api, token, "coredns", |cm| {
            cm["metadata"]["labels"] = json!({"evil": "yes"});
        }),
    );
    // The addon manager (another identity) puts its own Corefile back, with its own change
    // outside the block: not matched. hairpin's uninstall then removes its block from that.
    let theirs = insert.replace("cache 30 {", "cache 60 {");
    t.admitted(
        "addon manager (admin): its Corefile restored, another cache TTL, the block kept",
        set_key(api, &api_admin(api), "coredns", "Corefile", Some(&theirs)),
    );
    let restored = corefile::remove(&theirs).expect("remove").text;
    t.admitted(
        "uninstall (controller SA): hairpin's block removed from the addon manager's Corefile",
        set_key(api, token, "coredns", "Corefile", Some(&restored)),
    );
    assert_eq!(restored, original.replace("cache 30 {", "cache 60 {"));
}

/// A block that ends the text, without a final line terminator (as the editors append one to a
/// text without a final newline), and CRLF line ends: added and removed.
fn line_ends(api: &ApiServer, token: &str, t: &mut Table) {
    let original = golden("corefiles/kubeadm.Corefile");
    let insert = golden("corefile/kubeadm.insert.Corefile");
    let bare = original.trim_end_matches('\n').to_owned();
    seed(api, "coredns", json!({"Corefile": bare}));
    let appended = format!(
        "{bare}\n# BEGIN hairpin (managed by hairpin; do not edit)\nrewrite stop name exact a.example.com {TARGET}\n# END hairpin"
    );
    t.admitted(
        "no final newline: a block appended at the end",
        set_key(api, token, "coredns", "Corefile", Some(&appended)),
    );
    t.admitted(
        "no final newline: the block removed",
        set_key(api, token, "coredns", "Corefile", Some(&bare)),
    );
    let crlf = original.replace('\n', "\r\n");
    seed(api, "coredns", json!({"Corefile": crlf}));
    t.admitted(
        "CRLF Corefile: hairpin block added",
        set_key(
            api,
            token,
            "coredns",
            "Corefile",
            Some(&insert.replace('\n', "\r\n")),
        ),
    );
    t.denied(
        "CRLF Corefile: forward target changed",
        set_key(
            api,
            token,
            "coredns",
            "Corefile",
            Some(
                &insert
                    .replace('\n', "\r\n")
                    .replace("/etc/resolv.conf", "203.0.113.53"),
            ),
        ),
    );
}

/// `hairpin uninstall` itself, with the ServiceAccount's token (as the chart's uninstall Job
/// runs it), after the addon manager put its own Corefile back (its own change outside the
/// block, the block kept): the policy admits the removal of the block, and the Corefile is the
/// addon manager's, byte for byte.
fn uninstall_after_addon_manager(api: &ApiServer, token: &str, t: &mut Table) {
    let insert = golden("corefile/kubeadm.insert.Corefile");
    let theirs = insert.replace("cache 30 {", "cache 60 {");
    seed(api, "coredns", json!({"Corefile": theirs}));
    let kubeconfig = api.kubeconfig_for("uninstall", token).expect("kubeconfig");
    let out = support::hairpin_command()
        .args(["uninstall", "--log-format", "text", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .expect("run hairpin uninstall");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(!text.contains(POLICY), "{text}");
    let after = corefile_of(api, "coredns", "Corefile");
    let expected = corefile::remove(&theirs).expect("remove").text;
    assert_eq!(after, expected, "{text}");
    let row = format!(
        "| `hairpin uninstall` (controller SA) after the addon manager rewrote the Corefile | admitted: Corefile {} bytes, the addon manager's without hairpin's block | |",
        after.len()
    );
    println!("{row}");
    t.rows.push(row);
}

/// What bounds a block in the API server's CEL budget is its number of lines, not its bytes:
/// the planner's block for 750 load balancers of 8 exact names each (6,000 `exact` rules, one
/// per line) is admitted (about 9,000 such lines are over the budget).
fn many_lines(api: &ApiServer, token: &str, t: &mut Table) {
    let original = golden("corefiles/kubeadm.Corefile");
    let names: Vec<DnsEntry> = (0..6_000)
        .map(|i| {
            let target = format!("hairpin-lb-{}.hairpin.svc.cluster.local", i / 8);
            DnsEntry::new(&format!("app-{i:04}.example.com"), &target).unwrap()
        })
        .collect();
    let text = corefile::apply(&original, &names).expect("apply").text;
    let lines = corefile::remove(&text).map(|r| text.lines().count() - r.text.lines().count());
    println!(
        "6,000 exact names on 750 targets: {lines:?} lines in the block, {} bytes",
        text.len()
    );
    seed(api, "coredns", json!({"Corefile": original}));
    t.admitted(
        &format!(
            "kubeadm: a block of 6,000 exact rules, one per line ({} KB)",
            text.len() / 1000
        ),
        set_key(api, token, "coredns", "Corefile", Some(&text)),
    );
    t.admitted(
        "kubeadm: the 6,000-line block removed",
        set_key(api, token, "coredns", "Corefile", Some(&original)),
    );
}

/// The planner's block of 20,000 names (about 700 KB): admitted within the CEL cost budget,
/// and real CoreDNS answers one of them from the Corefile the API server stored.
fn large_block(api: &ApiServer, token: &str, t: &mut Table) {
    let original = golden("corefiles/kubeadm.Corefile");
    let names: Vec<DnsEntry> = (0..20_000)
        .map(|i| {
            DnsEntry::new(
                &format!("host-{i:05}.team-{:03}.example.com", i % 500),
                TARGET,
            )
            .unwrap()
        })
        .collect();
    let big = corefile::apply(&original, &names).expect("apply").text;
    let changed = corefile::apply(&original, &names[..19_999])
        .expect("apply")
        .text;
    println!("block of 20,000 names: Corefile {} bytes", big.len());
    assert!(big.len() > 650_000, "{}", big.len());
    seed(api, "coredns", json!({"Corefile": original}));
    let started = Instant::now();
    t.admitted(
        &format!(
            "kubeadm: a block of 20,000 names ({} KB) added",
            big.len() / 1000
        ),
        set_key(api, token, "coredns", "Corefile", Some(&big)),
    );
    println!("admitted in {:?}", started.elapsed());
    let stored = corefile_of(api, "coredns", "Corefile");
    assert_eq!(stored, big);
    let ip = "10.96.0.50".parse().unwrap();
    if let Some(dns) = CoreDns::start("dns_block_only_large", &stored, &[(TARGET, ip)]) {
        let got = dns.query("host-12345.team-345.example.com.", RecordType::A);
        println!(
            "real CoreDNS on the admitted Corefile: host-12345.team-345.example.com A -> {got}"
        );
        assert_eq!(got.addresses(), vec![ip]);
    }
    t.admitted(
        "kubeadm: the 20,000-name block changed (one name less)",
        set_key(api, token, "coredns", "Corefile", Some(&changed)),
    );
    let forward = changed.replace("forward . /etc/resolv.conf", "forward . 203.0.113.53");
    t.denied(
        "kubeadm: the 20,000-name block kept, forward target changed",
        set_key(api, token, "coredns", "Corefile", Some(&forward)),
    );
    t.admitted(
        "kubeadm: the 20,000-name block removed",
        set_key(api, token, "coredns", "Corefile", Some(&original)),
    );
}

const OWN_POLICY: &str = "hairpin-own-objects";

impl Table {
    fn denied_by(&mut self, policy: &str, what: &str, outcome: (u16, Value)) {
        let message = self.row(what, &outcome);
        assert_eq!(outcome.0, 403, "{what}: {message}");
        assert!(
            message.contains(&format!("ValidatingAdmissionPolicy '{policy}'")),
            "{what}: denied, but not by {policy}: {message}"
        );
    }
}

const ENDPOINTS: &str = "/apis/externaldns.k8s.io/v1alpha1/namespaces/hairpin/dnsendpoints";

fn dns_endpoint(name: &str, dns_name: &str, record: &str, target: &str) -> Value {
    json!({"apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
           "metadata": {"namespace": "hairpin", "name": name,
                        "labels": {"app.kubernetes.io/managed-by": "hairpin",
                                   "hairpin.io/dns-endpoint": "true",
                                   "hairpin.io/source-namespace": "web",
                                   "hairpin.io/source-name": "web"},
                        "annotations": {"hairpin.io/source": "web/web"}},
           "spec": {"endpoints": [{"dnsName": dns_name, "recordType": record,
                                   "targets": [target], "recordTTL": 30}]}})
}

/// external-dns mode's DNSEndpoints (the CRD as external-dns ships it, and the Role's rule
/// the chart renders with `coredns.dnsMode: external-dns`).
fn dns_endpoints(api: &ApiServer, token: &str, t: &mut Table) {
    api.apply(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "dnsendpoints.externaldns.k8s.io",
                     "annotations": {"api-approved.kubernetes.io": "https://github.com/kubernetes-sigs/external-dns/pull/2007"}},
        "spec": {"group": "externaldns.k8s.io", "scope": "Namespaced",
                 "names": {"kind": "DNSEndpoint", "plural": "dnsendpoints", "singular": "dnsendpoint", "listKind": "DNSEndpointList"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                               "subresources": {"status": {}}}]}}));
    api.apply(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"namespace": "hairpin", "name": "hairpin-external-dns-mode"},
        "rules": [{"apiGroups": ["externaldns.k8s.io"], "resources": ["dnsendpoints"],
                   "verbs": ["get", "watch", "create", "update"]}]}),
    );
    api.apply(&json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"namespace": "hairpin", "name": "hairpin-external-dns-mode"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hairpin-external-dns-mode"},
        "subjects": [{"kind": "ServiceAccount", "name": "hairpin-controller", "namespace": "hairpin"}]}));
    let post = |object: &Value| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = api
                .request_as(token, "POST", ENDPOINTS, Some(("application/json", object)))
                .expect("POST");
            // The CRD is served a moment after it is created.
            if out.0 != 404 || Instant::now() > deadline {
                return out;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let ours = dns_endpoint("hairpin-web-web", "shop.example.com", "A", "10.96.0.31");
    t.admitted(
        "DNSEndpoint: hairpin's created (shop.example.com A 10.96.0.31)",
        post(&ours),
    );
    let mut moved = api
        .get(&format!("{ENDPOINTS}/hairpin-web-web"))
        .expect("stored");
    moved["spec"]["endpoints"][0]["targets"] = json!(["10.96.0.32"]);
    t.admitted(
        "DNSEndpoint: hairpin's changed (a new ClusterIP)",
        api.request_as(
            token,
            "PUT",
            &format!("{ENDPOINTS}/hairpin-web-web"),
            Some(("application/json", &moved)),
        )
        .expect("PUT"),
    );
    t.denied_by(
        OWN_POLICY,
        "DNSEndpoint: a foreign target (203.0.113.9)",
        post(&dns_endpoint(
            "hairpin-web-web.2",
            "shop.example.com",
            "A",
            "203.0.113.9",
        )),
    );
    t.denied_by(
        OWN_POLICY,
        "DNSEndpoint: a foreign name (kubernetes.default.svc.cluster.local)",
        post(&dns_endpoint(
            "hairpin-web-web.2",
            "kubernetes.default.svc.cluster.local",
            "A",
            "10.96.0.31",
        )),
    );
    t.denied_by(
        OWN_POLICY,
        "DNSEndpoint: a record type other than A or AAAA (CNAME)",
        post(&dns_endpoint(
            "hairpin-web-web.2",
            "shop.example.com",
            "CNAME",
            "evil.example.com",
        )),
    );
    let mut unlabelled = ours.clone();
    unlabelled["metadata"]["name"] = json!("other");
    unlabelled["metadata"]["labels"] = json!({});
    t.denied_by(
        OWN_POLICY,
        "DNSEndpoint: without hairpin's labels",
        post(&unlabelled),
    );
    api.apply(&unlabelled);
    t.denied_by(
        OWN_POLICY,
        "DNSEndpoint: someone else's deleted",
        api.request_as(token, "DELETE", &format!("{ENDPOINTS}/other"), None)
            .expect("DELETE"),
    );
    t.admitted(
        "DNSEndpoint: hairpin's deleted",
        api.request_as(
            token,
            "DELETE",
            &format!("{ENDPOINTS}/hairpin-web-web"),
            None,
        )
        .expect("DELETE"),
    );
}

/// The release ClusterRole exactly as the controller makes it, but for an aggregation label.
fn release_role_labels(api: &ApiServer, token: &str, t: &mut Table) {
    let uid = api
        .get("/api/v1/namespaces/hairpin")
        .expect("the namespace")["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_owned();
    let params = hairpin_controller::removal::RemovalParams::new("hairpin", "kube-system");
    let (mut role, _) = hairpin_controller::removal::release_pair(&params, &uid);
    role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] = json!("true");
    t.denied_by(
        OWN_POLICY,
        "release ClusterRole with an aggregation label (aggregate-to-admin)",
        api.request_as(
            token,
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            Some(("application/json", &role)),
        )
        .expect("POST"),
    );
}

/// Services of its namespace: only its own (labelled) ones.
fn own_services(api: &ApiServer, token: &str, t: &mut Table) {
    let service = |name: &str, labels: Value| {
        json!({"apiVersion": "v1", "kind": "Service",
               "metadata": {"namespace": "hairpin", "name": name, "labels": labels,
                            "annotations": {"hairpin.io/source": "web/web"}},
               "spec": {"ports": [{"port": 443, "protocol": "TCP"}],
                        "selector": {"app.kubernetes.io/name": "hairpin"}}})
    };
    let services = "/api/v1/namespaces/hairpin/services";
    t.admitted(
        "Service: hairpin's created",
        api.request_as(
            token,
            "POST",
            services,
            Some((
                "application/json",
                &service(
                    "hairpin-web-web",
                    json!({"app.kubernetes.io/managed-by": "hairpin"}),
                ),
            )),
        )
        .expect("POST"),
    );
    api.apply(&service("someone-else", json!({"app": "other"})));
    t.denied_by(
        OWN_POLICY,
        "Service: someone else's in hairpin's namespace deleted",
        api.request_as(token, "DELETE", &format!("{services}/someone-else"), None)
            .expect("DELETE"),
    );
    t.admitted(
        "Service: hairpin's deleted",
        api.request_as(
            token,
            "DELETE",
            &format!("{services}/hairpin-web-web"),
            None,
        )
        .expect("DELETE"),
    );
}

/// Events: about what hairpin reads, nothing else.
fn events(api: &ApiServer, token: &str, t: &mut Table) {
    let event = |kind: &str, name: &str| {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"namespace": "hairpin", "name": format!("probe-{}", kind.to_lowercase())},
               "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "hairpin.io/controller",
               "reportingInstance": "hairpin-controller-0", "action": "Reconcile", "reason": "Probe",
               "type": "Normal", "note": "probe",
               "regarding": {"apiVersion": "v1", "kind": kind, "namespace": "hairpin", "name": name}})
    };
    let events = "/apis/events.k8s.io/v1/namespaces/hairpin/events";
    t.admitted(
        "Event about a Service",
        api.request_as(
            token,
            "POST",
            events,
            Some(("application/json", &event("Service", "web"))),
        )
        .expect("POST"),
    );
    t.denied_by(
        OWN_POLICY,
        "Event about a Secret",
        api.request_as(
            token,
            "POST",
            events,
            Some(("application/json", &event("Secret", "web"))),
        )
        .expect("POST"),
    );
}

#[test]
fn the_controller_account_changes_dns_only_inside_its_blocks() {
    if kube::skip_without("the_controller_account_changes_dns_only_inside_its_blocks") {
        return;
    }
    let api = ApiServer::shared().expect("start kube-apiserver");
    // Its ValidatingAdmissionPolicy status controller type-checks the policies.
    let _kcm = api
        .start_controller_manager(&["validatingadmissionpolicy-status-controller"])
        .expect("start kube-controller-manager");
    support::install_manifest(api);
    for name in [POLICY, OWN_POLICY] {
        assert_type_checked(api, name);
    }
    let token = api.service_account_token("hairpin", "hairpin-controller");
    wait_enforced(api, &token);
    let mut t = Table { rows: Vec::new() };
    layouts(api, &token, &mut t);
    corefile_attacks(api, &token, &mut t);
    line_ends(api, &token, &mut t);
    uninstall_after_addon_manager(api, &token, &mut t);
    coredns_custom(api, &token, &mut t);
    large_block(api, &token, &mut t);
    many_lines(api, &token, &mut t);
    dns_endpoints(api, &token, &mut t);
    release_role_labels(api, &token, &mut t);
    own_services(api, &token, &mut t);
    events(api, &token, &mut t);
    println!("\n| write (as the controller ServiceAccount) | answer | message |\n|---|---|---|");
    for row in &t.rows {
        println!("{row}");
    }
}
