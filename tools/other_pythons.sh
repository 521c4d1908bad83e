#!/usr/bin/env bash
# Run the demo and the checkpoint tests under every other Python 3.11+ this machine has.
#
# The project promises Python 3.11+, and what a checkpoint pickles depends on the patch release
# (3.11.0-3.11.4 pickle an enum member by name, later ones by value). `make test` runs under the
# interpreter of .venv; this script finds the others (Debian's /usr/bin/python3, every
# python3.N on PATH and every pyenv version, 3.11 and newer, one per distinct version), gives each its own virtual environment
# in .venvs/VERSION and runs there the demo and the tests that decode checkpoints.
#
# Usage: tools/other_pythons.sh [PYTHON...]   (no arguments: discover them)
# With DECISIONFLOW_REQUIRE_PYTHONS=N it fails when fewer than N other versions are found (CI).
set -euo pipefail
cd "$(dirname "$0")/.."

version_of() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null; }
promised() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; }

own=$(version_of .venv/bin/python || true)
candidates=("$@")
if ((${#candidates[@]} == 0)); then
  candidates=(/usr/bin/python3)
  for n in $(seq 11 20); do
    found=$(command -v "python3.$n" 2>/dev/null) && candidates+=("$found")
  done
  # pyenv keeps its versions out of PATH unless selected; its shims then refuse to run.
  if root=$(pyenv root 2>/dev/null); then
    candidates+=("$root"/versions/3.*/bin/python3)
  fi
fi

declare -A seen=()
pythons=()
for python in "${candidates[@]}"; do
  [[ -x $python ]] && promised "$python" || continue
  version=$(version_of "$python")
  # pyenv shims answer for versions they do not have; a shim that fails to run is skipped above.
  [[ -n $version && $version != "$own" && -z ${seen[$version]:-} ]] || continue
  seen[$version]=1
  pythons+=("$python")
done

required=${DECISIONFLOW_REQUIRE_PYTHONS:-0}
echo "other Pythons: ${#pythons[@]} found beside .venv's ${own:-none} (${!seen[*]})"
if ((${#pythons[@]} < required)); then
  echo "other Pythons: ${required} required, ${#pythons[@]} found" >&2
  exit 1
fi

for python in "${pythons[@]}"; do
  version=$(version_of "$python")
  venv=.venvs/$version
  echo "== Python $version ($python): setup in $venv"
  [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e clients/python -e '.[dev]'
  echo "== Python $version: decisionflow demo"
  "$venv/bin/decisionflow" demo
  echo "== Python $version: checkpoint tests"
  "$venv/bin/pytest" -q -p no:cacheprovider tests/orchestrator/test_checkpoint_decoding.py \
    tests/orchestrator/test_checkpoints.py tests/orchestrator/test_restarts.py
done
