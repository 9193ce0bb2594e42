"""systemd mode through the real ansible-playbook, against a stand-in ``systemctl`` and ``journalctl`` on PATH.

No systemd runs on the test machine (no PID 1 manager to start units), so the stand-ins record every argv the
playbook and its host check give them and play the unit as systemd would: ``restart seatplan-vllm@SEAT.service``
starts the rendered launcher (``ExecStart=HOST_DIR/bin/seatplan-engine.sh``) with the environment of the unit's
``EnvironmentFile=`` lines (the seat's env file, then the drop-in's) and the manager environment the
``PassEnvironment=`` names take, as a listening process (the stand-in engine, tests/integration/fake_engine.py); ``show
--property=MainPID,ActiveState`` answers from that process; ``stop`` ends it; ``show-environment`` prints the manager
environment; ``journalctl -u UNIT -n N`` the unit's log. The unit files and drop-ins are the rendered ones, written
where ``-e seatplan_systemd_dir=`` points.

What holds: the first apply starts each seat's unit one at a time and waits on the unit's MainPID owning the port;
the engine gets its secret by reference from the manager environment; a re-apply restarts nothing; a killed engine
is restarted; an engine that exits fails its step at once with ``journalctl``'s lines; a variable the manager does
not hold stops apply before anything is written.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, render_args, run_seatplan
from seatplan.render import hostcheck

pytestmark = [pytest.mark.ansible, pytest.mark.slow]
SECRET = "sk-seatplanSystemdStandin0123456789"


def standin_systemd(directory: Path) -> Path:
    """`systemctl` and `journalctl` stand-ins (see the module's docstring); state and argv logs under DIR/systemd-state."""
    bin_dir = directory / "standin-bin"
    bin_dir.mkdir(exist_ok=True)
    state = directory / "systemd-state"
    state.mkdir(exist_ok=True)
    units = directory / "systemd"
    systemctl = bin_dir / "systemctl"
    systemctl.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        # A stand-in for systemctl (no systemd on the test machine): logs argv, plays seatplan-vllm@SEAT.service.
        import json, os, signal, subprocess, sys, time
        state, units = {str(state)!r}, {str(units)!r}
        args = [word for word in sys.argv[1:] if not word.startswith("--") or word.startswith("--property")]
        with open(os.path.join(state, "systemctl.log"), "a") as log:
            log.write(json.dumps(sys.argv[1:]) + "\\n")
        manager = json.load(open(os.path.join(state, "manager.json"))) if os.path.exists(os.path.join(state, "manager.json")) else {{}}
        if not args or args[0] in ("daemon-reload", "--version"):
            sys.exit(0)
        if args[0] == "show-environment":
            print("".join(f"{{key}}={{value}}\\n" for key, value in manager.items()), end="")
            sys.exit(0)
        unit = args[-1]
        pid_file = os.path.join(state, unit + ".pid")
        def alive(pid):
            try:
                return open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False
        pid = int(open(pid_file).read()) if os.path.exists(pid_file) else 0
        if args[0] == "show":
            running = pid and alive(pid)
            print(f"MainPID={{pid if running else 0}}\\nActiveState={{'active' if running else ('failed' if pid else 'inactive')}}")
            sys.exit(0)
        if args[0] in ("stop", "restart") and pid:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            for _ in range(100):
                if not alive(pid):
                    break
                time.sleep(0.1)
            os.remove(pid_file)
        if args[0] == "restart":
            def environment_files(path):
                found = []
                for line in open(path).read().splitlines():
                    if line.startswith("EnvironmentFile="):
                        found.append(line.split("=", 1)[1].replace("%i", unit.split("@", 1)[1].rsplit(".", 1)[0]))
                    if line.startswith("ExecStart="):
                        found.append(("exec", line.split("=", 1)[1]))
                    if line.startswith("PassEnvironment="):
                        found.append(("pass", line.split("=", 1)[1].split()))
                return found
            template = os.path.join(units, "seatplan-vllm@.service")
            drop_in = os.path.join(units, unit + ".d", "seatplan.conf")
            parts = environment_files(template) + (environment_files(drop_in) if os.path.exists(drop_in) else [])
            files = [part for part in parts if isinstance(part, str)]
            start = next(part[1] for part in parts if isinstance(part, tuple) and part[0] == "exec")
            passed = [name for part in parts if isinstance(part, tuple) and part[0] == "pass" for name in part[1]]
            script = "set -a; " + "".join(f'. "{{path}}"; ' for path in files) + "set +a; exec " + start
            env = {{"PATH": os.environ["PATH"]}} | {{name: manager[name] for name in passed if name in manager}}
            log = open(os.path.join(state, unit + ".log"), "w")
            process = subprocess.Popen(["sh", "-c", script], env=env, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            open(pid_file, "w").write(str(process.pid))
        """))
    journalctl = bin_dir / "journalctl"
    journalctl.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        # A stand-in for journalctl: logs argv, prints the unit's last lines (-u UNIT -n N)
        import json, os, sys
        state = {str(state)!r}
        with open(os.path.join(state, "journalctl.log"), "a") as log:
            log.write(json.dumps(sys.argv[1:]) + "\\n")
        args = sys.argv[1:]
        unit, count = args[args.index("-u") + 1], int(args[args.index("-n") + 1])
        path = os.path.join(state, unit + ".log")
        if os.path.exists(path):
            print("\\n".join(open(path).read().splitlines()[-count:]))
        """))
    for script in (systemctl, journalctl):
        script.chmod(0o755)
    return bin_dir


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    for pid_file in (tmp_path / "systemd-state").glob("*.pid"):
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "systemd-state" / "systemctl.log").read_text().splitlines()]


