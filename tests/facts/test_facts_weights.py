"""Weight bytes: safetensors headers (real files written here by hand), index total_size, estimates."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from kits.facts import facts, fixture_dir, write_config
from kits.paths import FIXTURES
from seatplan.errors import SeatplanError
from seatplan.facts.weights import MXFP4_PADDING, mxfp4_expert_bytes, read_safetensors_header
from seatplan.observe.logparse import parse_log

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 256,
              "max_position_embeddings": 2048, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
# name → shape; all bf16. K/V have 1 head of 16 (hidden 64 / 4 heads).
TINY_TENSORS = {
    "model.embed_tokens.weight": (256, 64),
    "model.layers.0.input_layernorm.weight": (64,),
    "model.layers.0.self_attn.q_proj.weight": (64, 64),
    "model.layers.0.self_attn.k_proj.weight": (16, 64),
    "model.layers.0.self_attn.v_proj.weight": (16, 64),
    "model.layers.0.self_attn.o_proj.weight": (64, 64),
    "model.layers.0.mlp.gate_proj.weight": (128, 64),
    "model.layers.0.mlp.up_proj.weight": (128, 64),
    "model.layers.0.mlp.down_proj.weight": (64, 128),
    "model.norm.weight": (64,),
    "lm_head.weight": (256, 64),
}


def write_safetensors(path: Path, tensors: dict[str, tuple[int, ...]], dtype: str = "BF16", item_bytes: int = 2) -> int:
    """A real safetensors file: 8-byte little-endian header length, JSON header, zero data bytes."""
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = item_bytes
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def _nbytes(shape: tuple[int, ...]) -> int:
    total = 2
    for dim in shape:
        total *= dim
    return total


def test_exact_weights_from_a_single_file(tmp_path):
    directory = write_config(tmp_path / "m", TINY_LLAMA)
    data_bytes = write_safetensors(directory / "model.safetensors", TINY_TENSORS)
    model = facts(directory)
    assert (model.weights_bytes, model.weights_total_bytes, model.weights_exact) == (data_bytes, data_bytes, True)
    assert "safetensors" in model.weights_source


def test_tp_split_follows_vllm_sharding(tmp_path):
    directory = write_config(tmp_path / "m", TINY_LLAMA)
    write_safetensors(directory / "model.safetensors", TINY_TENSORS)
    norms = _nbytes((64,)) * 2
    kv = _nbytes((16, 64)) * 2  # one KV head < TP 2: each rank keeps the whole head
    sharded = sum(_nbytes(shape) for shape in TINY_TENSORS.values()) - norms - kv
    assert facts(directory, tensor_parallel_size=2).weights_bytes == norms + kv + sharded // 2


def test_sharded_checkpoint_with_index(tmp_path):
    directory = write_config(tmp_path / "m", TINY_LLAMA)
    names = list(TINY_TENSORS)
    first = {name: TINY_TENSORS[name] for name in names[:5]}
    second = {name: TINY_TENSORS[name] for name in names[5:]}
    total = write_safetensors(directory / "model-00001-of-00002.safetensors", first)
    total += write_safetensors(directory / "model-00002-of-00002.safetensors", second)
    weight_map = {name: "model-00001-of-00002.safetensors" for name in first} | {
        name: "model-00002-of-00002.safetensors" for name in second}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    assert facts(directory).weights_bytes == total


def test_index_total_size_without_the_shards(tmp_path):
    directory = write_config(tmp_path / "m", json.loads((fixture_dir("mistralai--Mistral-Small-24B-Instruct-2501") / "config.json").read_text()))
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 47_144_806_400},
                                                                        "weight_map": {"a": "model-00001-of-00010.safetensors"}}))
    model = facts(directory)
    assert (model.weights_bytes, model.weights_exact) == (47_144_806_400, True)
    half = facts(directory, tensor_parallel_size=2).weights_bytes
    assert 0.5 < half / 47_144_806_400 < 0.51  # norms stay whole on each rank


@pytest.mark.parametrize(
    "name, published_total_size",
    [
        ("mistralai--Mistral-Small-24B-Instruct-2501", 47_144_806_400),  # index.json total_size (SOURCES.md)
        ("microsoft--Phi-3.5-mini-instruct", 7_642_159_104),
        ("openai--gpt-oss-20b", 13_761_264_768),  # MXFP4 experts
    ],
)
def test_estimates_match_published_checkpoint_sizes(name, published_total_size):
    model = facts(name)
    assert not model.weights_exact
    assert model.weights_total_bytes == pytest.approx(published_total_size, rel=0.01)


def test_quantized_estimates():
    bf16 = facts("Qwen--Qwen3-32B").weights_bytes
    assert 0.5 < facts("Qwen--Qwen3-32B-FP8").weights_bytes / bf16 < 0.56
    awq = facts("fixture--llama-2-7b-awq").weights_bytes
    gptq = facts("fixture--llama-2-7b-gptq").weights_bytes
    assert awq == gptq
    assert 3.4 * 2**30 < awq < 3.9 * 2**30  # 6.5B int4 linears ≈ 0.52 B/param + 16-bit embeddings


def test_tied_embeddings_are_counted_once(tmp_path):
    config = json.loads((fixture_dir("Qwen--Qwen3-4B") / "config.json").read_text())
    tied = facts(write_config(tmp_path / "tied", config)).weights_bytes
    untied = facts(write_config(tmp_path / "untied", {**config, "tie_word_embeddings": False})).weights_bytes
    assert untied - tied == config["vocab_size"] * config["hidden_size"] * 2


def test_header_length_larger_than_the_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    with pytest.raises(SeatplanError) as problem:
        read_safetensors_header(path)
    assert "header length" in problem.value.where and str(path) in problem.value.where


def test_header_just_beyond_the_file(tmp_path):
    path = tmp_path / "model.safetensors"
    raw = b'{"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}'
    path.write_bytes(struct.pack("<Q", len(raw) + 1) + raw)
    with pytest.raises(SeatplanError, match="declares a"):
        read_safetensors_header(path)


def test_data_offsets_beyond_the_file(tmp_path):
    path = tmp_path / "model.safetensors"
    raw = b'{"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 8]}}'
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    with pytest.raises(SeatplanError, match="data_offsets") as problem:
        read_safetensors_header(path)
    assert "'a'" in problem.value.where


@pytest.mark.parametrize("content", [b"", b"\x01\x02", struct.pack("<Q", 4) + b"nope"])
def test_truncated_or_garbage_files(tmp_path, content):
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(SeatplanError):
        read_safetensors_header(path)


def test_dangling_cache_symlink_falls_back_to_the_estimate(tmp_path):
    directory = write_config(tmp_path / "m", TINY_LLAMA)
    (directory / "model.safetensors").symlink_to(tmp_path / "blobs" / "not-yet-downloaded")
    model = facts(directory)
    assert not model.weights_exact and model.weights_source == "estimated from config.json"


@pytest.mark.parametrize(
    "name, card_params_billion",
    [  # model-card totals quoted in tests/fixtures/models/SOURCES.md
        ("Qwen--Qwen3-8B", 8.2), ("Qwen--Qwen3-30B-A3B", 30.5), ("Qwen--Qwen2.5-72B", 72.7), ("Qwen--Qwen2.5-7B", 7.61),
        ("Qwen--Qwen3-4B", 4.0), ("deepseek-ai--DeepSeek-V3", 671), ("meta-llama--Llama-3.2-3B-Instruct", 3.21),
        ("openai--gpt-oss-120b", 117), ("openai--gpt-oss-20b", 21), ("Qwen--Qwen3-Next-80B-A3B-Thinking", 80),
        ("microsoft--Phi-3.5-mini-instruct", 3.8), ("google--gemma-3-27b-it", 27),
    ],
)
def test_parameter_counts_match_model_cards(name, card_params_billion):
    assert facts(name).shape.total_params / 1e9 == pytest.approx(card_params_billion, rel=0.02)


def test_moe_active_parameters():
    shape = facts("Qwen--Qwen3-30B-A3B").shape
    assert shape.active_params / 1e9 == pytest.approx(3.3, rel=0.03)  # card: 3.3B activated
    assert facts("deepseek-ai--DeepSeek-V3").shape.active_params / 1e9 == pytest.approx(37, rel=0.03)


def test_log_s04_qwen3_moe_tp4_weights():
    """S04: a ~30B bf16 Qwen3 at TP 4 loaded 14.2474 GiB per rank; Qwen3-30B-A3B's estimate lands within 0.5%."""
    per_rank = facts("Qwen--Qwen3-30B-A3B", tensor_parallel_size=4).weights_bytes
    assert per_rank / 2**30 == pytest.approx(14.2474, rel=0.005)


