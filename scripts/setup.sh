#!/usr/bin/env bash
# Creates .venv (if absent) and installs glmc with everything its commands and tests need, offline-friendly.
# Usage: bash scripts/setup.sh        (idempotent; re-running only checks)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
# exact versions from constraints.txt (pyproject.toml declares the supported ranges)
.venv/bin/python -m pip install -q -c constraints.txt -e '.[test]' 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt 2>&1 | grep -v "is ignored" || true
# Fashion-MNIST ships as a Debian package (idx files under /usr/share/datasets/fashion-mnist)
if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
    || echo "note: could not install dataset-fashion-mnist; fashion-mnist tests will be skipped"
fi
# Chromium (Debian's package) for the headless-browser test of `glmc report` (tests/e2e/test_report.py skips without it)
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "note: could not install chromium; the report's browser test will be skipped"
fi
.venv/bin/python -c "import torch, transformers, timm, glmc; print('glmc', glmc.__version__, '| torch', torch.__version__, '| transformers', transformers.__version__, '| timm', timm.__version__)"
