"""Placement on small fleets whose right answers are worked out by hand in each test."""

from __future__ import annotations

import random

import pytest

from seatplan.errors import SeatplanError
from seatplan.plan.placement import GpuSlot, SeatDemand, place
from seatplan.plan.placement.greedy import best_fit, most_free_first

GiB = 1 << 30


def gpus_of(count: int, capacity_gib: float = 80, *, host: str = "h", headroom_gib: float = 0, clear: tuple[int, ...] = ()) -> list[GpuSlot]:
    return [
        GpuSlot(host=host, index=i, capacity_bytes=int(capacity_gib * GiB), headroom_bytes=int(headroom_gib * GiB), keep_clear=i in clear)
        for i in range(count)
    ]


def seat(name: str, gib: float, **extra) -> SeatDemand:
    return SeatDemand(name=name, footprint_bytes=int(gib * GiB), **extra)


def groups(placement) -> set[frozenset[str]]:
    """The layout as sets of seats sharing a GPU, whatever the GPU labels."""
    on_gpu: dict[tuple[str, int], set[str]] = {}
    for name, where in placement.assignment.items():
        for key in where:
            on_gpu.setdefault(tuple(key), set()).add(name)
    return {frozenset(names) for names in on_gpu.values()}


# Two 80 GiB GPUs, seats of 45, 30, 25 and 15 GiB (115 GiB). The feasible splits by hand:
#   {45,15}|{30,25}  spares 20, 25  → worst 20   (the optimum, unique)
#   {45,25}|{30,15}  spares 10, 35  → worst 10
#   {45}|{30,25,15}  spares 35, 10  → worst 10
#   {45,30}|{25,15}  spares  5, 40  → worst  5
#   anything with 45+25+15 or more on one GPU does not fit.
FOUR = [seat("a45", 45), seat("b30", 30), seat("c25", 25), seat("d15", 15)]


def test_maximises_the_worst_case_spare_and_proves_it():
    result = place(gpus_of(2), FOUR)
    assert result.optimal and result.method == "exhaustive"
    assert groups(result.best) == {frozenset({"a45", "d15"}), frozenset({"b30", "c25"})}
    assert result.best.worst_case_spare_bytes == 20 * GiB
    assert sorted(result.best.spare_bytes.values()) == [20 * GiB, 25 * GiB]
    assert result.bound_bytes == 20 * GiB


def test_runner_ups_split_the_bottleneck_of_the_layout_before_them_and_say_why_they_lost():
    # Best {45,15}|{30,25}: its bottleneck (20 GiB left) holds a45+d15. Kept apart, the best is 10 GiB
    # ({45,25}|{30,15} or {45}|{30,25,15}); splitting that one's bottleneck too gives the other 10 GiB
    # layout; splitting b30+c25+d15 then leaves only {45,30}|{25,15} at 5 GiB.
    result = place(gpus_of(2), FOUR, runner_ups=3)
    worsts = [alt.placement.worst_case_spare_bytes for alt in result.runner_ups]
    assert worsts == [10 * GiB, 10 * GiB, 5 * GiB]
    assert {frozenset(groups(alt.placement)) for alt in result.runner_ups[:2]} == {
        frozenset({frozenset({"a45", "c25"}), frozenset({"b30", "d15"})}),
        frozenset({frozenset({"a45"}), frozenset({"b30", "c25", "d15"})}),
    }
    last = result.runner_ups[2]
    worst_gpu = next(label for label, spare in last.placement.spare_bytes.items() if spare == 5 * GiB)
    second_bottleneck = min(result.runner_ups[1].placement.spare_bytes.items(), key=lambda item: item[1])[0]
    split_up = sorted(name for name, where in result.runner_ups[1].placement.assignment.items() if second_bottleneck in (f"{h}:{i}" for h, i in where))
    apart = f"{split_up[0]} and {split_up[1]} on different GPUs" if len(split_up) == 2 else "b30, c25 and d15 not all on one GPU"
    assert last.why_lost == f"with {apart}: worst-case spare 15.00 GiB lower: GPU {worst_gpu} would hold a45 and b30, leaving 5.00 GiB"
    assert result.runner_ups[0].why_lost.startswith("with a45 and d15 on different GPUs: worst-case spare 10.00 GiB lower")


