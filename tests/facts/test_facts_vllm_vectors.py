"""The figures vLLM itself produced (VLLM.md §2.3 worked example, §2.4 test vectors, part 1's CPU
boot) and the start-up log samples in tests/fixtures/vllm-startup-logs.txt whose model config is in
the fixtures, reproduced to the token."""

from __future__ import annotations

import re

import pytest

from kits.facts import GiB, facts, write_config
from kits.paths import FIXTURES
from seatplan.facts.kv_cache import capacity, group_layers
from seatplan.facts.kv_specs import FullAttentionSpec, SlidingWindowSpec
from seatplan.facts.models import EngineSettings
from seatplan.units import format_gib

LLAMA = "meta-llama--Llama-3.1-8B"
QWEN3_NEXT = "Qwen--Qwen3-Next-80B-A3B-Thinking"
GPT_OSS_120B = "openai--gpt-oss-120b"


def _figures(model, budget, length):
    capacity = model.capacity(budget, length)
    return capacity.num_blocks, capacity.kv_cache_tokens, round(capacity.max_concurrency, 2)


@pytest.mark.parametrize(
    "name, settings, budget, length, expected",
    [
        (LLAMA, {}, 20 * GiB, 131072, (10240, 163_840, 1.25)),
        (LLAMA, {}, 20 * GiB, 4001, (10240, 163_228, 40.80)),
        ("Qwen--Qwen3-14B", {}, int(6.5088 * GiB), 32768, (2666, 42_656, 1.30)),
        ("deepseek-ai--DeepSeek-V3", {}, 40 * GiB, 163840, (9549, 611_136, 3.73)),
        (GPT_OSS_120B, {}, 20 * GiB, 131072, (36408, 517_297, 3.95)),
        (GPT_OSS_120B, {"async_scheduling": False}, 20 * GiB, 131072, (36408, 547_695, 4.18)),
        (GPT_OSS_120B, {"hybrid_kv_cache_manager": False}, 20 * GiB, 131072, (18204, 291_264, 2.22)),
        ("google--gemma-3-27b-it", {}, 30 * GiB, 131072, (24576, 218_744, 1.67)),
        (QWEN3_NEXT, {"prefix_caching": False}, 20 * GiB, 262144, (1606, 868_047, 3.31)),
        (QWEN3_NEXT, {"prefix_caching": True}, 20 * GiB, 262144, (1606, 862_711, 3.29)),
    ],
)
def test_vllm_032_test_vectors(name, settings, budget, length, expected):
    assert _figures(facts(name, **settings), budget, length) == expected


def test_gemma3_groups_and_padding_layers():
    model = facts("google--gemma-3-27b-it")
    sliding = sorted((len(g.layers) for g in model.layer_groups if g.kind == "sliding_window"), reverse=True)
    full = [len(g.layers) for g in model.layer_groups if g.kind == "full_attention"]
    assert sliding == [9, 9, 9, 9, 8, 8] and full == [10]
    assert model.padding_layers == 8
    assert "Add 8 padding layers, may waste at most 15.38% KV cache memory" in model.notes


def test_gpt_oss_groups():
    model = facts(GPT_OSS_120B)
    assert sorted((g.kind, len(g.layers)) for g in model.layer_groups) == [("full_attention", 18), ("sliding_window", 18)]
    merged = facts(GPT_OSS_120B, hybrid_kv_cache_manager=False)
    assert [(g.kind, len(g.layers)) for g in merged.layer_groups] == [("full_attention", 36)]


def test_qwen3_next_worked_example():
    model = facts(QWEN3_NEXT, prefix_caching=False)
    assert model.block_size == 544
    assert sorted((g.kind, len(g.layers)) for g in model.layer_groups) == [("full_attention", 12)] + [("mamba", 12)] * 3
    assert model.layer_groups[0].page_bytes == 1_114_112
    assert model.bytes_per_block == 12 * 1_114_112 == 13_369_344
    assert model.blocks_per_request(262144) == 485
    assert any("Setting attention block size to 544 tokens" in note for note in model.notes)
    assert any("Padding mamba page size by 1.49%" in note for note in model.notes)


def test_qwen3_next_old_token_formula():
    """0.10.2 - 0.20 printed (num_blocks // num_groups) x block size: 401 x 544."""
    model = facts(QWEN3_NEXT, prefix_caching=False, vllm_version="0.20")
    assert model.capacity(20 * GiB, 262144).kv_cache_tokens == 218_144


