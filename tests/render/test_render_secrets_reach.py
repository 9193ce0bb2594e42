"""Secrets reach the engine or apply stops first (issue 43, item 8).

Before the first step, on each host, the rendered playbook runs ``seatplan-health.py secrets`` (render/hostcheck.py)
from the controller's copy: every host variable a seat takes by reference (``from_host_env``) is set where the engines
get their environment, and every ``env_files`` file exists and is not readable by others; else apply fails naming the
seat and the variable or file, and nothing on the host is written, stopped or started.

- The check itself on random draws of seats, variables and files (modes and absences), script mode against this
  process's environment, and systemd mode against a stand-in ``systemctl`` on PATH (no systemd runs here) that prints
  a drawn manager environment.
- Through the real ansible-playbook in script mode with the stand-in engine (tests/integration/fake_engine.py): an
  unset variable and a world-readable file stop apply before the host directory exists; once set, every engine runs
  with its key by reference (``--engine-key-env``), the one the gateway's route names.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from kits.parts import free_port, require
from kits.paths import REPO_ROOT
from kits.render import QWEN3_8B
from kits.rollout import (
    ansible_installed,
    apply_args,
    build_plan_file,
    cpu_fleet,
    fake_launcher,
    render_args,
    run_seatplan,
    stop_engines,
)
from seatplan.render import hostcheck

SECRET = "sk-seatplanReachValue0123456789abcdef"  # only ever in the environment
NAMES = ["VLLM_API_KEY", "HF_TOKEN", "OTHER_KEY", "DB_PASSWORD"]


def draw_case(rng, tmp_path: Path) -> tuple[list[str], dict[str, str], set[tuple[str, str]]]:
    """Random seats, each with references and files; (argv, the environment, the (seat, name-or-path) that must fail)."""
    argv: list[str] = []
    environment: dict[str, str] = {"PATH": os.environ["PATH"]}
    bad: set[tuple[str, str]] = set()
    for seat_number in range(rng.randint(1, 5)):
        seat = f"seat-{seat_number}"
        for name in rng.sample(NAMES, rng.randint(0, len(NAMES))):
            source = f"{seat.upper().replace('-', '_')}_{name}_{rng.randrange(10**6)}"
            argv += ["--var", f"{seat}={name}={source}"]
            state = rng.choice(["set", "empty", "unset"])
            if state != "unset":
                environment[source] = SECRET if state == "set" else ""
            if state != "set":
                bad.add((seat, source))
        for file_number in range(rng.randint(0, 3)):
            path = tmp_path / f"{seat}-{file_number}.env"
            mode = rng.choice([0o600, 0o400, 0o640, 0o644, 0o604, None])
            if mode is not None:
                path.write_text(f"TOKEN={SECRET}\n")
                path.chmod(mode)
            argv += ["--file", f"{seat}={path}"]
            if mode is None or mode & stat.S_IROTH:
                bad.add((seat, str(path)))
    return argv, environment, bad


def failures(stderr: str) -> set[tuple[str, str]]:
    """(seat, the host variable or the file) of each line the check printed."""
    found = set()
    for line in stderr.splitlines():
        seat = line.split(":", 1)[0].removeprefix("seat ")
        words = line.split()
        named = words[words.index("host's") + 1].rstrip(",") if "host's" in words else words[words.index("file") + 1]
        found.add((seat, named))
    return found


@pytest.mark.parametrize("mode", ["script", "compose", "systemd"])
def test_every_missing_secret_is_named_by_seat_and_no_value_is_shown(rng, tmp_path, capsys, monkeypatch, mode):
    for _ in range(20):
        case = tmp_path / f"case-{rng.randrange(10**9)}"
        case.mkdir()
        argv, environment, bad = draw_case(rng, case)
        monkeypatch.setattr(os, "environ", dict(environment))
        if mode == "systemd":
            # a stand-in systemctl (no systemd here): `show-environment` prints the drawn manager environment
            bin_dir = case / "bin"
            bin_dir.mkdir()
            shown = "".join(f"{key}={value}\n" for key, value in environment.items())
            (case / "manager.env").write_text(shown)
            (bin_dir / "systemctl").write_text(f"#!/bin/sh\n[ \"$1\" = show-environment ] && exec cat {case / 'manager.env'}\nexit 1\n")
            (bin_dir / "systemctl").chmod(0o755)
            os.environ["PATH"] = f"{bin_dir}:{environment['PATH']}"
        code = hostcheck.main(["secrets", "--mode", mode, *argv])
        out, err = capsys.readouterr()
        assert code == (1 if bad else 0), err
        assert failures(err) == bad, err
        assert SECRET not in out + err
        if mode == "systemd":
            assert ("systemd's manager environment" in err) == any(not name.startswith("/") for _, name in bad)


def test_systemd_mode_refuses_when_the_manager_environment_cannot_be_read(tmp_path, capsys, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text("#!/bin/sh\necho 'System has not been booted with systemd' >&2\nexit 1\n")
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("ALPHA_KEY", SECRET)
    assert hostcheck.main(["secrets", "--mode", "systemd", "--var", "alpha=VLLM_API_KEY=ALPHA_KEY"]) == 1
    assert "seat alpha: VLLM_API_KEY takes the host's ALPHA_KEY, and systemd's manager environment could not be read" in capsys.readouterr().err


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)


def engine_environ(tmp_path: Path, seat: str) -> dict[str, str]:
    pid = int((tmp_path / "host" / "run" / f"{seat}.pid").read_text().split()[0])
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in raw if b"=" in pair)


@pytest.mark.ansible
@pytest.mark.slow
def test_apply_stops_before_the_first_step_until_every_secret_reaches_its_engine(rollout, capsys, monkeypatch):
    tmp_path = rollout
    key_file = tmp_path / "beta-secrets.env"
    key_file.write_text(f"HF_TOKEN={SECRET}\n")
    key_file.chmod(0o644)
    fleet = cpu_fleet(tmp_path, {"alpha": (QWEN3_8B, free_port()), "beta": (QWEN3_8B, free_port())}, kv="256MiB", total="64GiB",
                      envs={"alpha": {"HF_TOKEN": {"from_host_env": "ALPHA_HF"}}}, more={"beta": [f"env_files: [{key_file}]"]})
    plan = build_plan_file(fleet, tmp_path / "plan.json")
    monkeypatch.delenv("ALPHA_HF", raising=False)
    monkeypatch.delenv("SEATPLAN_TEST_ENGINE_KEY", raising=False)
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()), "--engine-key-env", "SEATPLAN_TEST_ENGINE_KEY")[0] == 0

    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), "-e", "seatplan_health_timeout_s=30")
    assert code == 2, out + err
    said = " ".join(err.split())
    assert "a secret would not reach its engine; nothing was changed or stopped" in said
    assert "seat alpha: HF_TOKEN takes the host's ALPHA_HF, which is not set" in said
    assert "seat alpha: VLLM_API_KEY takes the host's SEATPLAN_TEST_ENGINE_KEY" in said and "seat beta: VLLM_API_KEY takes the host's SEATPLAN_TEST_ENGINE_KEY" in said
    assert f"seat beta: its env_files file {key_file} is readable by every user (mode 0644)" in said
    assert "fix:" in err and SECRET not in out + err
    # the lines docs/render.md shows ("Secrets reach the engines") are these, the file named as the page names it
    page = (REPO_ROOT / "docs" / "render.md").read_text().split("naming each seat and variable or file (never a value):")[1]
    shown = page.split("```\n", 2)[1].splitlines()
    printed = [" ".join(line.split()) for line in err.replace(str(key_file), "/etc/seatplan/beta.env").splitlines()]
    assert all(any(line.startswith(example.removesuffix("(…)").rstrip()) for line in printed) for example in shown), (shown, printed)
    assert not (tmp_path / "host").exists() and not (tmp_path / "state" / "starts.log").exists()  # nothing on the host

    # set, and the file owner-only: every engine starts with its secrets, the engine key the gateway's route names
    monkeypatch.setenv("ALPHA_HF", SECRET + "-hf")
    monkeypatch.setenv("SEATPLAN_TEST_ENGINE_KEY", SECRET)
    key_file.chmod(0o600)
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "second"), "-e", "seatplan_health_timeout_s=30")
    assert code == 0, out + err
    assert engine_environ(tmp_path, "alpha")["HF_TOKEN"] == SECRET + "-hf"
    assert engine_environ(tmp_path, "beta")["HF_TOKEN"] == SECRET
    assert {engine_environ(tmp_path, seat)["VLLM_API_KEY"] for seat in ("alpha", "beta")} == {SECRET}
    routes = yaml.safe_load((tmp_path / "rendered" / "litellm" / "config.yaml").read_text())["model_list"]
    assert {route["litellm_params"]["api_key"] for route in routes} == {"os.environ/SEATPLAN_TEST_ENGINE_KEY"}
    assert SECRET not in out + err
