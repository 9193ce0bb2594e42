"""``seatplan verify`` end to end with real parts: two tiny random-weight models served by the real
vLLM 0.32 CPU engine, started from the command lines of a plan made for a ``device: cpu`` host, behind a
real LiteLLM proxy. Verify passes; then one engine is restarted with another KV size behind the plan's
back and verify fails, naming the expected and seen block counts. The gateway key never appears in
any output.

Three engine boots in all (two, then one restart); the module shares them between its tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from kits.documents import command_of
from kits.parts import free_port, require
from kits.serving_stack import litellm_config, litellm_installed, litellm_venv, running, start_engine, start_litellm
from kits.tiny_models import GEMMA3_TEXT, QWEN3_DENSE, tiny_model_dir
from kits.vllm_engine import parse_cache_config_info, vllm_installed, vllm_python, vllm_venv
from seatplan.documents.plan import PlannedVllmSeat

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(2400)]

KEY_VARIABLE = "SEATPLAN_TEST_GATEWAY_KEY"
GATEWAY_KEY = "sk-seatplan-verify-7f3a9c1e5b"
SEATS = {  # seat name → (tiny model, max_model_len, output cap)
    "dense": (QWEN3_DENSE, 2048, 24),
    "gemma": (GEMMA3_TEXT, 1500, 16),
}


def seatplan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "seatplan.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def write_fleet(directory: Path, model_dirs: dict[str, Path], ports: dict[str, int]) -> Path:
    fleet = {
        "hosts": [{"name": "cpu-box", "address": "127.0.0.1", "device": "cpu",
                   "gpus": [{"index": 0, "name": "host memory", "total_bytes": "16GiB"}]}],
        "seats": [
            {"name": name, "model": str(model_dirs[name]), "port": ports[name], "dtype": "bfloat16",
             "max_model_len": length, "max_new_tokens": cap, "enforce_eager": True,
             "extra_args": ["--host", "127.0.0.1"]}
            for name, (_, length, cap) in SEATS.items()
        ],
        # small steps keep the pinned KV caches (and the engines' memory) small
        "policy": {"vllm_version": "0.32", "rounding_step_bytes": "16MiB"},
    }
    path = directory / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet, sort_keys=False))
    return path


def cpu_bytes_per_block(model_dir: Path) -> int:
    """Full attention, bf16, the CPU build's 128-token blocks: 128 × 2 (K, V) × KV heads × head_dim × 2 B × layers."""
    config = json.loads((model_dir / "config.json").read_text())
    return 128 * 2 * config["num_key_value_heads"] * config["head_dim"] * 2 * config["num_hidden_layers"]


