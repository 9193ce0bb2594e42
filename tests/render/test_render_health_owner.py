"""Health belongs to the process the step started (issue 43, item 3): render/hostcheck.py, the host-side check the
playbook copies to every host, and the steps that use it through the real ansible-playbook (script mode, the stand-in
engine tests/integration/fake_engine.py; the real vLLM CPU engine runs it in tests/integration/test_apply_vllm*.py).

- ``/health`` counts only when the process the step started (the launcher's PID file) owns the port's listening
  socket: a stray process answering 200 on the port is not the engine;
- an engine that exits fails the step at once with its log's last 40 lines (never the whole deadline);
- a port held before the start by a process that is neither the seat's engine nor the one it cuts over from fails
  the step before anything is stopped or written, naming the PID and its command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kits.parts import free_port, require, stop_process
from kits.render import QWEN3_8B
from kits.rollout import FAKE_ENGINE, ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, render_args, run_seatplan, stop_engines
from seatplan.render import hostcheck


def listening(port: int) -> bool:
    return bool(hostcheck.listening_inodes(port))


def serve(port: int, *, via_shell: bool = False, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The stand-in engine on 127.0.0.1:PORT (answers /health 200), directly or as the child of a shell."""
    words = [sys.executable, str(FAKE_ENGINE), "--host", "127.0.0.1", "--port", str(port)]
    if via_shell:
        words = ["sh", "-c", '"$@"; exit 0', "sh", *words]  # the shell stays: the socket is its child's
    process = subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    for _ in range(300):
        if listening(port):
            return process
        assert process.poll() is None, "the stand-in engine exited"
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        stop_process(process, grace_s=5)


def record(host_dir: Path, seat: str, pid: int, log: Path | None = None) -> None:
    """What the launcher writes when it starts a seat's engine: its PID, then the file its stderr goes to."""
    (host_dir / "run").mkdir(parents=True, exist_ok=True)
    (host_dir / "run" / f"{seat}.pid").write_text(f"{pid}\n{log or ''}\n")


def check(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, dict, str]:
    code = hostcheck.main(list(words))
    captured = capsys.readouterr()
    return code, json.loads(captured.out.splitlines()[-1]), captured.err


def test_the_socket_belongs_to_the_process_that_listens_or_its_child(processes):
    port, other = free_port(), free_port()
    direct = serve(port)
    processes.append(direct)
    assert hostcheck.owns_port(direct.pid, port)
    assert not hostcheck.owns_port(direct.pid, other)  # nothing listens there
    assert hostcheck.owns_port(os.getpid(), port)  # the test's process is its parent: the socket is in its tree
    unrelated = subprocess.Popen(["sleep", "60"], start_new_session=True)
    processes.append(unrelated)
    assert not hostcheck.owns_port(unrelated.pid, port)
    shell = serve(other, via_shell=True)
    processes.append(shell)
    assert hostcheck.owns_port(shell.pid, other) and not hostcheck.owns_port(shell.pid, port)
    assert hostcheck.holders(port)[1] == [direct.pid]


def test_a_stray_answering_on_the_port_is_not_the_engine_the_step_started(tmp_path, processes, capsys):
    port = free_port()
    stray = serve(port)
    processes.append(stray)
    silent = subprocess.Popen(["sleep", "60"], start_new_session=True)  # the engine the step started: alive, never listening
    processes.append(silent)
    record(tmp_path, "gamma", silent.pid)
    code, document, err = check(capsys, "wait", "--seat", "gamma", "--port", str(port), "--host-dir", str(tmp_path), "--mode", "script",
                                "--url", f"http://127.0.0.1:{port}/health", "--timeout-s", "2")
    assert code == 1 and document == {"seat": "gamma", "pid": silent.pid, "healthy": False}
    assert f"did not answer 200 from the engine this step started (PID {silent.pid}) within 2 s" in err
    assert f"port {port} is held by PID {stray.pid} ({sys.executable} {FAKE_ENGINE}" in err
    # the stray's own PID recorded: that process is the engine, and it answers
    record(tmp_path, "gamma", stray.pid)
    code, document, err = check(capsys, "wait", "--seat", "gamma", "--port", str(port), "--host-dir", str(tmp_path), "--mode", "script",
                                "--url", f"http://127.0.0.1:{port}/health", "--timeout-s", "30")
    assert code == 0 and document["healthy"] is True and document["pid"] == stray.pid, err


# The draws come from the run's seed (the rng fixture), never from collection: xdist's workers must collect the same ids.
@pytest.mark.parametrize("draw", range(3))
def test_an_engine_that_exits_fails_at_once_with_the_last_40_lines_of_its_log(tmp_path, capsys, rng, draw):
    count = rng.randrange(0, 200)
    drawn = (draw, count)
    log = tmp_path / "gamma.log"
    with log.open("w") as out:
        dead = subprocess.Popen([sys.executable, "-c", f"import sys\nfor n in range(1, {count + 1}): print('line', n, file=sys.stderr)\nsys.exit(3)"],
                                stderr=out, stdout=out)
    dead.wait()
    record(tmp_path, "gamma", dead.pid, log)
    # a deadline the test could not wait out: only the exit can end the wait
    code, document, err = check(capsys, "wait", "--seat", "gamma", "--port", str(free_port()), "--host-dir", str(tmp_path), "--mode", "script",
                                "--url", "http://127.0.0.1:9/health", "--timeout-s", "86400")
    assert code == 1 and document["healthy"] is False, (drawn, err)
    lines = err.splitlines()
    assert lines[0].startswith(f"seat gamma: its engine (PID {dead.pid}) exited ") and lines[0].endswith("before /health answered 200")
    assert lines[1] == f"--- the last {min(count, 40)} lines of {log} ---"
    assert lines[2:] == [f"line {n}" for n in range(max(1, count - 39), count + 1)]


