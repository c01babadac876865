//! The planned Corefiles, run in real CoreDNS (the 1.12.2 test peer, `hairpin_testkit::coredns`;
//! skipped with a message where it is absent), for every real Corefile in
//! `tests/golden/corefiles/` and the layouts in `tests/golden/layouts/`: in Corefile mode, in
//! `coredns-custom` mode where the Corefile imports `*.override`, and (node-local-dns) in the
//! answer form. Each run checks the answers: exact names, wildcards (one label and suffix
//! match), an exact name of one load balancer under another one's wildcard, a deeper
//! wildcard under a shallower one, a pass-through under a wildcard, case, trailing dot,
//! A and AAAA (NODATA, never NXDOMAIN, for a family the hairpin Service lacks), the answer's
//! owner name, the TTL, PTR for a ClusterIP left alone, an external name untouched, and a
//! cluster name still answered by the `kubernetes` plugin.

mod support;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use hairpin_planner::corefile::{self, DnsEntry, PlaceOptions};
use hairpin_planner::name::WildcardLabels;
use hairpin_testkit::coredns::{CoreDns, Options, RecordType, UPSTREAM_V4, skip_without};

fn golden(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(sub)
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Four load balancers: LB1 IPv4 only, LB2 dual-stack, LB3 IPv4 only with tenants' names
/// (a cross product of first labels and parents) and a wildcard in one pattern, LB4 IPv4 only
/// with a cross product of eight first characters, which keeps a rewrite rule of its own
/// beside its wildcard's (Go's one-pass matcher takes it).
const LB1_IP: &str = "10.96.0.20";
const LB2_IPS: [&str; 2] = ["10.96.0.21", "fd00::21"];
const LB3_IP: &str = "10.96.0.22";
const LB4_IP: &str = "10.96.0.23";
const LB4_HEADS: [&str; 8] = ["api", "blog", "cdn", "docs", "git", "mail", "shop", "www"];
const KUBERNETES_IP: &str = "10.96.0.1";

struct Setup {
    entries: Vec<DnsEntry>,
    addresses: BTreeMap<String, Vec<IpAddr>>,
    records: Vec<(String, IpAddr)>,
}

fn setup(domain: &str) -> Setup {
    let lb1 = corefile::service_fqdn("hairpin-lb-1", "hairpin", domain);
    let lb2 = corefile::service_fqdn("hairpin-lb-2", "hairpin", domain);
    let lb3 = corefile::service_fqdn("hairpin-lb-3", "hairpin", domain);
    let lb4 = corefile::service_fqdn("hairpin-lb-4", "hairpin", domain);
    let e = |name: &str, target: &str| DnsEntry::new(name, target).unwrap();
    let mut entries = vec![
        e("www.example.com", &lb1),
        e("app.example.com", &lb1),
        e("*.apps.example.org", &lb1),
        // LB2's own name under LB1's wildcard.
        e("api.apps.example.org", &lb2),
        // A Gateway API wildcard (one or more labels) and a deeper Ingress one under it.
        DnsEntry::new_with("*.example.net", &lb2, WildcardLabels::OneOrMore).unwrap(),
        // A one-label wildcard of LB2 too: its one exact name joins the wildcard's rule.
        e("*.pets.example.org", &lb2),
        e("*.deep.example.net", &lb1),
        // Not redirected, though LB1's wildcard covers it.
        DnsEntry::passthrough("skip.apps.example.org").unwrap(),
        e("*.shop.example.com", &lb3),
        e("solo.example.com", &lb3),
    ];
    for tenant in ["t1", "t2", "t3"] {
        for head in ["api", "app", "www"] {
            entries.push(e(&format!("{head}.{tenant}.example.com"), &lb3));
        }
    }
    for kid in ["k1", "k2"] {
        for head in LB4_HEADS {
            entries.push(e(&format!("{head}.{kid}.example.com"), &lb4));
        }
    }
    entries.push(e("*.kids.example.com", &lb4));
    let addresses = BTreeMap::from([
        (lb1.clone(), vec![ip(LB1_IP)]),
        (lb2.clone(), LB2_IPS.iter().map(|s| ip(s)).collect()),
        (lb3.clone(), vec![ip(LB3_IP)]),
        (lb4.clone(), vec![ip(LB4_IP)]),
    ]);
    let mut records = vec![
        (
            format!("kubernetes.default.svc.{domain}"),
            ip(KUBERNETES_IP),
        ),
        (lb1.clone(), ip(LB1_IP)),
        (lb3.clone(), ip(LB3_IP)),
        (lb4.clone(), ip(LB4_IP)),
    ];
    records.extend(LB2_IPS.iter().map(|s| (lb2.clone(), ip(s))));
    Setup {
        entries,
        addresses,
        records,
    }
}

/// What to check in one run.
struct Expect<'a> {
    what: String,
    domain: &'a str,
    /// The Corefile has a `kubernetes` plugin for the cluster domain (not node-local-dns).
    cluster: bool,
}

