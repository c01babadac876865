use super::*;

const T: &str = "hairpin-lb.hairpin.svc.cluster.local";

fn entries(names: &[&str]) -> Vec<DnsEntry> {
    names.iter().map(|n| DnsEntry::new(n, T).unwrap()).collect()
}

const BASIC: &str = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    reload\n}\n";

#[test]
fn inserts_before_kubernetes_with_its_indentation() {
    let edit = apply(BASIC, &entries(&["a.example.com"])).unwrap();
    assert_eq!(
        edit.text,
        ".:53 {\n    errors\n    # BEGIN hairpin (managed by hairpin; do not edit)\n    rewrite stop name exact a.example.com hairpin-lb.hairpin.svc.cluster.local\n    # END hairpin\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    reload\n}\n"
    );
    assert!(edit.changed && edit.warnings.is_empty());
    let again = apply(&edit.text, &entries(&["a.example.com"])).unwrap();
    assert_eq!(again.text, edit.text);
    assert!(!again.changed);
    assert_eq!(remove(&edit.text).unwrap().text, BASIC);
    assert_eq!(apply(&edit.text, &[]).unwrap().text, BASIC);
}

#[test]
fn tabs_crlf_and_missing_final_newline() {
    let original = "# top\r\n.:53\r\n{\r\n\terrors\r\n\tkubernetes\tcluster.local\r\n}";
    let edit = apply(original, &entries(&["a.example.com"])).unwrap();
    assert_eq!(
        edit.text,
        "# top\r\n.:53\r\n{\r\n\terrors\r\n\t# BEGIN hairpin (managed by hairpin; do not edit)\r\n\trewrite stop name exact a.example.com hairpin-lb.hairpin.svc.cluster.local\r\n\t# END hairpin\r\n\tkubernetes\tcluster.local\r\n}"
    );
    assert_eq!(remove(&edit.text).unwrap().text, original);
}

#[test]
fn kubernetes_on_the_brace_line_inserts_before_the_closing_brace() {
    let original = ".:53 { kubernetes cluster.local\n  reload\n}\n";
    let edit = apply(original, &entries(&["a.example.com"])).unwrap();
    assert_eq!(
        edit.text,
        ".:53 { kubernetes cluster.local\n  reload\n  # BEGIN hairpin (managed by hairpin; do not edit)\n  rewrite stop name exact a.example.com hairpin-lb.hairpin.svc.cluster.local\n  # END hairpin\n}\n"
    );
    assert_eq!(remove(&edit.text).unwrap().text, original);
}

#[test]
fn one_line_server_block_is_unsupported() {
    let err = apply(".:53 { kubernetes cluster.local }\n", &entries(&["a.b"])).unwrap_err();
    assert_eq!(err.metric_label(), "unsupported_layout");
}

#[test]
fn no_kubernetes_block_is_an_error() {
    let err = apply(".:53 {\n    forward . 1.1.1.1\n}\n", &entries(&["a.b"])).unwrap_err();
    assert_eq!(err, CorefileError::NoKubernetesBlock);
    assert_eq!(err.metric_label(), "no_kubernetes_block");
    assert_eq!(analyze("").unwrap_err(), CorefileError::NoKubernetesBlock);
}

#[test]
fn syntax_errors_are_errors() {
    let err = apply(".:53 {\n    kubernetes cluster.local\n", &entries(&["a.b"])).unwrap_err();
    assert_eq!(err.metric_label(), "corefile_syntax");
    assert!(analyze(".:53 {\n kubernetes\n}\n}\n").is_err());
}

#[test]
fn picks_the_root_server_block_among_several() {
    let original = "cluster.local:53 {\n  kubernetes\n}\n.:5353 {\n  forward . 8.8.8.8\n}\n.:53 {\n  kubernetes cluster.local\n  reload\n}\n";
    let info = analyze(original).unwrap();
    assert_eq!(info.server_block_keys, [".:53"]);
    assert_eq!(info.server_block_line, 7);
    assert!(info.serves_root && info.has_reload);
    let edit = apply(original, &entries(&["a.example.com"])).unwrap();
    let at = edit.text.find("# BEGIN").unwrap();
    assert!(at > original.find(".:53 {").unwrap());
}

