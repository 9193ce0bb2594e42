"""seatplan's KV arithmetic against the real vLLM 0.32 CPU engine (issue 2's live test).

Each plan of the boot matrix boots once (session cache, see conftest.py); the tests then compare
what seatplan's facts stage predicts with what the engine reports: the ``num_gpu_blocks``,
``kv_cache_size_tokens`` and ``block_size`` labels of ``vllm:cache_config_info`` in ``/metrics``,
the capacity line of the start-up log, and ``max_model_len`` of ``/v1/models``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kits.boot_matrix import BOOT_PLANS, BootPlan
from kits.tiny_models import tiny_model_dir
from kits.vllm_engine import (
    PROBE_MAX_TOKENS,
    VLLM_VERSION,
    BootResult,
    EngineBootError,
    EngineConfig,
    boot_engine,
    boot_log_dir,
)
from seatplan.facts.api import load_model_facts
from seatplan.facts.models import EngineSettings

pytestmark = pytest.mark.vllm


def facts_for(config: EngineConfig):
    settings = EngineSettings(
        device="cpu",
        vllm_version=VLLM_VERSION,
        dtype=config.dtype,
        kv_cache_dtype=config.kv_cache_dtype,
        prefix_caching=config.prefix_caching,
        attention_backend=config.attention_backend,
    )
    return load_model_facts(config.model_dir, settings)


@pytest.fixture(params=BOOT_PLANS, ids=lambda plan: plan.name)
def boot(request, vllm_boot_cache) -> BootResult:
    return vllm_boot_cache.get(request.param)


def test_engine_serves_the_asked_length_and_answers(boot: BootResult):
    assert boot.version == VLLM_VERSION
    assert boot.served_max_model_len == boot.config.max_model_len
    labels = boot.cache_config_labels
    assert int(labels["kv_cache_memory_bytes"]) == boot.config.kv_cache_memory_bytes
    assert labels["cache_dtype"] == boot.config.kv_cache_dtype
    assert labels["enable_prefix_caching"] == str(boot.config.prefix_caching)
    if boot.config.probe != "none":
        assert 1 <= boot.probe_completion_tokens <= PROBE_MAX_TOKENS


def test_facts_capacity_equals_engine_labels(boot: BootResult):
    facts = facts_for(boot.config)
    capacity = facts.capacity(boot.config.kv_cache_memory_bytes, boot.config.max_model_len)
    labels = boot.cache_config_labels
    assert capacity.num_blocks == int(labels["num_gpu_blocks"])
    assert capacity.kv_cache_tokens == int(labels["kv_cache_size_tokens"])
    assert capacity.max_concurrency == pytest.approx(float(labels["kv_cache_max_concurrency"]), rel=1e-12)
    assert facts.block_size == int(labels["block_size"])
    assert capacity.fits_one_request


def test_facts_log_line_is_in_the_startup_log(boot: BootResult):
    capacity = facts_for(boot.config).capacity(boot.config.kv_cache_memory_bytes, boot.config.max_model_len)
    assert capacity.log_line in boot.log_text


def test_facts_minimum_budget_is_what_this_boot_needed(boot: BootResult):
    facts = facts_for(boot.config)
    minimum_bytes = facts.min_kv_cache_bytes(boot.config.max_model_len)
    assert minimum_bytes <= boot.config.kv_cache_memory_bytes
    assert not facts.capacity(minimum_bytes - 1, boot.config.max_model_len).fits_one_request
    assert facts.capacity(minimum_bytes, boot.config.max_model_len).fits_one_request


def _first_plan(name: str) -> BootPlan:
    return next(plan for plan in BOOT_PLANS if plan.name == name)


def cli_flags(config: EngineConfig) -> list[str]:
    """The ``seatplan model`` flags that mirror the engine's command line."""
    flags = [
        "--device", "cpu", "--vllm-version", VLLM_VERSION, "--dtype", config.dtype,
        "--kv-cache-dtype", config.kv_cache_dtype,
        "--kv-cache-memory-bytes", str(config.kv_cache_memory_bytes),
        "--max-model-len", str(config.max_model_len),
    ]
    if config.attention_backend:
        flags += ["--attention-backend", config.attention_backend]
    return flags if config.prefix_caching else flags + ["--no-prefix-caching"]


@pytest.mark.parametrize("plan_name", ["qwen3-next-gdn-noprefix"])
def test_cli_model_json_matches_engine(plan_name: str, vllm_boot_cache):
    """The command a user runs, as a child process, against the same engine's figures."""
    boot = vllm_boot_cache.get(_first_plan(plan_name))
    seatplan = Path(sys.executable).with_name("seatplan")
    command = [str(seatplan), "model", str(boot.config.model_dir), *cli_flags(boot.config), "--json"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    document = json.loads(completed.stdout)
    labels = boot.cache_config_labels
    assert document["num_blocks"] == int(labels["num_gpu_blocks"])
    assert document["kv_cache_tokens"] == int(labels["kv_cache_size_tokens"])
    assert document["block_size"] == int(labels["block_size"])
    assert document["max_model_len"] == boot.served_max_model_len
    assert document["log_line"] in boot.log_text


def _config_at_minimum(vllm_python_path, plan_name: str, offset_bytes: int):
    """The plan's engine with a budget ``offset_bytes`` from the smallest that facts says boots."""
    plan = _first_plan(plan_name)
    planned = plan.engine_config(tiny_model_dir(plan.model, vllm_python_path))
    facts = facts_for(planned)
    budget = facts.min_kv_cache_bytes(plan.max_model_len) + offset_bytes
    name = f"{plan.name}-{'below-' if offset_bytes < 0 else 'at-'}minimum"
    return replace(planned, name=name, kv_cache_memory_bytes=budget), facts


def test_budget_below_one_request_is_refused_as_facts_predict(vllm_python_path):
    """vLLM refuses to start when the budget cannot hold one max-length request plus the null block;
    seatplan predicts the refusal and its message (needed/available GiB and estimated length)."""
    config, facts = _config_at_minimum(vllm_python_path, "qwen3-dense-bf16", offset_bytes=-1)
    capacity = facts.capacity(config.kv_cache_memory_bytes, config.max_model_len)
    assert not capacity.fits_one_request
    with pytest.raises(EngineBootError):
        boot_engine(vllm_python_path, config, boot_log_dir())
    assert capacity.log_line in (boot_log_dir() / f"{config.name}.log").read_text()


def test_budget_of_exactly_one_request_boots(vllm_python_path):
    """The smallest budget facts reports is enough: one max-length request plus the null block."""
    config, facts = _config_at_minimum(vllm_python_path, "gpt-oss-swa", offset_bytes=0)
    boot = boot_engine(vllm_python_path, config, boot_log_dir())
    capacity = facts.capacity(config.kv_cache_memory_bytes, config.max_model_len)
    assert int(boot.cache_config_labels["num_gpu_blocks"]) == capacity.num_blocks == capacity.blocks_per_request + 1
    assert int(boot.cache_config_labels["kv_cache_size_tokens"]) == capacity.kv_cache_tokens
