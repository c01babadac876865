#!/usr/bin/env bash
# Lint charts/hairpin with Helm's real engine and validate every render against the Kubernetes
# OpenAPI schemas; checks that values.schema.json rejects typos and that every value is
# documented in values.yaml (scripts/chart-check.py says exactly what).
# Python packages go into the virtualenv scripts/render-manifest.sh uses, outside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${HAIRPIN_HELM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hairpin/helm-venv}"
REQUIREMENTS=(helm-python-sdk==0.2.2 kubernetes-validate==1.35.0 PyYAML==6.0.3)

if ! "$VENV/bin/python" -c "import helm_python, kubernetes_validate, yaml" 2>/dev/null; then
    echo "chart-check: installing ${REQUIREMENTS[*]} into $VENV" >&2
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "${REQUIREMENTS[@]}"
fi
"$VENV/bin/python" scripts/chart-check.py charts/hairpin
# The `hairpin plan -o yaml` goldens, validated against the same schemas (not by the renderer
# that wrote them).
"$VENV/bin/python" scripts/goldens-check.py
