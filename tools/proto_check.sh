#!/usr/bin/env bash
# Lints and formats the contract with buf, checks it for breaking changes against the
# previous commit of main (once one exists), and fails when the committed stubs differ
# from what the protos generate.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
buf=${BUF:-$root/.venv/bin/buf}
"$buf" lint
"$buf" format --diff --exit-code
if git rev-parse --verify --quiet main~1 >/dev/null && git cat-file -e main~1:buf.yaml 2>/dev/null; then
  "$buf" breaking --against ".git#branch=main,ref=HEAD~1"
  echo "proto-check: no breaking change against main~1"
else
  echo "proto-check: no previous commit of main with buf.yaml; breaking check skipped"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tools/gen_protos.sh "$tmp" >/dev/null
if ! diff -r -q "$tmp/decisionflow/v1" clients/python/src/decisionflow/v1 --exclude=__pycache__; then
  echo "proto-check: committed stubs differ from the protos; run tools/gen_protos.sh" >&2
  exit 1
fi
echo "proto-check: stubs match the protos"
