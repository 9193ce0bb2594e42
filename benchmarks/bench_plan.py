"""How long planning takes, end to end: fleet file → sizing → placement → plan document.

Measures (median of several runs):
  * the demo fleet in-process (load, size 8 seats, place, assemble);
  * a host-scale fleet (one host, 4 GPUs, 12 seats of the fixture models) in-process;
  * ``seatplan plan examples/demo/fleet.yaml --json`` as a fresh process (what a user waits for).

Run: .venv/bin/python benchmarks/bench_plan.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from seatplan.documents.fleet_file import load_fleet
from seatplan.plan.planner import build_plan

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo" / "fleet.yaml"
MODELS = REPO / "tests" / "fixtures" / "models"

HOST_SCALE_SEATS = [
    ("qwen3-0.6b", "Qwen--Qwen3-0.6B", "published"),
    ("qwen3-4b", "Qwen--Qwen3-4B", "published"),
    ("qwen3-8b", "Qwen--Qwen3-8B", "published"),
    ("qwen3-14b", "Qwen--Qwen3-14B", "published"),
    ("llama-3.2-3b", "meta-llama--Llama-3.2-3B-Instruct", 32768),
    ("llama-3.1-8b", "meta-llama--Llama-3.1-8B-Instruct", 65536),
    ("gpt-oss-20b", "openai--gpt-oss-20b", "published"),
    ("mistral-7b", "mistralai--Mistral-7B-v0.1", "published"),
    ("glm-4-9b", "THUDM--glm-4-9b", "published"),
    ("qwen2.5-7b", "Qwen--Qwen2.5-7B-Instruct", "published"),
    ("phi-3.5-mini", "microsoft--Phi-3.5-mini-instruct", 16384),
    ("qwen3-30b-a3b-fp8", "Qwen--Qwen3-30B-A3B-FP8", "published"),
]


def host_scale_fleet(directory: Path) -> Path:
    lines = ["hosts:", "  - name: box", "    gpus:"]
    lines += [f"      - {{index: {index}, total_bytes: 95.59GiB}}" for index in range(4)]
    lines += ["policy: {headroom_bytes: 1GiB}", "seats:"]
    for port, (name, model, length) in enumerate(HOST_SCALE_SEATS, start=8001):
        lines.append(f"  - {{name: {name}, model: {MODELS / model}, port: {port}, max_model_len: {length}}}")
    path = directory / "host-scale.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def time_in_process(fleet: Path, runs: int) -> tuple[float, dict]:
    seconds, plan = [], None
    for _ in range(runs):
        started = time.perf_counter()
        plan = build_plan(load_fleet(fleet))
        seconds.append(time.perf_counter() - started)
    assert plan is not None
    return statistics.median(seconds), {
        "seats": len(plan.seats),
        "gpus": len(plan.gpus),
        "fits": plan.infeasible is None,
        "optimal": plan.optimal,
        "method": plan.method,
        "placement_s": plan.solve_seconds,
        "worst_case_spare_gib": None if plan.worst_case_spare_bytes is None else round(plan.worst_case_spare_bytes / 2**30, 2),
    }


def time_cli(fleet: Path, runs: int) -> tuple[float | None, str]:
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "seatplan.cli", "plan", str(fleet), "--json"], capture_output=True, text=True, cwd=REPO)
        seconds.append(time.perf_counter() - started)
        if done.returncode != 0:
            return None, (done.stderr.strip().splitlines() or ["no output"])[-1]
        json.loads(done.stdout)
    return statistics.median(seconds), "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    rows = []
    demo_s, demo = time_in_process(DEMO, runs)
    rows.append(("demo fleet (4 GPUs, 8 seats), in-process", demo_s, demo))
    with tempfile.TemporaryDirectory() as scratch:
        host_s, host = time_in_process(host_scale_fleet(Path(scratch)), runs)
    rows.append(("host scale (4 GPUs, 12 seats), in-process", host_s, host))
    cli_s, cli_status = time_cli(DEMO, max(1, runs // 2))
    for label, median_s, facts in rows:
        print(f"{label}: median {median_s:.3f} s; " + ", ".join(f"{key}={value}" for key, value in facts.items()))
    print("seatplan plan examples/demo/fleet.yaml --json (fresh process): " + (f"median {cli_s:.3f} s" if cli_s is not None else f"failed: {cli_status}"))
    print()
    print("| case | median wall time | fits | proven optimal | placement time | worst-case spare |")
    print("|---|---|---|---|---|---|")
    for label, median_s, facts in rows:
        print(f"| {label} | {median_s:.3f} s | {facts['fits']} | {facts['optimal']} | {facts['placement_s']:.3f} s ({facts['method']}) | {facts['worst_case_spare_gib']} GiB |")
    cli_cell = f"{cli_s:.3f} s" if cli_s is not None else f"failed: {cli_status}"
    print(f"| `seatplan plan` demo, fresh process | {cli_cell} | | | | |")


if __name__ == "__main__":
    main()