def test_a_port_held_before_the_start_by_a_stranger_is_refused_naming_it(tmp_path, processes, capsys):
    port = free_port()
    common = ["before", "--seat", "gamma", "--port", str(port), "--host-dir", str(tmp_path), "--mode", "script"]
    code, document, err = check(capsys, *common)
    assert code == 0 and document["held_by"] == []  # free
    stray = serve(port)
    processes.append(stray)
    code, document, err = check(capsys, *common)
    assert code == 1 and document["held_by"] == [stray.pid]
    assert f"seat gamma: port {port} is held by PID {stray.pid} ({sys.executable} {FAKE_ENGINE} --host 127.0.0.1 --port {port}), not by the seat's engine" in err
    assert "started_by" in err and "nothing was stopped" in err
    assert check(capsys, *common, "--cutover", "yes")[0] == 0  # the engine started_by names: apply stops it itself
    record(tmp_path, "gamma", stray.pid)
    assert check(capsys, *common)[0] == 0  # the seat's own engine (its launcher recorded it)
    (tmp_path / "run" / "gamma.pid").unlink()
    own = serve(free_port(), env={**os.environ, "SEATPLAN_SEAT": "gamma"})  # started by seatplan's launcher before PIDs were recorded
    processes.append(own)
    assert check(capsys, "before", "--seat", "gamma", "--port", str(hostcheck_port(own)), "--host-dir", str(tmp_path), "--mode", "script")[0] == 0
    assert check(capsys, "before", "--seat", "delta", "--port", str(hostcheck_port(own)), "--host-dir", str(tmp_path), "--mode", "script")[0] == 1


def hostcheck_port(process: subprocess.Popen) -> int:
    """The port a stand-in engine was started on (its --port)."""
    words = hostcheck.command_line(process.pid).split()
    return int(words[words.index("--port") + 1])


@pytest.fixture
def rollout(tmp_path):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    yield tmp_path
    stop_engines(tmp_path)


@pytest.mark.ansible
@pytest.mark.slow
def test_apply_fails_the_step_a_stray_holds_before_anything_stops_and_one_whose_engine_exits_at_once(rollout, capsys, monkeypatch, processes):
    tmp_path = rollout
    ports = {"alpha": free_port(), "gamma": free_port()}
    seats = {name: (QWEN3_8B, port) for name, port in ports.items()}
    common = {"kv": "256MiB", "total": "64GiB"}
    plan = build_plan_file(cpu_fleet(tmp_path, seats, **common), tmp_path / "plan.json")  # type: ignore[arg-type]
    stray = serve(ports["gamma"])  # answers 200 on gamma's port, as the stray did
    processes.append(stray)
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), "-e", "seatplan_health_timeout_s=60")
    # refused in apply's first play (issue 43, item 2), before any step: nothing written, nothing started or stopped
    said = " ".join(err.split())
    assert code == 2 and "a seat's port is held by a process neither seatplan nor started_by runs; nothing was changed or stopped" in said, out + err
    assert f"seat gamma: port {ports['gamma']} is held by PID {stray.pid} ({sys.executable} {FAKE_ENGINE} --host 127.0.0.1" in said
    assert not (tmp_path / "host" / "env").exists() and not (tmp_path / "state" / "starts.log").exists()
    stop_process(stray, grace_s=5)

    # gamma's engine dies at start: the step ends at once (a deadline of a day), with its log's last 40 lines, and is undone
    dying = build_plan_file(cpu_fleet(tmp_path, seats, envs={"gamma": {"SEATPLAN_TEST_EXIT": "55"}}, name="fleet2.yaml", **common), tmp_path / "plan2.json")  # type: ignore[arg-type]
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, dying, "dies"), "-e", "seatplan_health_timeout_s=86400")
    document = json.loads(out)
    assert code == 1 and document["failed_step"] == "step 2/2 (restart gamma on cpu-box:0)", out + err
    log = tmp_path / "state" / "gamma.log"
    assert "exited" in document["output"] and f"the last 40 lines of {log}" in document["output"], document["output"][-5000:]
    assert "fake engine log line 55" in document["output"] and "fake engine log line 16\\n" in document["output"]
    assert "fake engine log line 15\\n" not in document["output"]
    assert not (tmp_path / "host" / "env" / "gamma.env").exists()  # new with the step: removed by its undo
    # without --json the error names the step and prints the log lines as lines
    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, dying, "dies2")[:-1], "-e", "seatplan_health_timeout_s=86400")
    assert code == 1 and "error: step 2/2 (restart gamma on cpu-box:0) failed at" in err
    assert "\nfake engine log line 55\n" in err