fn check(dns: &CoreDns, x: &Expect<'_>, failures: &mut Vec<String>) {
    let what = &x.what;
    let mut fail = |msg: String| failures.push(format!("{what}: {msg}"));
    let lb1 = [ip(LB1_IP)];
    let lb2_v4 = [ip(LB2_IPS[0])];
    let lb2_v6 = [ip(LB2_IPS[1])];
    let lb3 = [ip(LB3_IP)];
    let lb4 = [ip(LB4_IP)];
    let upstream = [IpAddr::V4(UPSTREAM_V4)];
    let a_cases: [(&str, &[IpAddr]); 26] = [
        ("www.example.com.", &lb1),
        ("www.example.com", &lb1),
        ("WWW.Example.COM.", &lb1),
        ("app.example.com.", &lb1),
        ("x.apps.example.org.", &lb1),
        ("X-1.APPS.example.org.", &lb1),
        ("api.apps.example.org.", &lb2_v4),
        ("a.example.net.", &lb2_v4),
        ("a.b.c.example.net.", &lb2_v4),
        ("x.deep.example.net.", &lb1),
        ("x.pets.example.org.", &lb2_v4),
        ("a.b.pets.example.org.", &upstream),
        ("skip.apps.example.org.", &upstream),
        ("www.example.io.", &upstream),
        ("api.t2.example.com.", &lb3),
        ("WWW.T3.example.com.", &lb3),
        ("solo.example.com.", &lb3),
        ("x.shop.example.com.", &lb3),
        ("api.t4.example.com.", &upstream),
        ("web.t1.example.com.", &upstream),
        ("a.b.shop.example.com.", &upstream),
        ("shop.k1.example.com.", &lb4),
        ("WWW.K2.example.com.", &lb4),
        ("x.kids.example.com.", &lb4),
        ("app.k1.example.com.", &upstream),
        ("a.b.kids.example.com.", &upstream),
    ];
    for (name, want) in a_cases {
        let got = dns.query(name, RecordType::A);
        if got.addresses() != want {
            fail(format!("{name} A: want {want:?}, got {got}"));
            continue;
        }
        // The answer is for the name asked (case aside), not for the Service's name.
        for rr in &got.answers {
            if !rr
                .name
                .eq_ignore_ascii_case(&format!("{}.", name.trim_end_matches('.')))
            {
                fail(format!("{name} A: answer owner {}", rr.name));
            }
            if want != upstream && rr.ttl > corefile::ANSWER_TTL {
                fail(format!(
                    "{name} A: TTL {} over {}",
                    rr.ttl,
                    corefile::ANSWER_TTL
                ));
            }
        }
    }
    // AAAA: LB1 has no IPv6 ClusterIP: NODATA, never NXDOMAIN.
    for name in [
        "www.example.com.",
        "x.apps.example.org.",
        "x.deep.example.net.",
    ] {
        let got = dns.query(name, RecordType::AAAA);
        if !got.is_nodata() {
            fail(format!("{name} AAAA: want NODATA, got {got}"));
        }
    }
    for name in ["api.apps.example.org.", "a.b.example.net."] {
        let got = dns.query(name, RecordType::AAAA);
        if got.addresses() != lb2_v6 {
            fail(format!("{name} AAAA: want {lb2_v6:?}, got {got}"));
        }
    }
    // Names hairpin does not own are untouched: the upstream's NXDOMAIN comes through.
    let got = dns.query("nothing.invalid.", RecordType::A);
    if !got.is_nxdomain() {
        fail(format!("nothing.invalid. A: want NXDOMAIN, got {got}"));
    }
    // A name two labels under a one-label wildcard is not covered.
    let got = dns.query("a.b.apps.example.org.", RecordType::A);
    if got.addresses() != upstream {
        fail(format!(
            "a.b.apps.example.org. A: want the upstream's, got {got}"
        ));
    }
    if x.cluster {
        let name = format!("kubernetes.default.svc.{}.", x.domain);
        let got = dns.query(&name, RecordType::A);
        if got.addresses() != [ip(KUBERNETES_IP)] {
            fail(format!("{name} A: want {KUBERNETES_IP}, got {got}"));
        }
        let name = format!("nothing.default.svc.{}.", x.domain);
        let got = dns.query(&name, RecordType::A);
        if !got.is_nxdomain() {
            fail(format!("{name} A: want NXDOMAIN, got {got}"));
        }
        // PTR of a ClusterIP: never one of hairpin's hostnames.
        let got = dns.query("20.0.96.10.in-addr.arpa.", RecordType::PTR);
        if got.answers.iter().any(|r| r.data.contains("example")) {
            fail(format!("PTR of {LB1_IP}: hijacked: {got}"));
        }
    }
}

