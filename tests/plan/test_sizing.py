"""The sizing rules on real model configs, with the numbers worked out by hand in each test.

Llama-3.1-8B: 32 layers × 8 KV heads × head_dim 128 × 2 (K and V) × 2 bytes = 128 KiB per token;
a 16-token block is 2 MiB. Qwen3-8B: 36 layers, same heads → 144 KiB (147,456 B) per token.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kits.documents import model_usage, runaway
from kits.plan import LLAMA_8B, PHI_35, QWEN3_8B, GiB, MiB
from seatplan.documents.fleet import Policy, SeatSpec
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings
from seatplan.plan import sizing

STEP = 512 * MiB


@pytest.fixture(scope="module")
def llama():
    return load_model_facts(str(LLAMA_8B), EngineSettings())


@pytest.fixture(scope="module")
def qwen():
    return load_model_facts(str(QWEN3_8B), EngineSettings())


def seat(**fields) -> SeatSpec:
    return SeatSpec(name=fields.pop("name", "s"), model=fields.pop("model", str(LLAMA_8B)), **fields)


def test_factor_rule_rounds_up_to_the_step(llama):
    # 20,000 tokens → cdiv(20000, 16) = 1,250 blocks × 2 MiB = 2,621,440,000 B; × 1.25 = 3,276,800,000 B
    # → 6.10 steps of 512 MiB → 7 steps = 3,758,096,384 B
    choice = sizing.choose_kv_bytes(seat(), llama, 20000, Policy())
    assert choice.kv_cache_memory_bytes == 7 * STEP == 3_758_096_384
    line = choice.lines[0]
    assert line.rule == "kv_bytes" and line.inputs["request_kv_bytes"] == 2_621_440_000 and line.inputs["factor"] == 1.25
    # capacity: 3,758,096,384 // 2 MiB = 1,792 blocks; 1,792 / 1,250 = 1.43x
    assert choice.capacity.num_blocks == 1792
    assert round(choice.capacity.max_concurrency, 2) == 1.43


def test_seat_factor_overrides_the_policy(llama):
    # 32,768 tokens = 2,048 blocks = 4 GiB; × 1.07 = 4.28 GiB → 4.5 GiB
    choice = sizing.choose_kv_bytes(seat(kv_factor=1.07), llama, 32768, Policy())
    assert choice.kv_cache_memory_bytes == 9 * STEP
    assert choice.lines[0].inputs["factor_source"] == "seat"


def test_operator_pin_wins_and_the_plan_says_what_the_rule_would_give(llama):
    # 131,072 tokens = 16 GiB per request; the rule would give 16 × 1.25 = 20 GiB exactly
    choice = sizing.choose_kv_bytes(seat(kv_cache_memory_bytes=22 * GiB), llama, 131072, Policy())
    assert choice.kv_cache_memory_bytes == 22 * GiB
    line = choice.lines[0]
    assert "operator pin" in line.result
    assert line.inputs["rule_bytes"] == 20 * GiB
    assert "wins over the rule" in line.note


def test_a_pin_below_one_request_is_refused(llama):
    with pytest.raises(SeatplanError) as caught:
        sizing.choose_kv_bytes(seat(kv_cache_memory_bytes=10 * GiB), llama, 131072, Policy())
    assert "cannot hold one 131,072-token request" in caught.value.message


def test_published_raises_the_context_and_reports_the_cost():
    # Phi-3.5-mini: vLLM defaults to the LongRoPE original 4,096; the model publishes 131,072.
    # 32 layers × 32 KV heads × 96 × 2 × 2 B = 393,216 B/token → 6,291,456 B per block; its layers are
    # sliding-window layers whose window exceeds the context, so a request pays one block more:
    # 4,096 → 257 blocks = 1,616,904,192 B; 131,072 → 8,193 blocks = 51,545,899,008 B.
    facts = load_model_facts(str(PHI_35), EngineSettings())
    choice = sizing.choose_context(seat(model=str(PHI_35), max_model_len="published"), facts)
    assert choice.max_model_len == 131072 and choice.yarn is None
    cost = next(line for line in choice.lines if line.rule == "published_raise")
    assert cost.inputs["request_kv_bytes_default"] == 1_616_904_192
    assert cost.inputs["request_kv_bytes"] == 51_545_899_008
    kv = sizing.choose_kv_bytes(seat(model=str(PHI_35)), facts, 131072, Policy())
    # 51,545,899,008 × 1.25 = 64,432,373,760 → 120.01 steps → 121 × 512 MiB
    assert kv.kv_cache_memory_bytes == 121 * STEP


def test_published_never_lowers_and_yarn_cost_is_shown_but_off(qwen):
    # Qwen3-8B: the config allows 40,960 positions, the card publishes 32,768 natively and
    # 131,072 with YaRN ×4; YaRN stays off unless the seat allows it.
    choice = sizing.choose_context(seat(model=str(QWEN3_8B), max_model_len="published"), qwen)
    assert choice.max_model_len == 40960 and choice.yarn is None
    yarn = next(line for line in choice.lines if line.rule == "yarn")
    assert yarn.result.startswith("YaRN off")
    assert yarn.inputs["extended_max_model_len"] == 131072
    assert yarn.inputs["extended_request_kv_bytes"] == 131072 * 147_456 == 19_327_352_832
    # vLLM's default is already above the published native length: the line says so, as the context line does
    # (it read "raising 40,960 → 40,960 tokens", then "the published length is vLLM's default" after the context
    # line had said the default is above the published 32,768: issue 32)
    raise_line = next(line for line in choice.lines if line.rule == "published_raise")
    context_line = next(line for line in choice.lines if line.rule == "context")
    assert "vLLM's default 40,960 (above the published native 32,768)" in context_line.note
    assert raise_line.note == "vLLM's default, 40,960 tokens, is already above the published native 32,768: nothing to raise"


def test_yarn_is_switched_on_only_where_allowed(qwen):
    choice = sizing.choose_context(seat(model=str(QWEN3_8B), max_model_len="published", allow_yarn=True), qwen)
    assert choice.max_model_len == 131072 and choice.yarn is not None
    assert sizing.yarn_overrides(choice.yarn, "0.32") == {
        "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    }
    assert sizing.yarn_overrides(choice.yarn, "0.10.2") == {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    }
    with pytest.raises(SeatplanError) as caught:
        sizing.choose_context(seat(model=str(QWEN3_8B), max_model_len=65536), qwen)
    assert caught.value.fix == "set allow_yarn: true for this seat"


def test_yarn_takes_the_smallest_factor_that_reaches_the_length(qwen):
    """issue 32: voices (Qwen3, native 32,768) raised to 65,536 got YaRN ×4 where ×2 reaches it; a larger factor
    interpolates short prompts further for nothing. The command line and the explanation carry ×2."""
    choice = sizing.choose_context(seat(model=str(QWEN3_8B), max_model_len=65536, allow_yarn=True), qwen)
    assert choice.max_model_len == 65536 and choice.yarn is not None and choice.yarn.factor == 2.0
    assert choice.yarn.extended_max_model_len == 65536 and choice.yarn.extended_request_kv_bytes == 65536 * 147_456
    assert sizing.yarn_overrides(choice.yarn, "0.32")["rope_parameters"]["factor"] == 2.0
    line = next(line for line in choice.lines if line.rule == "yarn")
    assert line.inputs["factor"] == 2.0 and line.inputs["attention_scale"] == 1.0693
    assert "YaRN ×2 reaches 65,536 tokens from the native 32,768" in line.note and "9.00 GiB of KV" in line.note
    assert "= 1.069" in line.note


@settings(max_examples=60, deadline=None)
@given(target=st.integers(min_value=40_961, max_value=131_072))
def test_yarn_factor_is_the_smallest_hundredth_reaching_any_length(qwen, target: int):
    """Over the whole range YaRN opens (past the derived 40,960 up to the card's ×4): the factor in hundredths whose
    length, int(original × factor) as vLLM sizes its rotary cache, reaches the length, and one hundredth less does not."""
    choice = sizing.choose_context(seat(model=str(QWEN3_8B), max_model_len=target, allow_yarn=True), qwen)
    assert choice.yarn is not None
    factor = choice.yarn.factor
    assert factor == round(factor, 2) and 1 < factor <= 4.0
    assert int(32768 * factor) >= target > int(32768 * round(factor - 0.01, 2))
    assert choice.yarn.extended_max_model_len == int(32768 * factor)


def test_cap_steps_are_powers_of_two_and_halfway_points():
    assert [sizing.cap_step(n) for n in (1, 1000, 1024, 1025, 1537, 3000, 3073)] == [1, 1024, 1024, 1536, 2048, 3072, 4096]
    # p99 1,500 × 1.25 = 1,875 → 2,048; p99 2,400 × 1.25 = 3,000 → 3,072; never above the context
    assert sizing.propose_output_cap(1500, 1.25, 131072) == 2048
    assert sizing.propose_output_cap(2400, 1.25, 131072) == 3072
    assert sizing.propose_output_cap(100_000, 1.25, 65536) == 65536


def test_declared_cap_is_kept_and_usage_flags_runaways():
    usage = model_usage(
        calls=10_000,
        completion_tokens_p99=40_000,
        runaways=[runaway("batch-client", 9, 262_000, team="research")],
    )
    choice = sizing.choose_output_cap(seat(max_new_tokens=32768), 262144, usage, Policy())
    assert choice.max_new_tokens == 32768
    assert any("below the p99 completion 40,000: ordinary replies would be cut" in warning for warning in choice.warnings)
    assert any("9 runaway replies from batch-client (up to 262,000 tokens); the cap 32,768 stops them" in warning for warning in choice.warnings)


def test_usage_proposes_a_cap_where_none_is_declared():
    usage = model_usage(calls=500, completion_tokens_p99=1500, runaways=[runaway("k", 1, 100_000)])
    choice = sizing.choose_output_cap(seat(), 131072, usage, Policy())
    assert choice.max_new_tokens == 2048
    assert [line.rule for line in choice.lines] == ["output_cap_proposal", "output_cap"]
    assert choice.warnings == ["s: 1 runaway reply from k (up to 100,000 tokens); the cap 2,048 stops them"]
    assert sizing.choose_output_cap(seat(), 131072, None, Policy()).max_new_tokens is None


def test_inflight_check_warns_when_kv_cannot_hold_the_observed_peak(llama):
    kv = sizing.choose_kv_bytes(seat(), llama, 32768, Policy())  # 5 GiB = 2,560 blocks × 16 = 40,960 tokens
    assert kv.capacity.kv_cache_tokens == 40960
    _, warnings = sizing.inflight_check("s", kv.capacity, model_usage(peak_inflight_tokens=30_000, peak_inflight_tokens_without_runaways=20_000))
    assert warnings == []
    _, warnings = sizing.inflight_check("s", kv.capacity, model_usage(peak_inflight_tokens=300_000, peak_inflight_tokens_without_runaways=30_000))
    assert warnings == ["s: KV holds 40,960 tokens; the peak 300,000 in flight was reached only with runaway replies"]
    lines, warnings = sizing.inflight_check("s", kv.capacity, model_usage(peak_inflight_tokens=90_000, peak_inflight_tokens_without_runaways=60_000))
    assert "traffic reached 60,000 in flight" in warnings[0] and lines[0].result == "too small for the observed peak"


def test_a_runaway_tail_is_not_taken_for_ordinary_replies():
    # the fixture spend logs: 17 calls, 3 runaways of ~261k tokens; p99 and p90 are runaways, p50 is 933
    usage = model_usage(
        calls=17,
        completion_tokens_p50=933,
        completion_tokens_p90=260_271,
        completion_tokens_p99=261_025,
        runaway_threshold_tokens=131_072,
        runaways=[runaway("ci-evals", 3, 261_025)],
    )
    assert sizing.completion_tail(usage) == (933, "p50")
    choice = sizing.choose_output_cap(seat(max_new_tokens=32768), 262144, usage, Policy())
    assert not any("ordinary replies would be cut" in warning for warning in choice.warnings)
    # proposal: 933 × 1.25 = 1,166 → 1,536
    assert choice.lines[0].result == "proposed cap 1,536 tokens" and "runaway replies" in choice.lines[0].note


def test_kv_rule_invariants_hold_for_any_length_factor_and_step(llama):
    @settings(max_examples=200, deadline=None)
    @given(
        max_model_len=st.integers(min_value=1, max_value=131072),
        factor=st.floats(min_value=1.0, max_value=3.0, allow_nan=False),
        step=st.sampled_from([1, MiB, 256 * MiB, 512 * MiB, GiB]),
    )
    def check(max_model_len: int, factor: float, step: int) -> None:
        choice = sizing.choose_kv_bytes(seat(kv_factor=factor), llama, max_model_len, Policy(rounding_step_bytes=step))
        kv_bytes = choice.kv_cache_memory_bytes
        request_bytes = llama.request_kv_bytes(max_model_len)
        assert kv_bytes % step == 0
        assert kv_bytes >= request_bytes * factor - 1  # rounded up, never down
        assert kv_bytes >= llama.min_kv_cache_bytes(max_model_len)  # vLLM starts with it
        assert kv_bytes < max(request_bytes * factor, llama.min_kv_cache_bytes(max_model_len)) + step + 1
        assert choice.capacity.fits_one_request

    check()
