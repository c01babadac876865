//! Where the Corefile editor puts hairpin's names: golden files for the layouts that need more
//! than "the block that holds `kubernetes`" (`tests/golden/layouts/`, small synthetic
//! Corefiles, one per layout) and for the real node-local-dns Corefiles in
//! `tests/golden/corefiles/`.
//!
//! CoreDNS sends a query to the most specific zone on the port it arrived on, and a rewrite
//! never leaves its server block; so names must be handled in the block that receives them.
//! `HAIRPIN_BLESS=1 cargo test -p hairpin-planner --test corefile_placement` rewrites the
//! expected files.

mod support;

use std::fs;

use hairpin_planner::corefile::{self, CorefileError, DnsEntry, Form, PlaceOptions, place};
use hairpin_planner::markers::Warning;
use support::corefile::{LB1, LB2, check_golden, golden_dir, opts, strip_blocks};

fn read(sub: &str, name: &str) -> String {
    fs::read_to_string(golden_dir(sub).join(name)).unwrap()
}

fn entries() -> Vec<DnsEntry> {
    vec![
        DnsEntry::new("www.example.com", LB1).unwrap(),
        DnsEntry::new("app.example.com", LB1).unwrap(),
        DnsEntry::new("*.apps.example.org", LB2).unwrap(),
    ]
}

/// The server block keys holding each hairpin block, in order, with the block's first line.
fn blocks_by_server(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut server = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with([' ', '\t', '#', '}']) && line.trim_end().ends_with('{') {
            server = line.trim_end_matches('{').trim().to_owned();
        }
        if line.trim().starts_with("# BEGIN hairpin") {
            // The first name rule: past the cluster-domain bypass, where there is one.
            let mut first = lines.next().unwrap().trim();
            if first.starts_with("rewrite stop name suffix ") {
                first = lines.next().unwrap().trim();
            }
            out.push((server.clone(), first.to_owned()));
        }
    }
    out
}

/// Edit, check pure insertion, idempotence and removal, compare with the golden file.
fn placed(name: &str, opts: &PlaceOptions) -> hairpin_planner::markers::Edit {
    let original = read("layouts", &format!("{name}.Corefile"));
    let edit = corefile::apply_placed(&original, &entries(), opts).unwrap();
    assert!(edit.changed, "{name}");
    assert_eq!(
        strip_blocks(&edit.text),
        original,
        "{name}: not pure insertion"
    );
    let again = corefile::apply_placed(&edit.text, &entries(), opts).unwrap();
    assert_eq!(again.text, edit.text, "{name}: applying twice differs");
    assert_eq!(
        corefile::remove(&edit.text).unwrap().text,
        original,
        "{name}"
    );
    check_golden(
        &golden_dir("layouts").join(format!("{name}.placed.Corefile")),
        &edit.text,
    );
    edit
}

#[test]
fn split_domain_names_are_answered_in_the_root_block() {
    // `cluster.local:53` never receives `www.example.com`: the rules used to land there and
    // never fire. `.:53` cannot resolve a rewritten Service name (no `kubernetes`), so it
    // answers the ClusterIPs itself.
    let edit = placed("split-domain", &opts());
    assert!(edit.warnings.is_empty(), "{:?}", edit.warnings);
    assert_eq!(
        blocks_by_server(&edit.text),
        [(".:53".to_owned(), "template IN A {".to_owned())]
    );
    assert!(!edit.text.contains("rewrite stop"));
    for want in [
        "match ^(?:app\\.example\\.com|www\\.example\\.com)\\.$",
        "answer \"{{ .Name }} 30 IN A 10.96.0.20\"",
        "match ^[^.]+\\.apps\\.example\\.org\\.$",
        "answer \"{{ .Name }} 30 IN AAAA fd00::21\"",
    ] {
        assert!(edit.text.contains(want), "{want}");
    }
}

#[test]
fn split_domain_without_cluster_ips_writes_nothing_and_says_why() {
    let original = read("layouts", "split-domain.Corefile");
    let edit = corefile::apply_placed(&original, &entries(), &PlaceOptions::default()).unwrap();
    assert!(!edit.changed);
    assert_eq!(edit.text, original);
    assert!(matches!(
        &edit.warnings[..],
        [Warning::AddressUnknown { line: 9, names }] if names.len() == 3
    ));
}

#[test]
fn an_old_block_in_the_split_kubernetes_block_moves_to_the_root_block() {
    // What earlier releases wrote: rules in `cluster.local:53`, where they never fire.
    let original = read("layouts", "split-domain.Corefile");
    let old = corefile::write_blocks(
        &original,
        &[corefile::BlockInsert {
            server: corefile::ServerRef {
                keys: "cluster.local:53".into(),
                occurrence: 0,
            },
            form: Form::Rewrite,
            lines: corefile::render_rules(&entries()).unwrap(),
        }],
    )
    .unwrap();
    let edit = corefile::apply_placed(&old.text, &entries(), &opts()).unwrap();
    assert_eq!(edit.warnings, [Warning::BlockMisplaced { line: 3 }]);
    assert_eq!(
        edit.text,
        corefile::apply_placed(&original, &entries(), &opts())
            .unwrap()
            .text
    );
}

