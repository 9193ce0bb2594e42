"""docs/render.md's restart script for `--restart script` runs as the page says (issue 50: the only example was in the
tests): given SEAT ENV_FILE it starts the engine through the launcher render writes and returns, given it again it
replaces the engine, given `stop` it stops the whole process group; its pid and log files go where the page says.

The engine is the stand-in of the fast Ansible tests (tests/integration/fake_engine.py: it answers /health), started by
the real rendered launcher from an env file in the rendered format."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jinja2

from kits.parts import group_runs
from kits.paths import REPO_ROOT
from kits.rollout import FAKE_ENGINE
from seatplan.encode import env_assignment
from seatplan.engine.command import shell_line
from seatplan.render.ansible import RESTART_COMMANDS, STOP_COMMANDS
from seatplan.render.targets import ENGINE_LAUNCHER, LAUNCHER_SCRIPT

HEALTH_WAIT_S = 30


def documented_script() -> str:
    found = re.search(r"<!-- restart-script -->\n```bash\n(.*?)```\n", (REPO_ROOT / "docs" / "render.md").read_text(), re.S)
    assert found, "docs/render.md has no restart script after <!-- restart-script -->"
    return found[1]


def install_script(directory: Path) -> Path:
    script = directory / "seatplan-restart"
    script.write_text(documented_script())
    script.chmod(0o755)
    return script


def host_dir(directory: Path, seat: str, port: int) -> Path:
    """HOST_DIR as apply leaves it: the launcher in bin/, the seat's env file in env/."""
    (directory / "bin").mkdir(parents=True)
    (directory / "env").mkdir()
    launcher = directory / ENGINE_LAUNCHER
    launcher.write_text(LAUNCHER_SCRIPT)
    launcher.chmod(0o755)
    env_file = directory / "env" / f"{seat}.env"
    command = shell_line([sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(port)])
    env_file.write_text("\n".join([env_assignment("SEATPLAN_SEAT", seat), env_assignment("SEATPLAN_HEALTH_URL", f"http://127.0.0.1:{port}/health"),
                                   env_assignment("SEATPLAN_COMMAND", command)]) + "\n")
    return env_file


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def healthy(port: int) -> bool:
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_healthy(port: int) -> None:
    deadline = time.monotonic() + HEALTH_WAIT_S
    while not healthy(port):
        assert time.monotonic() < deadline, f"no /health on {port}"
        time.sleep(0.2)


def test_the_documented_restart_script_starts_replaces_and_stops_an_engine(tmp_path: Path):
    script = install_script(tmp_path)
    port = free_port()
    env_file = host_dir(tmp_path / "host", "alpha", port)
    run, log = tmp_path / "run", tmp_path / "log"
    environment = {**os.environ, "SEATPLAN_RUN_DIR": str(run), "SEATPLAN_LOG_DIR": str(log)}
    groups = []
    try:
        for _ in range(2):  # a start, then a restart in place
            done = subprocess.run([str(script), "alpha", str(env_file)], env=environment, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            groups.append(int((run / "alpha.pid").read_text()))
            wait_healthy(port)
            assert (log / "alpha.log").is_file()
        assert groups[0] != groups[1] and not group_runs(groups[0]) and group_runs(groups[1])
        done = subprocess.run([str(script), "alpha", str(env_file), "stop"], env=environment, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert not (run / "alpha.pid").exists() and not group_runs(groups[1]) and not healthy(port)
        # a stop of an engine that does not run is no error (a failed step put back may stop one that never came up)
        again = subprocess.run([str(script), "alpha", str(env_file), "stop"], env=environment, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
    finally:
        for group in groups:
            if group_runs(group):
                os.killpg(group, 9)


def test_apply_gives_the_script_the_arguments_the_page_names():
    """The playbook's script commands, templated as Ansible does (Jinja with Ansible's `quote` filter, shlex.quote):
    `SCRIPT SEAT HOST_DIR/env/SEAT.env` to start, the same and `stop` to stop."""
    environment = jinja2.Environment()
    environment.filters["quote"] = shlex.quote
    given = {"seatplan_restart_script": "/usr/local/bin/seatplan-restart", "seatplan_host_dir": "/etc/seatplan", "seat": {"name": "qwen3-8b"}}
    start = shlex.split(environment.from_string(RESTART_COMMANDS["script"]).render(given))
    stop = shlex.split(environment.from_string(STOP_COMMANDS["script"]).render(given))
    assert start == ["/usr/local/bin/seatplan-restart", "qwen3-8b", "/etc/seatplan/env/qwen3-8b.env"]
    assert stop == [*start, "stop"]
    text = " ".join((REPO_ROOT / "docs" / "render.md").read_text().split())
    assert "`PATH SEAT ENV_FILE`: (re)start" in text and "`PATH SEAT ENV_FILE stop`: stop it" in text and "`HOST_DIR/env/SEAT.env`" in text
