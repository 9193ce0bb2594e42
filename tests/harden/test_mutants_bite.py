"""Cases written to kill the mutants a mutation run found alive (issue #15, docs/testing.md).

Each asserts an exact figure where the earlier tests allowed a margin wide enough for a changed constant or
operator to pass: the sliding-window ``W - 1`` term, the KV rule's ``ceil``, creep's threshold and plateau time,
and a step's placement margin.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from kits.paths import MODEL_FIXTURES
from seatplan.documents.fleet import Policy, SeatSpec
from seatplan.documents.usage import RunawayRule
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.kv_specs import ChunkedLocalAttentionSpec, SlidingWindowSpec
from seatplan.facts.layout import hybrid_block_size
from seatplan.observe.detect import DetectSettings, GpuSeries, analyse
from seatplan.plan.placement import GpuSlot, SeatDemand
from seatplan.plan.placement.problem import compile_problem
from seatplan.plan.sizing import choose_kv_bytes
from seatplan.usage.sweep import runaway_threshold_tokens

BLOCK = 16
T0 = 1_790_000_000  # a whole number of 10-minute bins


def window_spec(window: int) -> SlidingWindowSpec:
    return SlidingWindowSpec(block_size=BLOCK, num_kv_heads=8, head_size=128, head_size_v=128, dtype_bytes=2,
                             sliding_window=window)


@pytest.mark.parametrize(("window", "in_flight", "blocks"), [
    # vLLM's SlidingWindowSpec.max_memory_usage_bytes: cdiv(min(W - 1 + in_flight, mml), block) + 1 blocks.
    (4096, 2049, 384 + 1),  # W + in-flight = 6145 = 1 (mod 16): W - 1 + F = 6144 fills whole blocks
    (4096, 2050, 385 + 1),  # = 2 (mod 16): one token into the next block
    (4096, 2048, 384 + 1),  # = 0 (mod 16)
    (128, 1, 8 + 1),        # W + F = 129 = 1 (mod 16)
    (128, 2, 9 + 1),
])
def test_sliding_window_blocks_per_request_where_window_plus_in_flight_is_one_past_a_block(window: int, in_flight: int,
                                                                                        blocks: int) -> None:
    assert window_spec(window).blocks_per_request(1_000_000, in_flight) == blocks


def test_sliding_window_blocks_are_capped_by_max_model_len() -> None:
    assert window_spec(4096).blocks_per_request(1000, 2049) == 63 + 1  # cdiv(1000, 16) + 1


@pytest.mark.parametrize(("in_flight", "max_model_len", "blocks"), [
    # vLLM's ChunkedLocalAttentionSpec: cdiv(min(chunk + in_flight, mml), block) blocks (a partial block is a block).
    (2049, 1_000_000, 641), (2048, 1_000_000, 640), (2049, 10_000, 625), (2049, 10_001, 626)])
def test_chunked_local_attention_counts_a_partial_block(in_flight: int, max_model_len: int, blocks: int) -> None:
    spec = ChunkedLocalAttentionSpec(block_size=BLOCK, num_kv_heads=8, head_size=128, head_size_v=128, dtype_bytes=2,
                                     attention_chunk_size=8192)
    assert spec.blocks_per_request(max_model_len, in_flight) == blocks


def test_kv_rule_takes_the_ceiling_of_request_times_factor_exactly() -> None:
    llama = load_model_facts(MODEL_FIXTURES / "meta-llama--Llama-3.1-8B-Instruct")
    seat = SeatSpec(name="s", model="m", kv_factor=1.1)
    request = llama.request_kv_bytes(4096)
    assert request == 256 * 2 * 1024 * 1024  # 256 blocks of 16 tokens x 128 KiB per token
    # 536,870,912 x 1.1 = 590,558,003.2: the rule takes 590,558,004 (never the floor, never rounded to nearest)
    assert choose_kv_bytes(seat, llama, 4096, Policy(rounding_step_bytes=1)).kv_cache_memory_bytes == 590_558_004
    # With a step, the ceiling decides the step: the floor would be exactly one step of 590,558,003, the ceiling is two.
    step = 590_558_003
    assert choose_kv_bytes(seat, llama, 4096, Policy(rounding_step_bytes=step)).kv_cache_memory_bytes == 2 * step


# ------------------------------------------------------------------------------------------- detection

def series(levels_by_minute: list[float]) -> GpuSeries:
    times = T0 + 60 * np.arange(len(levels_by_minute), dtype=np.int64)
    return GpuSeries(index=0, times_s=times, used_mib=np.array(levels_by_minute, dtype=np.float64))


def ramp(head_minutes: int, ramp_minutes: int, tail_minutes: int, low: float, high: float) -> list[float]:
    rise = list(np.linspace(low, high, ramp_minutes, endpoint=False))
    return [low] * head_minutes + rise + [high] * tail_minutes


@pytest.mark.parametrize(("rise_mib", "creep"), [(256.0, True), (255.0, False), (257.0, True)])
def test_creep_threshold_is_inclusive(rise_mib: float, creep: bool) -> None:
    settings = DetectSettings(min_creep_mib=256.0)
    analysis = analyse(series(ramp(24 * 60, 24 * 60, 48 * 60, 40_000.0, 40_000.0 + rise_mib)), settings)
    assert analysis.steps == []
    segment = analysis.segments[0]
    assert segment.level_after_boot_mib == 40_000.0
    assert segment.plateau_used_mib == 40_000.0 + rise_mib
    assert (segment.creep is not None) is creep
    if creep:
        assert segment.creep.rise_mib == rise_mib


def test_creep_plateau_time_is_where_the_ramp_comes_within_tolerance() -> None:
    # 12 h flat, a 24 h ramp of 12,000 MiB, 36 h flat. Noise-free, the tolerance is 5 % of the rise (600 MiB): the
    # ramp gets there 95 % of the way up, 22.8 h in; the (centred) plateau time is that bin, to within one bin.
    analysis = analyse(series(ramp(12 * 60, 24 * 60, 36 * 60, 30_000.0, 42_000.0)))
    creep = analysis.segments[0].creep
    assert creep is not None and creep.levelled_off and creep.rise_mib == 12_000.0
    expected = T0 + (12 * 60 + 0.95 * 24 * 60) * 60
    assert abs(creep.plateau_at.timestamp() - expected) <= 600
    # Exactly: bin j's level is its 5th reading (the lower median of 10), 30,000 + 12,000 (10j + 4 - 720) / 1,440, which
    # reaches 41,400 first at j = 209; the 7-bin rolling median starting at bin 206 is bin 209's level, and centring the
    # window (+ 7 // 2) puts the plateau at bin 209: 209 x 600 s after the start.
    assert creep.plateau_at == datetime.fromtimestamp(T0 + 209 * 600, tz=UTC)
    assert creep.hours_to_plateau == round(209 * 600 / 3600, 2) == 34.83


def test_a_segment_ends_where_its_last_bin_ends() -> None:
    # 72 h of 1-minute readings in 10-minute bins: the last bin starts 431 bins in and ends 600 s later, exactly
    # where the readings' minutes run out (T0 + 4,320 min), not at the last bin's start.
    analysis = analyse(series([40_000.0] * (72 * 60)))
    assert analysis.segments[0].end == datetime.fromtimestamp(T0 + 72 * 60 * 60, tz=UTC)


def test_a_creep_still_rising_at_the_end_has_its_plateau_at_the_last_bin() -> None:
    # 12 h flat, then a ramp that never levels off: the plateau time is the last bin's start (the latest figure
    # there is), and the creep says it has not levelled off.
    analysis = analyse(series(ramp(12 * 60, 48 * 60, 0, 30_000.0, 42_000.0)))
    creep = analysis.segments[0].creep
    assert creep is not None and not creep.levelled_off
    last_bin_start = T0 + ((60 * 60 - 1) * 60 // 600) * 600
    assert creep.plateau_at == datetime.fromtimestamp(last_bin_start, tz=UTC)


@pytest.mark.parametrize(("delta_mib", "found"), [(256.0, True), (255.0, False), (-256.0, True)])
def test_step_threshold_is_inclusive_and_the_step_exact(delta_mib: float, found: bool) -> None:
    levels = [60_000.0] * (12 * 60) + [60_000.0 + delta_mib] * (12 * 60)
    analysis = analyse(series(levels))
    assert len(analysis.steps) == int(found)
    if found:
        step = analysis.steps[0]
        assert (step.before_mib, step.after_mib, step.delta_mib) == (60_000.0, 60_000.0 + delta_mib, delta_mib)
        assert step.at == datetime.fromtimestamp(T0 + 12 * 60 * 60, tz=UTC)


def test_a_step_is_placed_at_the_first_reading_half_a_step_off_the_old_level() -> None:
    # The restart: 150 MiB off (more than half of min_step_mib 256) one minute before the new level.
    levels = [50_000.0] * (12 * 60) + [50_150.0, 50_100.0] + [58_000.0] * (12 * 60)
    step = analyse(series(levels)).steps[0]
    assert step.at == datetime.fromtimestamp(T0 + 12 * 60 * 60, tz=UTC)
    levels = [50_000.0] * (12 * 60) + [50_120.0, 50_100.0] + [58_000.0] * (12 * 60)  # 120 MiB: not yet off
    step = analyse(series(levels)).steps[0]
    assert step.at == datetime.fromtimestamp(T0 + (12 * 60 + 2) * 60, tz=UTC)


def test_hybrid_block_size_on_gpu_is_a_multiple_of_the_kernel_block() -> None:
    # vLLM's _align_hybrid_block_size with an 8-token base block: the attention page must hold the 50-byte state
    # (one block of 8 x 10 bytes does), then the GPU kernels' 16-token alignment raises it to 16.
    assert hybrid_block_size(8, 50, 10, "cuda") == 16
    assert hybrid_block_size(16, 50, 10, "cuda") == 16
    assert hybrid_block_size(16, 16 * 10 * 7 + 1, 10, "cuda") == 16 * 8  # one byte past 7 blocks' pages


def test_kv_rule_without_a_step_and_its_explanation_are_exact() -> None:
    llama = load_model_facts(MODEL_FIXTURES / "meta-llama--Llama-3.1-8B-Instruct")
    unrounded = Policy(rounding_step_bytes=0)
    choice = choose_kv_bytes(SeatSpec(name="s", model="m", kv_factor=1.1), llama, 4096, unrounded)
    assert choice.kv_cache_memory_bytes == 590_558_004
    assert choice.lines[0].note.startswith("536,870,912 B × 1.1 = 590,558,004 B")
    # Below vLLM's minimum (one request plus a block, 538,968,064 B) the minimum wins.
    assert choose_kv_bytes(SeatSpec(name="s", model="m", kv_factor=1.0), llama, 4096, unrounded).kv_cache_memory_bytes \
        == llama.min_kv_cache_bytes(4096) == 538_968_064
    # An operator pin of exactly the minimum is taken; one byte less is refused.
    minimum = llama.min_kv_cache_bytes(4096)
    assert choose_kv_bytes(SeatSpec(name="s", model="m", kv_cache_memory_bytes=minimum), llama, 4096, unrounded) \
        .kv_cache_memory_bytes == minimum
    with pytest.raises(SeatplanError):
        choose_kv_bytes(SeatSpec(name="s", model="m", kv_cache_memory_bytes=minimum - 1), llama, 4096, unrounded)
    pinned = choose_kv_bytes(SeatSpec(name="s", model="m", kv_cache_memory_bytes=2 * 536_870_912), llama, 4096, unrounded)
    # the pin's share and the rule's, each of its own figure (issue 32: "the rule, which would give 7.00 GiB = 1.00×")
    assert pinned.lines[0].note.startswith("the pin, 2.00× one request") and pinned.lines[0].note.endswith("= 1.25× one request")


def test_runaway_threshold_rounds_a_fractional_multiple_up() -> None:
    rule = RunawayRule(operator_threshold_tokens=None, floor_tokens=4, tail_multiple=1.5, cap_fraction=0.9, description="")
    assert runaway_threshold_tokens(rule, 7, None) == 11  # 1.5 x 7 = 10.5 -> 11
    assert runaway_threshold_tokens(rule, 7, 11) == 9  # 0.9 x 11 = 9.9 -> 9: the cap rounds down
    assert runaway_threshold_tokens(rule, None, None) == 4
    no_floor = rule.model_copy(update={"floor_tokens": 1})
    assert runaway_threshold_tokens(no_floor, None, None) == 1  # no median yet: the floor alone


def test_a_seat_that_fills_a_gpu_exactly_fits() -> None:
    problem = compile_problem([GpuSlot(host="h", index=0, capacity_bytes=1000, headroom_bytes=100)],
                              [SeatDemand(name="s", footprint_bytes=900)])
    assert problem.fits([(0,)])
    assert problem.worst_spare(problem.loads([(0,)])) == 100
    bigger = compile_problem([GpuSlot(host="h", index=0, capacity_bytes=1000, headroom_bytes=100)],
                             [SeatDemand(name="s", footprint_bytes=901)])
    assert not bigger.fits([(0,)])


def test_a_creep_still_rising_reports_its_rise_to_the_latest_level() -> None:
    # 12 h flat at 30,000 MiB, then 36 h rising 12,000 MiB without levelling off: the plateau is the latest level.
    analysis = analyse(series([30_000.0] * (12 * 60) + list(np.linspace(30_000.0, 42_000.0, 36 * 60))))
    segment = analysis.segments[0]
    creep = segment.creep
    assert creep is not None and not creep.levelled_off
    assert creep.rise_mib == pytest.approx(segment.plateau_used_mib - segment.level_after_boot_mib, abs=0.1)
    assert 41_500 < segment.plateau_used_mib <= 42_000 and segment.level_after_boot_mib == 30_000.0


def test_with_every_gpu_kept_clear_the_worst_spare_is_zero() -> None:
    problem = compile_problem([GpuSlot(host="h", index=0, capacity_bytes=1000, keep_clear=True)], [])
    assert problem.worst_spare(problem.loads([])) == 0
