"""A seat's GPUs are decided once (``documents.fleet_file.allowed_gpus`` / ``eligible_gpus``): the GPUs the
placement's static filters (keep-clear, pin/avoid) pass for a seat are the GPUs its engine settings are built
for (``engine.settings.usable_gpus``: the smallest of them sets vLLM's batch defaults), on fleets drawn at random.
Before, the plan (``plan/size_seat.py``) and the engine settings each resolved pin/avoid/keep-clear their own way."""

from __future__ import annotations

import random

from seatplan.documents.fleet import Fleet
from seatplan.documents.fleet_file import allowed_gpus, eligible_gpus
from seatplan.engine.settings import usable_gpus
from seatplan.plan.placement.problem import GpuSlot, SeatDemand, compile_problem, gpu_label
from seatplan.plan.placement.rejections import gpu_rejections

GiB = 1 << 30


def drawn_fleet(rng: random.Random) -> Fleet:
    hosts = [{"name": f"h{host}", "gpus": [{"index": index, "total_bytes": rng.choice([24, 48, 80, 141]) * GiB,
                                              "keep_clear": rng.random() < 0.25} for index in range(rng.randint(1, 4))]}
             for host in range(rng.randint(1, 3))]
    keys = [(host["name"], gpu["index"]) for host in hosts for gpu in host["gpus"]]
    open_keys = [key for key, gpu in zip(keys, [gpu for host in hosts for gpu in host["gpus"]]) if not gpu["keep_clear"]]
    seats = []
    for number in range(rng.randint(1, 4)):
        seat: dict[str, object] = {"name": f"s{number}", "engine": "fixed", "memory_cap_bytes": GiB}
        way = rng.choice(["none", "pin", "avoid"])
        if way == "pin" and open_keys:  # the loader refuses a pin to a keep-clear GPU
            seat["pin"] = [f"{host}:{index}" for host, index in rng.sample(open_keys, rng.randint(1, len(open_keys)))]
        elif way == "avoid":
            seat["avoid"] = [f"{host}:{index}" for host, index in rng.sample(keys, rng.randint(1, len(keys)))]
        seats.append(seat)
    return Fleet.model_validate({"hosts": hosts, "seats": seats})


def test_placement_and_the_engine_settings_see_one_set_of_gpus(rng: random.Random) -> None:
    for _ in range(200):
        fleet = drawn_fleet(rng)
        slots = [GpuSlot(host=host.name, index=gpu.index, capacity_bytes=gpu.total_bytes, headroom_bytes=0, keep_clear=gpu.keep_clear)
                 for host in fleet.hosts for gpu in host.gpus]
        demands = [SeatDemand(name=seat.name, footprint_bytes=1, gpu_count=1, allowed=allowed_gpus(fleet, seat)) for seat in fleet.seats]
        problem = compile_problem(slots, demands)
        for seat in fleet.seats:
            position = problem.seat_names.index(seat.name)
            static = {item.gpu for item in gpu_rejections(problem, position, [0] * len(problem.gpu_keys))
                      if item.filter in ("keep_clear", "pin_or_avoid")}
            passing = [key for key in problem.gpu_keys if gpu_label(key) not in static]
            eligible = eligible_gpus(fleet, seat)
            assert sorted(passing) == sorted(eligible), seat
            if eligible:
                assert usable_gpus(fleet, seat) == eligible
