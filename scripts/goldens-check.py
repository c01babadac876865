#!/usr/bin/env python3
"""An independent check of the `hairpin plan -o yaml` goldens (crates/hairpin/tests/golden/plans/
*.objects.yaml): they are written by hairpin's own renderer (`HAIRPIN_BLESS=1`), so here every
object is validated against the Kubernetes OpenAPI schema instead (kubernetes-validate, strict:
an unknown field fails), for the oldest and newest Kubernetes the chart supports. DNSEndpoint
(external-dns's CRD) is not in those schemas: its fields are checked against external-dns's
`endpoint.Endpoint` (sigs.k8s.io/external-dns/endpoint), as chart-check.py checks the
Prometheus Operator kinds. Run by scripts/chart-check.sh, in its virtualenv.

The Corefile goldens have theirs in real CoreDNS (crates/planner/tests/coredns_answers.rs).
"""
import glob
import os
import sys

import kubernetes_validate
import yaml

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
KUBE_VERSIONS = ["1.26.0", "1.35.0"]
ENDPOINT_KEYS = {"dnsName", "targets", "recordType", "setIdentifier", "recordTTL", "labels", "providerSpecific"}
RECORD_TYPES = {"A", "AAAA", "CNAME", "TXT", "SRV", "NS", "PTR", "MX", "NAPTR"}


def dns_endpoint(doc, where):
    errors = []
    if doc.get("apiVersion") != "externaldns.k8s.io/v1alpha1":
        errors.append("%s: apiVersion %r" % (where, doc.get("apiVersion")))
    spec = doc.get("spec") or {}
    if set(spec) - {"endpoints"}:
        errors.append("%s: unknown spec fields %s" % (where, sorted(set(spec) - {"endpoints"})))
    for i, ep in enumerate(spec.get("endpoints") or []):
        at = "%s endpoints[%d]" % (where, i)
        unknown = set(ep) - ENDPOINT_KEYS
        if unknown:
            errors.append("%s: unknown fields %s" % (at, sorted(unknown)))
        if not isinstance(ep.get("dnsName"), str) or not ep["dnsName"]:
            errors.append("%s: no dnsName" % at)
        if ep.get("recordType") not in RECORD_TYPES:
            errors.append("%s: recordType %r" % (at, ep.get("recordType")))
        targets = ep.get("targets")
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            errors.append("%s: targets %r" % (at, targets))
        if "recordTTL" in ep and not isinstance(ep["recordTTL"], int):
            errors.append("%s: recordTTL %r" % (at, ep["recordTTL"]))
    return errors


def main():
    files = sorted(glob.glob(os.path.join(ROOT, "crates/hairpin/tests/golden/plans/*.objects.yaml")))
    if not files:
        sys.exit("goldens-check: no crates/hairpin/tests/golden/plans/*.objects.yaml")
    errors, objects = [], 0
    for path in files:
        rel = os.path.relpath(path, ROOT)
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            objects += 1
            meta = doc.get("metadata") or {}
            where = "%s: %s %s/%s" % (rel, doc.get("kind"), meta.get("namespace"), meta.get("name"))
            if doc.get("kind") == "DNSEndpoint":
                errors += dns_endpoint(doc, where)
                continue
            for version in KUBE_VERSIONS:
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as err:
                    errors.append("%s: invalid for Kubernetes %s: %s at %s" % (
                        where, version, err.message, "/".join(str(p) for p in err.path)))
                except kubernetes_validate.SchemaNotFoundError:
                    errors.append("%s: no schema (Kubernetes %s)" % (where, version))
    for e in errors:
        print("goldens-check: " + e, file=sys.stderr)
    if errors:
        sys.exit(1)
    print("goldens-check: %d objects in %d -o yaml goldens are valid Kubernetes objects" % (objects, len(files)))


if __name__ == "__main__":
    main()
