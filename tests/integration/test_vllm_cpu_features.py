"""Speculative decoding's KV share and LoRA's slots against the real vLLM 0.32 CPU engine (issue 47): tiny random-weight
Qwen3 models the test builds, booted with a draft model (two geometries: the target's own, and one whose per-token KV
differs) and with an n-gram speculator, each compared with the engine's ``vllm:cache_config_info`` to the block; and
vLLM's own engine started in-process with LoRA (two ranks), whose allocated A/B stacks and KV blocks are read off the
loaded model and its cache config (``vllm_memory_probe.py``: the CPU build reports no memory figure of its own; its
linear layers keep their weights packed for the CPU kernels, not as parameters, so the model's own weights are not
compared here).

seatplan's side goes through the fleet seat's path: ``engine.settings.engine_settings`` reads the seat's ``speculative``
key (or ``--speculative-config`` in its extra_args), ``facts.api.load_model_facts`` joins the draft's layers to the
target's. The CPU build logs no memory figure for the weights it loads ("Loading weights took 0.25 seconds"), so the
draft's weights are held to its safetensors file instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from kits.parts import require
from kits.tiny_models import TinyModelSpec, tiny_model_dir
from kits.vllm_engine import VLLM_VERSION, EngineConfig, boot_engine, boot_log_dir, vllm_installed, vllm_python, vllm_venv
from seatplan.documents.fleet import SeatSpec
from seatplan.engine.settings import EngineHost, engine_settings
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import ModelFacts

pytestmark = pytest.mark.vllm

MiB = 1 << 20
KV_BYTES = 64 * MiB  # the measured case: 64 blocks plain, 42 with a draft of the target's geometry
MAX_MODEL_LEN = 4096


def _qwen3(name: str, layers: int, kv_heads: int, head_dim: int) -> TinyModelSpec:
    return TinyModelSpec(
        name=name, mimics=f"Qwen3 ({layers} layers, {kv_heads} KV heads × {head_dim})",
        config={"vocab_size": 512, "tie_word_embeddings": False, "max_position_embeddings": 8192,
                "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
                "num_hidden_layers": layers, "num_attention_heads": 8, "num_key_value_heads": kv_heads, "head_dim": head_dim},
    )


TARGET = _qwen3("spec-target", 2, 8, 128)
DRAFT_SAME = _qwen3("spec-draft-same", 1, 8, 128)  # 4,096 B of KV per token: the target's per-layer page
DRAFT_SMALL = _qwen3("spec-draft-small", 1, 2, 64)  # 512 B per token: another page size in the same group


@pytest.fixture(scope="module")
def models() -> dict[str, Path]:
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    return {spec.name: tiny_model_dir(spec, vllm_python()) for spec in (TARGET, DRAFT_SAME, DRAFT_SMALL)}


def _seat(models: dict[str, Path], **keys: object) -> SeatSpec:
    return SeatSpec.model_validate({"name": "spec", "model": str(models[TARGET.name]), "dtype": "bfloat16", **keys})


def _facts(models: dict[str, Path], seat: SeatSpec) -> ModelFacts:
    settings = engine_settings(seat, EngineHost(device="cpu"), VLLM_VERSION)
    return load_model_facts(models[TARGET.name], settings)


def _boot_and_compare(name: str, models: dict[str, Path], facts: ModelFacts, extra_args: list[str]) -> dict[str, str]:
    config = EngineConfig(name=name, model_dir=models[TARGET.name], max_model_len=MAX_MODEL_LEN, kv_cache_memory_bytes=KV_BYTES,
                          probe="completion", extra_args=tuple(extra_args))
    boot = boot_engine(vllm_python(), config, boot_log_dir())
    labels = boot.cache_config_labels
    predicted = facts.capacity(KV_BYTES, MAX_MODEL_LEN)
    assert (int(labels["block_size"]), int(labels["num_gpu_blocks"]), int(labels["kv_cache_size_tokens"])) == (
        facts.block_size, predicted.num_blocks, predicted.kv_cache_tokens), boot.log_path
    assert float(labels["kv_cache_max_concurrency"]) == pytest.approx(predicted.max_concurrency, abs=0.01)
    return labels


@pytest.mark.parametrize("draft", [DRAFT_SAME, DRAFT_SMALL], ids=lambda spec: spec.name)
def test_a_draft_models_layers_share_the_pinned_kv_to_the_block(models, draft):
    seat = _seat(models, speculative={"method": "draft_model", "model": str(models[draft.name]), "num_speculative_tokens": 2})
    facts = _facts(models, seat)
    plain = load_model_facts(models[TARGET.name], engine_settings(_seat(models), EngineHost(device="cpu"), VLLM_VERSION))
    assert facts.speculative is not None and facts.speculative.num_layers == 1
    assert facts.kv_bytes_per_token == plain.kv_bytes_per_token + facts.speculative.kv_bytes_per_token
    # the draft's weights as its one safetensors file holds them (bf16, one rank)
    stored = (models[draft.name] / "model.safetensors").stat().st_size
    assert 0 < stored - facts.speculative.weights_bytes < 64 * 1024  # the file's header and its padding
    assert facts.weights_bytes == plain.weights_bytes + facts.speculative.weights_bytes
    config = {"method": "draft_model", "model": str(models[draft.name]), "num_speculative_tokens": 2}
    _boot_and_compare(f"spec-{draft.name}", models, facts, ["--speculative-config", json.dumps(config)])
    if draft is DRAFT_SAME:  # the figures: 12,288 B per token, 42 blocks of 128 tokens in 64 MiB
        assert (facts.kv_bytes_per_token, facts.capacity(KV_BYTES, MAX_MODEL_LEN).num_blocks) == (12288, 42)


def test_an_ngram_speculator_leaves_the_blocks_as_they_are(models):
    config = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    seat = _seat(models, extra_args=["--speculative-config", json.dumps(config)])
    facts = _facts(models, seat)
    assert facts.speculative is not None and facts.speculative.num_layers == 0 and facts.speculative.weights_bytes == 0
    labels = _boot_and_compare("spec-ngram", models, facts, list(seat.extra_args))
    assert int(labels["num_gpu_blocks"]) == 64


PROBE = Path(__file__).with_name("vllm_memory_probe.py")


def _probe(arguments: dict[str, object]) -> dict[str, object]:
    """vLLM's own engine, in-process: what it allocated (tests/integration/vllm_memory_probe.py)."""
    done = subprocess.run([str(vllm_python()), str(PROBE), json.dumps(arguments)], capture_output=True, text=True, timeout=540,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(found, dict)
    return found


@pytest.mark.parametrize(("rank", "slots"), [(8, 3), (64, 2)])
def test_lora_slots_are_what_vllm_allocates_and_the_blocks_stay(models, rank, slots):
    seat = _seat(models, lora={"max_loras": slots, "max_lora_rank": rank})
    facts = _facts(models, seat)
    plain = load_model_facts(models[TARGET.name], engine_settings(_seat(models), EngineHost(device="cpu"), VLLM_VERSION))
    found = _probe({"model": str(models[TARGET.name]), "enable_lora": True, "max_loras": slots, "max_lora_rank": rank,
                    "kv_cache_memory_bytes": KV_BYTES, "max_model_len": MAX_MODEL_LEN})
    assert facts.lora is not None and facts.lora.slot_bytes == found["lora_bytes"], found["lora_modules"]
    by_module: dict[str, int] = {}
    for name, size in found["lora_modules"].items():  # type: ignore[union-attr]
        suffix = name.rsplit(".", 1)[-1]
        module = {"logits_processor": "lm_head"}.get(suffix, suffix)  # vLLM wraps the LM head's logits processor
        by_module[module] = by_module.get(module, 0) + size
    assert by_module == facts.lora.per_module_bytes
    assert facts.weights_bytes == plain.weights_bytes + found["lora_bytes"]
    # the pinned KV's blocks, which LoRA leaves alone
    assert found["num_gpu_blocks"] == facts.capacity(KV_BYTES, MAX_MODEL_LEN).num_blocks == 64