#[test]
fn cluster_domain_comes_from_the_kubernetes_line_or_the_block_or_defaults() {
    let d = |src: &str| analyze(src).unwrap().cluster_domain;
    assert_eq!(
        d(".:53 {\n kubernetes Corp.Example. in-addr.arpa\n}\n"),
        "corp.example"
    );
    assert_eq!(d("k8s.internal:53 {\n kubernetes\n}\n"), "k8s.internal");
    let info = analyze(".:53 {\n kubernetes {$DOMAIN}\n}\n").unwrap();
    assert_eq!(info.cluster_domain, "cluster.local");
    assert!(info.warnings.contains(&Warning::ClusterDomainDefaulted {
        line: 2,
        default: "cluster.local".into()
    }));
    // `--cluster-domain` fills in for a placeholder or a missing zone, without a warning; a
    // zone on the plugin line still wins.
    let with = |src: &str| analyze_with(src, Some("Corp.Internal.")).unwrap();
    for src in [
        ".:53 {\n kubernetes {$DOMAIN}\n reload\n}\n",
        ".:53 {\n kubernetes\n reload\n}\n",
    ] {
        let info = with(src);
        assert_eq!(info.cluster_domain, "corp.internal", "{src}");
        assert!(info.warnings.is_empty(), "{src}: {:?}", info.warnings);
    }
    assert_eq!(
        with(".:53 {\n kubernetes k8s.example\n}\n").cluster_domain,
        "k8s.example"
    );
    let info = analyze("cluster.local:53 {\n kubernetes\n}\n").unwrap();
    assert!(!info.serves_root);
    assert!(matches!(
        info.warnings[0],
        Warning::ServerBlockNotRoot { line: 1, .. }
    ));
}

#[test]
fn missing_reload_is_reported() {
    let info = analyze(".:53 {\n kubernetes cluster.local\n}\n").unwrap();
    assert!(!info.has_reload);
    assert_eq!(
        info.warnings,
        [Warning::ReloadMissing {
            server_block_line: 1
        }]
    );
    assert!(info.warnings[0].to_string().contains("add a `reload` line"));
}

#[test]
fn custom_imports_are_detected() {
    let info = analyze(".:53 {\n kubernetes cluster.local\n reload\n import custom/*.include\n import /etc/coredns/custom/*.override\n}\nimport custom/*.server\n").unwrap();
    assert!(info.imports_custom_override());
    assert_eq!(info.custom_key_suffix(), Some(".override"));
    assert_eq!(info.custom_imports.len(), 2);
    let info = analyze(".:53 {\n kubernetes cluster.local\n import custom/*.include\n}\n").unwrap();
    assert!(!info.imports_custom_override());
    assert_eq!(info.custom_key_suffix(), Some(".include"));
    let info = analyze(".:53 {\n kubernetes cluster.local\n}\nimport custom/*.override\n").unwrap();
    assert_eq!(
        info.custom_key_suffix(),
        None,
        "a top-level import is not inside the block"
    );
}

fn block(indent: &str, names: &[&str]) -> String {
    let rules = render_rules(&entries(names)).unwrap();
    markers::render_block(rules.iter().map(String::as_str), indent, "\n", true)
}

/// [`block`] as hairpin writes it where nothing else rewrites: opening with the bypass where
/// it pays.
fn placed(indent: &str, names: &[&str]) -> String {
    let mut rules = render_rules(&entries(names)).unwrap();
    if bypass_pays(&rules) {
        rules.insert(0, cluster_bypass("cluster.local"));
    }
    markers::render_block(rules.iter().map(String::as_str), indent, "\n", true)
}

/// One exact name on each of 12 load balancers: 12 `exact` rules, which cost a cluster name
/// more than the bypass does.
fn costly(first: &str) -> Vec<DnsEntry> {
    (0..12)
        .map(|i| {
            let target = format!("lb-{i}.hairpin.svc.cluster.local");
            DnsEntry::new(&format!("{first}{i}.example.com"), &target).unwrap()
        })
        .collect()
}

#[test]
fn update_keeps_a_moved_block_in_place() {
    let original = ".:53 {\n    kubernetes cluster.local\n  # BEGIN hairpin (managed by hairpin; do not edit)\n  rewrite stop name exact old.example.com x.y.svc.cluster.local\n  # END hairpin\n    reload\n}\n";
    let edit = apply(original, &entries(&["new.example.com"])).unwrap();
    assert_eq!(
        edit.text,
        format!(
            ".:53 {{\n    kubernetes cluster.local\n{}    reload\n}}\n",
            placed("  ", &["new.example.com"])
        )
    );
    assert!(edit.warnings.is_empty());
}