def test_runner_ups_can_be_switched_off():
    assert place(gpus_of(2), FOUR, runner_ups=0).runner_ups == []


def test_greedy_baselines_on_the_hand_worked_fleet():
    # best-fit: 45→GPU0; 30→GPU0 (35 left is the tightest fit); 25→GPU1; 15→GPU1 (GPU0 has 5) → spares 5, 40.
    packed = best_fit(gpus_of(2), FOUR)
    assert packed.worst_case_spare_bytes == 5 * GiB
    assert groups(packed) == {frozenset({"a45", "b30"}), frozenset({"c25", "d15"})}
    # most-free-first: 45→GPU0; 30→GPU1; 25→GPU1 (50 free vs 35); 15→GPU0 (35 vs 25) → spares 20, 25.
    spread = most_free_first(gpus_of(2), FOUR)
    assert spread.worst_case_spare_bytes == 20 * GiB
    assert groups(spread) == {frozenset({"a45", "d15"}), frozenset({"b30", "c25"})}


def test_most_free_first_can_strand_a_seat_the_exact_search_places():
    # Two 100 GiB GPUs, seats 60, 40, 40, 30, 30 (exactly 200 GiB): only {60,40}|{40,30,30} fits.
    # most-free-first: 60→0, 40→1, 40→1 (60 free vs 40), 30→0 (40 vs 20), then 30 finds 10 and 20: stranded.
    # best-fit: 60→0, 40→0 (tightest), 40→1, 30→1, 30→1: fits.
    fleet = gpus_of(2, 100)
    seats = [seat("a", 60), seat("b", 40), seat("c", 40), seat("d", 30), seat("e", 30)]
    assert most_free_first(fleet, seats) is None
    assert best_fit(fleet, seats).worst_case_spare_bytes == 0
    result = place(fleet, seats)
    assert result.optimal and result.best.worst_case_spare_bytes == 0


def test_greedy_returns_none_rather_than_an_invalid_layout():
    # Three 60 GiB GPUs; seats 40, 40, 30, 30, 30. 40+30 = 70 > 60, so each 40 sits alone and the three
    # 30s (90 GiB) would have to share the third GPU: no layout fits. Both greedy rules must say None
    # rather than return an invalid layout, and the exact search must say infeasible.
    fleet = gpus_of(3, 60)
    seats = [seat("p", 40), seat("q", 40), seat("r", 30), seat("s", 30), seat("t", 30)]
    assert best_fit(fleet, seats) is None
    assert most_free_first(fleet, seats) is None
    result = place(fleet, seats)
    assert result.best is None and result.infeasible is not None


def test_pins_hold_even_when_they_cost_spare():
    pinned = [
        seat("a45", 45, allowed=[("h", 0)]),
        seat("b30", 30, allowed=[("h", 0)]),
        seat("c25", 25),
        seat("d15", 15),
    ]
    result = place(gpus_of(2), pinned)
    assert result.best.assignment["a45"] == [("h", 0)] and result.best.assignment["b30"] == [("h", 0)]
    assert result.best.assignment["c25"] == [("h", 1)] and result.best.assignment["d15"] == [("h", 1)]
    assert result.best.spare_bytes == {"h:0": 5 * GiB, "h:1": 40 * GiB}
    assert result.optimal


def test_avoids_steer_seats_away():
    # c25 avoids GPU 0 and d15 avoids GPU 1: the optimum {45,15}|{30,25} must then put d15 with a45 on GPU 0.
    steered = [seat("a45", 45), seat("b30", 30), seat("c25", 25, allowed=[("h", 1)]), seat("d15", 15, allowed=[("h", 0)])]
    result = place(gpus_of(2), steered)
    assert result.best.assignment["d15"] == [("h", 0)] and result.best.assignment["a45"] == [("h", 0)]
    assert result.best.assignment["c25"] == [("h", 1)] and result.best.assignment["b30"] == [("h", 1)]
    assert result.best.worst_case_spare_bytes == 20 * GiB


