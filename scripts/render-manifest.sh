#!/usr/bin/env bash
# Render the Helm chart into the static manifest deploy/hairpin.yaml (and its uninstall Job,
# deploy/hairpin-uninstall.yaml) with Helm's real engine.
#
#   scripts/render-manifest.sh          regenerate deploy/hairpin.yaml
#   scripts/render-manifest.sh --check  fail (exit 1, with a diff) when it has drifted
#
# No Helm binary is needed: the helm-python-sdk wheel from PyPI bundles Helm v4's Go library.
# It is installed on first use into a virtualenv outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${HAIRPIN_HELM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hairpin/helm-venv}"
HELM_SDK_VERSION="0.2.2"
NAMESPACE="hairpin"
OUT="deploy/hairpin.yaml"
OUT_UNINSTALL="deploy/hairpin-uninstall.yaml"

if ! "$VENV/bin/python" -c "import helm_python" 2>/dev/null; then
    echo "render-manifest: installing helm-python-sdk $HELM_SDK_VERSION into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "helm-python-sdk==$HELM_SDK_VERSION"
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
lint=()
[[ "${1:-}" == "--check" ]] && lint=(--lint)
"$VENV/bin/python" scripts/render-manifest.py charts/hairpin "$NAMESPACE" \
    "$tmp/manifest.yaml" "$tmp/uninstall.yaml" "${lint[@]}"

if [[ "${1:-}" == "--check" ]]; then
    drift=0
    diff -u "$OUT" "$tmp/manifest.yaml" || drift=1
    diff -u "$OUT_UNINSTALL" "$tmp/uninstall.yaml" || drift=1
    if [[ $drift == 1 ]]; then
        echo "render-manifest: deploy/ is out of date with charts/hairpin; run scripts/render-manifest.sh" >&2
        exit 1
    fi
    echo "render-manifest: $OUT and $OUT_UNINSTALL match charts/hairpin"
else
    cp "$tmp/manifest.yaml" "$OUT"
    cp "$tmp/uninstall.yaml" "$OUT_UNINSTALL"
    echo "render-manifest: wrote $OUT and $OUT_UNINSTALL" >&2
fi