fn damage(result: Result<Edit, CorefileError>) -> MarkerDamage {
    match result {
        Err(CorefileError::Damaged(d)) => d,
        other => panic!("expected damaged markers, got {other:?}"),
    }
}

#[test]
fn begin_without_end_is_refused_and_nothing_removed() {
    // Before: the marker and the rewrite lines after it were removed and the block rewritten.
    let original = ".:53 {\n    # BEGIN hairpin\n    rewrite stop name exact old.example.com x.y.svc.cluster.local\n    kubernetes cluster.local\n    reload\n}\n";
    let d = damage(apply(original, &entries(&["a.example.com"])));
    assert_eq!(d.kind, markers::DamageKind::BeginWithoutEnd);
    assert_eq!(d.lines, [(2, "    # BEGIN hairpin".to_owned())]);
    damage(remove(original));
    assert!(matches!(analyze(original), Err(CorefileError::Damaged(_))));
}

#[test]
fn end_without_begin_is_refused() {
    let original = ".:53 {\n    errors\n    rewrite stop name exact old.example.com x.y.svc.cluster.local\n    # END hairpin\n    kubernetes cluster.local\n    reload\n}\n";
    let d = damage(apply(original, &entries(&["a.example.com"])));
    assert_eq!(d.kind, markers::DamageKind::EndWithoutBegin);
    assert_eq!(d.lines, [(4, "    # END hairpin".to_owned())]);
    let e = apply(original, &entries(&["a.example.com"])).unwrap_err();
    assert_eq!(e.metric_label(), "missing_begin_marker");
    assert!(e.to_string().contains("line 4:     # END hairpin"), "{e}");
}

#[test]
fn two_blocks_in_one_server_block_and_nested_blocks_are_refused() {
    let b = block("    ", &["old.example.com"]);
    let original = format!(".:53 {{\n{b}    kubernetes cluster.local\n{b}    reload\n}}\n");
    let d = damage(apply(&original, &entries(&["a.example.com"])));
    assert_eq!(d.kind, markers::DamageKind::Duplicate);
    assert_eq!(
        d.lines.iter().map(|l| l.0).collect::<Vec<_>>(),
        [2, 4, 6, 8]
    );

    let original =
        ".:53 {\n    # END hairpin\n    kubernetes cluster.local\n    # BEGIN hairpin\n}\n";
    assert_eq!(
        damage(apply(original, &entries(&["a.example.com"]))).kind,
        markers::DamageKind::EndWithoutBegin
    );
    let nested = ".:53 {\n    # BEGIN hairpin\n    # BEGIN hairpin\n    # END hairpin\n    # END hairpin\n    kubernetes cluster.local\n}\n";
    assert_eq!(
        damage(apply(nested, &entries(&["a.example.com"]))).kind,
        markers::DamageKind::Nested
    );
}

#[test]
fn a_marker_inside_a_quoted_string_is_not_a_marker() {
    let original = ".:53 {\n    template IN TXT note.example {\n        answer \"note.example. 60 IN TXT \\\"\n# BEGIN hairpin\n\\\"\"\n    }\n    kubernetes cluster.local\n}\n";
    let info = analyze(original).unwrap();
    assert!(!info.has_hairpin_block);
    let edit = apply(original, &entries(&["a.example.com"])).unwrap();
    assert!(edit.text.contains("# BEGIN hairpin\n\\\"\""));
    assert_eq!(remove(&edit.text).unwrap().text, original);
}

#[test]
fn a_block_outside_the_kubernetes_server_block_is_moved() {
    let b = block("", &["old.example.com"]);
    let original = format!(
        "{b}.:53 {{\n    kubernetes cluster.local\n}}\nexample.org {{\n{}    forward . 1.1.1.1\n}}\n",
        block("    ", &["x.example.com"])
    );
    let edit = apply(&original, &entries(&["a.example.com"])).unwrap();
    assert_eq!(
        edit.warnings,
        [
            Warning::BlockMisplaced { line: 1 },
            Warning::BlockMisplaced { line: 8 }
        ]
    );
    assert_eq!(
        edit.text,
        format!(
            ".:53 {{\n{}    kubernetes cluster.local\n}}\nexample.org {{\n    forward . 1.1.1.1\n}}\n",
            placed("    ", &["a.example.com"])
        )
    );
    assert!(analyze(&original).unwrap().has_hairpin_block);
}

