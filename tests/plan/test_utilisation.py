"""--gpu-memory-utilization in both start situations, worked by hand against vLLM's start-up check: the
pre-0.10.2 rule (``choose``, the value sizes the engine's budget, KV included) and the pinned-KV rule (``choose_pinned``, issue 18).

vLLM's check as VLLM.md §3 describes it (0.14+): ``requested = math.ceil(total × util)``; the engine
refuses to start when the free memory it sees, after its own CUDA context, is below ``requested``.
The check is written out again here (``vllm_starts``), independently of the module under test.
"""

from __future__ import annotations

import math

from kits.plan import LLAMA_8B, one_host, write_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.plan.planner import build_plan
from seatplan.plan.utilisation import GpuAtStart, choose, choose_pinned, highest_passing, requested_bytes

GiB = 1 << 30
MiB = 1 << 20
TOTAL = 100 * GiB
CONTEXT = 1 * GiB
MARGIN = GiB // 2


def vllm_starts(free_before_engine_bytes: int, total_bytes: int, util: float, own_context_bytes: int = CONTEXT) -> bool:
    free_at_check = free_before_engine_bytes - own_context_bytes
    return free_at_check >= math.ceil(total_bytes * util)


# One 100 GiB GPU with three seats booting in the order a (40 GiB at plateau), b (30), c (20); each holds
# a 1 GiB CUDA context and allocates footprint − 1 GiB context − 0.5 GiB creep inside its budget. Before 0.10.2 the
# value is the engine's budget: vLLM gives the KV cache what the request leaves (gpu_worker.py lines 740-744).
#   the rule before: a takes the largest value passing beside b and c at plateau, (50 − 1 − 0.5) / 100 = 0.485;
#      it then holds 1 + 48.5 GiB, and b, booted next at 0.285 of its own, sees 100 − 49.5 − 1 = 49.5 GiB: it starts,
#      holds 29.5 GiB, and c sees 100 − 49.5 − 29.5 − 1 = 20 GiB against the 28.5 GiB its 0.285 asks: refused.
#   now: each asks what it allocates, a 0.385 (38.5 GiB), b 0.285, c 0.185, and holds its footprint.
def test_before_0_10_2_each_engine_asks_what_it_allocates_so_its_neighbours_still_start():
    seats = {"a": 38 * GiB + GiB // 2, "b": 28 * GiB + GiB // 2, "c": 18 * GiB + GiB // 2}  # inside the budget
    footprints = {name: inside + CONTEXT + GiB // 2 for name, inside in seats.items()}
    values, booted = {}, 0
    for name, inside in seats.items():  # boot order a, b, c
        rolling_free = TOTAL - sum(footprint for other, footprint in footprints.items() if other != name)
        chosen = choose([GpuAtStart("h:0", TOTAL, TOTAL - booted, rolling_free)], own_context_bytes=CONTEXT, inside_budget_bytes=inside)
        assert chosen.value == chosen.needed == next(step / 1000 for step in range(1, 1001) if math.ceil(TOTAL * step / 1000) >= inside)
        assert chosen.works_in_both and chosen.warning is None and chosen.inputs["margin_bytes"] == 0
        assert chosen.cold_boot_headroom_bytes == TOTAL - booted - CONTEXT - requested_bytes(TOTAL, chosen.value)
        assert chosen.rolling_restart_headroom_bytes == rolling_free - CONTEXT - requested_bytes(TOTAL, chosen.value)
        values[name] = chosen.value
        booted += footprints[name]
    assert values == {"a": 0.385, "b": 0.285, "c": 0.185}
    # booted in order, each engine holding its context and its whole request (+ creep), every start passes; so
    # does each restart beside the other two
    held = {name: CONTEXT + math.ceil(TOTAL * value) + GiB // 2 for name, value in values.items()}
    assert all(vllm_starts(TOTAL - sum(held[other] for other in list(values)[:position]), TOTAL, values[name])
               for position, name in enumerate(values))
    assert all(vllm_starts(TOTAL - sum(held[other] for other in values if other != name), TOTAL, values[name]) for name in values)
    # the rule before fails the last cold boot, as worked above
    before = {"a": 0.485, "b": 0.285}
    taken = sum(CONTEXT + math.ceil(TOTAL * value) + GiB // 2 for value in before.values())
    assert not vllm_starts(TOTAL - taken, TOTAL, 0.285)


def test_before_0_10_2_a_start_vllm_refuses_is_a_plan_problem():
    # 40.5 GiB free beside the neighbours at plateau, 38.5 GiB allocated: the 0.385 request and the 1 GiB context
    # leave 40.5 − 1 − 38.5 = 1 GiB; with 39.4 GiB free (38.4 at the snapshot), vLLM refuses the restart
    fits = choose([GpuAtStart("h:0", TOTAL, 100 * GiB, 40 * GiB + GiB // 2)], own_context_bytes=CONTEXT, inside_budget_bytes=38 * GiB + GiB // 2)
    assert fits.works_in_both and fits.rolling_restart_headroom_bytes == 40 * GiB + GiB // 2 - CONTEXT - math.ceil(TOTAL * 0.385)
    tight = choose([GpuAtStart("h:1", TOTAL, 100 * GiB, int(39.4 * GiB))], own_context_bytes=CONTEXT, inside_budget_bytes=38 * GiB + GiB // 2)
    assert not tight.works_in_both and tight.warning.startswith("plan problem: vLLM refuses a restart beside its neighbours")
    assert not vllm_starts(int(39.4 * GiB), TOTAL, tight.value) and vllm_starts(100 * GiB, TOTAL, tight.value)


def test_tensor_parallel_seats_take_the_largest_need_and_the_tightest_gpu_in_each_situation():
    gpus = [GpuAtStart("h:0", TOTAL, 90 * GiB, 70 * GiB), GpuAtStart("h:1", 80 * GiB, 80 * GiB, 75 * GiB)]
    chosen = choose(gpus, own_context_bytes=CONTEXT, inside_budget_bytes=20 * GiB)
    # 20 GiB of 80 GiB needs 0.250, of 100 GiB 0.200: the 0.250 covers it on both
    assert chosen.value == 0.25 and all(math.ceil(gpu.total_bytes * chosen.value) >= 20 * GiB for gpu in gpus)
    # the highest passing on every GPU: cold min(89/100, 79/80) = 0.890, restart min(69/100, 74/80) = 0.690
    assert (chosen.cold_boot, chosen.rolling_restart) == (0.89, 0.69)
    assert chosen.rolling_restart_headroom_bytes == min(70 * GiB - CONTEXT - math.ceil(TOTAL * 0.25), 75 * GiB - CONTEXT - math.ceil(80 * GiB * 0.25))
    assert all(vllm_starts(gpu.rolling_restart_free_bytes, gpu.total_bytes, chosen.value) for gpu in gpus)


def test_highest_passing_holds_on_odd_sizes_to_the_byte():
    total = int(95.59 * GiB)
    for free in (int(58.3 * GiB) + 12345, total, 97 * MiB, 0, -5):
        value = highest_passing(free, total)
        assert value == 0.0 or math.ceil(total * value) <= free
        assert math.ceil(total * (value + 0.001)) > free


def test_pinned_value_is_the_smallest_that_covers_what_the_engine_allocates_plus_a_margin_within_1_gib(rng):
    for _ in range(500):
        total = rng.randint(4 * GiB, 200 * GiB)
        allocated = rng.randint(1, int(total * 0.95))
        margin = rng.choice([0, rng.randint(0, 4 * GiB)])
        cold_free, rolling_free = sorted((rng.randint(0, total), rng.randint(0, total)), reverse=True)
        gpu = GpuAtStart("h:0", total, cold_free, rolling_free)
        chosen = choose_pinned([gpu], own_context_bytes=CONTEXT, inside_budget_bytes=allocated, margin_bytes=margin)
        requested = math.ceil(total * chosen.value)
        # covers the allocation and the (cut) margin; one step less does not; never more than 1 GiB over
        assert requested >= allocated + min(margin, GiB - math.ceil(total / 1000))
        assert math.ceil(total * (chosen.value - 0.001)) < allocated + min(margin, GiB - math.ceil(total / 1000)) or chosen.value == 0.001
        assert requested - allocated <= GiB
        # the headroom is exactly what vLLM's check leaves, and a refused start is a plan problem
        assert chosen.cold_boot_headroom_bytes == cold_free - CONTEXT - requested
        assert chosen.rolling_restart_headroom_bytes == rolling_free - CONTEXT - requested
        starts = vllm_starts(cold_free, total, chosen.value) and vllm_starts(rolling_free, total, chosen.value)
        assert chosen.works_in_both == starts and (chosen.warning is None) == starts
        if not starts:
            assert chosen.warning.startswith("plan problem")


def test_pinned_value_depends_on_the_seat_and_its_gpu_total_only():
    one = choose_pinned([GpuAtStart("h:0", TOTAL, 90 * GiB, 40 * GiB)], own_context_bytes=CONTEXT, inside_budget_bytes=25 * GiB, margin_bytes=MARGIN)
    other = choose_pinned([GpuAtStart("h:3", TOTAL, 31 * GiB, 27 * GiB)], own_context_bytes=CONTEXT, inside_budget_bytes=25 * GiB, margin_bytes=MARGIN)
    assert one.value == other.value == 0.255  # ceil(100 GiB × 0.255) covers 25 GiB + the 0.5 GiB margin; 0.254 does not
    assert one.works_in_both and other.works_in_both


def test_a_total_beyond_a_double_is_worked_exactly_and_raises_no_overflow():
    huge = 10**400
    assert requested_bytes(huge, 0.5) == huge // 2
    assert highest_passing(huge // 3, huge) == 0.333
    assert choose([GpuAtStart("h:0", huge, huge, huge)], own_context_bytes=CONTEXT, inside_budget_bytes=huge // 2).value == 0.5
    assert choose_pinned([GpuAtStart("h:0", huge, huge, huge)], own_context_bytes=CONTEXT, inside_budget_bytes=GiB, margin_bytes=MARGIN).value == 0.001


def test_a_replan_leaves_an_untouched_seats_value_alone(tmp_path, rng):
    lengths = [rng.choice([4096, 8192, 16384, 32768]) for _ in range(4)]
    seats = "\n".join(f"  - {{name: llama-{n}, model: {LLAMA_8B}, port: {8001 + n}, max_model_len: {length}}}" for n, length in enumerate(lengths))
    before = build_plan(load_fleet(write_fleet(tmp_path, one_host(2, "95.59GiB") + "seats:\n" + seats + "\n", "a.yaml")))
    edited = rng.randrange(4)
    lengths[edited] = 8192 if lengths[edited] != 8192 else 16384
    seats = "\n".join(f"  - {{name: llama-{n}, model: {LLAMA_8B}, port: {8001 + n}, max_model_len: {length}}}" for n, length in enumerate(lengths))
    after = build_plan(load_fleet(write_fleet(tmp_path, one_host(2, "95.59GiB") + "seats:\n" + seats + "\n", "b.yaml")))
    for seat in before.seats:
        if seat.name != f"llama-{edited}":
            assert after.seat(seat.name).gpu_memory_utilization == seat.gpu_memory_utilization, seat.name
    assert after.seat(f"llama-{edited}").gpu_memory_utilization != before.seat(f"llama-{edited}").gpu_memory_utilization
