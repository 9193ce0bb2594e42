"""Context limits by vLLM era, the YaRN option, and finding models in the local Hugging Face cache."""

from __future__ import annotations

import json

import pytest

from kits.facts import facts, fixture_dir, write_config
from seatplan.errors import SeatplanError
from seatplan.facts.api import load_model_facts
from seatplan.facts.context import derive_max_len, rope_scaling_of
from seatplan.facts.models import parse_vllm_version
from seatplan.facts.reader import locate_model


@pytest.mark.parametrize(
    "name, derived, default, published",
    [
        ("Qwen--Qwen3-8B", 40960, 40960, 32768),  # 32,768 context + 8,192 reserved for output
        ("Qwen--Qwen3-4B-Instruct-2507", 262144, 262144, 262144),
        ("meta-llama--Llama-3.1-8B-Instruct", 131072, 131072, 131072),  # llama3 rope: not scaled
        ("openai--gpt-oss-20b", 131072, 131072, 131072),  # YaRN 32 x 4096
        ("deepseek-ai--DeepSeek-V3", 163840, 163840, 163840),  # YaRN 40 x 4096
        ("google--gemma-3-27b-it", 131072, 131072, 131072),  # gemma3: rope scaling skipped, text default
        ("microsoft--Phi-3.5-mini-instruct", 131072, 4096, 131072),  # LongRoPE: default is the original length
        ("THUDM--glm-4-9b", 8192, 8192, 8192),  # seq_length
        ("Qwen--Qwen2.5-VL-7B-Instruct", 128000, 128000, 128000),  # mrope carries no factor
        ("mistralai--Mistral-Small-24B-Instruct-2501", 32768, 32768, 32768),
    ],
)
def test_context_limits(name, derived, default, published):
    model = facts(name)
    assert (model.max_context_derived, model.max_context_default, model.max_context_published) == (derived, default, published)


@pytest.mark.parametrize("version, derived", [("0.29", 131072), ("0.30", 32768), ("0.32", 32768)])
def test_yarn_configs_are_scaled_only_until_0_29(version, derived):
    text = {"model_type": "qwen2", "max_position_embeddings": 32768,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}

    assert derive_max_len(text, parse_vllm_version(version), rope_scaling_of(text)) == derived


@pytest.mark.parametrize("version", ["0.8", "0.32"])
def test_linear_rope_scaling_multiplies_in_every_era(version):
    text = {"model_type": "llama", "max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert derive_max_len(text, parse_vllm_version(version), rope_scaling_of(text)) == 8192


def test_config_without_length_keys_falls_back_to_2048():
    assert derive_max_len({"model_type": "x"}, (0, 32), None) == 2048


def test_yarn_option_for_qwen3_costs_a_128k_request():
    model = facts("Qwen--Qwen3-8B")
    yarn = model.yarn
    assert yarn is not None and not yarn.enabled
    assert (yarn.factor, yarn.original_max_position_embeddings, yarn.extended_max_model_len) == (4.0, 32768, 131072)
    assert yarn.extended_request_kv_bytes == 131072 * 36 * 2 * 8 * 128 * 2
    assert yarn.needs_long_max_model_len_env  # 0.30+ keeps the config's 40,960


def test_enabling_yarn_before_0_30_raises_the_derived_length():
    model = facts("Qwen--Qwen3-8B", enable_yarn=True, vllm_version="0.29")
    assert model.yarn.enabled and model.max_context_derived == 131072 and not model.yarn.needs_long_max_model_len_env


def test_built_in_yarn_is_reported_enabled():
    yarn = facts("openai--gpt-oss-20b").yarn
    assert yarn.enabled and (yarn.factor, yarn.original_max_position_embeddings) == (32.0, 4096)


def test_llama3_scaling_has_no_yarn_option():
    assert facts("meta-llama--Llama-3.1-8B").yarn is None


def test_generation_defaults_are_read():
    assert facts("Qwen--Qwen3-14B").generation_defaults.get("temperature") == 0.6


# --- Hugging Face cache ---------------------------------------------------------------------------


def _fake_cache(root, model_id: str, commit: str = "0123abcd", with_ref: bool = True):
    repo = root / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    config = json.loads((fixture_dir("Qwen--Qwen3-8B") / "config.json").read_text())
    write_config(snapshot, config)
    if with_ref:
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_hf_id_resolves_through_hf_hub_cache(tmp_path, monkeypatch):
    snapshot = _fake_cache(tmp_path / "hub", "Qwen/Qwen3-8B")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HOME", raising=False)
    # An id now reads the Hub first; offline (huggingface_hub reads HF_HUB_OFFLINE once, at import) it is the cache's.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    assert locate_model("Qwen/Qwen3-8B") == snapshot
    assert facts_from_id("Qwen/Qwen3-8B").kv_bytes_per_token == 147456


def facts_from_id(model_id: str):
    return load_model_facts(model_id)


def test_hf_home_and_snapshot_without_ref(tmp_path, monkeypatch):
    snapshot = _fake_cache(tmp_path / "home" / "hub", "org/name", with_ref=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert locate_model("org/name") == snapshot


def test_missing_hf_id_names_the_cache_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(SeatplanError) as problem:
        locate_model("org/absent")
    assert str(tmp_path / "models--org--absent") == problem.value.where


def test_config_json_path_is_accepted():
    assert locate_model(str(fixture_dir("Qwen--Qwen3-8B") / "config.json")) == fixture_dir("Qwen--Qwen3-8B")