#[test]
fn entry_errors() {
    let bad = DnsEntry {
        name: HostPattern::Exact("a.com".into()),
        target: "Not A Target".into(),
    };
    assert_eq!(
        apply(BASIC, &[bad]).unwrap_err().metric_label(),
        "invalid_target"
    );
    let conflict = [
        DnsEntry::new("a.com", "x.ns.svc.cluster.local").unwrap(),
        DnsEntry::new("a.com", "y.ns.svc.cluster.local").unwrap(),
    ];
    assert_eq!(
        apply(BASIC, &conflict).unwrap_err().metric_label(),
        "conflicting_targets"
    );
    assert_eq!(
        render_override(&conflict).unwrap_err().metric_label(),
        "conflicting_targets"
    );
}

#[test]
fn override_content_has_the_same_rules_without_indentation() {
    let e = entries(&["b.example.com", "*.example.org"]);
    assert_eq!(
        render_override(&e).unwrap(),
        "# managed by hairpin; do not edit\nrewrite stop name regex ^(?:b\\.example\\.com|[^.]+\\.example\\.org)\\.$ hairpin-lb.hairpin.svc.cluster.local answer auto\n"
    );
    assert_eq!(render_override(&[]).unwrap(), "");
}

#[test]
fn node_local_dns_forwards_only_cluster_zones() {
    let src = "cluster.local:53 {\n    bind 169.254.20.10 10.96.0.10\n    forward . __PILLAR__CLUSTER__DNS__ {\n        force_tcp\n    }\n    }\nexample.net:53 {\n    forward . 10.96.0.10:53\n}\n.:53 {\n    forward . __PILLAR__UPSTREAM__SERVERS__\n    }\n";
    let info = analyze_node_local_dns(src, &["10.96.0.10"]).unwrap();
    assert_eq!(info.cluster_dns_zones, ["cluster.local", "example.net"]);
    assert_eq!(info.servers[2].zones, ["."]);
    assert!(!info.servers[2].forwards_to_cluster_dns);
    let names: Vec<HostPattern> = [
        "a.team.example.com",
        "*.example.net",
        "b.example.com",
        "x.y.team.example.com",
    ]
    .iter()
    .map(|n| HostPattern::parse(n).unwrap())
    .collect();
    let by: Vec<String> = bypassed(&info, &names)
        .iter()
        .map(|p| p.to_string())
        .collect();
    assert_eq!(
        by,
        [
            "a.team.example.com",
            "b.example.com",
            "x.y.team.example.com"
        ]
    );
    let zones = NodeLocalDnsInfo::zones_for(&names);
    assert_eq!(zones, ["example.com", "example.net"]);
    let stanza = info.suggested_stanza(&["example.com".into()]).unwrap();
    assert_eq!(
        stanza,
        "example.com:53 {\n    errors\n    cache 30\n    reload\n    loop\n    bind 169.254.20.10 10.96.0.10\n    forward . __PILLAR__CLUSTER__DNS__ {\n            force_tcp\n    }\n}\n"
    );
    // The suggestion parses and then covers the names.
    let patched = format!("{src}{stanza}");
    let info = analyze_node_local_dns(&patched, &["10.96.0.10"]).unwrap();
    assert!(bypassed(&info, &names[..3]).is_empty());
}

#[test]
fn markers_around_foreign_lines_are_refused() {
    // Before: the markers were moved and the rewrite line inside them deleted.
    let original = ".:53 {\n    # BEGIN hairpin (managed by hairpin; do not edit)\n    rewrite stop name exact old.example.com x.y.svc.cluster.local\n    kubernetes cluster.local {\n        pods insecure\n    }\n    # END hairpin\n    reload\n}\n";
    let d = damage(apply(original, &entries(&["a.example.com"])));
    assert_eq!(d.kind, markers::DamageKind::ForeignLines);
    assert_eq!(
        d.lines.iter().map(|l| l.0).collect::<Vec<_>>(),
        [2, 4, 5, 7]
    );
    damage(remove(original));
}

#[test]
fn a_block_inside_a_plugin_block_is_moved_out() {
    let original = format!(
        ".:53 {{\n    kubernetes cluster.local {{\n{}    }}\n    reload\n}}\n",
        block("        ", &["old.example.com"])
    );
    let edit = apply(&original, &entries(&["a.example.com"])).unwrap();
    assert_eq!(edit.warnings, [Warning::BlockMisplaced { line: 3 }]);
    assert_eq!(
        edit.text,
        format!(
            ".:53 {{\n{}    kubernetes cluster.local {{\n    }}\n    reload\n}}\n",
            placed("    ", &["a.example.com"])
        )
    );
}