def test_sliding_layers_with_half_the_heads_get_a_larger_block():
    """§2.4 row: full layers 8 KV heads, SWA-4096 layers 4 KV heads: SWA block raised to 32."""
    full = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, head_size_v=128, dtype_bytes=2)
    sliding = SlidingWindowSpec(block_size=16, num_kv_heads=4, head_size=128, head_size_v=128, dtype_bytes=2,
                                sliding_window=4096)
    settings = EngineSettings()
    plan = group_layers([full, sliding] * 4, settings)
    assert {g.kind: g.block_size for g in plan.groups} == {"full_attention": 16, "sliding_window": 32}

    result = capacity(plan.groups, plan.bytes_per_block, 4 * GiB, 32768, settings)
    assert (result.num_blocks, result.kv_cache_tokens, round(result.max_concurrency, 2)) == (16384, 199_654, 6.09)


def test_one_gib_is_not_enough_for_llama_at_128k():
    model = facts(LLAMA)
    capacity = model.capacity(1 * GiB, 131072)
    assert not capacity.fits_one_request
    assert capacity.estimated_max_model_len == 8176 == model.max_model_len_fit(1 * GiB, upper_len=131072)
    assert "(16.0 GiB KV cache is needed, which is larger than the available KV cache memory (1.0 GiB)" in capacity.log_line
    assert "the estimated maximum model length is 8176." in capacity.log_line


def test_minimum_budget_is_one_request_plus_the_null_block():
    model = facts(LLAMA)
    minimum = model.min_kv_cache_bytes(131072)
    assert minimum == (8192 + 1) * 2 * 1024 * 1024
    assert model.capacity(minimum, 131072).fits_one_request
    assert not model.capacity(minimum - 1, 131072).fits_one_request
    assert model.request_kv_bytes(131072) == 16 * GiB


def test_cpu_tiny_qwen3_boot(tmp_path):
    """VLLM.md part 1: 2-layer Qwen3 (1 KV head, head_dim 64, bf16) on the CPU engine, 64 MiB, 4096."""
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 256,
              "vocab_size": 512, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
    model = facts(write_config(tmp_path / "tiny", config), device="cpu", vllm_version="0.32.0")
    capacity = model.capacity(67108864, 4096)
    assert model.block_size == 128
    assert (capacity.num_blocks, capacity.kv_cache_tokens) == (1024, 131_072)
    assert capacity.log_line == "CPU KV cache size: 131,072 tokens, Maximum concurrency for 4,096 tokens per request: 32.00x"


# --- tests/fixtures/vllm-startup-logs.txt -------------------------------------------------------


def _log_block(sample: str) -> str:
    text = (FIXTURES / "vllm-startup-logs.txt").read_text()
    return text.split(f"### {sample}")[1].split("\n### ")[0]


def test_log_s02_qwen3_14b():
    block = _log_block("S02")
    available_gib = re.search(r"Available KV cache memory: ([\d.]+) GiB", block)[1]
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", block)[1].replace(",", ""))
    concurrency = re.search(r"per request: ([\d.]+)x", block)[1]
    model = facts("Qwen--Qwen3-14B", vllm_version="0.10.2")
    num_blocks = tokens // 16
    capacity = model.capacity(num_blocks * model.bytes_per_block, 32768)
    assert format_gib(num_blocks * model.bytes_per_block) == available_gib
    assert capacity.kv_cache_tokens == tokens == 42_656
    assert f"{capacity.max_concurrency:.2f}" == concurrency
    assert "GPU KV cache size: 42,656 tokens\nMaximum concurrency for 32,768 tokens per request: 1.30x" == capacity.log_line


def test_log_s10_single_group_figures_in_0_9_2():
    """S10's model is unknown, but any single full-attention group at block 16 prints the same figures."""
    model = facts(LLAMA, vllm_version="0.9.2")
    capacity = model.capacity(29220 * model.bytes_per_block, 5000)
    assert capacity.kv_cache_tokens == 467_520
    assert f"{capacity.max_concurrency:.2f}" == "93.35"


def test_log_s13_llama_70b_geometry_in_the_0_8_formula():
    """S13 is Llama-3.1-70B (same KV geometry as the Llama-3.3-70B fixture): 1381 blocks at 2048 → 10.79x."""
    model = facts("meta-llama--Llama-3.3-70B-Instruct", vllm_version="0.8.0")
    capacity = model.capacity(1381 * model.bytes_per_block, 2048)
    assert capacity.num_blocks == 1381
    assert f"{capacity.max_concurrency:.2f}" == "10.79"


