"""--gpu-memory-utilization in both start situations, worked by hand against vLLM's start-up check: the
pre-0.10.2 rule (``choose``, the value sizes KV) and the pinned-KV rule (``choose_pinned``, issue 18).

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
# a 1 GiB CUDA context and allocates footprint − 1 GiB context − 0.5 GiB creep inside its budget.
#   a: cold boot, nothing before it: 100 GiB free → (100 − 1 − 0.5) / 100 = 0.985
#      restarted beside b and c at plateau: 100 − 50 = 50 GiB free → (50 − 1.5) / 100 = 0.485
#      it allocates 38.5 GiB → needs 0.385 ≤ 0.485: 0.485 passes both.
#   c: booted last, cold boot and restart see the same 30 GiB → 0.285; allocates 18.5 GiB → 0.185.
def test_the_first_engine_gets_the_value_that_passes_when_it_restarts_beside_running_neighbours():
    chosen = choose([GpuAtStart("h:0", TOTAL, 100 * GiB, 50 * GiB)], own_context_bytes=CONTEXT, inside_budget_bytes=38 * GiB + GiB // 2, margin_bytes=MARGIN)
    assert (chosen.cold_boot, chosen.rolling_restart, chosen.needed, chosen.value) == (0.985, 0.485, 0.385, 0.485)
    assert chosen.works_in_both and chosen.warning is None
    # the old cold-boot-only value is refused at a rolling restart; the chosen one starts in both situations
    assert not vllm_starts(50 * GiB, TOTAL, 0.985)
    assert vllm_starts(50 * GiB, TOTAL, chosen.value) and vllm_starts(100 * GiB, TOTAL, chosen.value)
    # and it is the highest such value: one step more no longer leaves the margin
    assert math.ceil(TOTAL * (chosen.value + 0.001)) > 50 * GiB - CONTEXT - MARGIN


def test_the_last_engine_sees_the_same_memory_in_both_situations():
    chosen = choose([GpuAtStart("h:0", TOTAL, 30 * GiB, 30 * GiB)], own_context_bytes=CONTEXT, inside_budget_bytes=18 * GiB + GiB // 2, margin_bytes=MARGIN)
    assert (chosen.cold_boot, chosen.rolling_restart, chosen.value) == (0.285, 0.285, 0.285) and chosen.works_in_both


def test_where_no_value_covers_the_engine_in_both_it_says_so_and_takes_the_rolling_restart_value():
    # a 100 GiB GPU nearly full: a 40, b 30, c 29.5 GiB; the margin is 2 GiB. Restarting a beside b and c:
    # 100 − 59.5 = 40.5 GiB free → (40.5 − 1 − 2) / 100 = 0.375, below the 0.385 its 38.5 GiB need.
    # Cold boot: (100 − 3) / 100 = 0.970. No value both passes the restart check and covers 0.385.
    chosen = choose(
        [GpuAtStart("h:0", TOTAL, 100 * GiB, 40 * GiB + GiB // 2)], own_context_bytes=CONTEXT, inside_budget_bytes=38 * GiB + GiB // 2, margin_bytes=2 * GiB
    )
    assert (chosen.cold_boot, chosen.rolling_restart, chosen.needed) == (0.970, 0.375, 0.385)
    assert chosen.value == 0.375 and not chosen.works_in_both
    assert "passes vLLM's start-up check when it restarts beside its neighbours" in chosen.warning
    assert vllm_starts(40 * GiB + GiB // 2, TOTAL, chosen.value) and vllm_starts(100 * GiB, TOTAL, chosen.value)
    assert not vllm_starts(40 * GiB + GiB // 2, TOTAL, chosen.needed + 0.02)


def test_an_engine_that_cannot_restart_alone_is_named_and_gets_the_cold_boot_value():
    chosen = choose([GpuAtStart("h:1", TOTAL, 60 * GiB, GiB)], own_context_bytes=CONTEXT, inside_budget_bytes=10 * GiB, margin_bytes=MARGIN)
    assert chosen.rolling_restart == 0.0 and chosen.value == chosen.cold_boot == 0.585
    assert "cannot restart alone" in chosen.warning and "h:1" in chosen.warning


def test_tensor_parallel_seats_take_the_tightest_gpu_in_each_situation():
    gpus = [GpuAtStart("h:0", TOTAL, 90 * GiB, 70 * GiB), GpuAtStart("h:1", TOTAL, 80 * GiB, 75 * GiB)]
    chosen = choose(gpus, own_context_bytes=CONTEXT, inside_budget_bytes=20 * GiB, margin_bytes=MARGIN)
    # cold: h:1 (80 − 1.5 → 0.785); restart: h:0 (70 − 1.5 → 0.685)
    assert (chosen.cold_boot, chosen.rolling_restart, chosen.value) == (0.785, 0.685, 0.685)
    assert chosen.inputs["gpu"] == "h:0"
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
    chosen = choose([GpuAtStart("h:0", huge, huge, huge)], own_context_bytes=CONTEXT, inside_budget_bytes=GiB, margin_bytes=MARGIN)
    assert chosen.value == 0.999
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
