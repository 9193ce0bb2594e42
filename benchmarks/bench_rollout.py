"""How long ordering a rollout takes (``plan.rollout.order_rollout``), on hosts whose seats are reshuffled.

Each case draws a box of GPUS GPUs (80 GiB each) holding SEATS seats of 25-60 % of a GPU, in two random layouts
that both fit to the byte (what runs, and the plan), and orders the steps from one to the other. Printed per
shape: the median and worst time, how many needed a seat down, and how many ran out of the search budget
(``proven`` false).

Run: .venv/bin/python benchmarks/bench_rollout.py [--cases N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from seatplan.plan.rollout import Change, Engine, Gpu, RolloutProblem, Unchanged, order_rollout

GiB = 1 << 30
SHAPES = [(4, 8), (8, 12), (8, 16), (8, 20), (16, 32)]


def layout(rng: random.Random, labels: list[str], footprints: list[int], capacity: int) -> list[str] | None:
    free = dict.fromkeys(labels, capacity)
    out = []
    for footprint in footprints:
        options = [label for label in labels if free[label] >= footprint]
        if not options:
            return None
        chosen = rng.choice(options)
        free[chosen] -= footprint
        out.append(chosen)
    return out


def reshuffled(rng: random.Random, gpus: int, seats: int) -> RolloutProblem:
    labels = [f"box:{index}" for index in range(gpus)]
    while True:
        footprints = [int(rng.uniform(0.25, 0.6) * 80 * GiB) for _ in range(seats)]
        now, planned = layout(rng, labels, footprints, 80 * GiB), layout(rng, labels, footprints, 80 * GiB)
        if now and planned:
            break
    changes, unchanged = [], []
    for number, (footprint, old, new) in enumerate(zip(footprints, now, planned, strict=True)):
        if old == new:
            unchanged.append(Unchanged(f"s{number}", (old,), footprint))
        else:
            util = round((footprint - GiB // 2) / (80 * GiB), 3) + 0.001
            changes.append(Change(f"s{number}", (old,), footprint, (new,), Engine(footprint, GiB // 2, util)))
    return RolloutProblem({label: Gpu(label, 80 * GiB, 0) for label in labels}, unchanged, changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"{'GPUs':>5} {'seats':>5} {'median s':>9} {'worst s':>8} {'with down':>9} {'unproven':>8}")
    for gpus, seats in SHAPES:
        times, downs, unproven = [], 0, 0
        for _ in range(args.cases):
            problem = reshuffled(rng, gpus, seats)
            started = time.perf_counter()
            rollout = order_rollout(problem)
            times.append(time.perf_counter() - started)
            downs += bool(rollout.down)
            unproven += not rollout.proven
        print(f"{gpus:>5} {seats:>5} {statistics.median(times):>9.3f} {max(times):>8.3f} {downs:>9} {unproven:>8}")


if __name__ == "__main__":
    main()
