"""Placement speed and quality: host scale (proven optimal), fleet scale (gap to the proven bound), greedy baselines.

Run: ``.venv/bin/python benchmarks/bench_placement.py [--quick]``. Fixed seeds; prints one line per
fleet and a markdown table. Targets (issue 3): host scale (4 GPUs, 12 seats) proven optimal in under
1 s; fleet scale (64 GPUs over 8 hosts, 200 seats, some TP=2/4) within 1% of the proven bound in
under 30 s. The ratio columns divide seatplan's worst-case spare by each greedy baseline's
("stranded" when the baseline could not place every seat).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from seatplan.plan.baselines import best_fit, most_free_first
from seatplan.plan.placement import GpuSlot, Placement, SeatDemand, place
from seatplan.units import GiB, MiB

# A 96 GB card as CUDA reports it, less what the driver and a desktop keep.
CARD_BYTES = int(95.59 * GiB)
RESERVED_BYTES = 600 * MiB
HEADROOM_BYTES = GiB // 2
KV_STEP_BYTES = GiB // 2
FLEET_TIME_LIMIT_S = 20.0  # place()'s budget, runner-ups included; model building adds a few seconds


def realistic_footprint(rng: random.Random, weights_gib: tuple[float, float], kv_steps: int = 40) -> int:
    """Weights in exact bytes, KV pinned in 0.5 GiB steps, runtime overhead (context, graphs, activations) in MiB."""
    weights = int(rng.uniform(*weights_gib) * GiB) + rng.randrange(0, 1 << 20)
    kv = rng.randint(4, kv_steps) * KV_STEP_BYTES
    overhead = rng.randint(1800, 5200) * MiB
    return weights + kv + overhead


def gpus(hosts: int, per_host: int) -> list[GpuSlot]:
    return [
        GpuSlot(host=f"node{h}", index=i, capacity_bytes=CARD_BYTES - RESERVED_BYTES, headroom_bytes=HEADROOM_BYTES)
        for h in range(hosts)
        for i in range(per_host)
    ]


def host_fleet(seed: int) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """4 GPUs, 12 seats filling about 80% of the memory; half run somewhere now."""
    rng = random.Random(seed)
    slots = gpus(1, 4)
    seats = []
    for n in range(12):
        current = [("node0", rng.randrange(4))] if n % 2 else []
        seats.append(SeatDemand(name=f"seat{n:02d}", footprint_bytes=realistic_footprint(rng, (1.0, 16.0)), current=current))
    return slots, seats


def fleet(seed: int) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """64 GPUs over 8 hosts, 200 seats: 12 TP=4, 24 TP=2, the rest single-GPU; about 85% full."""
    rng = random.Random(seed)
    slots = gpus(8, 8)
    seats = []
    for n in range(200):
        gpu_count = 4 if n < 12 else 2 if n < 36 else 1
        weights = (6.0, 24.0) if gpu_count > 1 else (0.5, 8.0)
        seats.append(SeatDemand(name=f"seat{n:03d}", footprint_bytes=realistic_footprint(rng, weights, kv_steps=27), gpu_count=gpu_count))
    return slots, seats


def fleet_running(seed: int) -> tuple[list[GpuSlot], list[SeatDemand]]:
    """The same fleet with every single-GPU seat running where most-free-first put it, so moves count."""
    slots, seats = fleet(seed)
    now = most_free_first(slots, seats)
    return slots, [
        seat.model_copy(update={"current": now.assignment[seat.name]}) if now is not None and seat.gpu_count == 1 else seat
        for seat in seats
    ]


def ratio(ours: Placement, theirs: Placement | None) -> str:
    if theirs is None:
        return "stranded"
    if theirs.worst_case_spare_bytes <= 0:
        return "∞"
    return f"{ours.worst_case_spare_bytes / theirs.worst_case_spare_bytes:.3f}"


def run(name: str, make, seeds: list[int], time_limit_s: float) -> list[dict]:
    rows = []
    for seed in seeds:
        slots, seats = make(seed)
        started = time.perf_counter()
        result = place(slots, seats, time_limit_s=time_limit_s)
        seconds = time.perf_counter() - started
        if result.best is None:
            print(f"{name} seed {seed}: no layout ({result.infeasible.summary if result.infeasible else 'time limit'})")
            continue
        worst = result.best.worst_case_spare_bytes
        bound = result.bound_bytes if result.bound_bytes is not None else worst
        gap_pct = 100.0 * (bound - worst) / bound if bound > 0 else 0.0
        best_only_s = None
        if name == "host":
            started = time.perf_counter()
            place(slots, seats, time_limit_s=time_limit_s, runner_ups=0)
            best_only_s = time.perf_counter() - started
        row = {
            "scale": name, "seed": seed, "gpus": len(slots), "seats": len(seats), "method": result.method,
            "seconds": seconds, "best_only_s": best_only_s, "optimal": result.optimal, "worst_gib": worst / GiB, "bound_gib": bound / GiB,
            "gap_pct": gap_pct, "vs_best_fit": ratio(result.best, best_fit(slots, seats)),
            "vs_most_free": ratio(result.best, most_free_first(slots, seats)), "moves": result.best.moves,
        }
        rows.append(row)
        print(
            f"{name} seed {seed}: {row['method']} {seconds:.3f} s optimal={row['optimal']} worst={row['worst_gib']:.3f} GiB "
            f"bound={row['bound_gib']:.3f} GiB gap={gap_pct:.3f}% ratio best-fit={row['vs_best_fit']} most-free={row['vs_most_free']}",
            flush=True,
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        ("| scale | seed | GPUs | seats | method | seconds (3 runner-ups) | seconds (best only) | proven optimal |"
            " worst spare GiB | bound GiB | gap % | moves | ÷ best-fit | ÷ most-free |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        best_only = "-" if r["best_only_s"] is None else f"{r['best_only_s']:.3f}"
        lines.append(
            f"| {r['scale']} | {r['seed']} | {r['gpus']} | {r['seats']} | {r['method']} | {r['seconds']:.3f} | {best_only} | "
            f"{'yes' if r['optimal'] else 'no'} | {r['worst_gib']:.3f} | {r['bound_gib']:.3f} | {r['gap_pct']:.3f} | {r['moves']} | "
            f"{r['vs_best_fit']} | {r['vs_most_free']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed per scale")
    args = parser.parse_args(argv)
    host_seeds = [1] if args.quick else [1, 2, 3, 4, 5, 6, 7, 8]
    fleet_seeds = [1] if args.quick else [1, 2, 3]
    rows = run("host", host_fleet, host_seeds, time_limit_s=30.0)
    rows += run("fleet", fleet, fleet_seeds, time_limit_s=FLEET_TIME_LIMIT_S)
    rows += run("fleet+current", fleet_running, fleet_seeds[:1], time_limit_s=FLEET_TIME_LIMIT_S)
    print()
    print(table(rows))
    host = [r for r in rows if r["scale"] == "host"]
    big = [r for r in rows if r["scale"].startswith("fleet")]
    print()
    if host:
        print(
            f"host scale: {sum(r['optimal'] for r in host)}/{len(host)} proven optimal, "
            f"median {statistics.median(r['seconds'] for r in host):.3f} s, max {max(r['seconds'] for r in host):.3f} s (target < 1 s)"
        )
    if big:
        print(
            f"fleet scale: max gap {max(r['gap_pct'] for r in big):.3f}% (target ≤ 1%), "
            f"max {max(r['seconds'] for r in big):.1f} s (target < 30 s)"
        )
    host_ok = all(r["optimal"] and r["seconds"] < 1.0 for r in host)
    fleet_ok = all(r["gap_pct"] <= 1.0 and r["seconds"] < 30.0 for r in big)
    return 0 if host_ok and fleet_ok else 1


if __name__ == "__main__":
    sys.exit(main())
