"""The planned ``--gpu-memory-utilization`` against vLLM's own start-up check (issue 18).

vLLM's ``request_memory`` is imported from the test vLLM virtualenv (``vllm_request_memory.py`` runs there) and fed
snapshots built from plans of random fleets: the free memory each engine's snapshot sees at a cold boot in boot
order, at a rolling restart beside its neighbours at plateau, beside neighbours grown by the GPU's spare less the
margin, and one byte short of the request. It must pass in the first three and fail exactly when the snapshot
holds less than the request; the request covers what the engine allocates and exceeds it by at most 1 GiB.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from seatplan.documents.fleet_file import load_fleet
from seatplan.plan.planner import build_plan
from seatplan.plan.utilisation import requested_bytes

GiB = 1 << 30
MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
LLAMA_8B, PHI_35 = MODELS / "meta-llama--Llama-3.1-8B-Instruct", MODELS / "microsoft--Phi-3.5-mini-instruct"
SCRIPT = Path(__file__).with_name("vllm_request_memory.py")
BEFORE_SNAPSHOT = ("cuda_context", "nccl_allreduce")
NOT_ALLOCATED = (*BEFORE_SNAPSHOT, "creep_allowance")


def vllm_request_memory(vllm_python: Path, cases: list[dict]) -> list[int | str]:
    completed = subprocess.run([str(vllm_python), str(SCRIPT)], input=json.dumps(cases), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def random_fleet(rng: random.Random) -> str:
    gpus = rng.randint(1, 3)
    total_mib = rng.randint(24 * 1024, 190 * 1024) + rng.random()
    hosts = "hosts:\n  - name: box\n    gpus:\n" + "".join(f"      - {{index: {index}, total_bytes: {int(total_mib * 2**20)}}}\n" for index in range(gpus))
    margin = rng.choice(["0", "256MiB", "512MiB", "1GiB", "3GiB"])
    seats = []
    for number in range(rng.randint(1, 2 * gpus + 1)):
        model = rng.choice([LLAMA_8B, PHI_35])
        seats.append(f"  - {{name: s{number}, model: {model}, port: {8001 + number}, max_model_len: {rng.choice([2048, 4096, 8192, 16384, 32768])}}}")
    return hosts + f"policy: {{boot_margin_bytes: {margin}}}\nseats:\n" + "\n".join(seats) + "\n"


def test_vllm_accepts_every_planned_start_that_fits_and_refuses_exactly_those_that_do_not(tmp_path, vllm_python_path, rng):
    cases, expected = [], []
    for trial in range(8):
        fleet = tmp_path / f"fleet-{trial}.yaml"
        fleet.write_text(random_fleet(rng))
        plan = build_plan(load_fleet(fleet))
        if plan.worst_case_spare_bytes is None:
            continue
        gpus = {f"{gpu.host}:{gpu.index}": gpu for gpu in plan.gpus}
        for seat in plan.seats:
            gpu = gpus[seat.gpus[0]]
            util = seat.gpu_memory_utilization
            checked = seat.utilisation
            assert util is not None and checked is not None
            assert checked.cold_boot_headroom_bytes is not None and checked.rolling_restart_headroom_bytes is not None
            before = sum(part.bytes for part in seat.footprint_parts if part.name in BEFORE_SNAPSHOT)
            allocated = sum(part.bytes for part in seat.footprint_parts if part.name not in NOT_ALLOCATED)
            requested = requested_bytes(gpu.total_bytes, util)
            assert allocated <= requested <= allocated + GiB, seat.name
            capacity = gpu.total_bytes - gpu.reserved_bytes
            neighbours = sum(other.footprint_bytes for other in plan.seats if other.name != seat.name and seat.gpus[0] in other.gpus)
            booted_before = sum(other.footprint_bytes for other in plan.seats
                                if other.boot_order < seat.boot_order and seat.gpus[0] in other.gpus)
            at_restart = capacity - neighbours - before
            margin = requested - allocated
            snapshots = {
                "cold boot": capacity - booted_before - before,
                "rolling restart": at_restart,
                "neighbours grown by the spare less the margin": at_restart - (gpu.spare_bytes - margin),
                "exactly the request": requested,
                "one byte short": requested - 1,
                "short of what it allocates": allocated - 1 - rng.randrange(GiB),
            }
            assert snapshots["cold boot"] - requested == checked.cold_boot_headroom_bytes
            assert snapshots["rolling restart"] - requested == checked.rolling_restart_headroom_bytes
            # a seat whose planned start would be refused is a named plan problem
            refused = min(checked.cold_boot_headroom_bytes, checked.rolling_restart_headroom_bytes) < 0
            assert refused == any(warning.startswith(f"{seat.name}: plan problem") for warning in plan.warnings)
            if refused:
                del snapshots["cold boot"], snapshots["rolling restart"]
            for situation, free in snapshots.items():
                cases.append({"free_bytes": free, "total_bytes": gpu.total_bytes, "util": util})
                expected.append((seat.name, situation, free >= requested, requested))
    assert cases
    for (name, situation, starts, requested), answer in zip(expected, vllm_request_memory(vllm_python_path, cases), strict=True):
        if starts:
            assert answer == requested, f"{name}: vLLM refused the start at {situation}: {answer}"
        else:
            assert isinstance(answer, str) and "is less than desired GPU memory utilization" in answer, f"{name}: {situation}: {answer}"
    # the three situations the plan promises all start; the two short ones never do
    by_situation = {(name, situation): starts for name, situation, starts, _ in expected}
    short = ("one byte short", "short of what it allocates")
    assert all(starts == (situation not in short) for (_, situation), starts in by_situation.items())
