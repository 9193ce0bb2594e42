"""Rolling out a plan on this machine in tests: CPU fleets, the restart script the playbook runs, clean-up.

Used by the fast Ansible tests (tests/render, with the stand-in fake_engine.py) and by the end-to-end
test on the real vLLM CPU engine (test_apply_vllm.py).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kits.cli import run_cli
from kits.paths import REPO_ROOT
from seatplan.documents.fleet_file import load_fleet
from seatplan.errors import SeatplanError
from seatplan.fileio import atomic_write_text
from seatplan.plan.current import read_current
from seatplan.plan.planner import build_plan
from seatplan.render import hostcheck
from seatplan.render.runner import ansible_playbook

# A script, run as the stand-in engine process: it stays beside the integration tests.
FAKE_ENGINE = REPO_ROOT / "tests" / "integration" / "fake_engine.py"


def build_plan_file(fleet_path: Path, target: Path, current: Path | None = None) -> Path:
    """``seatplan plan FLEET -o TARGET [--current CURRENT]``, in process."""
    loaded = load_fleet(fleet_path)
    plan = build_plan(loaded, current=read_current(current, loaded.fleet) if current else None)
    assert plan.worst_case_spare_bytes is not None, plan.warnings
    atomic_write_text(target, plan.model_dump_json(indent=2) + "\n", backup=False)
    return target


def cpu_fleet(directory: Path, seats: dict[str, tuple[Path, int]], *, kv: str = "48MiB", max_model_len: int = 1024,
              caps: dict[str, int] | None = None, contexts: dict[str, int] | None = None, vllm_version: str = "0.32", total: str = "8GiB", name: str = "fleet.yaml",
              budgets: int = 1, pins: dict[str, int] | None = None, envs: dict[str, dict[str, object]] | None = None,
              more: dict[str, list[str]] | None = None) -> Path:
    """One ``device: cpu`` host reached on 127.0.0.1 with ``budgets`` memory budgets, the seats pinned (to 0 unless
    ``pins`` says); ``envs``: a seat's ``env`` (values or ``{from_host_env: NAME}``), ``more``: further YAML lines of a seat."""
    caps = caps or {}
    lines = [
        "hosts:",
        "  - name: cpu-box",
        "    device: cpu",
        "    address: 127.0.0.1",
        "    gpus:",
        *[f"      - {{index: {index}, total_bytes: {total}}}" for index in range(budgets)],
        "policy:",
        f"  vllm_version: \"{vllm_version}\"",
        "  creep_allowance_bytes: 0",
        "  boot_margin_bytes: 64MiB",
        "seats:",
    ]
    for seat, (model_dir, port) in seats.items():
        lines += [
            f"  - name: {seat}",
            f"    model: {model_dir}",
            f"    port: {port}",
            f"    max_model_len: {(contexts or {}).get(seat, max_model_len)}",
            f"    kv_cache_memory_bytes: {kv}",
            "    dtype: bfloat16",
            "    enforce_eager: true",
            "    max_num_seqs: 4",
            "    max_num_batched_tokens: 1024",
            f"    max_new_tokens: {caps.get(seat, 16)}",
            f"    pin: {(pins or {}).get(seat, 0)}",
        ]
        if (envs or {}).get(seat):
            lines += ["    env:"] + [f"      {key}: {json.dumps(value)}" for key, value in envs[seat].items()]  # type: ignore[index]
        lines += [f"    {line}" for line in (more or {}).get(seat, [])]
    path = directory / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def serve_by_hand(port: int, started: list[subprocess.Popen]) -> subprocess.Popen:
    """A stand-in engine on 127.0.0.1:PORT, started by hand (no seatplan launcher, no env file of seatplan's), once it listens."""
    process = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(port)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    started.append(process)
    for _ in range(300):
        if hostcheck.listening_inodes(port):
            return process
        assert process.poll() is None, "the stand-in engine exited"
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def fake_launcher() -> str:
    """A stand-in engine for the fast Ansible tests (the real-vLLM end-to-end test uses the real one)."""
    return shlex.join([sys.executable, str(FAKE_ENGINE)])


