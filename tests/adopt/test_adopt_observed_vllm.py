"""``seatplan adopt --observed`` with real vLLM 0.32 CPU engines (issue 46): two engines started by hand from env
files, both on "GPU 0", so vLLM's process titles (two ``VLLM::EngineCore``) cannot tell them apart and each process
must be tied to its seat through the ports its API server listens on (``--processes-from-host``: this machine's
``/proc``) or the port its command line names (``--processes``: ``ps -ww -eo pid,ppid,args`` as saved on a GPU host).

A stand-in where nothing real can run: there is no GPU here, so the test writes the nvidia-smi CSVs itself, in
nvidia-smi's format, from the real processes: each ``VLLM::EngineCore`` (the processes nvidia-smi lists, the ones
holding GPU memory on a GPU host) with its **resident memory (VmRSS) standing for its GPU memory**, and a decoy (this
test's own process). Which process is whose is for adopt to find; the test only checks it against the engines it
started. Then ``plan --observed`` keeps today's layout (0 moves under --max-moves 0) from the observed figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kits.parts import free_port, require
from kits.serving_stack import Server, start_from_env_file
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import vllm_installed, vllm_python, vllm_venv

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

SEATS = {"dense": (QWEN3_DENSE, 48 * 2**20), "gemma": (GEMMA3_TEXT, 256 * 2**20)}  # seat → (tiny model, KV pin)
GPU_UUID = "GPU-5e1a0c2b-9d3f-4a7e-8b61-0c4d2e9f1a03"
MiB = 2**20


def seatplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from seatplan.cli import main; main()", *args], capture_output=True, text=True, timeout=600)


def env_file(seat: str, model_dir: Path, port: int) -> str:
    _, kv = SEATS[seat]
    command = (f"{vllm_python()} -m vllm.entrypoints.openai.api_server --model {model_dir} --served-model-name {seat} --host 127.0.0.1 "
               f"--port={port} --dtype bfloat16 --max-model-len 1024 --kv-cache-memory-bytes {kv} --enforce-eager --max-num-seqs 4 "
               "--max-num-batched-tokens 1024")
    return f"# {seat}: started by hand\nCUDA_VISIBLE_DEVICES=0\nVLLM_LINE=\"{command}\"\n"


def descendants(pid: int) -> list[int]:
    """The process and all below it, from /proc (each process's parent is /proc/PID/stat's fourth field)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isascii() and entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def title(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()


def rss_mib(pid: int) -> int:
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) // 1024


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    work = tmp_path_factory.mktemp("observed")
    handmade = work / "handmade"
    handmade.mkdir()
    ports = {seat: free_port() for seat in SEATS}
    for seat, (spec, _) in SEATS.items():
        (handmade / f"{seat}.env").write_text(env_file(seat, tiny_model_dir(spec, vllm_python()), ports[seat]))
    servers: dict[str, Server] = {}
    try:
        for seat in SEATS:
            servers[seat] = start_from_env_file(handmade / f"{seat}.env", "VLLM_LINE", ports[seat], work)
        yield work, handmade, ports, servers
    finally:
        for server in servers.values():
            server.stop()


def write_smi(work: Path, servers: dict[str, Server]) -> dict[str, int]:
    """The stand-in nvidia-smi output: every engine's VLLM::EngineCore (its RSS as GPU memory) and this test's process,
    all on GPU 0; returns what each seat's cores hold, for the test's own check."""
    rows = ["gpu_uuid, pid, process_name, used_gpu_memory [MiB]"]
    held: dict[str, int] = {}
    for seat, server in servers.items():
        cores = [pid for pid in descendants(server.process.pid) if title(pid).startswith("VLLM::")]
        assert cores, f"{seat}: no VLLM:: process under pid {server.process.pid}"
        for pid in cores:
            mib = rss_mib(pid)
            rows.append(f"{GPU_UUID}, {pid}, {title(pid)}, {mib} MiB")
            held[seat] = held.get(seat, 0) + mib
    decoy = rss_mib(os.getpid())
    rows.append(f"{GPU_UUID}, {os.getpid()}, python3, {decoy} MiB")
    (work / "apps.csv").write_text("\n".join(rows) + "\n")
    used = sum(held.values()) + decoy
    (work / "gpus.csv").write_text("index, name, uuid, memory.total [MiB], memory.reserved [MiB], memory.used [MiB]\n"
                                   f"0, CPU box (RSS standing for GPU memory), {GPU_UUID}, 65536 MiB, 0 MiB, {used} MiB\n")
    return held


