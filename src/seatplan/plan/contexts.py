"""``published`` raises a context *where it fits*: when the fleet does not fit, raised seats go back to vLLM's
default length and each raise is restored, cheapest first, while the fleet still fits."""

from __future__ import annotations

from collections.abc import Callable

from seatplan.documents.fleet import Fleet, SeatSpec
from seatplan.documents.plan import ExplanationLine
from seatplan.plan.assemble import seat_demand
from seatplan.plan.placement import PlacementResult, SeatDemand
from seatplan.plan.size_seat import SizedSeat
from seatplan.units import human_bytes


def raised_seats(sized: list[SizedSeat]) -> list[int]:
    """Seats whose ``published`` raise costs KV beyond vLLM's default length, dearest first."""
    costs = {position: seat.raise_kv_bytes for position, seat in enumerate(sized) if seat.raise_kv_bytes > 0}
    return sorted(costs, key=lambda position: (-costs[position], position))


def lower_raised_contexts(
    fleet: Fleet,
    sized: list[SizedSeat],
    size: Callable[[int, SeatSpec], SizedSeat],
    result: PlacementResult,
    place_seats: Callable[[list[SeatDemand]], PlacementResult],
) -> tuple[list[SizedSeat], PlacementResult]:
    """``published`` raises a context *where it fits*: when the fleet does not fit, seats go back to vLLM's
    default length, then each raise is restored (cheapest first) as long as the fleet still fits."""
    raised = raised_seats(sized)
    if not raised:
        return sized, result
    lowered = {position: size(position, sized[position].spec.model_copy(update={"max_model_len": None})) for position in raised}
    current = [lowered.get(position, seat) for position, seat in enumerate(sized)]
    attempt = place_seats([seat_demand(fleet, seat) for seat in current])
    if attempt.infeasible is not None:
        return sized, result
    result = attempt
    for position in reversed(raised):
        trial = list(current)
        trial[position] = sized[position]
        attempt = place_seats([seat_demand(fleet, seat) for seat in trial])
        if attempt.infeasible is None and attempt.best is not None:
            current, result = trial, attempt
    for position in raised:
        if current[position] is lowered[position]:
            note_lowered(current[position], sized[position])
    return current, result


def note_lowered(seat: SizedSeat, raised: SizedSeat) -> None:
    wanted = raised.max_model_len or 0
    got = seat.max_model_len or 0
    seat.lines.insert(
        0,
        ExplanationLine(
            rule="published_not_fitting",
            inputs={"published_max_model_len": wanted, "max_model_len": got, "footprint_bytes_raised": raised.footprint.footprint_bytes},
            result=f"max_model_len {got:,} (vLLM's default)",
            note=f"the published {wanted:,} tokens ({human_bytes(raised.footprint.footprint_bytes)} per GPU) do not fit beside the other seats",
        ),
    )
    seat.warnings.append(f"{seat.spec.name}: published context {wanted:,} does not fit; planned at vLLM's default {got:,}")
