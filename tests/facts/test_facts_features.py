"""`seatplan model MODEL --speculative DRAFT --lora RANKxN` (issue 47): the draft's layers join the KV groups and its
weights the weights; LoRA's slots are counted in the weights; a malformed option is refused by name."""

from __future__ import annotations

import json
import math
import struct

import pytest

from kits.cli import run_cli
from kits.plan import MODELS
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings, SpeculativeSettings

TARGET, DRAFT = MODELS / "Qwen--Qwen3-8B", MODELS / "Qwen--Qwen3-0.6B"


def _model(capsys, monkeypatch, *options: str) -> dict:
    result = run_cli(capsys, monkeypatch, "model", str(TARGET), "--kv-cache-memory-bytes", "20GiB", "--max-model-len", "32K", "--json", *options)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def test_a_draft_joins_the_kv_and_the_weights(capsys, monkeypatch):
    plain, draft = _model(capsys, monkeypatch), load_model_facts(DRAFT, EngineSettings())
    both = _model(capsys, monkeypatch, "--speculative", str(DRAFT), "--num-speculative-tokens", "4")
    speculative = both["speculative"]
    assert speculative["method"] == "draft_model" and speculative["num_speculative_tokens"] == 4
    assert speculative["num_layers"] == len(draft.layer_groups[0].layers)
    assert both["kv_bytes_per_token"] == plain["kv_bytes_per_token"] + draft.kv_bytes_per_token == plain["kv_bytes_per_token"] + speculative["kv_bytes_per_token"]
    assert both["weights_bytes"] == plain["weights_bytes"] + draft.weights_bytes
    assert both["num_blocks"] < plain["num_blocks"]
    ngram = _model(capsys, monkeypatch, "--speculative", "ngram")
    assert ngram["speculative"]["method"] == "ngram" and ngram["num_blocks"] == plain["num_blocks"]


def test_lora_slots_are_counted_and_a_bad_spelling_is_refused(capsys, monkeypatch):
    plain = _model(capsys, monkeypatch)
    lora = _model(capsys, monkeypatch, "--lora", "64x4")
    assert lora["lora"]["max_lora_rank"] == 64 and lora["lora"]["max_loras"] == 4
    assert lora["weights_bytes"] == plain["weights_bytes"] + lora["lora"]["slot_bytes"] > plain["weights_bytes"]
    assert lora["num_blocks"] == plain["num_blocks"]  # a pinned KV budget is the KV budget
    for bad in ("64", "x4", "0x4", "64x", "5x2"):
        result = run_cli(capsys, monkeypatch, "model", str(TARGET), "--lora", bad)
        assert result.exit_code != 0 and "--lora" in result.stderr, bad


def _checkpoint_with_mtp(directory, layers: int, mtp_layers: int):
    """A Qwen3-shaped checkpoint whose safetensors also hold ``mtp_layers`` MTP layers after its decoder layers."""
    hidden, heads, kv, head_dim, inter, vocab = 128, 4, 2, 32, 256, 256
    config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": hidden, "intermediate_size": inter,
              "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
              "vocab_size": vocab, "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "num_nextn_predict_layers": mtp_layers}
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for layer in range(layers + mtp_layers):
        prefix = f"model.layers.{layer}."
        shapes |= {prefix + "self_attn.q_proj.weight": [heads * head_dim, hidden], prefix + "self_attn.k_proj.weight": [kv * head_dim, hidden],
                   prefix + "self_attn.v_proj.weight": [kv * head_dim, hidden], prefix + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                   prefix + "mlp.down_proj.weight": [hidden, inter], prefix + "input_layernorm.weight": [hidden]}
    header, offset = {}, 0
    for name, shape in shapes.items():
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * math.prod(shape)]}
        offset += 2 * math.prod(shape)
    text = json.dumps(header).encode()
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))
    return directory, {name: 2 * math.prod(shape) for name, shape in shapes.items()}


def test_mtp_layers_are_left_out_unless_the_method_uses_them(tmp_path):
    for layers, mtp_layers in ((2, 1), (3, 2)):
        model, sizes = _checkpoint_with_mtp(tmp_path / f"m{layers}", layers, mtp_layers)
        mtp_bytes = sum(size for name, size in sizes.items() if any(name.startswith(f"model.layers.{layers + i}.") for i in range(mtp_layers)))
        plain = load_model_facts(model, EngineSettings())
        assert plain.weights_bytes == sum(sizes.values()) - mtp_bytes  # vLLM's main model skips them as it loads
        with_mtp = load_model_facts(model, EngineSettings(speculative=SpeculativeSettings(method="mtp", num_speculative_tokens=1)))
        assert with_mtp.speculative is not None and with_mtp.speculative.num_layers == mtp_layers
        assert with_mtp.weights_bytes == sum(sizes.values())
        assert with_mtp.kv_bytes_per_token == plain.kv_bytes_per_token * (layers + mtp_layers) // layers
    with pytest.raises(SeatplanError) as caught:
        load_model_facts(TARGET, EngineSettings(speculative=SpeculativeSettings(method="mtp", num_speculative_tokens=1)))
    assert "num_nextn_predict_layers" in caught.value.message
