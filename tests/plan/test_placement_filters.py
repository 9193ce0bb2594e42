"""One filter decides and explains: the solver's candidate GPU sets are exactly the sets of GPUs the
explanations pass, for problems drawn at random (hosts, GPU sizes, headroom, keep-clear, pins,
tensor-parallel sizes and footprints from a few MiB to more than any GPU)."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from seatplan.plan.placement.problem import GpuSlot, SeatDemand, compile_problem, gpu_label
from seatplan.plan.placement.rejections import gpu_rejections

GiB = 1 << 30


@st.composite
def problems(draw: st.DrawFn):
    slots = []
    for host in range(draw(st.integers(1, 3))):
        for index in range(draw(st.integers(1, 4))):
            slots.append(GpuSlot(host=f"h{host}", index=index, capacity_bytes=draw(st.integers(8, 141)) * GiB,
                                 headroom_bytes=draw(st.sampled_from([0, GiB, 4 * GiB])), keep_clear=draw(st.booleans()) and draw(st.booleans())))
    keys = [(slot.host, slot.index) for slot in slots]
    seats = []
    for number in range(draw(st.integers(1, 4))):
        allowed = draw(st.one_of(st.none(), st.lists(st.sampled_from(keys), min_size=1, max_size=len(keys), unique=True)))
        seats.append(SeatDemand(name=f"s{number}", footprint_bytes=draw(st.integers(1, 150 * GiB)), gpu_count=draw(st.sampled_from([1, 1, 2, 4])),
                                allowed=allowed))
    return compile_problem(slots, seats)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_candidates_are_the_sets_no_filter_rejects(problem):
    for seat in range(len(problem.seat_names)):
        rejected = {item.gpu for item in gpu_rejections(problem, seat, [0] * len(problem.gpu_keys))}
        passing = [g for g, key in enumerate(problem.gpu_keys) if gpu_label(key) not in rejected]
        expected = sorted(gpu_set for host in {key[0] for key in problem.gpu_keys}
                          for gpu_set in combinations([g for g in passing if problem.gpu_keys[g][0] == host], problem.gpu_count[seat]))
        assert list(problem.candidates[seat]) == expected
        # A GPU is rejected once, by the first filter that rejects it.
        verdicts = [item.gpu for item in gpu_rejections(problem, seat, [0] * len(problem.gpu_keys))]
        assert len(verdicts) == len(set(verdicts))
