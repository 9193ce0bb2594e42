"""Record what the real vLLM CPU engine reported for every boot plan into a fixture.

    .venv/bin/python tests/integration/record_oracle.py            # boot every plan now (~8 min)
    .venv/bin/python tests/integration/record_oracle.py --saved    # reuse the last test run's boots

writes ``tests/fixtures/vllm_cpu_oracle.json``: per boot, the tiny model's config.json, the engine
flags, the ``vllm:cache_config_info`` labels, ``/v1/models``' max_model_len and the start-up log lines
that explain the figures. The facts unit tests check the same figures from it without booting; the
live test (test_vllm_cpu.py) stays the real check.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from kits.boot_matrix import BOOT_PLANS, BootPlan  # noqa: E402
from kits.tiny_models import tiny_model_dir  # noqa: E402
from kits.vllm_engine import (  # noqa: E402
    VLLM_VERSION,
    boot_engine,
    boot_log_dir,
    vllm_installed,
    vllm_python,
    vllm_venv,
)
from seatplan.fileio import atomic_write_json  # noqa: E402

ORACLE_PATH = TESTS_DIR / "fixtures" / "vllm_cpu_oracle.json"
# Start-up log lines that carry or explain the KV figures (block size, padding, groups, capacity).
EXPLAINING_LINES = re.compile(
    r"((?:CPU|GPU) KV cache size: .* tokens.*|Setting attention block size to .*|Padding mamba page size by .*"
    r"|Add \d+ padding layers.*|Reset SSM cache type to .*|Maximum concurrency for .*)"
)
KEPT_LABELS = ("block_size", "cache_dtype", "enable_prefix_caching", "kv_cache_max_concurrency",
               "kv_cache_memory_bytes", "kv_cache_size_tokens", "mamba_cache_mode", "num_gpu_blocks")


def explaining_lines(log_text: str) -> list[str]:
    return [found.group(1).strip() for found in EXPLAINING_LINES.finditer(log_text)]


def engine_sees(torch_probe: str) -> bool:
    """One of torch's CPU feature tests, the ones vLLM's CPU platform decides by, run in vLLM's virtualenv."""
    probe = subprocess.run([str(vllm_python()), "-c", f"import torch; print(torch.cpu.{torch_probe}())"],
                           capture_output=True, text=True, check=True, timeout=300)
    return probe.stdout.strip() == "True"


def engine_sees_amx() -> bool:
    """vLLM's own test for AMX (it picks the MLA backend, hence the MLA block size, by it)."""
    return engine_sees("_is_amx_tile_supported")


def engine_sees_avx512_bf16() -> bool:
    """vLLM's own test for AVX512-BF16 (with it the SSM state is float32: platforms/cpu.py:301-321)."""
    return engine_sees("_is_avx512_bf16_supported")


def oracle_entry(plan: BootPlan, result: dict, log_text: str, model_dir: Path, cpu_amx: bool, cpu_avx512_bf16: bool) -> dict:
    labels = result["cache_config_labels"]
    return {
        "name": plan.name,
        "mimics": plan.model.mimics,
        "model_config": json.loads((model_dir / "config.json").read_text()),
        "engine": {
            "device": "cpu",
            "vllm_version": result["version"],
            "dtype": result["config"]["dtype"],
            "max_model_len": plan.max_model_len,
            "kv_cache_memory_bytes": plan.kv_cache_memory_bytes,
            "kv_cache_dtype": plan.kv_cache_dtype,
            "prefix_caching": plan.prefix_caching,
            "attention_backend": plan.attention_backend,
            "cpu_amx": cpu_amx,
            "cpu_avx512_bf16": cpu_avx512_bf16,
        },
        "cache_config_labels": {key: labels[key] for key in KEPT_LABELS if key in labels},
        "served_max_model_len": result["served_max_model_len"],
        "log_lines": explaining_lines(log_text),
    }


def boot_plan_now(plan: BootPlan, log_dir: Path) -> tuple[dict, str, Path]:
    model_dir = tiny_model_dir(plan.model, vllm_python())
    result = boot_engine(vllm_python(), plan.engine_config(model_dir), log_dir)
    print(f"{plan.name}: booted in {result.boot_seconds} s, num_gpu_blocks="
          f"{result.cache_config_labels['num_gpu_blocks']}", file=sys.stderr)
    return result.to_json(), result.log_text, model_dir


def saved_boot(plan: BootPlan, log_dir: Path) -> tuple[dict, str, Path]:
    result_path = log_dir / f"{plan.name}.json"
    if not result_path.is_file():
        raise SystemExit(f"no saved boot {result_path}; run the live tests or drop --saved")
    result = json.loads(result_path.read_text())
    booted = result["config"]
    asked = (plan.max_model_len, plan.kv_cache_memory_bytes, plan.kv_cache_dtype, plan.prefix_caching,
             plan.attention_backend)
    if (booted["max_model_len"], booted["kv_cache_memory_bytes"], booted["kv_cache_dtype"],
            booted["prefix_caching"], booted.get("attention_backend")) != asked:
        raise SystemExit(f"saved boot {result_path} was made for other flags than plan {plan.name}; drop --saved")
    return result, Path(result["log_path"]).read_text(errors="replace"), Path(result["config"]["model_dir"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saved", action="store_true", help="reuse the boots saved by the last live test run")
    parser.add_argument("--out", type=Path, default=ORACLE_PATH)
    options = parser.parse_args(argv)
    if not vllm_installed():
        raise SystemExit(f"no vLLM in {vllm_venv()}; run scripts/install-test-deps.sh")


    log_dir = boot_log_dir()
    fetch = saved_boot if options.saved else boot_plan_now
    cpu_amx, cpu_avx512_bf16 = engine_sees_amx(), engine_sees_avx512_bf16()
    boots = []
    for plan in BOOT_PLANS:
        result, log_text, model_dir = fetch(plan, log_dir)
        boots.append(oracle_entry(plan, result, log_text, model_dir, cpu_amx, cpu_avx512_bf16))
    document = {
        "description": "What vLLM 0.32.0's CPU engine reported for tiny random-weight models booted with "
                       "--kv-cache-memory-bytes (recorded by tests/integration/record_oracle.py).",
        "vllm_version": VLLM_VERSION,
        "boots": boots,
    }
    atomic_write_json(options.out, document, backup=False)
    print(f"wrote {len(boots)} boots to {options.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