def restarts(tmp_path: Path) -> list[str]:
    return [call[-1] for call in calls(tmp_path) if call[:1] == ["restart"]]


def main_pid(tmp_path: Path, seat: str) -> int:
    return int((tmp_path / "systemd-state" / f"seatplan-vllm@{seat}.service.pid").read_text())


def test_systemd_mode_starts_waits_reconciles_and_reports_through_the_unit(rollout, capsys, monkeypatch):
    tmp_path = rollout
    monkeypatch.setenv("PATH", f"{standin_systemd(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    ports = {"alpha": free_port(), "beta": free_port()}
    fleet = cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="64GiB",
                      envs={"alpha": {"HF_TOKEN": {"from_host_env": "SEATPLAN_TEST_SYSTEMD_HF"}}})
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    words = render_args(tmp_path, plan, fake_launcher())
    cut = words.index("--restart")
    words = words[:cut] + ["--restart", "systemd"] + words[cut + 4:]  # no --restart-script
    assert run_seatplan(capsys, monkeypatch, *words)[0] == 0
    (tmp_path / "systemd").mkdir()  # /etc/systemd/system on a real host
    systemd_dir = ("-e", f"seatplan_systemd_dir={tmp_path / 'systemd'}", "-e", "seatplan_health_timeout_s=30")

    # the manager holds no SEATPLAN_TEST_SYSTEMD_HF (this process's environment does not count under systemd): refused first
    monkeypatch.setenv("SEATPLAN_TEST_SYSTEMD_HF", SECRET)
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *systemd_dir)
    assert code == 2 and "seat alpha: HF_TOKEN takes the host's SEATPLAN_TEST_SYSTEMD_HF, which is not set (or empty) in systemd's manager environment" in " ".join(err.split())
    assert not (tmp_path / "host" / "env").exists() and restarts(tmp_path) == []

    (tmp_path / "systemd-state" / "manager.json").write_text(json.dumps({"SEATPLAN_TEST_SYSTEMD_HF": SECRET}))
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *systemd_dir)
    assert code == 0, out + err
    assert restarts(tmp_path) == ["seatplan-vllm@alpha.service", "seatplan-vllm@beta.service"]
    assert (tmp_path / "systemd" / "seatplan-vllm@.service").exists() and (tmp_path / "systemd" / "seatplan-vllm@alpha.service.d" / "seatplan.conf").exists()
    assert ["daemon-reload"] in calls(tmp_path)
    for seat, port in ports.items():
        assert hostcheck.owns_port(main_pid(tmp_path, seat), port)
        # the health check followed the unit's MainPID
        assert ["show", "--property=MainPID,ActiveState", f"seatplan-vllm@{seat}.service"] in calls(tmp_path)
    environ = dict(pair.split("=", 1) for pair in Path(f"/proc/{main_pid(tmp_path, 'alpha')}/environ").read_text().split("\0") if "=" in pair)
    assert environ["HF_TOKEN"] == SECRET and environ["SEATPLAN_SEAT"] == "alpha"

    # the same plan again: nothing restarts; beta killed: only beta restarts
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "again"), *systemd_dir)
    assert code == 0 and len(restarts(tmp_path)) == 2, out + err
    os.killpg(main_pid(tmp_path, "beta"), signal.SIGKILL)
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "revive"), *systemd_dir)
    assert code == 0 and restarts(tmp_path)[2:] == ["seatplan-vllm@beta.service"], out + err
    assert hostcheck.owns_port(main_pid(tmp_path, "beta"), ports["beta"])

    # beta's engine exits at start: the step fails at once with journalctl's lines, the unit's own log
    dying = build_plan_file(cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="64GiB", name="fleet2.yaml",
                                      envs={"alpha": {"HF_TOKEN": {"from_host_env": "SEATPLAN_TEST_SYSTEMD_HF"}}, "beta": {"SEATPLAN_TEST_EXIT": "7"}}),
                            tmp_path / "plan2.json")
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, dying, "dies"), *systemd_dir, "-e", "seatplan_health_timeout_s=86400")
    document = json.loads(out)
    assert code == 1 and document["failed_step"] == "step 2/2 (restart beta on cpu-box:0)", out + err
    assert "the last 7 lines of journalctl -u seatplan-vllm@beta.service" in document["output"] and "fake engine log line 7" in document["output"]
    journal = [json.loads(line) for line in (tmp_path / "systemd-state" / "journalctl.log").read_text().splitlines()]
    assert ["-u", "seatplan-vllm@beta.service", "-n", "40", "--no-pager"] in journal
    assert SECRET not in out + err
