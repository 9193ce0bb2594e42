"""seatplan's log parser on logs of the real vLLM CPU engine (one boot per plan of the boot matrix)."""

from __future__ import annotations

import pytest

from kits.boot_matrix import BOOT_PLANS
from seatplan.exposition import parse_exposition
from seatplan.observe.logparse import parse_log
from seatplan.observe.sources.vllm_metrics import vllm_stats

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.mark.parametrize("plan", BOOT_PLANS[:3], ids=lambda plan: plan.name)
def test_parser_reads_every_figure_the_engine_logged(vllm_boot_cache, plan):
    result = vllm_boot_cache.get(plan)
    parsed = parse_log(result.log_text.splitlines(), source=str(result.log_path), year=2026)

    assert len(parsed.boots) == 1
    boot = parsed.boots[0]
    labels = result.cache_config_labels
    assert boot.seat == result.config.served_model_name
    assert boot.version == result.version
    assert boot.ready and not boot.errors
    assert boot.kv_cache_memory_bytes_pinned == result.config.kv_cache_memory_bytes
    assert boot.max_model_len == result.served_max_model_len
    assert boot.kv_cache_device == "CPU"
    if "kv_cache_size_tokens" in labels:
        assert boot.kv_cache_tokens == int(labels["kv_cache_size_tokens"])
        assert boot.max_concurrency == pytest.approx(float(labels["kv_cache_max_concurrency"]), abs=0.005)
    assert boot.concurrency_max_model_len == result.served_max_model_len
    assert len(boot.pids) >= 2  # the API server and the engine core, tied into one boot


@pytest.mark.parametrize("plan", BOOT_PLANS[:1], ids=lambda plan: plan.name)
def test_metrics_scrape_of_the_real_engine(vllm_boot_cache, plan):
    result = vllm_boot_cache.get(plan)
    stats = vllm_stats(parse_exposition(result.metrics_text.splitlines()), source="metrics", default_time=0.0)

    assert [record.seat for record in stats] == [result.config.served_model_name]
    assert stats[0].kv_cache_usage_pct is not None and 0.0 <= stats[0].kv_cache_usage_pct <= 100.0
    assert stats[0].running_requests == 0
    assert stats[0].preemptions_total == 0
