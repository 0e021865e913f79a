#!/usr/bin/env bash
# Install adaptive-ir (editable) and its dependencies. `scripts/setup.sh test` adds the test extras.
# torch 2.13.0 is installed first only when no torch is importable: Kaggle's (or your CUDA) build is kept,
# and the pyproject range (which 2.13.0 satisfies) then installs no other torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"
if [ "${1:-}" = "test" ]; then
  "$PY" -m pip install -q -e ".[test]"
else
  "$PY" -m pip install -q -e .
fi
