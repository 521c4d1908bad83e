#!/usr/bin/env bash
# Compiles requirements/image.lock: every package the image installs, pinned, with the hashes of all of
# its published files (any platform, so the lock serves amd64 and arm64 builds alike). Its inputs are
# the pins of the server distribution with its console extra (pyproject.toml), those of the light client
# (clients/python/pyproject.toml) and the build backend (requirements/image.in). Run it after changing
# a pin there; tests/containers/test_image_lock.py fails until the lock agrees with the pyproject files.
# pip-tools (pinned in tools/pip-tools/requirements.txt) is installed into .venvs/pip-tools on first use.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
tools=.venvs/pip-tools
wanted=$(sha256sum tools/pip-tools/requirements.txt | cut -d' ' -f1)
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$wanted" ]; then
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet -r tools/pip-tools/requirements.txt
  echo "$wanted" >"$tools/.installed"
fi
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT
# The light client is this repository's, never a package index's: its wheel is offered from a local
# folder for the resolution only, and left out of the lock (the Dockerfile installs it from the context).
"$tools/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheels" ./clients/python
CUSTOM_COMPILE_COMMAND=tools/lock_image.sh "$tools/bin/pip-compile" --quiet --generate-hashes \
  --strip-extras --extra console --find-links "$work/wheels" --no-emit-find-links --no-emit-index-url \
  --unsafe-package decisionflow-client --output-file "$work/image.lock" \
  pyproject.toml clients/python/pyproject.toml requirements/image.in
# pip-compile's closing note names the light client as unpinned: it is installed with --no-deps from
# the build context, after the lock.
sed '/^# WARNING: The following packages were not pinned/,$d' "$work/image.lock" >requirements/image.lock
echo "wrote requirements/image.lock ($(grep -c '^[a-z0-9]' requirements/image.lock) packages)"
