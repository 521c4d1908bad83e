#!/usr/bin/env bash
# Generates the Python gRPC stubs (and their type stubs) from protos/ into OUT_DIR (default: the
# light client's source root, so they land in clients/python/src/decisionflow/v1/). Never edit
# the output.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/clients/python/src}
py=${PYTHON:-$root/.venv/bin/python}
export PATH="$(dirname "$py"):$PATH"
mkdir -p "$out/decisionflow/v1"
"$py" -m grpc_tools.protoc -I"$root/protos" \
  --python_out="$out" --grpc_python_out="$out" \
  --mypy_out="$out" --mypy_grpc_out="$out" \
  "$root"/protos/decisionflow/v1/*.proto
touch "$out/decisionflow/v1/__init__.py"