# ------------------------------------------------------------------ as loaded, against every loading line of the excerpts

def _excerpt_weights() -> dict[str, int]:
    """Excerpt → the weights figure its "Model loading took" / "Loading model weights took" line states (bytes)."""
    text = (FIXTURES / "vllm-startup-logs.txt").read_text()
    parts = re.split(r"^### (S\d+).*$", text, flags=re.M)
    found = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = [line for line in body.splitlines() if not line.startswith("#|")]
        weights = [boot.weights_bytes for boot in parse_log(lines, source=name, year=2025).boots if boot.weights_bytes]
        if weights:
            found[name] = weights[0]
    return found


def _w8a8_llama_70b(tmp_path: Path) -> Path:
    """S13's neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8: Llama-3.3-70B's architecture (the same
    shapes as 3.1-70B) with that checkpoint's compressed-tensors INT8 quantization_config."""
    config = json.loads((fixture_dir("meta-llama--Llama-3.3-70B-Instruct") / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"],
                                      "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
                                      "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}}
    return write_config(tmp_path / "llama-3.1-70b-w8a8", config)


# Excerpt → (model config, TP, MXFP4 backend the log names). Excerpts without a public config here are listed
# with the reason, so a new excerpt with a loading line cannot be skipped silently.
LOADING_LINES = {
    "S01": ("openai--gpt-oss-120b", 1),      # H100, "Weight-only FP4 compression ... Marlin kernel"
    "S04": ("Qwen--Qwen3-30B-A3B", 4),        # "a Qwen3 checkpoint served with TP=4", ~30B bf16
    "S12": ("meta-llama--Llama-3.1-8B-Instruct", 1),
    "S13": ("w8a8", 1),
}
NO_CONFIG_HERE = {"S07": "Qwen3.8-27B NVFP4: no public config.json among the fixtures, and NVFP4 is not modelled"}


def test_every_loading_line_is_checked_or_explained():
    assert set(_excerpt_weights()) == set(LOADING_LINES) | set(NO_CONFIG_HERE)


@pytest.mark.parametrize("excerpt", sorted(LOADING_LINES))
def test_as_loaded_matches_what_vllm_logged(excerpt, tmp_path):
    name, tp = LOADING_LINES[excerpt]
    model = _w8a8_llama_70b(tmp_path) if name == "w8a8" else name
    logged = _excerpt_weights()[excerpt]
    result = facts(model, tensor_parallel_size=tp)
    assert result.weights_bytes == pytest.approx(logged, rel=0.005), (result.weights_bytes / 2**30, logged / 2**30)
    assert result.weights_stored_bytes is not None and result.weights_rule


def test_mxfp4_padding_per_backend_and_tp():
    """gpt-oss-120b: hidden 2880, expert intermediate 2880, 128 experts × 36 layers (vLLM mxfp4.py create_weights)."""
    one_rank = {tp: facts("openai--gpt-oss-120b", tensor_parallel_size=tp) for tp in (1, 2, 4, 8)}
    stored = {tp: result.weights_stored_bytes for tp, result in one_rank.items()}
    loaded = {tp: result.weights_bytes for tp, result in one_rank.items()}
    # The checkpoint's MXFP4 layout: 60.77 GiB of which 56.80 GiB experts (blocks, scales, biases).
    assert 36 * mxfp4_expert_bytes(128, 2880, 2880) == 60_993_699_840
    assert stored[1] / 2**30 == pytest.approx(60.77, abs=0.01)
    # Marlin pads hidden 2880 → 3072 and I/TP to 128: 2880 → 2944, 1440 → 1536, 720 → 768, 360 → 384.
    for tp, padded in ((1, 2944), (2, 1536), (4, 768), (8, 384)):
        experts_loaded = 36 * mxfp4_expert_bytes(128, 3072, padded)
        experts_stored = 36 * mxfp4_expert_bytes(128, 2880, 2880) / tp
        assert loaded[tp] - stored[tp] == pytest.approx(experts_loaded - experts_stored, abs=2)
    # The share of padding grows with TP (the "worst at TP 4"): 8.4 % at TP 1, 13 % at TP 4.
    assert loaded[1] / stored[1] == pytest.approx(1.084, abs=0.005)
    assert loaded[4] / stored[4] == pytest.approx(1.130, abs=0.005)
    # Triton pads I to 64 only and leaves hidden alone: 2880 is already a multiple, so nothing is added at TP 1.
    assert MXFP4_PADDING["triton"] == (64, 1)
    assert "marlin" in one_rank[4].weights_rule and "720→768" in one_rank[4].weights_rule


def test_unquantized_weights_load_as_stored():
    result = facts("Qwen--Qwen3-8B", tensor_parallel_size=2)
    assert result.weights_bytes == result.weights_stored_bytes and "as they are" in result.weights_rule
