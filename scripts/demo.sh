#!/usr/bin/env bash
# Installs seatplan into .venv and runs its main job on the bundled demo fleet. The install takes a minute or
# two on a fresh clone: each step says what it does, and pip shows what it collects, so it is never silent.
# The plan is saved as plan.json; the last lines say how to put `seatplan` on PATH and what to try next.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '==> %s\n' "$*" >&2; }
if [ ! -x .venv/bin/python ]; then
  step "creating the virtualenv .venv"
  "${PYTHON:-python3}" -m venv .venv
fi
# `.[apply]`: seatplan and the extra its `apply` declares (ansible-core, pyproject.toml), so apply runs after the demo
if ! .venv/bin/python -c 'import seatplan' 2>/dev/null || [ ! -x .venv/bin/ansible-playbook ]; then
  step "installing seatplan and its dependencies into .venv (OR-Tools, DuckDB, plotly, Ansible for apply, ...; a minute or two)"
  # pip's own lines (Collecting ..., Installing ...) are the progress; -q would hide them for the whole install.
  .venv/bin/python -m pip install --progress-bar on -e '.[apply]' 2>&1 | grep --line-buffered -E '^(Collecting|Installing|Successfully|ERROR|error)' >&2 || true
  .venv/bin/python -c 'import seatplan' && [ -x .venv/bin/ansible-playbook ] || {
    step "the install failed; run: .venv/bin/python -m pip install -e '.[apply]'"; exit 1; }
fi
step "seatplan plan examples/demo/fleet.yaml -o plan.json $*"
# exit 3 (the fleet does not fit) still ends with the next steps; any other failure stops here.
status=0
.venv/bin/seatplan plan examples/demo/fleet.yaml -o plan.json "$@" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 3 ]; then exit "$status"; fi
# The next steps go to stderr: with --json, stdout stays one JSON document.
step "put seatplan on your PATH for this shell: export PATH=\"$PWD/.venv/bin:\$PATH\""
step "next, why one seat got its numbers: seatplan explain plan.json qwen3-30b-a3b"
step "then the files to roll it out: seatplan render plan.json -o rollout   (the whole night: docs/walkthrough.md)"
exit "$status"