def test_keep_clear_gpus_stay_empty_and_do_not_count_as_the_worst():
    # Three GPUs, GPU 2 keep-clear: the four seats must share GPUs 0 and 1 exactly as with two GPUs.
    result = place(gpus_of(3, clear=(2,)), FOUR)
    assert all(("h", 2) not in where for where in result.best.assignment.values())
    assert result.best.spare_bytes["h:2"] == 80 * GiB
    assert result.best.worst_case_spare_bytes == 20 * GiB


def test_tensor_parallel_seat_takes_distinct_gpus_of_one_host():
    # Host "a" has 1 GPU of 80 GiB, host "b" 2 GPUs of 80 GiB. TP=2 seat of 30 GiB per GPU can only go to b.
    # Then 50 GiB and 20 GiB: 50 on a:0 (spare 30) and 20 on b (b:x spare 30, other 50) → worst 30.
    # Putting 50 on b would leave 0 there, and 20 on a leaves 60: worst 0. So the answer is worst 30.
    fleet = gpus_of(1, host="a") + gpus_of(2, host="b")
    seats = [seat("tp", 30, gpu_count=2), seat("big", 50), seat("small", 20)]
    result = place(fleet, seats)
    assert sorted(result.best.assignment["tp"]) == [("b", 0), ("b", 1)]
    assert result.best.assignment["big"] == [("a", 0)]
    assert result.best.worst_case_spare_bytes == 30 * GiB
    assert result.optimal


def test_tensor_parallel_seat_never_spans_hosts():
    # Two hosts with one GPU each: a TP=2 seat cannot be placed although two GPUs exist.
    fleet = gpus_of(1, host="a") + gpus_of(1, host="b")
    result = place(fleet, [seat("tp", 10, gpu_count=2)])
    assert result.best is None
    (short,) = result.infeasible.seats
    assert short.name == "tp" and short.short_by_bytes is None and "2 GPUs on one host" in short.reason


def test_headroom_makes_a_seat_that_fits_capacity_infeasible_and_says_by_how_much():
    # 80 GiB GPUs with 2 GiB headroom offer 78 GiB; a 79 GiB seat is 1 GiB short even alone.
    result = place(gpus_of(2, headroom_gib=2), [seat("huge", 79), seat("ok", 10)])
    assert result.best is None
    (short,) = result.infeasible.seats
    assert short.name == "huge" and short.short_by_bytes == 1 * GiB and short.best_gpu == "h:0"
    assert "78.00 GiB" in short.reason and "2.00 GiB headroom" in short.reason


def test_headroom_is_kept_free_on_every_gpu():
    # 45 + 30 would leave 5 GiB; with 6 GiB headroom that split is forbidden, the rest are as before.
    result = place(gpus_of(2, headroom_gib=6), FOUR, runner_ups=5)
    for layout in [result.best, *(alt.placement for alt in result.runner_ups)]:
        assert min(layout.spare_bytes.values()) >= 6 * GiB
    assert [alt.placement.worst_case_spare_bytes for alt in result.runner_ups] == [10 * GiB, 10 * GiB]


def test_pinned_to_a_keep_clear_gpu_is_explained():
    result = place(gpus_of(2, clear=(1,)), [seat("x", 10, allowed=[("h", 1)])])
    (short,) = result.infeasible.seats
    assert short.best_gpu is None and "keep-clear" in short.reason


