"""Which seat runs where, read from a plan and from a fleet file holding the same layout: one answer, the drawn one.

The generator draws hosts, GPUs, seats (tensor-parallel ones among them), served names that differ from the seat's
and places at random, writes the layout both ways (the fleet's ``current_layout`` or ``pin``, GPU references with or
without the host where there is one host), and holds both seat maps to what it drew.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from kits.documents import plan_document, planned_gpu, planned_seat
from seatplan.documents.fleet import Fleet
from seatplan.observe.calibrate import planned_gpu as plan_gpu_of
from seatplan.observe.seatmap import SeatMap
from seatplan.units import MiB


def draw(seed: int) -> tuple[Fleet, dict[str, list[tuple[str, int]]], dict[str, str], list[tuple[str, int]]]:
    """A fleet, each seat's GPUs, each seat's served name, and every GPU."""
    rng = np.random.default_rng(seed)
    hosts = {f"host-{number}": int(rng.integers(1, 9)) for number in range(int(rng.integers(1, 5)))}
    gpus = [(host, index) for host, count in hosts.items() for index in range(count)]
    placed: dict[str, list[tuple[str, int]]] = {}
    served: dict[str, str] = {}
    seats, layout = [], {}
    for number in range(int(rng.integers(1, 13))):
        name = f"seat-{number}"
        host = str(rng.choice(list(hosts)))
        width = int(rng.choice([size for size in (1, 2, 4) if size <= hosts[host]]))
        indices = sorted(int(i) for i in rng.choice(hosts[host], size=width, replace=False))
        placed[name] = [(host, index) for index in indices]
        served[name] = name if rng.random() < 0.3 else f"org/model-{number}"
        refs: list[int | str] = [index if len(hosts) == 1 and rng.random() < 0.5 else f"{host}:{index}" for index in indices]
        ref: int | str | list[int | str] = refs[0] if width == 1 and rng.random() < 0.5 else refs
        seat = {"name": name, "model": "org/model", "tensor_parallel_size": width}
        if served[name] != name or rng.random() < 0.5:
            seat["served_model_name"] = served[name]
        if rng.random() < 0.5:
            layout[name] = ref
        else:
            seat["pin"] = ref
        seats.append(seat)
    fleet = Fleet.model_validate({
        "hosts": [{"name": host, "gpus": [{"index": index, "total_bytes": "80GiB"} for index in range(count)]} for host, count in hosts.items()],
        "seats": seats, "current_layout": layout})
    return fleet, placed, served, gpus


def the_plan(placed: dict[str, list[tuple[str, int]]], served: dict[str, str], gpus: list[tuple[str, int]]):
    on_gpu: dict[tuple[str, int], list[str]] = defaultdict(list)
    for name, keys in placed.items():
        for key in keys:
            on_gpu[key].append(name)
    seats = [planned_seat(name, [f"{host}:{index}" for host, index in keys], 1_000 * MiB, served_model_name=served[name])
             for name, keys in placed.items()]
    return plan_document(seats, [planned_gpu(host, index, 1_000 * MiB * len(on_gpu[(host, index)]), 500 * MiB, on_gpu[(host, index)])
                                 for host, index in gpus])


@pytest.mark.parametrize("seed", range(60))
def test_plan_and_fleet_give_the_drawn_layout(seed):
    fleet, placed, served, gpus = draw(seed)
    from_fleet, from_plan = SeatMap.of_fleet(fleet), SeatMap.of_plan(the_plan(placed, served, gpus))
    assert from_fleet == from_plan
    one_host = len({host for host, _ in gpus}) == 1
    for host, index in gpus:
        here = [name for name, keys in placed.items() if (host, index) in keys]
        assert from_plan.seats_on(host, index) == here
        # A history without a host name is of this GPU only where there is one host: nothing matched by guess.
        assert from_plan.seats_on(None, index) == (here if one_host else [])
    for name, keys in placed.items():
        sharing = {other for other, theirs in placed.items() if other != name and set(theirs) & set(keys)}
        assert from_plan.neighbours(name) == sharing
        assert from_plan.seat_name(served[name]) == name and from_plan.seat_name(name) == name
    assert from_plan.seat_name("not-a-seat") == "not-a-seat"


@pytest.mark.parametrize("seed", range(20))
def test_the_plateau_check_finds_the_same_gpu_as_the_seat_map(seed):
    fleet, placed, served, gpus = draw(seed)
    plan = the_plan(placed, served, gpus)
    seat_map = SeatMap.of_plan(plan)
    rng = np.random.default_rng(seed)
    for _ in range(10):
        host = None if rng.random() < 0.3 else f"host-{int(rng.integers(0, 5))}"
        index = int(rng.integers(0, 9))
        found = plan_gpu_of(plan, host, index)
        if found is None:
            assert seat_map.seats_on(host, index) == []
        else:
            assert (found.index, list(found.seats)) == (index, seat_map.seats_on(host, index))
