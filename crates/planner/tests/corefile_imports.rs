//! Server blocks imported from `coredns-custom` keys (`import custom/*.server`, AKS and k3s):
//! a name under such a block's zone is received by that block, so hairpin answers it there, by
//! pure insertion into that key, and the Corefile's own blocks keep the rest. Golden files in
//! `tests/golden/imports/` (`HAIRPIN_BLESS=1` rewrites them), and properties over generated
//! imported files.

mod support;

use std::fs;

use hairpin_planner::corefile::{
    self, CorefileError, DnsEntry, Form, ImportedFile, PlaceOptions, imported_key_suffixes,
    place_with_imports,
};
use proptest::prelude::*;
use support::corefile::{
    LB1, LB2, block_lines, check_golden, golden_dir as golden, opts, strip_blocks,
};

/// Places `entries` over the Corefile and its imported files, writes every file, checks pure
/// insertion, idempotence and exact removal, and returns the edited texts.
fn edit_all(
    corefile: &str,
    files: &[ImportedFile],
    entries: &[DnsEntry],
    opts: &PlaceOptions,
) -> (String, Vec<String>) {
    let placed = place_with_imports(corefile, files, entries, opts).unwrap();
    let main = corefile::write_blocks(corefile, &placed.main.inserts)
        .unwrap()
        .text;
    let imported: Vec<String> = files
        .iter()
        .zip(&placed.imported)
        .map(|(f, inserts)| {
            corefile::write_blocks(&f.text, inserts.as_ref().unwrap())
                .unwrap()
                .text
        })
        .collect();
    assert_eq!(
        strip_blocks(&main),
        corefile,
        "the Corefile: not pure insertion"
    );
    assert_eq!(corefile::remove(&main).unwrap().text, corefile);
    for (f, text) in files.iter().zip(&imported) {
        assert_eq!(strip_blocks(text), f.text, "{}: not pure insertion", f.name);
        assert_eq!(corefile::remove(text).unwrap().text, f.text, "{}", f.name);
    }
    // Applying again over the edited texts changes nothing.
    let edited: Vec<ImportedFile> = files
        .iter()
        .zip(&imported)
        .map(|(f, text)| ImportedFile {
            name: f.name.clone(),
            text: text.clone(),
        })
        .collect();
    let again = place_with_imports(&main, &edited, entries, opts).unwrap();
    assert_eq!(
        corefile::write_blocks(&main, &again.main.inserts)
            .unwrap()
            .text,
        main
    );
    for (f, inserts) in edited.iter().zip(&again.imported) {
        let text = corefile::write_blocks(&f.text, inserts.as_ref().unwrap()).unwrap();
        assert!(!text.changed, "{}: applying twice differs", f.name);
    }
    (main, imported)
}

#[test]
fn the_server_import_of_aks_and_k3s_is_found() {
    for (fixture, suffixes) in [
        ("aks.Corefile", vec![".server"]),
        ("aks-2023.Corefile", vec![".server"]),
        ("k3s.Corefile", vec![".server"]),
        ("kubeadm.Corefile", vec![]),
    ] {
        let text = fs::read_to_string(golden("corefiles").join(fixture)).unwrap();
        assert_eq!(imported_key_suffixes(&text).unwrap(), suffixes, "{fixture}");
    }
    // One named file is not a glob of keys; `import` inside a server block is not top-level.
    assert!(
        imported_key_suffixes(
            ".:53 {\n kubernetes\n import custom/*.override\n}\nimport extra.conf\n"
        )
        .unwrap()
        .is_empty()
    );
}