def test_each_fits_alone_but_not_together_names_the_fewest_to_drop():
    # Two 80 GiB GPUs, three 50 GiB seats: 150 ≤ 160 in total, yet no GPU takes two. Drop one; beside the
    # two kept (one per GPU) 30 GiB are left, so the dropped one must shrink by 20 GiB.
    result = place(gpus_of(2), [seat("x", 50), seat("y", 50), seat("z", 50)])
    assert result.best is None and result.optimal
    (short,) = result.infeasible.seats
    assert short.short_by_bytes == 20 * GiB and short.footprint_bytes == 50 * GiB
    assert "not all together" in result.infeasible.summary and "no arrangement" in result.infeasible.summary


def test_total_shortfall_is_reported_when_demand_exceeds_the_gpus():
    # 60+60+60 = 180 GiB on 2×80 GiB: short by 20 GiB in total; one seat must go (20 GiB left beside the others → shrink 40).
    result = place(gpus_of(2), [seat("x", 60), seat("y", 60), seat("z", 60)])
    assert "short by 20.00 GiB" in result.infeasible.summary
    (short,) = result.infeasible.seats
    assert short.short_by_bytes == 40 * GiB


def test_fewer_moves_wins_among_equal_optima():
    # a40 and b40 on two 80 GiB GPUs: worst 40 either way; they run crosswise now, so that layout wins.
    seats = [seat("a", 40, current=[("h", 1)]), seat("b", 40, current=[("h", 0)])]
    result = place(gpus_of(2), seats)
    assert result.best.assignment == {"a": [("h", 1)], "b": [("h", 0)]}
    assert result.best.moves == 0


def test_same_spare_more_moves_runner_up():
    # a40+b20 on GPU 0, c20+d40 on GPU 1 now. {a,b}|{c,d} and {a,c}|{b,d} both leave 20 GiB worst;
    # the second needs 2 moves at best (b and c swap, or a and d). Mixing the 40s leaves 0: worse.
    seats = [
        seat("a", 40, current=[("h", 0)]),
        seat("b", 20, current=[("h", 0)]),
        seat("c", 20, current=[("h", 1)]),
        seat("d", 40, current=[("h", 1)]),
    ]
    result = place(gpus_of(2), seats)
    assert result.best.moves == 0 and result.best.worst_case_spare_bytes == 20 * GiB
    assert result.runner_ups[0].why_lost == "with a and b on different GPUs: same worst-case spare, 2 more moves"
    assert result.runner_ups[0].placement.moves == 2


def test_a_seat_that_left_the_fleet_gpu_counts_as_a_move_and_new_seats_do_not():
    seats = [seat("old", 10, current=[("gone", 0)]), seat("new", 10)]
    result = place(gpus_of(2), seats)
    assert result.best.moves == 1


def test_same_answer_whatever_the_input_order():
    fleet = gpus_of(2, host="a") + gpus_of(2, host="b")
    seats = [seat(f"s{i}", 7 + 3 * i, current=[("a", i % 2)]) for i in range(7)] + [seat("tp", 12, gpu_count=2)]
    first = place(fleet, seats)
    shuffled_seats, shuffled_gpus = seats[:], fleet[:]
    random.Random(7).shuffle(shuffled_seats)
    random.Random(8).shuffle(shuffled_gpus)
    again = place(shuffled_gpus, shuffled_seats)
    assert again.best == first.best
    assert [alt.placement for alt in again.runner_ups] == [alt.placement for alt in first.runner_ups]


def test_exact_bytes_not_rounded():
    # Sizes a few bytes apart must still be told apart: {a}|{b,c} leaves 499 and 499, {a,c}|{b} 497 and 501.
    fleet = [GpuSlot(host="h", index=i, capacity_bytes=1000) for i in range(2)]
    result = place(fleet, [SeatDemand(name="a", footprint_bytes=501), SeatDemand(name="b", footprint_bytes=499), SeatDemand(name="c", footprint_bytes=2)])
    assert result.best.worst_case_spare_bytes == 499
    assert groups(result.best) == {frozenset({"a"}), frozenset({"b", "c"})}
    assert result.runner_ups[0].placement.worst_case_spare_bytes == 497
    assert result.runner_ups[0].why_lost.startswith("with b and c on different GPUs: worst-case spare 2 B lower")


