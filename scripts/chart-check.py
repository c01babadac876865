"""Check charts/hairpin with Helm's own engine (helm-python-sdk) and kubernetes-validate.

    chart-check.py CHART   (through scripts/chart-check.sh, which provides the virtualenv)

1. values.yaml and values.schema.json agree: every value in values.yaml is in the schema,
   every value the schema lists is in values.yaml, and each is described by a comment.
2. The schema rejects typos and bad values (`--set controller.replica=3` must fail).
3. For several value combinations: `helm lint --strict`, then a render whose every object is
   validated against the Kubernetes OpenAPI schema (strict: unknown fields fail) of the
   oldest Kubernetes the chart supports and of the newest kubernetes-validate knows.
   Prometheus Operator kinds are not in those schemas: they are checked structurally here.
4. The PrometheusRule and the dashboard only name metrics hairpin exports.
Exits 1 with every failure listed.
"""

import json
import os
import re
import sys

import helm_python as helm
import kubernetes_validate
import yaml

KUBE_VERSIONS = ["1.26.0", "1.35.0"]
# Kinds newer than the oldest version: validated only from the version that serves them (the
# chart refuses to install them on an older cluster, admission-policy.yaml).
SINCE = {"ValidatingAdmissionPolicy": "1.30.0", "ValidatingAdmissionPolicyBinding": "1.30.0"}


def version_tuple(version):
    return tuple(int(p) for p in version.split("."))

NAMESPACE = "hairpin"

# name -> (values, what must be rendered: kinds expected among the objects)
COMBINATIONS = {
    "defaults": ([], {"Deployment", "Service", "Job", "Pod", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}),
    "node agent": (["nodeAgent.enabled=true", "nodeAgent.dacOverride=true"], {"DaemonSet"}),
    "monitors": (
        [
            "metrics.serviceMonitor.enabled=true",
            "metrics.podMonitor.enabled=true",
            "metrics.prometheusRule.enabled=true",
            "metrics.grafanaDashboard.enabled=true",
            "nodeAgent.enabled=true",
        ],
        {"ServiceMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"},
    ),
    "everything on": (
        [
            "nameOverride=hp",
            "fullnameOverride=edge",
            "image.digest=sha256:" + "ab" * 32,
            "controller.priorityClassName=system-cluster-critical",
            "proxy.priorityClassName=system-cluster-critical",
            "nodeAgent.enabled=true",
            "nodeAgent.priorityClassName=system-node-critical",
            "controller.podLabels.team=edge",
            "networkPolicy.enabled=true",
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.interval=30s",
            "metrics.serviceMonitor.scrapeTimeout=10s",
            "metrics.serviceMonitor.labels.release=prometheus",
            "metrics.podMonitor.enabled=true",
            "metrics.podMonitor.interval=1m",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.alertLabels.team=edge",
            "metrics.grafanaDashboard.enabled=true",
            "metrics.grafanaDashboard.namespace=monitoring",
            "test.hosts={app.example.com,shop.example.com}",
        ],
        {"DaemonSet", "NetworkPolicy", "ServiceMonitor", "PodMonitor", "PrometheusRule"},
    ),
    "external-dns mode": (["coredns.dnsMode=external-dns"], {"Role", "Deployment"}),
    "no receiver ConfigMaps": (["receivers.configMaps=null"], {"ClusterRole"}),
    "everything off": (
        [
            "uninstallHook.enabled=false",
            "test.enabled=false",
            "controller.podDisruptionBudget.enabled=false",
            "proxy.podDisruptionBudget.enabled=false",
            "admissionPolicy.enabled=false",
        ],
        {"Deployment"},
    ),
    "dns cure": (["controller.cure=dns"], {"ClusterRole", "ValidatingAdmissionPolicy"}),
}