#[test]
fn names_under_an_imported_zone_are_answered_in_that_key() {
    let corefile = fs::read_to_string(golden("corefiles").join("aks.Corefile")).unwrap();
    let server = fs::read_to_string(golden("imports").join("example.server")).unwrap();
    let files = [ImportedFile {
        name: "example.server".into(),
        text: server.clone(),
    }];
    let entries = [
        DnsEntry::new("www.example.com", LB1).unwrap(),
        DnsEntry::new("*.apps.example.com", LB2).unwrap(),
        DnsEntry::new("shop.example.org", LB1).unwrap(),
    ];
    let placed = place_with_imports(&corefile, &files, &entries, &opts()).unwrap();
    // The Corefile's `.:53` rewrites what it receives: example.org only.
    assert_eq!(placed.main.inserts.len(), 1);
    assert_eq!(placed.main.inserts[0].server.keys, ".:53");
    assert_eq!(placed.main.inserts[0].form, Form::Rewrite);
    let main_rules = placed.main.inserts[0].lines.join("\n");
    assert!(main_rules.contains("shop.example.org"), "{main_rules}");
    assert!(!main_rules.contains("example.com"), "{main_rules}");
    // `example.com:53` in the key answers its names with the ClusterIPs (A and AAAA), in
    // the template form (never a second `hosts` plugin).
    let inserts = placed.imported[0].as_ref().unwrap();
    assert_eq!(inserts.len(), 1);
    assert_eq!(inserts[0].server.keys, "example.com:53");
    assert_eq!(inserts[0].form, Form::Answer);
    let answers = inserts[0].lines.join("\n");
    assert!(
        answers.contains("10.96.0.20") && answers.contains("fd00::21"),
        "{answers}"
    );
    assert!(!answers.contains("hosts"), "{answers}");
    assert!(answers.contains("fallthrough"), "{answers}");

    let (main, imported) = edit_all(&corefile, &files, &entries, &opts());
    check_golden(&golden("imports/aks.placed.Corefile"), &main);
    check_golden(&golden("imports/example.placed.server"), &imported[0]);
    assert!(
        block_lines(&imported[0])
            .iter()
            .any(|l| l.starts_with("template IN A"))
    );
    assert!(
        block_lines(&imported[0])
            .iter()
            .any(|l| l.starts_with("template IN AAAA"))
    );
}

#[test]
fn an_unreadable_key_is_left_out_and_the_rest_is_still_placed() {
    let corefile = fs::read_to_string(golden("corefiles").join("k3s.Corefile")).unwrap();
    let files = [
        ImportedFile {
            name: "broken.server".into(),
            text: "example.net:53 {\n    forward . 192.0.2.1\n".into(),
        },
        ImportedFile {
            name: "example.server".into(),
            text: fs::read_to_string(golden("imports").join("example.server")).unwrap(),
        },
    ];
    let entries = [DnsEntry::new("www.example.com", LB1).unwrap()];
    let placed = place_with_imports(&corefile, &files, &entries, &opts()).unwrap();
    assert!(
        matches!(placed.imported[0], Err(CorefileError::Syntax { .. })),
        "{placed:?}"
    );
    assert!(
        !placed.imported[1].as_ref().unwrap().is_empty(),
        "{placed:?}"
    );
    assert_eq!(
        placed.imported[1].as_ref().unwrap()[0].server.keys,
        "example.com:53"
    );
    assert!(placed.main.inserts.is_empty(), "{:?}", placed.main.inserts);
}

#[test]
fn a_stale_block_leaves_a_key_whose_zone_no_longer_receives_the_name() {
    let corefile = fs::read_to_string(golden("corefiles").join("aks.Corefile")).unwrap();
    let server = fs::read_to_string(golden("imports").join("example.server")).unwrap();
    let files = [ImportedFile {
        name: "example.server".into(),
        text: server.clone(),
    }];
    let entries = [DnsEntry::new("www.example.com", LB1).unwrap()];
    let (main, imported) = edit_all(&corefile, &files, &entries, &opts());
    assert_eq!(main, corefile);
    // The hostname goes: its block leaves the key, which is byte for byte what it was.
    let edited = [ImportedFile {
        name: "example.server".into(),
        text: imported[0].clone(),
    }];
    let placed = place_with_imports(&main, &edited, &[], &opts()).unwrap();
    let text = corefile::write_blocks(&edited[0].text, placed.imported[0].as_ref().unwrap())
        .unwrap()
        .text;
    assert_eq!(text, server);
}

// Properties -----------------------------------------------------------------------------------

fn host() -> impl Strategy<Value = String> {
    (
        prop::bool::weighted(0.2),
        "[a-z]([a-z0-9-]{0,5}[a-z0-9])?",
        prop::sample::select(vec![
            "example.com",
            "team.example.com",
            "example.org",
            "internal.example.net",
        ]),
    )
        .prop_map(|(wildcard, label, domain)| {
            if wildcard {
                format!("*.{domain}")
            } else {
                format!("{label}.{domain}")
            }
        })
}