def test_log_s12_llama_8b_blocks_and_tokens():
    """S12 (V0, Llama-3.1-8B-Instruct): 1478 blocks of 16 = 23,648 tokens, 2.89 GiB, 0.82x at 29,000."""
    model = facts("meta-llama--Llama-3.1-8B-Instruct", vllm_version="0.8.0")
    capacity = model.capacity(1478 * model.bytes_per_block, 29000)
    assert format_gib(1478 * model.bytes_per_block) == "2.89"
    assert capacity.kv_cache_tokens == 23_648
    assert f"{capacity.max_concurrency:.2f}" == "0.82"


def test_log_s11_error_wording_before_0_14():
    """S11 (mid-2025, a TPU backend): the 128K Llama-3.1-8B-sized request needs 16.00 GiB. The wording,
    the "models's" typo and two-decimal GiB figures match; the estimate is the TPU's own (other page size)."""
    quoted = re.search(r"ValueError: (To serve .*?\(0\.71 GiB\)\.)", _log_block("S11"))[1]
    capacity = facts(LLAMA, vllm_version="0.10.1").capacity(int(0.71 * GiB), 131072)
    assert capacity.log_line.startswith(quoted)
    assert not capacity.fits_one_request


def test_error_wording_0_9_0_has_no_estimate():
    capacity = facts(LLAMA, vllm_version="0.9.0").capacity(1 * GiB, 131072)
    assert capacity.log_line.endswith("Based on the available memory,")


# --- differences between vLLM eras (VLLM.md §1.2, §2.1, §2.3, §4) --------------------------------


def test_in_flight_tokens_doubled_only_since_0_27():
    """Async scheduling keeps two batches in flight from 0.27 on; 0.26 counted one."""
    assert _figures(facts(GPT_OSS_120B, vllm_version="0.26"), 20 * GiB, 131072) == (36408, 547_695, 4.18)
    assert _figures(facts(GPT_OSS_120B, vllm_version="0.27"), 20 * GiB, 131072) == (36408, 517_297, 3.95)


def test_no_hybrid_allocator_before_0_9_1():
    assert _figures(facts(GPT_OSS_120B, vllm_version="0.9.0"), 20 * GiB, 131072) == (18204, 291_264, 2.22)


def test_token_figure_changed_in_0_21():
    """Gemma-3: 7 groups; 0.20 printed (24576 // 7) x 16, 0.21 int(concurrency x max_model_len) with one
    batch in flight: 8192 + 6 x (cdiv(1023 + 8192, 16) + 1) = 11,654 blocks per request."""
    assert facts("google--gemma-3-27b-it", vllm_version="0.20").capacity(30 * GiB, 131072).kv_cache_tokens == 3510 * 16
    capacity = facts("google--gemma-3-27b-it", vllm_version="0.21").capacity(30 * GiB, 131072)
    assert capacity.blocks_per_request == 11_654
    assert capacity.kv_cache_tokens == 24576 * 131072 // 11_654


@pytest.mark.parametrize("version, group_size", [("0.11", 4), ("0.12", 4), ("0.17", 4), ("0.18", 5), ("0.32", 5)])
def test_group_size_rule_by_era(tmp_path, version, group_size):
    """5 sliding + 4 full layers: groups of the larger bucket only when 5 < ratio x 4 (1.25 until 0.17, then 1.5)."""
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 512, "num_hidden_layers": 9,
              "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
              "layer_types": ["sliding_attention"] * 5 + ["full_attention"] * 4, "max_position_embeddings": 8192}
    model = facts(write_config(tmp_path / "m", config), vllm_version=version)
    assert model.bytes_per_block == group_size * 16 * 2 * 8 * 64 * 2


def test_start_up_check_sets_the_null_block_aside_since_0_29():
    assert facts(LLAMA, vllm_version="0.28").min_kv_cache_bytes(131072) == 16 * GiB
    assert facts(LLAMA, vllm_version="0.29").min_kv_cache_bytes(131072) == 16 * GiB + 2 * 1024 * 1024


def test_log_line_format_by_era():
    line_030 = facts(LLAMA, vllm_version="0.30").capacity(20 * GiB, 131072).log_line
    assert line_030 == "GPU KV cache size: 163,840 tokens, Maximum concurrency for 131,072 tokens per request: 1.25x"
    cpu_030 = facts(LLAMA, vllm_version="0.30", device="cpu").capacity(20 * GiB, 131072).log_line
    assert cpu_030.startswith("GPU KV cache size")  # the device word arrived in 0.31


def test_budget_below_one_block_has_no_memory_for_blocks():
    model = facts(LLAMA)
    capacity = model.capacity(model.bytes_per_block, 4096)  # 0.29+: the only block is the null block
    assert (capacity.num_blocks, capacity.fits_one_request, capacity.estimated_max_model_len) == (1, False, 0)
    assert capacity.log_line.startswith("No available memory for the cache blocks.")