def checks_by(report: dict) -> dict[tuple[str, str], dict]:
    return {(check["seat"], check["check"]): check for check in report["checks"]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Plan → engines from the plan's command lines → LiteLLM in front; yields (plan path, plan, servers)."""
    require(vllm_installed(), f"the vLLM CPU engine in {vllm_venv()} (SEATPLAN_VLLM_VENV)")
    require(litellm_installed(), f"the LiteLLM proxy in {litellm_venv()} (SEATPLAN_LITELLM_VENV)")
    work = tmp_path_factory.mktemp("verify-stack")
    model_dirs = {name: tiny_model_dir(spec, vllm_python()) for name, (spec, _, _) in SEATS.items()}
    ports = {name: free_port() for name in SEATS}
    fleet_path = write_fleet(work, model_dirs, ports)
    plan_path = work / "plan.json"
    planned = seatplan("plan", str(fleet_path), "-o", str(plan_path), "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(plan_path.read_text())
    servers = {}
    with running(servers):
        for seat in sorted(plan["seats"], key=lambda seat: seat["boot_order"]):
            servers[seat["name"]] = start_engine(vllm_python(), seat["name"], command_of(PlannedVllmSeat.model_validate(seat)), seat["env"],
                                                 seat["port"], work)
        gateway = [{"served_model_name": seat["served_model_name"], "base_url": servers[seat["name"]].base_url,
                    "max_new_tokens": seat["max_new_tokens"]} for seat in plan["seats"]]
        servers["litellm"] = start_litellm(litellm_config(gateway, KEY_VARIABLE), free_port(), {KEY_VARIABLE: GATEWAY_KEY}, work)
        yield plan_path, plan, servers, work


def run_verify(plan_path: Path, gateway_url: str, key: str = GATEWAY_KEY, *extra: str) -> subprocess.CompletedProcess:
    return seatplan("verify", str(plan_path), "--gateway", gateway_url, "--key-env", KEY_VARIABLE, *extra,
                    env={KEY_VARIABLE: key})


def test_verify_passes_on_the_planned_fleet_and_the_key_stays_secret(stack):
    plan_path, plan, servers, _ = stack
    result = run_verify(plan_path, servers["litellm"].base_url, GATEWAY_KEY, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    checks = checks_by(report)
    for seat in plan["seats"]:
        name = seat["name"]
        for check in ("version", "max_model_len", "block_size", "num_gpu_blocks", "kv_cache_size_tokens",
                      "kv_cache_memory_bytes", "completion", "output_cap_default", "output_cap_ceiling",
                      "gateway_lists", "gateway_completion"):
            assert checks[(name, check)]["ok"], checks[(name, check)]
        assert checks[(name, "block_size")]["seen"] == 128  # the CPU build's block size, predicted for device: cpu
        assert checks[(name, "output_cap_ceiling")]["seen"] == seat["max_new_tokens"]  # 0.32: the cap is a ceiling
        assert checks[(name, "kv_cache_memory_bytes")]["seen"] == seat["kv_cache_memory_bytes"]
    # the block counts are vLLM's own: read them from /metrics here, apart from seatplan's reader
    for seat in plan["seats"]:
        labels = parse_cache_config_info(httpx.get(f"{servers[seat['name']].base_url}/metrics").text)
        assert checks[(seat["name"], "num_gpu_blocks")]["seen"] == int(labels["num_gpu_blocks"])
    human = run_verify(plan_path, servers["litellm"].base_url)
    assert human.returncode == 0 and "all" in human.stdout
    for output in (result.stdout, result.stderr, human.stdout, human.stderr):
        assert GATEWAY_KEY not in output


def test_a_wrong_key_fails_the_gateway_checks_without_printing_it(stack):
    plan_path, _, servers, _ = stack
    wrong = "sk-wrong-key-0b9d2e4f6a"
    result = run_verify(plan_path, servers["litellm"].base_url, wrong, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    failed = {check["check"] for check in report["checks"] if not check["ok"]}
    assert failed == {"gateway_lists", "gateway_completion"}
    assert wrong not in result.stdout + result.stderr


def test_a_kv_size_changed_behind_the_plans_back_fails_with_both_block_counts(stack):
    plan_path, plan, servers, work = stack
    seat = next(seat for seat in plan["seats"] if seat["name"] == "dense")
    before = checks_by(json.loads(run_verify(plan_path, servers["litellm"].base_url, GATEWAY_KEY, "--json").stdout))
    planned_blocks = before[("dense", "num_gpu_blocks")]["expected"]
    bytes_per_block = cpu_bytes_per_block(Path(seat["model"]))
    assert planned_blocks == seat["kv_cache_memory_bytes"] // bytes_per_block
    args = command_of(PlannedVllmSeat.model_validate(seat))
    # more blocks, not fewer: the plan's KV is already close to one full-length request
    changed_bytes = seat["kv_cache_memory_bytes"] + 7 * bytes_per_block
    args[args.index("--kv-cache-memory-bytes") + 1] = str(changed_bytes)
    servers.pop("dense").stop()
    servers["dense"] = start_engine(vllm_python(), "dense-changed", args, seat["env"], seat["port"], work)

    result = run_verify(plan_path, servers["litellm"].base_url, GATEWAY_KEY, "--json")
    assert result.returncode == 1
    checks = checks_by(json.loads(result.stdout))
    blocks = checks[("dense", "num_gpu_blocks")]
    assert blocks["ok"] is False
    assert blocks["expected"] == planned_blocks
    assert blocks["seen"] == changed_bytes // bytes_per_block == planned_blocks + 7
    assert checks[("dense", "kv_cache_memory_bytes")] == {
        "seat": "dense", "check": "kv_cache_memory_bytes", "expected": seat["kv_cache_memory_bytes"], "seen": changed_bytes, "ok": False}
    assert all(check["ok"] for (name, _), check in checks.items() if name == "gemma")
    human = run_verify(plan_path, servers["litellm"].base_url)
    assert human.returncode == 1
    assert "FAIL" in human.stdout and f"{planned_blocks:,}" in human.stdout and f"{planned_blocks + 7:,}" in human.stdout
