"""The usage entry of a seat, decided once (``documents.usage.usage_of_seat``) for plan and report.

The plan tried the served name first and the report the usage stage's seat mapping first: for two seats that swapped
their served names since ``seatplan usage --fleet`` ran, the plan sized a seat from one name's traffic and the report
drew it with the other's. The served name is right (the gateway routes by it, so that traffic is what the seat
carries); tests/plan/test_planner.py holds the plan to it on such a swap.
"""

from __future__ import annotations

import random

from kits.documents import model_usage, usage_report
from seatplan.documents.usage import ModelUsage, UsageReport, usage_of_seat


def test_a_served_name_wins_over_the_seat_the_usage_stage_mapped() -> None:
    # `usage --fleet` ran when seat a served "m1" and seat b "m2"; the fleet now swaps them.
    usage = usage_report({"m1": model_usage(seat="a", calls=1), "m2": model_usage(seat="b", calls=2)})
    assert usage_of_seat(usage, "a", "m2") is usage.models["m2"]
    assert usage_of_seat(usage, "b", "m1") is usage.models["m1"]


def test_the_seat_mapping_takes_a_seat_whose_served_name_changed_and_a_seats_own_name_is_not_a_key() -> None:
    usage = usage_report({"old-name": model_usage(seat="a", calls=1), "a": model_usage(seat=None, calls=2)})
    assert usage_of_seat(usage, "a", "new-name") is usage.models["old-name"]
    assert usage_of_seat(usage_report({"a": model_usage(calls=2)}), "a", "new-name") is None
    assert usage_of_seat(None, "a", "a") is None


def drawn_usage(rng: random.Random, names: list[str], seats: list[str]) -> UsageReport:
    keys = rng.sample(names, rng.randint(0, len(names)))
    return usage_report({key: model_usage(seat=rng.choice([None, *seats]), calls=rng.randint(0, 99)) for key in keys})


def expected_entry(usage: UsageReport, seat: str, served: str) -> ModelUsage | None:
    """The rule in words: the served name's entry; failing that, the first entry mapped to the seat."""
    if served in usage.models:
        return usage.models[served]
    mapped = [entry for entry in usage.models.values() if entry.seat == seat]
    return mapped[0] if mapped else None


def test_drawn_usage_documents_and_seats(rng: random.Random) -> None:
    names = [f"n{index}" for index in range(rng.randint(1, 8))]
    seats = [f"s{index}" for index in range(rng.randint(1, 6))] + names[:2]  # seats named like served names too
    for _ in range(300):
        usage = drawn_usage(rng, names, seats)
        seat, served = rng.choice(seats), rng.choice(names + seats)
        assert usage_of_seat(usage, seat, served) is expected_entry(usage, seat, served)