def test_duplicate_names_and_unknown_gpus_are_user_errors():
    with pytest.raises(SeatplanError, match="declared twice"):
        place(gpus_of(2), [seat("a", 1), seat("a", 2)])
    with pytest.raises(SeatplanError, match="does not have"):
        place(gpus_of(2), [seat("a", 1, allowed=[("h", 5)])])
    with pytest.raises(SeatplanError, match="listed twice"):
        place(gpus_of(2) + gpus_of(1), [seat("a", 1)])


def test_no_seats_is_a_trivial_optimum():
    result = place(gpus_of(2), [])
    assert result.optimal and result.best.assignment == {} and result.best.worst_case_spare_bytes == 80 * GiB


def test_each_gpu_gives_its_own_reason_for_not_taking_a_seat():
    # h:0 keep-clear; h:1 avoided; h:2 only 40 GiB; h:3 80 GiB but 30 GiB headroom (50 usable): a 60 GiB seat fits nowhere.
    slots = [
        GpuSlot(host="h", index=0, capacity_bytes=80 * GiB, keep_clear=True),
        GpuSlot(host="h", index=1, capacity_bytes=80 * GiB),
        GpuSlot(host="h", index=2, capacity_bytes=40 * GiB),
        GpuSlot(host="h", index=3, capacity_bytes=80 * GiB, headroom_bytes=30 * GiB),
    ]
    result = place(slots, [seat("big", 60, allowed=[("h", 0), ("h", 2), ("h", 3)])])
    (short,) = result.infeasible.seats
    verdicts = [(item.gpu, item.filter, item.short_by_bytes) for item in short.rejections]
    assert verdicts == [("h:0", "keep_clear", None), ("h:1", "pin_or_avoid", None), ("h:2", "too_small", 20 * GiB), ("h:3", "too_small", 10 * GiB)]
    assert short.rejections[3].reason == "offers 50.00 GiB (80.00 GiB less 30.00 GiB headroom), needs 60.00 GiB"
    assert "0/4 GPUs can take it: 1 keep-clear, 1 excluded by pin/avoid, 2 too small" in short.reason


def test_a_tensor_parallel_seat_hears_which_hosts_have_too_few_gpus():
    slots = [
        GpuSlot(host="a", index=0, capacity_bytes=80 * GiB),
        GpuSlot(host="a", index=1, capacity_bytes=80 * GiB, keep_clear=True),
        GpuSlot(host="b", index=0, capacity_bytes=40 * GiB),
        GpuSlot(host="b", index=1, capacity_bytes=80 * GiB),
        GpuSlot(host="b", index=2, capacity_bytes=80 * GiB, keep_clear=True),
    ]
    result = place(slots, [seat("tp", 50, gpu_count=2)])
    (short,) = result.infeasible.seats
    assert [(item.gpu, item.filter) for item in short.rejections] == [
        ("a:0", "too_few_gpus"), ("a:1", "keep_clear"), ("b:0", "too_small"), ("b:1", "too_few_gpus"), ("b:2", "keep_clear"),
    ]
    assert short.rejections[0].reason == "host a has 1 GPU(s) that could take it, tensor parallelism needs 2"


def test_a_seat_dropped_for_room_hears_what_fills_each_gpu():
    # a (50) must stay on h:0 and b (50) on h:1; c (40) fits either alone but beside them only 30 GiB is left.
    result = place(gpus_of(2), [seat("a", 50, allowed=[("h", 0)]), seat("b", 50, allowed=[("h", 1)]), seat("c", 40)])
    (short,) = result.infeasible.seats
    assert short.name == "c"
    assert [(item.gpu, item.filter, item.short_by_bytes, item.reason) for item in short.rejections] == [
        ("h:0", "full", 10 * GiB, "30.00 GiB left beside a, needs 40.00 GiB"),
        ("h:1", "full", 10 * GiB, "30.00 GiB left beside b, needs 40.00 GiB"),
    ]
