"""The boot harness's own logic, without booting anything (fast, runs everywhere)."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kits.boot_matrix import BOOT_PLANS
from kits.parts import live_group_members
from kits.tiny_models import ALL_TINY_MODELS, QWEN3_DENSE, TinyModelSpec
from kits.vllm_engine import BootResult, EngineConfig, _stop, parse_cache_config_info

CPU_BLOCK_SIZE = 128

# The gauge exactly as vLLM 0.32.0's CPU engine served it for the tiny gpt-oss boot of the matrix.
CACHE_CONFIG_INFO_LINE = (
    'vllm:cache_config_info{_block_size_resolved="True",block_size="128",cache_dtype="auto",'
    'cache_hit_alignment_tokens="None",effective_attention_block_size="128",'
    'enable_mamba_shared_prefix_checkpoint="False",enable_prefix_caching="True",engine="0",'
    'gpu_memory_utilization="0.92",hash_block_size="None",is_attention_free="False",'
    'kv_cache_dtype_skip_layers="[]",kv_cache_layout="None",'
    'kv_cache_max_concurrency="2.261904761904762",kv_cache_memory_bytes="50000123",'
    'kv_cache_size_tokens="6785",kv_offloading_backend="native",kv_offloading_size="None",'
    'kv_sharing_fast_prefill="False",mamba_block_size="None",mamba_cache_dtype="auto",'
    'mamba_cache_mode="none",mamba_page_size_padded="None",mamba_ssm_cache_dtype="float32",'
    'num_cpu_blocks="None",num_gpu_blocks="95",num_gpu_blocks_override="None",'
    'prefix_cache_retention_interval="0",prefix_caching_hash_algo="sha256",prefix_match_unit="None",'
    'replayssm_buffer_len="16",skip_page_size_padded="None",sliding_window="None",'
    'swa_bounded_replay="True",use_kda_recoverssm="False",use_replayssm="False",'
    'user_specified_block_size="False"} 1.0'
)


def test_parse_cache_config_info_reads_every_label():
    metrics = "\n".join([
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        CACHE_CONFIG_INFO_LINE,
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
    ])
    labels = parse_cache_config_info(metrics)
    assert labels["num_gpu_blocks"] == "95"
    assert labels["kv_cache_size_tokens"] == "6785"
    assert labels["block_size"] == "128"
    assert labels["kv_cache_memory_bytes"] == "50000123"
    assert labels["kv_cache_dtype_skip_layers"] == "[]"
    assert labels["mamba_cache_mode"] == "none"
    assert len(labels) == 37


def test_parse_cache_config_info_unescapes_label_values():
    labels = parse_cache_config_info('vllm:cache_config_info{note="a \\"quoted\\" word",x="1"} 1.0')
    assert labels == {"note": 'a "quoted" word', "x": "1"}


def test_parse_cache_config_info_without_the_gauge_says_so():
    with pytest.raises(ValueError, match="cache_config_info"):
        parse_cache_config_info('vllm:num_requests_running{engine="0"} 0.0\n')


def test_server_args_carry_the_kv_flags(tmp_path: Path):
    config = EngineConfig(name="x", model_dir=tmp_path, max_model_len=3001, kv_cache_memory_bytes=50_000_123,
                          kv_cache_dtype="fp8", prefix_caching=False)
    args = config.server_args(port=12345)
    assert args[:2] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = dict(zip(args[2::2], args[3::2]))
    assert flags["--max-model-len"] == "3001"
    assert flags["--kv-cache-memory-bytes"] == "50000123"
    assert flags["--kv-cache-dtype"] == "fp8"
    assert flags["--port"] == "12345"
    assert flags["--host"] == "127.0.0.1"
    assert "--no-enable-prefix-caching" in args
    assert "--no-enable-prefix-caching" not in replace(config, prefix_caching=True).server_args(port=1)


def test_boot_result_json_leaves_out_the_texts(tmp_path: Path):
    config = EngineConfig(name="x", model_dir=tmp_path, max_model_len=3000, kv_cache_memory_bytes=1)
    result = BootResult(config=config, cache_config_labels={"num_gpu_blocks": "3"}, served_max_model_len=3000,
                        version="0.32.0", probe_completion_tokens=8, boot_seconds=30.0,
                        log_path=tmp_path / "x.log", log_text="long log", metrics_text="metrics")
    document = result.to_json()
    assert "log_text" not in document and "metrics_text" not in document
    assert document["config"]["model_dir"] == str(tmp_path)
    assert document["cache_config_labels"] == {"num_gpu_blocks": "3"}


def test_stop_ends_the_whole_process_group():
    # A parent that leaves a child behind, like the API server and its engine-core process.
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while len(live_group_members(process.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(live_group_members(process.pid)) == 2  # the parent and its child, running
    _stop(process)
    assert process.returncode is not None
    # Gone, or a zombie its adopter has not reaped yet (kill(2) still finds those): nothing of the group runs.
    assert live_group_members(process.pid) == []


def test_tiny_model_cache_key_follows_the_spec():
    changed = TinyModelSpec(QWEN3_DENSE.name, QWEN3_DENSE.mimics, {**QWEN3_DENSE.config, "head_dim": 64})
    assert changed.cache_key() != QWEN3_DENSE.cache_key()
    assert QWEN3_DENSE.cache_key() == TinyModelSpec(QWEN3_DENSE.name, "", dict(QWEN3_DENSE.config)).cache_key()
    assert len({spec.cache_key() for spec in ALL_TINY_MODELS}) == len(ALL_TINY_MODELS)


def test_boot_matrix_covers_the_issue():
    assert len({plan.name for plan in BOOT_PLANS}) == len(BOOT_PLANS)
    assert {plan.model.name for plan in BOOT_PLANS} == {spec.name for spec in ALL_TINY_MODELS}
    # Lengths and budgets that are round multiples of the block size would hide rounding mistakes.
    assert all(plan.max_model_len % CPU_BLOCK_SIZE for plan in BOOT_PLANS)
    assert all(plan.kv_cache_memory_bytes % CPU_BLOCK_SIZE for plan in BOOT_PLANS)
    assert any(plan.kv_cache_dtype == "fp8" and plan.probe == "chat" for plan in BOOT_PLANS)
    for hybrid in ("qwen3-next-gdn", "nemotron-h-mamba2"):
        assert {plan.prefix_caching for plan in BOOT_PLANS if plan.model.name == hybrid} == {True, False}
