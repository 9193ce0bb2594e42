"""seatplan's KV figures against the recorded vLLM CPU boots (no engine needed).

``tests/fixtures/vllm_cpu_oracle.json`` holds what the real engine reported for every plan of the
boot matrix (written by record_oracle.py). This replays each recorded boot through the facts stage
from the tiny model's config.json alone; the live test (test_vllm_cpu.py) stays the real check.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kits.paths import FIXTURES
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings

ORACLE = json.loads((FIXTURES / "vllm_cpu_oracle.json").read_text())


def _facts(boot: dict, model_dir: Path):
    (model_dir / "config.json").write_text(json.dumps(boot["model_config"]))
    engine = boot["engine"]
    settings = EngineSettings(device=engine["device"], vllm_version=engine["vllm_version"], dtype=engine["dtype"],
                              kv_cache_dtype=engine["kv_cache_dtype"], prefix_caching=engine["prefix_caching"],
                              attention_backend=engine["attention_backend"], cpu_amx=engine["cpu_amx"],
                              cpu_avx512_bf16=engine["cpu_avx512_bf16"])
    return load_model_facts(model_dir, settings)


@pytest.mark.parametrize("boot", ORACLE["boots"], ids=lambda boot: boot["name"])
def test_facts_reproduce_recorded_boot(boot: dict, tmp_path: Path):
    facts = _facts(boot, tmp_path)
    engine = boot["engine"]
    labels = boot["cache_config_labels"]
    capacity = facts.capacity(engine["kv_cache_memory_bytes"], engine["max_model_len"])
    assert capacity.num_blocks == int(labels["num_gpu_blocks"])
    assert capacity.kv_cache_tokens == int(labels["kv_cache_size_tokens"])
    assert facts.block_size == int(labels["block_size"])
    assert capacity.log_line in boot["log_lines"]


def test_oracle_was_recorded_from_the_pinned_engine():
    assert ORACLE["vllm_version"] == "0.32.0"
    assert {boot["engine"]["vllm_version"] for boot in ORACLE["boots"]} == {"0.32.0"}
    assert all(boot["served_max_model_len"] == boot["engine"]["max_model_len"] for boot in ORACLE["boots"])