#[test]
fn placeholder_domain_uses_the_flag_and_rewrites_in_the_kubernetes_block() {
    let original = read("layouts", "placeholder-domain.Corefile");
    let info = corefile::analyze_with(&original, Some("corp.internal")).unwrap();
    assert_eq!(info.cluster_domain, "corp.internal");
    assert!(info.warnings.is_empty());
    let opts = PlaceOptions {
        cluster_domain: Some("corp.internal".into()),
        ..opts()
    };
    let p = place(&original, &entries(), &opts).unwrap();
    assert_eq!(p.cluster_domain, "corp.internal");
    let edit = placed("placeholder-domain", &opts);
    assert_eq!(
        blocks_by_server(&edit.text),
        [(
            ".:53".to_owned(),
            format!("rewrite stop name exact app.example.com {LB1}")
        )]
    );
    // Three rules cost a cluster name less than the bypass would: none.
    assert!(!edit.text.contains("name suffix"), "{}", edit.text);
    // Where it pays (an exact name on each of 12 load balancers), the bypass names the cluster
    // domain the flag gave.
    let many: Vec<DnsEntry> = (0..12)
        .map(|i| {
            let target = format!("lb-{i}.hairpin.svc.cluster.local");
            DnsEntry::new(&format!("n{i}.example.com"), &target).unwrap()
        })
        .collect();
    let edit = corefile::apply_placed(&original, &many, &opts).unwrap();
    assert!(
        edit.text
            .contains("# BEGIN hairpin (managed by hairpin; do not edit)\n    rewrite stop name suffix .corp.internal. .corp.internal.\n"),
        "{}",
        edit.text
    );
}

#[test]
fn a_zone_block_answers_its_own_names_and_the_root_block_rewrites_the_rest() {
    // `example.com:53` receives `www.example.com`; a rule in `.:53` would never see it.
    let edit = placed("zone-block", &opts());
    assert_eq!(
        blocks_by_server(&edit.text),
        [
            ("example.com:53".to_owned(), "template IN A {".to_owned()),
            (
                ".:53".to_owned(),
                format!(
                    "rewrite stop name regex ^[^.]+\\.apps\\.example\\.org\\.$ {LB2} answer auto"
                )
            ),
        ]
    );
    let (zone, root) = edit.text.split_once("\n.:53 {").unwrap();
    assert!(
        zone.contains("www"),
        "example.com names in their zone's block"
    );
    assert!(!root.contains("www"), "and not in the root block");
}

#[test]
fn a_wildcard_reaches_the_zone_blocks_under_it() {
    let original = "shop.example.com:53 {\n    forward . 10.0.0.53\n}\n.:53 {\n    kubernetes cluster.local\n    forward . /etc/resolv.conf\n}\n";
    let e = [DnsEntry::new("*.example.com", LB1).unwrap()];
    let edit = corefile::apply_placed(original, &e, &opts()).unwrap();
    let servers: Vec<String> = blocks_by_server(&edit.text)
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(servers, ["shop.example.com:53", ".:53"]);
    // One label only: a zone two labels down receives none of the wildcard's names.
    let deeper = original.replace("shop.example.com", "a.shop.example.com");
    let edit = corefile::apply_placed(&deeper, &e, &opts()).unwrap();
    assert_eq!(blocks_by_server(&edit.text).len(), 1);
}

#[test]
fn openshift_style_port_5353_is_the_dns_port_when_it_is_the_only_one() {
    let edit = placed("openshift-5353", &opts());
    let p = place(
        &read("layouts", "openshift-5353.Corefile"),
        &entries(),
        &opts(),
    )
    .unwrap();
    assert_eq!(p.port, 5353);
    assert_eq!(blocks_by_server(&edit.text)[0].0, ".:5353");
    assert_eq!(blocks_by_server(&edit.text).len(), 1);
}

#[test]
fn layouts_that_need_a_guess_are_refused() {
    for name in ["ambiguous-ports", "ambiguous-placeholder-zone"] {
        let original = read("layouts", &format!("{name}.Corefile"));
        let err = corefile::apply_placed(&original, &entries(), &opts()).unwrap_err();
        assert!(
            matches!(err, CorefileError::Ambiguous { .. }),
            "{name}: {err}"
        );
        assert_eq!(err.metric_label(), "ambiguous_layout");
        assert!(err.to_string().contains("nothing is written"), "{err}");
    }
    // Naming the port settles it.
    let original = read("layouts", "ambiguous-ports.Corefile");
    let opts = PlaceOptions {
        dns_port: Some(9053),
        ..opts()
    };
    let edit = corefile::apply_placed(&original, &entries(), &opts).unwrap();
    assert_eq!(blocks_by_server(&edit.text)[0].0, ".:9053");
}

#[test]
fn node_local_dns_corefiles_get_answers_in_their_root_block_only() {
    let opts = PlaceOptions {
        without_kubernetes: true,
        ..opts()
    };
    for name in ["nodelocaldns", "kubespray-nodelocaldns"] {
        let original = read("corefiles", &format!("{name}.Corefile"));
        let edit = corefile::apply_placed(&original, &entries(), &opts).unwrap();
        assert!(edit.warnings.is_empty(), "{name}: {:?}", edit.warnings);
        assert_eq!(strip_blocks(&edit.text), original, "{name}");
        assert_eq!(
            blocks_by_server(&edit.text),
            [(".:53".to_owned(), "template IN A {".to_owned())],
            "{name}"
        );
        assert_eq!(corefile::remove(&edit.text).unwrap().text, original);
        let again = corefile::apply_placed(&edit.text, &entries(), &opts).unwrap();
        assert!(!again.changed, "{name}");
        check_golden(
            &golden_dir("layouts").join(format!("{name}.answers.Corefile")),
            &edit.text,
        );
        // Without ClusterIPs, nothing.
        let none = PlaceOptions {
            without_kubernetes: true,
            ..PlaceOptions::default()
        };
        let edit = corefile::apply_placed(&original, &entries(), &none).unwrap();
        assert_eq!(edit.text, original);
    }
}
