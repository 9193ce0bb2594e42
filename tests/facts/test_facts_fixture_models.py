"""Every real config.json in tests/fixtures/models loads, and its KV bytes per token match a hand derivation.

Per attention layer and token: ``2 (K and V) x KV heads x head_dim x dtype bytes`` (MLA: one latent of
``kv_lora_rank + qk_rope_head_dim``). bf16 = 2 bytes; the two Llama-2 quant fixtures are float16.
"""

from __future__ import annotations

import json

import pytest

from kits.facts import FIXTURE_MODEL_DIRS, GiB, facts
from seatplan.facts.architecture import AttentionLayer, describe

EXPECTED_KV_BYTES_PER_TOKEN = {
    "Qwen--Qwen2.5-72B": 80 * 2 * 8 * (8192 // 64) * 2,
    "Qwen--Qwen2.5-7B": 28 * 2 * 4 * (3584 // 28) * 2,
    "Qwen--Qwen2.5-7B-Instruct": 28 * 2 * 4 * (3584 // 28) * 2,
    "Qwen--Qwen2.5-VL-7B-Instruct": 28 * 2 * 4 * (3584 // 28) * 2,
    "Qwen--Qwen3-0.6B": 28 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-14B": 40 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-30B-A3B": 48 * 2 * 4 * 128 * 2,
    "Qwen--Qwen3-30B-A3B-FP8": 48 * 2 * 4 * 128 * 2,  # fp8 weights, KV still bf16
    "Qwen--Qwen3-30B-A3B-Instruct-2507": 48 * 2 * 4 * 128 * 2,
    "Qwen--Qwen3-32B": 64 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-32B-FP8": 64 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-4B": 36 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-4B-Instruct-2507": 36 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-8B": 36 * 2 * 8 * 128 * 2,
    "Qwen--Qwen3-Next-80B-A3B-Thinking": 12 * 2 * 2 * 256 * 2,  # only every 4th layer is attention
    "THUDM--glm-4-9b": 40 * 2 * 2 * (4096 // 32) * 2,  # multi_query_group_num 2
    "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B": 64 * 2 * 8 * (5120 // 40) * 2,
    "deepseek-ai--DeepSeek-V3": 61 * (512 + 64) * 2,  # MLA latent, no K/V pair, no heads
    "fixture--llama-2-7b-awq": 32 * 2 * 32 * 128 * 2,
    "fixture--llama-2-7b-gptq": 32 * 2 * 32 * 128 * 2,  # no num_key_value_heads: all 32 heads
    "google--gemma-3-27b-it": 62 * 2 * 16 * 128 * 2,
    "meta-llama--Llama-3.1-8B": 32 * 2 * 8 * 128 * 2,
    "meta-llama--Llama-3.1-8B-Instruct": 32 * 2 * 8 * 128 * 2,
    "meta-llama--Llama-3.2-3B-Instruct": 28 * 2 * 8 * 128 * 2,
    "meta-llama--Llama-3.3-70B-Instruct": 80 * 2 * 8 * 128 * 2,
    "microsoft--Phi-3.5-mini-instruct": 32 * 2 * 32 * (3072 // 32) * 2,
    "mistralai--Mistral-7B-v0.1": 32 * 2 * 8 * 128 * 2,
    "mistralai--Mistral-Small-24B-Instruct-2501": 40 * 2 * 8 * 128 * 2,
    "openai--gpt-oss-120b": 36 * 2 * 8 * 64 * 2,
    "openai--gpt-oss-20b": 24 * 2 * 8 * 64 * 2,
}


def test_every_fixture_has_a_pinned_figure():
    assert {path.name for path in FIXTURE_MODEL_DIRS} == set(EXPECTED_KV_BYTES_PER_TOKEN)


@pytest.mark.parametrize("model_dir", FIXTURE_MODEL_DIRS, ids=lambda path: path.name)
def test_fixture_kv_bytes_per_token(model_dir):
    assert facts(model_dir).kv_bytes_per_token == EXPECTED_KV_BYTES_PER_TOKEN[model_dir.name]


@pytest.mark.parametrize("model_dir", FIXTURE_MODEL_DIRS, ids=lambda path: path.name)
def test_fixture_facts_are_sane(model_dir):
    model = facts(model_dir)
    kv_layers = [layer for layer in describe(json.loads((model_dir / "config.json").read_text()), "config.json").layers]
    grouped = sorted(layer for group in model.layer_groups for layer in group.layers)
    assert grouped == list(range(len(kv_layers))), "every KV layer belongs to exactly one group"
    for group in model.layer_groups:
        assert (len(group.layers) + group.padding_layers) * group.page_bytes == model.bytes_per_block
    assert model.block_size in (16, 64, 544)
    assert 0 < model.weights_bytes < 2 * 10**12
    assert 2048 <= model.max_context_derived <= 1 << 20
    assert model.max_context_default <= model.max_context_derived
    assert model.shape.total_params > 10**8 and model.shape.num_layers >= 24
    capacity = model.capacity(20 * GiB, 4096)
    assert capacity.num_blocks == 20 * GiB // model.bytes_per_block
    assert capacity.max_concurrency > 0 and capacity.kv_cache_tokens > 0
    json.dumps(model.model_dump(mode="json"))


@pytest.mark.parametrize("model_dir", FIXTURE_MODEL_DIRS, ids=lambda path: path.name)
def test_fixture_kv_halves_with_tp2_and_fp8(model_dir):
    model = facts(model_dir)
    layout = describe(json.loads((model_dir / "config.json").read_text()), "config.json")
    attention = [layer for layer in layout.layers if isinstance(layer, AttentionLayer)]
    if attention[0].kind == "mla":
        assert facts(model_dir, tensor_parallel_size=2).kv_bytes_per_token == model.kv_bytes_per_token
    elif attention[0].num_kv_heads >= 2:
        assert facts(model_dir, tensor_parallel_size=2).kv_bytes_per_token * 2 == model.kv_bytes_per_token
    assert facts(model_dir, kv_cache_dtype="fp8").kv_bytes_per_token * model.kv_dtype_bytes == model.kv_bytes_per_token
