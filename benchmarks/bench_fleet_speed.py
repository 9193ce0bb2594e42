"""Fleet plans in seconds (issue 33): `place` with the defaults `seatplan plan` uses, on bench_placement.py's
generated fleets, reporting the share of the LP bound, the wall time, and the local-search round (of all the
rounds the plan ran, runner-ups included) that first reached bench_placement.FAST_SHARE of the bound.

Run: ``.venv/bin/python benchmarks/bench_fleet_speed.py [--fleets 4:1,4:2,5:3 | --seeds 11-20 | --cluster 1-5] [--time-limit S]``
(``SHAPE:SEED``, SHAPE a position in bench_placement.ALL_SHAPES; by default the 64-GPU shapes 4 and 5, seeds 1-10,
and shape 6 seeds 1-2; ``--seeds A-B``: shapes 4 and 5 with those seeds, e.g. the held-out 11-20; ``--cluster A-B``:
the cluster shapes (issue 49: 32 hosts x 8 GPUs, 720-780 seats, bench_placement.CLUSTER_SHAPES, positions 7 on) with
those seeds, judged against bench_placement.CLUSTER_SHARE). The round is counted, not timed, so it does not depend on
how busy the machine is.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

from seatplan.plan.placement import local, place
from seatplan.plan.placement.bounds import lp_bound
from seatplan.plan.placement.problem import compile_problem

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_placement  # noqa: E402 (the generated fleets live beside this script)

TARGET_SHARE, FAST_WALL_S = bench_placement.FAST_SHARE, bench_placement.FAST_WALL_S  # issue 33's targets, one home
DEFAULT_FLEETS = [f"{shape}:{seed}" for shape in (4, 5) for seed in range(1, 11)] + ["6:1", "6:2"]


class RoundCounter:
    """Counts the local search's descents (one per round) and notes the first whose layout reaches a share."""

    def __init__(self, bound_bytes: int) -> None:
        self.bound_bytes, self.rounds, self.reached = bound_bytes, 0, None
        self.started = time.perf_counter()

    def seen(self, spare_bytes: int) -> None:
        self.rounds += 1
        if self.reached is None and spare_bytes >= TARGET_SHARE * self.bound_bytes:
            self.reached = (self.rounds, time.perf_counter() - self.started)


def run(shape_index: int, seed: int, time_limit_s: float) -> dict:
    slots, seats = bench_placement.generated_fleet(bench_placement.ALL_SHAPES[shape_index], seed)
    bound_bytes = lp_bound(compile_problem(slots, seats), time_limit_s=5)
    counter = RoundCounter(bound_bytes)
    descend = local._State.descend

    def counted(state: local._State, deadline: float) -> None:
        descend(state, deadline)
        counter.seen(-state.cost()[0])

    local._State.descend = counted
    try:
        started, cpu = time.perf_counter(), time.process_time()
        result = place(slots, seats, time_limit_s=time_limit_s)
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu
    finally:
        local._State.descend = descend
    share = None if result.best is None else result.best.worst_case_spare_bytes / bound_bytes
    # The plan's own bound (the LP's, or CP-SAT's where it proved a lower one): what `seatplan plan` prints.
    own = None if result.best is None or not result.bound_bytes else result.best.worst_case_spare_bytes / result.bound_bytes
    return {"fleet": f"{shape_index}:{seed}", "share": share, "own": own, "wall_s": wall_s, "cpu_s": cpu_s, "rounds": counter.rounds,
            "reached": counter.reached, "cluster": shape_index >= len(bench_placement.SHAPES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", default=",".join(DEFAULT_FLEETS), help="SHAPE:SEED,... (default: %(default)s)")
    parser.add_argument("--seeds", help="A-B: shapes 4 and 5 with seeds A to B, instead of --fleets")
    parser.add_argument("--cluster", help="A-B: the cluster shapes (32x8 GPUs, 720-780 seats) with seeds A to B, instead of --fleets")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per plan, as seatplan plan's default")
    args = parser.parse_args(argv)
    print(f"{platform.node()}: Python {platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"| fleet | share of the LP bound | of the plan's bound | wall s | CPU s | rounds | round (and s) first at {100 * TARGET_SHARE:.1f} % |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    fleets = args.fleets.split(",")
    if args.seeds:
        first, last = (int(part) for part in args.seeds.split("-"))
        fleets = [f"{shape}:{seed}" for shape in (4, 5) for seed in range(first, last + 1)]
    if args.cluster:
        first, last = (int(part) for part in args.cluster.split("-"))
        cluster = range(len(bench_placement.SHAPES), len(bench_placement.ALL_SHAPES))
        fleets = [f"{shape}:{seed}" for shape in cluster for seed in range(first, last + 1)]
    for spec in fleets:
        shape_index, seed = (int(part) for part in spec.split(":"))
        row = run(shape_index, seed, args.time_limit)
        rows.append(row)
        share = "no layout fits" if row["share"] is None else f"{100 * row['share']:.2f} %"
        own = "" if row["own"] is None else f"{100 * row['own']:.2f} %"
        reached = "never" if row["reached"] is None else f"{row['reached'][0]} ({row['reached'][1]:.1f} s)"
        print(f"| {row['fleet']} | {share} | {own} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {row['rounds']} | {reached} |", flush=True)
    for label, target, kind in (("64-GPU and smaller", TARGET_SHARE, False), ("cluster-sized", bench_placement.CLUSTER_SHARE, True)):
        placed = [row for row in rows if row["share"] is not None and row["cluster"] == kind]
        if not placed:
            continue
        fast = sum(row["share"] >= target and row["wall_s"] < FAST_WALL_S for row in placed)
        print(f"\n{label}: {fast}/{len(placed)} placed fleets reach {100 * target:.1f} % of the LP bound in under {FAST_WALL_S:g} s wall; "
              f"{sum(row['share'] >= target for row in placed)}/{len(placed)} reach it at all; wall "
              f"{min(row['wall_s'] for row in placed):.1f}-{max(row['wall_s'] for row in placed):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
