#!/usr/bin/env bash
# Installs seatplan into .venv and runs its main job on the bundled demo fleet.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
.venv/bin/python -m pip install -q -e .
exec .venv/bin/seatplan plan examples/demo/fleet.yaml "$@"
