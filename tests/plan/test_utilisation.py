"""--gpu-memory-utilization in both start situations, worked by hand against vLLM's start-up check.

vLLM's check as VLLM.md §3 describes it (0.14+): ``requested = math.ceil(total × util)``; the engine
refuses to start when the free memory it sees, after its own CUDA context, is below ``requested``.
The check is written out again here (``vllm_starts``), independently of the module under test.
"""

from __future__ import annotations

import math

from seatplan.plan.utilisation import GpuAtStart, choose, highest_passing

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


def test_the_plan_gives_every_engine_on_a_shared_gpu_a_value_that_restarts_beside_its_neighbours(tmp_path):
    from plan_testkit import LLAMA_8B, one_host, write_fleet

    from seatplan.documents.fleet_file import load_fleet
    from seatplan.plan.planner import build_plan

    seats = "\n".join(f"  - {{name: llama-{n}, model: {LLAMA_8B}, max_model_len: {length}, pin: 0}}" for n, length in enumerate((32768, 16384, 8192)))
    plan = build_plan(load_fleet(write_fleet(tmp_path, one_host(1, "95.59GiB") + "seats:\n" + seats + "\n")))
    total = plan.gpus[0].total_bytes
    for seat in plan.seats:
        neighbours_bytes = sum(other.footprint_bytes for other in plan.seats if other.name != seat.name)
        context = next(part.bytes for part in seat.footprint_parts if part.name == "cuda_context")
        assert seat.gpu_memory_utilization == seat.gpu_memory_utilization_rolling_restart <= seat.gpu_memory_utilization_cold_boot
        assert vllm_starts(total - neighbours_bytes, total, seat.gpu_memory_utilization, context)
    first = min(plan.seats, key=lambda seat: seat.boot_order)
    # booted first it sees the whole GPU; the cold-boot-only value would be refused at a rolling restart
    assert first.gpu_memory_utilization_cold_boot > 0.98
    neighbours_bytes = sum(other.footprint_bytes for other in plan.seats if other.name != first.name)
    assert not vllm_starts(total - neighbours_bytes, total, first.gpu_memory_utilization_cold_boot)
