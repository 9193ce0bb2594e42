"""The KV replay (``usage/replay.py``) held to hand-worked answers and to a brute-force reference in exact
rationals that evaluates the load at every instant that matters by summing over every request."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings
from seatplan.usage.replay import (
    MAX_LEVELS,
    TOLERANCE_BLOCKS,
    BlockRule,
    block_rule_of_facts,
    default_block_rule,
    replay_requests,
)

SECOND_US = 1_000_000
MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "models"
TOLERANCE = Fraction(TOLERANCE_BLOCKS).limit_denominator(10**6)


def replay(requests: list[tuple[int, int, int, int]], rule: BlockRule, since: int | None = None, until: int | None = None):
    """(start s, end s, prompt, completion) in seconds, replayed as the usage stage does (only requests in
    flight in the window are handed over)."""
    live = [request for request in requests if _opened(request, since) < request[1] and (until is None or _opened(request, since) < until)]
    columns = [np.array([request[field] for request in live], dtype=np.int64) for field in range(4)]
    return replay_requests(columns[0] * SECOND_US, columns[1] * SECOND_US, columns[2], columns[3], rule,
                           None if since is None else since * SECOND_US, None if until is None else until * SECOND_US)


def _opened(request: tuple[int, int, int, int], since: int | None) -> int:
    return request[0] if since is None else max(request[0], since)


# ----------------------------------------------------------------------------- hand-worked


def test_one_request_ramps_from_its_prompt_blocks_to_its_last_block() -> None:
    # 16-token blocks: 40 prompt tokens hold (40 + 15) / 16 = 3.44 -> 3 blocks at the start; 80 completion
    # tokens over 60 s make 120 tokens = 8.44 -> 8 blocks at the end. The load (55 + 4/3 t tokens / 16)
    # reaches k + 1 whole blocks (load >= k + 1 - tolerance) at t = (16 (k + 1) - 16 tolerance - 55) * 3/4:
    # 6.738 s for 4 blocks, 54.738 s for 8.
    result = replay([(0, 60, 40, 80)], default_block_rule("test"))
    assert result.peak_blocks == 8
    assert result.level_step_blocks == 1
    reached = [(16 * (level + 1) - 16 * TOLERANCE_BLOCKS - 55) * 0.75 for level in range(3, 8)]
    assert result.minutes_above[:9] == pytest.approx([1.0, 1.0, 1.0, *((60 - t) / 60 for t in reached), 0.0], abs=1e-6)
    assert result.waited_requests[:9] == [1, 1, 1, 0, 0, 0, 0, 0, 0]  # it saw 3 blocks when it started


def test_two_requests_ends_before_starts_and_the_window() -> None:
    rule = BlockRule(4, 1, 0, "test")  # 4-token blocks, prompts whole blocks: (p + 3) / 4
    # A: [0, 10) 8 prompt, no completion: 2.75 blocks. B starts at 10 as A ends: never together.
    # C: [10, 20) 4 prompt + 8 completion: 1.75 -> 3.75 blocks.  D: [5, 10) 13 prompt: 4 blocks.
    requests = [(0, 10, 8, 0), (10, 20, 4, 8), (5, 10, 13, 0)]
    result = replay(requests, rule)
    # Over [5, 10): 2.75 + 4 = 6.75 -> 6 blocks, the peak; C alone never reaches 4 blocks.
    assert result.peak_blocks == 6
    assert result.waited_requests[:7] == [3, 2, 1, 1, 1, 1, 0]  # A saw 2 blocks, C 1, D 6
    # Level 2 (>= 3 blocks, less the tolerance): [5, 10), and C from 1.25 of its 2-block rise (6.25 s in) on.
    assert result.minutes_above[2] == pytest.approx((5 + 10 - (1.25 - TOLERANCE_BLOCKS) / 2 * 10) / 60, abs=1e-6)
    # A window from 7 s to 15 s: A and D enter at 7 s (not counted as calls), C is counted.
    windowed = replay(requests, rule, since=7, until=15)
    assert windowed.peak_blocks == 6
    assert windowed.waited_requests[0] == 1
    assert windowed.minutes_above[0] == pytest.approx(8 / 60, abs=1e-6)


def test_an_empty_seat_needs_no_block() -> None:
    empty = replay([], default_block_rule("test"))
    assert (empty.peak_blocks, empty.minutes_above, empty.waited_requests) == (0, [0.0], [0])


def test_levels_stay_bounded_and_the_last_is_at_or_above_the_peak() -> None:
    # 260k-token runaways: the curve keeps at most MAX_LEVELS + 1 levels.
    result = replay([(0, 3600, 2000, 260_000), (100, 200, 30_000, 100)], default_block_rule("test"))
    assert result.peak_blocks == (2000 + 260_000 + 15) // 16
    assert len(result.minutes_above) <= MAX_LEVELS + 1
    assert (len(result.minutes_above) - 1) * result.level_step_blocks >= result.peak_blocks
    assert result.minutes_above[-1] == 0.0 and result.waited_requests[-1] == 0


def test_block_rules_from_real_model_facts() -> None:
    settings = EngineSettings(vllm_version="0.32")
    dense = block_rule_of_facts(load_model_facts(MODELS / "Qwen--Qwen3-8B", settings))
    assert (dense.block_size_tokens, dense.token_groups, dense.fixed_blocks) == (16, 1, 0)
    # gpt-oss: sliding-window and full-attention groups; each sliding group holds one block more.
    gpt_oss = load_model_facts(MODELS / "openai--gpt-oss-20b", settings)
    rule = block_rule_of_facts(gpt_oss)
    sliding = sum(group.spec.kind == "sliding_window" for group in gpt_oss.layer_groups)
    assert (rule.token_groups, rule.fixed_blocks) == (len(gpt_oss.layer_groups), sliding) and sliding > 0
    # Qwen3-Next: gated DeltaNet state (fixed blocks) beside full attention in 544-token blocks.
    hybrid_facts = load_model_facts(MODELS / "Qwen--Qwen3-Next-80B-A3B-Thinking", settings)
    hybrid = block_rule_of_facts(hybrid_facts)
    assert hybrid.block_size_tokens == hybrid_facts.block_size > 16 and hybrid.fixed_blocks > 0


@pytest.mark.parametrize("model", ["Qwen--Qwen3-8B", "openai--gpt-oss-20b", "Qwen--Qwen3-Next-80B-A3B-Thinking",
                                   "google--gemma-3-27b-it"])
@pytest.mark.parametrize("tokens", [1, 15, 16, 17, 543, 544, 545, 4096, 131_072])
def test_the_rule_never_counts_fewer_blocks_than_vllm(model: str, tokens: int) -> None:
    facts = load_model_facts(MODELS / model, EngineSettings(vllm_version="0.32"))
    rule = block_rule_of_facts(facts)
    counted = Fraction(int(rule.units_per_request(np.array([tokens]))[0]), rule.block_size_tokens)
    vllm = facts.blocks_per_request(tokens)
    assert vllm <= counted
    # Beyond vLLM's count: under one block per group for the rounding, and the sliding windows' cap.
    without_window_cap = rule.token_groups * -(-tokens // rule.block_size_tokens) + rule.fixed_blocks
    assert without_window_cap <= counted < without_window_cap + rule.token_groups


# ----------------------------------------------------------------------------- the brute-force reference


def reference(requests: list[tuple[int, int, int, int]], rule: BlockRule, since: int | None, until: int | None):
    """Peak, waited per level and minutes above per level, in exact rationals, summing every request at
    every instant where the load can change slope or jump."""
    spans = []
    for start, end, prompt, completion in requests:
        opened = _opened((start, end, prompt, completion), since)
        closed = end if until is None else min(end, until)
        if opened < closed:
            spans.append((start, end, opened, closed, prompt, completion))
    size, groups = rule.block_size_tokens, rule.token_groups

    def holds(span, moment: Fraction) -> Fraction:
        start, end, _, _, prompt, completion = span
        tokens = prompt + Fraction(completion) * (moment - start) / (end - start)
        return (groups * (tokens + size - 1) + rule.fixed_blocks * size) / size

    def load(moment: Fraction) -> Fraction:  # ends before starts: in flight on [opened, closed)
        return sum((holds(span, moment) for span in spans if span[2] <= moment < span[3]), Fraction(0))

    def load_before(moment: Fraction) -> Fraction:  # the left limit
        return sum((holds(span, moment) for span in spans if span[2] < moment <= span[3]), Fraction(0))

    def whole(value: Fraction) -> int:
        return math.floor(value + TOLERANCE)

    instants = sorted({Fraction(span[2]) for span in spans} | {Fraction(span[3]) for span in spans})
    peak = max((whole(max(load(moment), load_before(moment))) for moment in instants), default=0)
    step = max(1, math.ceil((peak + 1) / MAX_LEVELS))
    levels = [index * step for index in range(-(-peak // step) + 1)]
    seen = [whole(load(Fraction(span[2]))) for span in spans if since is None or span[0] >= since]
    waited = [sum(value > level for value in seen) for level in levels]
    minutes = []
    for level in levels:
        threshold = level + 1 - TOLERANCE
        measure = Fraction(0)
        for left, right in zip(instants, instants[1:]):
            low, high = load(left), load_before(right)
            if high == low:
                measure += (right - left) if low >= threshold else 0
            else:
                measure += (right - left) * min(max((high - threshold) / (high - low), Fraction(0)), Fraction(1))
        minutes.append(float(measure / 60))
    return peak, waited, minutes


REQUEST = st.tuples(st.integers(0, 40), st.sampled_from([0, 1, 2, 4, 8, 16, 32]), st.integers(0, 70), st.integers(0, 70))


@settings(max_examples=150, deadline=None)
@given(drawn=st.lists(REQUEST, max_size=14),
       rule=st.sampled_from([BlockRule(16, 1, 0, "t"), BlockRule(1, 1, 0, "t"), BlockRule(4, 2, 1, "t"), BlockRule(8, 0, 3, "t")]),
       since=st.one_of(st.none(), st.integers(0, 30)), length=st.one_of(st.none(), st.integers(1, 40)))
def test_replay_matches_the_brute_force_reference(drawn, rule: BlockRule, since: int | None, length: int | None) -> None:
    # Durations are powers of two (and zero: never in flight), so loads are multiples of 1/(32 * block size)
    # and never sit within double-precision error of a whole block minus the tolerance.
    requests = [(start, start + duration, prompt, completion) for start, duration, prompt, completion in drawn]
    until = None if length is None else (since or 0) + length
    result = replay(requests, rule, since, until)
    peak, waited, minutes = reference(requests, rule, since, until)
    assert result.peak_blocks == peak
    assert result.waited_requests == waited
    assert result.minutes_above == pytest.approx(minutes, abs=2e-6)


@settings(max_examples=25, deadline=None)
@given(drawn=st.lists(REQUEST, min_size=1, max_size=12), shuffle=st.randoms(use_true_random=False))
def test_the_order_requests_arrive_in_does_not_change_the_replay(drawn, shuffle) -> None:
    requests = [(start, start + duration, prompt, completion) for start, duration, prompt, completion in drawn]
    rule = default_block_rule("test")
    shuffled = list(requests)
    shuffle.shuffle(shuffled)
    assert replay(requests, rule) == replay(shuffled, rule)
