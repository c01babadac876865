//! `docs/controller.md`'s table of denial messages (issue 47 item 4) is the shipped manifest's:
//! every ValidatingAdmissionPolicy of `deploy/hairpin.yaml`, what it matches, and the message
//! of each of its validations, as the user sees it. `HAIRPIN_BLESS=1` rewrites the table.

mod support;

use std::path::PathBuf;

use serde_json::Value;

const BEGIN: &str = "<!-- BEGIN denials (generated) -->\n";
const END: &str = "<!-- END denials (generated) -->";

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `verbs resources` of each resource rule: `UPDATE services/status`.
fn matches(policy: &Value) -> String {
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    rules
        .iter()
        .map(|r| {
            let list = |v: &Value| {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default()
            };
            let mut out = format!("{} {}", list(&r["operations"]), list(&r["resources"]));
            if r["resourceNames"].is_array() {
                out.push_str(&format!(" ({})", list(&r["resourceNames"])));
            }
            out
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn table() -> String {
    let mut out = String::from(
        "| policy | matches (the ServiceAccount's requests) | denial message |\n|---|---|---|\n",
    );
    let mut policies = 0;
    for object in support::manifest() {
        if object["kind"] != "ValidatingAdmissionPolicy" {
            continue;
        }
        policies += 1;
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let on = matches(&object);
        for v in object["spec"]["validations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let message = v["message"].as_str().unwrap_or("(the expression)");
            out.push_str(&format!(
                "| `{name}` | {} | {} |\n",
                cell(&on),
                cell(message)
            ));
        }
    }
    assert!(policies >= 7, "{policies} policies in deploy/hairpin.yaml");
    out
}

#[test]
fn the_docs_list_every_denial_of_the_manifest() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/controller.md");
    let doc = std::fs::read_to_string(&path).expect("docs/controller.md");
    let start = doc.find(BEGIN).expect("the begin marker") + BEGIN.len();
    let end = doc.find(END).expect("the end marker");
    let actual = table();
    if hairpin_testkit::golden::blessing() {
        let new = format!("{}{actual}{}", &doc[..start], &doc[end..]);
        hairpin_testkit::golden::bless(&path, &new);
        return;
    }
    assert!(
        doc[start..end] == actual,
        "docs/controller.md's denial table differs from deploy/hairpin.yaml; run \
         HAIRPIN_BLESS=1 cargo test -p hairpin --test policy_table to rewrite it; it reads:\n{actual}"
    );
}
