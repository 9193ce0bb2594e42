"""`seatplan plan` end to end at cluster scale (issue 49 item 4): a fleet file of 32 hosts x 8 GPUs and about 750
vLLM seats of the demo's real model configs (TP 1 and 2, pins, avoids, one keep-clear GPU per host), planned by the
command a user runs, with its defaults; the wall time covers reading the fleet, sizing every seat from its
config.json, placement and the rollout.

Each fleet is drawn from its seed, then its KV pins are moved up or down together until the plan's footprints fill
the open GPUs to the shape's fill (one plan run, untimed); the timed run plans that fleet. Reported: the plan's worst
spare as a share of its bound (plan.json's ``bound_bytes``), the wall time, and the fill reached.

Run: ``.venv/bin/python benchmarks/bench_cluster_plan.py [--seeds 1-3] [--fills 0.90,0.95]``
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "examples" / "demo" / "models"
GiB = 1 << 30
HOSTS, GPUS_PER_HOST, SEATS = 32, 8, 750
CARD_BYTES = int(79.19 * GiB)  # what CUDA reports on an 80 GB H100
KV_STEP_BYTES = GiB // 2
HEADROOM_BYTES = GiB
OPEN_BYTES = HOSTS * (GPUS_PER_HOST - 1) * (CARD_BYTES - HEADROOM_BYTES)  # what the seats may fill: the open GPUs less headroom
MIN_KV_STEPS = 3  # 1.5 GiB: one 8,192-token request of every model in MODEL_MIX
# (model folder, tensor-parallel size, share of the seats)
MODEL_MIX = [
    ("meta-llama--Llama-3.2-3B-Instruct", 1, 0.2), ("Qwen--Qwen3-4B-Instruct-2507", 1, 0.2), ("Qwen--Qwen3-8B", 1, 0.2),
    ("meta-llama--Llama-3.1-8B-Instruct", 1, 0.15), ("mistralai--Mistral-7B-v0.1", 1, 0.1), ("openai--gpt-oss-20b", 1, 0.1),
    ("Qwen--Qwen3-14B", 2, 0.05),
]


def drawn_fleet(seed: int) -> dict:
    """The fleet file's document: seats drawn from MODEL_MIX with random KV pins, pins and avoids."""
    rng = random.Random(seed)
    hosts = [{"name": f"node{h}", "gpus": [{"index": i, "name": "H100 80GB HBM3", "total_bytes": CARD_BYTES, **({"keep_clear": True} if i == GPUS_PER_HOST - 1 else {})}
                                           for i in range(GPUS_PER_HOST)]} for h in range(HOSTS)]
    seats = []
    for number in range(SEATS):
        folder, tp, _ = rng.choices(MODEL_MIX, weights=[share for *_, share in MODEL_MIX])[0]
        seat = {"name": f"s{number}", "model": str(MODELS / folder), "port": 8000 + number, "max_model_len": rng.choice([4096, 8192]),
                "kv_cache_memory_bytes": rng.randint(MIN_KV_STEPS, 12) * KV_STEP_BYTES}
        if tp > 1:
            seat["tensor_parallel_size"] = tp
        elif rng.random() < 0.02:
            seat["pin"] = f"node{rng.randrange(HOSTS)}:{rng.randrange(GPUS_PER_HOST - 1)}"
        elif rng.random() < 0.05:
            seat["avoid"] = [f"node{rng.randrange(HOSTS)}:{rng.randrange(GPUS_PER_HOST - 1)}"]
        seats.append(seat)
    return {"hosts": hosts, "policy": {"vllm_version": "0.32", "headroom_bytes": HEADROOM_BYTES}, "seats": seats}


def plan(fleet: dict, work: Path) -> tuple[float, dict | None, str]:
    """(wall seconds, plan.json or None, stderr's tail) of `seatplan plan FLEET -o PLAN`."""
    fleet_file, plan_file = work / "fleet.yaml", work / "plan.json"
    fleet_file.write_text(yaml.safe_dump(fleet, sort_keys=False))
    plan_file.unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "seatplan", "plan", str(fleet_file), "-o", str(plan_file)], capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    return wall_s, json.loads(plan_file.read_text()) if done.returncode == 0 and plan_file.exists() else None, done.stderr[-400:]


def fill_of(planned: dict) -> float:
    return sum(seat["footprint_bytes"] * seat.get("tensor_parallel_size", 1) for seat in planned["seats"]) / OPEN_BYTES


def filled(fleet: dict, planned: dict, fill: float) -> dict:
    """The fleet with every KV pin moved by the same step count, so the footprints come near ``fill``."""
    ranks = sum(seat.get("tensor_parallel_size", 1) for seat in fleet["seats"])
    steps = round((fill - fill_of(planned)) * OPEN_BYTES / ranks / KV_STEP_BYTES)
    for seat in fleet["seats"]:
        seat["kv_cache_memory_bytes"] = max(MIN_KV_STEPS * KV_STEP_BYTES, seat["kv_cache_memory_bytes"] + steps * KV_STEP_BYTES)  # per rank, as vLLM reads it
    return fleet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-3", help="A-B (default: %(default)s)")
    parser.add_argument("--fills", default="0.90,0.95", help="the footprints' share of the open GPUs (default: %(default)s)")
    args = parser.parse_args(argv)
    first, last = (int(part) for part in args.seeds.split("-"))
    print("| seed | fill asked | fill reached | seats | share of bound | wall s | method |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for seed in range(first, last + 1):
            for fill in (float(part) for part in args.fills.split(",")):
                fleet = drawn_fleet(seed)
                _, sized, said = plan(fleet, work)
                if sized is None:
                    print(f"| {seed} | {fill:.2f} | the sizing plan failed: {said!r} | | | | |")
                    continue
                wall_s, planned, said = plan(filled(fleet, sized, fill), work)
                if planned is None:
                    print(f"| {seed} | {fill:.2f} | plan failed: {said!r} | | | {wall_s:.1f} | |")
                    continue
                bound = planned.get("bound_bytes")
                share = f"{100 * planned['worst_case_spare_bytes'] / bound:.2f} %" if bound else "no bound"
                print(f"| {seed} | {fill:.2f} | {fill_of(planned):.3f} | {len(planned['seats'])} | {share} | {wall_s:.1f} | {planned['method']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