fn fixtures(sub: &str) -> Vec<(String, String)> {
    support::corefile::read_fixtures(&golden(sub), |p| {
        let name = p.file_name().unwrap().to_string_lossy();
        name.ends_with(".Corefile") && name.matches('.').count() == 1
    })
}

/// The Corefile as CoreDNS here can read it: absolute `coredns-custom` import paths made
/// relative to its working directory.
fn runnable(text: &str) -> String {
    text.replace("/etc/coredns/custom/", "custom/")
}

#[test]
fn planned_corefiles_answer_right_in_real_coredns() {
    if skip_without("planned_corefiles_answer_right_in_real_coredns") {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = Vec::new();
    let mut apart = 0;
    let mut all = fixtures("corefiles");
    all.extend(fixtures("layouts"));
    for (name, original) in all {
        let node_local = name.contains("nodelocal");
        let info = corefile::analyze_with(&original, Some("cluster.local"));
        let domain = info
            .as_ref()
            .map_or("cluster.local".to_owned(), |i| i.cluster_domain.clone());
        let s = setup(&domain);
        let opts = PlaceOptions {
            addresses: s.addresses.clone(),
            cluster_domain: Some(domain.clone()),
            without_kubernetes: node_local,
            ..PlaceOptions::default()
        };
        let edit = match corefile::apply_placed(&original, &s.entries, &opts) {
            Ok(edit) => edit,
            Err(e) => {
                // Layouts hairpin refuses (ambiguous ports or zones): nothing to run.
                assert!(name.starts_with("ambiguous"), "{name}: {e}");
                continue;
            }
        };
        assert_eq!(
            corefile::remove(&edit.text).unwrap().text,
            original,
            "{name}"
        );
        // LB3's tenants are one cross product, and its wildcard shares their pattern.
        assert!(
            edit.text.contains(
                "^(?:(?:api|app|www)\\.(?:t1\\.example\\.com|t2\\.example\\.com|t3\\.example\\.com)|solo\\.example\\.com|[^.]+\\.shop\\.example\\.com)\\.$"
            ),
            "{name}: {}",
            edit.text
        );
        // LB4's names: their own rewrite rule, then the wildcard's (one pattern in templates).
        let lb4 =
            "(?:api|blog|cdn|docs|git|mail|shop|www)\\.(?:k1\\.example\\.com|k2\\.example\\.com)";
        assert!(edit.text.contains(lb4), "{name}: {}", edit.text);
        if edit.text.contains("rewrite stop name regex ^(?:api|blog|") {
            apart += 1;
            assert!(
                edit.text
                    .contains(&format!("rewrite stop name regex ^{lb4}\\.$ hairpin-lb-4."))
                    && edit.text.contains(
                        "rewrite stop name regex ^[^.]+\\.kids\\.example\\.com\\.$ hairpin-lb-4."
                    ),
                "{name}: {}",
                edit.text
            );
        }
        let options = Options {
            records: s.records.clone(),
            // placeholder-domain's `kubernetes {$CLUSTER_DOMAIN}`
            env: vec![("CLUSTER_DOMAIN".into(), domain.clone())],
            ..Options::default()
        };
        let x = Expect {
            what: format!("{name} (Corefile mode)"),
            domain: &domain,
            cluster: !node_local,
        };
        let Some(dns) = CoreDns::start_with(&x.what, &runnable(&edit.text), &options) else {
            return;
        };
        check(&dns, &x, &mut failures);
        ran.push(x.what.clone());
        drop(dns);

        // coredns-custom mode: the rules in the imported key, the Corefile as it is.
        let Some(suffix) = info.as_ref().ok().and_then(|i| i.custom_key_suffix()) else {
            continue;
        };
        let key = format!("hairpin{suffix}");
        let options = Options {
            records: s.records.clone(),
            files: vec![(
                format!("custom/{key}"),
                corefile::render_override(&s.entries).unwrap(),
            )],
            ..Options::default()
        };
        let x = Expect {
            what: format!("{name} (coredns-custom {key})"),
            domain: &domain,
            cluster: true,
        };
        let Some(dns) = CoreDns::start_with(&x.what, &runnable(&original), &options) else {
            return;
        };
        check(&dns, &x, &mut failures);
        ran.push(x.what.clone());
    }
    println!("ran {} Corefiles in CoreDNS: {ran:?}", ran.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ran.len() >= 20, "{ran:?}");
    assert!(apart >= 15, "LB4's own rule in {apart} Corefiles");
}

/// The user's own `rewrite` rules keep their place: one before hairpin's block (in Corefile
/// order; hairpin's block goes right before `kubernetes`) still wins with `stop`, hairpin's
/// `stop` rules win over one after it, and a user rule on a name hairpin does not own still
/// applies.
#[test]
fn user_rewrites_keep_their_order_around_hairpins_stop_rules() {
    let original = ".:53 {\n    errors\n    \
        rewrite stop name exact app.example.com kubernetes.default.svc.cluster.local\n    \
        kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       \
        fallthrough in-addr.arpa ip6.arpa\n    }\n    \
        rewrite name exact www.example.com kubernetes.default.svc.cluster.local\n    \
        rewrite name exact user.example.com kubernetes.default.svc.cluster.local\n    \
        forward . /etc/resolv.conf\n    reload\n}\n";
    let s = setup("cluster.local");
    let opts = PlaceOptions {
        addresses: s.addresses.clone(),
        ..PlaceOptions::default()
    };
    let edit = corefile::apply_placed(original, &s.entries, &opts).unwrap();
    let at = |needle: &str| edit.text.find(needle).unwrap();
    assert!(at("rewrite stop name exact app.example.com kube") < at("# BEGIN hairpin"));
    assert!(at("# END hairpin") < at("rewrite name exact www.example.com"));
    let options = Options {
        records: s.records.clone(),
        ..Options::default()
    };
    let test = "user_rewrites_keep_their_order_around_hairpins_stop_rules";
    let Some(dns) = CoreDns::start_with(test, &edit.text, &options) else {
        return;
    };
    for (name, want) in [
        ("app.example.com.", KUBERNETES_IP),
        ("www.example.com.", LB1_IP),
        ("user.example.com.", KUBERNETES_IP),
        ("x.apps.example.org.", LB1_IP),
    ] {
        let got = dns.query(name, RecordType::A);
        assert_eq!(got.addresses(), [ip(want)], "{name}: {got}");
    }
}

/// The Corefile goldens themselves (`tests/golden/corefile/*.insert.Corefile` and
/// `*.update.Corefile`, written by `corefile_golden` with its sets A and B), checked by real
/// CoreDNS rather than by the renderer that wrote them: each one starts, its hairpinned names
/// answer with their load balancer's hairpin Service, and after the update a name of set A only
/// is answered from upstream again.
#[test]
fn the_corefile_goldens_answer_right_in_real_coredns() {
    const LB1: &str = "hairpin-lb-1.hairpin.svc.cluster.local";
    const LB2: &str = "hairpin-lb-2.hairpin.svc.cluster.local";
    let test = "the_corefile_goldens_answer_right_in_real_coredns";
    if skip_without(test) {
        return;
    }
    let (lb1, lb2) = (ip("10.96.0.101"), ip("10.96.0.102"));
    let options = Options {
        records: vec![(LB1.into(), lb1), (LB2.into(), lb2)],
        ..Options::default()
    };
    let upstream = IpAddr::V4(UPSTREAM_V4);
    // (golden suffix, name, the address it must answer with)
    let expectations: [(&str, &[(&str, IpAddr)]); 2] = [
        (
            ".insert.Corefile",
            &[
                ("www.example.com.", lb1),
                ("App.Example.COM.", lb1),
                ("x.apps.example.org.", lb2),
                ("other.example.com.", upstream),
            ],
        ),
        (
            ".update.Corefile",
            &[
                ("app-7.team-a.example.com.", lb1),
                ("auth.example.net.", lb1),
                ("registry.example.org.", lb2),
                ("x.example.io.", lb2),
                // A wildcard stands for one label, as in an Ingress.
                ("deep.x.example.io.", upstream),
                ("www.example.com.", upstream),
            ],
        ),
    ];
    let mut failures = Vec::new();
    let mut checked = 0;
    for (name, text) in support::corefile::read_fixtures(&golden("corefile"), |p| {
        p.extension().is_some_and(|x| x == "Corefile")
    }) {
        let file = format!("{name}.Corefile");
        let Some((_, names)) = expectations.iter().find(|(s, _)| file.ends_with(s)) else {
            continue;
        };
        let Some(dns) = CoreDns::start_with(&file, &runnable(&text), &options) else {
            return;
        };
        checked += 1;
        for (query, want) in *names {
            let answer = dns.query(query, RecordType::A);
            if answer.addresses() != [*want] {
                failures.push(format!("{file}: {query} answered {answer}, not {want}"));
            }
        }
    }
    assert!(checked >= 30, "only {checked} Corefile goldens found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
