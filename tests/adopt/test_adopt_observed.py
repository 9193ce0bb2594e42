"""``seatplan adopt --observed``: what the adopted box shows each seat and GPU holding (issue 46).

nvidia-smi's compute-apps rows are tied to seats through the GPU host's process table (``ps -ww -eo pid,ppid,args``
saved there, or ``/proc`` here) or, on a GPU with one vLLM seat, by vLLM's process titles; the observations
document is what ``plan --observed`` reads. No GPU here: the nvidia-smi CSVs are written by the test in nvidia-smi's
format (tests/fixtures/formats/FORMATS.md, "nvidia-smi"); the ``/proc`` test reads this machine's real processes.
tests/adopt/test_adopt_observed_vllm.py does the same with real vLLM CPU engines.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from kits.cli import run_cli
from kits.paths import REPO_ROOT
from seatplan.adopt.readers.processes import read_proc, read_ps_text
from seatplan.errors import SeatplanError

MODELS = REPO_ROOT / "tests" / "fixtures" / "models"
SPEECH = REPO_ROOT / "examples" / "adopt" / "speech"
MiB = 2**20


def uuid(index: int) -> str:
    return f"GPU-{index:08x}-2b6d-4e19-a5f0-3d9b7c2e6a14"


@dataclass
class Engine:
    name: str
    port: int
    gpus: list[int]
    spell: str  # how its command line names the port: "--port N", "--port=N", or "" (vLLM's default 8000)
    kv_bytes: int
    used_mib: dict[int, int] = field(default_factory=dict)  # GPU → the MiB its process there holds


def smi_csv(gpus: int, used_mib: dict[int, int]) -> str:
    rows = [f"{index}, NVIDIA H100 80GB HBM3, {uuid(index)}, 81559 MiB, 551 MiB, {used_mib.get(index, 0)} MiB" for index in range(gpus)]
    return "index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n" + "\n".join(rows) + "\n"


def draw_box(rng: random.Random) -> tuple[list[Engine], int]:
    gpus = rng.randint(1, 4)
    count = rng.randint(1, 5)
    ports = rng.sample(range(1025, 65535), count)
    engines = []
    for number in range(count):
        tp = 2 if gpus >= 2 and rng.random() < 0.3 else 1
        spell = rng.choice(["--port {}", "--port={}"])
        engines.append(Engine(f"e{number}", ports[number], sorted(rng.sample(range(gpus), tp)), spell, rng.randint(1, 40) * 2**28))
    if 8000 not in ports and rng.random() < 0.3:  # one engine on vLLM's default port, its command line naming none
        engines[0].port, engines[0].spell = 8000, ""
    return engines, gpus


def write_box(directory: Path, rng: random.Random, engines: list[Engine], gpus: int) -> tuple[Path, Path, Path, Path, dict[int, int]]:
    """The engines' env files, and the host's ps listing, compute-apps CSV and nvidia-smi CSV with decoys in them."""
    env_dir = directory / "env"
    env_dir.mkdir()
    ps = ["    PID    PPID COMMAND", "      1       0 /sbin/init"]
    apps = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    used: dict[int, int] = {}
    pids = iter(rng.sample(range(100, 4_000_000), 10 * len(engines) + 10))
    for engine in engines:
        port = engine.spell.format(engine.port) if engine.spell else ""
        tp = f" --tensor-parallel-size {len(engine.gpus)}" if len(engine.gpus) > 1 else ""
        command = f"vllm serve {MODELS / 'Qwen--Qwen3-0.6B'} --served-model-name {engine.name} {port} --kv-cache-memory-bytes {engine.kv_bytes}{tp}"
        (env_dir / f"{engine.name}.env").write_text(f"CUDA_VISIBLE_DEVICES={','.join(map(str, engine.gpus))}\nVLLM_LINE=\"{command}\"\n")
        shell, server, core = next(pids), next(pids), next(pids)
        ps += [f"{shell:>7} {1:>7} bash -c exec $VLLM_LINE", f"{server:>7} {shell:>7} /opt/venv/bin/python3 /opt/venv/bin/{command}",
               f"{core:>7} {server:>7} VLLM::EngineCore"]
        holders = [(core, "VLLM::EngineCore", engine.gpus[0])] if len(engine.gpus) == 1 else []
        for rank, gpu in enumerate(engine.gpus if len(engine.gpus) > 1 else []):
            worker = next(pids)
            ps.append(f"{worker:>7} {core:>7} VLLM::Worker_TP{rank}")
            holders.append((worker, f"VLLM::Worker_TP{rank}", gpu))
        for pid, title, gpu in holders:
            engine.used_mib[gpu] = rng.randint(2048, 70000)
            apps.append(f"{uuid(gpu)}, {pid}, {title}, {engine.used_mib[gpu]} MiB")
            used[gpu] = used.get(gpu, 0) + engine.used_mib[gpu]
    # decoys: a notebook, and an engine nobody adopted (its server on a port no seat has), each on a random GPU
    notebook, stray_server, stray_core = next(pids), next(pids), next(pids)
    stray_port = next(port for port in range(1025, 65535) if port not in {engine.port for engine in engines} | {8000})
    ps += [f"{notebook:>7} {1:>7} python3 notebook.py", f"{stray_server:>7} {1:>7} vllm serve other --port {stray_port}",
           f"{stray_core:>7} {stray_server:>7} VLLM::EngineCore"]
    for pid, title in ((notebook, "python3"), (stray_core, "VLLM::EngineCore")):
        gpu = rng.randrange(gpus)
        mib = rng.randint(1, 9000)
        apps.append(f"{uuid(gpu)}, {pid}, {title}, {mib} MiB")
        used[gpu] = used.get(gpu, 0) + mib
    body = ps[2:]
    rng.shuffle(body)  # ps lists by PID, not parents first; the reader must not care
    ps[2:] = body
    paths = directory / "ps.txt", directory / "apps.csv", directory / "gpus.csv"
    paths[0].write_text("\n".join(ps) + "\n")
    paths[1].write_text("\n".join(apps) + "\n")
    paths[2].write_text(smi_csv(gpus, used))
    return env_dir, *paths, used


@pytest.mark.parametrize("seed", range(12))
def test_processes_are_tied_to_their_seats_through_the_hosts_process_table(tmp_path: Path, seed: int, capsys, monkeypatch):
    """Each engine's processes (its EngineCore, or its tensor-parallel workers) are tied to it through their parent's
    command line, whatever GPU they share with other engines, a notebook or an engine no file adopts; the seat's
    observed footprint is what its processes hold on one GPU, the most over its GPUs, with its KV pin."""
    rng = random.Random(seed)
    engines, gpus = draw_box(rng)
    env_dir, ps, apps, smi, used = write_box(tmp_path, rng, engines, gpus)
    observed_path = tmp_path / "observed.json"
    done = run_cli(capsys, monkeypatch, "adopt", "--env-dir", f"box={env_dir}", "--nvidia-smi", f"box={smi}", "--compute-apps", str(apps),
                   "--processes", f"box={ps}", "-o", str(tmp_path / "fleet.yaml"), "--observed", str(observed_path), "--json")
    assert done.exit_code == 0, done.stdout + done.stderr
    document = json.loads(observed_path.read_text())
    assert document["kind"] == "seatplan.observed" and document["source"] == "adopt"
    assert sorted(document["seats"]) == sorted(engine.name for engine in engines), done.stdout
    for engine in engines:
        seen = document["seats"][engine.name]
        assert seen["footprint_bytes"] == max(engine.used_mib.values()) * MiB, (engine, seen)
        assert seen["kv_cache_memory_bytes"] == engine.kv_bytes and seen["at_plateau"] is False
        assert "command line serves port" in seen["source"] and str(engine.port) in seen["source"]
    assert {(gpu["index"], gpu["used_bytes"]) for gpu in document["gpus_used"]} == {(index, used.get(index, 0) * MiB) for index in range(gpus)}
    # the decoys hold memory no seat accounts for: where every seat of a GPU is observed, that GPU reserves it
    for correction in document["gpu_corrections"]:
        index = correction["index"]
        accounted = sum(engine.used_mib.get(index, 0) for engine in engines)
        assert correction["extra_bytes"] == (used.get(index, 0) - accounted) * MiB > 1024 * MiB
    corrected = {correction["index"] for correction in document["gpu_corrections"]}
    for index in range(gpus):
        extra = used.get(index, 0) - sum(engine.used_mib.get(index, 0) for engine in engines)
        assert (index in corrected) == (extra > 1024)


def test_without_a_process_table_an_engine_alone_on_its_gpu_is_tied_by_its_title(tmp_path: Path, capsys, monkeypatch):
    """The speech box of docs/adopt.md: one engine (VLLM::EngineCore alone on GPU 0), two fixed seats, and GPU 3's
    20 GiB held by a process no file names. The engine is observed; GPU 3's memory becomes a GPU correction."""
    observed_path = tmp_path / "observed.json"
    done = run_cli(capsys, monkeypatch, "adopt", "--compose", f"gpu-box={SPEECH / 'compose.yaml'}", "--nvidia-smi", f"gpu-box={SPEECH / 'nvidia-smi.csv'}",
                   "--compute-apps", str(SPEECH / "compute-apps.csv"), "-o", str(tmp_path / "speech.yaml"), "--observed", str(observed_path))
    assert done.exit_code == 0, done.stderr
    assert f"wrote {observed_path}: observed footprints of 1 seat(s) (qwen3-8b) and 4 GPU total(s)" in done.stdout
    document = json.loads(observed_path.read_text())
    seen = document["seats"]["qwen3-8b"]
    assert seen["footprint_bytes"] == 26208 * MiB and seen["kv_cache_memory_bytes"] == 8589934592 and seen["max_model_len"] == 32768
    assert "compute-apps.csv:2" in seen["source"] and "the only adopted vLLM seat on GPU 0" in seen["source"]
    assert [gpu["used_bytes"] // MiB for gpu in document["gpus_used"]] == [26214, 6150, 3584, 20480]
    assert [(correction["index"], correction["extra_bytes"] // MiB) for correction in document["gpu_corrections"]] == [(3, 20480)]


def test_an_engine_sharing_its_gpu_without_a_process_table_keeps_its_estimate_and_says_so(tmp_path: Path, capsys, monkeypatch):
    rng = random.Random(5)
    engines = [Engine("a", 8101, [0], "--port {}", 2**30), Engine("b", 8102, [0], "--port {}", 2**30)]
    env_dir, _, apps, smi, _ = write_box(tmp_path, rng, engines, 1)
    observed_path = tmp_path / "observed.json"
    done = run_cli(capsys, monkeypatch, "adopt", "--env-dir", f"box={env_dir}", "--nvidia-smi", f"box={smi}", "--compute-apps", str(apps),
                   "-o", str(tmp_path / "fleet.yaml"), "--observed", str(observed_path), "--json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(observed_path.read_text())["seats"] == {}
    warnings = json.loads(done.stdout)["warnings"]
    for name in ("a", "b"):
        assert any(warning.startswith(f"seat {name}: no process of the compute-apps CSV could be tied to it") for warning in warnings), warnings


@pytest.mark.parametrize(("text", "said"), [
    ("PID PPID COMMAND\n  12 1 vllm serve m\n  x 1 y\n", "ps.txt:3"),
    ("USER PID COMMAND\n", "ps.txt:1"),
    ("", "ps.txt"),
    ("PID PPID COMMAND\n  12\n", "ps.txt:2"),
])
def test_a_process_listing_that_is_not_ps_output_is_refused_naming_its_line(text: str, said: str):
    with pytest.raises(SeatplanError) as caught:
        read_ps_text(text, "ps.txt", None)
    assert caught.value.where == said and "ps -ww -eo pid,ppid,args" in (caught.value.fix or "")


CHILD = """
import socket, subprocess, sys, time
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(server.getsockname()[1], child.pid, flush=True)
time.sleep(60)
"""


def test_this_hosts_proc_gives_each_process_its_parent_and_its_listening_ports():
    """A real server process here (listening on 127.0.0.1) with a child: /proc ties the child to the parent's port,
    as it ties a vLLM EngineCore to its API server."""
    process = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port_text, child_text = process.stdout.readline().split()
        port, child = int(port_text), int(child_text)
        deadline = time.monotonic() + 30
        while True:
            table = read_proc()
            if child in table.processes or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        chain = table.ancestry(child)
        assert [item.pid for item in chain[:2]] == [child, process.pid]
        assert port in chain[1].listening and not chain[0].listening
        assert table.processes[os.getpid()].pid == os.getpid() and table.ports_known
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # the port read is the one the server listens on
    finally:
        for pid in (child if "child" in locals() else None, process.pid):
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)


BOX = REPO_ROOT / "examples" / "adopt" / "box"


def test_the_operators_box_keeps_todays_layout_from_what_it_shows_and_warns_where_estimates_differ(tmp_path: Path, capsys, monkeypatch):
    """issue 46's done-when, on examples/adopt/box/: from the estimates alone today's layout is refused under
    --max-moves 0 (exit 3); from the observations adopt read it plans with 0 moves, its headline saying so; with the
    seats' observations taken out, every GPU whose estimate for today's layout differs from nvidia-smi's memory.used by
    over 10 % and 1 GiB is warned about, and no other."""
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    done = run_cli(capsys, monkeypatch, "adopt", "--env-dir", f"gpu-box={BOX / 'env'}", "--nvidia-smi", f"gpu-box={BOX / 'nvidia-smi.csv'}",
                   "--compute-apps", str(BOX / "compute-apps.csv"), "--processes", f"gpu-box={BOX / 'ps.txt'}", "-o", "box.yaml",
                   "--observed", "observed.json")
    assert done.exit_code == 0, done.stderr
    fleet = tmp_path / "box.yaml"
    fleet.write_text(fleet.read_text().replace("vllm_version: TODO", 'vllm_version: "0.32"  #'))
    document = json.loads((tmp_path / "observed.json").read_text())
    rows = {int(line.split(", ")[1]): int(line.split(", ")[3].split()[0]) for line in (BOX / "compute-apps.csv").read_text().splitlines()[1:]}
    assert len(document["seats"]) == 7
    for seen in document["seats"].values():
        pid = int(seen["source"].split(" pid ")[1].split(":")[0])
        assert seen["footprint_bytes"] == rows[pid] * MiB and "command line serves port" in seen["source"]
    estimated = run_cli(capsys, monkeypatch, "plan", "box.yaml", "--max-moves", "0", "-o", "estimated.json")
    assert estimated.exit_code == 3, estimated.stdout + estimated.stderr
    observed = run_cli(capsys, monkeypatch, "plan", "box.yaml", "--observed", "observed.json", "--max-moves", "0", "-o", "observed-plan.json")
    assert observed.exit_code == 0, observed.stdout + observed.stderr
    assert "from observed footprints (7 observed of 7 vLLM seat(s))" in " ".join(observed.stdout.split())
    assert json.loads((tmp_path / "observed-plan.json").read_text())["moves"] == 0
    document["seats"] = {}
    (tmp_path / "gpus-only.json").write_text(json.dumps(document))
    done = run_cli(capsys, monkeypatch, "plan", "box.yaml", "--observed", "gpus-only.json", "--max-moves", "0", "--json")
    assert done.exit_code == 3
    plan = json.loads(done.stdout)
    footprint = {seat["name"]: seat["footprint_bytes"] for seat in plan["seats"]}
    today = yaml.safe_load(fleet.read_text())["current_layout"]
    warned = {int(warning.split(":")[1]) for warning in plan["warnings"] if warning.startswith("GPU gpu-box:") and ": estimated " in warning}
    should = set()
    for gpu in document["gpus_used"]:
        estimate = sum(footprint[name] for name, index in today.items() if index == gpu["index"])
        gap = abs(estimate - gpu["used_bytes"])
        if gap >= 2**30 and gap > 0.10 * max(estimate, gpu["used_bytes"]):
            should.add(gpu["index"])
    assert warned == should == {0, 2, 3}, plan["warnings"]


SERVER = """
import socket, subprocess, sys, time
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(child.pid, flush=True)
time.sleep(120)
"""


def test_on_the_gpu_host_adopt_asks_nvidia_smi_for_its_processes_and_ties_them_through_proc(tmp_path: Path, capsys, monkeypatch):
    """``--gpus-from-host --processes-from-host``: nvidia-smi's two queries run here (a STAND-IN nvidia-smi: no GPU on
    this machine, as tests/adopt/test_adopt_gpus_from_host.py says) and each listed PID, a real child process of a real
    server listening on a seat's port here, is tied to that seat through /proc. Both seats are on GPU 0, so titles
    cannot tell them apart."""
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    servers, children, ports = [], {}, {}
    try:
        for name in ("a", "b"):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                ports[name] = probe.getsockname()[1]
            servers.append(subprocess.Popen([sys.executable, "-c", SERVER, str(ports[name])], stdout=subprocess.PIPE, text=True))
            assert servers[-1].stdout is not None
            children[name] = int(servers[-1].stdout.readline())
            (env_dir / f"{name}.env").write_text(f"CUDA_VISIBLE_DEVICES=0\nVLLM_LINE=\"vllm serve {MODELS / 'Qwen--Qwen3-0.6B'} --served-model-name {name} "
                                                 f"--port {ports[name]} --kv-cache-memory-bytes 1073741824\"\n")
        used = {"a": 3001, "b": 5002}
        apps = "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n" + "".join(f"{uuid(0)}, {children[name]}, VLLM::EngineCore, {used[name]} MiB\n" for name in used)
        gpus = smi_csv(1, {0: sum(used.values())})
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        program = bin_dir / "nvidia-smi"
        program.write_text(f"#!/bin/sh\ncase \"$1\" in\n  --query-compute-apps=*) cat <<'EOF'\n{apps}EOF\n;;\n  *) cat <<'EOF'\n{gpus}EOF\n;;\nesac\n")
        program.chmod(0o755)
        observed_path = tmp_path / "observed.json"
        done = run_cli(capsys, monkeypatch, "adopt", "--env-dir", str(env_dir), "--gpus-from-host", "--processes-from-host", "-o", str(tmp_path / "fleet.yaml"),
                       "--observed", str(observed_path), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
        assert done.exit_code == 0, done.stdout + done.stderr
        seats = json.loads(observed_path.read_text())["seats"]
        assert sorted(seats) == sorted(used), done.stdout + done.stderr + (tmp_path / "fleet.yaml").read_text()
        for name in used:
            assert seats[name]["footprint_bytes"] == used[name] * MiB
            assert f"pid {children[name]} through its ancestor pid {servers[list(used).index(name)].pid} listens on port {ports[name]}" in seats[name]["source"]
    finally:
        for pid in [*children.values(), *(server.pid for server in servers)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for server in servers:
            server.wait(timeout=30)
