"""The pure half of verify: observations against expectations, metrics parsing, redaction, command-line parsing."""

from __future__ import annotations

import pytest

from seatplan.exposition import parse_exposition
from seatplan.verify.checks import (
    CapProbe,
    EngineObservation,
    GatewayObservation,
    cache_config_labels,
    ceiling_expected,
    ceiling_request,
    default_cap_expected,
    engine_checks,
    gateway_checks,
    redact,
    sample_total,
    version_matches,
)
from seatplan.verify.expect import KvPrediction, SeatExpectation, seat_host
from seatplan.verify.models import Check

# /metrics of the real vLLM 0.32 CPU engine (abridged): a 2048-token tiny Qwen3 with 64 MiB of KV.
METRICS = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",engine="0",\
gpu_memory_utilization="0.92",kv_cache_max_concurrency="2.625",kv_cache_memory_bytes="67108864",\
kv_cache_size_tokens="5376",num_cpu_blocks="None",num_gpu_blocks="42",sliding_window="None"} 1.0
vllm:request_params_max_tokens_count{engine="0",model_name="tq"} 2.0
vllm:request_params_max_tokens_sum{engine="0",model_name="tq"} 600.0
vllm:request_params_max_tokens_count{engine="1",model_name="tq"} 1.0
vllm:request_params_max_tokens_sum{engine="1",model_name="tq"} 300.0
vllm:request_params_max_tokens_sum{engine="0",model_name="other"} 7.0
"""

EXPECTED = SeatExpectation(
    seat="tq", served_model_name="tq", base_url="http://127.0.0.1:18123", max_model_len=2048,
    kv_cache_memory_bytes=67108864, max_new_tokens=300,
    kv=KvPrediction(block_size=128, num_gpu_blocks=42, kv_cache_size_tokens=5376, max_concurrency=2.625), kv_problem=None,
)


def observed(**changes) -> EngineObservation:
    seen = EngineObservation(
        version="0.32.0", served_max_model_len={"tq": 2048}, cache_labels=cache_config_labels(parse_exposition(METRICS.splitlines())),
        completion_tokens=4,
        cap_default=CapProbe(requested_max_tokens=None, prompt_tokens=18, effective_max_tokens=300),
        cap_ceiling=CapProbe(requested_max_tokens=301, prompt_tokens=18, effective_max_tokens=300),
    )
    for name, value in changes.items():
        setattr(seen, name, value)
    return seen


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.check: check for check in checks}


def test_metrics_parsing_reads_the_cache_labels_and_sums_engines_per_model():
    samples = parse_exposition(METRICS.splitlines())
    labels = cache_config_labels(samples)
    assert labels["num_gpu_blocks"] == "42" and labels["kv_cache_memory_bytes"] == "67108864"
    assert sample_total(samples, "vllm:request_params_max_tokens_sum", "tq") == 900.0
    assert sample_total(samples, "vllm:request_params_max_tokens_count", "tq") == 3.0
    assert cache_config_labels(parse_exposition(["vllm:num_requests_running 0"])) is None


def test_an_engine_matching_the_plan_passes_every_check():
    checks = engine_checks(EXPECTED, "0.32", observed())
    assert [check.check for check in checks] == [
        "version", "max_model_len", "block_size", "num_gpu_blocks", "kv_cache_size_tokens", "kv_cache_memory_bytes",
        "completion", "output_cap_default", "output_cap_ceiling"]
    assert all(check.ok for check in checks), checks


def test_a_different_block_count_fails_with_expected_and_seen():
    labels = {**observed().cache_labels, "num_gpu_blocks": "37", "kv_cache_memory_bytes": "59244544"}
    checks = by_name(engine_checks(EXPECTED, "0.32", observed(cache_labels=labels)))
    assert checks["num_gpu_blocks"].model_dump() == {"seat": "tq", "check": "num_gpu_blocks", "expected": 42, "seen": 37, "ok": False}
    assert checks["kv_cache_memory_bytes"].seen == 59244544 and not checks["kv_cache_memory_bytes"].ok


def test_a_shorter_context_and_another_version_fail():
    checks = by_name(engine_checks(EXPECTED, "0.32", observed(version="0.31.1", served_max_model_len={"tq": 1024})))
    assert not checks["version"].ok and checks["version"].seen == "0.31.1"
    assert checks["max_model_len"].expected == 2048 and checks["max_model_len"].seen == 1024
    # 0.31 has the size labels too, so they are still compared
    assert "kv_cache_size_tokens" in checks


def test_an_older_engine_is_not_asked_for_labels_it_does_not_have():
    labels = {key: value for key, value in observed().cache_labels.items() if not key.startswith("kv_cache")}
    checks = by_name(engine_checks(EXPECTED, "0.10.1", observed(version="0.10.1", cache_labels=labels)))
    assert checks["version"].ok
    assert "kv_cache_size_tokens" not in checks and "kv_cache_memory_bytes" not in checks
    assert checks["num_gpu_blocks"].ok


def test_a_served_name_missing_from_the_engine_is_named():
    check = by_name(engine_checks(EXPECTED, "0.32", observed(served_max_model_len={"other": 2048})))["max_model_len"]
    assert not check.ok and check.seen == "tq not served (serves: other)"


def test_an_unreachable_engine_is_one_failed_check():
    checks = engine_checks(EXPECTED, "0.32", EngineObservation(unreachable="ConnectError: [Errno 111] Connection refused"))
    assert [(check.check, check.ok, check.expected) for check in checks] == [("reachable", False, "http://127.0.0.1:18123")]


def test_no_prediction_is_a_failure_that_says_why():
    expectation = SeatExpectation(**{**EXPECTED.__dict__, "kv": None, "kv_problem": "cannot find model /m"})
    check = by_name(engine_checks(expectation, "0.32", observed()))["num_gpu_blocks"]
    assert not check.ok and check.expected == "no prediction: cannot find model /m" and check.seen == 42


def test_cap_that_lets_an_explicit_max_tokens_win_fails_the_ceiling_check():
    seen = observed(cap_ceiling=CapProbe(requested_max_tokens=301, prompt_tokens=18, effective_max_tokens=301))
    checks = by_name(engine_checks(EXPECTED, "0.32", seen))
    assert checks["output_cap_default"].ok
    assert checks["output_cap_ceiling"].model_dump() == {"seat": "tq", "check": "output_cap_ceiling", "expected": 300, "seen": 301, "ok": False}


def test_a_cap_probe_that_could_not_measure_fails_with_the_reason():
    seen = observed(cap_default=CapProbe(requested_max_tokens=None, problem="other requests finished during each of 3 tries"))
    check = by_name(engine_checks(EXPECTED, "0.32", seen))["output_cap_default"]
    assert not check.ok and "other requests" in check.seen


def test_cap_expectations_follow_the_context_and_the_version():
    assert default_cap_expected(300, 2048, 18) == 300
    assert default_cap_expected(4000, 2048, 18) == 2030  # the rest of the context wins
    assert ceiling_request(300, 2048, 18) == 301
    assert ceiling_request(2030, 2048, 18) is None  # one more token does not fit: nothing to test
    assert ceiling_expected(300, 301, (0, 32)) == 300


def test_gateway_checks_name_missing_and_silent_models():
    seen = GatewayObservation(listed=["tq"], completion_problems={"tq": "HTTP 500 from /v1/chat/completions: boom"})
    other = SeatExpectation(**{**EXPECTED.__dict__, "seat": "b", "served_model_name": "b"})
    checks = gateway_checks([EXPECTED, other], seen)
    assert [(check.seat, check.check, check.ok) for check in checks] == [
        ("tq", "gateway_lists", True), ("tq", "gateway_completion", False),
        ("b", "gateway_lists", False), ("b", "gateway_completion", False)]
    assert checks[2].seen == "not listed (lists: tq)"


def test_redact_masks_the_key_in_every_text():
    checks = [Check(seat="gateway", check="gateway_lists", expected="x", seen="HTTP 401: bad key sk-abc123 given", ok=False)]
    assert redact(checks, ["sk-abc123", ""])[0].seen == "HTTP 401: bad key *** given"


@pytest.mark.parametrize("planned, running, ok", [
    ("0.32", "0.32.0", True), ("0.32", "0.32.1", True), ("0.10.2", "0.10.2+cu128", True),
    ("0.32", "0.31.0", False), ("0.10.2", "0.10.1", False), ("0.32", None, False), ("0.32", "weird", False),
])
def test_version_matches(planned, running, ok):
    assert version_matches(planned, running) is ok


def test_seat_host():
    assert seat_host(["gpu-a:0", "gpu-a:1"]) == "gpu-a"
    assert seat_host([]) is None