# Each must be rejected by values.schema.json.
MUST_FAIL = [
    "controller.replica=3",
    "nodeAgent.intervall=10",
    "image.pullPolicy=Sometimes",
    "log.format=xml",
    "coredns.dnsMode=magic",
    "metrics.serviceMonitor.enable=true",
    "image.digest=latest",
    "controller.debounce=soon",
    "proxy.listenerPortBase=80",
    "test.port=0",
]

failures = []


def fail(message):
    failures.append(message)
    sys.stderr.write("chart-check: %s\n" % message)


def parse_sets(sets):
    values = {}
    for expression in sets:
        merge(values, helm.parse_set_string(expression))
    return values


def merge(into, new):
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


# 1. values.yaml <-> schema ------------------------------------------------------------------


def schema_paths(node, prefix=""):
    """(path, closed) for every property the schema names; closed: its own keys are fixed."""
    for key, child in node.get("properties", {}).items():
        path = prefix + key
        closed = child.get("additionalProperties") is False and "properties" in child
        yield path, closed
        if closed:
            yield from schema_paths(child, path + ".")


def documented_keys(values_text):
    """{dotted path: has a comment} for the block-style keys of values.yaml."""
    keys = {}
    stack = []  # (indent, key)
    previous = ""
    for line in values_text.splitlines():
        match = re.match(r"^( *)([A-Za-z][A-Za-z0-9_]*):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([k for _, k in stack] + [match.group(2)])
            keys[path] = previous.strip().startswith("#")
            stack.append((indent, match.group(2)))
        if line.strip():
            previous = line
    return keys


def check_values_documented(chart_dir, schema):
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        text = f.read()
    keys = documented_keys(text)
    paths = dict(schema_paths(schema))
    parents_closed = {path for path, closed in paths.items() if closed}
    for path in paths:
        if path == "global":
            continue
        if path not in keys:
            fail("values.yaml lacks %s, which values.schema.json lists (document it there)" % path)
        elif not keys[path] and path not in parents_closed:
            fail("values.yaml: %s has no comment describing it" % path)
        leaf = schema
        for part in path.split("."):
            leaf = leaf["properties"][part]
        if "description" not in leaf:
            fail("values.schema.json: %s has no description" % path)
    for path in keys:
        parent = path.rsplit(".", 1)[0] if "." in path else ""
        if (parent == "" or parent in parents_closed) and path not in paths:
            fail("values.yaml has %s, which values.schema.json does not list" % path)


# 2. typos ------------------------------------------------------------------------------------


def check_typos(chart):
    for expression in MUST_FAIL:
        values = parse_sets([expression])
        try:
            chart.render(values, name="hairpin", namespace=NAMESPACE)
        except helm.HelmError as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            print("chart-check: rejected as it must be: --set %s (%s)" % (expression, first))
            continue
        fail("values.schema.json accepts --set %s" % expression)


# 3. renders ----------------------------------------------------------------------------------

MONITORING_SPEC_KEYS = {
    "ServiceMonitor": {"namespaceSelector", "selector", "endpoints", "jobLabel"},
    "PodMonitor": {"namespaceSelector", "selector", "podMetricsEndpoints", "jobLabel"},
    "PrometheusRule": {"groups"},
}
ENDPOINT_KEYS = {"port", "path", "interval", "scrapeTimeout", "relabelings", "metricRelabelings"}
RULE_KEYS = {"alert", "record", "expr", "for", "labels", "annotations"}
DURATION = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def check_monitoring(doc, where):
    """Structural checks of the Prometheus Operator kinds (their CRD schemas are not in
    kubernetes-validate): known fields only, required fields present, durations valid."""
    kind = doc["kind"]
    if doc.get("apiVersion") != "monitoring.coreos.com/v1":
        fail("%s: apiVersion %s" % (where, doc.get("apiVersion")))
    spec = doc.get("spec") or {}
    unknown = set(spec) - MONITORING_SPEC_KEYS[kind]
    if unknown:
        fail("%s: unknown spec fields %s" % (where, sorted(unknown)))
    if kind in ("ServiceMonitor", "PodMonitor"):
        endpoints = spec.get("endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints")
        if not endpoints or not spec.get("selector"):
            fail("%s: needs a selector and endpoints" % where)
        for endpoint in endpoints or []:
            if set(endpoint) - ENDPOINT_KEYS:
                fail("%s: unknown endpoint fields %s" % (where, sorted(set(endpoint) - ENDPOINT_KEYS)))
            for key in ("interval", "scrapeTimeout"):
                if key in endpoint and not DURATION.match(str(endpoint[key])):
                    fail("%s: %s %r is not a Prometheus duration" % (where, key, endpoint[key]))
    else:
        for group in spec.get("groups", []):
            if not group.get("name") or not group.get("rules"):
                fail("%s: a rule group needs a name and rules" % where)
            for rule in group.get("rules", []):
                if set(rule) - RULE_KEYS or not rule.get("expr") or not (rule.get("alert") or rule.get("record")):
                    fail("%s: malformed rule %r" % (where, rule))
                if "for" in rule and not DURATION.match(str(rule["for"])):
                    fail("%s: for %r is not a Prometheus duration" % (where, rule["for"]))
                if not isinstance(rule["expr"], str) or rule["expr"].count("(") != rule["expr"].count(")"):
                    fail("%s: unbalanced expression %r" % (where, rule.get("expr")))


def check_render(chart, name, sets, expected_kinds, metrics):
    values = parse_sets(sets)
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=KUBE_VERSIONS[0])
    for message in report.get("messages", []):
        if message.get("severity", 0) >= 2:
            fail("[%s] helm lint: %s: %s" % (name, message.get("path"), message.get("error")))
    for error in report.get("errors", []):
        fail("[%s] helm lint: %s" % (name, error))
    rendered = chart.render(values, name="hairpin", namespace=NAMESPACE)
    kinds = set()
    count = 0
    docs = []
    for source, text in sorted(rendered.items()):
        if source.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if not doc:
                continue
            count += 1
            docs.append(doc)
            kind = doc.get("kind", "?")
            kinds.add(kind)
            where = "[%s] %s %s/%s" % (name, source, kind, doc.get("metadata", {}).get("name"))
            if kind in MONITORING_SPEC_KEYS:
                check_monitoring(doc, where)
                if kind == "PrometheusRule":
                    for group in doc["spec"]["groups"]:
                        for rule in group["rules"]:
                            check_metric_names(rule["expr"], metrics, where)
                continue
            if kind == "ConfigMap" and "hairpin.json" in (doc.get("data") or {}):
                dashboard = json.loads(doc["data"]["hairpin.json"])
                for panel in dashboard["panels"]:
                    for target in panel.get("targets", []):
                        check_metric_names(target["expr"], metrics, where)
            for version in KUBE_VERSIONS:
                if version_tuple(version) < version_tuple(SINCE.get(kind, "0")):
                    continue
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as err:
                    fail("%s: invalid for Kubernetes %s: %s at %s" % (where, version, err.message, "/".join(str(p) for p in err.path)))
                except kubernetes_validate.SchemaNotFoundError:
                    fail("%s: kubernetes-validate has no schema for it (Kubernetes %s)" % (where, version))
    check_node_agent_rbac(docs, name)
    check_dns_endpoint_rbac(docs, name, values)
    check_config_map_rbac(docs, name)
    check_status_rbac(docs, name, values)
    check_guard_rbac(docs, name, values)
    check_test_pod_rbac(docs, name, doctor_reads(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    missing = expected_kinds - kinds
    if missing:
        fail("[%s] expected %s among the rendered kinds %s" % (name, sorted(missing), sorted(kinds)))
    print("chart-check: [%s] helm lint clean; %d objects valid for Kubernetes %s" % (name, count, " and ".join(KUBE_VERSIONS)))


def check_node_agent_rbac(docs, name):
    """The node agent reads one object, the hosts block the controller publishes: no cluster-wide
    grant, and only get/list/watch of the ConfigMap hairpin-hosts in the release namespace (and
    `get` of its own DaemonSet, read at exit). With nodeAgent.nativeProbes also the native
    record (read only) and Leases, only where the admission policy holding it to its own
    node's Lease is rendered and bound."""
    agents = [
        d["spec"]["template"]["spec"]["serviceAccountName"]
        for d in docs
        if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("node-agent")
    ]
    bindings = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    node_probe_policy = any(
        d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"].endswith("-node-probe-leases")
        and d["metadata"]["name"] in bindings
        for d in docs
    )
    for account in agents:
        def bound(binding):
            return any(
                s.get("kind") == "ServiceAccount" and s.get("name") == account
                for s in binding.get("subjects") or []
            )
        for binding in docs:
            if binding["kind"] == "ClusterRoleBinding" and bound(binding):
                fail("[%s] the node agent must have no cluster-wide grant: %s" % (name, binding["metadata"]["name"]))
            if binding["kind"] != "RoleBinding" or not bound(binding):
                continue
            namespace = binding["metadata"].get("namespace")
            role = [
                d for d in docs
                if d["kind"] == "Role" and d["metadata"]["name"] == binding["roleRef"]["name"]
                and d["metadata"].get("namespace") == namespace
            ]
            for r in role:
                for rule in r.get("rules") or []:
                    # Its own DaemonSet, read at exit (removed, or a restart).
                    if (
                        namespace == NAMESPACE
                        and rule.get("apiGroups") == ["apps"]
                        and rule.get("resources") == ["daemonsets"]
                        and rule.get("resourceNames") == [r["metadata"]["name"]]
                        and rule.get("verbs") == ["get"]
                    ):
                        continue
                    # With nodeAgent.nativeProbes (issue 45): hairpin's native record, read
                    # only, and its node's Lease, which only the admission policy
                    # `-node-probe-leases` (rendered and bound) holds to its own name.
                    if (
                        namespace == NAMESPACE
                        and rule.get("apiGroups") == ["coordination.k8s.io"]
                        and rule.get("resources") == ["leases"]
                        and not rule.get("resourceNames")
                        and set(rule.get("verbs") or []) <= {"create", "get", "update", "patch"}
                        and node_probe_policy
                    ):
                        continue
                    if (
                        namespace != NAMESPACE
                        or rule.get("apiGroups") != [""]
                        or rule.get("resources") != ["configmaps"]
                        or rule.get("resourceNames") not in (["hairpin-hosts"], ["hairpin-hosts", "hairpin-native"])
                        or not set(rule.get("verbs") or []) <= {"get", "list", "watch"}
                    ):
                        fail("[%s] the node agent may only read ConfigMap %s/hairpin-hosts, not %r in %s" % (name, NAMESPACE, rule, namespace))


def check_config_map_rbac(docs, name):
    """No grant of the chart reads or writes ConfigMaps cluster-wide: every ConfigMap rule of a
    ClusterRole names its ConfigMaps (the receivers' by name; an empty receivers.configMaps
    renders no rule, never one without resourceNames)."""
    for doc in docs:
        if doc["kind"] != "ClusterRole":
            continue
        for rule in doc.get("rules") or []:
            if "configmaps" in (rule.get("resources") or []) and not rule.get("resourceNames"):
                fail("[%s] ClusterRole %s grants every ConfigMap: %r" % (name, doc["metadata"]["name"], rule))


def check_status_rbac(docs, name, values):
    """The native cure's grant: `update` of services/status (never `patch`, which the code does
    not use), only when the cure can be native (not `controller.cure: dns`); with it, the
    admission policy that pins the write to ipMode, bound, unless admissionPolicy is off."""
    native = values.get("controller", {}).get("cure", "auto") != "dns"
    verbs = set()
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc.get("rules") or []:
            if "services/status" in (rule.get("resources") or []) or "*" in (rule.get("resources") or []):
                verbs.update(rule.get("verbs") or [])
    wanted = {"update"} if native else set()
    if verbs != wanted:
        fail("[%s] services/status verbs %s, wanted %s" % (name, sorted(verbs), sorted(wanted)))
    enabled = values.get("admissionPolicy", {}).get("enabled", True)
    policies = {d["metadata"]["name"] for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}
    bound = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    if enabled and not any(p.endswith("-status-ipmode-only") for p in policies & bound):
        fail("[%s] no bound status-ipmode-only policy among %s" % (name, sorted(policies)))
    if not enabled and (policies or bound):
        fail("[%s] admissionPolicy.enabled=false renders %s" % (name, sorted(policies | bound)))


GUARD_KINDS = {"deployments", "serviceaccounts", "roles", "rolebindings", "clusterroles", "clusterrolebindings"}


def check_guard_rbac(docs, name, values):
    """The removal guard exists only with its admission policies (issue 46 item 5): its `patch`
    of the controller's own Deployment, ServiceAccount and RBAC is rendered, and the guard
    started (HAIRPIN_REMOVAL_GUARD), only when admissionPolicy is on, with the bound policy
    `-guard-finalizers-only` that limits the patch to hairpin's finalizer."""
    enabled = values.get("admissionPolicy", {}).get("enabled", True)
    patches = []
    for doc in docs:
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in doc.get("rules") or []:
            resources = set(rule.get("resources") or [])
            if resources & (GUARD_KINDS | {"*"}) and {"patch", "*"} & set(rule.get("verbs") or []):
                patches.append("%s %s: %s" % (doc["kind"], doc["metadata"]["name"], sorted(resources)))
    guard = None
    for doc in docs:
        if doc["kind"] == "Deployment" and doc["metadata"]["name"].endswith("-controller"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for env in container.get("env") or []:
                    if env["name"] == "HAIRPIN_REMOVAL_GUARD":
                        guard = env.get("value")
    policies = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    if enabled:
        if not patches or guard != "true" or not any(p.endswith("-guard-finalizers-only") for p in policies):
            fail("[%s] the removal guard needs its patch rights %s, HAIRPIN_REMOVAL_GUARD=true (got %r) and the bound guard-finalizers-only policy" % (name, patches, guard))
    elif patches or guard != "false":
        fail("[%s] admissionPolicy.enabled=false still renders the removal guard: %s, HAIRPIN_REMOVAL_GUARD=%r" % (name, patches, guard))
    else:
        print("chart-check: [%s] no removal guard: no patch of the controller's own objects, HAIRPIN_REMOVAL_GUARD=false" % name)


def doctor_reads(repo):
    """The objects `hairpin doctor` reads by name in kube-system: `(kind, name)` from the
    `"Kind kube-system/name"` labels of its reads in crates/doctor/src/cluster.rs."""
    with open(os.path.join(repo, "crates", "doctor", "src", "cluster.rs")) as f:
        text = f.read()
    return sorted(set(re.findall(r'"(DaemonSet|Deployment|ConfigMap) kube-system/([a-z0-9.-]+)"', text)))


GROUP_RESOURCE = {"DaemonSet": ("apps", "daemonsets"), "Deployment": ("apps", "deployments"), "ConfigMap": ("", "configmaps")}


def doctor_config_map_reads(pod):
    """The ConfigMaps `hairpin doctor` gets by name, as `(namespace, name)`: the planner's
    (PlannerConfig::read_config_maps: the CoreDNS candidates and coredns-custom, node-local-dns's,
    the routes and hosts ConfigMaps), from the planner settings in the test pod's environment
    (unset ones at the CLI's defaults)."""
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}

    def names(key, default):
        return [n.strip() for n in (env.get(key) or default).split(",") if n.strip()]

    coredns = env.get("HAIRPIN_COREDNS_NAMESPACE") or "kube-system"
    node_local = env.get("HAIRPIN_NODE_LOCAL_DNS_NAMESPACE") or "kube-system"
    reads = [(coredns, n) for n in names("HAIRPIN_COREDNS_CONFIGMAPS", "coredns,rke2-coredns-rke2-coredns,coredns-base,kube-dns")]
    reads += [(coredns, n) for n in names("HAIRPIN_COREDNS_CUSTOM_CONFIGMAP", "coredns-custom")]
    reads += [(node_local, n) for n in names("HAIRPIN_NODE_LOCAL_DNS_CONFIGMAPS", "node-local-dns,nodelocaldns")]
    reads += [(NAMESPACE, n) for n in names("HAIRPIN_ROUTES_CONFIGMAP", "hairpin-routes")]
    reads += [(NAMESPACE, n) for n in names("HAIRPIN_HOSTS_CONFIGMAP", "hairpin-hosts")]
    return sorted(set(reads))


def bound_rules(docs, account, namespace):
    """The rules ServiceAccount `account` (of the release namespace) holds in `namespace`: its
    Roles there, and its ClusterRoles bound cluster-wide."""
    def binds(binding):
        return any(
            s.get("kind") == "ServiceAccount" and s.get("name") == account and s.get("namespace") == NAMESPACE
            for s in binding.get("subjects") or []
        )
    rules = []
    for binding in docs:
        if not binds(binding):
            continue
        if binding["kind"] == "RoleBinding" and binding["metadata"].get("namespace") == namespace:
            kind, role_namespace = "Role", namespace
        elif binding["kind"] == "ClusterRoleBinding":
            kind, role_namespace = "ClusterRole", None
        else:
            continue
        for role in docs:
            if (
                role["kind"] == kind
                and role["metadata"]["name"] == binding["roleRef"]["name"]
                and role["metadata"].get("namespace") == role_namespace
            ):
                rules += role.get("rules") or []
    return rules


def check_test_pod_rbac(docs, name, reads):
    """`helm test` runs the doctor with the controller's ServiceAccount: it must be able to get
    every object the doctor reads by name (else the test says "cannot read" instead of what it
    found): the Cilium and kube-dns objects in kube-system, and the planner's ConfigMaps
    wherever they are configured. The test's own grants are read-only, by name."""
    pods = [
        d for d in docs
        if d["kind"] == "Pod" and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
    ]
    for pod in pods:
        account = pod["spec"].get("serviceAccountName", "default")
        wanted = [("kube-system", kind, object_name) for kind, object_name in reads]
        wanted += [(namespace, "ConfigMap", object_name) for namespace, object_name in doctor_config_map_reads(pod)]
        for namespace, kind, object_name in wanted:
            group, resource = GROUP_RESOURCE[kind]
            granted = any(
                group in (rule.get("apiGroups") or [])
                and resource in (rule.get("resources") or [])
                and object_name in (rule.get("resourceNames") or [object_name])
                and "get" in (rule.get("verbs") or [])
                for rule in bound_rules(docs, account, namespace)
            )
            if not granted:
                fail("[%s] the test pod's ServiceAccount %s cannot get %s %s/%s, which the doctor reads" % (name, account, kind, namespace, object_name))
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole") and (doc["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test":
            for rule in doc.get("rules") or []:
                if set(rule.get("verbs") or []) - {"get"} or not rule.get("resourceNames"):
                    fail("[%s] %s %s: the test's grants are gets by name, not %r" % (name, doc["kind"], doc["metadata"]["name"], rule))


def check_dns_endpoint_rbac(docs, name, values):
    """external-dns's DNSEndpoints: only through a namespaced Role in the release namespace,
    list and delete in every mode (uninstall, cleanup after a mode switch), get, watch,
    create and update only with coredns.dnsMode external-dns; never the status, never a
    ClusterRole."""
    external = values.get("coredns", {}).get("dnsMode") == "external-dns"
    verbs = set()
    for doc in docs:
        for rule in doc.get("rules") or [] if doc["kind"] in ("Role", "ClusterRole") else []:
            if "externaldns.k8s.io" not in (rule.get("apiGroups") or []):
                continue
            where = "%s %s" % (doc["kind"], doc["metadata"]["name"])
            if doc["kind"] == "ClusterRole" or doc["metadata"].get("namespace") != NAMESPACE:
                fail("[%s] %s grants DNSEndpoints outside the release namespace" % (name, where))
            if rule.get("resources") != ["dnsendpoints"]:
                fail("[%s] %s grants %r of externaldns.k8s.io" % (name, where, rule.get("resources")))
            verbs.update(rule.get("verbs") or [])
    wanted = {"list", "delete"} | ({"get", "watch", "create", "update"} if external else set())
    if verbs != wanted:
        fail("[%s] DNSEndpoint verbs %s, wanted %s" % (name, sorted(verbs), sorted(wanted)))


def check_crds(chart_dir):
    """The chart's crds/ (installed by Helm before the templates, never rendered) are
    CustomResourceDefinitions, which kubernetes-validate knows."""
    directory = os.path.join(chart_dir, "crds")
    if not os.path.isdir(directory):
        return
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            for doc in yaml.safe_load_all(f):
                if not doc:
                    continue
                for version in KUBE_VERSIONS:
                    try:
                        kubernetes_validate.validate(doc, version, strict=True)
                    except kubernetes_validate.ValidationError as err:
                        fail("crds/%s: invalid for Kubernetes %s: %s" % (name, version, err.message))
                print("chart-check: crds/%s: %s valid for Kubernetes %s" % (name, doc.get("kind"), " and ".join(KUBE_VERSIONS)))


# 4. metric names -----------------------------------------------------------------------------


def exported_metrics(repo):
    """Metric names hairpin registers: `register("name", ...)` under the prefix its file uses,
    or, for a file of a module split into a folder (`metrics/registration.rs`), the prefix of
    the module's own file (`metrics.rs` or `metrics/mod.rs`)."""
    texts = {}
    for root, _, files in os.walk(os.path.join(repo, "crates")):
        if "/target" in root or "/fuzz" in root or "/tests" in root:
            continue
        for file in files:
            if file.endswith(".rs"):
                path = os.path.join(root, file)
                with open(path) as f:
                    texts[path] = f.read()

    def own_prefixes(path):
        found = set(re.findall(r'with_prefix\(\s*"([a-z_]+)"', texts.get(path, "")))
        if os.path.basename(path) == "metrics.rs" and "dataplane" in path:
            found.add("hairpin_proxy")
        return found

    def prefixes(path):
        found, folder = own_prefixes(path), os.path.dirname(path)
        while os.path.basename(folder) != "src" and folder != os.path.dirname(folder):
            found |= own_prefixes(folder + ".rs") | own_prefixes(os.path.join(folder, "mod.rs"))
            folder = os.path.dirname(folder)
        return found

    names = set()
    for path, text in texts.items():
        # Full names (`hairpin_build`, the process collector's `process_*`) ...
        names.update(re.findall(r'"((?:hairpin|process)_[a-z_]+)"', text))
        # ... and names registered under a prefix.
        for name in re.findall(r'register(?:_with_unit)?\(\s*"([a-z_]+)"', text):
            for prefix in prefixes(path):
                names.add(prefix + "_" + name)
    return names


def check_metric_names(expr, metrics, where):
    for name in set(re.findall(r"\b((?:hairpin|process)_[a-z_]+)", expr)):
        base = re.sub(r"_(total|bucket|sum|count|info)$", "", name)
        if name not in metrics and base not in metrics:
            fail("%s: names metric %s, which hairpin does not export" % (where, name))


def main():
    global CHART
    CHART = sys.argv[1]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    check_values_documented(CHART, schema)
    metrics = exported_metrics(repo)
    check_crds(CHART)
    with helm.Chart.load(CHART) as chart:
        check_typos(chart)
        for name, (sets, kinds) in COMBINATIONS.items():
            check_render(chart, name, sets, kinds, metrics)
    if failures:
        sys.stderr.write("chart-check: %d failure(s)\n" % len(failures))
        sys.exit(1)
    print("chart-check: OK")


if __name__ == "__main__":
    main()