def restart_script(directory: Path) -> Path:
    """The restart command the tests give the playbook: stop the seat's engine, start it from its env file through
    the rendered launcher (``HOST_DIR/bin/seatplan-engine.sh ENV_FILE``); with a third argument ``stop``, only stop it.

    It records each start in ``starts.log`` with the /health answer of every engine it started before (and each
    stop as ``SEAT stop``), so a test can see that an engine started only after the one before it was healthy. A
    seat whose env file sets ``SEATPLAN_TEST_BROKEN`` starts, through the launcher, a process that never listens: the
    tests' way to make a step fail its health check. ``SEATPLAN_TEST_BROKEN=exit`` starts one that exits at once
    instead, as vLLM does on a setting it refuses: the step fails when apply sees the engine gone, without waiting
    out its health deadline (the real-engine rollout test, whose deadline is minutes).
    """
    state = directory / "state"
    state.mkdir(parents=True, exist_ok=True)
    script = directory / "restart.sh"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        # usage: restart.sh SEAT ENV_FILE [stop]
        set -euo pipefail
        seat=$1; env_file=$2; action=${{3:-restart}}; state={shlex.quote(str(state))}
        if [ -f "$state/$seat.pid" ]; then
          pid=$(cat "$state/$seat.pid")
          kill -TERM -- "-$pid" 2>/dev/null || true
          for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
          kill -KILL -- "-$pid" 2>/dev/null || true
          rm -f "$state/$seat.pid"
        fi
        if [ "$action" = stop ]; then echo "$seat stop" >> "$state/starts.log"; rm -f "$state/$seat.url"; exit 0; fi
        others=""
        for other in "$state"/*.url; do
          [ -e "$other" ] || continue
          name=$(basename "$other" .url); [ "$name" = "$seat" ] && continue
          code=$({shlex.quote(sys.executable)} -c 'import sys, urllib.request
        try: print(urllib.request.urlopen(sys.argv[1], timeout=3).status)
        except Exception: print("down")' "$(cat "$other")")
          others="$others $name=$code"
        done
        echo "$seat start$others" >> "$state/starts.log"
        set -a; . "$env_file"; set +a
        echo "$SEATPLAN_HEALTH_URL" > "$state/$seat.url"
        launcher="$(dirname "$(dirname "$env_file")")/bin/seatplan-engine.sh"
        if [ -n "${{SEATPLAN_TEST_BROKEN:-}}" ]; then
          # through the launcher (it records the PID apply's health check follows), with a command that never listens
          broken="sleep 3600"; [ "$SEATPLAN_TEST_BROKEN" = exit ] && broken="false"
          grep -v '^SEATPLAN_COMMAND=' "$env_file" > "$state/$seat.broken.env"; echo "SEATPLAN_COMMAND='$broken'" >> "$state/$seat.broken.env"
          env_file="$state/$seat.broken.env"
        fi
        setsid "$launcher" "$env_file" > "$state/$seat.log" 2>&1 < /dev/null &
        echo $! > "$state/$seat.pid"
        """))
    script.chmod(0o755)
    return script


def starts(directory: Path) -> list[str]:
    """What the restart script did, in order: ``SEAT start`` or ``SEAT stop`` per line of its starts.log (the
    neighbours' /health answers it records left out)."""
    return [" ".join(line.split()[:2]) for line in (directory / "state" / "starts.log").read_text().splitlines()]


def stop_engines(directory: Path) -> None:
    """Kill every engine the restart script started, by the process group it recorded."""
    for pid_file in (directory / "state").glob("*.pid"):
        kill_recorded_group(pid_file)


def kill_recorded_group(pid_file: Path) -> None:
    """TERM, then KILL, the process group whose leader's PID a script wrote to ``pid_file``."""
    pid = int(pid_file.read_text().strip())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break


def localhost_inventory(directory: Path) -> Path:
    """cpu-box as this machine: local connection, this Python (interpreter discovery picks broken shims here)."""
    path = directory / "inventory.yaml"
    path.write_text(
        "all:\n  hosts:\n    cpu-box:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: {sys.executable}\n",
        encoding="utf-8",
    )
    return path


def run_seatplan(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    """``seatplan ARGS`` through the real entry point, in-process: (exit code, stdout, stderr)."""
    result = run_cli(capsys, monkeypatch, *args)
    return result.exit_code, result.stdout, result.stderr


def render_args(directory: Path, plan: Path, launcher: str) -> list[str]:
    """``seatplan render`` for cpu-box as this machine: engines on 127.0.0.1, restarted by the test's script."""
    return [
        "render", str(plan), "-o", str(directory / "rendered"), "--launcher", launcher, "--bind", "127.0.0.1",
        "--restart", "script", "--restart-script", str(restart_script(directory)), "--host-dir", str(directory / "host"),
    ]


def apply_args(directory: Path, plan: Path, tag: str, *extra: str, verify: bool = False) -> list[str]:
    """``seatplan apply`` into the directory `render_args` rendered (its settings are kept); the playbook's
    closing ``seatplan verify`` only with ``verify`` (a stand-in engine would fail it)."""
    return [
        "apply", str(plan), "--inventory", str(localhost_inventory(directory)), "--tag", tag, "-o", str(directory / "rendered"),
        "-e", f"seatplan_run_verify={str(verify).lower()}", "--json", *extra,
    ]


def ansible_installed() -> bool:
    try:
        ansible_playbook()
    except SeatplanError:
        return False
    return True


def with_rollout(plan_path: Path, steps: list[tuple[str, str, list[str]]]) -> Path:
    """The plan with these rollout steps (what `seatplan plan --current` computes from the current layout; the tests
    of apply give them as the case needs)."""
    document = json.loads(plan_path.read_text())
    document["rollout"] = {"steps": [{"action": action, "seat": seat, "gpus": gpus} for action, seat, gpus in steps], "down": []}
    plan_path.write_text(json.dumps(document, indent=2) + "\n")
    return plan_path
