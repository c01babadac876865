//! A real kube-apiserver (with etcd) for a script, as the tests get it ([`ApiServer::start`]):
//!
//! ```text
//! cargo run -p hairpin-testkit --example apiserver
//! ```
//!
//! Once `/readyz` answers 200 it prints one JSON line on stdout,
//! `{"kubeconfig": PATH, "url": URL, "ca": PATH}` (the admin's kubeconfig, `system:masters`).
//! Then each line read from stdin is an object (JSON) to apply as the admin (server-side apply,
//! create or update), answered by one JSON line, `{"status": CODE, "object": AS_STORED}`. When
//! stdin closes the apiserver and etcd are killed and their folder removed (as when the
//! `ApiServer` of a test is dropped; a reaper does the same if this process is killed).
//! scripts/hot-symbols.sh drives `hairpin proxy --routes-configmap` against it.
//!
//! Needs what the real-Kubernetes tests need (root, the test peers, etcd): without them it
//! prints why on stderr and exits with 2.

use std::io::{self, BufRead as _, Write as _};
use std::process::ExitCode;

use hairpin_testkit::kube::{self, ApiServer};
use serde_json::{Value, json};

fn main() -> ExitCode {
    if let Some(reason) = kube::skip_reason() {
        eprintln!("apiserver: cannot start a real kube-apiserver here: {reason}");
        return ExitCode::from(2);
    }
    let api = match ApiServer::start() {
        Ok(api) => api,
        Err(err) => {
            eprintln!("apiserver: start: {err}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "apiserver: ready at {} in {:?}",
        api.url(),
        api.started_in()
    );
    let mut out = io::stdout().lock();
    let ready = json!({
        "kubeconfig": api.admin_kubeconfig(),
        "url": api.url(),
        "ca": api.ca_file(),
    });
    if writeln!(out, "{ready}").and_then(|()| out.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Value>(&line) {
            Ok(object) if object["metadata"]["name"].is_string() => {
                let path = format!(
                    "{}?fieldManager=hairpin-test&force=true",
                    kube::object_path(&object)
                );
                match api.request(
                    "PATCH",
                    &path,
                    Some(("application/apply-patch+yaml", &object)),
                ) {
                    Ok((status, stored)) => json!({"status": status, "object": stored}),
                    Err(err) => json!({"status": 0, "error": err.to_string()}),
                }
            }
            Ok(_) => json!({"status": 0, "error": "not an object with metadata.name"}),
            Err(err) => json!({"status": 0, "error": err.to_string()}),
        };
        if writeln!(out, "{answer}")
            .and_then(|()| out.flush())
            .is_err()
        {
            break;
        }
    }
    drop(api);
    ExitCode::SUCCESS
}
