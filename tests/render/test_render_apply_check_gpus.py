"""A process on a seat's GPU that no seat accounts for is refused before anything stops (issue 43, items 1 and 2).

The plan counts each GPU's memory for its seats only; a notebook or a training job holding memory there would make
a start fail vLLM's check half-way through a rollout. ``apply --check`` lists it under the seat's row and ``apply``
refuses it in its first play, as it refuses a stranger on a seat's port.

There is no GPU here, so ``nvidia-smi`` is a stand-in on PATH (written by the test): it answers nvidia-smi's own CSV
queries (``--query-gpu=index,uuid``, ``--query-compute-apps=gpu_uuid,pid,used_memory``, ``--format=csv,noheader,nounits``)
from a file the test writes, naming real processes the test started. Everything else is real: ansible-playbook, the
rendered host check reading ``/proc``, the stand-in engines (tests/integration/fake_engine.py) listening on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from kits.parts import free_port, require, stop_process
from kits.render import QWEN3_8B
from kits.rollout import ansible_installed, apply_args, build_plan_file, cpu_fleet, fake_launcher, render_args, run_seatplan, serve_by_hand, stop_engines
from seatplan.render import hostcheck

pytestmark = [pytest.mark.ansible, pytest.mark.slow]
FAST_HEALTH = ("-e", "seatplan_health_timeout_s=30")

STANDIN_NVIDIA_SMI = '''#!{python}
"""Stand-in nvidia-smi (no GPU on this machine): the rows of {table} for the query asked."""
import json, sys
table = json.load(open({table!r}))
if any(word.startswith("--query-gpu=") for word in sys.argv):
    rows = [[str(index), uuid] for index, uuid in enumerate(table["uuids"])]
elif any(word.startswith("--query-compute-apps=") for word in sys.argv):
    rows = [[table["uuids"][int(gpu)], str(pid), str(mib)] for gpu, pid, mib in table["apps"]]
else:
    sys.exit("stand-in nvidia-smi: only --query-gpu and --query-compute-apps")
assert "--format=csv,noheader,nounits" in sys.argv
print("\\n".join(", ".join(row) for row in rows))
'''


@pytest.fixture
def box(tmp_path, monkeypatch):
    require(ansible_installed(), "ansible-playbook (pip install ansible-core)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    table = tmp_path / "gpus.json"
    script = bin_dir / "nvidia-smi"
    script.write_text(STANDIN_NVIDIA_SMI.format(python=sys.executable, table=str(table)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    started: list[subprocess.Popen] = []
    yield tmp_path, table, started
    stop_engines(tmp_path)
    for process in started:
        stop_process(process)


def background(words: list[str], started: list[subprocess.Popen]) -> subprocess.Popen:
    process = subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    started.append(process)
    return process


def cuda_fleet(tmp_path: Path, ports: dict[str, int], pins: dict[str, int], gpu_count: int, stop: list[str]) -> Path:
    fleet = cpu_fleet(tmp_path, {name: (QWEN3_8B, port) for name, port in ports.items()}, kv="256MiB", total="80GiB", budgets=gpu_count, pins=pins,
                      more={"alpha": ["started_by:", f"  stop_command: {json.dumps(stop)}"]})
    fleet.write_text(fleet.read_text().replace("device: cpu", "device: cuda"))
    return fleet


def gpu_rows(out: str) -> list[str]:
    return [" ".join(line.split()) for line in out.splitlines() if line.strip().startswith("GPU ") and "is no seat's" in line]


def test_a_process_on_a_seats_gpu_that_no_seat_runs_is_refused_before_anything_stops(box, capsys, monkeypatch, rng: random.Random):
    tmp_path, table, started = box
    gpu_count = rng.randint(1, 4)
    names = ["alpha", "beta", "gamma"][: rng.randint(2, 3)]
    pins = {name: rng.randrange(gpu_count) for name in names}
    ports = {name: free_port() for name in names}
    uuids = [f"GPU-{rng.getrandbits(64):016x}-{index}" for index in range(gpu_count)]
    hand = serve_by_hand(ports["alpha"], started)  # alpha: run by hand today (started_by), on its GPU as nvidia-smi shows
    stop = [sys.executable, "-c", f"import os, signal; os.killpg({hand.pid}, signal.SIGTERM)"]
    stranger = background(["sleep", "600"], started)  # a job nobody declared, holding memory on one of the GPUs
    stranger_gpu = rng.randrange(gpu_count)
    stranger_mib = rng.randint(1, 81_000)
    table.write_text(json.dumps({"uuids": uuids, "apps": [[pins["alpha"], hand.pid, 2048], [stranger_gpu, stranger.pid, stranger_mib]]}))
    plan = build_plan_file(cuda_fleet(tmp_path, ports, pins, gpu_count, stop), tmp_path / "plan.json")
    assert run_seatplan(capsys, monkeypatch, *render_args(tmp_path, plan, fake_launcher()))[0] == 0
    check = [word for word in apply_args(tmp_path, plan, "look") if word != "--json"] + ["--check"]
    on_that_gpu = sorted(name for name, pin in pins.items() if pin == stranger_gpu)

    code, out, err = run_seatplan(capsys, monkeypatch, *check, "--json")
    rows = {row["seat"]: row for row in json.loads(out)["observed"]}
    assert {name for name, row in rows.items() if row["gpu_strangers"]} == set(on_that_gpu), out
    for name in on_that_gpu:
        assert rows[name]["gpu_strangers"] == [{"gpu": str(stranger_gpu), "pid": stranger.pid, "command": "sleep 600", "used_mib": stranger_mib}]
    assert all(row["gpus_read"] for row in rows.values())
    assert code == (1 if on_that_gpu else 0), out + err
    code, out, err = run_seatplan(capsys, monkeypatch, *check)
    assert gpu_rows(out) == [f"GPU {stranger_gpu}: PID {stranger.pid} (sleep 600, {stranger_mib:,} MiB) is no seat's apply: refused before anything stops"] * len(on_that_gpu), out
    assert "GPUs not read" not in out

    code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *FAST_HEALTH)
    said = " ".join(err.split())
    if on_that_gpu:
        assert code == 2, out + err
        assert "a seat's GPU is held by a process neither seatplan nor started_by runs; nothing was changed or stopped" in said, said
        for name in on_that_gpu:
            assert (f"seat {name}: its GPU memory is used by a process no seat accounts for: GPU {stranger_gpu} by PID {stranger.pid} "
                    f"(sleep 600, {stranger_mib:,} MiB)") in said, said
        assert "or a fixed seat on that GPU" in said
        assert not (tmp_path / "host" / "env").exists() and hand.poll() is None  # nothing written, alpha's engine not stopped
        stop_process(stranger)
        table.write_text(json.dumps({"uuids": uuids, "apps": [[pins["alpha"], hand.pid, 2048]]}))
        code, out, err = run_seatplan(capsys, monkeypatch, *apply_args(tmp_path, plan, "first"), *FAST_HEALTH)
    assert code == 0, out + err
    assert hand.wait(timeout=30) is not None  # cut over

    # seatplan's own engines on their GPUs (a child of the launcher's process, as vLLM's EngineCore is) are the seats'
    apps = []
    for name, pin in pins.items():
        engine = int((tmp_path / "state" / f"{name}.pid").read_text().split()[0])
        child = next((pid for pid in hostcheck.tree(engine) if pid != engine), engine)
        apps.append([pin, child, rng.randint(1, 40_000)])
    table.write_text(json.dumps({"uuids": uuids, "apps": apps}))
    code, out, err = run_seatplan(capsys, monkeypatch, *check, "--json")
    rows = {row["seat"]: row for row in json.loads(out)["observed"]}
    assert code == 0 and not any(row["gpu_strangers"] for row in rows.values()), out + err


def test_observe_counts_a_fixed_seats_gpu_and_says_when_no_gpu_was_read(tmp_path, monkeypatch, capsys, rng: random.Random):
    """The host check alone: a process on a GPU where a fixed seat with no port sits may be that seat (not refused);
    one on a fixed seat's port is that seat; without nvidia-smi the GPUs are not read, and the rows say so."""
    table = tmp_path / "gpus.json"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(STANDIN_NVIDIA_SMI.format(python=sys.executable, table=str(table)))
    (bin_dir / "nvidia-smi").chmod(0o755)
    started: list[subprocess.Popen] = []
    try:
        gpu_count = rng.randint(2, 8)
        uuids = [f"GPU-{index:08x}" for index in range(gpu_count)]
        unported, ported = rng.sample(range(gpu_count), 2)
        port = free_port()
        whisper = serve_by_hand(port, started)  # a fixed seat's server, known by the port of its health URL
        loose = background(["sleep", "600"], started)
        table.write_text(json.dumps({"uuids": uuids, "apps": [[unported, loose.pid, 100], [ported, whisper.pid, 200]]}))
        seats = [json.dumps({"seat": f"s{index}", "port": free_port(), "gpus": [str(index)], "sha1": None, "started_by": None, "digest": None})
                 for index in range(gpu_count)]
        fixed = [json.dumps({"seat": "notebook", "gpus": [str(unported)], "port": None}), json.dumps({"seat": "whisper", "gpus": [str(ported)], "port": port})]
        words = ["observe", "--mode", "script", "--host-dir", str(tmp_path / "host")]
        words += [part for seat in seats for part in ("--seat", seat)]

        def observed(*more: str) -> dict[str, dict]:
            assert hostcheck.main([*words, *more]) == 0
            return {row["seat"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}

        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        rows = observed()  # nothing declared: both processes are strangers on their GPUs
        assert {name for name, row in rows.items() if row["refuse"]} == {f"s{unported}", f"s{ported}"}
        assert rows[f"s{ported}"]["gpu_strangers"][0]["pid"] == whisper.pid
        rows = observed(*(part for item in fixed for part in ("--fixed", item)))
        assert not any(row["refuse"] for row in rows.values()) and all(row["gpus_read"] for row in rows.values())
        monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi at all
        rows = observed()
        assert not any(row["gpus_read"] or row["gpu_strangers"] or row["refuse"] for row in rows.values())
    finally:
        for process in started:
            stop_process(process)