def own_processes(listing: str) -> str:
    """The ps header, this test's own process tree (its engines and itself, the decoy) and pid 1: a test running
    beside this one may carry a test secret on its command line (a URL with a password, as a user may type it),
    and the listing is an artefact the session's secret scan reads. The proc table variant still reads every
    process on the host."""
    mine = {str(pid) for pid in descendants(os.getpid())} | {"1"}
    header, *rows = listing.splitlines()
    return "\n".join([header, *(row for row in rows if row.split()[0] in mine)]) + "\n"


@pytest.mark.parametrize("table", ["proc", "ps"])
def test_engines_sharing_a_gpu_are_told_apart_by_their_ports_and_planned_from_what_they_hold(box, table: str):
    work, handmade, ports, servers = box
    held = write_smi(work, servers)
    listing = work / "ps.txt"
    listing.write_text(own_processes(subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True, check=True, timeout=60).stdout))
    tie = ["--processes-from-host"] if table == "proc" else ["--processes", f"box={listing}"]
    fleet, observed = work / f"fleet-{table}.yaml", work / f"observed-{table}.json"
    adopted = seatplan("adopt", "--env-dir", f"box={handmade}", *[f"--engine=http://127.0.0.1:{port}" for port in ports.values()],
                       "--nvidia-smi", f"box={work / 'gpus.csv'}", "--compute-apps", str(work / "apps.csv"), *tie,
                       "-o", str(fleet), "--observed", str(observed), "--json")
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    document = json.loads(observed.read_text())
    pids = {str(pid) for server in servers.values() for pid in descendants(server.process.pid)}
    shown = "\n".join(line for line in listing.read_text().splitlines() if line.split()[0] in pids or line.split()[1] in pids)
    assert sorted(document["seats"]) == sorted(SEATS), adopted.stdout + "\n" + shown + "\n" + (work / "apps.csv").read_text()
    for seat, (_, kv) in SEATS.items():
        seen = document["seats"][seat]
        assert seen["footprint_bytes"] == held[seat] * MiB, (seat, seen, held)
        assert seen["kv_cache_memory_bytes"] == kv  # from the engine's own /metrics
        said = f"listens on port {ports[seat]}" if table == "proc" else f"command line serves port {ports[seat]}"
        assert said in seen["source"], seen["source"]
    # the decoy's memory is nobody's: GPU 0 reserves it
    assert [correction["index"] for correction in document["gpu_corrections"]] in ([0], [])
    data = yaml.safe_load(fleet.read_text())
    assert data["policy"]["vllm_version"] == "0.32.0" and data["current_layout"] == {"dense": 0, "gemma": 0}
    plan_path = work / f"plan-{table}.json"
    planned = seatplan("plan", str(fleet), "--observed", str(observed), "--max-moves", "0", "-o", str(plan_path))
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "from observed footprints (2 observed of 2 vLLM seat(s))" in " ".join(planned.stdout.split())
    plan = json.loads(plan_path.read_text())
    assert plan["moves"] == 0
    for seat in plan["seats"]:
        seen = document["seats"][seat["name"]]
        assert seat["observation"]["use"] == "observed" and seat["footprint_basis"] == "observed"
        assert seat["footprint_bytes"] == max(0, seen["footprint_bytes"] - seen["kv_cache_memory_bytes"]) + seat["kv_cache_memory_bytes"]
