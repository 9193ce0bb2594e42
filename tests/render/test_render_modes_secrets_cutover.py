"""The restart modes' files and commands, secrets by reference, and the cut-over from an engine started outside seatplan.

- compose: there is no Docker engine on the test machine, so a stand-in ``docker`` on PATH
  (:func:`standin_docker`) records every command the playbook gives it and, for ``compose ... up SEAT``, runs the
  seat's service as Compose would (entrypoint + command from the seat's own compose file, ``$$`` read as ``$``) as a
  plain process: the files and the commands are real, the container is not.
- systemd: no systemd runs here either; the unit and each seat's drop-in are checked as text, and the launcher they
  start is run by the real ``sh``.
- secrets: a value given by reference is in the test's environment only; no rendered file, plan or command output
  holds it.
- cut-over: a seat whose ``started_by`` is a stop/start command pair; the first apply stops it before starting
  seatplan's engine, rollback starts it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from kits.parts import free_port, require
from kits.render import QWEN3_8B
from kits.rollout import (
    ansible_installed,
    apply_args,
    build_plan_file,
    cpu_fleet,
    fake_launcher,
    localhost_inventory,
    render_args,
    run_seatplan,
    stop_engines,
    with_rollout,
)
from seatplan.documents.io import read_plan
from seatplan.encode import env_assignment
from seatplan.engine.command import shell_line
from seatplan.render.bundle import render_files
from seatplan.render.diff import diff_trees
from seatplan.render.settings import RenderSettings

SECRET = "hf_seatplanSecretValue0123456789abcdef"  # only ever in the environment
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=20")


def standin_docker(directory: Path) -> Path:
    """A `docker` that logs its arguments and runs `compose -p P -f FILE up ... SEAT` / `stop SEAT` on plain processes."""
    bin_dir = directory / "standin-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "docker"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        # A stand-in for the Docker CLI (no Docker engine on the test machine): logs argv, runs a service's
        # entrypoint + command from its compose file as a process, as `docker compose up` would in a container.
        # What apply's health check asks (`compose ps -q -a SEAT`, `inspect ID`, `compose logs SEAT`) is answered from the
        # process it runs: its PID stands for the container id, and the container "exits" when the process does.
        import json, os, signal, subprocess, sys, yaml
        state = {str(directory / "docker-state")!r}
        os.makedirs(state, exist_ok=True)
        args = sys.argv[1:]
        reading = "ps" in args or "logs" in args or args[:1] == ["inspect"]
        with open(os.path.join(state, "reads.log" if reading else "calls.log"), "a") as log:
            log.write(json.dumps(args) + "\\n")
        seat = args[-1]
        pid_file = os.path.join(state, seat + ".pid")
        if args[:1] == ["inspect"]:
            pid = int(seat.removeprefix("c"))
            try:
                exited = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
            except OSError:
                exited = True
            print(f"{{0 if exited else pid}} {{'exited' if exited else 'running'}}")
            sys.exit(0)
        if "ps" in args:
            if os.path.exists(pid_file):
                print("c" + open(pid_file).read().strip())
            sys.exit(0)
        if "logs" in args:
            if os.path.exists(pid_file + ".log"):
                sys.stdout.write(open(pid_file + ".log").read())
            sys.exit(0)
        if os.path.exists(pid_file):
            try:
                os.killpg(int(open(pid_file).read()), signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.remove(pid_file)
        if "up" in args:
            service = yaml.safe_load(open(args[args.index("-f") + 1]))["services"][seat]
            words = [word.replace("$$", "$") for word in service["entrypoint"] + service["command"]]
            log = open(pid_file + ".log", "w")
            process = subprocess.Popen(words, start_new_session=True, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            open(pid_file, "w").write(str(process.pid))
        """))
    script.chmod(0o755)
    return bin_dir


def stop_standin(directory: Path) -> None:
    for pid_file in (directory / "docker-state").glob("*.pid"):
        try:
            os.killpg(int(pid_file.read_text()), 9)
        except ProcessLookupError:
            pass


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)
    stop_standin(tmp_path)


def compose_render_args(tmp_path: Path, plan: Path) -> list[str]:
    words = render_args(tmp_path, plan, fake_launcher())
    cut = words.index("--restart")
    return words[:cut] + ["--restart", "compose"] + words[cut + 4:]