fn entries() -> impl Strategy<Value = Vec<DnsEntry>> {
    prop::collection::btree_map(host(), prop::bool::ANY, 0..20).prop_map(|m| {
        m.into_iter()
            .map(|(n, second)| DnsEntry::new(&n, if second { LB2 } else { LB1 }).unwrap())
            .collect()
    })
}

/// An imported file: one or two zone blocks with random formatting.
#[derive(Debug, Clone)]
struct File {
    zones: Vec<&'static str>,
    indent: &'static str,
    crlf: bool,
    final_newline: bool,
    comment: bool,
    brace_own_line: bool,
}

fn file() -> impl Strategy<Value = File> {
    (
        prop::sample::subsequence(vec!["example.com", "team.example.com", "example.net"], 1..3),
        prop::sample::select(vec!["  ", "    ", "\t"]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(zones, indent, crlf, final_newline, comment, brace_own_line)| File {
                zones,
                indent,
                crlf,
                final_newline,
                comment,
                brace_own_line,
            },
        )
}

fn render(f: &File) -> String {
    let i = f.indent;
    let mut lines = Vec::new();
    if f.comment {
        lines.push("# forwarded zones { managed by the platform team".to_owned());
    }
    for zone in &f.zones {
        if f.brace_own_line {
            lines.push(format!("{zone}:53"));
            lines.push("{".to_owned());
        } else {
            lines.push(format!("{zone}:53 {{"));
        }
        lines.push(format!("{i}errors"));
        lines.push(format!("{i}cache 30"));
        lines.push(format!("{i}forward . 192.0.2.53 {{"));
        lines.push(format!("{i}{i}force_tcp"));
        lines.push(format!("{i}}}"));
        lines.push("}".to_owned());
    }
    let eol = if f.crlf { "\r\n" } else { "\n" };
    let mut text = lines.join(eol);
    if f.final_newline {
        text.push_str(eol);
    }
    text
}

/// The most specific of `zones` holding `name` (a wildcard's name is its suffix).
fn receiving_zone<'a>(name: &str, zones: &[&'a str]) -> Option<&'a str> {
    zones
        .iter()
        .filter(|z| name == **z || name.ends_with(&format!(".{z}")))
        .max_by_key(|z| z.len())
        .copied()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn imported_zones_answer_their_names_by_pure_insertion(f in file(), e in entries(), k3s in any::<bool>()) {
        let fixture = if k3s { "k3s.Corefile" } else { "aks.Corefile" };
        let corefile = fs::read_to_string(golden("corefiles").join(fixture)).unwrap();
        let files = [ImportedFile { name: "zones.server".into(), text: render(&f) }];
        // Every name where CoreDNS sends it: each entry alone.
        for entry in &e {
            let name = entry.name.name();
            let wildcard = entry.name.wildcard_labels().is_some();
            let receiver = receiving_zone(name, &f.zones);
            // A wildcard also reaches the zones just under its suffix.
            let reaches_below = wildcard
                && f.zones.iter().any(|z| z.ends_with(&format!(".{name}")));
            let placed = place_with_imports(&corefile, &files, std::slice::from_ref(entry), &opts()).unwrap();
            let in_file = placed.imported[0].as_ref().unwrap();
            prop_assert_eq!(!in_file.is_empty(), receiver.is_some() || reaches_below, "{}", name);
            prop_assert!(in_file.iter().all(|i| i.form == Form::Answer));
            prop_assert_eq!(!placed.main.inserts.is_empty(), receiver.is_none(), "{}", name);
            if let Some(zone) = receiver {
                let key = format!("{zone}:53");
                prop_assert!(in_file.iter().any(|i| i.server.keys == key));
            }
        }
        // All together: pure insertion in both, idempotent, removed exactly; never a `hosts`
        // plugin or a rewrite in the key.
        let (_, imported) = edit_all(&corefile, &files, &e, &opts());
        let lines = block_lines(&imported[0]);
        prop_assert!(lines.iter().all(|l| !l.starts_with("hosts") && !l.starts_with("rewrite")));
    }
}
