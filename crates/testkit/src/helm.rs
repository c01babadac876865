//! The chart rendered by Helm's own engine (the helm-python-sdk wheel that
//! `scripts/render-manifest.sh` and `scripts/chart-check.sh` install), for tests that apply what
//! `helm install` or `helm upgrade` would to a real API server.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::skip::{self, Cause};

/// The repository's chart.
pub fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/hairpin")
}

/// The chart at `chart` rendered with `values` as release `hairpin` in namespace `hairpin`, as
/// `helm upgrade` renders it (hooks and NOTES.txt left out). `None` without the wheel: the test
/// `test` is skipped ([`skip::skip`]: a failure under CI).
pub fn render(test: &str, chart: &Path, values: &Value) -> Option<Vec<Value>> {
    let venv = std::env::var("HAIRPIN_HELM_VENV").map_or_else(
        |_| {
            let home = std::env::var("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/hairpin/helm-venv")
        },
        PathBuf::from,
    );
    let python = venv.join("bin/python");
    if !python.exists() {
        skip::skip(
            test,
            Cause::Missing,
            &format!(
                "no helm-python-sdk at {} (run scripts/chart-check.sh once)",
                venv.display()
            ),
        );
        return None;
    }
    let script = r#"
import json, sys
import helm_python as helm, yaml
with helm.Chart.load(sys.argv[1]) as chart:
    rendered = chart.render(json.loads(sys.argv[2]), name="hairpin", namespace="hairpin")
docs = []
for source, text in sorted(rendered.items()):
    if source.endswith("NOTES.txt"):
        continue
    for doc in yaml.safe_load_all(text):
        if doc and "helm.sh/hook" not in (doc.get("metadata", {}).get("annotations") or {}):
            docs.append(doc)
print(json.dumps(docs))
"#;
    let out = Command::new(python)
        .args(["-c", script])
        .arg(chart)
        .arg(values.to_string())
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "render: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("rendered JSON"))
}
