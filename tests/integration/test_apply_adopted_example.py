"""From the shipped adopt example to a first apply in script mode (issue 50), with only what the docs show: the adopt
command of docs/adopt.md on examples/adopt/, then the lines of its "The first apply on the adopted example box" block
(fill the version, read the models from local copies, plan, an inventory for this machine, render with the restart
script of docs/render.md, apply --check, apply, apply again), run as written, each printing the lines the page shows,
with three things moved into the test's directory: `/etc/seatplan` (the host directory), `/usr/local/bin/seatplan-restart`
(the restart script, as the page prints it) and the box's `/opt/vllm/bin/vllm` (the fleet's launcher is rewritten to
that path before `seatplan plan`), and `-e seatplan_run_verify=false` (docs/render.md: the stand-in engines answer
/health only, so the closing verify is left out).

Real: `seatplan` (each command a process of its own), `ansible-playbook` against this machine, the restart script as
the page prints it, the launcher render writes. Stand-ins, because nothing real can run them here:
- the engines: the example's seats are Qwen3-32B-FP8, Qwen3-8B and Llama-3.2-3B on H100 GPUs (CUDA_VISIBLE_DEVICES,
  device reservations, 6-32 GiB of weights each): no vLLM CPU engine runs them on this machine, so the box's vLLM
  (`/opt/vllm/bin/vllm` of coder.service, moved here) is `tests/integration/fake_engine.py`, which answers /health on
  the --port it is given, the way the fast Ansible tests use it;
- `systemctl` and `docker`: no systemd or Docker engine here; the stand-ins on PATH record their arguments and stop
  (or start again) the engine running today that the unit or compose service names.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kits.console_blocks import printed, shim, steps
from kits.parts import group_runs, require
from kits.paths import REPO_ROOT
from kits.rollout import FAKE_ENGINE, ansible_installed

pytestmark = [pytest.mark.ansible, pytest.mark.slow]

# the example's seats: how each runs today (adopt's started_by) and its port (examples/adopt/)
TODAY = {"coder": ("systemd", 8002), "qwen3-8b": ("compose", 8006), "llama-3b": ("compose", 8007)}
BOX_LAUNCHER = "/opt/vllm/bin/vllm"  # coder.service's ExecStart
HEALTH_WAIT_S = 60
HF_TOKEN = "hf_seatplanAdoptedExampleToken0123"  # a stand-in engine reads nothing with it; no output may show it


def block(page: str, after: str, kind: str = "console") -> str:
    """The ```KIND block on the line after the marker ``after`` (a regular expression), fences included."""
    text = (REPO_ROOT / "docs" / page).read_text()
    found = re.search(after + r"\n(```" + kind + r"\n.*?```)\n", text, re.S)
    assert found, f"docs/{page}: no {kind} block after {after}"
    return found[1]


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the engines bind: a TIME-WAIT left by a last run is no holder
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def healthy(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_for(check, what: str) -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def start_today(state: Path, seat: str) -> int:
    """An engine as the box runs it before seatplan: its own process group, its pid where the stand-ins find it."""
    process = subprocess.Popen([sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(TODAY[seat][1])],
                               start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (state / f"{seat}.pid").write_text(f"{process.pid}\n")
    return process.pid


def stand_ins(directory: Path, state: Path) -> Path:
    """`systemctl` and `docker` that record their arguments and stop or start the engine running today."""
    bin_dir = directory / "stand-in-bin"
    bin_dir.mkdir()
    common = textwrap.dedent(f"""\
        #!/bin/bash
        # A stand-in (no systemd or Docker engine on the test machine): records its arguments, and stops or starts the
        # engine running today that the unit or compose service names.
        set -euo pipefail
        state={shlex.quote(str(state))}
        echo "$(basename "$0") $*" >> "$state/calls.log"
        stop() {{ [ -f "$state/$1.pid" ] || return 0; kill -TERM -- "-$(cat "$state/$1.pid")" 2>/dev/null || true; rm -f "$state/$1.pid"; }}
        start() {{ setsid {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_ENGINE))} --host 127.0.0.1 --port "$2" > /dev/null 2>&1 < /dev/null &
                  echo $! > "$state/$1.pid"; }}
        """)
    ports = " ".join(f"{seat}={port}" for seat, (_, port) in TODAY.items())
    lookup = f'port_of() {{ for pair in {ports}; do [ "${{pair%%=*}}" = "$1" ] && echo "${{pair#*=}}"; done; }}\n'
    (bin_dir / "systemctl").write_text(common + lookup + textwrap.dedent("""\
        unit=${3%.service}
        case "$1 $2" in
          "disable --now") stop "$unit" ;;
          "enable --now") start "$unit" "$(port_of "$unit")" ;;
          "show --property=MainPID") echo "MainPID=$(cat "$state/$unit.pid" 2>/dev/null || echo 0)" ;;  # apply's read of what runs
          *) echo "stand-in systemctl: $* not expected" >&2; exit 2 ;;
        esac
        """))
    (bin_dir / "docker").write_text(common + lookup + textwrap.dedent("""\
        service=${!#}
        case " $* " in
          *" rm --stop --force "*) stop "$service" ;;
          *" up -d "*) start "$service" "$(port_of "$service")" ;;
          *" ps -q "*) [ ! -f "$state/$service.pid" ] || echo "stand-in-$service" ;;  # apply's read of what runs: the container
          *" inspect --format "*) cat "$state/${service#stand-in-}.pid" ;;  # and its PID
          *) echo "stand-in docker: $* not expected" >&2; exit 2 ;;
        esac
        """))
    for name in ("systemctl", "docker"):
        (bin_dir / name).chmod(0o755)
    return bin_dir


def changing_calls(state: Path) -> list[str]:
    """The stand-ins' calls that stop or start an engine (apply's reads of what runs, `show`, `ps`, `inspect`, left out)."""
    calls = (state / "calls.log").read_text().splitlines() if (state / "calls.log").exists() else []
    return [call for call in calls if not re.match(r"(systemctl show|docker compose -f \S+ ps|docker inspect) ", call)]


def argv_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


@pytest.mark.timeout(900)
def test_the_adopt_example_to_a_first_apply_in_script_mode(tmp_path: Path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    held = [port for _, port in TODAY.values() if not port_free(port)]
    assert not held, f"the example's ports {held} are taken on this machine: the example's engines cannot run here now"
    work, state, run, log = tmp_path / "box", tmp_path / "today", tmp_path / "run", tmp_path / "log"
    for folder in (work, state):
        folder.mkdir()
    (work / "examples").symlink_to(REPO_ROOT / "examples")
    # the box's vLLM, where coder.service runs it (moved into the test's directory)
    launcher = tmp_path / BOX_LAUNCHER.lstrip("/")
    launcher.parent.mkdir(parents=True)
    launcher.write_text(f"#!/bin/sh\n# a stand-in for the box's vLLM (see the module docstring): `vllm serve MODEL ARGS`\nshift\nexec {shlex.quote(sys.executable)} "
                        f"{shlex.quote(str(FAKE_ENGINE))} \"$@\"\n")
    launcher.chmod(0o755)
    script = tmp_path / "seatplan-restart"
    script.write_text(block("render.md", "<!-- restart-script -->", "bash").split("\n", 1)[1].rsplit("```", 1)[0])
    script.chmod(0o755)
    host_dir = tmp_path / "host"
    environment = shim(work)  # `seatplan` as this checkout's CLI, COLUMNS as the pages were written at
    environment |= {"PATH": f"{stand_ins(tmp_path, state)}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}",
                    "SEATPLAN_RUN_DIR": str(run), "SEATPLAN_LOG_DIR": str(log),
                    # this machine's interpreter discovery picks a broken pyenv shim (kits.rollout.localhost_inventory says
                    # the same); a box's own python3 is found by discovery, so the page's hosts.yaml names none
                    "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                    # qwen3-8b's token, by reference (adopt's warning: export HF_TOKEN on the GPU host before apply)
                    "HF_TOKEN": HF_TOKEN}
    today = {seat: start_today(state, seat) for seat in TODAY}
    started: list[int] = []
    try:
        for port in (port for _, port in TODAY.values()):
            wait_for(lambda port=port: healthy(port), f"today's engine on {port}")
        adopt = steps(block("adopt.md", "<!-- adopt-example -->"))[0]
        first_apply = steps(block("adopt.md", r"<!-- not run: it stops the box's engines [^>]*-->"))
        first_calls: list[str] = []
        for step in [adopt, *first_apply]:
            line = step.command.replace("/etc/seatplan", str(host_dir)).replace("/usr/local/bin/seatplan-restart", str(script))
            if line.startswith("seatplan apply"):
                line += " -e seatplan_run_verify=false"
            done = subprocess.run(["bash", "-c", line], cwd=work, env=environment, capture_output=True, text=True, timeout=600)
            assert done.returncode == step.exit_status == 0, f"{line}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
            assert HF_TOKEN not in done.stdout + done.stderr, line
            actual = [printed_line.rstrip() for printed_line in (done.stdout + done.stderr).splitlines()]
            missing = [expected for expected in step.expected if not printed(expected, actual)]
            assert not missing, f"{line} did not print:\n" + "\n".join(missing) + "\n--- it printed:\n" + "\n".join(actual)
            if step is adopt:  # the box keeps its vLLM at /opt/vllm/bin: here, in the test's directory (before the plan reads the fleet)
                fleet = work / "fleet.yaml"
                assert f"launcher: [{BOX_LAUNCHER}, serve]" in fleet.read_text()
                fleet.write_text(fleet.read_text().replace(f"[{BOX_LAUNCHER}, serve]", f"[{launcher}, serve]"))
            calls = changing_calls(state)
            if "--check" in line:
                assert calls == [] and all(group_runs(group) for group in today.values()), "--check stopped an engine"
            elif "--tag first" in line:
                first_calls = calls
        # the cut-over: each engine running today stopped by what started it, seatplan's started on its port
        compose = (work / "examples" / "adopt" / "compose.yaml").absolute()
        assert sorted(first_calls) == sorted(["systemctl disable --now coder.service",
                                              f"docker compose -f {compose} rm --stop --force qwen3-8b",
                                              f"docker compose -f {compose} rm --stop --force llama-3b"])
        assert not any(group_runs(group) for group in today.values())
        for seat, (_, port) in TODAY.items():
            pid = int((run / f"{seat}.pid").read_text())
            started.append(pid)
            assert healthy(port), seat
            argv = argv_of(pid)
            env_file = host_dir / "env" / f"{seat}.env"
            command = shlex.split(re.search(r"^SEATPLAN_COMMAND='(.*)'$", env_file.read_text(), re.M)[1])
            # the box's launcher started it (no --launcher given: the fleet's hosts[].launcher), with the engine's own name
            assert command[:2] == [str(launcher), "serve"] and argv[-len(command) + 2:] == command[2:], (seat, argv)
            assert (log / f"{seat}.log").is_file()
        # the second apply (the block's last line) cut over nothing more and left every engine running
        assert changing_calls(state) == first_calls
        assert [int((run / f"{seat}.pid").read_text()) for seat in TODAY] == started
    finally:
        for pid_file in [*run.glob("*.pid"), *state.glob("*.pid")]:
            try:
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for group in today.values():
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