@pytest.mark.slow
def test_compose_mode_recreates_each_seat_from_its_own_file_and_rollback_puts_it_back(rollout, capsys, monkeypatch):
    tmp_path = rollout
    monkeypatch.setenv("PATH", f"{standin_docker(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    ports = {"alpha": free_port(), "beta": free_port()}
    seats = {name: (QWEN3_8B, port) for name, port in ports.items()}
    common = {"kv": "256MiB", "total": "64GiB", "budgets": 2}
    first = build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 1}, **common), tmp_path / "plan.json")  # type: ignore[arg-type]
    moved = with_rollout(build_plan_file(cpu_fleet(tmp_path, seats, pins={"alpha": 0, "beta": 0}, name="fleet2.yaml", **common),  # type: ignore[arg-type]
                                         tmp_path / "plan2.json"), [("stop", "beta", ["cpu-box:1"]), ("start", "beta", ["cpu-box:0"])])
    host = tmp_path / "host"
    calls = tmp_path / "docker-state" / "calls.log"
    assert run_seatplan(capsys, monkeypatch, *compose_render_args(tmp_path, first))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, first, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    seat_file = {seat: host / "compose" / f"{seat}.yaml" for seat in seats}
    assert [json.loads(line) for line in calls.read_text().splitlines()] == [
        ["compose", "-p", "seatplan", "-f", str(seat_file[seat]), "up", "-d", "--no-deps", "--force-recreate", seat] for seat in ("alpha", "beta")]
    # each seat's own file: its service alone (no boot order), the same service as the cold-boot compose.yaml's
    cold = yaml.safe_load((host / "compose.yaml").read_text())["services"]
    for seat in seats:
        own = yaml.safe_load(seat_file[seat].read_text())
        assert list(own["services"]) == [seat] and own["name"] == "seatplan"
        assert own["services"][seat] == {key: value for key, value in cold[seat].items() if key != "depends_on"}
    before = seat_file["beta"].read_text()

    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, moved, "move"), *FAST_HEALTH)
    assert code == 0, out + err
    assert [json.loads(line)[-3:] for line in calls.read_text().splitlines()[2:]] == [
        [str(seat_file["beta"]), "stop", "beta"], ["--no-deps", "--force-recreate", "beta"]]
    assert (host / "compose" / "beta.yaml").read_text() == before  # CPU seats have no device ids: the file is the same,
    assert "CPU budget 0" in (host / "env" / "beta.env").read_text()  # the env file says where it runs now

    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--to", "first", "--inventory", str(localhost_inventory(tmp_path)),
                                  "-e", "seatplan_run_verify=false", *FAST_HEALTH, "--json")
    assert code == 0, out + err
    assert [json.loads(line)[-3:] for line in calls.read_text().splitlines()[4:]] == [
        [str(seat_file["beta"]), "stop", "beta"], ["--no-deps", "--force-recreate", "beta"]]
    assert "CPU budget 1" in (host / "env" / "beta.env").read_text()


def secret_fleet(tmp_path: Path, extra: list[str] | None = None) -> Path:
    secrets = tmp_path / "secrets.env"
    secrets.write_text(env_assignment("OTHER_SECRET", SECRET + "-file") + "\n")
    return cpu_fleet(tmp_path, {"alpha": (QWEN3_8B, free_port())}, kv="256MiB", total="64GiB",
                     envs={"alpha": {"HF_TOKEN": {"from_host_env": "SEATPLAN_TEST_HF"}, "PRICE": "$5 \\"}},
                     more={"alpha": [f"env_files: [{secrets}]", *(extra or [])]})


@pytest.mark.parametrize("restart", ["systemd", "compose", "script"])
def test_a_secret_by_reference_is_written_as_its_name_only(tmp_path, capsys, monkeypatch, restart):
    monkeypatch.setenv("SEATPLAN_TEST_HF", SECRET)
    plan = build_plan_file(secret_fleet(tmp_path), tmp_path / "plan.json")
    words = [*render_args(tmp_path, plan, fake_launcher())]
    words[words.index("--restart") + 1] = restart
    if restart != "script":
        cut = words.index("--restart-script")
        del words[cut:cut + 2]
    code, out, err = run_seatplan(capsys, monkeypatch, *words)
    assert code == 0, err
    rendered = tmp_path / "rendered"
    texts = {path.relative_to(rendered).as_posix(): path.read_text() for path in rendered.rglob("*") if path.is_file()}
    assert not [path for path, text in texts.items() if SECRET in text] and SECRET not in plan.read_text() + out + err
    env = texts["env/alpha.env"]
    assert "SEATPLAN_ENV_FROM_HOST=HF_TOKEN=SEATPLAN_TEST_HF" in env and f"SEATPLAN_ENV_FILES={tmp_path / 'secrets.env'}" in env
    assert "PRICE='$5 \\'" not in env and 'PRICE="\\$5 \\\\"' in env  # a trailing backslash: double quotes
    if restart == "systemd":
        unit = texts["systemd/seatplan-vllm@.service"]
        assert f"ExecStart={tmp_path / 'host'}/bin/seatplan-engine.sh" in unit
        drop_in = texts["systemd/seatplan-vllm@alpha.service.d/seatplan.conf"]
        assert f"EnvironmentFile={tmp_path / 'secrets.env'}" in drop_in and "PassEnvironment=SEATPLAN_TEST_HF" in drop_in
    if restart == "compose":
        for path in ("compose.yaml", "compose-seats/alpha.yaml"):
            service = yaml.safe_load(texts[path])["services"]["alpha"]
            # the declared reference is the one `$` left for Compose; the plain value's `$` stays escaped
            assert service["environment"] == {"HF_TOKEN": "${SEATPLAN_TEST_HF}", "PRICE": "$$5 \\"}
            assert service["env_file"] == [str(tmp_path / "secrets.env")]
    code, out, err = run_seatplan(capsys, monkeypatch, "diff", str(plan), "--against", str(rendered))
    assert SECRET not in out + err