#[test]
fn too_large_results_are_refused() {
    let many: Vec<DnsEntry> = (0..15_000)
        .map(|i| DnsEntry::new(&format!("host-{i}.example.com"), T).unwrap())
        .collect();
    let err = apply_with(BASIC, &many, RuleStyle::ExactOnly).unwrap_err();
    assert!(matches!(
        err,
        CorefileError::TooLarge { bytes, limit } if bytes > limit && limit == CONFIGMAP_MAX_BYTES
    ));
    assert_eq!(err.metric_label(), "too_large");
    assert_eq!(
        render_override_with(&many, RuleStyle::ExactOnly)
            .unwrap_err()
            .metric_label(),
        "too_large"
    );
    // The compact style (whole names, about the name's length each) fits with room to spare.
    assert!(apply(BASIC, &many).unwrap().text.len() < CONFIGMAP_MAX_BYTES / 2);
}

#[test]
fn a_gone_server_block_is_named_on_one_escaped_line() {
    let err = CorefileError::ServerBlockGone {
        server: ServerRef {
            keys: ".:53\nforged line".into(),
            occurrence: 1,
        },
    };
    assert_eq!(
        err.to_string(),
        "the server block `.:53\\nforged line` (#2) is no longer in the Corefile; planning again"
    );
}

#[test]
fn the_cluster_bypass_opens_the_rules_only_where_nothing_else_rewrites() {
    let bypass = "rewrite stop name suffix .cluster.local. .cluster.local.";
    let edit = apply(BASIC, &costly("a")).unwrap();
    let after_begin = edit
        .text
        .split("(managed by hairpin; do not edit)\n")
        .nth(1)
        .unwrap();
    assert!(
        after_begin.starts_with(&format!("    {bypass}\n")),
        "{}",
        edit.text
    );
    // The cluster domain as the `kubernetes` plugin names it.
    let other = BASIC.replace("kubernetes cluster.local", "kubernetes corp.internal");
    let edit = apply(&other, &costly("a")).unwrap();
    assert!(
        edit.text
            .contains("rewrite stop name suffix .corp.internal. .corp.internal.\n")
    );
    // A rewrite of the user's (before or after hairpin's block), or an import that may hold
    // one: their rules keep seeing cluster names, so no bypass.
    for extra in [
        "    rewrite name exact x.example.com y.example.com\n",
        "    rewrite stop name regex (.*)\\.svc\\.cluster\\.local {1}.svc.cluster.local\n",
        "    import custom/*.override\n",
    ] {
        for original in [
            BASIC.replace("    reload\n", &format!("    reload\n{extra}")),
            BASIC.replace("    errors\n", &format!("    errors\n{extra}")),
        ] {
            let edit = apply(&original, &costly("a")).unwrap();
            assert!(!edit.text.contains("name suffix"), "{}", edit.text);
            assert_eq!(remove(&edit.text).unwrap().text, original);
        }
    }
    // hairpin's own block does not count: an update keeps the bypass.
    let edit = apply(BASIC, &costly("a")).unwrap();
    let again = apply(&edit.text, &costly("b")).unwrap();
    assert!(again.text.contains(bypass), "{}", again.text);
    // Rules that cost a cluster name less than the bypass would (one `exact` rule, one large
    // `regex`): no bypass, and none left from an earlier block.
    let many: Vec<String> = (0..100).map(|i| format!("host{i}.example.com")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    for cheap in [entries(&["a.example.com"]), entries(&many)] {
        let edit = apply(&again.text, &cheap).unwrap();
        assert!(!edit.text.contains("name suffix"), "{}", edit.text);
        assert!(edit.text.contains("rewrite stop name "), "{}", edit.text);
    }
    // A name in the cluster domain, or a wildcard covering it: no bypass.
    let gw = DnsEntry::new_with("*.local", T, crate::name::WildcardLabels::OneOrMore).unwrap();
    for e in [DnsEntry::new("a.svc.cluster.local", T).unwrap(), gw] {
        let mut all = costly("a");
        all.push(e);
        let edit = apply(BASIC, &all).unwrap();
        assert!(!edit.text.contains("name suffix"), "{}", edit.text);
    }
    // No rules, no bypass.
    assert_eq!(apply(BASIC, &[]).unwrap().text, BASIC);
}
