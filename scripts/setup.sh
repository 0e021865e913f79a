#!/usr/bin/env bash
# Install adaptive-ir and its dependencies from this checkout, as a regular (non-editable) install: what runs is
# what a user's `pip install` gets, configs and shipped policies included. `scripts/setup.sh test` adds the test
# and benchmark extras (pytest, ruff, rank-bm25, matplotlib, Gymnasium, TorchRL, sb3-contrib, what Pyserini imports, ...)
# and Pyserini. For development, `pip install -e ".[test]"`.
# torch 2.13.0 is installed first only when no torch is importable: Kaggle's (or your CUDA) build is kept, as pip
# keeps any torch within the pyproject range (>= 2.4.1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"
if [ "${1:-}" = "test" ]; then
  "$PY" -m pip install -q ".[test]"
  # Pyserini for the Lucene parity tests, without its declared dependencies (they would pull a CUDA torch; the test
  # extra brings what it imports); it needs a JDK 21+ at run time
  "$PY" -c "import pyserini" 2>/dev/null || "$PY" -m pip install -q --no-deps "pyserini==1.6.0"
else
  "$PY" -m pip install -q .
fi