def test_the_launcher_passes_a_secret_from_the_host_and_the_seats_env_files(tmp_path, monkeypatch):
    """sh runs the rendered launcher as script mode does (`seatplan-engine.sh ENV_FILE`); systemd gives it the same
    environment through EnvironmentFile= and PassEnvironment=."""
    monkeypatch.setenv("SEATPLAN_TEST_HF", SECRET)
    plan = build_plan_file(secret_fleet(tmp_path), tmp_path / "plan.json")

    files = render_files(read_plan(plan), RenderSettings(launcher=["true"]), ["ansible"])
    launcher = tmp_path / "seatplan-engine.sh"
    launcher.write_text(files["bin/seatplan-engine.sh"])
    env_file = tmp_path / "alpha.env"
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nprint(os.environ['HF_TOKEN'] == os.environ['SEATPLAN_TEST_HF'], os.environ['OTHER_SECRET'].endswith('-file'), os.environ['PRICE'])\n")
    command = env_assignment("SEATPLAN_COMMAND", shell_line([sys.executable, str(probe)]))
    env_file.write_text("".join(line + "\n" for line in files["env/alpha.env"].splitlines() if not line.startswith("SEATPLAN_COMMAND=")) + command + "\n")
    done = subprocess.run(["sh", str(launcher), str(env_file)], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "SEATPLAN_TEST_HF": SECRET})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "$5", "\\"]


@pytest.mark.slow
def test_the_first_apply_cuts_over_from_the_engine_started_outside_seatplan_and_rollback_starts_it_again(rollout, capsys, monkeypatch):
    tmp_path = rollout
    record = tmp_path / "outside.log"
    outside = tmp_path / "outside.sh"  # how the box ran the engine before: a script of its own
    outside.write_text(f"#!/bin/sh\necho \"$1\" >> {record}\n")
    outside.chmod(0o755)
    stop, start = [str(outside), "stopped"], [str(outside), "started"]
    fleet = cpu_fleet(tmp_path, {"alpha": (QWEN3_8B, free_port())}, kv="256MiB", total="64GiB",
                      more={"alpha": ["started_by:", f"  stop_command: {json.dumps(stop)}", f"  start_command: {json.dumps(start)}"]})
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "cut"), *FAST_HEALTH)
    assert code == 0, out + err
    assert record.read_text().split() == ["stopped"]
    assert (tmp_path / "state" / "starts.log").read_text().split() == ["alpha", "start"]  # after the stop
    # the release record says what the step stopped and how to start it again (rollback reads it)
    (release,) = (tmp_path / "host" / "releases").glob("*-cut.json")
    assert [step["cutover"] for step in json.loads(release.read_text())["steps"]] == [{"kind": "command", "stop": stop, "start": start}]
    # a second apply: seatplan runs the seat now, nothing to cut over
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "again"), *FAST_HEALTH)
    assert code == 0 and record.read_text().split() == ["stopped"]
    code, out, err = run_seatplan(capsys, monkeypatch, "rollback", str(tmp_path / "rendered"), "--before", "cut", "--inventory", str(localhost_inventory(tmp_path)),
                                  "-e", "seatplan_run_verify=false", *FAST_HEALTH, "--json")
    assert code == 0, out + err
    assert record.read_text().split() == ["stopped", "started"]
    assert (tmp_path / "state" / "starts.log").read_text().splitlines()[-1] == "alpha stop"
    assert not (tmp_path / "host" / "env" / "alpha.env").exists()


def test_diff_says_a_seat_restarts_when_only_its_compose_service_changes(tmp_path):
    """A new engine image changes no env file, but apply recreates every seat from its own compose file."""
    plan = read_plan(build_plan_file(cpu_fleet(tmp_path, {"alpha": (QWEN3_8B, free_port())}, kv="256MiB", total="64GiB"), tmp_path / "plan.json"))
    old = render_files(plan, RenderSettings(image="vllm/vllm-openai:v0.32.0"))
    new = render_files(plan, RenderSettings(image="registry.example/vllm-openai:v0.32.0-patched"))
    assert old["env/alpha.env"] == new["env/alpha.env"]
    report = diff_trees(old, new, "before")
    assert [(seat.seat, seat.status, seat.restarts, [change.what for change in seat.changes]) for seat in report.seats] == [
        ("alpha", "changed", True, ["its compose service (compose-seats/)"])]
    assert diff_trees(old, old, "before").changed is False
