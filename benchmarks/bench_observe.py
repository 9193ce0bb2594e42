"""How fast ``seatplan diagnose`` analyses GPU memory history.

Target (issue 20): a year of 1-minute samples for 64 GPUs (64 × 525,600 ≈ 33.6 M points) analysed in under 10 s
(issue 5's was 8 GPUs in 5 s). Both the wall clock and the process's CPU time are printed: on a shared machine
the wall clock also counts the time other processes held the cores.

Generates, per GPU, a year at 1-minute resolution with a restart every ~3 weeks, a creep after some
boots, σ = 20 MiB noise, random gaps (agent restarts) and single-sample spikes, then times
``detect.analyse`` over all series (steps, segments, creep, plateaus). Also timed: reading the
same shapes from an nvidia-smi CSV (one month, 8 GPUs) to show the reader's throughput, and the
number of steps found against the number of restarts made (a sanity check, not a test).

    .venv/bin/python benchmarks/bench_observe.py [--gpus 64] [--days 365] [--csv-days 30] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from kits.series import DAY, HOUR, MINUTE, Boot, Scenario, write_nvidia_smi  # noqa: E402
from seatplan.observe.detect import GpuSeries, analyse  # noqa: E402
from seatplan.observe.sources.nvidia_smi import read_nvidia_smi  # noqa: E402


def year_scenario(index: int, days: float) -> tuple[Scenario, int]:
    rng = np.random.default_rng(index)
    boots, at = [], 0
    while at < days * DAY:
        level = float(rng.uniform(20_000, 90_000))
        creep = float(rng.uniform(1_000, 6_000)) if rng.random() < 0.4 else 0.0
        boots.append(Boot(at, level, creep_mib=creep, creep_hours=float(rng.uniform(12, 48)) if creep else 0.0))
        at += int(rng.uniform(14, 28) * DAY) // MINUTE * MINUTE
    gaps = [(int(rng.uniform(0, days * DAY)), int(rng.uniform(2 * MINUTE, 6 * HOUR))) for _ in range(40)]
    # A restart back to within min_step of the old plateau is, rightly, no step.
    visible = sum(abs(new.level_mib - (old.level_mib + old.creep_mib)) >= 256 for old, new in zip(boots, boots[1:]))
    return Scenario(boots=boots, days=days, noise_mib=20, gaps=gaps, seed=index), visible


def generate(gpus: int, days: float) -> tuple[list[GpuSeries], int]:
    series, restarts = [], 0
    for index in range(gpus):
        scenario, made = year_scenario(index, days)
        times, used = scenario.generate()
        used[:: 4_999] += 5_000  # a wild single reading now and then
        series.append(GpuSeries(index=index, times_s=times, used_mib=used, total_mib=97_871.0))
        restarts += made
    return series, restarts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--days", type=float, default=365)
    parser.add_argument("--csv-days", type=float, default=30)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    series, restarts = generate(args.gpus, args.days)
    points = sum(len(s.times_s) for s in series)
    timings, cpu_timings, found = [], [], 0
    for _ in range(args.runs):
        started, cpu_started = time.perf_counter(), time.process_time()
        analyses = [analyse(one) for one in series]
        timings.append(time.perf_counter() - started)
        cpu_timings.append(time.process_time() - cpu_started)
        found = sum(len(a.steps) for a in analyses)
    analysis_s, cpu_s = statistics.median(timings), statistics.median(cpu_timings)

    csv_series, _ = generate(args.gpus, args.csv_days)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "smi.csv"
        write_nvidia_smi(path, {s.index: (s.times_s, s.used_mib) for s in csv_series})
        rows = sum(len(s.times_s) for s in csv_series)
        started = time.perf_counter()
        read_nvidia_smi(path)
        read_s = time.perf_counter() - started

    print(f"points analysed: {points:,} ({args.gpus} GPUs × {args.days:g} days at 1 min, gaps removed)")
    print(f"analysis: median {analysis_s:.2f} s wall, {cpu_s:.2f} s CPU over {args.runs} runs ({', '.join(f'{t:.2f}' for t in timings)}); target < 10 s")
    print(f"steps found: {found} for {restarts} restarts that changed the level by ≥ 256 MiB")
    print(f"nvidia-smi CSV read: {rows:,} rows in {read_s:.2f} s ({rows / read_s:,.0f} rows/s)")
    print()
    print("| what | figure | target |")
    print("|---|---|---|")
    print(f"| analyse {args.gpus} GPUs × {args.days:g} days @ 1 min ({points / 1e6:.2f} M points) | {analysis_s:.2f} s wall, {cpu_s:.2f} s CPU | < 10 s |")
    print(f"| steps found / level-changing restarts made | {found} / {restarts} | equal |")
    print(f"| read nvidia-smi CSV ({rows:,} rows) | {read_s:.2f} s ({rows / read_s / 1e3:,.0f} k rows/s) | – |")


if __name__ == "__main__":
    main()
